/*
 * bench/suite/scaling.c - benchmark 4: does anything get slower or fatter
 * as the pool grows from 1e3 to 1e7 blocks?  Plus growth under load and
 * shrink latency.
 *
 * Per pool size n (one stream, separate_kv off), single thread:
 *   metadata  heap bytes (mallinfo2: the larger of right after create and
 *             after every block was handed out and freed once, so lazily
 *             made tables count) and resident bytes (VmRSS, after that
 *             fill) the pool added, per block.  RSS is page-grained and
 *             reuses freed heap: meaningful from 1e5 blocks up;
 *   hot       one block allocated + freed per op (the per-thread cache path);
 *   churn     n/2 blocks held; each op frees a random held block and
 *             allocates one in its place: random metadata, the cache-miss
 *             case (the mutex pool runs the same loop as a yardstick);
 *   fill      n allocations then n frees, one pass (reported, not judged).
 * Growth: a pool of 1024 blocks with grow_on_exhaustion, two threads
 * allocating until it holds GROW_TO blocks; latency of every call and the
 * time at which each doubling happened, against the same allocations from
 * a pool created at full size.
 * Shrink: kvp_shrink latency retiring 1e3 and then 1e5 free blocks of a
 * 1e6-block pool, idle and with a thread allocating and freeing meanwhile.
 * Drain: the latency of a one-block kvp_alloc_block that finds its own
 * magazine and the global stack empty while DRAIN_PARKERS idle threads hold
 * free blocks in their magazines, so it must drain them (no false
 * exhaustion); p50/p99 over many rounds, for the default (membarrier) pool
 * and a pool created with KVPOOL_FORCE_FALLBACK=1.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/suite/cases.h"
#include "bench/suite/suite.h"
#include "lib/testing/pool_peek.h"

#define BENCH     "scaling"
#define MAX_SIZES 5

/* --- churn case ----------------------------------------------------------- */

typedef struct churn {
	kvp_pool *kv;
	mpool *mp;
	bool full; /* kvpool through kvp_free + kvp_allocate with an owner */
	kvp_owner owner;
	uint64_t *held;
	size_t n_held;
	uint64_t rng;
} churn;

static uint64_t churn_run(void *ctx, void *tls, int tid, const atomic_int *stop)
{
	churn *c = ctx;
	uint64_t ops = 0, x = c->rng;
	size_t n;
	int rc;

	(void)tls, (void)tid;
	KVB_LOOP(stop, ops, {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		uint64_t *h = &c->held[x % c->n_held];
		if (c->mp) {
			rc = mpool_free(c->mp, h, 1);
			if (!rc)
				rc = mpool_allocate(c->mp, KVB_BLOCK_SIZE, c->owner, h, 1, &n);
		} else if (c->full) {
			rc = kvp_free(c->kv, h, 1);
			if (!rc)
				rc = kvp_allocate(c->kv, KVP_KV, KVB_BLOCK_SIZE, c->owner, KVP_FP16,
				                  h, 1, &n);
		} else {
			rc = kvp_free_block(c->kv, *h);
			if (!rc)
				rc = kvp_alloc_block(c->kv, KVP_KV, KVP_FP16, h);
		}
		if (rc) {
			kvb_fail("churn", rc);
			return ops;
		}
	});
	c->rng = x;
	return ops;
}

/* Hold n/2 blocks in @c (full: owned by c->owner). */
static int churn_fill(churn *c, size_t n_hold)
{
	size_t n;

	c->n_held = n_hold;
	c->rng = 0x9e3779b97f4a7c15ull;
	for (size_t i = 0; i < n_hold; i++) {
		int rc = c->mp ? mpool_allocate(c->mp, KVB_BLOCK_SIZE, c->owner, &c->held[i], 1, &n)
		         : c->full ? kvp_allocate(c->kv, KVP_KV, KVB_BLOCK_SIZE, c->owner, KVP_FP16,
		                                  &c->held[i], 1, &n)
		                   : kvp_alloc_block(c->kv, KVP_KV, KVP_FP16, &c->held[i]);
		if (rc)
			return rc;
	}
	return 0;
}

static int churn_drain(churn *c)
{
	int rc =
	    c->mp ? mpool_free(c->mp, c->held, c->n_held) : kvp_free(c->kv, c->held, c->n_held);
	c->n_held = 0;
	return rc;
}

/* --- per-size measurements ------------------------------------------------ */

enum {
	R_KV_HOT_FULL,
	R_KV_HOT_RAW,
	R_MP_HOT,
	R_KV_CHURN_FULL,
	R_KV_CHURN_RAW,
	R_MP_CHURN,
	R_KV_FILL,
	R_KV_META_HEAP,
	R_KV_META_RSS,
	R_MP_META_HEAP,
	R_MP_META_RSS,
	NROW
};
static const char *row_name[NROW] = {
    "hot get+put kvpool_full (ops/s)", "hot get+put kvpool_raw (ops/s)",
    "hot get+put mutex_pool (ops/s)",  "churn kvpool_full (ops/s)",
    "churn kvpool_raw (ops/s)",        "churn mutex_pool (ops/s)",
    "fill+drain kvpool_raw (ops/s)",   "kvpool heap bytes/block",
    "kvpool RSS bytes/block",          "mutex_pool heap bytes/block",
    "mutex_pool RSS bytes/block"};
static const char *row_series[NROW] = {"kvpool_full_hot",
                                       "kvpool_raw_hot",
                                       "mutex_pool_hot",
                                       "kvpool_full_churn",
                                       "kvpool_raw_churn",
                                       "mutex_pool_churn",
                                       "kvpool_raw_fill_drain",
                                       "kvpool",
                                       "kvpool",
                                       "mutex_pool",
                                       "mutex_pool"};

static double tab[NROW][MAX_SIZES];

static void put(int row, int si, const char *x, double med, const double *reps, int n)
{
	const char *metric = row >= R_KV_META_HEAP ? (row == R_KV_META_HEAP || row == R_MP_META_HEAP
	                                                  ? "heap_bytes_per_block"
	                                                  : "rss_bytes_per_block")
	                                           : "ops_per_s";
	tab[row][si] = med;
	kvb_fig(BENCH, row_series[row], x, metric, med, reps, n);
}

static int measure_case(int row, int si, const char *x, kvb_case *c)
{
	double reps[KVB_MAX_REPS];
	double med = kvb_measure(c, 1, reps);

	if (kvb_take_failures())
		return 1;
	put(row, si, x, med, reps, kvb_opt.reps);
	return 0;
}

static size_t max_sz(size_t a, size_t b)
{
	return a > b ? a : b;
}

/*
 * kvpool at @n blocks: metadata, fill/drain, hot and churn loops (column
 * @si).  Returns 0, 1 when a call failed or blocks leaked, -1 when the pool
 * cannot be created.
 */
static int kv_size(uint32_t n, int si, const char *x, uint64_t *held)
{
	kvp_pool_config cfg;
	kvp_pool *kv = NULL;
	size_t heap0, rss0, heap1;
	kvb_case c;
	int bad = 0;
	double t0;

	kvp_pool_config_init(&cfg);
	cfg.block_size = KVB_BLOCK_SIZE;
	cfg.separate_kv = false;
	cfg.n_blocks = n;

	/* kvpool metadata, then a fill/drain pass that touches every block. */
	heap0 = kvb_heap_bytes(), rss0 = kvb_rss_bytes();
	if (kvp_pool_create(&cfg, &kv) != KVP_OK)
		return -1;
	heap1 = kvb_heap_bytes();
	t0 = kvb_now();
	for (uint32_t i = 0; i < n && !bad; i++)
		bad = kvp_alloc_block(kv, KVP_KV, KVP_FP16, &held[i]) != KVP_OK;
	bad = bad || kvp_free(kv, held, n) != KVP_OK;
	put(R_KV_FILL, si, x, 2.0 * n / (kvb_now() - t0), NULL, 0);
	heap1 = max_sz(heap1, kvb_heap_bytes());
	put(R_KV_META_HEAP, si, x, (double)(heap1 - heap0) / n, NULL, 0);
	put(R_KV_META_RSS, si, x, ((double)kvb_rss_bytes() - (double)rss0) / n, NULL, 0);

	kvb_case_kv_full(&c, kv, KVP_KV, 1);
	bad |= measure_case(R_KV_HOT_FULL, si, x, &c);
	kvb_case_free(&c);
	kvb_case_kv_raw(&c, kv, KVP_KV);
	bad |= measure_case(R_KV_HOT_RAW, si, x, &c);
	kvb_case_free(&c);
	for (int full = 0; full < 2 && !bad; full++) {
		churn ch = {.kv = kv, .full = full, .owner = kvb_new_owner(), .held = held};
		c = (kvb_case){.run = churn_run, .ctx = &ch};
		if (churn_fill(&ch, n / 2) != 0) {
			bad = 1;
			break;
		}
		bad |= measure_case(full ? R_KV_CHURN_FULL : R_KV_CHURN_RAW, si, x, &c);
		bad |= churn_drain(&ch) != KVP_OK;
	}
	if (kvp_n_free(kv, KVP_KV) != n) {
		printf("  LEAK: kvpool %zu of %u free\n", kvp_n_free(kv, KVP_KV), n);
		bad = 1;
	}
	kvp_pool_destroy(kv);
	return bad;
}

/* The mutex pool at @n blocks: same metadata accounting and loops. */
static int mp_size(uint32_t n, int si, const char *x, uint64_t *held)
{
	mpool *mp = NULL;
	size_t heap0, rss0, heap1;
	kvb_case c;
	int bad = 0;

	heap0 = kvb_heap_bytes(), rss0 = kvb_rss_bytes();
	if (mpool_create(KVB_BLOCK_SIZE, n, &mp) != 0)
		return 1;
	heap1 = kvb_heap_bytes();
	{
		churn ch = {.mp = mp, .owner = kvb_new_owner(), .held = held};
		bad |= churn_fill(&ch, n) != 0;
		bad |= churn_drain(&ch) != 0;
	}
	heap1 = max_sz(heap1, kvb_heap_bytes());
	put(R_MP_META_HEAP, si, x, (double)(heap1 - heap0) / n, NULL, 0);
	put(R_MP_META_RSS, si, x, ((double)kvb_rss_bytes() - (double)rss0) / n, NULL, 0);
	kvb_case_mutex(&c, mp, 1, false);
	bad |= measure_case(R_MP_HOT, si, x, &c);
	kvb_case_free(&c);
	{
		churn ch = {.mp = mp, .owner = kvb_new_owner(), .held = held};
		c = (kvb_case){.run = churn_run, .ctx = &ch};
		bad |= churn_fill(&ch, n / 2) != 0;
		bad |= measure_case(R_MP_CHURN, si, x, &c);
		bad |= churn_drain(&ch) != 0;
	}
	bad |= mpool_n_free(mp) != n;
	mpool_destroy(mp);
	return bad;
}

static int one_size(uint32_t n, int si, uint64_t *held)
{
	char x[32];
	int bad;

	snprintf(x, sizeof(x), "blocks=%u", n);
	bad = kv_size(n, si, x, held);
	if (bad < 0)
		return 1;
	return bad | mp_size(n, si, x, held);
}

/* --- growth ----------------------------------------------------------------- */

typedef struct grow_thread {
	pthread_t th;
	kvp_pool *kv;
	uint32_t n_calls;
	float *lat_ns;
	double *doubling_at; /* thread 0 only: time each power of two was reached */
	double t0;
	int failed;
} grow_thread;

static void *grow_main(void *arg)
{
	grow_thread *g = arg;
	uint32_t next_pow = 2048;
	kvp_ref ref;

	for (uint32_t i = 0; i < g->n_calls; i++) {
		double a = kvb_now();
		int rc = kvp_alloc_block(g->kv, KVP_KV, KVP_FP16, &ref);
		double b = kvb_now();
		if (rc != KVP_OK) {
			g->failed = rc;
			return NULL;
		}
		g->lat_ns[i] = (float)((b - a) * 1e9);
		if (g->doubling_at && kvp_pool_n_ids(g->kv) >= next_pow) {
			for (int k = 0; k < 32; k++)
				if ((2048u << k) == next_pow)
					g->doubling_at[k] = b - g->t0;
			next_pow *= 2;
		}
	}
	return NULL;
}

/* One growth run (or pre-sized when @presized); returns seconds, fills @lat. */
static double grow_run(uint32_t grow_to, bool presized, float *lat, double *doubling_at,
                       uint64_t *n_grown)
{
	kvp_pool_config cfg;
	kvp_pool *kv;
	grow_thread g[2];
	double t0, t1;
	kvp_stats st;

	kvp_pool_config_init(&cfg);
	cfg.block_size = KVB_BLOCK_SIZE;
	cfg.separate_kv = false;
	cfg.n_blocks = presized ? grow_to : 1024;
	cfg.grow_on_exhaustion = true;
	if (kvp_pool_create(&cfg, &kv) != KVP_OK)
		return -1;
	t0 = kvb_now();
	for (int i = 0; i < 2; i++) {
		g[i] = (grow_thread){.kv = kv,
		                     .n_calls = grow_to / 2,
		                     .lat_ns = lat + i * (grow_to / 2),
		                     .doubling_at = i == 0 ? doubling_at : NULL,
		                     .t0 = t0};
		pthread_create(&g[i].th, NULL, grow_main, &g[i]);
	}
	for (int i = 0; i < 2; i++)
		pthread_join(g[i].th, NULL);
	t1 = kvb_now();
	kvp_pool_stats(kv, &st);
	*n_grown = st.n_grown;
	kvp_pool_destroy(kv);
	if (g[0].failed || g[1].failed) {
		kvb_fail("growth alloc", g[0].failed ? g[0].failed : g[1].failed);
		return -1;
	}
	return t1 - t0;
}

static const char *const grow_kind[2] = {"growing_from_1024", "presized"};

/*
 * The reps of growth kind @p (0 growing, 1 presized): allocs/s per rep in
 * @secs, latency percentiles of the last rep's calls in @pct.  Returns 0,
 * or 1 when a run failed.
 */
static int grow_measure(int p, uint32_t grow_to, float *lat, double *all, double *doubling,
                        uint64_t *n_grown, double secs[KVB_MAX_REPS], double pct[4])
{
	static const double ps[4] = {50, 99, 99.9, 100};

	for (int r = 0; r < kvb_opt.reps; r++) {
		uint64_t grown = 0;
		secs[r] = grow_run(grow_to, p == 1, lat, p == 0 ? doubling : NULL, &grown);
		if (p == 0)
			*n_grown = grown;
		if (secs[r] < 0)
			return 1;
	}
	/* Latency percentiles of the last repetition's calls. */
	for (uint32_t i = 0; i < grow_to; i++)
		all[i] = lat[i];
	for (int q = 0; q < 4; q++)
		pct[q] = kvb_percentile(all, grow_to, ps[q]);
	for (int r = 0; r < kvb_opt.reps; r++)
		secs[r] = grow_to / secs[r];
	kvb_fig(BENCH, grow_kind[p], "", "allocs_per_s", kvb_median(secs, kvb_opt.reps), secs,
	        kvb_opt.reps);
	kvb_fig(BENCH, grow_kind[p], "", "latency_p50_ns", pct[0], NULL, 0);
	kvb_fig(BENCH, grow_kind[p], "", "latency_p99_ns", pct[1], NULL, 0);
	kvb_fig(BENCH, grow_kind[p], "", "latency_p99.9_ns", pct[2], NULL, 0);
	kvb_fig(BENCH, grow_kind[p], "", "latency_max_ns", pct[3], NULL, 0);
	return 0;
}

static void print_growth(uint32_t grow_to, double secs[2][KVB_MAX_REPS], double pct[2][4],
                         const double *doubling, uint64_t n_grown)
{
	double g = kvb_median(secs[0], kvb_opt.reps), s = kvb_median(secs[1], kvb_opt.reps);
	printf("\ngrowth: 2 threads allocate %u blocks one at a time, no frees (median of "
	       "%d)\n",
	       grow_to, kvb_opt.reps);
	printf("%-34s %11s %11s %11s %11s %11s\n", "", "allocs/s", "p50 ns", "p99 ns", "p99.9 ns",
	       "max ns");
	for (int p = 0; p < 2; p++)
		printf("%-34s %11s %11.0f %11.0f %11.0f %11.0f\n", grow_kind[p],
		       kvb_si(p ? s : g, (char[16]){0}, 16), pct[p][0], pct[p][1], pct[p][2],
		       pct[p][3]);
	printf("%-34s %10.2fx   (blocks added by growth: %llu)\n", "growing / presized", g / s,
	       (unsigned long long)n_grown);
	kvb_fig(BENCH, "growing_from_1024", "", "ratio_vs_presized", g / s, NULL, 0);
	kvb_fig(BENCH, "growing_from_1024", "", "blocks_grown", (double)n_grown, NULL, 0);
	printf("doublings (ms since start, last rep):");
	for (int k = 0; k < 32; k++) {
		char x[32];
		if (doubling[k] != doubling[k])
			continue;
		printf(" %u:%.2f", 2048u << k, doubling[k] * 1e3);
		snprintf(x, sizeof(x), "blocks=%u", 2048u << k);
		kvb_fig(BENCH, "growing_from_1024", x, "reached_at_ms", doubling[k] * 1e3, NULL, 0);
	}
	printf("\n");
}

static int growth(void)
{
	uint32_t grow_to = kvb_opt.smoke ? 1u << 14 : 1u << 20;
	float *lat = malloc((size_t)grow_to * sizeof(float));
	double *all = malloc((size_t)grow_to * sizeof(double));
	double secs[2][KVB_MAX_REPS], doubling[32], pct[2][4];
	uint64_t n_grown = 0;
	int bad = 0;

	if (!lat || !all) {
		free(lat), free(all);
		return 1;
	}
	for (int k = 0; k < 32; k++)
		doubling[k] = KVB_NA;
	for (int p = 0; p < 2 && !bad; p++)
		bad = grow_measure(p, grow_to, lat, all, doubling, &n_grown, secs[p], pct[p]);
	if (!bad)
		print_growth(grow_to, secs, pct, doubling, n_grown);
	free(lat);
	free(all);
	return bad;
}

/* --- shrink ----------------------------------------------------------------- */

typedef struct loader {
	pthread_t th;
	kvp_pool *kv;
	atomic_int stop;
	uint64_t ops;
	int failed;
} loader;

static void *load_main(void *arg)
{
	loader *l = arg;
	kvp_ref ref;

	while (!atomic_load_explicit(&l->stop, memory_order_relaxed)) {
		int rc = kvp_alloc_block(l->kv, KVP_KV, KVP_FP16, &ref);
		if (rc == KVP_OK)
			rc = kvp_free_block(l->kv, ref);
		if (rc != KVP_OK) {
			l->failed = rc;
			break;
		}
		l->ops++;
	}
	return NULL;
}

static int shrink(void)
{
	uint32_t n = kvb_opt.smoke ? 10000 : 1000000;
	uint32_t xs[2] = {1000, kvb_opt.smoke ? 5000 : 100000};
	double lat[2][2][KVB_MAX_REPS];
	const char *mode[2] = {"idle", "under_load"};
	int bad = 0;

	for (int m = 0; m < 2; m++) {
		for (int r = 0; r < kvb_opt.reps; r++) {
			kvp_pool_config cfg;
			kvp_pool *kv;
			loader l = {0};

			kvp_pool_config_init(&cfg);
			cfg.block_size = KVB_BLOCK_SIZE;
			cfg.separate_kv = false;
			cfg.n_blocks = n;
			if (kvp_pool_create(&cfg, &kv) != KVP_OK)
				return 1;
			l.kv = kv;
			if (m == 1)
				pthread_create(&l.th, NULL, load_main, &l);
			for (int k = 0; k < 2; k++) {
				uint32_t retired = 0;
				size_t nf = kvp_n_free(kv, KVP_KV);
				uint32_t target = nf > xs[k] ? (uint32_t)(nf - xs[k]) : 0;
				double t0 = kvb_now();
				int rc = kvp_shrink(kv, KVP_KV, target, &retired);
				lat[m][k][r] = kvb_now() - t0;
				if (rc != KVP_OK || retired == 0) {
					kvb_fail("kvp_shrink", rc);
					bad = 1;
				}
			}
			if (m == 1) {
				atomic_store_explicit(&l.stop, 1, memory_order_relaxed);
				pthread_join(l.th, NULL);
				bad |= l.failed != 0;
			}
			kvp_pool_destroy(kv);
		}
	}
	printf("\nshrink: kvp_shrink retiring X free blocks of a %u-block pool (median of %d)\n", n,
	       kvb_opt.reps);
	printf("%-34s %11s %11s %11s %11s\n", "", "X", "ms", "ns/block", "");
	for (int m = 0; m < 2; m++)
		for (int k = 0; k < 2; k++) {
			char x[32];
			double med = kvb_median(lat[m][k], kvb_opt.reps);
			printf("%-34s %11u %11.3f %11.1f\n", mode[m], xs[k], med * 1e3,
			       med * 1e9 / xs[k]);
			snprintf(x, sizeof(x), "retire=%u", xs[k]);
			kvb_fig(BENCH, mode[m], x, "shrink_latency_ms", med * 1e3, NULL, 0);
			for (int r = 0; r < kvb_opt.reps; r++)
				lat[m][k][r] *= 1e3;
			kvb_fig(BENCH, mode[m], x, "shrink_latency_ms_reps", med * 1e3, lat[m][k],
			        kvb_opt.reps);
		}
	return bad;
}

/* --- drain under exhaustion --------------------------------------------- */

#define DRAIN_PARKERS 4
#define DRAIN_BLOCKS  512 /* one stream */

typedef struct parker {
	pthread_t th;
	kvp_pool *kv;
	pthread_barrier_t *bar;
	atomic_int *stop;
	int failed;
} parker;

/* Each round: allocate and free 32 blocks (its magazine ends up holding
 * them), then stay idle, outside any pool call, while the main thread
 * measures. */
static void *park_main(void *arg)
{
	parker *pk = arg;
	kvp_ref r[32];

	for (;;) {
		pthread_barrier_wait(pk->bar);
		if (atomic_load(pk->stop))
			return NULL;
		for (int i = 0; i < 32; i++)
			if (kvp_alloc_block(pk->kv, KVP_KV, KVP_FP16, &r[i]) != KVP_OK)
				pk->failed = 1;
		for (int i = 0; i < 32 && !pk->failed; i++)
			kvp_free_block(pk->kv, r[i]);
		pthread_barrier_wait(pk->bar);
	}
}

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/*
 * One round: once the parkers have filled their magazines and gone idle,
 * empty the global stack and this thread's magazine into @held, then time
 * one kvp_alloc_block, which must drain a parker.  Returns 0, or 1.
 */
static int drain_round(kvp_pool *kv, pthread_barrier_t *bar, kvp_ref *held, struct kvpi_tslot **me,
                       double *lat_ns, double *parked)
{
	size_t nh = 0;
	kvp_ref r;
	int bad = 0;

	pthread_barrier_wait(bar); /* parkers fill their magazines */
	pthread_barrier_wait(bar); /* and are idle now */
	/* Empty the global stack and our own magazine. */
	for (;;) {
		if (!*me)
			*me = kvpi_tslot_get_slow(kv); /* not the inline one: its TLS head is
			                                internal to the library */
		uint32_t mine = atomic_load(&(*me)->mag[0].count);
		if (atomic_load(&kv->fs[0].avail) <= 0 && mine == 0)
			break;
		if (nh == DRAIN_BLOCKS || kvp_alloc_block(kv, KVP_KV, KVP_FP16, &held[nh]))
			break;
		nh++;
	}
	*parked += (double)kvp_n_free(kv, KVP_KV);
	double t0 = kvb_now();
	int rc = kvp_alloc_block(kv, KVP_KV, KVP_FP16, &r);
	*lat_ns = (kvb_now() - t0) * 1e9;
	if (rc != KVP_OK) {
		kvb_fail("kvp_alloc_block (drain)", rc);
		bad = 1;
	} else {
		held[nh++] = r;
	}
	if (kvp_free(kv, held, nh) != KVP_OK)
		bad = 1;
	return bad;
}

/* A DRAIN_BLOCKS pool, made in @fallback mode (KVPOOL_FORCE_FALLBACK=1) or not. */
static int drain_pool(bool fallback, kvp_pool **kv)
{
	kvp_pool_config cfg;

	kvp_pool_config_init(&cfg);
	cfg.block_size = KVB_BLOCK_SIZE;
	cfg.separate_kv = false;
	cfg.n_blocks = DRAIN_BLOCKS;
	if (fallback)
		setenv("KVPOOL_FORCE_FALLBACK", "1", 1);
	int rc = kvp_pool_create(&cfg, kv);
	if (fallback)
		unsetenv("KVPOOL_FORCE_FALLBACK");
	return rc;
}

/* p50 and p99 (ns) of a draining allocate on a pool made in @fallback mode. */
static int drain_mode(bool fallback, int rounds, double *p50, double *p99, double *parked_avg)
{
	kvp_pool *kv;
	parker pk[DRAIN_PARKERS];
	pthread_barrier_t bar;
	atomic_int stop = 0;
	double *lat = calloc((size_t)rounds, sizeof(double));
	kvp_ref *held = calloc(DRAIN_BLOCKS, sizeof(kvp_ref));
	int bad = 0;
	double parked = 0;

	int rc = drain_pool(fallback, &kv);
	if (rc != KVP_OK || !lat || !held) {
		free(lat);
		free(held);
		return 1;
	}
	pthread_barrier_init(&bar, NULL, DRAIN_PARKERS + 1);
	for (int t = 0; t < DRAIN_PARKERS; t++) {
		pk[t] = (parker){.kv = kv, .bar = &bar, .stop = &stop};
		pthread_create(&pk[t].th, NULL, park_main, &pk[t]);
	}
	struct kvpi_tslot *me = NULL;
	for (int i = 0; i < rounds && !bad; i++)
		bad = drain_round(kv, &bar, held, &me, &lat[i], &parked);
	atomic_store(&stop, 1);
	pthread_barrier_wait(&bar);
	for (int t = 0; t < DRAIN_PARKERS; t++) {
		pthread_join(pk[t].th, NULL);
		bad |= pk[t].failed;
	}
	pthread_barrier_destroy(&bar);
	if (kvp_n_free(kv, KVP_KV) != DRAIN_BLOCKS)
		bad = 1;
	kvp_pool_destroy(kv);
	qsort(lat, (size_t)rounds, sizeof(double), cmp_dbl);
	*p50 = lat[rounds / 2];
	*p99 = lat[(rounds * 99) / 100];
	*parked_avg = parked / rounds;
	free(lat);
	free(held);
	return bad;
}

static int drain(void)
{
	int rounds = kvb_opt.smoke ? 20 : 400;
	const char *name[2] = {"membarrier", "fallback"};
	int bad = 0;

	printf("\ndrain: one-block kvp_alloc_block that must drain %d idle threads' magazines "
	       "(%d rounds)\n",
	       DRAIN_PARKERS, rounds);
	printf("%-34s %11s %11s %11s\n", "mode", "p50 ns", "p99 ns", "free blocks");
	for (int m = 0; m < 2; m++) {
		double p50 = 0, p99 = 0, parked = 0;
		bad |= drain_mode(m == 1, rounds, &p50, &p99, &parked);
		printf("%-34s %11.0f %11.0f %11.1f\n", name[m], p50, p99, parked);
		kvb_fig(BENCH, name[m], "drain", "drain_alloc_p50_ns", p50, NULL, 0);
		kvb_fig(BENCH, name[m], "drain", "drain_alloc_p99_ns", p99, NULL, 0);
	}
	return bad;
}

/* The pool sizes of the sweep (1e3 .. 10^max_pow10; two small ones in --smoke). */
static int pick_sizes(uint32_t sizes[MAX_SIZES])
{
	int n_sizes = 0;

	if (kvb_opt.smoke) {
		sizes[n_sizes++] = 1000;
		sizes[n_sizes++] = 10000;
	} else {
		static const uint32_t all[4] = {1000, 100000, 1000000, 10000000};
		static const int pow10[4] = {3, 5, 6, 7};
		for (int i = 0; i < 4 && pow10[i] <= kvb_opt.max_pow10; i++)
			sizes[n_sizes++] = all[i];
	}
	return n_sizes;
}

/* The size sweep's table, the largest/smallest ratios and the two targets. */
static void print_sizes(const char *const *colp, int n_sizes)
{
	printf(
	    "\nsingle thread, median of %d x %.2gs; metadata per block (heap: max of at create and "
	    "after touching all; RSS after touching all)\n",
	    kvb_opt.reps, kvb_opt.seconds);
	kvb_row_head("blocks in pool", colp, n_sizes);
	for (int r = 0; r < NROW; r++)
		kvb_row(row_name[r], tab[r], n_sizes, r >= R_KV_META_HEAP ? 'f' : 's');
	printf("\nratio largest / smallest pool (1.0 = flat)\n");
	for (int r = 0; r <= R_KV_FILL && n_sizes > 1; r++) {
		double q = tab[r][n_sizes - 1] / tab[r][0];
		printf("%-34s %10.2fx\n", row_name[r], q);
		kvb_fig(BENCH, row_series[r], "", "ratio_largest_vs_smallest", q, NULL, 0);
	}
	if (n_sizes < 2)
		return;
	for (int r = R_KV_HOT_FULL; r <= R_KV_CHURN_RAW; r++) {
		double slow;
		if (r == R_MP_HOT)
			continue;
		slow = tab[r][0] / tab[r][n_sizes - 1];
		char what[96];
		snprintf(what, sizeof(what), "flat with size: %s, 1e3/largest <= 1.5",
		         row_series[r]);
		kvb_target(BENCH, what, slow, slow <= 1.5);
	}
	double meta = tab[R_KV_META_HEAP][n_sizes - 1];
	if (tab[R_KV_META_RSS][n_sizes - 1] > meta)
		meta = tab[R_KV_META_RSS][n_sizes - 1];
	kvb_target(BENCH, "<= 32 B metadata per block, largest pool (max of heap, RSS)", meta,
	           meta <= 32);
}

int kvb_bench_scaling(void)
{
	uint32_t sizes[MAX_SIZES];
	int n_sizes, bad = 0;
	uint64_t *held;
	char cols[MAX_SIZES][16];
	const char *colp[MAX_SIZES];
	uint32_t max_n = 1;

	kvb_heading("4. scaling with pool size; growth; shrink");
	n_sizes = pick_sizes(sizes);
	for (int i = 0; i < n_sizes; i++)
		if (sizes[i] > max_n)
			max_n = sizes[i];
	held = malloc((size_t)max_n * sizeof(uint64_t));
	if (!held)
		return 1;
	memset(held, 0, (size_t)max_n * sizeof(uint64_t)); /* touched before any RSS reading */
	for (int r = 0; r < NROW; r++)
		for (int i = 0; i < MAX_SIZES; i++)
			tab[r][i] = KVB_NA;
	for (int i = 0; i < n_sizes; i++) {
		bad |= one_size(sizes[i], i, held);
		snprintf(cols[i], sizeof(cols[i]), "%.0e", (double)sizes[i]);
		colp[i] = cols[i];
	}
	free(held);
	print_sizes(colp, n_sizes);
	bad |= growth();
	bad |= shrink();
	bad |= drain();
	return bad;
}
