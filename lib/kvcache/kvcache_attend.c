/*
 * lib/kvcache/kvcache_attend.c - decode-step attention reading K/V rows in place.
 *
 * Design: for each KV head, the query heads that share it (GQA group) are
 * processed together, up to HEADS_AT_ONCE at a time, so each K and V row
 * slice is loaded once per group instead of once per query head.  Tokens
 * are taken in chunks of CHUNK (crossing block boundaries freely): first
 * the chunk's scores for every head of the group, then one online-softmax
 * update per head (new running max, rescale of the running sum and output
 * once per chunk, not once per block), then the weighted V rows.  A cursor
 * (block, row) walks the rows, so paging costs one pointer load and one
 * compare per token, never a division.
 *
 * Range: the scale multiplies q (a slice at a time) before the dot product,
 * so a score is +inf only when the scaled score itself overflows fp32; the
 * online softmax gives +inf scores equal weight and -inf scores none, and
 * never forms inf - inf (chunk_softmax).
 *
 * Inner loops (dot product, axpy) run over contiguous head_dim floats with
 * restrict pointers and no branches: the dot product keeps 8 independent
 * partial sums so it vectorizes without reassociation flags.  Rows of other
 * formats are decoded one head slice at a time into a stack buffer (at most
 * SLICE floats at once), with the format switch per slice, not per element.
 */
#include "lib/kvcache/kvcache_attend.h"

#include <math.h>
#include <string.h>

#include "lib/storage/codec.h"

#define HEADS_AT_ONCE 8u
#define CHUNK         128u
#define SLICE         256u

struct cursor {
	uint32_t b, r;
};

static inline void cursor_next(struct cursor *c, uint32_t block_rows)
{
	if (++c->r == block_rows) {
		c->r = 0;
		c->b++;
	}
}

static inline float dot(const float *restrict a, const float *restrict b, uint32_t n)
{
	float p[8] = {0, 0, 0, 0, 0, 0, 0, 0}, tail = 0.0f;
	uint32_t i = 0, j;

	for (; i + 8 <= n; i += 8)
		for (j = 0; j < 8; j++)
			p[j] += a[i + j] * b[i + j];
	for (; i < n; i++)
		tail += a[i] * b[i];
	return ((p[0] + p[4]) + (p[1] + p[5])) + ((p[2] + p[6]) + (p[3] + p[7])) + tail;
}

static inline void axpy(float *restrict y, float a, const float *restrict x, uint32_t n)
{
	uint32_t i;

	for (i = 0; i < n; i++)
		y[i] += a * x[i];
}

static inline void scale_vec(float *restrict y, float a, uint32_t n)
{
	uint32_t i;

	for (i = 0; i < n; i++)
		y[i] *= a;
}

static inline void scale_copy(float *restrict y, float a, const float *restrict x, uint32_t n)
{
	uint32_t i;

	for (i = 0; i < n; i++)
		y[i] = a * x[i];
}

/* Elements [start, start + n) of a row as floats: in place for fp32, else decoded into @tmp. */
static inline const float *slice(kvp_format f, const uint8_t *row, uint32_t start, uint32_t n,
                                 float *tmp)
{
	if (f == KVP_FP32)
		return (const float *)row + start;
	kvpi_codec_decode_range(f, tmp, row, start, n);
	return tmp;
}

/* scores[i][j] = (scale * q_i) . k_j for the chunk's tokens.  The scale
 * goes on q, one slice at a time, before the dot product: q . k may
 * overflow fp32 where the scaled score does not.  Slice-major, so each
 * query slice is scaled once per chunk, not once per token.  (Zeroing the
 * scores first and accumulating keeps dot() SLP-vectorized; a conditional
 * store for the first slice kept clang 14 from vectorizing it.) */
static void chunk_scores(const struct kvpi_attend_src *src, struct cursor cur, uint32_t n_tok,
                         uint32_t kv_off, const float *const *qh, uint32_t nh, float scale,
                         float (*scores)[CHUNK])
{
	uint32_t hd = src->head_dim, j, i, p;
	float tmp[SLICE], qs[HEADS_AT_ONCE][SLICE];

	for (i = 0; i < nh; i++)
		memset(scores[i], 0, (size_t)n_tok * sizeof(float));
	for (p = 0; p < hd; p += SLICE) {
		uint32_t n = hd - p < SLICE ? hd - p : SLICE;
		struct cursor c = cur;
		for (i = 0; i < nh; i++)
			scale_copy(qs[i], scale, qh[i] + p, n);
		for (j = 0; j < n_tok; j++) {
			const uint8_t *row = src->k_blocks[c.b] + (size_t)c.r * src->row_bytes;
			const float *k = slice(src->format, row, kv_off + p, n, tmp);
			for (i = 0; i < nh; i++)
				scores[i][j] += dot(qs[i], k, n);
			cursor_next(&c, src->block_rows);
		}
	}
}

/* out_i += sum_j weights[i][j] * v_j for the chunk's tokens */
static void chunk_values(const struct kvpi_attend_src *src, struct cursor cur, uint32_t n_tok,
                         uint32_t kv_off, float *const *oh, uint32_t nh,
                         const float (*weights)[CHUNK])
{
	uint32_t hd = src->head_dim, j, i, p;
	float tmp[SLICE];

	for (j = 0; j < n_tok; j++) {
		const uint8_t *row = src->v_blocks[cur.b] + (size_t)cur.r * src->row_bytes;
		for (p = 0; p < hd; p += SLICE) {
			uint32_t n = hd - p < SLICE ? hd - p : SLICE;
			const float *v = slice(src->format, row, kv_off + p, n, tmp);
			for (i = 0; i < nh; i++)
				axpy(oh[i] + p, weights[i][j], v, n);
		}
		cursor_next(&cur, src->block_rows);
	}
}

/* Online softmax over one chunk: turns scores into weights against the new
 * running max and rescales the running sum and output accumulated so far.
 * Two running maxima need care, as exp(s - mn) would be exp(inf - inf):
 * mn == -inf (every score so far -inf): the chunk weighs nothing, m and l
 * stay; mn == +inf: each +inf score weighs 1 and every other score 0, the
 * limit of the finite case (what came before +inf was first seen is scaled
 * by exp(m - inf) = 0).  The common finite case keeps its branch-free loop. */
static void chunk_softmax(float (*s)[CHUNK], uint32_t n_tok, uint32_t nh, float *m, float *l,
                          float *const *oh, uint32_t hd)
{
	uint32_t i, j;

	for (i = 0; i < nh; i++) {
		float cmax = s[i][0], mn, sum = 0.0f;
		for (j = 1; j < n_tok; j++)
			cmax = s[i][j] > cmax ? s[i][j] : cmax;
		mn = cmax > m[i] ? cmax : m[i];
		if (mn == -INFINITY) {
			memset(s[i], 0, (size_t)n_tok * sizeof(float));
			continue;
		}
		if (mn > m[i] && l[i] > 0.0f) {
			float corr = expf(m[i] - mn);
			l[i] *= corr;
			scale_vec(oh[i], corr, hd);
		}
		m[i] = mn;
		if (mn == INFINITY) {
			for (j = 0; j < n_tok; j++) {
				s[i][j] = s[i][j] == INFINITY ? 1.0f : 0.0f;
				sum += s[i][j];
			}
		} else {
			for (j = 0; j < n_tok; j++) {
				s[i][j] = expf(s[i][j] - mn);
				sum += s[i][j];
			}
		}
		l[i] += sum;
	}
}

void kvpi_attend_rows(const struct kvpi_attend_src *src, const float *q, uint32_t n_heads,
                      float scale, float *out)
{
	uint32_t hd = src->head_dim, group = n_heads / src->n_kv_heads, g, h0, i;
	float scores[HEADS_AT_ONCE][CHUNK];

	for (g = 0; g < src->n_kv_heads; g++) {
		uint32_t kv_off = g * hd;
		for (h0 = 0; h0 < group; h0 += HEADS_AT_ONCE) {
			uint32_t nh = group - h0 < HEADS_AT_ONCE ? group - h0 : HEADS_AT_ONCE;
			const float *qh[HEADS_AT_ONCE];
			float *oh[HEADS_AT_ONCE], m[HEADS_AT_ONCE], l[HEADS_AT_ONCE];
			struct cursor cur = {0, 0};
			uint32_t t0;

			for (i = 0; i < nh; i++) {
				size_t h = (size_t)g * group + h0 + i;
				qh[i] = q + h * hd;
				oh[i] = out + h * hd;
				memset(oh[i], 0, (size_t)hd * sizeof(float));
				m[i] = -INFINITY;
				l[i] = 0.0f;
			}
			for (t0 = 0; t0 < src->len; t0 += CHUNK) {
				uint32_t n_tok = src->len - t0 < CHUNK ? src->len - t0 : CHUNK;
				struct cursor next = cur;
				chunk_scores(src, cur, n_tok, kv_off, qh, nh, scale, scores);
				chunk_softmax(scores, n_tok, nh, m, l, oh, hd);
				chunk_values(src, cur, n_tok, kv_off, oh, nh,
				             (const float(*)[CHUNK])scores);
				next.r += n_tok;
				while (next.r >= src->block_rows) {
					next.r -= src->block_rows;
					next.b++;
				}
				cur = next;
			}
			for (i = 0; i < nh; i++)
				scale_vec(oh[i], 1.0f / l[i], hd);
		}
	}
}
