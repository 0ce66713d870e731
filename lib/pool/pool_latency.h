/*
 * lib/pool/pool_latency.h - the sampled kvp_allocate latency histogram of a
 * pool, exported by kvp_pools_to_prometheus as
 * kvpool_allocate_duration_seconds.
 *
 * One kvp_allocate call in KVPI_LAT_EVERY per thread is timed (two
 * clock_gettime(CLOCK_MONOTONIC) reads, ~20 ns each through the vDSO) and
 * counted in the pool's buckets; the other calls pay one decrement of a
 * thread-local countdown and a branch.  The countdown is shared by all
 * pools a thread uses: a thread's calls are sampled one in KVPI_LAT_EVERY
 * whatever pool they go to.  bench/alloc_latency_bench.c measures the cost.
 *
 *   function / field     who may call / write     notes
 *   -------------------  -----------------------  ------------------------------
 *   kvpi_lat_tick        any thread (hot path)    its own TLS countdown only
 *   kvpi_lat_observe     any thread, concurrently relaxed atomic adds
 *   kvpi_lat_read        any thread               each bucket exact at some
 *                                                 instant; count = sum of buckets
 *   kvpi_lat_mask        tests and benchmarks     relaxed; read when a thread's
 *                        (kvpi_lat_set_mask)      countdown runs out
 */
#ifndef KVPOOL_LIB_POOL_POOL_LATENCY_H
#define KVPOOL_LIB_POOL_POOL_LATENCY_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* Upper bounds in nanoseconds: 100 ns .. 100 ms, then +Inf (the replay's buckets). */
#define KVPI_LAT_N     16
#define KVPI_LAT_EVERY 1024u /* default sampling: one call in 1024 per thread */

struct kvpi_alloc_lat {
	_Atomic uint64_t b[KVPI_LAT_N + 1]; /* per bucket, not cumulative; last: +Inf */
	_Atomic uint64_t sum_ns;
};

extern const uint64_t kvpi_lat_bound_ns[KVPI_LAT_N];

/*
 * The sampling period less one: after a timed call, a thread times its
 * kvpi_lat_mask + 1-th call from there (KVPI_LAT_EVERY - 1 by default; 0
 * times every call, UINT32_MAX one call in 2^32).  A change reaches a thread when
 * its countdown next runs out: at most one old period later.  A new thread
 * times its KVPI_LAT_EVERY-th call first.
 */
extern _Atomic uint32_t kvpi_lat_mask __attribute__((visibility("hidden")));
/* The thread's calls left until its next timed one (KVPI_LAT_EVERY at start). */
extern __thread uint32_t kvpi_lat_left
    __attribute__((tls_model("initial-exec"), visibility("hidden")));

/*
 * Whether this call of the thread is one to time.  A countdown rather than
 * a counter and a mask: the common case is one decrement of a thread-local
 * word and a branch, with no load of the shared setting (read only when the
 * countdown runs out).
 */
static inline bool kvpi_lat_tick(void)
{
	if (__builtin_expect(--kvpi_lat_left != 0, 1))
		return false;
	/* relaxed: a setting read alone; orders nothing.  mask + 1 wraps to
	 * 0 for UINT32_MAX: the countdown then runs 2^32 calls. */
	kvpi_lat_left = atomic_load_explicit(&kvpi_lat_mask, memory_order_relaxed) + 1;
	return true;
}

/*
 * kvpi_lat_set_mask - set the sampling period (tests and benchmarks): the
 * calling thread starts a period now (it times its @mask + 1-th call from
 * here, and one in @mask + 1 after); other threads take the setting when
 * their countdowns next run out.
 */
static inline void kvpi_lat_set_mask(uint32_t mask)
{
	/* relaxed: a setting; each thread reads it alone. */
	atomic_store_explicit(&kvpi_lat_mask, mask, memory_order_relaxed);
	kvpi_lat_left = mask + 1; /* 0 for UINT32_MAX: 2^32 calls */
}

/** kvpi_lat_now - CLOCK_MONOTONIC in nanoseconds */
uint64_t kvpi_lat_now(void);

/** kvpi_lat_observe - count one call of @ns nanoseconds in @h */
void kvpi_lat_observe(struct kvpi_alloc_lat *h, uint64_t ns);

/** kvpi_lat_read - @h's cumulative buckets into @cum (KVPI_LAT_N + 1: +Inf last) and its sum */
void kvpi_lat_read(struct kvpi_alloc_lat *h, uint64_t cum[KVPI_LAT_N + 1], uint64_t *sum_ns);

#endif /* KVPOOL_LIB_POOL_POOL_LATENCY_H */
