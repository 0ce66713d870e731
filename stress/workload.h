/*
 * stress/workload.h - built-in synthetic serving workloads for kvpool_replay.
 *
 * Each preset reproduces the statistics of one public trace in
 * ../shared/traces, as computed by stress/trace_stats.py (docs/REPLAY.md
 * lists the figures and the command):
 *   - prompt and output lengths are drawn independently from a
 *     piecewise-linear inverse CDF through 30 quantile knots of the trace;
 *   - arrivals are either a Poisson process at the trace's mean rate, or
 *     (Mooncake) batches at a fixed period whose sizes are Poisson with the
 *     trace's mean batch size.
 *
 * Generation is deterministic for a given seed.  Not thread-safe per call;
 * calls on different outputs are independent.
 */
#ifndef KVPOOL_STRESS_WORKLOAD_H
#define KVPOOL_STRESS_WORKLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "stress/trace.h"

#define WL_N_KNOTS 30

typedef struct wl_preset {
	const char *name;   /* "azure-conv", "mooncake-conv", "arxiv" */
	const char *source; /* trace file the figures come from */
	double rate;        /* mean requests per second */
	double batch_gap_s; /* > 0: batched arrivals every this many seconds */
	double prompt_knots[WL_N_KNOTS];
	double output_knots[WL_N_KNOTS];
} wl_preset;

/* The quantile levels of the knots (0 and 1 included). */
extern const double wl_levels[WL_N_KNOTS];

/** wl_find - the preset called @name, or NULL */
const wl_preset *wl_find(const char *name);

/** wl_names - the preset names, comma-separated (for help text) */
const char *wl_names(void);

/** wl_sample - one value from the inverse CDF through @knots at uniform @u in [0, 1) */
double wl_sample(const double *knots, double u);

/** wl_mean - the mean of the distribution wl_sample draws from */
double wl_mean(const double *knots);

/**
 * wl_generate - make @n requests following @p
 * @p:    the preset
 * @rate: arrival rate to use instead of p->rate (0: the preset's)
 * @n:    requests
 * @seed: PRNG seed
 * @out:  receives the requests (trace_free releases them)
 *
 * Returns 0, or -1 when out of memory.
 */
int wl_generate(const wl_preset *p, double rate, size_t n, uint64_t seed, trace *out);

#endif /* KVPOOL_STRESS_WORKLOAD_H */
