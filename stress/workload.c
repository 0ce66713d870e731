/*
 * stress/workload.c - built-in workloads (see workload.h).
 *
 * The tables below are the output of
 *     python3 stress/trace_stats.py ../shared/traces --c
 * (quantile knots at the levels of wl_levels).  A quantile table rather
 * than a parametric fit, because the traces are far from any simple shape:
 * Azure conv prompts cluster at ~200, ~400, ~1,000 and ~4,100 tokens, and
 * its outputs at ~100 and ~400.  Prompt and output are drawn independently
 * (their correlation in the traces is not modelled).  Arrival processes:
 * the Azure conv trace's inter-arrival coefficient of variation is 1.09,
 * close to Poisson's 1; Mooncake's conversation trace arrives in batches
 * every 3.000 s whose sizes have mean 10.2 and standard deviation 3.35,
 * close to Poisson(10.2)'s 3.19.  The Vidur arXiv table has no arrival
 * times; its preset borrows the Azure conv rate.
 */
#include "stress/workload.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "stress/util.h"

const double wl_levels[WL_N_KNOTS] = {
    0.0,  0.005, 0.01, 0.025, 0.05, 0.075, 0.10, 0.15, 0.20,  0.25, 0.30,  0.35, 0.40,  0.45,  0.50,
    0.55, 0.60,  0.65, 0.70,  0.75, 0.80,  0.85, 0.90, 0.925, 0.95, 0.975, 0.99, 0.995, 0.999, 1.0};

static const wl_preset presets[] = {
    {
        .name = "azure-conv",
        .source = "AzureLLMInferenceTrace_conv.csv (19,366 requests over 3,501.7 s)",
        .rate = 5.5304,
        .batch_gap_s = 0,
        .prompt_knots = {2.0,    16.8,   29.0,   120.0,  181.0,  200.0,  207.0,  372.0,
                         387.0,  396.0,  403.0,  414.0,  703.0,  984.0,  1020.0, 1045.0,
                         1071.0, 1097.0, 1130.0, 1189.0, 1315.0, 1876.2, 2734.5, 4075.0,
                         4083.0, 4092.0, 4142.0, 4831.0, 6179.1, 14050.0},
        .output_knots = {7.0,   14.0,  16.0,  28.0,  41.0,  48.0,  54.0,  67.0,  77.0,  85.0,
                         91.0,  96.0,  103.0, 113.0, 129.0, 151.0, 177.0, 217.0, 384.0, 395.0,
                         400.0, 411.0, 424.0, 430.0, 451.0, 522.0, 601.0, 643.2, 954.0, 1000.0},
    },
    {
        .name = "mooncake-conv",
        .source = "conversation_trace.jsonl (12,031 requests over 3,537.0 s)",
        .rate = 3.4015,
        .batch_gap_s = 3.0,
        .prompt_knots = {891.0,   893.0,   894.0,   896.0,    901.0,    913.0,   964.0,   1261.0,
                         1662.0,  2306.5,  3263.0,  4251.0,   4993.0,   5870.5,  6909.0,  8186.5,
                         9570.0,  11237.5, 13196.0, 15367.0,  17869.0,  21464.0, 27367.0, 31519.0,
                         39550.5, 58976.8, 85400.4, 100810.3, 121300.9, 126195.0},
        .output_knots = {1.0,   1.0,   3.0,   3.0,   10.0,  17.0,  24.0,   46.0,   100.0,  156.5,
                         213.0, 256.0, 291.0, 322.5, 350.0, 375.0, 399.0,  423.0,  447.0,  472.0,
                         504.0, 543.0, 597.0, 639.0, 698.0, 835.2, 1118.5, 1567.6, 2000.0, 2000.0},
    },
    {
        .name = "arxiv",
        .source = "arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv (28,257 "
                  "requests, no arrival times: Azure conv rate)",
        .rate = 5.5304,
        .batch_gap_s = 0,
        .prompt_knots = {1.0,    31.0,   73.0,   331.0,  748.6,  1019.0, 1242.0, 1564.0,
                         1802.0, 1986.0, 2150.0, 2308.0, 2453.0, 2596.0, 2730.0, 2861.0,
                         2996.0, 3127.0, 3249.0, 3370.0, 3490.0, 3597.0, 3702.0, 3759.0,
                         3813.0, 3876.0, 3933.4, 3963.0, 4011.7, 4054.0},
        .output_knots = {5.0,   29.3,  36.0,  48.0,  60.0,  70.0,   78.0,   92.0,   104.0,  115.0,
                         125.0, 135.0, 145.0, 156.0, 167.0, 179.0,  192.0,  206.0,  222.0,  242.0,
                         268.0, 304.0, 372.0, 438.0, 736.2, 2506.8, 3271.3, 3582.4, 3844.5, 4056.0},
    },
};

const wl_preset *wl_find(const char *name)
{
	for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
		if (strcmp(presets[i].name, name) == 0)
			return &presets[i];
	}
	return NULL;
}

const char *wl_names(void)
{
	return "azure-conv, mooncake-conv, arxiv";
}

double wl_sample(const double *knots, double u)
{
	size_t lo = 0, hi = WL_N_KNOTS - 1;
	if (u <= 0)
		return knots[0];
	if (u >= 1)
		return knots[WL_N_KNOTS - 1];
	while (hi - lo > 1) { /* wl_levels[lo] <= u < wl_levels[hi] */
		size_t mid = (lo + hi) / 2;
		if (wl_levels[mid] <= u)
			lo = mid;
		else
			hi = mid;
	}
	double f = (u - wl_levels[lo]) / (wl_levels[hi] - wl_levels[lo]);
	return knots[lo] + (knots[hi] - knots[lo]) * f;
}

double wl_mean(const double *knots)
{
	double m = 0;
	for (size_t i = 0; i + 1 < WL_N_KNOTS; i++)
		m += (wl_levels[i + 1] - wl_levels[i]) * (knots[i] + knots[i + 1]) / 2;
	return m;
}

/* Knuth's method; fine for the small means used here. */
static unsigned poisson(uint64_t *rng, double mean)
{
	double l = exp(-mean), p = 1.0;
	unsigned k = 0;
	do {
		k++;
		p *= su_rand_unit(rng);
	} while (p > l && k < 10000);
	return k - 1;
}

int wl_generate(const wl_preset *p, double rate, size_t n, uint64_t seed, trace *out)
{
	memset(out, 0, sizeof *out);
	if (n == 0)
		return 0;
	out->req = calloc(n, sizeof *out->req); /* no hash ids: zeros */
	if (out->req == NULL)
		return -1;
	out->cap = n;
	out->format = TRACE_AUTO;
	if (rate <= 0)
		rate = p->rate;
	uint64_t rng = seed ^ 0x6b76706f6f6cull; /* "kvpool" */
	double t = 0;
	size_t i = 0;
	while (i < n) {
		unsigned burst = 1;
		if (p->batch_gap_s > 0) {
			burst = poisson(&rng, rate * p->batch_gap_s);
		} else {
			t += -log(1.0 - su_rand_unit(&rng)) / rate;
		}
		for (unsigned b = 0; b < burst && i < n; b++, i++) {
			double pr = floor(wl_sample(p->prompt_knots, su_rand_unit(&rng)) + 0.5);
			double ou = floor(wl_sample(p->output_knots, su_rand_unit(&rng)) + 0.5);
			out->req[i].arrival_ns = (uint64_t)(t * 1e9);
			out->req[i].prompt = pr < 1 ? 1 : (uint32_t)pr;
			out->req[i].output = ou < 0 ? 0 : (uint32_t)ou;
		}
		if (p->batch_gap_s > 0)
			t += p->batch_gap_s;
	}
	out->n = n;
	return 0;
}
