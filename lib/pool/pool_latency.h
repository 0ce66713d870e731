/*
 * lib/pool/pool_latency.h - the sampled kvp_allocate latency histogram of a
 * pool, exported by kvp_pools_to_prometheus as
 * kvpool_allocate_duration_seconds.
 *
 * One kvp_allocate call in KVPI_LAT_EVERY per thread is timed (two
 * clock_gettime(CLOCK_MONOTONIC) reads, ~20 ns each through the vDSO) and
 * counted in the pool's buckets; the other calls pay one thread-local
 * increment and a branch.  The per-thread counter is shared by all pools a
 * thread uses: a thread's calls are sampled one in KVPI_LAT_EVERY whatever
 * pool they go to.  bench/alloc_latency_bench.c measures the cost.
 *
 *   function / field     who may call / write     notes
 *   -------------------  -----------------------  ------------------------------
 *   kvpi_lat_tick        any thread (hot path)    its own TLS counter only
 *   kvpi_lat_observe     any thread, concurrently relaxed atomic adds
 *   kvpi_lat_read        any thread               each bucket exact at some
 *                                                 instant; count = sum of buckets
 *   kvpi_lat_mask        tests and benchmarks     relaxed; read on every call
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

/* A call is timed when (++counter & mask) == 0: KVPI_LAT_EVERY - 1 by default. */
extern _Atomic uint32_t kvpi_lat_mask __attribute__((visibility("hidden")));
extern __thread uint32_t kvpi_lat_ctr
    __attribute__((tls_model("initial-exec"), visibility("hidden")));

/* Whether this call of the thread is one to time. */
static inline bool kvpi_lat_tick(void)
{
	/* relaxed: a setting read alone; orders nothing. */
	uint32_t mask = atomic_load_explicit(&kvpi_lat_mask, memory_order_relaxed);
	return (++kvpi_lat_ctr & mask) == 0;
}

/** kvpi_lat_now - CLOCK_MONOTONIC in nanoseconds */
uint64_t kvpi_lat_now(void);

/** kvpi_lat_observe - count one call of @ns nanoseconds in @h */
void kvpi_lat_observe(struct kvpi_alloc_lat *h, uint64_t ns);

/** kvpi_lat_read - @h's cumulative buckets into @cum (KVPI_LAT_N + 1: +Inf last) and its sum */
void kvpi_lat_read(struct kvpi_alloc_lat *h, uint64_t cum[KVPI_LAT_N + 1], uint64_t *sum_ns);

#endif /* KVPOOL_LIB_POOL_POOL_LATENCY_H */
