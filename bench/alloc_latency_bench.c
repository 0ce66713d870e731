/*
 * bench/alloc_latency_bench.c - what the library's sampled allocate latency
 * histogram costs kvp_allocate, measured in one run.
 *
 *   bazel run //bench:alloc_latency_bench [-- ROUNDS CALLS]
 *
 * One thread, one pool of 1024 16-token blocks: a call of kvp_allocate (one
 * block, or 7 blocks: 100 tokens) and kvp_free_all per request, the fast
 * path a decode step takes.  Three settings of the sampling mask
 * (lib/testing/latency.h): off (the baseline), the default (one call in 1024
 * timed) and every call timed.  The settings take turns for ROUNDS rounds
 * (default 15) of CALLS requests each (default 200000), so machine noise
 * falls on all three alike; for each setting the median round's CPU ns per
 * request is printed with its ratio to the baseline of the same run.
 */
#include <kvpool/kvpool.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench/clock.h"
#include "lib/testing/latency.h"

#define MAX_ROUNDS 101

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* CPU ns per request of @calls allocate + free_all of @tokens. */
static double round_ns(kvp_pool *p, uint32_t tokens, long calls)
{
	kvp_ref refs[8];
	size_t n;
	double t0 = kvb_cpu_seconds();
	for (long i = 0; i < calls; i++) {
		if (kvp_allocate(p, KVP_K, tokens, 1, KVP_FP16, refs, 8, &n) != KVP_OK ||
		    kvp_free_all(p, 1) != KVP_OK) {
			fprintf(stderr, "alloc_latency_bench: a call failed\n");
			exit(1);
		}
	}
	return (kvb_cpu_seconds() - t0) * 1e9 / (double)calls;
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 15;
	long calls = argc > 2 ? atol(argv[2]) : 200000;
	if (rounds < 1 || rounds > MAX_ROUNDS || calls < 1) {
		fprintf(stderr, "usage: alloc_latency_bench [ROUNDS (1..%d) [CALLS (>= 1)]]\n",
		        MAX_ROUNDS);
		return 2;
	}
	static const struct {
		const char *name;
		uint32_t mask;
	} set[3] = {{"off (baseline)", UINT32_MAX},
	            {"1 in 1024 (default)", KVPI_LAT_EVERY - 1},
	            {"every call", 0}};
	static const uint32_t tokens[2] = {16, 100};
	kvp_pool *p;
	if (kvp_pool_create(NULL, &p) != KVP_OK)
		return 1;
	printf("alloc_latency_bench: kvp_allocate + kvp_free_all, one thread, %d rounds of %ld "
	       "requests, settings in turn; median CPU ns per request (shared machine: noisy)\n",
	       rounds, calls);
	for (int t = 0; t < 2; t++) {
		static double ns[3][MAX_ROUNDS];
		round_ns(p, tokens[t], calls); /* warm-up */
		for (int r = 0; r < rounds; r++)
			for (int s = 0; s < 3; s++) {
				kvpi_lat_set_mask(set[s].mask);
				ns[s][r] = round_ns(p, tokens[t], calls);
			}
		printf("%u tokens (%u block%s) per request:\n", tokens[t], (tokens[t] + 15) / 16,
		       tokens[t] > 16 ? "s" : "");
		double base = 0;
		for (int s = 0; s < 3; s++) {
			qsort(ns[s], (size_t)rounds, sizeof(double), cmp_double);
			double med = ns[s][rounds / 2];
			if (s == 0)
				base = med;
			printf("  %-18s %7.1f ns  %.3fx\n", set[s].name, med, med / base);
		}
	}
	kvpi_lat_set_mask(KVPI_LAT_EVERY - 1);
	kvp_pool_destroy(p);
	return 0;
}
