/*
 * tests/prefix_exhaust_test.c - KVP_EEXHAUSTED in a prefix pool means what pool.h says.
 *
 * kvpool/pool.h: KVP_EEXHAUSTED means that at some instant during the call
 * fewer blocks were free (or cached and unheld) than the request needed.
 *
 * Bystander: a 64-block pool, 10 blocks held throughout.  Thread A asks
 * for 55 blocks again and again (never possible: at most 54 are ever
 * available).  Thread B allocates and frees 1 to 3 blocks in a loop, so at
 * least 51 blocks are available at every instant: B must never get
 * KVP_EEXHAUSTED.  Once with plain free blocks only, once with B
 * publishing what it allocates, so that most free blocks are cached and
 * B's allocations evict.
 *
 * Race: T threads on a pool of T * K blocks.  Each iteration a thread
 * matches up to K keys of one of a few sequences (m blocks), allocates
 * K - m more, publishes them under the sequence's next keys, and lets go
 * of everything.  A thread thus holds at most K distinct blocks at any
 * instant, so when a thread asks for K - m blocks at least K - m blocks
 * are free or cached and unheld: every KVP_EEXHAUSTED is false.  A ledger
 * counts false exhaustions, blocks handed out by kvp_allocate while the
 * ledger says another thread holds them (owned twice), and matches that
 * return a block not published under the key asked for.  All three must
 * be 0.
 *
 * Evicting ahead (lib/prefix/prefix_alloc.c) moves cached blocks into the
 * evicting thread's magazine (or onto the free stack) before they are
 * needed; both tests run again with it on at
 * every cache size (the threshold lowered to 0 before the threads start),
 * so it races the exhaustion rule, eviction and the ledger too.
 *
 * KVP_SOAK_SECONDS=N runs each bystander phase N seconds and the race 2N
 * (a soak) instead of a fraction of a second; an argument "race" or
 * "bystander" runs only those.
 */
#include <kvpool/kvpool.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BS 4

#include "lib/testing/prefix_peek.h"
#include "tests/prefix_testutil.h"

/* Evict ahead at every cache size (the ahead variants), or as shipped. */
static bool ahead_always;

/* That the knob took: @p's @n blocks cached, one block allocated evicts
 * KVPI_PFX_EVICT_AHEAD of them (all @n when fewer); then everything freed
 * and unpublished again, as a fresh pool. */
static void check_ahead_on(kvp_pool *p, uint32_t n)
{
	kvp_ref refs[64];
	size_t got;
	kvp_stats s;
	CHECK(n <= 64 && n >= 16);
	CHECK_EQ(kvp_allocate(p, KVP_KV, n * BS, 99, KVP_FP32, refs, n, &got), KVP_OK);
	for (uint32_t i = 0; i < n; i++)
		CHECK_EQ(kvp_prefix_publish(p, refs[i], tpx_key(99, 0, i)), KVP_OK);
	CHECK_EQ(kvp_free_all(p, 99), KVP_OK);
	CHECK_EQ(kvp_allocate(p, KVP_KV, BS, 99, KVP_FP32, refs, 1, &got), KVP_OK);
	CHECK_EQ(kvp_pool_stats(p, &s), KVP_OK);
	uint32_t ahead = n < KVPI_PFX_EVICT_AHEAD ? n : KVPI_PFX_EVICT_AHEAD;
	CHECK_EQ(s.n_evictions, ahead);
	CHECK_EQ(s.n_cached, n - ahead);
	CHECK_EQ(kvp_free_all(p, 99), KVP_OK);
	kvp_prefix_reset(p);
	CHECK_EQ(kvp_n_free(p, KVP_KV), n);
}

/* tpx_pool, with evicting ahead at every cache size when ahead_always. */
static kvp_pool *test_pool(uint32_t n_blocks)
{
	kvp_pool *p = tpx_pool(BS, n_blocks);
	if (ahead_always) {
		p->prefix->ahead_cached = 0; /* before any other thread sees the pool */
		check_ahead_on(p, n_blocks);
	}
	return p;
}

static double phase_seconds(void)
{
	const char *e = getenv("KVP_SOAK_SECONDS");
	return e ? atof(e) : 0.7;
}

static void nap_10ms(void)
{
	struct timespec ts = {0, 10000000};
	nanosleep(&ts, NULL);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* --- bystander -------------------------------------------------------------- */

struct by {
	kvp_pool *p;
	bool publish; /* B publishes what it allocates (cached free blocks) */
	_Atomic bool stop;
	_Atomic uint64_t a_calls, a_ok, b_calls, b_exhausted, b_other;
};

static void *by_big(void *arg)
{
	struct by *t = arg;
	kvp_ref refs[64];
	size_t n;

	while (!atomic_load(&t->stop)) {
		int rc = kvp_allocate(t->p, KVP_KV, 55 * BS, 100, KVP_FP32, refs, 64, &n);
		atomic_fetch_add(&t->a_calls, 1);
		if (rc == KVP_OK) { /* impossible: count it, give it back */
			atomic_fetch_add(&t->a_ok, 1);
			CHECK_EQ(kvp_free_all(t->p, 100), KVP_OK);
		}
	}
	return NULL;
}

static void *by_small(void *arg)
{
	struct by *t = arg;
	kvp_ref refs[4];
	size_t n;
	uint64_t i = 0, rng = 5;

	while (!atomic_load(&t->stop)) {
		uint32_t nb = 1 + (uint32_t)(tu_rand(&rng) % 3);
		int rc = kvp_allocate(t->p, KVP_KV, nb * BS, 200, KVP_FP32, refs, 4, &n);
		atomic_fetch_add(&t->b_calls, 1);
		if (rc == KVP_EEXHAUSTED) {
			atomic_fetch_add(&t->b_exhausted, 1);
			continue;
		}
		if (rc != KVP_OK) {
			atomic_fetch_add(&t->b_other, 1);
			continue;
		}
		if (t->publish)
			for (size_t j = 0; j < n; j++)
				(void)kvp_prefix_publish(
				    t->p, refs[j],
				    tpx_key(7, (uint32_t)(i >> 20), (uint32_t)(i & 0xfffff)));
		i++;
		CHECK_EQ(kvp_free_all(t->p, 200), KVP_OK);
	}
	return NULL;
}

static void bystander(bool publish)
{
	struct by t = {0};
	kvp_ref held[10];
	size_t n;
	pthread_t a, b;

	t.p = test_pool(64);
	t.publish = publish;
	CHECK_EQ(kvp_allocate(t.p, KVP_KV, 10 * BS, 1, KVP_FP32, held, 10, &n), KVP_OK);
	CHECK_EQ(pthread_create(&a, NULL, by_big, &t), 0);
	CHECK_EQ(pthread_create(&b, NULL, by_small, &t), 0);
	double end = now_s() + phase_seconds();
	while (now_s() < end)
		nap_10ms();
	atomic_store(&t.stop, true);
	pthread_join(a, NULL);
	pthread_join(b, NULL);
	printf("bystander (%s): A %llu calls, %llu ok; B %llu calls, %llu false exhaustions, "
	       "%llu other errors\n",
	       publish ? "cached blocks" : "plain free blocks", (unsigned long long)t.a_calls,
	       (unsigned long long)t.a_ok, (unsigned long long)t.b_calls,
	       (unsigned long long)t.b_exhausted, (unsigned long long)t.b_other);
	CHECK_EQ(t.a_ok, 0);
	CHECK_EQ(t.b_other, 0);
	CHECK(t.b_calls > 0);
	CHECK_EQ(t.b_exhausted, 0);
	CHECK_EQ(kvp_free_all(t.p, 1), KVP_OK);
	kvp_pool_destroy(t.p);
}

static void test_bystander_plain(void)
{
	bystander(false);
}

static void test_bystander_cached(void)
{
	bystander(true);
}

/* --- race with a ledger --------------------------------------------------------- */

#define T     4
#define K     6
#define NSEQ  6
#define NPOOL (T * K)

struct race {
	kvp_pool *p;
	_Atomic bool stop;
	_Atomic uint32_t holders[NPOOL]; /* ledger: threads holding each block */
	_Atomic uint64_t pub_lo[NPOOL];  /* ledger: key each block is published under (lo), 0 */
	_Atomic uint64_t allocs, matched, false_exh, twice, wrong_match, other;
};

struct racer {
	struct race *r;
	uint32_t idx;
};

static kvp_hash seq_key(uint32_t seq, uint32_t j)
{
	return tpx_key(seq + 1, j, 77);
}

static void *racer(void *arg)
{
	struct racer *me = arg;
	struct race *r = me->r;
	kvp_owner owner = 1000 + me->idx;
	uint64_t rng = tpx_seed() + me->idx * 7919;
	kvp_hash keys[K];
	kvp_ref refs[K];
	uint32_t ids[K];

	while (!atomic_load(&r->stop)) {
		uint32_t seq = (uint32_t)(tu_rand(&rng) % NSEQ);
		size_t m = 0, n = 0, want = 1 + tu_rand(&rng) % K;
		for (uint32_t j = 0; j < K; j++)
			keys[j] = seq_key(seq, j);
		CHECK_EQ(kvp_prefix_match(r->p, KVP_KV, KVP_FP32, keys, want, owner, refs, K, &m),
		         KVP_OK);
		for (size_t j = 0; j < m; j++) {
			uint32_t id = KVP_REF_ID(refs[j]);
			CHECK(id < NPOOL);
			ids[j] = id;
			atomic_fetch_add(&r->holders[id], 1);
			if (atomic_load(&r->pub_lo[id]) != keys[j].lo)
				tpx_violation(&r->wrong_match,
				              "match returned a block of another key", id);
		}
		atomic_fetch_add(&r->matched, m);
		if (m < K) {
			uint32_t nb = (uint32_t)(K - m);
			int rc = kvp_allocate(r->p, KVP_KV, nb * BS, owner, KVP_FP32, refs + m,
			                      K - m, &n);
			atomic_fetch_add(&r->allocs, 1);
			if (rc == KVP_EEXHAUSTED)
				atomic_fetch_add(&r->false_exh, 1);
			else if (rc != KVP_OK)
				atomic_fetch_add(&r->other, 1);
			for (size_t j = m; j < m + n; j++) {
				uint32_t id = KVP_REF_ID(refs[j]);
				CHECK(id < NPOOL);
				ids[j] = id;
				if (atomic_fetch_add(&r->holders[id], 1) != 0)
					tpx_violation(&r->twice, "allocate handed out a held block",
					              id);
				atomic_store(&r->pub_lo[id], 0);
			}
			/* publish under the sequence's keys: the ledger first, so a
			 * match that finds the key finds the ledger set */
			for (size_t j = m; j < m + n; j++) {
				atomic_store(&r->pub_lo[ids[j]], keys[j].lo);
				int prc = kvp_prefix_publish(r->p, refs[j], keys[j]);
				if (prc == KVP_EEXIST)
					atomic_store(&r->pub_lo[ids[j]], 0);
				else if (prc != KVP_OK)
					atomic_fetch_add(&r->other, 1);
			}
		}
		if (tu_rand(&rng) % 4 == 0)
			sched_yield(); /* hold a while */
		/* the ledger lets go first: after the free another thread may
		 * get the block at once */
		for (size_t j = 0; j < m + n; j++)
			atomic_fetch_sub(&r->holders[ids[j]], 1);
		if (m + n)
			CHECK_EQ(kvp_free_all(r->p, owner), KVP_OK);
	}
	return NULL;
}

static void test_race_ledger(void)
{
	static struct race r;
	struct racer args[T];
	pthread_t th[T];

	memset(&r, 0, sizeof r);
	r.p = test_pool(NPOOL);
	for (uint32_t i = 0; i < T; i++) {
		args[i] = (struct racer){&r, i};
		CHECK_EQ(pthread_create(&th[i], NULL, racer, &args[i]), 0);
	}
	double end = now_s() + 2 * phase_seconds();
	while (now_s() < end)
		nap_10ms();
	atomic_store(&r.stop, true);
	for (uint32_t i = 0; i < T; i++)
		pthread_join(th[i], NULL);
	printf("race: %llu allocations, %llu blocks matched; %llu false exhaustions, %llu owned "
	       "twice, %llu wrong matches, %llu other errors\n",
	       (unsigned long long)r.allocs, (unsigned long long)r.matched,
	       (unsigned long long)r.false_exh, (unsigned long long)r.twice,
	       (unsigned long long)r.wrong_match, (unsigned long long)r.other);
	CHECK(r.allocs > 0);
	CHECK_EQ(r.false_exh, 0);
	CHECK_EQ(r.twice, 0);
	CHECK_EQ(r.wrong_match, 0);
	CHECK_EQ(r.other, 0);
	kvp_pool_destroy(r.p);
}

/* No argument: every test.  "race" or "bystander": those only (a soak of one). */
int main(int argc, char **argv)
{
	bool race = argc < 2 || strcmp(argv[1], "race") == 0;
	bool by = argc < 2 || strcmp(argv[1], "bystander") == 0;

	if (by) {
		RUN(test_bystander_plain);
		RUN(test_bystander_cached);
	}
	if (race)
		RUN(test_race_ledger);
	ahead_always = true;
	if (by)
		RUN(test_bystander_cached);
	if (race)
		RUN(test_race_ledger);
	return 0;
}
