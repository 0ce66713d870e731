/*
 * tests/pool_race_test.c - every pair of pool operations raced from 4-16
 * threads with random sizes, invariants checked after every phase:
 *   - no block is owned twice (kvp_blocks_for of every owner, disjoint);
 *   - in use + free + retired = blocks ever created;
 *   - each owner's kvp_blocks_for equals what the test gave it;
 *   - the pool's statistics agree with counts kept by the test.
 * Run under TSan and ASan by ./test.sh.  KVP_RACE_SEED picks the random seed.
 */
#include <kvpool/kvpool.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "lib/testing/pool_peek.h"
#include "lib/testing/tsan.h"
#include "tests/testutil.h"

#ifdef KVPI_TSAN
#define KVPI_TEST_TSAN 1
#else
#define KVPI_TEST_TSAN 0
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KVPI_TEST_ASAN 1
#endif
#endif
#ifndef KVPI_TEST_ASAN
#define KVPI_TEST_ASAN 0
#endif

#define MAXT   16
#define MAXREF 512

static uint64_t seed0;

static kvp_pool *mkpool(uint32_t n, bool grow, uint32_t max, uint32_t tc)
{
	kvp_pool_config c;
	kvp_pool *p;
	kvp_pool_config_init(&c);
	c.block_size = 16;
	c.n_blocks = n;
	c.grow_on_exhaustion = grow;
	c.max_blocks = max;
	c.thread_cache = tc;
	CHECK_EQ(kvp_pool_create(&c, &p), KVP_OK);
	return p;
}

static void run_threads(int n, void *(*fn)(void *), void *args, size_t argsz)
{
	pthread_t th[MAXT];
	for (int i = 0; i < n; i++)
		CHECK_EQ(pthread_create(&th[i], NULL, fn, (char *)args + i * argsz), 0);
	for (int i = 0; i < n; i++)
		CHECK_EQ(pthread_join(th[i], NULL), 0);
}

/* ---- per-owner tracked workload: allocate / free / free_all / shrink ---- */

struct owner_track {
	kvp_owner id;
	kvp_ref refs[MAXREF];
	size_t n;
};

struct worker {
	kvp_pool *pool;
	int idx, ops;
	uint64_t rng;
	struct owner_track own[4];
	uint64_t allocs, frees, exhausted;
	bool shrinker;
	uint64_t retired;
	pthread_barrier_t *bar;
};

static void check_own_blocks(kvp_pool *p, struct owner_track *o)
{
	for (size_t i = 0; i < o->n; i++) {
		kvp_block_info bi;
		CHECK_EQ(kvp_block_get(p, o->refs[i], &bi), KVP_OK);
		CHECK(bi.in_use);
		CHECK_EQ(bi.owner, o->id);
	}
}

static void *tracked_worker(void *arg)
{
	struct worker *w = arg;
	kvp_ref tmp[64];
	size_t n;
	for (int op = 0; op < w->ops; op++) {
		struct owner_track *o = &w->own[tu_rand(&w->rng) % 4];
		uint64_t r = tu_rand(&w->rng) % 100;
		if (w->shrinker && r < 5) {
			uint32_t ret = 0;
			kvp_stream s = (tu_rand(&w->rng) & 1) ? KVP_K : KVP_V;
			CHECK_EQ(kvp_shrink(w->pool, s, (uint32_t)(tu_rand(&w->rng) % 24), &ret),
			         KVP_OK);
			w->retired += ret;
		} else if (r < 55) {
			uint32_t tokens = 1 + (uint32_t)(tu_rand(&w->rng) % (16 * 6));
			kvp_stream s = (tu_rand(&w->rng) & 1) ? KVP_K : KVP_V;
			if (o->n + 8 > MAXREF)
				continue;
			int rc = kvp_allocate(w->pool, s, tokens, o->id, KVP_FP16, tmp, 64, &n);
			if (rc == KVP_EEXHAUSTED) {
				w->exhausted++;
				continue;
			}
			CHECK_EQ(rc, KVP_OK);
			CHECK_EQ(n, (tokens + 15) / 16);
			memcpy(o->refs + o->n, tmp, n * sizeof(kvp_ref));
			o->n += n;
			w->allocs += n;
		} else if (r < 90) {
			if (!o->n)
				continue;
			/* Free a random run, keeping the rest in order. */
			size_t at = tu_rand(&w->rng) % o->n;
			size_t k = 1 + tu_rand(&w->rng) % (o->n - at);
			CHECK_EQ(kvp_free(w->pool, o->refs + at, k), KVP_OK);
			/* A second free of the same refs is stale, never an error. */
			CHECK_EQ(kvp_free(w->pool, o->refs + at, 1), KVP_OK);
			memmove(o->refs + at, o->refs + at + k, (o->n - at - k) * sizeof(kvp_ref));
			o->n -= k;
			w->frees += k;
		} else {
			if (!o->n)
				continue;
			CHECK_EQ(kvp_free_all(w->pool, o->id), KVP_OK);
			w->frees += o->n;
			o->n = 0;
		}
		if (op % 64 == 0)
			check_own_blocks(w->pool, o);
	}
	return NULL;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

/* The invariants, with the pool quiescent. */
static void check_invariants(kvp_pool *p, struct worker *w, int nt, uint64_t retired_total)
{
	static uint32_t ids[1 << 16];
	size_t nids = 0;
	uint64_t allocs = 0, frees = 0, exhausted = 0;
	for (int t = 0; t < nt; t++) {
		allocs += w[t].allocs;
		frees += w[t].frees;
		exhausted += w[t].exhausted;
		for (int j = 0; j < 4; j++) {
			struct owner_track *o = &w[t].own[j];
			kvp_ref got[MAXREF];
			size_t n = 0;
			int rc = kvp_blocks_for(p, o->id, got, MAXREF, &n);
			if (o->n == 0) {
				CHECK(rc == KVP_ENOENT);
				continue;
			}
			CHECK_EQ(rc, KVP_OK);
			CHECK_EQ(n, o->n);
			for (size_t i = 0; i < n; i++) {
				CHECK(got[i] == o->refs[i]);
				ids[nids++] = KVP_REF_ID(got[i]);
			}
			check_own_blocks(p, o);
		}
	}
	qsort(ids, nids, sizeof(ids[0]), cmp_u32);
	for (size_t i = 1; i < nids; i++)
		CHECK(ids[i] != ids[i - 1]); /* no block owned twice */
	kvp_stats s;
	CHECK_EQ(kvp_pool_stats(p, &s), KVP_OK);
	CHECK_EQ(s.n_allocations, allocs);
	CHECK_EQ(s.n_frees, frees);
	CHECK_EQ(s.n_exhausted, exhausted);
	CHECK_EQ(s.n_retired, retired_total);
	CHECK_EQ(kvp_stats_blocks_in_use(&s), nids);
	size_t free_blocks = kvp_n_free(p, KVP_K) + kvp_n_free(p, KVP_V);
	CHECK_EQ(nids + free_blocks, s.n_blocks);
	CHECK_EQ(s.n_blocks + kvp_pool_n_retired_ids(p), kvp_pool_n_ids(p));
	CHECK(kvp_pool_n_retired_ids(p) <= s.n_retired);
	CHECK(s.peak_blocks_in_use >= nids);
	CHECK(s.peak_blocks_in_use <= s.n_blocks + s.n_retired);
}

static void tracked_phases(const char *name, kvp_pool *p, int nt, int phases, int ops, bool shrink)
{
	struct worker w[MAXT];
	uint64_t retired = 0;
	memset(w, 0, sizeof(w));
	for (int t = 0; t < nt; t++) {
		w[t].pool = p;
		w[t].idx = t;
		w[t].rng = seed0 ^ ((uint64_t)(t + 1) * 0x9e3779b97f4a7c15ull);
		w[t].ops = ops;
		w[t].shrinker = shrink && t == 0;
		for (int j = 0; j < 4; j++)
			w[t].own[j].id = (uint64_t)t * 16 + j;
	}
	for (int ph = 0; ph < phases; ph++) {
		/* Fresh threads each phase: exit and re-entry of threads. */
		run_threads(nt, tracked_worker, w, sizeof(w[0]));
		retired = 0;
		for (int t = 0; t < nt; t++)
			retired += w[t].retired;
		check_invariants(p, w, nt, retired);
	}
	printf("  %s: %d threads x %d phases x %d ops, invariants held\n", name, nt, phases, ops);
}

static void test_alloc_free_race(void)
{
	kvp_pool *p = mkpool(256, false, 0, 8);
	tracked_phases("allocate/free/free_all", p, 8, 4, 3000, false);
	kvp_pool_destroy(p);
}

static void test_alloc_grow_race(void)
{
	kvp_pool *p = mkpool(16, true, 4096, 8);
	tracked_phases("allocate/grow", p, 8, 3, 2000, false);
	kvp_stats s;
	kvp_pool_stats(p, &s);
	CHECK(s.n_grown > 0);
	CHECK_EQ(s.n_blocks, 16 + s.n_grown);
	kvp_pool_destroy(p);
}

static void test_free_shrink_race(void)
{
	kvp_pool *p = mkpool(512, true, 0, 8);
	tracked_phases("free/shrink/grow", p, 6, 3, 2000, true);
	kvp_pool_destroy(p);
}

/* ---- growth through many block-table segments, with readers of old blocks ---- */

static void *big_grow_worker(void *arg)
{
	struct worker *w = arg;
	static _Thread_local kvp_ref refs[64 * 160];
	size_t n, have = 0;
	for (int chunk = 0; chunk < 160; chunk++) {
		CHECK_EQ(kvp_allocate(w->pool, (chunk & 1) ? KVP_V : KVP_K, 64 * 16, w->own[0].id,
		                      KVP_FP16, refs + have, 64, &n),
		         KVP_OK);
		have += n;
		/* Read blocks of earlier segments while others add segments. */
		kvp_block_info bi;
		size_t i = tu_rand(&w->rng) % have;
		CHECK_EQ(kvp_block_get(w->pool, refs[i], &bi), KVP_OK);
		CHECK_EQ(bi.owner, w->own[0].id);
	}
	w->allocs = have;
	/* Hold everything until all have grown: 4 x 10240 blocks at once. */
	pthread_barrier_wait(w->bar);
	size_t listed;
	CHECK_EQ(kvp_blocks_for(w->pool, w->own[0].id, NULL, 0, &listed), KVP_ERANGE);
	CHECK_EQ(listed, have);
	CHECK_EQ(kvp_free_all(w->pool, w->own[0].id), KVP_OK);
	return NULL;
}

static void test_grow_directory_race(void)
{
	kvp_pool *p = mkpool(16, true, 0, 8);
	struct worker w[4];
	pthread_barrier_t bar;
	pthread_barrier_init(&bar, NULL, 4);
	memset(w, 0, sizeof(w));
	for (int t = 0; t < 4; t++) {
		w[t].bar = &bar;
		w[t].pool = p;
		w[t].rng = seed0 + (uint64_t)t;
		w[t].own[0].id = 500 + (uint64_t)t;
	}
	run_threads(4, big_grow_worker, w, sizeof(w[0]));
	kvp_stats s;
	kvp_pool_stats(p, &s);
	/* Growth segments 0..5 (1024 << k blocks each) were added under load. */
	CHECK(s.n_blocks > 16 + 31 * KVPI_BT_BASE);
	CHECK(atomic_load(&p->bt.seg[5]) != NULL);
	CHECK_EQ(s.n_blocks, 16 + s.n_grown);
	CHECK_EQ(kvp_stats_blocks_in_use(&s), 0);
	CHECK_EQ(kvp_n_free(p, KVP_K) + kvp_n_free(p, KVP_V), s.n_blocks);
	pthread_barrier_destroy(&bar);
	kvp_pool_destroy(p);
}

/* ---- allocate / free_all on shared owners ---- */

struct shared_arg {
	kvp_pool *pool;
	uint64_t rng;
	int ops;
	uint64_t allocs;
};

static void *shared_owner_worker(void *arg)
{
	struct shared_arg *a = arg;
	kvp_ref tmp[8];
	size_t n;
	for (int i = 0; i < a->ops; i++) {
		kvp_owner o = tu_rand(&a->rng) % 6;
		if (tu_rand(&a->rng) % 3) {
			int rc = kvp_allocate(a->pool, (tu_rand(&a->rng) & 1) ? KVP_K : KVP_V,
			                      1 + tu_rand(&a->rng) % 100, o, KVP_INT8, tmp, 8, &n);
			CHECK(rc == KVP_OK || rc == KVP_EEXHAUSTED);
			if (rc == KVP_OK)
				a->allocs += n;
		} else {
			int rc = kvp_free_all(a->pool, o);
			CHECK(rc == KVP_OK || rc == KVP_ENOENT);
		}
	}
	return NULL;
}

static void test_alloc_free_all_shared_owners(void)
{
	kvp_pool *p = mkpool(128, false, 0, 8);
	struct shared_arg a[8];
	uint64_t allocs = 0;
	for (int ph = 0; ph < 3; ph++) {
		for (int t = 0; t < 8; t++)
			a[t] = (struct shared_arg){p, seed0 + 77 * (t + 1) + ph, 3000, 0};
		run_threads(8, shared_owner_worker, a, sizeof(a[0]));
		static uint32_t ids[4096];
		size_t nids = 0;
		for (int t = 0; t < 8; t++)
			allocs += a[t].allocs;
		for (kvp_owner o = 0; o < 6; o++) {
			kvp_ref got[256];
			size_t n;
			int rc = kvp_blocks_for(p, o, got, 256, &n);
			if (rc == KVP_ENOENT)
				continue;
			CHECK_EQ(rc, KVP_OK);
			for (size_t i = 0; i < n; i++) {
				kvp_block_info bi;
				CHECK_EQ(kvp_block_get(p, got[i], &bi), KVP_OK);
				CHECK(bi.in_use);
				CHECK_EQ(bi.owner, o);
				ids[nids++] = KVP_REF_ID(got[i]);
			}
		}
		qsort(ids, nids, sizeof(ids[0]), cmp_u32);
		for (size_t i = 1; i < nids; i++)
			CHECK(ids[i] != ids[i - 1]);
		kvp_stats s;
		kvp_pool_stats(p, &s);
		CHECK_EQ(s.n_allocations, allocs);
		CHECK_EQ(kvp_stats_blocks_in_use(&s), nids);
		CHECK_EQ(nids + kvp_n_free(p, KVP_K) + kvp_n_free(p, KVP_V), 128);
	}
	kvp_pool_destroy(p);
}

/* ---- two threads race for the last blocks: exactly one wins ---- */

struct last_arg {
	kvp_pool *pool;
	pthread_barrier_t *bar;
	uint32_t tokens;
	int rounds;
	int *results; /* per round */
	kvp_owner owner;
};

static void *last_worker(void *arg)
{
	struct last_arg *a = arg;
	kvp_ref refs[64];
	size_t n;
	for (int r = 0; r < a->rounds; r++) {
		pthread_barrier_wait(a->bar);
		int rc = kvp_allocate(a->pool, KVP_K, a->tokens, a->owner, KVP_FP16, refs, 64, &n);
		CHECK(rc == KVP_OK || rc == KVP_EEXHAUSTED);
		a->results[r] = rc;
		pthread_barrier_wait(a->bar);
		/* Winners free into their own magazine: the next round's blocks sit
		 * in thread caches, not on the global stack. */
		if (rc == KVP_OK)
			CHECK_EQ(kvp_free(a->pool, refs, n), KVP_OK);
		pthread_barrier_wait(a->bar);
	}
	return NULL;
}

static void last_blocks_case(int nt, uint32_t k_blocks, uint32_t want_blocks, int winners)
{
	enum { ROUNDS = 300 };
	kvp_pool *p = mkpool(2 * k_blocks, false, 0, 8);
	pthread_barrier_t bar;
	struct last_arg a[MAXT];
	static int res[MAXT][ROUNDS];
	pthread_barrier_init(&bar, NULL, (unsigned)nt);
	for (int t = 0; t < nt; t++)
		a[t] = (struct last_arg){p, &bar, want_blocks * 16, ROUNDS, res[t], (kvp_owner)t};
	run_threads(nt, last_worker, a, sizeof(a[0]));
	for (int r = 0; r < ROUNDS; r++) {
		int ok = 0;
		for (int t = 0; t < nt; t++)
			ok += res[t][r] == KVP_OK;
		CHECK_EQ(ok, winners);
	}
	CHECK_EQ(kvp_n_free(p, KVP_K), k_blocks);
	pthread_barrier_destroy(&bar);
	kvp_pool_destroy(p);
}

static void test_race_for_last_blocks(void)
{
	last_blocks_case(2, 24, 24, 1); /* both want all: exactly one wins */
	last_blocks_case(2, 24, 12, 2); /* both fit: both win */
	last_blocks_case(4, 24, 13, 1); /* any two would not fit */
	last_blocks_case(8, 64, 16, 4);
}

/* ---- no false exhaustion: blocks parked in idle threads' caches ---- */

struct park_arg {
	kvp_pool *pool;
	pthread_barrier_t *bar;
	uint64_t rng;
};

static void *park_worker(void *arg)
{
	struct park_arg *a = arg;
	kvp_ref refs[8];
	size_t n;
	for (int i = 0; i < 200; i++) {
		if (kvp_allocate(a->pool, KVP_K, 1 + tu_rand(&a->rng) % 64, 1000 + tu_rand(&a->rng),
		                 KVP_FP16, refs, 8, &n) == KVP_OK)
			CHECK_EQ(kvp_free(a->pool, refs, n), KVP_OK);
	}
	pthread_barrier_wait(a->bar); /* parked, caches full, alive */
	pthread_barrier_wait(a->bar);
	return NULL;
}

static void test_no_false_exhaustion(void)
{
	kvp_pool *p = mkpool(256, false, 0, 32);
	pthread_barrier_t bar;
	pthread_t th[8];
	struct park_arg a[8];
	kvp_ref refs[128];
	size_t n;
	pthread_barrier_init(&bar, NULL, 9);
	for (int t = 0; t < 8; t++) {
		a[t] = (struct park_arg){p, &bar, seed0 + (uint64_t)t};
		pthread_create(&th[t], NULL, park_worker, &a[t]);
	}
	pthread_barrier_wait(&bar);
	/* Most free K blocks now sit in the parked threads' magazines. */
	size_t in_caches = 0;
	for (struct kvpi_tslot *s = atomic_load(&p->slots); s; s = s->next)
		in_caches += atomic_load(&s->mag[0].count);
	CHECK(in_caches > 0);
	CHECK_EQ(kvp_n_free(p, KVP_K), 128);
	CHECK_EQ(kvp_allocate(p, KVP_K, 128 * 16, 1, KVP_FP16, refs, 128, &n), KVP_OK);
	CHECK_EQ(n, 128);
	CHECK_EQ(kvp_n_free(p, KVP_K), 0);
	CHECK_EQ(kvp_free_all(p, 1), KVP_OK);
	/* Shrink finds them too. */
	uint32_t ret;
	CHECK_EQ(kvp_shrink(p, KVP_K, 0, &ret), KVP_OK);
	CHECK_EQ(ret, 128);
	pthread_barrier_wait(&bar);
	for (int t = 0; t < 8; t++)
		pthread_join(th[t], NULL);
	pthread_barrier_destroy(&bar);
	kvp_pool_destroy(p);
}

/* ---- the serving loop: a new owner per request, bulk prompt, decode, free_all ---- */

/*
 * Each thread serves requests as a server does: a new owner, its prompt in
 * one kvp_allocate (1..LC_MAX_PROMPT blocks), a few one-block decode calls,
 * then kvp_free_all.  Blocks go back into the freeing thread's magazine
 * (grown by demand) and are drained by threads that find the global stack
 * short.  A ledger per block id proves no block is handed to two requests
 * at once; at the end every block is free.  With @exact, the threads can
 * never together hold more than the pool (so any KVP_EEXHAUSTED is false:
 * blocks parked in other threads' magazines must be found); otherwise
 * they overcommit it and exhaustion is allowed.
 */
#define LC_MAX_PROMPT 48u
#define LC_MAX_DECODE 4u

struct lc_arg {
	kvp_pool *pool;
	_Atomic uint64_t *ledger; /* block id -> owner + 1, or 0 */
	uint64_t rng;
	int requests;
	int tid;
	uint64_t exhausted;
};

static void lc_take(struct lc_arg *a, const kvp_ref *refs, size_t n, kvp_owner o)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t prev = atomic_exchange(&a->ledger[KVP_REF_ID(refs[i])], o + 1);
		CHECK_EQ(prev, 0); /* no block held by two requests */
	}
}

static void *lc_worker(void *arg)
{
	struct lc_arg *a = arg;
	kvp_ref refs[LC_MAX_PROMPT + LC_MAX_DECODE], one;
	for (int q = 0; q < a->requests; q++) {
		kvp_owner o = ((uint64_t)a->tid << 32) | (uint64_t)q;
		uint32_t nb = 1 + (uint32_t)(tu_rand(&a->rng) % LC_MAX_PROMPT);
		size_t n, held = 0;
		int rc = kvp_allocate(a->pool, KVP_K, nb * 16 - (uint32_t)(tu_rand(&a->rng) % 16),
		                      o, KVP_FP16, refs, LC_MAX_PROMPT, &n);
		if (rc == KVP_EEXHAUSTED) {
			a->exhausted++;
			continue;
		}
		CHECK_EQ(rc, KVP_OK);
		CHECK_EQ(n, nb);
		lc_take(a, refs, n, o);
		held = n;
		uint32_t nd = (uint32_t)(tu_rand(&a->rng) % (LC_MAX_DECODE + 1));
		for (uint32_t d = 0; d < nd; d++) {
			rc = kvp_allocate(a->pool, KVP_K, 16, o, KVP_FP16, &one, 1, &n);
			if (rc == KVP_EEXHAUSTED) {
				a->exhausted++;
				break;
			}
			CHECK_EQ(rc, KVP_OK);
			lc_take(a, &one, 1, o);
			refs[held++] = one;
		}
		/* The owner's blocks, in allocation order. */
		kvp_ref got[LC_MAX_PROMPT + LC_MAX_DECODE];
		CHECK_EQ(kvp_blocks_for(a->pool, o, got, held, &n), KVP_OK);
		CHECK_EQ(n, held);
		for (size_t i = 0; i < held; i++) {
			CHECK_EQ(got[i], refs[i]);
			/* Released in the ledger before the free: once freed a
			 * block may go to another request at once. */
			CHECK_EQ(atomic_exchange(&a->ledger[KVP_REF_ID(refs[i])], 0), o + 1);
		}
		if (tu_rand(&a->rng) % 8 == 0)
			sched_yield();
		CHECK_EQ(kvp_free_all(a->pool, o), KVP_OK);
	}
	return NULL;
}

static void lifecycle_case(int nthreads, uint32_t per_stream, int requests, bool exact)
{
	kvp_pool *p = mkpool(2 * per_stream, false, 0, KVP_DEFAULT_THREAD_CACHE);
	_Atomic uint64_t *ledger = calloc(2 * per_stream, sizeof(*ledger));
	struct lc_arg a[MAXT];
	CHECK(ledger != NULL);
	for (int t = 0; t < nthreads; t++)
		a[t] = (struct lc_arg){p,        ledger, seed0 ^ (0xabcdull * (uint64_t)(t + 1)),
		                       requests, t,      0};
	run_threads(nthreads, lc_worker, a, sizeof(a[0]));
	uint64_t exhausted = 0;
	for (int t = 0; t < nthreads; t++)
		exhausted += a[t].exhausted;
	if (exact)
		CHECK_EQ(exhausted, 0); /* the threads never held more than the pool */
	CHECK_EQ(kvp_n_free(p, KVP_K), per_stream);
	kvp_stats st;
	CHECK_EQ(kvp_pool_stats(p, &st), KVP_OK);
	CHECK_EQ(kvp_stats_blocks_in_use(&st), 0);
	CHECK_EQ(st.n_exhausted, exhausted);
	/* Every block is reachable again: one request for the whole stream. */
	kvp_ref *all = calloc(per_stream, sizeof(*all));
	size_t n;
	CHECK(all != NULL);
	CHECK_EQ(kvp_allocate(p, KVP_K, per_stream * 16, 1, KVP_FP16, all, per_stream, &n), KVP_OK);
	CHECK_EQ(n, per_stream);
	for (size_t i = 0; i < n; i++)
		CHECK(atomic_exchange(&ledger[KVP_REF_ID(all[i])], 1) == 0);
	CHECK_EQ(kvp_free_all(p, 1), KVP_OK);
	free(all);
	free(ledger);
	kvp_pool_destroy(p);
}

static void test_lifecycle_race(void)
{
	int rq = KVPI_TEST_TSAN ? 300 : KVPI_TEST_ASAN ? 600 : 2000;
	/* 4 x (48 + 4) = 208 <= 208: never exhausted; the magazines (up to a
	 * quarter of the stream each) park most free blocks, so threads drain. */
	lifecycle_case(4, 208, rq, true);
	lifecycle_case(2, 104, rq, true);
	/* Overcommitted: exhaustion allowed, ledger and conservation not. */
	lifecycle_case(8, 160, rq, false);
}

/* ---- register_owner / register_owner on one id ---- */

struct reg_arg {
	kvp_pool *pool;
	pthread_barrier_t *bar;
	int rounds;
	int *wins;
};

static void *reg_worker(void *arg)
{
	struct reg_arg *a = arg;
	for (int r = 0; r < a->rounds; r++) {
		pthread_barrier_wait(a->bar);
		int rc = kvp_register_owner(a->pool, 4242);
		CHECK(rc == KVP_OK || rc == KVP_EOWNER);
		if (rc == KVP_OK)
			atomic_fetch_add((_Atomic int *)&a->wins[r], 1);
		pthread_barrier_wait(a->bar);
		if (rc == KVP_OK)
			CHECK_EQ(kvp_release_owner(a->pool, 4242), KVP_OK);
		pthread_barrier_wait(a->bar);
	}
	return NULL;
}

static void test_register_race(void)
{
	enum { ROUNDS = 200, NT = 16 };
	kvp_pool *p = mkpool(16, false, 0, 8);
	pthread_barrier_t bar;
	static _Atomic int wins[ROUNDS];
	struct reg_arg a[NT];
	pthread_barrier_init(&bar, NULL, NT);
	for (int t = 0; t < NT; t++)
		a[t] = (struct reg_arg){p, &bar, ROUNDS, (int *)wins};
	run_threads(NT, reg_worker, a, sizeof(a[0]));
	for (int r = 0; r < ROUNDS; r++)
		CHECK_EQ(atomic_load(&wins[r]), 1);
	pthread_barrier_destroy(&bar);
	kvp_pool_destroy(p);
}

/* ---- the same refs freed by two threads at once: each block freed once ---- */

struct dfree_arg {
	kvp_pool *pool;
	pthread_barrier_t *bar;
	kvp_ref *refs;
	size_t n;
};

static void *dfree_worker(void *arg)
{
	struct dfree_arg *a = arg;
	pthread_barrier_wait(a->bar);
	CHECK_EQ(kvp_free(a->pool, a->refs, a->n), KVP_OK);
	return NULL;
}

static void test_double_free_race(void)
{
	kvp_pool *p = mkpool(512, false, 0, 8);
	kvp_ref raw[64], owned[64];
	size_t n;
	for (int round = 0; round < 50; round++) {
		for (int i = 0; i < 64; i++)
			CHECK_EQ(kvp_alloc_block(p, KVP_V, KVP_FP32, &raw[i]), KVP_OK);
		CHECK_EQ(kvp_allocate(p, KVP_K, 64 * 16, 9, KVP_FP32, owned, 64, &n), KVP_OK);
		pthread_barrier_t bar;
		pthread_barrier_init(&bar, NULL, 4);
		struct dfree_arg a[4] = {{p, &bar, raw, 64},
		                         {p, &bar, raw, 64},
		                         {p, &bar, owned, 64},
		                         {p, &bar, owned, 64}};
		run_threads(4, dfree_worker, a, sizeof(a[0]));
		pthread_barrier_destroy(&bar);
	}
	kvp_stats s;
	kvp_pool_stats(p, &s);
	CHECK_EQ(s.n_allocations, 50 * 128);
	CHECK_EQ(s.n_frees, 50 * 128);
	CHECK_EQ(s.n_stale_frees, 50 * 128);
	CHECK_EQ(kvp_n_free(p, KVP_K) + kvp_n_free(p, KVP_V), 512);
	kvp_pool_destroy(p);
}

/* ---- double frees of owned blocks, biased and locked paths ----
 * An owned block's free clears in_use with a plain store under the owner's
 * exclusion (the owner op of the thread the record is biased to, or the
 * shard lock after a revocation), and kvp_block_set_used of an owned block
 * takes the same exclusion.  Each round one thread allocates one-block
 * requests (random fills) for a fresh owner, so the record is biased to it;
 * then it and three others, after random delays, free every ref (each
 * thread every ref, in its own random order, as kvp_free of one ref,
 * kvp_free_block or batches of kvp_free), set fills with stale and current
 * refs, and in some rounds one of them frees the owner with kvp_free_all;
 * in odd rounds two threads instead set fills on every ref until all are
 * freed.
 * So the biased thread's frees race revocations, locked frees, free_all and
 * set_used.  Checked after each round: every block was freed exactly once
 * (n_frees), the rest counted stale (rounds without free_all: exactly
 * attempts - blocks), every block is free again (a double free would push a
 * block twice), and the signed n_not_full counter is exactly 0 (a set_used
 * whose change a free overwrote would leave it off by one). */

#define ODF_T     4
#define ODF_N     24
#define ODF_BATCH 4

struct odf_shared {
	kvp_pool *pool;
	pthread_barrier_t start, done;
	kvp_ref refs[ODF_N];
	kvp_owner owner;
	int free_all_by; /* thread index that calls kvp_free_all, or -1 */
	int rounds, round_no;
	_Atomic uint64_t attempts; /* refs passed to a free this round */
	size_t free_k;             /* free blocks of stream K, all freed */
	bool raw;                  /* kvp_alloc_block'd blocks instead of owned ones */
	pthread_barrier_t checked;
};

struct odf_arg {
	struct odf_shared *sh;
	int idx;
	uint64_t rng;
};

static int cmp_ref_id(const void *a, const void *b)
{
	uint32_t x = KVP_REF_ID(*(const kvp_ref *)a), y = KVP_REF_ID(*(const kvp_ref *)b);
	return x < y ? -1 : x > y;
}

static int64_t raw_not_full(kvp_pool *p)
{
	int64_t sum = 0;
	for (struct kvpi_tslot *s = atomic_load(&p->slots); s; s = s->next)
		sum += (int64_t)atomic_load(&s->ctr[KVPI_C_NOT_FULL]);
	sum += (int64_t)atomic_load(&p->fallback->ctr[KVPI_C_NOT_FULL]);
	return sum;
}

/* Set fills on every ref, alternating full and not full, until all are
 * freed: each change moves n_not_full, so one lost to a free shows. */
static void odf_hammer(struct odf_arg *a)
{
	struct odf_shared *sh = a->sh;
	bool gone[ODF_N] = {false};
	for (int left = ODF_N, turn = 0; left > 0; turn++)
		for (int i = 0; i < ODF_N; i++) {
			if (gone[i])
				continue;
			int rc = kvp_block_set_used(sh->pool, sh->refs[i], turn & 1 ? 16 : 3);
			CHECK(rc == KVP_OK || rc == KVP_ENOENT);
			if (rc == KVP_ENOENT) {
				gone[i] = true;
				left--;
			}
		}
}

static void odf_touch(struct odf_arg *a)
{
	struct odf_shared *sh = a->sh;
	if (a->idx >= 2 && a->idx != sh->free_all_by && (sh->round_no & 1)) {
		odf_hammer(a);
		return;
	}
	int order[ODF_N];
	for (int i = 0; i < ODF_N; i++)
		order[i] = i;
	/* Half the rounds every thread goes in the same order, so they
	 * collide on the same ref at the same moment; else each shuffles. */
	for (int i = ODF_N - 1; i > 0 && (sh->round_no & 2); i--) {
		int j = (int)(tu_rand(&a->rng) % (uint64_t)(i + 1));
		int t = order[i];
		order[i] = order[j];
		order[j] = t;
	}
	/* Every thread starts a little later at random, so the biased thread
	 * is often inside an owner (or raw) op when the first revocation
	 * comes, and often not. */
	for (uint64_t d = tu_rand(&a->rng) % 2000; d > 0; d--)
		atomic_signal_fence(memory_order_seq_cst);
	uint64_t attempts = 0;
	for (int k = 0; k < ODF_N;) {
		if (sh->free_all_by == a->idx && k == ODF_N / 2) {
			int rc = kvp_free_all(sh->pool, sh->owner);
			CHECK(rc == KVP_OK || rc == KVP_ENOENT);
		}
		kvp_ref r = sh->refs[order[k]];
		uint64_t op = tu_rand(&a->rng) % 8;
		if (op < 2) {
			int rc = kvp_block_set_used(sh->pool, r, (uint32_t)(tu_rand(&a->rng) % 17));
			CHECK(rc == KVP_OK || rc == KVP_ENOENT);
			continue; /* the ref is freed on a later turn */
		}
		if (op < 4) {
			CHECK_EQ(kvp_free_block(sh->pool, r), KVP_OK);
			attempts++;
			k++;
		} else if (op < 6 || k + ODF_BATCH > ODF_N) {
			CHECK_EQ(kvp_free(sh->pool, &r, 1), KVP_OK);
			attempts++;
			k++;
		} else {
			kvp_ref batch[ODF_BATCH];
			for (int i = 0; i < ODF_BATCH; i++)
				batch[i] = sh->refs[order[k + i]];
			CHECK_EQ(kvp_free(sh->pool, batch, ODF_BATCH), KVP_OK);
			attempts += ODF_BATCH;
			k += ODF_BATCH;
		}
	}
	atomic_fetch_add(&sh->attempts, attempts);
}

static void *odf_worker(void *arg)
{
	struct odf_arg *a = arg;
	struct odf_shared *sh = a->sh;
	for (int round = 0; round < sh->rounds; round++) {
		if (a->idx == 0) {
			/* A fresh pool, so every round starts with this thread's
			 * slot raw-biased (raw mode) and stats from zero; a fresh
			 * owner made by this thread's allocate, so biased to it. */
			sh->pool = mkpool(256, false, 0, 8);
			sh->free_k = kvp_n_free(sh->pool, KVP_K);
			sh->owner = 1000 + (kvp_owner)round;
			sh->round_no = round;
			sh->free_all_by =
			    !sh->raw && round % 3 == 0 ? (int)(round / 3 % ODF_T) : -1;
			atomic_store(&sh->attempts, 0);
			for (int i = 0; i < ODF_N; i++) {
				size_t n;
				uint32_t fill = 1 + (uint32_t)(tu_rand(&a->rng) % 16);
				if (sh->raw)
					CHECK_EQ(kvp_alloc_block(sh->pool, KVP_K, KVP_FP16,
					                         &sh->refs[i]),
					         KVP_OK);
				else
					CHECK_EQ(kvp_allocate(sh->pool, KVP_K, fill, sh->owner,
					                      KVP_FP16, &sh->refs[i], 1, &n),
					         KVP_OK);
			}
		}
		pthread_barrier_wait(&sh->start);
		odf_touch(a);
		pthread_barrier_wait(&sh->done);
		if (a->idx == 0) {
			kvp_stats s;
			CHECK_EQ(kvp_pool_stats(sh->pool, &s), KVP_OK);
			uint64_t att = atomic_load(&sh->attempts);
			CHECK_EQ(s.n_allocations, ODF_N);
			CHECK_EQ(s.n_frees, ODF_N); /* each block freed exactly once */
			if (sh->free_all_by < 0)
				CHECK_EQ(s.n_stale_frees, att - ODF_N);
			else
				CHECK(s.n_stale_frees <= att && s.n_stale_frees >= att - ODF_N);
			CHECK_EQ(kvp_n_free(sh->pool, KVP_K), sh->free_k);
			CHECK_EQ(raw_not_full(sh->pool), 0);
			CHECK_EQ(s.n_not_full, 0);
			if (!sh->raw)
				CHECK_EQ(kvp_free_all(sh->pool, sh->owner), KVP_ENOENT);
			/* Every block once more, all distinct: none was pushed twice. */
			kvp_ref all[256];
			size_t got = 0;
			while (got < sh->free_k)
				CHECK_EQ(kvp_alloc_block(sh->pool, KVP_K, KVP_FP16, &all[got++]),
				         KVP_OK);
			kvp_ref extra;
			CHECK_EQ(kvp_alloc_block(sh->pool, KVP_K, KVP_FP16, &extra),
			         KVP_EEXHAUSTED);
			qsort(all, got, sizeof(all[0]), cmp_ref_id);
			for (size_t i = 1; i < got; i++)
				CHECK(KVP_REF_ID(all[i]) != KVP_REF_ID(all[i - 1]));
			kvp_pool_destroy(sh->pool);
		}
		pthread_barrier_wait(&sh->checked);
	}
	return NULL;
}

static void owned_double_free_case(bool raw)
{
	struct odf_shared sh;
	memset(&sh, 0, sizeof(sh));
	sh.raw = raw;
	sh.rounds = KVPI_TEST_TSAN ? 60 : 400;
	pthread_barrier_init(&sh.start, NULL, ODF_T);
	pthread_barrier_init(&sh.done, NULL, ODF_T);
	pthread_barrier_init(&sh.checked, NULL, ODF_T);
	struct odf_arg a[ODF_T];
	for (int i = 0; i < ODF_T; i++) {
		a[i].sh = &sh;
		a[i].idx = i;
		a[i].rng = seed0 ^ (0x9e3779b97f4a7c15ull * (uint64_t)(i + 1)) ^ raw;
	}
	run_threads(ODF_T, odf_worker, a, sizeof(a[0]));
	pthread_barrier_destroy(&sh.start);
	pthread_barrier_destroy(&sh.done);
	pthread_barrier_destroy(&sh.checked);
}

static void test_owned_double_free_race(void)
{
	owned_double_free_case(false);
}

/* The same with raw blocks: in the asymmetric mode the allocating thread
 * frees its raw blocks without a CAS while its slot's raw bias stands, and
 * the first other thread's free or set_used revokes it (a fresh pool each
 * round, so each round races one revocation). */
static void test_raw_double_free_race(void)
{
	owned_double_free_case(true);
}

/* ---- a raw block's fill changed by its own thread while another frees it ----
 * The allocating thread sets a raw block's fill (once, or there and back
 * to the same word) and frees it with its raw op's plain store, while a
 * second thread frees the same ref.  The second thread's free must revoke
 * the slot's raw bias before its CAS can succeed, however the word changed
 * in between: it once checked that the word was unchanged, so a fill set
 * by the owning thread (which revokes nothing) made it skip the revocation
 * and retry its CAS on the new word (or on the old one, the fill set back)
 * while the owning thread's plain store cleared the same hand-out: freed
 * twice.  Each attempt races one fresh raw block; the slot's bias is set
 * again (white-box, both threads quiet) when an attempt revoked it, as a
 * fresh slot's would be.  Checked: every block freed exactly once, the
 * other free counted stale, no block on the free lists twice. */

#define RFF_ATTEMPTS (KVPI_TEST_TSAN ? 20000 : 400000)

struct rff {
	kvp_pool *pool;
	kvp_ref ref;
	_Atomic int ready, go, done;
	uint64_t rng;
};

static void rff_wait(_Atomic int *w, int v)
{
	for (int i = 0; atomic_load(w) < v; i++)
		if (i > 1000)
			sched_yield();
}

static void rff_delay(uint64_t *rng, uint64_t max)
{
	for (uint64_t d = tu_rand(rng) % max; d > 0; d--)
		atomic_signal_fence(memory_order_seq_cst);
}

static void *rff_other(void *arg)
{
	struct rff *x = arg;
	for (int a = 1; a <= RFF_ATTEMPTS; a++) {
		atomic_store(&x->ready, a);
		rff_wait(&x->go, a);
		rff_delay(&x->rng, 16);
		CHECK_EQ(kvp_free_block(x->pool, x->ref), KVP_OK);
		atomic_store(&x->done, a);
	}
	return NULL;
}

static void test_raw_fill_free_race(void)
{
	kvp_pool *p = mkpool(64, false, 0, 8);
	size_t free_k = kvp_n_free(p, KVP_K);
	struct rff x;
	memset(&x, 0, sizeof(x));
	x.pool = p;
	x.rng = seed0 ^ 0x7ff;
	uint64_t rng = seed0 ^ 0x3ff;
	pthread_t t;
	CHECK_EQ(pthread_create(&t, NULL, rff_other, &x), 0);
	struct kvpi_tslot *me = kvpi_tslot_get(p);
	uint64_t rebiased = 0;
	for (int a = 1; a <= RFF_ATTEMPTS; a++) {
		if (p->asym && atomic_load(&me->raw_bias) != KVPI_RAW_BIASED) {
			atomic_store(&me->raw_bias, KVPI_RAW_BIASED);
			rebiased++;
		}
		CHECK_EQ(kvp_alloc_block(p, KVP_K, KVP_FP16, &x.ref), KVP_OK);
		rff_wait(&x.ready, a); /* both running when the race starts */
		atomic_store(&x.go, a);
		rff_delay(&rng, 512); /* sweeps the other free across set_used and free */
		int rc = kvp_block_set_used(p, x.ref, 3);
		CHECK(rc == KVP_OK || rc == KVP_ENOENT);
		if (a & 1) { /* back to the word it was: the same state word */
			rc = kvp_block_set_used(p, x.ref, 16);
			CHECK(rc == KVP_OK || rc == KVP_ENOENT);
		}
		CHECK_EQ(kvp_free_block(p, x.ref), KVP_OK);
		rff_wait(&x.done, a);
		if (a % 4096 == 0 || a == RFF_ATTEMPTS) {
			kvp_stats s;
			CHECK_EQ(kvp_pool_stats(p, &s), KVP_OK);
			CHECK_EQ(s.n_allocations, a);
			CHECK_EQ(s.n_frees, a); /* one free per block, never two */
			CHECK_EQ(s.n_stale_frees, a);
		}
	}
	CHECK_EQ(pthread_join(t, NULL), 0);
	CHECK_EQ(kvp_n_free(p, KVP_K), free_k); /* none pushed twice */
	kvp_pool_destroy(p);
	printf("  %d attempts, the slot's raw bias revoked in %llu\n", RFF_ATTEMPTS,
	       (unsigned long long)rebiased);
}

/* ---- biased owners raced by other threads ----
 * Producers allocate for owners made on their own thread (so biased to it),
 * while consumers free those blocks, list and free_all those owners, and
 * free some refs twice: every such touch revokes a bias while the producer
 * may be inside an owner op on the record; owners are made fresh each
 * round, so records are dropped, recycled through record caches and made
 * again under stale owner-cache entries.  Checked: the producer's own
 * allocations never fail, every block comes back exactly once (frees ==
 * allocations, stale frees == the duplicates we sent), nothing is lost. */

#define HANDOFF_Q 4096

struct handoff {
	kvp_pool *pool;
	pthread_mutex_t lock;
	kvp_ref q[HANDOFF_Q];
	kvp_owner qo[HANDOFF_Q];
	size_t n;
	_Atomic int producers_left;
	_Atomic uint64_t dup_sent;
	_Atomic uint64_t free_all_blocks;
};

struct handoff_arg {
	struct handoff *h;
	int idx;
	uint64_t rng;
	uint64_t allocs;
};

static void *handoff_producer(void *arg)
{
	struct handoff_arg *a = arg;
	struct handoff *h = a->h;
	kvp_ref r[8];
	size_t n;
	for (int round = 0; round < 300; round++) {
		kvp_owner o = ((uint64_t)a->idx << 32) | (uint64_t)round;
		/* A few allocations while the owner is biased to us (or revoked). */
		for (int k = 0; k < 4; k++) {
			uint32_t tok = 1 + (uint32_t)(tu_rand(&a->rng) % 128);
			int rc = kvp_allocate(h->pool, (k & 1) ? KVP_V : KVP_K, tok, o, KVP_FP16, r,
			                      8, &n);
			CHECK_EQ(rc, KVP_OK);
			a->allocs += n;
			pthread_mutex_lock(&h->lock);
			for (size_t i = 0; i < n; i++) {
				if (h->n == HANDOFF_Q) {
					pthread_mutex_unlock(&h->lock);
					CHECK_EQ(kvp_free(h->pool, &r[i], 1), KVP_OK);
					pthread_mutex_lock(&h->lock);
					continue;
				}
				h->q[h->n] = r[i];
				h->qo[h->n++] = o;
			}
			pthread_mutex_unlock(&h->lock);
		}
	}
	atomic_fetch_sub(&h->producers_left, 1);
	return NULL;
}

static void *handoff_consumer(void *arg)
{
	struct handoff_arg *a = arg;
	struct handoff *h = a->h;
	for (;;) {
		kvp_ref ref = 0;
		kvp_owner o = 0;
		bool got = false;
		pthread_mutex_lock(&h->lock);
		if (h->n) {
			size_t i = tu_rand(&a->rng) % h->n;
			ref = h->q[i];
			o = h->qo[i];
			h->q[i] = h->q[--h->n];
			h->qo[i] = h->qo[h->n];
			got = true;
		}
		pthread_mutex_unlock(&h->lock);
		if (!got) {
			if (atomic_load(&h->producers_left) == 0)
				return NULL;
			sched_yield();
			continue;
		}
		uint64_t dice = tu_rand(&a->rng) % 16;
		if (dice == 0) {
			size_t cnt;
			int rc = kvp_blocks_for(h->pool, o, NULL, 0, &cnt);
			CHECK(rc == KVP_ERANGE || rc == KVP_ENOENT);
		}
		CHECK_EQ(kvp_free(h->pool, &ref, 1), KVP_OK);
		if (dice == 1) {
			CHECK_EQ(kvp_free(h->pool, &ref, 1), KVP_OK); /* stale now */
			atomic_fetch_add(&h->dup_sent, 1);
		}
	}
}

static void test_biased_owner_handoff(void)
{
	kvp_pool *p = mkpool(1 << 16, false, 0, 16);
	static struct handoff h;
	struct handoff_arg a[8];
	memset(&h, 0, sizeof(h));
	h.pool = p;
	pthread_mutex_init(&h.lock, NULL);
	atomic_store(&h.producers_left, 4);
	memset(a, 0, sizeof(a));
	for (int t = 0; t < 8; t++) {
		a[t].h = &h;
		a[t].idx = t + 1;
		a[t].rng = seed0 * 31 + (uint64_t)t;
	}
	pthread_t th[8];
	for (int t = 0; t < 8; t++)
		CHECK_EQ(pthread_create(&th[t], NULL, t < 4 ? handoff_producer : handoff_consumer,
		                        &a[t]),
		         0);
	for (int t = 0; t < 8; t++)
		CHECK_EQ(pthread_join(th[t], NULL), 0);
	uint64_t allocs = 0;
	for (int t = 0; t < 4; t++)
		allocs += a[t].allocs;
	kvp_stats s;
	kvp_pool_stats(p, &s);
	CHECK_EQ(s.n_allocations, allocs);
	CHECK_EQ(s.n_frees, allocs);
	CHECK_EQ(s.n_stale_frees, atomic_load(&h.dup_sent));
	CHECK_EQ(kvp_stats_blocks_in_use(&s), 0);
	CHECK_EQ(kvp_n_free(p, KVP_K) + kvp_n_free(p, KVP_V), 1u << 16);
	/* Every owner was dropped when its last block went. */
	for (int t = 1; t <= 4; t++)
		for (int round = 0; round < 300; round += 37) {
			size_t cnt;
			CHECK_EQ(
			    kvp_blocks_for(p, ((uint64_t)t << 32) | (uint64_t)round, NULL, 0, &cnt),
			    KVP_ENOENT);
		}
	pthread_mutex_destroy(&h.lock);
	kvp_pool_destroy(p);
}

/* ---- 10,000 short-lived threads: nothing left behind ---- */

static void *short_worker(void *arg)
{
	kvp_pool *p = arg;
	kvp_ref r[4];
	size_t n;
	CHECK_EQ(kvp_allocate(p, KVP_K, 40, (kvp_owner)pthread_self(), KVP_FP16, r, 4, &n), KVP_OK);
	CHECK_EQ(kvp_free(p, r, 2), KVP_OK); /* two blocks stay in this thread's cache */
	CHECK_EQ(kvp_free(p, r + 2, 1), KVP_OK);
	return NULL;
}

static void test_short_lived_threads(void)
{
	enum { N = 10000, CONC = 4 };
	kvp_pool *p = mkpool(64, false, 0, 16);
	for (int i = 0; i < N; i += CONC) {
		pthread_t th[CONC];
		for (int j = 0; j < CONC; j++)
			CHECK_EQ(pthread_create(&th[j], NULL, short_worker, p), 0);
		for (int j = 0; j < CONC; j++)
			CHECK_EQ(pthread_join(th[j], NULL), 0);
	}
	size_t slots = 0, cached = 0;
	for (struct kvpi_tslot *s = atomic_load(&p->slots); s; s = s->next) {
		slots++;
		cached += atomic_load(&s->mag[0].count);
		CHECK_EQ(atomic_load(&s->taken), 0); /* every exited thread gave its slot back */
	}
	CHECK(slots <= CONC);
	CHECK_EQ(cached, 0); /* exiting threads returned their cached blocks */
	CHECK_EQ(kvp_n_free(p, KVP_K), 32);
	kvp_stats s;
	kvp_pool_stats(p, &s);
	CHECK_EQ(s.n_allocations, 3 * N);
	CHECK_EQ(s.n_frees, 3 * N);
	kvp_pool_destroy(p);
	printf("  %d threads, %zu slots ever made\n", N, slots);
}

/* A pool destroyed while threads that used it are still alive. */
static void *linger_worker(void *arg)
{
	pthread_barrier_t *bar = arg;
	kvp_pool *p;
	kvp_ref r;
	size_t n;
	pthread_barrier_wait(bar);
	p = *(kvp_pool **)((char *)bar + sizeof(*bar));
	CHECK_EQ(kvp_allocate(p, KVP_K, 1, 1, KVP_FP16, &r, 1, &n), KVP_OK);
	CHECK_EQ(kvp_free(p, &r, 1), KVP_OK);
	pthread_barrier_wait(bar); /* main destroys the pool now */
	pthread_barrier_wait(bar);
	return NULL; /* exits after the pool is gone */
}

static void test_destroy_before_thread_exit(void)
{
	struct {
		pthread_barrier_t bar;
		kvp_pool *pool;
	} sh;
	pthread_t th[4];
	pthread_barrier_init(&sh.bar, NULL, 5);
	sh.pool = mkpool(64, false, 0, 8);
	for (int i = 0; i < 4; i++)
		pthread_create(&th[i], NULL, linger_worker, &sh.bar);
	pthread_barrier_wait(&sh.bar);
	pthread_barrier_wait(&sh.bar);
	kvp_pool_destroy(sh.pool);
	/* A new pool, perhaps at the same address, is not confused with the old. */
	sh.pool = mkpool(64, false, 0, 8);
	pthread_barrier_wait(&sh.bar);
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	CHECK_EQ(kvp_n_free(sh.pool, KVP_K), 32);
	kvp_pool_destroy(sh.pool);
	pthread_barrier_destroy(&sh.bar);
}

/* ---- stats and history read while blocks move between threads ---- */

static _Atomic int churn_done;

static void *stats_churn(void *arg)
{
	kvp_pool *p = arg;
	static _Thread_local kvp_ref r[256];
	size_t n;
	kvp_owner me = (kvp_owner)(uintptr_t)&n; /* unique per thread */
	for (int i = 0; i < 3000; i++) {
		/* Big frees flush in batches mid-call; another thread takes them. */
		if (kvp_allocate(p, KVP_KV, 100 * 16, me, KVP_FP16, r, 256, &n) == KVP_OK)
			CHECK_EQ(kvp_free(p, r, n), KVP_OK);
		if (kvp_allocate(p, KVP_KV, 64 * 16, me, KVP_FP16, r, 256, &n) == KVP_OK)
			CHECK_EQ(kvp_free_all(p, me), KVP_OK);
		/* Never fits: every thread records history, racing the others. */
		CHECK_EQ(kvp_allocate(p, KVP_KV, 200 * 16, me, KVP_FP16, r, 256, &n),
		         KVP_EEXHAUSTED);
	}
	atomic_fetch_add(&churn_done, 1);
	return NULL;
}

static void test_stats_read_under_churn(void)
{
	kvp_pool_config c;
	kvp_pool *p;
	kvp_pool_config_init(&c);
	c.n_blocks = 128;
	c.separate_kv = false;
	c.thread_cache = 0;
	c.history_len = 64;
	CHECK_EQ(kvp_pool_create(&c, &p), KVP_OK);
	pthread_t th[3];
	atomic_store(&churn_done, 0);
	for (int i = 0; i < 3; i++)
		CHECK_EQ(pthread_create(&th[i], NULL, stats_churn, p), 0);
	while (atomic_load(&churn_done) < 3) {
		kvp_stats s;
		CHECK_EQ(kvp_pool_stats(p, &s), KVP_OK);
		/* Never more in use, or a higher peak, than the pool has. */
		CHECK(kvp_stats_blocks_in_use(&s) <= s.n_blocks);
		CHECK(s.peak_blocks_in_use <= s.n_blocks);
	}
	for (int i = 0; i < 3; i++)
		CHECK_EQ(pthread_join(th[i], NULL), 0);
	/* History, recorded by racing exhausted calls, stays oldest first. */
	kvp_stats h[64];
	size_t nh = kvp_pool_history(p, h, 64);
	CHECK_EQ(nh, 64);
	for (size_t i = 1; i < nh; i++) {
		CHECK(h[i].n_exhausted >= h[i - 1].n_exhausted);
		CHECK(h[i].n_allocations >= h[i - 1].n_allocations);
	}
	kvp_pool_destroy(p);
}

int main(void)
{
	const char *env = getenv("KVP_RACE_SEED");
	seed0 = env ? strtoull(env, NULL, 0) : 0x5eed5eedull;
	printf("seed %llu (set KVP_RACE_SEED to replay)\n", (unsigned long long)seed0);
	{
		/* Say which protocol runs, and insist on the one asked for. */
		kvp_pool *p = mkpool(16, false, 0, 8);
		const char *ff = getenv("KVPOOL_FORCE_FALLBACK");
		printf("mode: %s\n", p->asym ? "asymmetric (membarrier)" : "fallback (seq_cst)");
		if (ff && ff[0] == '1')
			CHECK(!p->asym);
		if (getenv("KVP_RACE_EXPECT_ASYM") && !KVPI_TEST_TSAN)
			CHECK(p->asym);
		kvp_pool_destroy(p);
	}
	RUN(test_alloc_free_race);
	RUN(test_alloc_grow_race);
	RUN(test_free_shrink_race);
	RUN(test_grow_directory_race);
	RUN(test_alloc_free_all_shared_owners);
	RUN(test_race_for_last_blocks);
	RUN(test_no_false_exhaustion);
	RUN(test_lifecycle_race);
	RUN(test_register_race);
	RUN(test_double_free_race);
	RUN(test_owned_double_free_race);
	RUN(test_raw_double_free_race);
	RUN(test_raw_fill_free_race);
	RUN(test_biased_owner_handoff);
	RUN(test_stats_read_under_churn);
	RUN(test_short_lived_threads);
	RUN(test_destroy_before_thread_exit);
	return 0;
}
