/*
 * bench/suite/phases.h - where a serving request's time goes (bench/lifecycle --phases).
 *
 * A worker's clock is read at each step boundary of a request: the prefix
 * match, the prompt's allocation, the publish of its new full blocks, the
 * decode steps (one block a call, timed as one step), and kvp_free_all (or
 * the mutex pool's same calls).  Each step's wall time is added to the
 * worker's tally; the benchmark divides the run's tallies by its blocks.
 *
 * A clock read is a vDSO clock_gettime, about 20 ns, six a request: on the
 * serving loop's 900 blocks a request on average that is well under a
 * nanosecond a block, but it is there, so the clock reads only with
 * --phases, and the main table of such a run is not the one to quote.
 * Wall time: with more threads than cores it includes time spent waiting
 * to run, which the main table's CPU ns leave out.
 */
#ifndef KVPOOL_BENCH_SUITE_PHASES_H
#define KVPOOL_BENCH_SUITE_PHASES_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

enum { PH_MATCH, PH_ALLOC, PH_PUBLISH, PH_DECODE, PH_FREE, NPHASE };

static const char *const phase_name[NPHASE] = {"match", "allocate", "publish", "decode",
                                               "free_all"};

/* One worker's tallies (ns per step, summed over its timed requests). */
typedef struct phase_clock {
	bool on;       /* --phases */
	uint64_t last; /* the last reading, ns */
	uint64_t ns[NPHASE];
} phase_clock;

static inline uint64_t phase_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The start of a request: its first step is timed from here. */
static inline void phase_start(phase_clock *c)
{
	if (c->on)
		c->last = phase_now();
}

/* The end of step @k (also the start of the next). */
static inline void phase_end(phase_clock *c, int k)
{
	if (c->on) {
		uint64_t t = phase_now();
		c->ns[k] += t - c->last;
		c->last = t;
	}
}

#endif /* KVPOOL_BENCH_SUITE_PHASES_H */
