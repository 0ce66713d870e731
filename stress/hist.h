/*
 * stress/hist.h - latency histogram with HDR-style logarithmic buckets.
 *
 * Values (nanoseconds, any uint64_t) fall into buckets whose width is at
 * most 1/64 of their lower bound: values below 128 have a bucket each,
 * above that every power of two is split into 64 linear sub-buckets.
 * Recording is a few shifts and one add into a fixed array: no allocation,
 * no lock, no atomic.  Each thread records into its own histogram; merge
 * them at the end.  Percentiles report the upper bound of the bucket the
 * rank falls in (never below the true value, at most 1/64 above it), the
 * exact minimum, maximum and mean are kept beside the buckets.
 *
 * A histogram is plain data: not thread-safe; zero-initialise or hist_init.
 */
#ifndef KVPOOL_STRESS_HIST_H
#define KVPOOL_STRESS_HIST_H

#include <stdint.h>

#define HIST_SUB_BITS 6
#define HIST_SUB      (1u << HIST_SUB_BITS)
#define HIST_BUCKETS  ((65 - HIST_SUB_BITS) * HIST_SUB)

typedef struct hist {
	uint64_t count, sum, min, max;
	uint64_t b[HIST_BUCKETS];
} hist;

/** hist_init - empty the histogram */
void hist_init(hist *h);

/** hist_bucket - index of the bucket holding @v */
static inline unsigned hist_bucket(uint64_t v)
{
	if (v < 2 * HIST_SUB)
		return (unsigned)v;
	unsigned k = 63u - (unsigned)__builtin_clzll(v); /* >= HIST_SUB_BITS + 1 */
	unsigned shift = k - HIST_SUB_BITS;
	return ((shift + 1) << HIST_SUB_BITS) + (unsigned)((v >> shift) - HIST_SUB);
}

/** hist_record - add one sample */
static inline void hist_record(hist *h, uint64_t v)
{
	h->b[hist_bucket(v)]++;
	h->count++;
	h->sum += v;
	if (v < h->min || h->count == 1)
		h->min = v;
	if (v > h->max)
		h->max = v;
}

/** hist_bucket_high - the largest value bucket @i holds */
uint64_t hist_bucket_high(unsigned i);

/** hist_merge - add @src's samples to @dst */
void hist_merge(hist *dst, const hist *src);

/**
 * hist_percentile - the value at fraction @q (0..1) of the samples
 * Returns the upper bound of the bucket of the ceil(q * count)-th smallest
 * sample, clamped to the exact maximum; 0 for an empty histogram.
 */
uint64_t hist_percentile(const hist *h, double q);

/** hist_mean - exact mean (0 when empty) */
double hist_mean(const hist *h);

#endif /* KVPOOL_STRESS_HIST_H */
