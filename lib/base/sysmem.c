/*
 * lib/base/sysmem.c - system allocator wrapper with on-demand fault injection.
 *
 * Injection state is two process-wide counters.  A test arms them with
 * kvpi_fault_inject(); each allocation then consumes one "skip" credit or,
 * once those are gone, one "fail" credit.  The counters are decremented
 * with CAS loops so concurrent allocators consume each credit exactly once.
 * When injection is off (the common case) the cost is one relaxed load.
 */
#define _POSIX_C_SOURCE 200809L
#include "lib/base/sysmem.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Relaxed everywhere: the counters order nothing but themselves. */
static _Atomic long fault_skip;
static _Atomic long fault_fail;
static _Atomic int fault_armed;
static _Atomic unsigned long fault_count;

void kvpi_fault_inject(long skip, long fail)
{
	atomic_store_explicit(&fault_armed, 0, memory_order_relaxed);
	atomic_store_explicit(&fault_skip, skip < 0 ? 0 : skip, memory_order_relaxed);
	atomic_store_explicit(&fault_fail, fail, memory_order_relaxed);
	atomic_store_explicit(&fault_armed, fail != 0, memory_order_relaxed);
}

unsigned long kvpi_fault_injected(void)
{
	return atomic_load_explicit(&fault_count, memory_order_relaxed);
}

/* Take one credit from @ctr if it is positive; returns 1 when one was taken. */
static int take_credit(_Atomic long *ctr)
{
	long v = atomic_load_explicit(ctr, memory_order_relaxed);
	while (v > 0) {
		if (atomic_compare_exchange_weak_explicit(ctr, &v, v - 1, memory_order_relaxed,
		                                          memory_order_relaxed))
			return 1;
	}
	return 0;
}

/* Returns 1 when this allocation must fail by injection. */
static int should_fail(void)
{
	if (!atomic_load_explicit(&fault_armed, memory_order_relaxed))
		return 0;
	if (take_credit(&fault_skip))
		return 0;
	if (atomic_load_explicit(&fault_fail, memory_order_relaxed) < 0 ||
	    take_credit(&fault_fail)) {
		atomic_fetch_add_explicit(&fault_count, 1, memory_order_relaxed);
		return 1;
	}
	return 0;
}

void *kvpi_sys_alloc(size_t size, size_t align)
{
	void *p = NULL;

	if (should_fail())
		return NULL;
	if (size == 0)
		size = 1;
	if (align < sizeof(void *))
		align = sizeof(void *);
	if (align & (align - 1))
		return NULL;
	if (posix_memalign(&p, align, size) != 0)
		return NULL;
	return p;
}

void *kvpi_sys_calloc(size_t n, size_t size, size_t align)
{
	void *p;

	if (size != 0 && n > SIZE_MAX / size)
		return NULL;
	p = kvpi_sys_alloc(n * size, align);
	if (p)
		memset(p, 0, n * size != 0 ? n * size : 1);
	return p;
}

void kvpi_sys_free(void *p)
{
	free(p);
}

int kvpi_sys_key_create(pthread_key_t *key, void (*destructor)(void *))
{
	if (should_fail())
		return EAGAIN;
	return pthread_key_create(key, destructor);
}

int kvpi_sys_thread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*start)(void *),
                           void *arg)
{
	if (should_fail())
		return EAGAIN;
	return pthread_create(thread, attr, start, arg);
}
