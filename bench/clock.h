/*
 * bench/clock.h - the two clocks the standalone benchmarks read, in seconds.
 *
 * kvb_cpu_seconds: this thread's CPU time (CLOCK_THREAD_CPUTIME_ID): time
 * the thread was descheduled does not count, so load from other work on a
 * shared machine inflates it less than wall time.
 * kvb_wall_seconds: CLOCK_MONOTONIC.
 * Header-only, so a benchmark built outside Bazel (bench/prefix_offcost.sh)
 * needs nothing but -I. to use it.
 */
#ifndef KVPOOL_BENCH_CLOCK_H
#define KVPOOL_BENCH_CLOCK_H

#include <time.h>

static inline double kvb_clock_seconds(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline double kvb_cpu_seconds(void)
{
	return kvb_clock_seconds(CLOCK_THREAD_CPUTIME_ID);
}

static inline double kvb_wall_seconds(void)
{
	return kvb_clock_seconds(CLOCK_MONOTONIC);
}

#endif /* KVPOOL_BENCH_CLOCK_H */
