/*
 * bench/suite/stats.c - benchmark 6: what a metrics scraper costs the hot
 * path.  Full-API get/put throughput at several thread counts, without and
 * with a second thread calling kvp_pool_stats every millisecond (the
 * reader runs through the warm-up and every repetition of its case).  A
 * control thread that wakes every millisecond and calls nothing separates
 * what the stats call costs from what a third runnable thread costs the
 * scheduler on a machine with few cores.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>

#include "bench/suite/cases.h"
#include "bench/suite/suite.h"

#define BENCH "stats"

typedef struct reader {
	pthread_t th;
	kvp_pool *kv;
	int call_stats; /* 0: the control thread, which only sleeps */
	atomic_int stop;
	uint64_t reads;
	double sum_s, max_s;
	int failed;
} reader;

static void *reader_main(void *arg)
{
	reader *r = arg;
	struct timespec ms = {0, 1000000};

	while (!atomic_load_explicit(&r->stop, memory_order_relaxed)) {
		kvp_stats st;
		if (!r->call_stats) {
			nanosleep(&ms, NULL);
			continue;
		}
		double t0 = kvb_now(), dt;
		int rc = kvp_pool_stats(r->kv, &st);
		dt = kvb_now() - t0;
		if (rc != KVP_OK) {
			r->failed = rc;
			break;
		}
		r->reads++;
		r->sum_s += dt;
		if (dt > r->max_s)
			r->max_s = dt;
		nanosleep(&ms, NULL);
	}
	return NULL;
}

static const char *mode[3] = {"no_stats_reader", "sleeper_every_1ms", "stats_every_1ms"};

/*
 * Full-API get/put on @threads threads with mode @m's background thread
 * (none, the sleeper, or @rd, the stats reader): ops/s.
 */
static double measure_mode(kvp_pool *kv, int m, int threads, reader *rd, int *bad)
{
	kvb_case c;
	double reps[KVB_MAX_REPS], med;
	char x[32];
	reader ctl = {.kv = kv, .call_stats = 0};
	reader *bg = m == 1 ? &ctl : m == 2 ? rd : NULL;

	if (bg)
		pthread_create(&bg->th, NULL, reader_main, bg);
	kvb_case_kv_full(&c, kv, KVP_K, 1);
	med = kvb_measure(&c, threads, reps);
	kvb_case_free(&c);
	if (bg) {
		atomic_store_explicit(&bg->stop, 1, memory_order_relaxed);
		pthread_join(bg->th, NULL);
		*bad |= bg->failed != 0;
	}
	*bad |= kvb_take_failures() != 0;
	snprintf(x, sizeof(x), "threads=%d", threads);
	kvb_fig(BENCH, mode[m], x, "ops_per_s", med, reps, kvb_opt.reps);
	return med;
}

/* One thread count's row: @v by mode, the ratios, the reader's calls. */
static void report_row(int threads, const double v[3], const reader *rd)
{
	char x[32];
	double mean_us = rd->reads ? rd->sum_s / (double)rd->reads * 1e6 : 0;
	snprintf(x, sizeof(x), "threads=%d", threads);
	kvb_fig(BENCH, "stats_every_1ms", x, "ratio_vs_no_reader", v[2] / v[0], NULL, 0);
	kvb_fig(BENCH, "stats_every_1ms", x, "ratio_vs_sleeper", v[2] / v[1], NULL, 0);
	kvb_fig(BENCH, "stats_every_1ms", x, "stats_reads", (double)rd->reads, NULL, 0);
	kvb_fig(BENCH, "stats_every_1ms", x, "stats_call_mean_us", mean_us, NULL, 0);
	kvb_fig(BENCH, "stats_every_1ms", x, "stats_call_max_us", rd->max_s * 1e6, NULL, 0);
	printf("%-10d %11s %11s %11s %12.3fx %12.3fx %9llu %9.2f\n", threads,
	       kvb_si(v[0], (char[16]){0}, 16), kvb_si(v[1], (char[16]){0}, 16),
	       kvb_si(v[2], (char[16]){0}, 16), v[2] / v[0], v[2] / v[1],
	       (unsigned long long)rd->reads, mean_us);
}

int kvb_bench_stats(void)
{
	kvp_pool_config cfg;
	kvp_pool *kv;
	int thr[3], n_thr = 0, bad = 0;

	kvb_heading("6. stats cost: kvp_pool_stats every 1 ms from another thread, vs none and vs "
	            "a thread that only sleeps");
	thr[n_thr++] = 1;
	thr[n_thr++] = 2;
	if (!kvb_opt.smoke)
		thr[n_thr++] = 8;
	kvp_pool_config_init(&cfg);
	cfg.block_size = KVB_BLOCK_SIZE;
	cfg.n_blocks = 1u << 17;
	if (kvp_pool_create(&cfg, &kv) != KVP_OK)
		return 1;
	printf("%-10s %11s %11s %11s %13s %13s %9s %9s\n", "threads", "no thread", "sleeper",
	       "reader", "reader/none", "reader/sleep", "reads", "mean us");
	for (int t = 0; t < n_thr; t++) {
		reader rd = {.kv = kv, .call_stats = 1};
		double v[3];
		for (int m = 0; m < 3; m++)
			v[m] = measure_mode(kv, m, thr[t], &rd, &bad);
		report_row(thr[t], v, &rd);
	}
	kvp_pool_destroy(kv);
	(void)errno;
	return bad;
}
