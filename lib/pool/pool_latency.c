/*
 * lib/pool/pool_latency.c - the sampled allocate latency histogram (see
 * pool_latency.h).
 *
 * Why sampled: timing every call costs two clock reads (~40 ns) on a call
 * that itself takes tens of nanoseconds on its fast path.  One call in 64
 * cost 0.6-0.9 ns a pair on average, 4% of a one-block allocate + free
 * (`bazel-bin/bench/all --only getput --quick --threads 1`, three
 * alternated runs: 18.9-19.1 ns a pair at 1 in 64, 18.2-18.3 at 1 in 1024);
 * one in 1024 does the clock reads a sixteenth as often, and a server's
 * thousands of calls a second still give a thread a sample a second.  Why per thread:
 * a shared counter would be a contended cache line on the hot path.
 * The buckets are the replay's (stress/promhist.c), so dashboards built on
 * either read the same bounds.
 */
#include "lib/pool/pool_latency.h"

#include <time.h>

const uint64_t kvpi_lat_bound_ns[KVPI_LAT_N] = {
    100,   250,    500,    1000,   2500,    5000,     10000,    25000,
    50000, 100000, 250000, 500000, 1000000, 10000000, 50000000, 100000000,
};

_Atomic uint32_t kvpi_lat_mask = KVPI_LAT_EVERY - 1;
__thread uint32_t kvpi_lat_left __attribute__((tls_model("initial-exec"))) = KVPI_LAT_EVERY;

uint64_t kvpi_lat_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void kvpi_lat_observe(struct kvpi_alloc_lat *h, uint64_t ns)
{
	unsigned i = 0;
	while (i < KVPI_LAT_N && ns > kvpi_lat_bound_ns[i])
		i++;
	/* relaxed: independent counters read as statistics; nothing is ordered by them. */
	atomic_fetch_add_explicit(&h->b[i], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&h->sum_ns, ns, memory_order_relaxed);
}

void kvpi_lat_read(struct kvpi_alloc_lat *h, uint64_t cum[KVPI_LAT_N + 1], uint64_t *sum_ns)
{
	uint64_t c = 0;
	for (unsigned i = 0; i <= KVPI_LAT_N; i++) {
		/* relaxed: a statistic; +Inf is the sum of what was read, so it equals _count. */
		c += atomic_load_explicit(&h->b[i], memory_order_relaxed);
		cum[i] = c;
	}
	/* relaxed: a statistic. */
	*sum_ns = atomic_load_explicit(&h->sum_ns, memory_order_relaxed);
}
