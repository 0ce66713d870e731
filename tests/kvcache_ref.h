/*
 * tests/kvcache_ref.h - contiguous reference for the kvcache tests.
 *
 * A request's K and V as the test appended them, one contiguous
 * (len, n_kv_heads, head_dim) array per stream and layer, and the textbook
 * attention over it in double precision (two passes: max, then exp-sum),
 * independent of the library's chunked online-softmax kernel.
 */
#ifndef KVPOOL_TESTS_KVCACHE_REF_H
#define KVPOOL_TESTS_KVCACHE_REF_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/testutil.h"

struct kref {
	uint32_t n_kv_heads, head_dim, len, cap;
	float *k, *v; /* (cap, n_kv_heads, head_dim) */
};

static inline void kref_init(struct kref *r, uint32_t n_kv_heads, uint32_t head_dim, uint32_t cap)
{
	size_t n = (size_t)cap * n_kv_heads * head_dim;

	r->n_kv_heads = n_kv_heads;
	r->head_dim = head_dim;
	r->len = 0;
	r->cap = cap;
	r->k = malloc(n * sizeof(float));
	r->v = malloc(n * sizeof(float));
	CHECK(r->k && r->v);
}

static inline void kref_free(struct kref *r)
{
	free(r->k);
	free(r->v);
}

static inline void kref_append(struct kref *r, const float *k, const float *v, uint32_t n)
{
	size_t row = (size_t)r->n_kv_heads * r->head_dim;

	CHECK(r->len + n <= r->cap);
	memcpy(r->k + r->len * row, k, n * row * sizeof(float));
	memcpy(r->v + r->len * row, v, n * row * sizeof(float));
	r->len += n;
}

/* uniform in [-a, a) */
static inline void kref_fill(float *x, size_t n, float a, uint64_t *seed)
{
	size_t i;

	for (i = 0; i < n; i++)
		x[i] = (float)(((double)(tu_rand(seed) >> 11) * 0x1p-53 * 2.0 - 1.0) * a);
}

/* Naive attention in double over @k, @v laid out (len, n_kv_heads, head_dim). */
static inline void kref_attend(const float *k, const float *v, uint32_t len, uint32_t n_kv_heads,
                               uint32_t head_dim, const float *q, uint32_t n_heads, float scale,
                               double *out)
{
	uint32_t group = n_heads / n_kv_heads, h, t, d;
	double *s = malloc(len * sizeof(double));

	CHECK(s);
	for (h = 0; h < n_heads; h++) {
		uint32_t g = h / group;
		double m = -INFINITY, sum = 0;
		for (t = 0; t < len; t++) {
			const float *kr = k + ((size_t)t * n_kv_heads + g) * head_dim;
			double dot = 0;
			for (d = 0; d < head_dim; d++)
				dot += (double)q[(size_t)h * head_dim + d] * kr[d];
			s[t] = dot * scale;
			m = s[t] > m ? s[t] : m;
		}
		for (t = 0; t < len; t++) {
			s[t] = exp(s[t] - m);
			sum += s[t];
		}
		for (d = 0; d < head_dim; d++) {
			double acc = 0;
			for (t = 0; t < len; t++)
				acc += s[t] * v[((size_t)t * n_kv_heads + g) * head_dim + d];
			out[(size_t)h * head_dim + d] = acc / sum;
		}
	}
	free(s);
}

/*
 * Largest error of @got against @want, relative to each head's largest
 * |want| element (a per-element ratio would blow up where the output is
 * near zero by cancellation, which says nothing about the kernel).
 */
static inline double kref_rel_err(const float *got, const double *want, uint32_t n_heads,
                                  uint32_t head_dim)
{
	double worst = 0;
	uint32_t h, d;

	for (h = 0; h < n_heads; h++) {
		double mag = 1e-30, err = 0;
		for (d = 0; d < head_dim; d++) {
			double w = want[(size_t)h * head_dim + d];
			mag = fabs(w) > mag ? fabs(w) : mag;
			err = fmax(err, fabs((double)got[(size_t)h * head_dim + d] - w));
		}
		worst = fmax(worst, err / mag);
	}
	return worst;
}

#endif /* KVPOOL_TESTS_KVCACHE_REF_H */
