/*
 * bench/suite/syscount.c - malloc-family interposition that counts, then forwards
 * to glibc (__libc_malloc and friends, exported by glibc for this use).
 * Not built into the malloc peer (bench/suite/malloc_peer.c), which must see the
 * LD_PRELOADed allocator, and compiled out under sanitizers.
 */
#define _GNU_SOURCE
#include "bench/suite/syscount.h"
#include "bench/suite/harness.h"

#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>

/* Relaxed: the counters order nothing, they are read after joins. */
static atomic_uint_fast64_t n_allocs, n_frees, n_bytes;

#if !KVB_SANITIZED

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);
extern void *__libc_memalign(size_t, size_t);
extern void *__libc_valloc(size_t);
extern void *__libc_pvalloc(size_t);

static inline void count(size_t bytes)
{
	atomic_fetch_add_explicit(&n_allocs, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&n_bytes, bytes, memory_order_relaxed);
}

void *malloc(size_t n)
{
	count(n);
	return __libc_malloc(n);
}

void *calloc(size_t n, size_t size)
{
	count(n * size);
	return __libc_calloc(n, size);
}

void *realloc(void *p, size_t n)
{
	count(n);
	return __libc_realloc(p, n);
}

void free(void *p)
{
	if (p)
		atomic_fetch_add_explicit(&n_frees, 1, memory_order_relaxed);
	__libc_free(p);
}

void *memalign(size_t align, size_t n)
{
	count(n);
	return __libc_memalign(align, n);
}

void *aligned_alloc(size_t align, size_t n)
{
	count(n);
	return __libc_memalign(align, n);
}

int posix_memalign(void **out, size_t align, size_t n)
{
	void *p;

	if (align < sizeof(void *) || (align & (align - 1)))
		return EINVAL;
	count(n);
	p = __libc_memalign(align, n);
	if (!p)
		return ENOMEM;
	*out = p;
	return 0;
}

void *valloc(size_t n)
{
	count(n);
	return __libc_valloc(n);
}

void *pvalloc(size_t n)
{
	count(n);
	return __libc_pvalloc(n);
}

bool kvb_syscount_enabled(void)
{
	return true;
}

#else

bool kvb_syscount_enabled(void)
{
	return false;
}

#endif

void kvb_syscount_read(kvb_syscount *out)
{
	out->allocs = atomic_load_explicit(&n_allocs, memory_order_relaxed);
	out->frees = atomic_load_explicit(&n_frees, memory_order_relaxed);
	out->bytes = atomic_load_explicit(&n_bytes, memory_order_relaxed);
}
