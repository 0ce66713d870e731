/*
 * stress/promhist.h - a latency histogram for Prometheus: fixed buckets in
 * seconds, shared by the threads that record and the /metrics server that
 * reads it while they run.
 *
 * The replay and the stress harness time kvp_allocate calls into one of
 * these and export it as <prefix>_allocate_duration_seconds (a Prometheus
 * histogram: _bucket{le=...}, _sum, _count).  stress/hist.h keeps the exact
 * HDR histogram of the summary table; this one only has the buckets a
 * dashboard needs, as atomics.
 *
 *   function           threading
 *   -----------------  --------------------------------------------------
 *   promhist_observe   any thread, concurrently (relaxed atomic adds)
 *   mtext_promhist     any thread (the /metrics fill function); each bucket
 *                      is exact at some instant; _count is the sum of the
 *                      buckets read, so +Inf always equals _count
 */
#ifndef KVPOOL_STRESS_PROMHIST_H
#define KVPOOL_STRESS_PROMHIST_H

#include <stdatomic.h>
#include <stdint.h>

#include "stress/metrics_http.h"

/* Upper bounds in nanoseconds: 100 ns .. 100 ms, then +Inf. */
#define PROMHIST_N 16

typedef struct promhist {
	_Atomic uint64_t b[PROMHIST_N + 1]; /* per bucket, not cumulative; last: +Inf */
	_Atomic uint64_t sum_ns;
} promhist;

/** promhist_observe - count one sample of @ns nanoseconds */
void promhist_observe(promhist *h, uint64_t ns);

/** mtext_promhist - append @h as the histogram family @name (seconds) */
void mtext_promhist(mtext *t, const char *name, const char *help, promhist *h);

#endif /* KVPOOL_STRESS_PROMHIST_H */
