/*
 * bench/suite/syscount.h - count the process's calls to the system allocator.
 *
 * syscount.c defines malloc, calloc, realloc, free, posix_memalign,
 * aligned_alloc, memalign, valloc and pvalloc in the benchmark executable;
 * the dynamic linker binds every library's calls (kvpool's kvpi_sys_alloc,
 * liburcu, glibc's own internal users such as strdup and pthread) to
 * them, and they forward to glibc's __libc_* entry points after counting.
 * What is counted: every malloc-family call in the process, from any
 * thread.  What is not: direct mmap/brk system calls (glibc's malloc makes
 * those itself for large blocks, behind a counted call), and DPDK's
 * rte_malloc heap (not on any path measured with the counters).
 *
 * Disabled under AddressSanitizer and ThreadSanitizer, which own malloc:
 * then kvb_syscount_enabled() is false and the counters stay zero.
 *
 * Synchronization: the counters are process-wide relaxed atomics; a reader
 * sees each exact at some instant, exact once the counted threads joined.
 */
#ifndef KVPOOL_BENCH_SYSCOUNT_H
#define KVPOOL_BENCH_SYSCOUNT_H

#include <stdbool.h>
#include <stdint.h>

typedef struct kvb_syscount {
	uint64_t allocs; /* malloc, calloc, realloc, posix_memalign, aligned_alloc, memalign,
	                    valloc, pvalloc */
	uint64_t frees;  /* free of a non-NULL pointer */
	uint64_t bytes;  /* bytes requested by the allocation calls */
} kvb_syscount;

/* kvb_syscount_enabled - whether the counters count (false under sanitizers) */
bool kvb_syscount_enabled(void);
/* kvb_syscount_read - the counters since the process started */
void kvb_syscount_read(kvb_syscount *out);

#endif /* KVPOOL_BENCH_SYSCOUNT_H */
