/*
 * tests/codec_roundtrip_test.c - the row codecs of lib/storage/codec.h.
 *
 * fp16 and bf16 are checked against an independent reference (nearest
 * representable value from a sorted table of every finite code, ties to the
 * even code) on random values, on every midpoint between neighbours and on
 * every code; then against the stated error bounds.  int8/int4 are checked
 * against the bound derived in lib/storage/codec.c:
 *   |decoded - x| <= absmax / (2 qmax) * (1 + 2^-12)
 * (scale <= absmax/qmax * (1 + 2^-23), code error 0.5 + 2^-23 qmax, decode
 * rounding 2^-24 absmax: 1 + 4.6e-5 for int8, well below 1 + 2^-12).
 */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "lib/testing/codec.h"
#include "tests/testutil.h"

/* --- reference rounding: nearest finite code from a sorted table, ties to even --- */

struct table {
	double val[65536];
	uint16_t code[65536];
	int n;           /* positive finite codes 0 .. n-1 */
	double next_max; /* the value one ulp above the largest finite one (rounds to inf) */
	uint16_t inf;    /* code of +inf */
};

static struct table t16, tb16;

/* Value of a positive finite code with @mbits fraction bits and exponent bias @bias. */
static double code_value(uint16_t c, int mbits, int bias)
{
	int e = c >> mbits, m = c & ((1 << mbits) - 1);

	if (e == 0)
		return ldexp((double)m, 1 - bias - mbits);
	return ldexp((double)((1 << mbits) + m), e - bias - mbits);
}

static void table_init(struct table *t, int mbits, int bias, float (*dec)(uint16_t),
                       uint16_t max_code, double next_max, uint16_t inf)
{
	int i;

	t->n = max_code + 1;
	for (i = 0; i < t->n; i++) {
		t->code[i] = (uint16_t)i;
		t->val[i] = code_value((uint16_t)i, mbits, bias);
		CHECK((double)dec((uint16_t)i) == t->val[i]); /* the decoder under test agrees */
		if (i)
			CHECK(t->val[i] > t->val[i - 1]); /* positive codes sort by value */
	}
	t->next_max = next_max;
	t->inf = inf;
}

static uint16_t ref_round(const struct table *t, float xf)
{
	double x = fabs((double)xf);
	uint16_t sign = signbit(xf) ? 0x8000 : 0;
	double lo_v, hi_v, mid;
	uint16_t lo_c, hi_c;
	int lo = 0, hi = t->n - 1;

	if (x >= t->val[t->n - 1]) {
		lo_v = t->val[t->n - 1];
		hi_v = t->next_max;
		lo_c = t->code[t->n - 1];
		hi_c = t->inf;
	} else {
		while (hi - lo > 1) { /* val[lo] <= x < val[hi] */
			int m = (lo + hi) / 2;
			if (t->val[m] <= x)
				lo = m;
			else
				hi = m;
		}
		lo_v = t->val[lo];
		hi_v = t->val[hi];
		lo_c = t->code[lo];
		hi_c = t->code[hi];
	}
	mid = (lo_v + hi_v) / 2;
	if (x < mid)
		return lo_c | sign;
	if (x > mid)
		return hi_c | sign;
	return ((lo_c & 1) ? hi_c : lo_c) | sign;
}

static float rand_float(uint64_t *s, int min_exp, int max_exp)
{
	uint64_t r = tu_rand(s);
	int e = min_exp + (int)(r % (uint64_t)(max_exp - min_exp + 1));
	uint32_t mant = (uint32_t)(r >> 20) & 0x7fffffu;
	uint32_t u = ((uint32_t)(e + 127) << 23) | mant | ((r >> 63) ? 0x80000000u : 0);
	return kvpi_codec_u2f(u);
}

static void test_fp16_every_code_round_trips(void)
{
	uint32_t h;

	for (h = 0; h < 65536; h++) {
		float f = kvpi_f16_to_f32((uint16_t)h);
		uint16_t back = kvpi_f32_to_f16(f);
		if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) { /* NaN: quiet NaN, sign kept */
			CHECK(isnan(f));
			CHECK_EQ(back, 0x7e00 | (h & 0x8000));
		} else {
			CHECK_EQ(back, h);
		}
	}
}

static void test_fp16_matches_reference_rounding(void)
{
	uint64_t s = 1;
	int i;

	/* every midpoint between neighbouring finite halves: the ties */
	for (i = 0; i + 1 < t16.n; i++) {
		float mid = (float)((t16.val[i] + t16.val[i + 1]) / 2);
		CHECK_EQ(kvpi_f32_to_f16(mid), ref_round(&t16, mid));
		CHECK_EQ(kvpi_f32_to_f16(-mid), ref_round(&t16, -mid));
	}
	/* random values from far below the subnormals to beyond the largest half */
	for (i = 0; i < 200000; i++) {
		float x = rand_float(&s, -30, 17);
		CHECK_EQ(kvpi_f32_to_f16(x), ref_round(&t16, x));
	}
}

static void test_fp16_edges(void)
{
	CHECK_EQ(kvpi_f32_to_f16(0.0f), 0x0000);
	CHECK_EQ(kvpi_f32_to_f16(-0.0f), 0x8000);
	CHECK(signbit(kvpi_f16_to_f32(0x8000)));
	CHECK_EQ(kvpi_f32_to_f16(INFINITY), 0x7c00);
	CHECK_EQ(kvpi_f32_to_f16(-INFINITY), 0xfc00);
	CHECK_EQ(kvpi_f32_to_f16(NAN) & 0x7e00, 0x7e00);
	CHECK(isnan(kvpi_f16_to_f32(kvpi_f32_to_f16(-NAN))));
	CHECK_EQ(kvpi_f32_to_f16(65504.0f), 0x7bff);
	CHECK_EQ(kvpi_f32_to_f16(65519.0f), 0x7bff);
	CHECK_EQ(kvpi_f32_to_f16(65520.0f), 0x7c00); /* tie goes to the even code: inf */
	CHECK_EQ(kvpi_f32_to_f16(1e30f), 0x7c00);
	CHECK_EQ(kvpi_f32_to_f16(0x1p-24f), 0x0001);     /* smallest subnormal */
	CHECK_EQ(kvpi_f32_to_f16(0x1p-25f), 0x0000);     /* tie between 0 and 2^-24: even is 0 */
	CHECK_EQ(kvpi_f32_to_f16(0x1.8p-24f), 0x0002);   /* tie between 1 and 2 ulp: even is 2 */
	CHECK_EQ(kvpi_f32_to_f16(0x1.0p-14f), 0x0400);   /* smallest normal */
	CHECK_EQ(kvpi_f32_to_f16(0x1.ffcp-15f), 0x0400); /* tie: rounds up out of the subnormals */
	CHECK_EQ(kvpi_f32_to_f16(0x1.ff8p-15f), 0x03ff); /* largest subnormal */
	CHECK(kvpi_f16_to_f32(0x0001) == 0x1p-24f);
	CHECK(kvpi_f16_to_f32(0x03ff) == 0x1.ff8p-15f);
	CHECK_EQ(kvpi_f32_to_f16(1.0f + 0x1p-11f), 0x3c00); /* tie, even is 1.0 */
	CHECK_EQ(kvpi_f32_to_f16(1.0f + 0x3p-11f), 0x3c02); /* tie, even is 1 + 2^-9 */
}

static void test_fp16_bound(void)
{
	uint64_t s = 2;
	int i;

	/* normal range: half an ulp is at most 2^-11 of the value */
	for (i = 0; i < 100000; i++) {
		float x = rand_float(&s, -14, 15);
		double d = kvpi_f16_to_f32(kvpi_f32_to_f16(x));
		if (fabs((double)x) > 65504.0)
			continue;
		CHECK(fabs(d - x) <= ldexp(fabs((double)x), -11));
	}
	/* subnormal range: absolute error at most half the subnormal step 2^-24 */
	for (i = 0; i < 100000; i++) {
		float x = rand_float(&s, -40, -15);
		double d = kvpi_f16_to_f32(kvpi_f32_to_f16(x));
		CHECK(fabs(d - x) <= 0x1p-25);
	}
}

static void test_bf16_every_code_round_trips(void)
{
	uint32_t h;

	for (h = 0; h < 65536; h++) {
		float f = kvpi_bf16_to_f32((uint16_t)h);
		uint16_t back = kvpi_f32_to_bf16(f);
		if ((h & 0x7f80) == 0x7f80 && (h & 0x7f)) {
			CHECK(isnan(f));
			CHECK(isnan(kvpi_bf16_to_f32(back)));
			CHECK_EQ(back & 0x8000, h & 0x8000);
		} else {
			CHECK_EQ(back, h);
		}
	}
}

static void test_bf16_matches_reference_rounding(void)
{
	uint64_t s = 3;
	int i;

	for (i = 0; i + 1 < tb16.n; i++) {
		float mid = (float)((tb16.val[i] + tb16.val[i + 1]) / 2);
		CHECK_EQ(kvpi_f32_to_bf16(mid), ref_round(&tb16, mid));
		CHECK_EQ(kvpi_f32_to_bf16(-mid), ref_round(&tb16, -mid));
	}
	for (i = 0; i < 200000; i++) {
		float x = rand_float(&s, -126, 127);
		CHECK_EQ(kvpi_f32_to_bf16(x), ref_round(&tb16, x));
	}
	/* subnormal floats round bit-exactly too */
	for (i = 0; i < 100000; i++) {
		float x = kvpi_codec_u2f((uint32_t)(tu_rand(&s) & 0x807fffffu));
		CHECK_EQ(kvpi_f32_to_bf16(x), ref_round(&tb16, x));
	}
}

static void test_bf16_edges_and_bound(void)
{
	uint64_t s = 4;
	int i;

	CHECK_EQ(kvpi_f32_to_bf16(0.0f), 0x0000);
	CHECK_EQ(kvpi_f32_to_bf16(-0.0f), 0x8000);
	CHECK_EQ(kvpi_f32_to_bf16(INFINITY), 0x7f80);
	CHECK_EQ(kvpi_f32_to_bf16(-INFINITY), 0xff80);
	CHECK(isnan(kvpi_bf16_to_f32(kvpi_f32_to_bf16(NAN))));
	/* a NaN whose payload sits only in the dropped bits must stay a NaN */
	CHECK(isnan(kvpi_bf16_to_f32(kvpi_f32_to_bf16(kvpi_codec_u2f(0x7f800001u)))));
	CHECK_EQ(kvpi_f32_to_bf16(3.40282347e+38f), 0x7f80); /* FLT_MAX is past the last tie */
	CHECK_EQ(kvpi_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);  /* tie, even is 1.0 */
	CHECK_EQ(kvpi_f32_to_bf16(1.0f + 0x3p-8f), 0x3f82);
	for (i = 0; i < 100000; i++) {
		float x = rand_float(&s, -126, 126);
		double d = kvpi_bf16_to_f32(kvpi_f32_to_bf16(x));
		CHECK(fabs(d - x) <= ldexp(fabs((double)x), -8));
	}
}

/* --- quantized formats --- */

static double quant_bound(float absmax, int qmax)
{
	return (double)absmax / (2.0 * qmax) * (1.0 + 0x1p-12);
}

/* Encode rows, decode them, and check every element against the bound; returns max err/bound. */
static double check_quant_rows(kvp_format f, int qmax, const float *x, uint32_t n_rows,
                               uint32_t dim)
{
	size_t rb = kvpi_codec_row_bytes(f, dim);
	uint8_t *enc = calloc(n_rows, rb);
	float *dec = calloc((size_t)n_rows * dim, sizeof(float));
	double worst = 0;
	uint32_t r, i;

	CHECK(enc && dec);
	CHECK_EQ(kvpi_codec_check(f, x, n_rows, dim), KVP_OK);
	kvpi_codec_encode(f, enc, x, n_rows, dim);
	kvpi_codec_decode(f, dec, enc, n_rows, dim);
	for (r = 0; r < n_rows; r++) {
		float absmax = 0;
		for (i = 0; i < dim; i++)
			absmax = fmaxf(absmax, fabsf(x[r * dim + i]));
		for (i = 0; i < dim; i++) {
			double err = fabs((double)dec[r * dim + i] - x[r * dim + i]);
			CHECK(err <= quant_bound(absmax, qmax));
			if (absmax > 0)
				worst = fmax(worst, err / quant_bound(absmax, qmax));
		}
	}
	free(enc);
	free(dec);
	return worst;
}

static void test_quant_bounds(void)
{
	static const uint32_t dims[] = {1, 2, 3, 7, 64, 129};
	struct {
		kvp_format f;
		int qmax;
	} fmts[] = {{KVP_INT8, KVPI_INT8_QMAX}, {KVP_INT4, KVPI_INT4_QMAX}};
	uint64_t s = 5;
	size_t fi, di;

	for (fi = 0; fi < 2; fi++) {
		for (di = 0; di < sizeof dims / sizeof dims[0]; di++) {
			uint32_t dim = dims[di], n_rows = 50, i;
			float *x = malloc(sizeof(float) * n_rows * dim);
			double worst;
			CHECK(x);
			for (i = 0; i < n_rows * dim; i++) {
				/* rows of very different magnitudes, both signs */
				int e = (int)((i / dim) % 40) - 20;
				x[i] =
				    ldexpf((float)((double)(tu_rand(&s) >> 11) * 0x1p-53 - 0.5), e);
			}
			worst = check_quant_rows(fmts[fi].f, fmts[fi].qmax, x, n_rows, dim);
			/* the bound is tight: random data comes close to it */
			if (dim >= 64)
				CHECK(worst > 0.9);
			free(x);
		}
	}
}

static void test_quant_edges(void)
{
	float zeros[5] = {0, -0.0f, 0, 0, 0};
	float tiny[4] = {1e-40f, -3e-39f, 0, 2e-39f};
	float spikes[6] = {-1000.0f, 1e-3f, 1000.0f, -0.5f, 0.25f, 999.0f};
	float bad[3] = {1.0f, NAN, 2.0f};
	float inf[3] = {1.0f, -INFINITY, 2.0f};
	uint8_t enc[64];
	float dec[8];
	int i;

	/* a zero row decodes to exact zeros */
	kvpi_codec_encode(KVP_INT8, enc, zeros, 1, 5);
	kvpi_codec_decode(KVP_INT8, dec, enc, 1, 5);
	for (i = 0; i < 5; i++)
		CHECK(dec[i] == 0.0f);
	kvpi_codec_encode(KVP_INT4, enc, zeros, 1, 5);
	kvpi_codec_decode(KVP_INT4, dec, enc, 1, 5);
	for (i = 0; i < 5; i++)
		CHECK(dec[i] == 0.0f);
	/* subnormal rows: stored without overflow, error at most absmax */
	kvpi_codec_encode(KVP_INT8, enc, tiny, 1, 4);
	kvpi_codec_decode(KVP_INT8, dec, enc, 1, 4);
	for (i = 0; i < 4; i++)
		CHECK(fabsf(dec[i] - tiny[i]) <= 3e-39f);
	/* the absmax element itself, both signs, comes back exactly */
	kvpi_codec_encode(KVP_INT8, enc, spikes, 1, 6);
	kvpi_codec_decode(KVP_INT8, dec, enc, 1, 6);
	CHECK(fabsf(dec[0] + 1000.0f) <= quant_bound(1000.0f, 127));
	CHECK(fabsf(dec[2] - 1000.0f) <= quant_bound(1000.0f, 127));
	check_quant_rows(KVP_INT4, KVPI_INT4_QMAX, spikes, 1, 6);
	/* inf and NaN cannot be quantized */
	CHECK_EQ(kvpi_codec_check(KVP_INT8, bad, 1, 3), KVP_EINVAL);
	CHECK_EQ(kvpi_codec_check(KVP_INT4, inf, 1, 3), KVP_EINVAL);
	CHECK_EQ(kvpi_codec_check(KVP_FP16, inf, 1, 3), KVP_OK);
	CHECK_EQ(kvpi_codec_check(KVP_FP32, bad, 1, 3), KVP_OK);
	/* int2 / int1 are tags only */
	CHECK(!kvpi_codec_supported(KVP_INT2));
	CHECK(!kvpi_codec_supported(KVP_INT1));
	CHECK_EQ(kvpi_codec_row_bytes(KVP_INT2, 8), 0);
	CHECK_EQ(kvpi_codec_check(KVP_INT1, zeros, 1, 5), KVP_EINVAL);
}

static void test_row_bytes(void)
{
	CHECK_EQ(kvpi_codec_row_bytes(KVP_FP32, 5), 20);
	CHECK_EQ(kvpi_codec_row_bytes(KVP_FP16, 5), 10);
	CHECK_EQ(kvpi_codec_row_bytes(KVP_BF16, 5), 10);
	CHECK_EQ(kvpi_codec_row_bytes(KVP_INT8, 5), 12); /* 4 + 5, padded to 4 */
	CHECK_EQ(kvpi_codec_row_bytes(KVP_INT4, 5), 8);  /* 4 + 3, padded to 4 */
	CHECK_EQ(kvpi_codec_row_bytes(KVP_INT4, 8), 8);
	CHECK_EQ(kvpi_codec_row_bytes(KVP_FP32, 0), 0);
	{
		/* padding is written as zeros: stored rows are deterministic bytes */
		float x[10] = {1, -2, 3, -4, 5, 6, 7, 8, 9, 10};
		uint8_t enc[16];
		memset(enc, 0xff, sizeof enc);
		kvpi_codec_encode(KVP_INT4, enc, x, 2, 5); /* 2 rows of 4 + 3 + 1 pad */
		CHECK_EQ(enc[7], 0);
		CHECK_EQ(enc[15], 0);
		CHECK_EQ(enc[6] >> 4, 0); /* the odd element's empty high nibble */
		memset(enc, 0xff, sizeof enc);
		kvpi_codec_encode(KVP_INT8, enc, x, 1, 5); /* 4 + 5 + 3 pad */
		CHECK(enc[9] == 0 && enc[10] == 0 && enc[11] == 0);
	}
	CHECK_EQ(kvpi_codec_row_bytes((kvp_format)99, 4), 0);
}

/* decode_range of any slice equals the same slice of a whole-row decode */
static void test_decode_range_slices(void)
{
	static const kvp_format fmts[] = {KVP_FP32, KVP_FP16, KVP_BF16, KVP_INT8, KVP_INT4};
	enum { DIM = 13 };
	uint64_t s = 6;
	float x[DIM], whole[DIM], part[DIM];
	uint8_t enc[128];
	size_t fi;
	uint32_t start, count, i;

	for (i = 0; i < DIM; i++)
		x[i] = (float)((double)(tu_rand(&s) >> 11) * 0x1p-53 * 8.0 - 4.0);
	for (fi = 0; fi < sizeof fmts / sizeof fmts[0]; fi++) {
		kvpi_codec_encode(fmts[fi], enc, x, 1, DIM);
		kvpi_codec_decode(fmts[fi], whole, enc, 1, DIM);
		for (start = 0; start < DIM; start++) {
			for (count = 0; start + count <= DIM; count++) {
				kvpi_codec_decode_range(fmts[fi], part, enc, start, count);
				CHECK(memcmp(part, whole + start, count * sizeof(float)) == 0);
			}
		}
	}
	/* fp32 is bit-exact, NaN payloads included */
	x[3] = kvpi_codec_u2f(0x7fc01234u);
	kvpi_codec_encode(KVP_FP32, enc, x, 1, DIM);
	kvpi_codec_decode(KVP_FP32, whole, enc, 1, DIM);
	CHECK(memcmp(whole, x, sizeof x) == 0);
}

int main(void)
{
	/* positive finite codes: fp16 0x0000..0x7bff (next: 65536), bf16 0x0000..0x7f7f (next
	 * 2^128) */
	table_init(&t16, 10, 15, kvpi_f16_to_f32, 0x7bff, 65536.0, 0x7c00);
	table_init(&tb16, 7, 127, kvpi_bf16_to_f32, 0x7f7f, ldexp(1.0, 128), 0x7f80);
	RUN(test_fp16_every_code_round_trips);
	RUN(test_fp16_matches_reference_rounding);
	RUN(test_fp16_edges);
	RUN(test_fp16_bound);
	RUN(test_bf16_every_code_round_trips);
	RUN(test_bf16_matches_reference_rounding);
	RUN(test_bf16_edges_and_bound);
	RUN(test_quant_bounds);
	RUN(test_quant_edges);
	RUN(test_row_bytes);
	RUN(test_decode_range_slices);
	return 0;
}
