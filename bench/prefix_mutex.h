/*
 * bench/prefix_mutex.h - the baseline of bench/prefix_bench.c: a prefix
 * cache behind one pthread mutex.
 *
 * What a straightforward implementation looks like: one open-addressing
 * hash map from 128-bit key to block, a hold count per block, a free list
 * and an LRU list of cached blocks, every operation under one mutex.  It
 * does what kvpool's prefix cache does for the benchmark's operations
 * (match with holds, release with caching, allocate with eviction of the
 * least recently cached block, publish), so the two are compared on the
 * same work.  Not a library: benchmark only.
 */
#ifndef KVPOOL_BENCH_PREFIX_MUTEX_H
#define KVPOOL_BENCH_PREFIX_MUTEX_H

#include <stddef.h>
#include <stdint.h>

#include <kvpool/prefix.h>

typedef struct mx_cache mx_cache;

/* A cache of @n_blocks blocks, all free; NULL without memory. */
mx_cache *mx_create(uint32_t n_blocks);
void mx_destroy(mx_cache *c);

/* Hold the blocks of keys[0..n) in order until the first miss; returns the count. */
size_t mx_match(mx_cache *c, const kvp_hash *keys, size_t n, uint32_t *blocks);

/* Drop one hold on each block; a published block whose last hold goes is cached. */
void mx_release(mx_cache *c, const uint32_t *blocks, size_t n);

/* A block with one hold: a free one, else the least recently cached (evicted).
 * Returns -1 when every block is held. */
int64_t mx_allocate(mx_cache *c);

/* Publish a held block under @key: 0, or -1 when the key is taken. */
int mx_publish(mx_cache *c, uint32_t block, kvp_hash key);

#endif /* KVPOOL_BENCH_PREFIX_MUTEX_H */
