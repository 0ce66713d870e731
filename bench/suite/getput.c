/*
 * bench/suite/getput.c - benchmark 1: one block allocated and freed per op,
 * at each thread count, for every peer, side by side in one run.
 * kvpool_new_owner is the serving loop's owner churn at its smallest: each
 * op is a one-block request of a new owner (kvp_allocate, kvp_free_all),
 * its id the thread's own sequence; kvpool_owner_new the same with the id
 * from kvp_owner_new, which homes the owner at the thread.
 *
 * In-process peers are measured interleaved (all peers at 1 thread, then
 * all at 2, ...) so drift in the machine's load hits them alike.  The
 * malloc peers each run in their own process (bench/malloc_peer with
 * LD_PRELOAD), right after, with the same windows and repetitions.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/suite/cases.h"
#include "bench/suite/dpdk_peer.h"
#include "bench/suite/suite.h"

#define BENCH       "getput"
#define POOL_BLOCKS (1u << 17) /* K and V get 65536 each; stream K is used */
#define DPDK_OBJS   65535u     /* 2^16 - 1, DPDK's preferred size */
#define CACHE       32u        /* DPDK per-lcore cache (rte_mempool default-sized) */
#define BLOCK_BYTES 4096       /* malloc peers: a 4 KiB block (16 tokens x 128 fp16) */

enum {
	KV_FULL,
	KV_RAW,
	KV_FULL_FB,
	KV_RAW_FB,
	KV_NEW_OWNER,
	KV_MINTED,
	MUTEX,
	DPDK,
	GLIBC,
	JEMALLOC,
	MIMALLOC,
	TCMALLOC,
	LIMIT,
	NPEER
};

/* kvpool_*_fallback: the same pool configuration created with
 * KVPOOL_FORCE_FALLBACK=1 (seq_cst protocols instead of membarrier). */
static const char *peer_name[NPEER] = {
    "kvpool_full",
    "kvpool_raw",
    "kvpool_full_fallback",
    "kvpool_raw_fallback",
    "kvpool_new_owner",
    "kvpool_owner_new",
    "mutex_pool",
    "dpdk_mempool",
    "glibc",
    "jemalloc",
    "mimalloc",
    "tcmalloc",
    "limit_tls_array",
};

static const char *const preload[NPEER] = {
    [JEMALLOC] = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
    [MIMALLOC] = "/usr/lib/x86_64-linux-gnu/libmimalloc.so.2",
    [TCMALLOC] = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4",
};
/* What the child's malloc must resolve to for the figure to count. */
static const char *const expect_lib[NPEER] = {
    [GLIBC] = "libc.so", [JEMALLOC] = "jemalloc", [MIMALLOC] = "mimalloc", [TCMALLOC] = "tcmalloc"};

static double v[NPEER][8];

static void threads_arg(char *buf, size_t cap)
{
	size_t len = 0;

	buf[0] = 0;
	for (int t = 0; t < kvb_opt.n_threads; t++)
		len += (size_t)snprintf(buf + len, cap - len, "%s%d", t ? "," : "",
		                        kvb_opt.threads[t]);
}

/* Run the malloc peer @p in its own process; fills v[p][*]. */
static void run_malloc_peer(int p, const char *exe)
{
	char cmd[2048], thr[64], line[1024], lib[512] = "";
	FILE *f;

	if (KVB_SANITIZED && p == GLIBC)
		printf("  glibc: sanitizer build, so this is the sanitizer's malloc\n");
	if (KVB_SANITIZED && preload[p]) {
		printf("  %s: skipped (an LD_PRELOADed malloc cannot run under a sanitizer)\n",
		       peer_name[p]);
		kvb_note(BENCH, "%s skipped: sanitizer build", peer_name[p]);
		return;
	}
	if (preload[p] && access(preload[p], R_OK) != 0) {
		printf("  %s: skipped (%s not installed)\n", peer_name[p], preload[p]);
		kvb_note(BENCH, "%s skipped: %s not installed", peer_name[p], preload[p]);
		return;
	}
	threads_arg(thr, sizeof(thr));
	snprintf(cmd, sizeof(cmd),
	         "%s%s%s '%s' --seconds %g --warmup %g --reps %d --threads %s --bytes %d",
	         preload[p] ? "LD_PRELOAD='" : "", preload[p] ? preload[p] : "",
	         preload[p] ? "'" : "", exe, kvb_opt.seconds, kvb_opt.warmup, kvb_opt.reps, thr,
	         BLOCK_BYTES);
	f = popen(cmd, "r");
	if (!f) {
		printf("  %s: could not start %s\n", peer_name[p], exe);
		return;
	}
	while (fgets(line, sizeof(line), f)) {
		int t;
		double med, reps[KVB_MAX_REPS];
		char *s = line;
		int n = 0, used;

		if (sscanf(line, "allocator %511s", lib) == 1)
			continue;
		if (sscanf(s, "threads %d %lf%n", &t, &med, &used) != 2)
			continue;
		s += used;
		while (n < KVB_MAX_REPS && sscanf(s, "%lf%n", &reps[n], &used) == 1)
			s += used, n++;
		for (int i = 0; i < kvb_opt.n_threads; i++) {
			char x[32];
			if (kvb_opt.threads[i] != t || med <= 0)
				continue;
			v[p][i] = med;
			snprintf(x, sizeof(x), "threads=%d", t);
			kvb_fig(BENCH, peer_name[p], x, "ops_per_s", med, reps, n);
		}
	}
	pclose(f);
	if (!KVB_SANITIZED && !strstr(lib, expect_lib[p])) {
		printf("  %s: discarded, malloc resolved to '%s'\n", peer_name[p], lib);
		kvb_note(BENCH, "%s discarded: malloc resolved to %s", peer_name[p], lib);
		for (int i = 0; i < kvb_opt.n_threads; i++)
			v[p][i] = KVB_NA;
	} else {
		kvb_note(BENCH, "%s: malloc resolved to %s", peer_name[p], lib);
	}
}

static void measure(int p, const kvb_case *c, int ti, int *bad)
{
	double reps[KVB_MAX_REPS];
	char x[32];
	double med = kvb_measure(c, kvb_opt.threads[ti], reps);

	if (kvb_take_failures()) {
		*bad = 1;
		return;
	}
	v[p][ti] = med;
	snprintf(x, sizeof(x), "threads=%d", kvb_opt.threads[ti]);
	kvb_fig(BENCH, peer_name[p], x, "ops_per_s", med, reps, kvb_opt.reps);
}

static void ratio_row(const char *label, int a, int b, const char *metric)
{
	double r[8];

	for (int i = 0; i < kvb_opt.n_threads; i++) {
		char x[32];
		r[i] = v[a][i] / v[b][i];
		snprintf(x, sizeof(x), "threads=%d", kvb_opt.threads[i]);
		if (r[i] == r[i])
			kvb_fig(BENCH, peer_name[a], x, metric, r[i], NULL, 0);
	}
	kvb_row(label, r, kvb_opt.n_threads, 'x');
}

static int thread_index(int t)
{
	for (int i = 0; i < kvb_opt.n_threads; i++)
		if (kvb_opt.threads[i] == t)
			return i;
	return -1;
}

static void verdict(const char *what, double value, double goal)
{
	kvb_target(BENCH, what, value, value >= goal);
}

/* The in-process peers' pools: kvpool (default and fallback), mutex, DPDK. */
typedef struct peers {
	kvp_pool *kv, *kvfb;
	mpool *mp;
	void *dp;        /* NULL when DPDK is unavailable */
	size_t kv_free0; /* free K blocks of a kvpool pool before the runs */
} peers;

/*
 * Both kvpool pools (the fallback one: the mode is chosen at creation from
 * the environment), the mutex pool and, when it starts, the DPDK mempool.
 * Returns 0, or 1 when a pool cannot be created (the DPDK one may be missing).
 */
static int create_pools(peers *P)
{
	kvp_pool_config cfg;
	const char *why = NULL;

	kvp_pool_config_init(&cfg);
	cfg.block_size = KVB_BLOCK_SIZE;
	cfg.n_blocks = POOL_BLOCKS;
	const char *env = getenv("KVPOOL_FORCE_FALLBACK");
	char saved[8] = "";
	if (env)
		snprintf(saved, sizeof(saved), "%s", env);
	setenv("KVPOOL_FORCE_FALLBACK", "1", 1);
	int fb_rc = kvp_pool_create(&cfg, &P->kvfb);
	if (env)
		setenv("KVPOOL_FORCE_FALLBACK", saved, 1);
	else
		unsetenv("KVPOOL_FORCE_FALLBACK");
	if (fb_rc != KVP_OK || kvp_pool_create(&cfg, &P->kv) != KVP_OK ||
	    mpool_create(KVB_BLOCK_SIZE, POOL_BLOCKS / 2, &P->mp)) {
		printf("cannot create the pools\n");
		return 1;
	}
	P->kv_free0 = kvp_n_free(P->kv, KVP_K);
	if (kvb_dpdk_init(&why) == 0)
		P->dp = kvb_dpdk_pool(DPDK_OBJS, CACHE);
	if (!P->dp) {
		printf("  dpdk_mempool: skipped (%s)\n", why ? why : "rte_mempool_create failed");
		kvb_note(BENCH, "dpdk_mempool skipped: %s",
		         why ? why : "rte_mempool_create failed");
	}
	return 0;
}

/* Every in-process peer at one thread count, then the next: fills v[*][*]. */
static void measure_in_process(const peers *P, int *bad)
{
	kvb_case c;

	for (int ti = 0; ti < kvb_opt.n_threads; ti++) {
		kvb_case_kv_full(&c, P->kv, KVP_K, 1);
		measure(KV_FULL, &c, ti, bad);
		kvb_case_free(&c);
		kvb_case_kv_raw(&c, P->kv, KVP_K);
		measure(KV_RAW, &c, ti, bad);
		kvb_case_free(&c);
		kvb_case_kv_full(&c, P->kvfb, KVP_K, 1);
		measure(KV_FULL_FB, &c, ti, bad);
		kvb_case_free(&c);
		kvb_case_kv_raw(&c, P->kvfb, KVP_K);
		measure(KV_RAW_FB, &c, ti, bad);
		kvb_case_free(&c);
		kvb_case_kv_new_owner(&c, P->kv, KVP_K, 1);
		measure(KV_NEW_OWNER, &c, ti, bad);
		kvb_case_free(&c);
		kvb_case_kv_minted_owner(&c, P->kv, KVP_K, 1);
		measure(KV_MINTED, &c, ti, bad);
		kvb_case_free(&c);
		kvb_case_mutex(&c, P->mp, 1, false);
		measure(MUTEX, &c, ti, bad);
		kvb_case_free(&c);
		if (P->dp) {
			kvb_dpdk_case_getput(&c, P->dp);
			measure(DPDK, &c, ti, bad);
			kvb_case_free(&c);
		}
		kvb_case_limit(&c);
		measure(LIMIT, &c, ti, bad);
		kvb_case_free(&c);
	}
}

/* Every block must be back (threads return their caches when they exit): 0, or 1. */
static int check_leaks(const peers *P)
{
	if (kvp_n_free(P->kv, KVP_K) == P->kv_free0 && kvp_n_free(P->kvfb, KVP_K) == P->kv_free0 &&
	    mpool_n_free(P->mp) == POOL_BLOCKS / 2 &&
	    (!P->dp || kvb_dpdk_avail(P->dp) == DPDK_OBJS))
		return 0;
	printf("  LEAK: kvpool free %zu of %zu, mutex %zu, dpdk %u\n", kvp_n_free(P->kv, KVP_K),
	       P->kv_free0, mpool_n_free(P->mp), P->dp ? kvb_dpdk_avail(P->dp) : 0);
	return 1;
}

static void run_malloc_peers(void)
{
	char exe[1024];

	if (kvb_find_sibling("malloc_peer", exe, sizeof(exe)) == 0) {
		for (int p = GLIBC; p <= TCMALLOC; p++)
			run_malloc_peer(p, exe);
	} else {
		printf("  malloc peers: skipped (bench/malloc_peer not built)\n");
		kvb_note(BENCH, "malloc peers skipped: malloc_peer binary not found");
	}
}

/* The ops/s table and the ratios between peers, at every thread count. */
static void print_tables(void)
{
	char cols[8][16];
	const char *colp[8];

	for (int i = 0; i < kvb_opt.n_threads; i++) {
		snprintf(cols[i], sizeof(cols[i]), "%d thr", kvb_opt.threads[i]);
		colp[i] = cols[i];
	}
	printf("\nops/s (one get + one put), median of %d x %.2gs, block %u tokens; malloc: %d B\n",
	       kvb_opt.reps, kvb_opt.seconds, KVB_BLOCK_SIZE, BLOCK_BYTES);
	kvb_row_head("peer", colp, kvb_opt.n_threads);
	for (int p = 0; p < NPEER; p++)
		kvb_row(peer_name[p], v[p], kvb_opt.n_threads, 's');
	printf("\nratios (aggregate throughput, same run)\n");
	kvb_row_head("", colp, kvb_opt.n_threads);
	ratio_row("kvpool_full / mutex_pool", KV_FULL, MUTEX, "ratio_vs_mutex_pool");
	ratio_row("kvpool_full / dpdk_mempool", KV_FULL, DPDK, "ratio_vs_dpdk_mempool");
	ratio_row("kvpool_raw / dpdk_mempool", KV_RAW, DPDK, "ratio_vs_dpdk_mempool");
	ratio_row("kvpool_raw / mutex_pool", KV_RAW, MUTEX, "ratio_vs_mutex_pool");
	ratio_row("kvpool_full_fallback / mutex_pool", KV_FULL_FB, MUTEX, "ratio_vs_mutex_pool");
	ratio_row("kvpool_full_fallback / dpdk", KV_FULL_FB, DPDK, "ratio_vs_dpdk_mempool");
	ratio_row("kvpool_raw_fallback / dpdk", KV_RAW_FB, DPDK, "ratio_vs_dpdk_mempool");
	ratio_row("kvpool_full / glibc", KV_FULL, GLIBC, "ratio_vs_glibc");
	ratio_row("kvpool_full / jemalloc", KV_FULL, JEMALLOC, "ratio_vs_jemalloc");
	ratio_row("kvpool_full / mimalloc", KV_FULL, MIMALLOC, "ratio_vs_mimalloc");
	ratio_row("kvpool_full / tcmalloc", KV_FULL, TCMALLOC, "ratio_vs_tcmalloc");
	ratio_row("kvpool_full / limit", KV_FULL, LIMIT, "ratio_vs_limit");
	ratio_row("kvpool_new_owner / kvpool_full", KV_NEW_OWNER, KV_FULL, "ratio_vs_kvpool_full");
	ratio_row("kvpool_owner_new / kvpool_full", KV_MINTED, KV_FULL, "ratio_vs_kvpool_full");
	ratio_row("kvpool_raw / limit", KV_RAW, LIMIT, "ratio_vs_limit");
}

/*
 * The hot-path targets, for the default (membarrier) pool and, beside
 * them, for the fallback pool (reported, not targets); first the
 * single-thread ns per pair of every peer.
 */
static void print_targets(void)
{
	int t1 = thread_index(1), t8 = thread_index(8), t16 = thread_index(16);
	printf("\nsingle thread, ns per get+put:");
	for (int p = 0; p < NPEER && t1 >= 0; p++)
		if (v[p][t1] == v[p][t1]) {
			printf(" %s %.1f;", peer_name[p], 1e9 / v[p][t1]);
			kvb_fig(BENCH, peer_name[p], "threads=1", "ns_per_op", 1e9 / v[p][t1], NULL,
			        0);
		}
	printf("\n");
	for (int fb = 0; fb < 2; fb++) {
		int full = fb ? KV_FULL_FB : KV_FULL, raw = fb ? KV_RAW_FB : KV_RAW;
		const char *tag = fb ? " [fallback]" : "";
		char what[128];
		if (t1 >= 0) {
			snprintf(what, sizeof(what),
			         "1 thread: full API time <= 4x DPDK get+put (4 x full/DPDK)%s",
			         tag);
			verdict(what, 4 * v[full][t1] / v[DPDK][t1], 1.0);
			snprintf(what, sizeof(what),
			         "1 thread: full API >= 2x mutex pool (full/mutex)%s", tag);
			verdict(what, v[full][t1] / v[MUTEX][t1], 2.0);
			snprintf(what, sizeof(what),
			         "1 thread: raw pair time <= 3x DPDK get+put (3 x raw/DPDK)%s",
			         tag);
			verdict(what, 3 * v[raw][t1] / v[DPDK][t1], 1.0);
		}
		for (int k = 0; k < 2; k++) {
			int ti = k ? t16 : t8;
			if (ti < 0)
				continue;
			snprintf(what, sizeof(what),
			         "%d threads: full API >= %dx mutex pool (full/mutex)%s",
			         kvb_opt.threads[ti], k ? 10 : 6, tag);
			verdict(what, v[full][ti] / v[MUTEX][ti], k ? 10.0 : 6.0);
		}
	}
	/* The serving loop's owner churn: a new owner per one-block request,
	 * with the caller's own ids and with ids from kvp_owner_new. */
	int t2 = thread_index(2);
	for (int m = 0; m < 2; m++) {
		int pe = m ? KV_MINTED : KV_NEW_OWNER;
		const char *tag = m ? " [kvp_owner_new]" : "";
		char what[128];
		if (t1 >= 0) {
			snprintf(
			    what, sizeof(what),
			    "1 thread: new owner + free_all >= 0.5x registered pair (new/full)%s",
			    tag);
			verdict(what, v[pe][t1] / v[KV_FULL][t1], 0.5);
		}
		if (t1 >= 0 && t2 >= 0) {
			snprintf(what, sizeof(what),
			         "2 threads: new owner + free_all >= 1.6x its 1 thread (2T/1T)%s",
			         tag);
			verdict(what, v[pe][t2] / v[pe][t1], 1.6);
		}
	}
}

int kvb_bench_getput(void)
{
	peers P = {0};
	int bad = 0;

	kvb_heading("1. block get/put: one block allocated + freed per op (ops/s, median)");
	for (int p = 0; p < NPEER; p++)
		for (int i = 0; i < 8; i++)
			v[p][i] = KVB_NA;
	if (create_pools(&P) != 0)
		return 1;
	measure_in_process(&P, &bad);
	if (check_leaks(&P) != 0)
		bad = 1;
	run_malloc_peers();
	print_tables();
	print_targets();
	if (P.dp)
		kvb_dpdk_pool_free(P.dp);
	mpool_destroy(P.mp);
	kvp_pool_destroy(P.kv);
	kvp_pool_destroy(P.kvfb);
	return bad;
}
