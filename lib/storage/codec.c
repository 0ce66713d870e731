/*
 * lib/storage/codec.c - row codecs: fp32, fp16, bf16, int8 and int4 (see codec.h).
 *
 * Design: every codec works a row at a time with a per-format switch outside
 * the element loops, and the element loops have no branches (selects only),
 * so the compiler vectorizes them at -O2.  Quantized rows carry their own
 * float scale in front of the codes: a row is self-contained, so a block can
 * be written row by row in any order, and attention decodes one head's slice
 * of a row without touching its neighbours.
 *
 * Quantization: scale = absmax / qmax, nudged up by one ulp when rounding
 * made it smaller, so |x / scale| <= qmax and no code is ever clamped by more
 * than rounding; codes are round-to-nearest-even of x / scale (the
 * 1.5 * 2^23 trick: exact for |t| < 2^22, no libm call, no branch).
 */
#include "lib/storage/codec.h"

#include <math.h>

bool kvpi_codec_supported(kvp_format f)
{
	return f == KVP_FP32 || f == KVP_FP16 || f == KVP_BF16 || f == KVP_INT8 || f == KVP_INT4;
}

/* Bytes of the codes alone (no scale) for @row_dim elements. */
static uint64_t code_bytes(kvp_format f, uint64_t row_dim)
{
	switch (f) {
	case KVP_FP32:
		return 4 * row_dim;
	case KVP_FP16:
	case KVP_BF16:
		return 2 * row_dim;
	case KVP_INT8:
		return row_dim;
	case KVP_INT4:
		return (row_dim + 1) / 2;
	default:
		return 0;
	}
}

static bool is_quantized(kvp_format f)
{
	return f == KVP_INT8 || f == KVP_INT4;
}

size_t kvpi_codec_row_bytes(kvp_format f, uint32_t row_dim)
{
	uint64_t b;

	if (!kvpi_codec_supported(f) || row_dim == 0)
		return 0;
	b = code_bytes(f, row_dim);
	if (is_quantized(f))
		b = (sizeof(float) + b + 3) & ~(uint64_t)3;
	return b > UINT32_MAX ? 0 : (size_t)b;
}

int kvpi_codec_check(kvp_format f, const float *src, size_t n_rows, uint32_t row_dim)
{
	size_t i, n = n_rows * row_dim;
	int bad = 0;

	if (!kvpi_codec_supported(f))
		return KVP_EINVAL;
	if (!is_quantized(f))
		return KVP_OK;
	/* !(|x| <= FLT_MAX) is true for inf and NaN alike; OR-reduce, no early exit */
	for (i = 0; i < n; i++)
		bad |= !(fabsf(src[i]) <= 3.40282347e+38f);
	return bad ? KVP_EINVAL : KVP_OK;
}

static float row_absmax(const float *restrict x, uint32_t n)
{
	float m = 0.0f;
	uint32_t i;

	for (i = 0; i < n; i++) {
		float a = fabsf(x[i]);
		m = a > m ? a : m;
	}
	return m;
}

/* Per-row scale for @absmax and @qmax: the smallest float with absmax / scale <= qmax. */
static float quant_scale(float absmax, int qmax)
{
	float s = absmax / (float)qmax;

	if (s * (float)qmax < absmax)
		s = nextafterf(s, INFINITY);
	/* 1/s must be finite: rows this tiny (absmax < qmax * 2^-128) are stored as zeros */
	return s < 0x1p-127f ? 0.0f : s;
}

/* Round @t (|t| < 2^22) to the nearest integer, ties to even, and clamp to +-qmax. */
static inline float quant_round(float t, float qmax)
{
	const float magic = 12582912.0f; /* 1.5 * 2^23 */
	float r = (t + magic) - magic;

	r = r > qmax ? qmax : r;
	return r < -qmax ? -qmax : r;
}

static void encode_int8(uint8_t *restrict dst, const float *restrict x, uint32_t n)
{
	float absmax = row_absmax(x, n), scale = quant_scale(absmax, KVPI_INT8_QMAX);
	float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
	int8_t *restrict q = (int8_t *)(dst + sizeof(float));
	uint32_t i;

	memcpy(dst, &scale, sizeof scale);
	/* x * (1/scale) is within 2 ulp of x / scale: well inside the stated bound */
	for (i = 0; i < n; i++)
		q[i] = (int8_t)quant_round(x[i] * inv, (float)KVPI_INT8_QMAX);
}

static void encode_int4(uint8_t *restrict dst, const float *restrict x, uint32_t n)
{
	float absmax = row_absmax(x, n), scale = quant_scale(absmax, KVPI_INT4_QMAX);
	float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
	uint8_t *restrict q = dst + sizeof(float);
	uint32_t i;

	memcpy(dst, &scale, sizeof scale);
	for (i = 0; i + 1 < n; i += 2) {
		int lo = (int)quant_round(x[i] * inv, (float)KVPI_INT4_QMAX);
		int hi = (int)quant_round(x[i + 1] * inv, (float)KVPI_INT4_QMAX);
		q[i / 2] = (uint8_t)((lo & 15) | ((hi & 15) << 4));
	}
	if (n & 1)
		q[n / 2] = (uint8_t)((int)quant_round(x[n - 1] * inv, (float)KVPI_INT4_QMAX) & 15);
}

static void encode_row(kvp_format f, uint8_t *restrict dst, const float *restrict x, uint32_t n)
{
	uint32_t i;

	switch (f) {
	case KVP_FP32:
		memcpy(dst, x, (size_t)n * sizeof(float));
		break;
	case KVP_FP16: {
		uint16_t *restrict h = (uint16_t *)dst;
		for (i = 0; i < n; i++)
			h[i] = kvpi_f32_to_f16(x[i]);
		break;
	}
	case KVP_BF16: {
		uint16_t *restrict h = (uint16_t *)dst;
		for (i = 0; i < n; i++)
			h[i] = kvpi_f32_to_bf16(x[i]);
		break;
	}
	case KVP_INT8:
		encode_int8(dst, x, n);
		break;
	case KVP_INT4:
		encode_int4(dst, x, n);
		break;
	default:
		break;
	}
}

void kvpi_codec_encode(kvp_format f, void *dst, const float *src, size_t n_rows, uint32_t row_dim)
{
	size_t rb = kvpi_codec_row_bytes(f, row_dim), r;

	for (r = 0; r < n_rows && rb; r++) {
		uint8_t *row = (uint8_t *)dst + r * rb;
		if (is_quantized(f)) /* zero the padding (the codes overwrite the rest) */
			memset(row + rb - 4, 0, 4);
		encode_row(f, row, src + r * row_dim, row_dim);
	}
}

static float row_scale(const void *row)
{
	float s;
	memcpy(&s, row, sizeof s);
	return s;
}

/* Signed value of nibble @i of @q (two's complement). */
static inline int nibble(const uint8_t *q, uint32_t i)
{
	int b = q[i >> 1] >> ((i & 1) * 4);
	return ((b & 15) ^ 8) - 8;
}

void kvpi_codec_decode_range(kvp_format f, float *restrict dst, const void *restrict row,
                             uint32_t start, uint32_t count)
{
	const uint8_t *p = row;
	uint32_t i;

	switch (f) {
	case KVP_FP32:
		memcpy(dst, p + (size_t)start * 4, (size_t)count * sizeof(float));
		break;
	case KVP_FP16: {
		const uint16_t *restrict h = (const uint16_t *)p + start;
		for (i = 0; i < count; i++)
			dst[i] = kvpi_f16_to_f32(h[i]);
		break;
	}
	case KVP_BF16: {
		const uint16_t *restrict h = (const uint16_t *)p + start;
		for (i = 0; i < count; i++)
			dst[i] = kvpi_bf16_to_f32(h[i]);
		break;
	}
	case KVP_INT8: {
		const int8_t *restrict q = (const int8_t *)(p + sizeof(float)) + start;
		float s = row_scale(p);
		for (i = 0; i < count; i++)
			dst[i] = (float)q[i] * s;
		break;
	}
	case KVP_INT4: {
		const uint8_t *restrict q = p + sizeof(float);
		float s = row_scale(p);
		uint32_t j = 0;
		if ((start & 1) && count) {
			dst[0] = (float)nibble(q, start) * s;
			j = 1;
		}
		/* from here element start + j is even: whole bytes, two values each */
		const uint8_t *restrict qb = q + (start + j) / 2;
		uint32_t pairs = (count - j) / 2;
		for (i = 0; i < pairs; i++) {
			int b = qb[i];
			dst[j + 2 * i] = (float)(((b & 15) ^ 8) - 8) * s;
			dst[j + 2 * i + 1] = (float)(((b >> 4) ^ 8) - 8) * s;
		}
		if (j + 2 * pairs < count)
			dst[count - 1] = (float)nibble(q, start + count - 1) * s;
		break;
	}
	default:
		break;
	}
}

void kvpi_codec_decode(kvp_format f, float *dst, const void *src, size_t n_rows, uint32_t row_dim)
{
	size_t rb = kvpi_codec_row_bytes(f, row_dim), r;

	for (r = 0; r < n_rows && rb; r++)
		kvpi_codec_decode_range(f, dst + r * row_dim, (const uint8_t *)src + r * rb, 0,
		                        row_dim);
}
