/*
 * bench/ref_bufcache.h - the reference buffer-cache algorithm, as a baseline.
 *
 * 256 slots scanned linearly: a hit is the slot with the smallest capacity
 * >= the request (least recently cached among equals); a free caches the
 * buffer after evicting the smallest slots (least recently cached first)
 * until it fits the byte budget, or, when all 256 slots are taken, until a
 * slot is free.  Same rounding and system allocator as kvpool's cache.
 *
 * Single-threaded.  ref_bufcache_create(..., locked = 1) wraps each call in
 * one mutex: the obvious way to share it between threads, and what
 * the benchmark measures it as.  Also the reference model of
 * tests/bufcache_model_test.c.
 */
#ifndef KVPOOL_BENCH_REF_BUFCACHE_H
#define KVPOOL_BENCH_REF_BUFCACHE_H

#include <stddef.h>
#include <stdint.h>

#define REF_SLOTS 256

typedef struct ref_bufcache ref_bufcache;

struct ref_bufcache_stats {
	uint64_t hits, misses, evictions, oom_retries, system_allocs, system_frees;
	size_t cached_bytes;
};

/* ref_bufcache_create - NULL when the system allocator fails; @locked: take a mutex per call */
ref_bufcache *ref_bufcache_create(size_t max_cached_bytes, int locked);
void ref_bufcache_destroy(ref_bufcache *s);
void *ref_bufcache_alloc(ref_bufcache *s, size_t requested, size_t *actual);
void ref_bufcache_free(ref_bufcache *s, void *ptr, size_t actual);
void ref_bufcache_get_stats(ref_bufcache *s, struct ref_bufcache_stats *out);

#endif /* KVPOOL_BENCH_REF_BUFCACHE_H */
