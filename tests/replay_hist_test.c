/*
 * tests/replay_hist_test.c - the latency histogram (stress/hist.c): every
 * value lands in a bucket that holds it, buckets are at most 1/64 wide,
 * percentiles are within that error of the exact order statistics, merge
 * equals recording everything in one histogram.
 */
#include <string.h>

#include "stress/hist.h"
#include "tests/testutil.h"

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

static void test_buckets_hold_their_values(void)
{
	uint64_t s = 7;
	for (int i = 0; i < 1000000; i++) {
		uint64_t v = tu_rand(&s) >> (tu_rand(&s) % 64);
		unsigned b = hist_bucket(v);
		CHECK(b < HIST_BUCKETS);
		CHECK(v <= hist_bucket_high(b));
		CHECK(b == 0 || v > hist_bucket_high(b - 1));
		uint64_t low = b == 0 ? 0 : hist_bucket_high(b - 1) + 1;
		CHECK(hist_bucket_high(b) - low <= low / 64);
	}
	CHECK_EQ(hist_bucket(0), 0);
	CHECK_EQ(hist_bucket(127), 127);
	CHECK(hist_bucket(UINT64_MAX) == HIST_BUCKETS - 1);
	CHECK(hist_bucket_high(HIST_BUCKETS - 1) == UINT64_MAX);
}

static void test_percentiles(void)
{
	static hist h, a, b;
	enum { N = 100000 };
	static uint64_t v[N];
	uint64_t s = 99;
	hist_init(&h);
	hist_init(&a);
	hist_init(&b);
	CHECK_EQ(hist_percentile(&h, 0.5), 0);
	for (int i = 0; i < N; i++) {
		v[i] = 50 + tu_rand(&s) % 1000000; /* 50 ns .. 1 ms */
		hist_record(&h, v[i]);
		hist_record(i % 2 ? &a : &b, v[i]);
	}
	qsort(v, N, sizeof v[0], cmp_u64);
	const double qs[] = {0.5, 0.9, 0.99, 0.999, 1.0};
	for (size_t i = 0; i < sizeof qs / sizeof qs[0]; i++) {
		uint64_t exact = v[(size_t)(qs[i] * N + 0.999999) - 1];
		uint64_t got = hist_percentile(&h, qs[i]);
		CHECK(got >= exact);
		CHECK(got <= exact + exact / 64 + 1);
	}
	CHECK_EQ(h.min, v[0]);
	CHECK_EQ(h.max, v[N - 1]);
	CHECK_EQ(hist_percentile(&h, 1.0), v[N - 1]);
	hist_merge(&a, &b);
	CHECK_EQ(a.count, h.count);
	CHECK_EQ(a.sum, h.sum);
	CHECK_EQ(a.min, h.min);
	CHECK_EQ(a.max, h.max);
	CHECK(memcmp(a.b, h.b, sizeof a.b) == 0);
}

int main(void)
{
	RUN(test_buckets_hold_their_values);
	RUN(test_percentiles);
	return 0;
}
