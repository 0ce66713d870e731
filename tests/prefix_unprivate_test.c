/*
 * tests/prefix_unprivate_test.c - a block its owner publishes stays private
 * until another owner matches it.
 *
 * A prefix pool hands an owned allocation's blocks out private, and a
 * publish by their owner keeps them private (lib/prefix/prefix_internal.h,
 * "Private blocks"): the owner's kvp_free_all then caches them with no
 * CAS.  Another owner's match must first make such a block ordinary under
 * the publisher's shard mutex: at once when that mutex is its own (same
 * shard) or free, else after its section, waiting for the mutex with no
 * lock held.  A reset unpublishes a private block under the same mutex.
 * Checked, white-box (the state word) and through the API:
 *   - after the publish the blocks are private and published; the
 *     owner's own match gives the same refs and leaves them private; its
 *     kvp_free_all caches them all (n_cached, findable again);
 *   - a match by an owner of another shard, and of the same shard, takes
 *     every key; the blocks are then ordinary, held by both, and stay in
 *     use when the publisher ends; they are cached when the matcher ends;
 *   - a match that meets a private block whose owner's shard mutex is
 *     held (here by the test) waits for it and then takes every key, in
 *     order, the keys before it (cached blocks) included;
 *   - a match for another key of the same index hash (a twin: the index
 *     gives the private block for it) is a miss and leaves the block
 *     private, the publisher's shard mutex free or busy; the real keys
 *     then match; a match that waited for a busy mutex and found a twin
 *     ends there, trying that mutex once (trylock wrapped to fail);
 *   - kvp_prefix_reset drops the keys of private blocks, also when their
 *     owner's shard mutex is busy during its index pass (8 of them, and
 *     200: more than it keeps on its stack); the owner's kvp_free_all then
 *     frees them (nothing cached).
 */
#include <kvpool/kvpool.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "lib/testing/pool_peek.h"
#include "lib/testing/prefix_peek.h"
#include "tests/prefix_testutil.h"

#define BS 4u
#define N  8u

static uint64_t state_of(kvp_pool *p, kvp_ref r)
{
	return atomic_load(&kvpi_bt_block(&p->bt, KVP_REF_ID(r))->state);
}

/* An owner after @a whose shard is (@same) or is not @a's. */
static kvp_owner owner_near(kvp_pool *p, kvp_owner a, bool same)
{
	struct kvpi_oshard *sa = kvpi_owners_shard(&p->owners, a);
	for (kvp_owner o = a + 1;; o++)
		if ((kvpi_owners_shard(&p->owners, o) == sa) == same)
			return o;
}

/* @owner allocates N full blocks and publishes them under keys (@g, i). */
static void publish_n(kvp_pool *p, kvp_owner owner, uint32_t g, kvp_ref *r, kvp_hash *k)
{
	size_t n;
	CHECK_EQ(kvp_allocate(p, KVP_KV, N * BS, owner, KVP_FP16, r, N, &n), KVP_OK);
	for (uint32_t i = 0; i < N; i++)
		k[i] = tpx_key(g, i, 0);
	size_t done;
	CHECK_EQ(kvp_prefix_publish_many(p, r, k, N, NULL, &done), KVP_OK);
	CHECK_EQ(done, N);
}

static void check_holders(kvp_pool *p, const kvp_ref *r, uint32_t holders, bool priv)
{
	for (uint32_t i = 0; i < N; i++) {
		kvp_block_info info;
		CHECK_EQ(kvp_block_get(p, r[i], &info), KVP_OK);
		CHECK(info.in_use && info.published);
		CHECK_EQ(info.n_holders, holders);
		CHECK_EQ((state_of(p, r[i]) & KVPI_ST_PRIVATE) != 0, priv);
	}
}

static void test_owner_caches_its_private_blocks(void)
{
	kvp_pool *p = tpx_pool(BS, 64);
	kvp_ref r[N];
	kvp_hash k[N];
	publish_n(p, 1, 1, r, k);
	check_holders(p, r, 1, true);
	/* Its own match: the same refs, no second hold, private still. */
	kvp_ref got[N];
	size_t m;
	CHECK_EQ(kvp_prefix_match(p, KVP_KV, KVP_FP16, k, N, 1, got, N, &m), KVP_OK);
	CHECK_EQ(m, N);
	for (uint32_t i = 0; i < N; i++)
		CHECK_EQ(got[i], r[i]);
	check_holders(p, r, 1, true);
	CHECK_EQ(kvp_free_all(p, 1), KVP_OK);
	kvp_stats st;
	CHECK_EQ(kvp_pool_stats(p, &st), KVP_OK);
	CHECK_EQ(st.n_cached, N);
	for (uint32_t i = 0; i < N; i++) {
		CHECK_EQ(state_of(p, r[i]) & (KVPI_ST_PRIVATE | KVPI_ST_IN_USE), 0);
		CHECK(tpx_findable(p, KVP_KV, k[i]));
	}
	kvp_pool_destroy(p);
}

/* Owner 1 publishes; an owner of the same shard (@same) or another matches. */
static void match_live(bool same)
{
	kvp_pool *p = tpx_pool(BS, 64);
	kvp_ref r[N], got[N];
	kvp_hash k[N];
	publish_n(p, 1, 2, r, k);
	kvp_owner b = owner_near(p, 1, same);
	size_t m;
	CHECK_EQ(kvp_prefix_match(p, KVP_KV, KVP_FP16, k, N, b, got, N, &m), KVP_OK);
	CHECK_EQ(m, N);
	for (uint32_t i = 0; i < N; i++)
		CHECK_EQ(got[i], r[i]); /* the same hand-out: a second hold */
	check_holders(p, r, 2, false);
	/* The publisher ends: the blocks stay with the matcher. */
	CHECK_EQ(kvp_free_all(p, 1), KVP_OK);
	check_holders(p, r, 1, false);
	kvp_stats st;
	CHECK_EQ(kvp_pool_stats(p, &st), KVP_OK);
	CHECK_EQ(st.n_cached, 0);
	CHECK_EQ(kvp_free_all(p, b), KVP_OK);
	CHECK_EQ(kvp_pool_stats(p, &st), KVP_OK);
	CHECK_EQ(st.n_cached, N);
	CHECK_EQ(kvp_n_free(p, KVP_KV), 64);
	kvp_pool_destroy(p);
}

static void test_match_other_shard(void)
{
	match_live(false);
}

static void test_match_same_shard(void)
{
	match_live(true);
}

struct bg {
	kvp_pool *p;
	kvp_owner owner;
	const kvp_hash *keys;
	size_t n;
	kvp_ref *got;
	size_t m;
	size_t dropped;
	_Atomic bool done;
};

static void *bg_match(void *arg)
{
	struct bg *a = arg;
	CHECK_EQ(
	    kvp_prefix_match(a->p, KVP_KV, KVP_FP16, a->keys, a->n, a->owner, a->got, a->n, &a->m),
	    KVP_OK);
	atomic_store(&a->done, true);
	return NULL;
}

static void *bg_reset(void *arg)
{
	struct bg *a = arg;
	a->dropped = kvp_prefix_reset(a->p);
	atomic_store(&a->done, true);
	return NULL;
}

static void sleep_ms(long ms)
{
	struct timespec ts = {0, ms * 1000000L};
	nanosleep(&ts, NULL);
}

/* The publisher's shard mutex held (by this thread): the call in @fn
 * waits for it, and ends once it is let go. */
static void run_while_busy(kvp_pool *p, kvp_owner publisher, struct bg *a, void *(*fn)(void *))
{
	struct kvpi_oshard *sh = kvpi_owners_shard(&p->owners, publisher);
	pthread_t t;
	pthread_mutex_lock(&sh->lock);
	CHECK_EQ(pthread_create(&t, NULL, fn, a), 0);
	sleep_ms(50);
	CHECK(!atomic_load(&a->done));
	pthread_mutex_unlock(&sh->lock);
	CHECK_EQ(pthread_join(t, NULL), 0);
	CHECK(atomic_load(&a->done));
}

static void test_match_waits_for_busy_owner(void)
{
	kvp_pool *p = tpx_pool(BS, 64);
	kvp_ref old[N], r[N], got[2 * N];
	kvp_hash k[2 * N];
	/* The first N keys: cached blocks (their owner ended).  The next N:
	 * private blocks of a live owner. */
	publish_n(p, 1, 3, old, k);
	CHECK_EQ(kvp_free_all(p, 1), KVP_OK);
	publish_n(p, 2, 4, r, k + N);
	kvp_owner b = owner_near(p, 2, false);
	/* The matcher is in another shard than the publisher: its section
	 * cannot already hold the publisher's mutex. */
	CHECK(kvpi_owners_shard(&p->owners, b) != kvpi_owners_shard(&p->owners, 2));
	struct bg a = {.p = p, .owner = b, .keys = k, .n = 2 * N, .got = got};
	run_while_busy(p, 2, &a, bg_match);
	CHECK_EQ(a.m, 2 * N);
	for (uint32_t i = 0; i < N; i++) {
		CHECK_EQ(KVP_REF_ID(got[i]), KVP_REF_ID(old[i])); /* revived */
		CHECK_EQ(got[N + i], r[i]);
	}
	check_holders(p, r, 2, false);
	/* The matcher's record holds all 2N, in key order. */
	kvp_ref all[2 * N];
	size_t n_all;
	CHECK_EQ(kvp_blocks_for(p, b, all, 2 * N, &n_all), KVP_OK);
	CHECK_EQ(n_all, 2 * N);
	for (uint32_t i = 0; i < 2 * N; i++)
		CHECK_EQ(all[i], got[i]);
	CHECK_EQ(kvp_free_all(p, 2), KVP_OK);
	CHECK_EQ(kvp_free_all(p, b), KVP_OK);
	kvp_stats st;
	CHECK_EQ(kvp_pool_stats(p, &st), KVP_OK);
	CHECK_EQ(st.n_cached, 2 * N);
	CHECK_EQ(kvp_n_free(p, KVP_KV), 64);
	kvp_pool_destroy(p);
}

/* Another key whose index hash is @k's (the same tag and home slot): the
 * index gives @k's block for it, and only the key check tells them apart. */
static kvp_hash twin(kvp_hash k)
{
	const uint64_t c = 0x9e3779b97f4a7c15ull; /* the fold's multiplier of hi */
	kvp_hash t = {k.lo ^ (k.hi * c) ^ ((k.hi + 1) * c), k.hi + 1};
	/* The test means something only while the hash folds the key so. */
	CHECK_EQ(kvpi_pfx_index_hash(&t, KVP_KV), kvpi_pfx_index_hash(&k, KVP_KV));
	return t;
}

/*
 * Owner 1 publishes; an owner of the same shard or another (@same), with
 * the publisher's shard mutex free or held by the test (@busy), matches a
 * twin of each key: a miss, and the block stays private (the key is
 * checked before PRIVATE is cleared).  The real keys then match.
 */
static void twin_misses(bool same, bool busy)
{
	kvp_pool *p = tpx_pool(BS, 64);
	kvp_ref r[N], got[N];
	kvp_hash k[N], t[N];
	publish_n(p, 1, 6, r, k);
	kvp_owner b = owner_near(p, 1, same);
	for (uint32_t i = 0; i < N; i++) {
		t[i] = twin(k[i]);
		CHECK_EQ(kvpi_pfx_index_lookup(p->prefix, KVP_KV, &t[i]), KVP_REF_ID(r[i]));
		struct bg a = {.p = p, .owner = b, .keys = &t[i], .n = 1, .got = got};
		if (busy)
			run_while_busy(p, 1, &a, bg_match);
		else
			bg_match(&a);
		CHECK_EQ(a.m, 0);
	}
	check_holders(p, r, 1, true);
	size_t m;
	CHECK_EQ(kvp_prefix_match(p, KVP_KV, KVP_FP16, k, N, b, got, N, &m), KVP_OK);
	CHECK_EQ(m, N);
	check_holders(p, r, 2, false);
	CHECK_EQ(kvp_free_all(p, 1), KVP_OK);
	CHECK_EQ(kvp_free_all(p, b), KVP_OK);
	CHECK_EQ(kvp_n_free(p, KVP_KV), 64);
	kvp_pool_destroy(p);
}

static void test_twin_key_leaves_block_private(void)
{
	twin_misses(false, false);
	twin_misses(true, false);
	twin_misses(false, true);
}

/* pthread_mutex_trylock, wrapped (tests/BUILD): fails with EBUSY on
 * fail_mutex while fail_left lasts, counting the failures. */
static pthread_mutex_t *_Atomic fail_mutex;
static _Atomic int fail_left, fail_count;
int __real_pthread_mutex_trylock(pthread_mutex_t *m);
int __wrap_pthread_mutex_trylock(pthread_mutex_t *m)
{
	if (m == atomic_load(&fail_mutex) && atomic_fetch_sub(&fail_left, 1) > 0) {
		atomic_fetch_add(&fail_count, 1);
		return EBUSY;
	}
	return __real_pthread_mutex_trylock(m);
}

/*
 * A twin met while the publisher's shard mutex is busy: the match waits
 * for the mutex once, finds the other key, and ends there (a miss).  It
 * must not go back to a new section that meets the same block and tries
 * the mutex again: here every try would fail, 50 times.
 */
static void test_twin_busy_once(void)
{
	kvp_pool *p = tpx_pool(BS, 64);
	kvp_ref r[N], got[N];
	kvp_hash k[N];
	publish_n(p, 1, 7, r, k);
	kvp_owner b = owner_near(p, 1, false);
	kvp_hash t = twin(k[0]);
	atomic_store(&fail_count, 0);
	atomic_store(&fail_left, 50);
	atomic_store(&fail_mutex, &kvpi_owners_shard(&p->owners, 1)->lock);
	size_t m;
	CHECK_EQ(kvp_prefix_match(p, KVP_KV, KVP_FP16, &t, 1, b, got, N, &m), KVP_OK);
	atomic_store(&fail_mutex, NULL);
	CHECK_EQ(m, 0);
	CHECK_EQ(atomic_load(&fail_count), 1);
	check_holders(p, r, 1, true);
	CHECK_EQ(kvp_free_all(p, 1), KVP_OK);
	kvp_pool_destroy(p);
}

/* Owner 1 publishes @n blocks (at most MANY) of a pool of 2 * MANY;
 * a reset, run while its shard mutex is free or (@busy) held, drops their
 * keys. */
#define MANY 200u
static void reset_private(uint32_t n, bool busy)
{
	kvp_pool *p = tpx_pool(BS, 2 * MANY);
	kvp_ref r[MANY];
	kvp_hash k[MANY];
	size_t got, done;
	CHECK_EQ(kvp_allocate(p, KVP_KV, n * BS, 1, KVP_FP16, r, n, &got), KVP_OK);
	for (uint32_t i = 0; i < n; i++)
		k[i] = tpx_key(5, i, 0);
	CHECK_EQ(kvp_prefix_publish_many(p, r, k, n, NULL, &done), KVP_OK);
	CHECK_EQ(done, n);
	struct bg a = {.p = p};
	if (busy)
		run_while_busy(p, 1, &a, bg_reset);
	else
		bg_reset(&a);
	CHECK_EQ(a.dropped, n);
	for (uint32_t i = 0; i < n; i++) {
		kvp_block_info info;
		CHECK_EQ(kvp_block_get(p, r[i], &info), KVP_OK);
		CHECK(info.in_use && !info.published);
		CHECK(!tpx_findable(p, KVP_KV, k[i]));
	}
	CHECK_EQ(kvp_free_all(p, 1), KVP_OK);
	kvp_stats st;
	CHECK_EQ(kvp_pool_stats(p, &st), KVP_OK);
	CHECK_EQ(st.n_cached, 0);
	CHECK_EQ(kvp_n_free(p, KVP_KV), 2 * MANY);
	kvp_pool_destroy(p);
}

static void test_reset_private(void)
{
	reset_private(N, false);
}

/* More busy blocks than the reset keeps on its stack (64). */
static void test_reset_waits_for_busy_owner(void)
{
	reset_private(N, true);
	reset_private(MANY, true);
}

int main(void)
{
	RUN(test_owner_caches_its_private_blocks);
	RUN(test_match_other_shard);
	RUN(test_match_same_shard);
	RUN(test_match_waits_for_busy_owner);
	RUN(test_twin_key_leaves_block_private);
	RUN(test_twin_busy_once);
	RUN(test_reset_private);
	RUN(test_reset_waits_for_busy_owner);
	return 0;
}
