/*
 * lib/kvcache/kvcache_attend.h - one decode step of attention over rows in blocks.
 *
 * The kernel reads token rows where they lie: a list of block base
 * addresses, block_rows rows per block (the last block may be partial),
 * row_bytes apart, each row n_kv_heads * head_dim elements in @format.  A
 * contiguous (len, n_kv_heads, head_dim) array is the special case of one
 * block of len rows, which is how bench/attend_bench.c measures the cost of
 * paging with the very same arithmetic.
 *
 * Pure function of its inputs, no allocation, no locks: thread-safe.
 */
#ifndef KVPOOL_LIB_KVCACHE_ATTEND_H
#define KVPOOL_LIB_KVCACHE_ATTEND_H

#include <stddef.h>
#include <stdint.h>

#include <kvpool/pool.h>

struct kvpi_attend_src {
	const uint8_t *const *k_blocks; /* base of each K block's rows */
	const uint8_t *const *v_blocks; /* base of each V block's rows */
	uint32_t block_rows;            /* rows per block (all but maybe the last full) */
	uint32_t len;                   /* rows in all, >= 1 */
	size_t row_bytes;               /* stride between rows of a block */
	kvp_format format;              /* a format with a codec (lib/storage/codec.h) */
	uint32_t n_kv_heads, head_dim;
};

/**
 * kvpi_attend_rows - softmax(q k^T * scale) v for each query head, one step
 * @src:     the K and V rows
 * @q:       (n_heads, head_dim) query
 * @n_heads: a multiple of n_kv_heads; head h uses KV head h / (n_heads / n_kv_heads)
 * @scale:   multiplies every score (usually 1/sqrt(head_dim))
 * @out:     (n_heads, head_dim) result; must not overlap @q
 *
 * Scores, softmax and sums are fp32; the softmax is computed online
 * (running max and sum rescaled per chunk of tokens), so each row is read
 * once.  The caller has checked the arguments.
 */
void kvpi_attend_rows(const struct kvpi_attend_src *src, const float *q, uint32_t n_heads,
                      float scale, float *out);

#endif /* KVPOOL_LIB_KVCACHE_ATTEND_H */
