/*
 * tests/bufcache_twin.h - test support: kvpool's buffer cache and its
 * single-thread model (bench/ref_bufcache.c) driven in lockstep.
 *
 * The model: 256 slots; a hit is the cached buffer with the smallest
 * capacity that fits (least recently cached among equals); a free caches
 * the buffer after evicting the smallest buffers (least recently cached
 * first) until it fits the byte budget.  Each call below runs on both sides
 * (an alloc with the same number of injected system-allocation failures on
 * each), then checks that they agree on hit or miss, on WHICH buffer a hit
 * returned (buffers get an id when a miss creates them), on its capacity
 * and on every counter: hits, misses, evictions, OOM retries, system
 * allocations and frees, cached bytes.  A handed-out buffer must be at
 * least the size asked, 256-byte aligned, and writable over its capacity.
 *
 * The caller chooses the calls (bufcache_model_test: a seeded random
 * sequence; tests/fuzz/bufcache_fuzz.c: the fuzzer's input).  On a
 * disagreement the twin prints the failed check with its file and line and
 * calls the caller's @die (exit or abort).  Single-threaded; one twin at a
 * time per buffer array.
 */
#ifndef KVPOOL_TESTS_BUFCACHE_TWIN_H
#define KVPOOL_TESTS_BUFCACHE_TWIN_H

#include <stddef.h>

#include <kvpool/bufcache.h>

#include "bench/ref_bufcache.h"

#define TWIN_MAX_OUT 48 /* buffers handed out at once, at most */

/* A buffer both sides made on the same miss. */
struct twin_buf {
	void *kv, *ref; /* the buffer on each side (NULL once gone) */
	size_t cap;
	int out; /* handed out (else cached, or evicted without our knowing) */
};

struct bufcache_twin {
	kvp_bufcache *kv;
	ref_bufcache *ref;
	struct twin_buf *bufs; /* the caller's array of max_bufs */
	int max_bufs, n_bufs;
	int outs[TWIN_MAX_OUT]; /* ids of the buffers handed out */
	int n_out;
	void (*die)(void);
};

/**
 * twin_create - both caches with byte budget @budget
 * Return: 0, or -1 when kvp_bufcache_create fails (nothing made); dies when
 * the model cannot be made.
 */
int twin_create(struct bufcache_twin *t, size_t budget, struct twin_buf *bufs, int max_bufs,
                void (*die)(void));

/** twin_destroy - frees every buffer still handed out, then both caches */
void twin_destroy(struct bufcache_twin *t);

/**
 * twin_full - whether no more allocs may be made: the buffer array is
 * (nearly) full
 */
int twin_full(const struct bufcache_twin *t);

/**
 * twin_alloc - alloc @req bytes on both sides, each with @fail system
 * allocations failing first, and check that they agree
 */
void twin_alloc(struct bufcache_twin *t, size_t req, long fail);

/** twin_free - free the @k-th handed-out buffer (k < n_out) on both sides, and check */
void twin_free(struct bufcache_twin *t, int k);

#endif /* KVPOOL_TESTS_BUFCACHE_TWIN_H */
