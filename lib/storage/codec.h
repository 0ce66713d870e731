/*
 * lib/storage/codec.h - row codecs for block storage: fp32, fp16, bf16, int8, int4.
 *
 * A row is row_dim float elements.  Encoded row layouts (all little-endian,
 * the stride of consecutive rows in a block is kvpi_codec_row_bytes()):
 *
 *   fp32  row_dim x float (IEEE binary32), copied bit for bit
 *   fp16  row_dim x uint16 IEEE binary16, round to nearest even;
 *         subnormal halves are produced and read; |x| >= 65520 becomes inf
 *   bf16  row_dim x uint16, the top half of the binary32 after round to
 *         nearest even; overflow becomes inf
 *   int8  float scale, then row_dim x int8 q in [-127, 127]; x ~= q * scale,
 *         scale >= absmax(row) / 127 (per-row absmax scaling)
 *   int4  float scale, then ceil(row_dim / 2) bytes: element 2i in the low
 *         nibble, 2i+1 in the high nibble, each a two's complement q in
 *         [-7, 7]; x ~= q * scale, scale >= absmax(row) / 7
 *   int2, int1  tags only: no codec; row bytes 0 and writes are refused.
 *
 * Quantized rows are padded to a multiple of 4 bytes, so each scale is
 * aligned.
 *
 * Special values.  fp16 and bf16 keep the sign of zero and keep
 * infinities.  They turn every NaN into a quiet NaN of the same sign; the
 * payload is not kept.  int8 and int4 cannot represent inf or NaN.
 * kvpi_codec_check refuses rows holding one, and storage turns that into
 * KVP_EINVAL before writing.
 *
 * Error bounds, for the tests and docs/KVCACHE.md (d decoded, x written):
 *   - fp16: |d - x| <= 2^-11 |x| for |x| in [2^-14, 65504], <= 2^-25 below;
 *   - bf16: |d - x| <= 2^-8 |x| for normal |x| up to the largest bf16;
 *   - int8 / int4: |d - x| <= absmax / (2 qmax) * (1 + 2^-12) for rows with
 *     absmax >= 2^-100 (qmax 127 or 7).
 *
 * Pure functions, no state: thread-safe.  Loops are branch-free per element
 * so that -O2 vectorizes them.
 */
#ifndef KVPOOL_LIB_CODEC_H
#define KVPOOL_LIB_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <kvpool/pool.h>

/* Largest absolute integer code of a quantized format (0 for the others). */
#define KVPI_INT8_QMAX 127
#define KVPI_INT4_QMAX 7

/** kvpi_codec_supported - whether @f has a codec (fp32, fp16, bf16, int8, int4) */
bool kvpi_codec_supported(kvp_format f);

/**
 * kvpi_codec_row_bytes - bytes of one encoded row of @row_dim elements in @f
 *
 * Returns 0 for a format without a codec, row_dim 0, or a size that does not
 * fit in 32 bits.
 */
size_t kvpi_codec_row_bytes(kvp_format f, uint32_t row_dim);

/**
 * kvpi_codec_check - whether every value of @n_rows rows can be encoded in @f
 *
 * Returns KVP_OK, or KVP_EINVAL when @f has no codec or an int8/int4 row
 * holds an infinity or a NaN.
 */
int kvpi_codec_check(kvp_format f, const float *src, size_t n_rows, uint32_t row_dim);

/**
 * kvpi_codec_encode - encode @n_rows rows of @row_dim floats from @src into @dst
 *
 * @dst receives n_rows * kvpi_codec_row_bytes(f, row_dim) bytes.  The rows
 * must have passed kvpi_codec_check.  No-op for a format without a codec.
 */
void kvpi_codec_encode(kvp_format f, void *dst, const float *src, size_t n_rows, uint32_t row_dim);

/** kvpi_codec_decode - decode @n_rows encoded rows from @src into floats at @dst */
void kvpi_codec_decode(kvp_format f, float *dst, const void *src, size_t n_rows, uint32_t row_dim);

/**
 * kvpi_codec_decode_range - decode elements [@start, @start + @count) of one row
 * @f:     the format
 * @dst:   receives @count floats
 * @row:   the encoded row (its first byte)
 * @start: first element
 * @count: elements
 *
 * Used by attention to decode one head's slice of a token row in place.
 */
void kvpi_codec_decode_range(kvp_format f, float *dst, const void *row, uint32_t start,
                             uint32_t count);

static inline uint32_t kvpi_codec_f2u(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	return u;
}

static inline float kvpi_codec_u2f(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

/*
 * kvpi_f32_to_f16 - binary32 to binary16, round to nearest even.
 * After F. Giesen's float_to_half_fast3_rtne: subnormal results come from an
 * FP add that aligns the mantissa (the FPU rounds to nearest even), normal
 * ones from integer rounding with the tie broken by the result's low bit.
 */
static inline uint16_t kvpi_f32_to_f16(float f)
{
	const uint32_t f32infty = 255u << 23;
	const uint32_t f16max = (127u + 16u) << 23;
	const float denorm_magic = kvpi_codec_u2f(((127u - 15u) + (23u - 10u) + 1u) << 23);
	uint32_t u = kvpi_codec_f2u(f);
	uint32_t sign = u & 0x80000000u;
	uint32_t a = u ^ sign;
	uint32_t special = a > f32infty ? 0x7e00u : 0x7c00u;
	uint32_t sub =
	    kvpi_codec_f2u(kvpi_codec_u2f(a) + denorm_magic) - kvpi_codec_f2u(denorm_magic);
	uint32_t norm = (a + ((uint32_t)(15 - 127) << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13;
	uint32_t o = a >= f16max ? special : (a < (113u << 23) ? sub : norm);
	return (uint16_t)(o | (sign >> 16));
}

/* kvpi_f16_to_f32 - binary16 to binary32 (exact), after Giesen's half_to_float_fast4. */
static inline float kvpi_f16_to_f32(uint16_t h)
{
	const uint32_t shifted_exp = 0x7c00u << 13;
	uint32_t o = ((uint32_t)h & 0x7fffu) << 13;
	uint32_t exp = shifted_exp & o;
	uint32_t norm = o + ((127u - 15u) << 23);
	uint32_t infnan = norm + ((128u - 16u) << 23);
	/* zero/subnormal: renormalize with an FP subtract of 2^-14 */
	uint32_t sub =
	    kvpi_codec_f2u(kvpi_codec_u2f(norm + (1u << 23)) - kvpi_codec_u2f(113u << 23));
	uint32_t r = exp == shifted_exp ? infnan : (exp == 0 ? sub : norm);
	return kvpi_codec_u2f(r | (((uint32_t)h & 0x8000u) << 16));
}

/* kvpi_f32_to_bf16 - binary32 to bfloat16, round to nearest even; NaN stays a quiet NaN. */
static inline uint16_t kvpi_f32_to_bf16(float f)
{
	uint32_t u = kvpi_codec_f2u(f);
	uint32_t nan = (u >> 16) | 0x40u;
	uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
	return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : r);
}

/* kvpi_bf16_to_f32 - bfloat16 to binary32 (exact). */
static inline float kvpi_bf16_to_f32(uint16_t h)
{
	return kvpi_codec_u2f((uint32_t)h << 16);
}

#endif /* KVPOOL_LIB_CODEC_H */
