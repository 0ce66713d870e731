/*
 * tests/prefix_claim_test.c - a request that fails evicts nothing, even when
 * matches take the cached blocks it counted.
 *
 * An allocation of two blocks on a pool whose two blocks are both cached
 * counts them, and then evicts.  The count is wrapped (-Wl,--wrap=
 * kvpi_pfx_n_cached): right after it, another thread matches the first key
 * and so takes one of the two blocks.  The allocation then finds one block
 * to evict where it needs two, and fails (the pool may not grow).  It must
 * leave the other cached block as it was: still cached, its key still
 * found, nothing counted as evicted.  (Before the claim/commit split the
 * block it had evicted went back as an uncached free block, its key gone.)
 *
 * A reset that runs while an allocation holds a claimed block (the claim is
 * wrapped, -Wl,--wrap=kvpi_pfx_claim: right after it, another thread resets
 * the cache) must not leave that block's key findable once the failed
 * allocation gives the block back: kvp_prefix_reset evicts every cached
 * block, and that block was cached before the reset began.  (Before the
 * fix the claimed block was off its list and not in use, so the reset
 * passed it over, and the allocation put it back with its key.)
 *
 * A publish of a claimed block's key (the claim wrapped again: right after
 * it, another thread publishes a fresh block under that key) takes the
 * key over, where it used to be refused (KVP_EEXIST) and leave the key to
 * a block on its way out.  Whether the allocation then commits its claim
 * or gives it back, the key names the fresh block afterwards, and a block
 * given back after losing its key is evicted, not cached again.
 *
 * And raced: threads match, allocate (often more than is free or cached, so
 * claims are given back), publish and let go on a pool of a few blocks, and
 * now and then reset; the claim is followed by a yield now and then, so a
 * claimed block stays claimed while others match, evict, release and reset.
 * A content ledger (as in tests/prefix_race_test.c) checks that a match
 * never gets other contents; at the end every block is free, and one
 * request for the whole pool is met (so every block counted as cached is
 * on a list an evictor walks: none was lost off its list or left
 * claimed), after which nothing is cached.
 * Runs in plain, ASan and TSan builds.
 */
#include <kvpool/kvpool.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "tests/prefix_testutil.h"

#define BS 4u

struct kvpi_prefix;
uint64_t __real_kvpi_pfx_n_cached(struct kvpi_prefix *pf, int si);
uint64_t __wrap_kvpi_pfx_n_cached(struct kvpi_prefix *pf, int si);
struct kvp_pool;
struct kvpi_tslot;
uint32_t __real_kvpi_pfx_claim(struct kvp_pool *p, struct kvpi_tslot *s, int si, uint32_t *ids,
                               uint32_t n);
uint32_t __wrap_kvpi_pfx_claim(struct kvp_pool *p, struct kvpi_tslot *s, int si, uint32_t *ids,
                               uint32_t n);
void __real_kvpi_pfx_unclaim(struct kvp_pool *p, struct kvpi_tslot *s, int si, uint32_t *ids,
                             uint32_t n, uint64_t resets0);
void __wrap_kvpi_pfx_unclaim(struct kvp_pool *p, struct kvpi_tslot *s, int si, uint32_t *ids,
                             uint32_t n, uint64_t resets0);

static kvp_pool *pool;
static _Thread_local bool interfere;  /* the allocating thread, once */
static _Thread_local bool reset_next; /* the allocating thread, once */
static uint32_t key_set = 1;          /* the first key of tpx_key(key_set, 0, i) */

static void *take_first(void *arg)
{
	(void)arg;
	kvp_hash k = tpx_key(key_set, 0, 0);
	kvp_ref r;
	size_t n = 0;
	CHECK_EQ(kvp_prefix_match(pool, KVP_KV, KVP_FP16, &k, 1, 77, &r, 1, &n), KVP_OK);
	CHECK_EQ(n, 1);
	return NULL;
}

/* After the count: another thread takes one of the counted blocks. */
uint64_t __wrap_kvpi_pfx_n_cached(struct kvpi_prefix *pf, int si)
{
	uint64_t c = __real_kvpi_pfx_n_cached(pf, si);
	if (interfere) {
		interfere = false;
		pthread_t t;
		CHECK_EQ(pthread_create(&t, NULL, take_first, NULL), 0);
		CHECK_EQ(pthread_join(t, NULL), 0);
	}
	return c;
}

static void *reset_cache(void *arg)
{
	*(size_t *)arg = kvp_prefix_reset(pool);
	return NULL;
}

static size_t reset_dropped;
static bool racing; /* set before the race's threads start */
static _Thread_local uint64_t wrap_rng = 88172645463325252ull;
static _Atomic uint64_t unclaimed; /* blocks given back by failed requests */

/* Count the blocks given back, after a pause now and then. */
void __wrap_kvpi_pfx_unclaim(struct kvp_pool *p, struct kvpi_tslot *s, int si, uint32_t *ids,
                             uint32_t n, uint64_t resets0)
{
	atomic_fetch_add(&unclaimed, n);
	if (racing && tu_rand(&wrap_rng) % 2 == 0)
		sched_yield();
	__real_kvpi_pfx_unclaim(p, s, si, ids, n, resets0);
}

/* A block to publish from another thread while a claim is held. */
static _Thread_local bool publish_next; /* the allocating thread, once */
static kvp_ref over_ref;
static kvp_hash over_key;
static int over_rc;

static void *publish_over(void *arg)
{
	(void)arg;
	over_rc = kvp_prefix_publish(pool, over_ref, over_key);
	return NULL;
}

/* After the claim: another thread resets the cache, or publishes a block
 * under a claimed key (and waits for it). */
uint32_t __wrap_kvpi_pfx_claim(struct kvp_pool *p, struct kvpi_tslot *s, int si, uint32_t *ids,
                               uint32_t n)
{
	uint32_t got = __real_kvpi_pfx_claim(p, s, si, ids, n);
	if (racing && tu_rand(&wrap_rng) % 2 == 0)
		sched_yield(); /* hold the claims a while */
	if (reset_next || publish_next) {
		pthread_t t;
		CHECK_EQ(pthread_create(&t, NULL, reset_next ? reset_cache : publish_over,
		                        &reset_dropped),
		         0);
		CHECK_EQ(pthread_join(t, NULL), 0);
		reset_next = publish_next = false;
	}
	return got;
}

/* A fresh pool of @nblocks blocks, the interfering match on key set @set. */
static void start(uint32_t set, uint32_t nblocks)
{
	key_set = set;
	pool = tpx_pool(BS, nblocks);
}

static void finish(void)
{
	kvp_pool_destroy(pool);
	pool = NULL;
}

/* Block @r is free and unpublished, and no block is cached: the pool's
 * stats then. */
static kvp_stats dropped_nothing_cached(kvp_ref r)
{
	kvp_block_info bi;
	CHECK_EQ(kvp_block_get(pool, r, &bi), KVP_OK);
	CHECK(!bi.in_use && !bi.published);
	kvp_stats st;
	CHECK_EQ(kvp_pool_stats(pool, &st), KVP_OK);
	CHECK_EQ(st.n_cached, 0);
	return st;
}

/* Blocks @r[0..@n) of owner 5, published under tpx_key(@set, 0, i), then
 * released: cached, the first one the least recently. */
static void cache_blocks(kvp_ref *r, uint32_t n, uint32_t set)
{
	size_t got;
	CHECK_EQ(kvp_allocate(pool, KVP_KV, n * BS, 5, KVP_FP16, r, n, &got), KVP_OK);
	for (uint32_t i = 0; i < n; i++)
		CHECK_EQ(kvp_prefix_publish(pool, r[i], tpx_key(set, 0, i)), KVP_OK);
	CHECK_EQ(kvp_free_all(pool, 5), KVP_OK);
}

static void test_failed_request_evicts_nothing(void)
{
	start(1, 2);
	kvp_ref r[2];
	size_t n;
	cache_blocks(r, 2, 1);
	kvp_stats st;
	CHECK_EQ(kvp_pool_stats(pool, &st), KVP_OK);
	CHECK_EQ(st.n_cached, 2);

	interfere = true;
	kvp_ref got[2];
	CHECK_EQ(kvp_allocate(pool, KVP_KV, 2 * BS, 6, KVP_FP16, got, 2, &n), KVP_EEXHAUSTED);
	CHECK(!interfere); /* the count ran, and the other thread matched */

	/* The second block: still cached under its key, nothing evicted. */
	kvp_block_info bi;
	CHECK_EQ(kvp_block_get(pool, r[1], &bi), KVP_OK);
	CHECK(!bi.in_use && bi.published);
	CHECK_EQ(kvp_pool_stats(pool, &st), KVP_OK);
	CHECK_EQ(st.n_evictions, 0);
	CHECK_EQ(st.n_cached, 1);
	kvp_hash k = tpx_key(1, 0, 1);
	kvp_ref m;
	CHECK_EQ(kvp_prefix_match(pool, KVP_KV, KVP_FP16, &k, 1, 8, &m, 1, &n), KVP_OK);
	CHECK_EQ(n, 1);
	CHECK_EQ(KVP_REF_ID(m), KVP_REF_ID(r[1]));
	/* And the pool still works: both blocks back, a full request met. */
	CHECK_EQ(kvp_free_all(pool, 8), KVP_OK);
	CHECK_EQ(kvp_free_all(pool, 77), KVP_OK);
	CHECK_EQ(kvp_allocate(pool, KVP_KV, 2 * BS, 6, KVP_FP16, got, 2, &n), KVP_OK);
	CHECK_EQ(kvp_free_all(pool, 6), KVP_OK);
	finish();
}

/*
 * As above, and a reset runs to its end between the claim and the failure:
 * the claimed block's key is gone afterwards, as every key cached before
 * the reset, and the pool is whole (both blocks free, usable).
 */
static void test_reset_while_claimed_drops_key(void)
{
	start(2, 2);
	kvp_ref r[2];
	size_t n;
	cache_blocks(r, 2, 2);

	interfere = true;
	reset_next = true;
	kvp_ref got[2];
	CHECK_EQ(kvp_allocate(pool, KVP_KV, 2 * BS, 6, KVP_FP16, got, 2, &n), KVP_EEXHAUSTED);
	CHECK(!interfere && !reset_next); /* the match and the reset ran */
	CHECK_EQ(reset_dropped, 1);       /* the held block's key */

	/* The claimed block: its key dropped, as the reset promises. */
	kvp_hash k = tpx_key(2, 0, 1);
	kvp_ref m;
	CHECK_EQ(kvp_prefix_match(pool, KVP_KV, KVP_FP16, &k, 1, 8, &m, 1, &n), KVP_OK);
	CHECK_EQ(n, 0);
	(void)dropped_nothing_cached(r[1]);
	/* The pool is whole: the held block back, a full request met. */
	CHECK_EQ(kvp_free_all(pool, 77), KVP_OK);
	CHECK_EQ(kvp_n_free(pool, KVP_KV), 2);
	CHECK_EQ(kvp_allocate(pool, KVP_KV, 2 * BS, 6, KVP_FP16, got, 2, &n), KVP_OK);
	CHECK_EQ(kvp_free_all(pool, 6), KVP_OK);
	finish();
}

/* The id a match of @k by a throw-away owner gets, or UINT32_MAX. */
static uint32_t holder_of(kvp_hash k)
{
	kvp_ref m;
	size_t n;
	CHECK_EQ(kvp_prefix_match(pool, KVP_KV, KVP_FP16, &k, 1, 4242, &m, 1, &n), KVP_OK);
	if (n == 0)
		return UINT32_MAX;
	CHECK_EQ(kvp_free_all(pool, 4242), KVP_OK);
	return KVP_REF_ID(m);
}

/*
 * Block x is held, unpublished; block c is cached under key K.  An
 * allocation evicts c (its only way to the blocks it needs), and while c
 * is claimed another thread publishes x under K: KVP_OK, and K names x
 * once the allocation is done.
 */
static void test_publish_takes_over_claimed_key(void)
{
	start(4, 3);
	kvp_ref x, c, got[2];
	size_t n;
	kvp_hash k = tpx_key(4, 0, 0);
	CHECK_EQ(kvp_allocate(pool, KVP_KV, BS, 9, KVP_FP16, &x, 1, &n), KVP_OK);
	cache_blocks(&c, 1, 4);
	CHECK_EQ(kvp_prefix_publish(pool, x, k), KVP_EEXIST); /* c is cached, not claimed */

	over_ref = x;
	over_key = k;
	over_rc = 1;
	publish_next = true;
	CHECK_EQ(kvp_allocate(pool, KVP_KV, 2 * BS, 6, KVP_FP16, got, 2, &n), KVP_OK);
	CHECK(!publish_next);
	CHECK_EQ(over_rc, KVP_OK);
	CHECK(KVP_REF_ID(got[0]) == KVP_REF_ID(c) || KVP_REF_ID(got[1]) == KVP_REF_ID(c));
	CHECK_EQ(holder_of(k), KVP_REF_ID(x));
	kvp_stats st;
	CHECK_EQ(kvp_pool_stats(pool, &st), KVP_OK);
	CHECK_EQ(st.n_evictions, 1);
	/* x goes to the cache under K at its release, and is found there. */
	CHECK_EQ(kvp_free_all(pool, 9), KVP_OK);
	CHECK_EQ(kvp_pool_stats(pool, &st), KVP_OK);
	CHECK_EQ(st.n_cached, 1);
	CHECK_EQ(holder_of(k), KVP_REF_ID(x));
	CHECK_EQ(kvp_free_all(pool, 6), KVP_OK);
	finish();
}

/*
 * As above, but the allocation then fails (a match takes the other cached
 * block it counted) and gives its claim back: the block whose key went to
 * x is evicted (free, unpublished, not cached), and K still names x.
 */
static void test_unclaim_after_takeover_evicts(void)
{
	start(5, 4);
	kvp_ref x, r[2], got[3];
	size_t n;
	CHECK_EQ(kvp_allocate(pool, KVP_KV, BS, 9, KVP_FP16, &x, 1, &n), KVP_OK);
	cache_blocks(r, 2, 5);

	over_ref = x;
	over_key = tpx_key(5, 0, 1);
	over_rc = 1;
	interfere = true;    /* takes r[0] (key 0) after the count */
	publish_next = true; /* x under key 1 while r[1] is claimed */
	CHECK_EQ(kvp_allocate(pool, KVP_KV, 3 * BS, 6, KVP_FP16, got, 3, &n), KVP_EEXHAUSTED);
	CHECK(!interfere && !publish_next);
	CHECK_EQ(over_rc, KVP_OK);

	kvp_stats st = dropped_nothing_cached(r[1]);
	CHECK_EQ(st.n_evictions, 1);
	CHECK_EQ(holder_of(tpx_key(5, 0, 1)), KVP_REF_ID(x));
	CHECK_EQ(kvp_n_free(pool, KVP_KV), 2); /* the free one and r[1] */
	/* The pool is whole: every block back, a full request met. */
	CHECK_EQ(kvp_free_all(pool, 77), KVP_OK);
	CHECK_EQ(kvp_free_all(pool, 9), KVP_OK);
	CHECK_EQ(kvp_allocate(pool, KVP_KV, 4 * BS, 6, KVP_FP16, got, 3, &n), KVP_ERANGE);
	kvp_ref all[4];
	CHECK_EQ(kvp_allocate(pool, KVP_KV, 4 * BS, 6, KVP_FP16, all, 4, &n), KVP_OK);
	CHECK_EQ(kvp_free_all(pool, 6), KVP_OK);
	finish();
}

#define RBLOCKS  24u
#define RTHREADS 6
#define RSEQ     12
#define RLEN     8
#define RITERS   1500

static uint64_t content[RBLOCKS]; /* the ledger: written before publish */
static _Atomic uint64_t violations;

static void *racer(void *arg)
{
	uint64_t rng = 0x9e3779b97f4a7c15ull * (uintptr_t)arg + 1;
	kvp_ref refs[RLEN];
	kvp_hash keys[RLEN];
	for (int it = 0; it < RITERS; it++) {
		kvp_owner owner = ((uint64_t)(uintptr_t)arg << 32) | (uint64_t)it | 1;
		uint32_t seq = (uint32_t)(tu_rand(&rng) % RSEQ);
		size_t len = 1 + tu_rand(&rng) % RLEN, m, n;
		for (size_t j = 0; j < len; j++)
			keys[j] = tpx_key(3, seq, (uint32_t)j);
		CHECK_EQ(kvp_prefix_match(pool, KVP_KV, KVP_FP16, keys, len, owner, refs, RLEN, &m),
		         KVP_OK);
		for (size_t i = 0; i < m; i++)
			if (content[KVP_REF_ID(refs[i])] != tpx_tag(keys[i]))
				tpx_violation(&violations, "matched block has other contents",
				              KVP_REF_ID(refs[i]));
		if (len > m) {
			int rc = kvp_allocate(pool, KVP_KV, (uint32_t)(len - m) * BS, owner,
			                      KVP_FP16, refs + m, RLEN - m, &n);
			if (rc == KVP_OK) {
				for (size_t i = m; i < len; i++) {
					content[KVP_REF_ID(refs[i])] = tpx_tag(keys[i]);
					rc = kvp_prefix_publish(pool, refs[i], keys[i]);
					if (rc != KVP_OK && rc != KVP_EEXIST)
						tpx_violation(&violations, "publish failed",
						              KVP_REF_ID(refs[i]));
				}
			} else {
				CHECK_EQ(rc, KVP_EEXHAUSTED);
			}
		}
		if (tu_rand(&rng) % 4 == 0)
			sched_yield();
		int rc = kvp_free_all(pool, owner);
		CHECK(rc == KVP_OK || rc == KVP_ENOENT);
		if (tu_rand(&rng) % 64 == 0)
			(void)kvp_prefix_reset(pool);
	}
	return NULL;
}

static void test_race_claims(void)
{
	start(3, RBLOCKS);
	racing = true;
	pthread_t t[RTHREADS];
	for (uintptr_t i = 0; i < RTHREADS; i++)
		CHECK_EQ(pthread_create(&t[i], NULL, racer, (void *)(i + 1)), 0);
	for (int i = 0; i < RTHREADS; i++)
		CHECK_EQ(pthread_join(t[i], NULL), 0);
	racing = false;
	CHECK_EQ(atomic_load(&violations), 0);
	CHECK(atomic_load(&unclaimed) > 0); /* the path under test ran */
	kvp_stats st;
	CHECK_EQ(kvp_pool_stats(pool, &st), KVP_OK);
	printf("race: %llu blocks given back, %llu evictions, %llu cached at the end\n",
	       (unsigned long long)atomic_load(&unclaimed), (unsigned long long)st.n_evictions,
	       (unsigned long long)st.n_cached);
	CHECK_EQ(kvp_n_free(pool, KVP_KV), RBLOCKS);
	/* Every cached block can be evicted: one request takes the pool. */
	kvp_ref all[RBLOCKS];
	size_t n;
	CHECK_EQ(kvp_allocate(pool, KVP_KV, RBLOCKS * BS, 9, KVP_FP16, all, RBLOCKS, &n), KVP_OK);
	CHECK_EQ(kvp_pool_stats(pool, &st), KVP_OK);
	CHECK_EQ(st.n_cached, 0);
	CHECK_EQ(kvp_free_all(pool, 9), KVP_OK);
	CHECK_EQ(kvp_n_free(pool, KVP_KV), RBLOCKS);
	finish();
}

int main(void)
{
	RUN(test_failed_request_evicts_nothing);
	RUN(test_reset_while_claimed_drops_key);
	RUN(test_publish_takes_over_claimed_key);
	RUN(test_unclaim_after_takeover_evicts);
	RUN(test_race_claims);
	return 0;
}
