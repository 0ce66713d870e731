/*
 * tests/replay_workload_test.c - the built-in workloads of kvpool_replay
 * (stress/workload.c) follow the statistics they claim: lengths within the
 * trace's range with the table's mean and median, arrival rate and (for
 * Mooncake) the batch period, and the same seed gives the same requests.
 */
#include <math.h>
#include <string.h>

#include "stress/workload.h"
#include "tests/testutil.h"

#define N 200000

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return (x > y) - (x < y);
}

static void check_lengths(const wl_preset *p, const trace *t, int output)
{
	const double *knots = output ? p->output_knots : p->prompt_knots;
	static uint32_t v[N];
	double sum = 0;
	for (size_t i = 0; i < t->n; i++) {
		v[i] = output ? t->req[i].output : t->req[i].prompt;
		sum += v[i];
		CHECK(v[i] >= floor(knots[0]) && v[i] <= ceil(knots[WL_N_KNOTS - 1]));
	}
	double mean = sum / (double)t->n, want = wl_mean(knots);
	if (fabs(mean - want) > 0.02 * want) {
		fprintf(stderr, "%s %s mean %.1f, table %.1f\n", p->name,
		        output ? "output" : "prompt", mean, want);
		CHECK(0);
	}
	qsort(v, t->n, sizeof v[0], cmp_u32);
	double median = v[t->n / 2], want_med = knots[14]; /* level 0.50 */
	CHECK(fabs(median - want_med) <= 0.03 * want_med + 1);
}

static void test_preset(const char *name)
{
	const wl_preset *p = wl_find(name);
	CHECK(p != NULL);
	CHECK(wl_levels[14] == 0.5);
	trace t;
	CHECK_EQ(wl_generate(p, 0, N, 42, &t), 0);
	CHECK_EQ(t.n, N);
	check_lengths(p, &t, 0);
	check_lengths(p, &t, 1);
	double span = (double)t.req[N - 1].arrival_ns / 1e9;
	double rate = N / span;
	CHECK(fabs(rate - p->rate) < 0.02 * p->rate);
	for (size_t i = 1; i < t.n; i++)
		CHECK(t.req[i].arrival_ns >= t.req[i - 1].arrival_ns);
	if (p->batch_gap_s > 0) {
		/* Every arrival lies on the batch grid. */
		for (size_t i = 0; i < t.n; i += 97) {
			double k = (double)t.req[i].arrival_ns / 1e9 / p->batch_gap_s;
			CHECK(fabs(k - floor(k + 0.5)) < 1e-6);
		}
	}
	trace u;
	CHECK_EQ(wl_generate(p, 0, N, 42, &u), 0);
	CHECK(memcmp(t.req, u.req, N * sizeof *t.req) == 0);
	trace_free(&u);
	CHECK_EQ(wl_generate(p, 0, N, 43, &u), 0);
	CHECK(memcmp(t.req, u.req, N * sizeof *t.req) != 0);
	trace_free(&u);
	trace_free(&t);
}

static void test_azure_conv(void)
{
	test_preset("azure-conv");
}

static void test_mooncake_conv(void)
{
	test_preset("mooncake-conv");
}

static void test_arxiv(void)
{
	test_preset("arxiv");
}

static void test_rate_override_and_unknown(void)
{
	trace t;
	CHECK_EQ(wl_generate(wl_find("azure-conv"), 100.0, 20000, 1, &t), 0);
	double rate = 20000 / ((double)t.req[19999].arrival_ns / 1e9);
	CHECK(fabs(rate - 100.0) < 4.0);
	trace_free(&t);
	CHECK(wl_find("nope") == NULL);
	/* The sampler hits the knots at their levels. */
	const double *k = wl_find("azure-conv")->prompt_knots;
	CHECK(wl_sample(k, 0.0) == k[0]);
	CHECK(fabs(wl_sample(k, 0.5) - k[14]) < 1e-9);
	CHECK(wl_sample(k, 0.9999999) <= k[WL_N_KNOTS - 1]);
}

int main(void)
{
	RUN(test_azure_conv);
	RUN(test_mooncake_conv);
	RUN(test_arxiv);
	RUN(test_rate_override_and_unknown);
	return 0;
}
