/*
 * bench/ref_bufcache.h - the seed dynamic_pool_allocator's algorithm, as a baseline.
 *
 * 256 slots scanned linearly: a hit is the slot with the smallest capacity
 * >= the request (least recently cached among equals); a free caches the
 * buffer after evicting the smallest slots (least recently cached first)
 * until it fits the byte budget, or, when all 256 slots are taken, until a
 * slot is free.  Same rounding and system allocator as kvpool's cache.
 *
 * Single-threaded, like the seed.  ref_bufcache_lock() wraps each call in
 * one global mutex: the obvious way to share it between threads, and what
 * the benchmark measures it as.  Also the reference model of
 * tests/bufcache_model_test.c.
 */
#ifndef KVPOOL_BENCH_REF_BUFCACHE_H
#define KVPOOL_BENCH_REF_BUFCACHE_H

#include <stddef.h>
#include <stdint.h>

#define SEED_SLOTS 256

typedef struct ref_bufcache ref_bufcache;

struct seed_stats {
	uint64_t hits, misses, evictions, oom_retries, system_allocs, system_frees;
	size_t cached_bytes;
};

/* seed_create - NULL when the system allocator fails; @locked: take a mutex per call */
ref_bufcache *seed_create(size_t max_cached_bytes, int locked);
void seed_destroy(ref_bufcache *s);
void *seed_alloc(ref_bufcache *s, size_t requested, size_t *actual);
void seed_free(ref_bufcache *s, void *ptr, size_t actual);
void seed_get_stats(ref_bufcache *s, struct seed_stats *out);

#endif /* KVPOOL_BENCH_REF_BUFCACHE_H */
