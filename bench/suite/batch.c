/*
 * bench/suite/batch.c - benchmark 2: a request's worth of blocks (1, 16,
 * 256) allocated and freed per call, by one thread and by several.
 *
 * Figures are blocks per second (k blocks per op), so the columns compare
 * across k.  kvpool is measured with both ways to give blocks back:
 * kvp_free(refs, k) (the owner stays registered) and kvp_free_all(owner)
 * (which releases the owner, so the next allocate registers it again).
 */
#define _GNU_SOURCE
#include <stdio.h>

#include "bench/suite/cases.h"
#include "bench/suite/dpdk_peer.h"
#include "bench/suite/suite.h"

#define BENCH       "batch"
#define POOL_BLOCKS (1u << 17)
#define DPDK_OBJS   65535u
#define CACHE       32u

enum { KV_FREE, KV_FREE_ALL, MUTEX, DPDK, NPEER };
static const char *peer_name[NPEER] = {"kvpool_alloc+free", "kvpool_alloc+free_all",
                                       "mutex_pool_alloc+free_all", "dpdk_get_bulk+put_bulk"};
static const unsigned ks[3] = {1, 16, 256};

/* The pools the peers run on; dp NULL when DPDK is unavailable. */
typedef struct pools {
	kvp_pool *kv;
	mpool *mp;
	void *dp;
} pools;

/*
 * Peer @p at k = ks[@ki] on @threads threads: blocks per second, or KVB_NA
 * when it did not run (no DPDK) or a measured call failed (*@bad set).
 */
static double measure_one(const pools *P, int p, int ki, int threads, int *bad)
{
	kvb_case c;
	double reps[KVB_MAX_REPS], med;
	char x[48];

	if (p == KV_FREE)
		kvb_case_kv_full(&c, P->kv, KVP_K, ks[ki]);
	else if (p == KV_FREE_ALL)
		kvb_case_kv_free_all(&c, P->kv, KVP_K, ks[ki]);
	else if (p == MUTEX)
		kvb_case_mutex(&c, P->mp, ks[ki], true);
	else if (P->dp)
		kvb_dpdk_case_bulk(&c, P->dp, ks[ki]);
	else
		return KVB_NA;
	med = kvb_measure(&c, threads, reps);
	kvb_case_free(&c);
	if (kvb_take_failures()) {
		*bad = 1;
		return KVB_NA;
	}
	for (int r = 0; r < kvb_opt.reps; r++)
		reps[r] *= ks[ki];
	snprintf(x, sizeof(x), "threads=%d,k=%u", threads, ks[ki]);
	kvb_fig(BENCH, peer_name[p], x, "blocks_per_s", med * ks[ki], reps, kvb_opt.reps);
	return med * ks[ki];
}

/* One thread count's table (@v: blocks/s by peer and k) and its ratios. */
static void print_threads(int threads, double v[NPEER][3])
{
	const char *cols[3] = {"k=1", "k=16", "k=256"};
	printf("\n%d thread%s: blocks/s, median of %d x %.2gs\n", threads, threads > 1 ? "s" : "",
	       kvb_opt.reps, kvb_opt.seconds);
	kvb_row_head("peer", cols, 3);
	for (int p = 0; p < NPEER; p++)
		kvb_row(peer_name[p], v[p], 3, 's');
	for (int a = KV_FREE; a <= KV_FREE_ALL; a++) {
		for (int b = MUTEX; b <= DPDK; b++) {
			char label[96];
			double r[3];
			snprintf(label, sizeof(label), "%s / %s",
			         a == KV_FREE ? "kv free" : "kv free_all",
			         b == MUTEX ? "mutex" : "dpdk");
			for (int ki = 0; ki < 3; ki++) {
				char x[48], metric[48];
				r[ki] = v[a][ki] / v[b][ki];
				snprintf(x, sizeof(x), "threads=%d,k=%u", threads, ks[ki]);
				snprintf(metric, sizeof(metric), "ratio_vs_%s",
				         b == MUTEX ? "mutex_pool" : "dpdk_mempool");
				if (r[ki] == r[ki])
					kvb_fig(BENCH, peer_name[a], x, metric, r[ki], NULL, 0);
			}
			kvb_row(label, r, 3, 'x');
		}
	}
}

int kvb_bench_batch(void)
{
	kvp_pool_config cfg;
	pools P = {0};
	int bad = 0, n_thr = 0, thr[2];
	double v[2][NPEER][3];
	size_t kv_free0;

	kvb_heading("2. batch: k blocks allocated + freed per call (blocks/s, median)");
	thr[n_thr++] = 1;
	thr[n_thr++] = kvb_opt.smoke ? 2 : 8;
	kvp_pool_config_init(&cfg);
	cfg.block_size = KVB_BLOCK_SIZE;
	cfg.n_blocks = POOL_BLOCKS;
	if (kvp_pool_create(&cfg, &P.kv) != KVP_OK ||
	    mpool_create(KVB_BLOCK_SIZE, POOL_BLOCKS / 2, &P.mp)) {
		printf("cannot create the pools\n");
		return 1;
	}
	kv_free0 = kvp_n_free(P.kv, KVP_K);
	if (kvb_dpdk_init(NULL) == 0)
		P.dp = kvb_dpdk_pool(DPDK_OBJS, CACHE);
	if (!P.dp)
		kvb_note(BENCH, "dpdk skipped: EAL or pool unavailable");

	for (int ti = 0; ti < n_thr; ti++)
		for (int ki = 0; ki < 3; ki++)
			for (int p = 0; p < NPEER; p++)
				v[ti][p][ki] = measure_one(&P, p, ki, thr[ti], &bad);
	if (kvp_n_free(P.kv, KVP_K) != kv_free0 || mpool_n_free(P.mp) != POOL_BLOCKS / 2 ||
	    (P.dp && kvb_dpdk_avail(P.dp) != DPDK_OBJS)) {
		printf("  LEAK: kvpool free %zu of %zu, mutex %zu\n", kvp_n_free(P.kv, KVP_K),
		       kv_free0, mpool_n_free(P.mp));
		bad = 1;
	}
	for (int ti = 0; ti < n_thr; ti++)
		print_threads(thr[ti], v[ti]);
	if (P.dp)
		kvb_dpdk_pool_free(P.dp);
	mpool_destroy(P.mp);
	kvp_pool_destroy(P.kv);
	return bad;
}
