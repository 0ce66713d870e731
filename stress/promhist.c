/*
 * stress/promhist.c - the Prometheus latency histogram (stress/promhist.h).
 */
#include "stress/promhist.h"

static const uint64_t bound_ns[PROMHIST_N] = {
    100,   250,    500,    1000,   2500,    5000,     10000,    25000,
    50000, 100000, 250000, 500000, 1000000, 10000000, 50000000, 100000000,
};

void promhist_observe(promhist *h, uint64_t ns)
{
	unsigned i = 0;
	while (i < PROMHIST_N && ns > bound_ns[i])
		i++;
	/* relaxed: independent counters, read as statistics; nothing is ordered by them. */
	atomic_fetch_add_explicit(&h->b[i], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&h->sum_ns, ns, memory_order_relaxed);
}

void mtext_promhist(mtext *t, const char *name, const char *help, promhist *h)
{
	mtext_printf(t, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
	uint64_t cum = 0;
	for (unsigned i = 0; i <= PROMHIST_N; i++) {
		cum += atomic_load_explicit(&h->b[i], memory_order_relaxed);
		if (i < PROMHIST_N)
			mtext_printf(t, "%s_bucket{le=\"%g\"} %llu\n", name,
			             (double)bound_ns[i] / 1e9, (unsigned long long)cum);
		else
			mtext_printf(t, "%s_bucket{le=\"+Inf\"} %llu\n", name,
			             (unsigned long long)cum);
	}
	double sum = (double)atomic_load_explicit(&h->sum_ns, memory_order_relaxed) / 1e9;
	mtext_printf(t, "%s_sum %.9f\n%s_count %llu\n", name, sum, name, (unsigned long long)cum);
}
