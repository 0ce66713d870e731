/*
 * stress/hist.c - see hist.h.  The bucket layout is HdrHistogram's idea in
 * its simplest form (6 significant bits), sized to cover all of uint64_t so
 * no sample is ever out of range.
 */
#include "stress/hist.h"

#include <math.h>
#include <string.h>

void hist_init(hist *h)
{
	memset(h, 0, sizeof *h);
}

uint64_t hist_bucket_high(unsigned i)
{
	if (i < 2 * HIST_SUB)
		return i;
	unsigned shift = (i >> HIST_SUB_BITS) - 1;
	uint64_t m = (i & (HIST_SUB - 1)) + HIST_SUB;
	uint64_t low = m << shift;
	return low + ((1ull << shift) - 1);
}

void hist_merge(hist *dst, const hist *src)
{
	if (src->count == 0)
		return;
	if (dst->count == 0 || src->min < dst->min)
		dst->min = src->min;
	if (src->max > dst->max)
		dst->max = src->max;
	dst->count += src->count;
	dst->sum += src->sum;
	for (unsigned i = 0; i < HIST_BUCKETS; i++)
		dst->b[i] += src->b[i];
}

uint64_t hist_percentile(const hist *h, double q)
{
	if (h->count == 0)
		return 0;
	if (q <= 0)
		return h->min;
	uint64_t rank = (uint64_t)ceil(q * (double)h->count);
	if (rank < 1)
		rank = 1;
	if (rank > h->count)
		rank = h->count;
	uint64_t seen = 0;
	for (unsigned i = 0; i < HIST_BUCKETS; i++) {
		seen += h->b[i];
		if (seen >= rank) {
			uint64_t v = hist_bucket_high(i);
			return v > h->max ? h->max : v < h->min ? h->min : v;
		}
	}
	return h->max;
}

double hist_mean(const hist *h)
{
	return h->count ? (double)h->sum / (double)h->count : 0.0;
}
