/*
 * tests/prefix_publish_many_test.c - kvp_prefix_publish_many publishes each
 * block as kvp_prefix_publish would, in one call.
 *
 * Holds the library to kvpool/prefix.h: bad arguments are KVP_EINVAL with
 * no effect; each block's own result lands in @status (stale refs, partial
 * blocks, keys taken before or earlier in the batch); @n_published counts
 * the blocks published, and exactly those are found by a match.  A race
 * publishes overlapping batches from many threads: every key ends up
 * published exactly once, and every block is held by one owner only.
 * Another publishes the same blocks from two threads in opposite orders:
 * a batch holds many block locks, so this would hang if a batch ever
 * waited for a lock while holding others; each block ends published once.
 */
#include <kvpool/kvpool.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tests/prefix_testutil.h"
#include "tests/testutil.h"

#define BS 4u

static kvp_pool *mkpool(uint32_t n)
{
	kvp_pool_config c;
	kvp_pool *p;
	kvp_pool_config_init(&c);
	c.block_size = BS;
	c.n_blocks = n;
	c.separate_kv = false;
	c.prefix_cache = true;
	CHECK_EQ(kvp_pool_create(&c, &p), KVP_OK);
	return p;
}

static kvp_hash key(uint64_t i)
{
	kvp_hash h = {i * 0x9e3779b97f4a7c15ull + 1, i ^ 0x5555};
	return h;
}

static void test_bad_args(void)
{
	kvp_pool *p = mkpool(16);
	kvp_ref r[2];
	kvp_hash k[2] = {key(1), key(2)};
	size_t n, np = 77;
	int st[2] = {123, 123};
	CHECK_EQ(kvp_allocate(p, KVP_KV, 2 * BS, 1, KVP_FP16, r, 2, &n), KVP_OK);

	CHECK_EQ(kvp_prefix_publish_many(NULL, r, k, 2, st, &np), KVP_EINVAL);
	CHECK_EQ(np, 0u);
	CHECK_EQ(kvp_prefix_publish_many(p, NULL, k, 2, st, &np), KVP_EINVAL);
	CHECK_EQ(kvp_prefix_publish_many(p, r, NULL, 2, st, &np), KVP_EINVAL);
	CHECK_EQ(st[0], 123); /* no effect: nothing tried, nothing written */
	CHECK(!tpx_findable(p, KVP_KV, key(1)) && !tpx_findable(p, KVP_KV, key(2)));

	/* n == 0 with NULL arrays is a valid empty batch. */
	np = 77;
	CHECK_EQ(kvp_prefix_publish_many(p, NULL, NULL, 0, NULL, &np), KVP_OK);
	CHECK_EQ(np, 0u);

	/* A plain pool has no prefix cache. */
	kvp_pool_config c;
	kvp_pool *plain;
	kvp_pool_config_init(&c);
	c.block_size = BS;
	c.n_blocks = 16;
	CHECK_EQ(kvp_pool_create(&c, &plain), KVP_OK);
	CHECK_EQ(kvp_prefix_publish_many(plain, r, k, 2, st, &np), KVP_EINVAL);
	kvp_pool_destroy(plain);

	CHECK_EQ(kvp_free_all(p, 1), KVP_OK);
	kvp_pool_destroy(p);
}

/* One batch with every kind of block: each gets what a single publish
 * would return, and only the published ones are found. */
static void test_mixed_batch(void)
{
	kvp_pool *p = mkpool(64);
	kvp_ref full[6], part, gone, other;
	size_t n;
	CHECK_EQ(kvp_allocate(p, KVP_KV, 6 * BS, 1, KVP_FP16, full, 6, &n), KVP_OK);
	CHECK_EQ(kvp_allocate(p, KVP_KV, BS - 1, 2, KVP_FP16, &part, 1, &n), KVP_OK);
	CHECK_EQ(kvp_allocate(p, KVP_KV, BS, 3, KVP_FP16, &gone, 1, &n), KVP_OK);
	CHECK_EQ(kvp_free_all(p, 3), KVP_OK); /* @gone is stale now */
	CHECK_EQ(kvp_allocate(p, KVP_KV, BS, 4, KVP_FP16, &other, 1, &n), KVP_OK);
	CHECK_EQ(kvp_prefix_publish(p, other, key(50)), KVP_OK); /* key 50 taken */

	kvp_ref refs[10] = {full[0], part,    full[1], gone,    full[2],
	                    full[3], full[4], full[0], full[5], KVP_MAKE_REF(1u << 30, 1)};
	kvp_hash keys[10] = {key(10), key(11), key(12), key(13), key(50),
	                     key(15), key(15), key(17), key(18), key(19)};
	int want[10] = {KVP_OK, KVP_EINVAL, KVP_OK,     KVP_ENOENT, KVP_EEXIST,
	                KVP_OK, KVP_EEXIST, KVP_EINVAL, KVP_OK,     KVP_ENOENT};
	int st[10];
	size_t np;
	CHECK_EQ(kvp_prefix_publish_many(p, refs, keys, 10, st, &np), KVP_OK);
	for (int i = 0; i < 10; i++)
		CHECK_EQ(st[i], want[i]);
	CHECK_EQ(np, 4u);
	CHECK(tpx_findable(p, KVP_KV, key(10)) && tpx_findable(p, KVP_KV, key(12)) &&
	      tpx_findable(p, KVP_KV, key(15)) && tpx_findable(p, KVP_KV, key(18)));
	CHECK(!tpx_findable(p, KVP_KV, key(11)) && !tpx_findable(p, KVP_KV, key(13)) &&
	      !tpx_findable(p, KVP_KV, key(17)) && !tpx_findable(p, KVP_KV, key(19)));
	/* Key 15 is full[3]'s, the first in the batch; full[4] stayed unpublished. */
	kvp_block_info bi;
	CHECK_EQ(kvp_block_get(p, full[4], &bi), KVP_OK);
	CHECK(!bi.published);
	CHECK_EQ(kvp_block_get(p, full[3], &bi), KVP_OK);
	CHECK(bi.published);

	/* @status and @n_published may be NULL. */
	kvp_ref more;
	CHECK_EQ(kvp_allocate(p, KVP_KV, BS, 5, KVP_FP16, &more, 1, &n), KVP_OK);
	kvp_hash k30 = key(30);
	CHECK_EQ(kvp_prefix_publish_many(p, &more, &k30, 1, NULL, NULL), KVP_OK);
	CHECK(tpx_findable(p, KVP_KV, key(30)));

	for (kvp_owner o = 1; o <= 5; o++)
		if (o != 3)
			CHECK_EQ(kvp_free_all(p, o), KVP_OK);
	kvp_pool_destroy(p);
}

/*
 * One block given twice in one call, with no other owner's block between
 * (so nothing else flushes the batch): the second is judged as
 * kvp_prefix_publish would judge it after the first, KVP_EINVAL (already
 * published), whatever its key.  Its key stays unpublished; after the
 * blocks are cached and the cache is reset, every key can be published
 * and found again (no index slot was left behind under the second key).
 */
static void test_same_block_twice(void)
{
	kvp_pool *p = mkpool(16);
	kvp_ref r[2];
	size_t n;
	CHECK_EQ(kvp_allocate(p, KVP_KV, 2 * BS, 1, KVP_FP16, r, 2, &n), KVP_OK);
	kvp_ref refs[4] = {r[0], r[0], r[1], r[0]};
	kvp_hash keys[4] = {key(60), key(61), key(62), key(60)};
	int want[4] = {KVP_OK, KVP_EINVAL, KVP_OK, KVP_EINVAL};
	int st[4];
	size_t np;
	CHECK_EQ(kvp_prefix_publish_many(p, refs, keys, 4, st, &np), KVP_OK);
	for (int i = 0; i < 4; i++)
		CHECK_EQ(st[i], want[i]);
	CHECK_EQ(np, 2u);
	CHECK(tpx_findable(p, KVP_KV, key(60)) && tpx_findable(p, KVP_KV, key(62)));
	CHECK(!tpx_findable(p, KVP_KV, key(61)));
	CHECK_EQ(kvp_free_all(p, 1), KVP_OK);
	CHECK_EQ(kvp_prefix_reset(p), 2u); /* both keys, their blocks cached: evicted */
	CHECK(!tpx_findable(p, KVP_KV, key(60)) && !tpx_findable(p, KVP_KV, key(62)));
	for (uint64_t k = 60; k <= 62; k++) {
		kvp_ref b;
		CHECK_EQ(kvp_allocate(p, KVP_KV, BS, 2, KVP_FP16, &b, 1, &n), KVP_OK);
		CHECK_EQ(kvp_prefix_publish(p, b, key(k)), KVP_OK);
		CHECK(tpx_findable(p, KVP_KV, key(k)));
	}
	CHECK_EQ(kvp_free_all(p, 2), KVP_OK);
	kvp_pool_destroy(p);
}

/* A batch longer than one read-side section (64 blocks) publishes them all. */
static void test_long_batch(void)
{
	enum { N = 300 };
	kvp_pool *p = mkpool(N + 8);
	kvp_ref *r = calloc(N, sizeof(*r));
	kvp_hash *k = calloc(N, sizeof(*k));
	int *st = calloc(N, sizeof(*st));
	CHECK(r && k && st);
	size_t n, np;
	CHECK_EQ(kvp_allocate(p, KVP_KV, N * BS, 7, KVP_FP16, r, N, &n), KVP_OK);
	for (int i = 0; i < N; i++)
		k[i] = key(1000 + (uint64_t)i);
	CHECK_EQ(kvp_prefix_publish_many(p, r, k, N, st, &np), KVP_OK);
	CHECK_EQ(np, (size_t)N);
	for (int i = 0; i < N; i++) {
		CHECK_EQ(st[i], KVP_OK);
		CHECK(tpx_findable(p, KVP_KV, key(1000 + (uint64_t)i)));
	}
	CHECK_EQ(kvp_free_all(p, 7), KVP_OK);
	free(r);
	free(k);
	free(st);
	kvp_pool_destroy(p);
}

/* Threads publish batches over one key range, their own blocks, in random
 * orders.  Every key is published by exactly one block: the published
 * counts sum to the keys, and each thread's KVP_OK results and
 * n_published agree. */
#define T      6
#define KEYS   96
#define ROUNDS 40

static kvp_pool *race_pool;
static size_t won[T];
static kvp_ref held[T][ROUNDS][KEYS];

static void *racer(void *arg)
{
	int t = (int)(intptr_t)arg;
	uint64_t seed = 0x9e3779b97f4a7c15ull * (uint64_t)(t + 1);
	kvp_hash k[KEYS];
	int st[KEYS];
	for (int round = 0; round < ROUNDS; round++) {
		size_t n, np;
		kvp_owner owner = (kvp_owner)(1000 * (t + 1) + round);
		kvp_ref *r = held[t][round];
		CHECK_EQ(kvp_allocate(race_pool, KVP_KV, KEYS * BS, owner, KVP_FP16, r, KEYS, &n),
		         KVP_OK);
		for (int i = 0; i < KEYS; i++)
			k[i] = key((uint64_t)round * KEYS + (uint64_t)i);
		for (int i = KEYS - 1; i > 0; i--) { /* shuffle the keys */
			seed = seed * 6364136223846793005ull + 1442695040888963407ull;
			int j = (int)((seed >> 33) % (uint64_t)(i + 1));
			kvp_hash tmp = k[i];
			k[i] = k[j];
			k[j] = tmp;
		}
		CHECK_EQ(kvp_prefix_publish_many(race_pool, r, k, KEYS, st, &np), KVP_OK);
		size_t ok = 0;
		for (int i = 0; i < KEYS; i++) {
			CHECK(st[i] == KVP_OK || st[i] == KVP_EEXIST);
			ok += st[i] == KVP_OK;
		}
		CHECK_EQ(ok, np);
		won[t] += np;
		/* Keep the blocks held: a key can only be published once while
		 * its block is held or cached, and the pool is large enough that
		 * nothing is evicted. */
	}
	return NULL;
}

static void test_race(void)
{
	race_pool = mkpool(T * ROUNDS * KEYS + 64);
	pthread_t th[T];
	for (int t = 0; t < T; t++)
		CHECK_EQ(pthread_create(&th[t], NULL, racer, (void *)(intptr_t)t), 0);
	for (int t = 0; t < T; t++)
		CHECK_EQ(pthread_join(th[t], NULL), 0);
	size_t total = 0;
	for (int t = 0; t < T; t++)
		total += won[t];
	CHECK_EQ(total, (size_t)ROUNDS * KEYS);
	for (uint64_t i = 0; i < (uint64_t)ROUNDS * KEYS; i++)
		CHECK(tpx_findable(race_pool, KVP_KV, key(i)));
	/* No block owned twice: each is held once, by the owner it was
	 * allocated for, and published or not as its thread was told. */
	kvp_stats s;
	CHECK_EQ(kvp_pool_stats(race_pool, &s), KVP_OK);
	CHECK_EQ(s.n_allocations - s.n_frees, (uint64_t)T * ROUNDS * KEYS);
	size_t published = 0;
	for (int t = 0; t < T; t++)
		for (int round = 0; round < ROUNDS; round++)
			for (int i = 0; i < KEYS; i++) {
				kvp_block_info bi;
				CHECK_EQ(kvp_block_get(race_pool, held[t][round][i], &bi), KVP_OK);
				CHECK_EQ(bi.n_holders, 1u);
				CHECK_EQ(bi.owner, (kvp_owner)(1000 * (t + 1) + round));
				published += bi.published;
			}
	CHECK_EQ(published, (size_t)ROUNDS * KEYS);
	for (int t = 0; t < T; t++)
		for (int round = 0; round < ROUNDS; round++)
			CHECK_EQ(kvp_free_all(race_pool, (kvp_owner)(1000 * (t + 1) + round)),
			         KVP_OK);
	kvp_pool_destroy(race_pool);
}

/* Two threads publish the same SAME_N blocks under the same keys, one in
 * order and one backwards, SAME_ROUNDS times on fresh blocks.  Each block
 * is published by exactly one of them (the other gets KVP_EINVAL: already
 * published), and the calls return. */
#define SAME_N      200
#define SAME_ROUNDS 200

static kvp_ref same_refs[SAME_N];
static kvp_hash same_keys[SAME_N];
static pthread_barrier_t same_bar;

struct same_arg {
	bool backwards;
	int st[SAME_N];
	size_t np;
};

static void *same_racer(void *arg)
{
	struct same_arg *a = arg;
	kvp_ref r[SAME_N];
	kvp_hash k[SAME_N];
	for (int i = 0; i < SAME_N; i++) {
		int j = a->backwards ? SAME_N - 1 - i : i;
		r[i] = same_refs[j];
		k[i] = same_keys[j];
	}
	pthread_barrier_wait(&same_bar);
	CHECK_EQ(kvp_prefix_publish_many(race_pool, r, k, SAME_N, a->st, &a->np), KVP_OK);
	if (a->backwards) { /* back to the blocks' order */
		for (int i = 0; i < SAME_N / 2; i++) {
			int tmp = a->st[i];
			a->st[i] = a->st[SAME_N - 1 - i];
			a->st[SAME_N - 1 - i] = tmp;
		}
	}
	return NULL;
}

static void test_same_blocks_opposite_orders(void)
{
	race_pool = mkpool(SAME_N + 64);
	CHECK_EQ(pthread_barrier_init(&same_bar, NULL, 2), 0);
	for (int round = 0; round < SAME_ROUNDS; round++) {
		size_t n;
		CHECK_EQ(kvp_allocate(race_pool, KVP_KV, SAME_N * BS, 7, KVP_FP16, same_refs,
		                      SAME_N, &n),
		         KVP_OK);
		for (int i = 0; i < SAME_N; i++)
			same_keys[i] = key((uint64_t)round * SAME_N + (uint64_t)i);
		struct same_arg a[2] = {{.backwards = false}, {.backwards = true}};
		pthread_t th[2];
		for (int t = 0; t < 2; t++)
			CHECK_EQ(pthread_create(&th[t], NULL, same_racer, &a[t]), 0);
		for (int t = 0; t < 2; t++)
			CHECK_EQ(pthread_join(th[t], NULL), 0);
		CHECK_EQ(a[0].np + a[1].np, (size_t)SAME_N);
		for (int i = 0; i < SAME_N; i++) {
			/* exactly one KVP_OK per block; the other saw it published */
			CHECK((a[0].st[i] == KVP_OK) != (a[1].st[i] == KVP_OK));
			CHECK(a[0].st[i] == KVP_OK || a[0].st[i] == KVP_EINVAL);
			CHECK(a[1].st[i] == KVP_OK || a[1].st[i] == KVP_EINVAL);
			kvp_block_info bi;
			CHECK_EQ(kvp_block_get(race_pool, same_refs[i], &bi), KVP_OK);
			CHECK(bi.published);
			CHECK(tpx_findable(race_pool, KVP_KV,
			                   key((uint64_t)round * SAME_N + (uint64_t)i)));
		}
		/* Cached now; the next round's allocation evicts them. */
		CHECK_EQ(kvp_free_all(race_pool, 7), KVP_OK);
	}
	pthread_barrier_destroy(&same_bar);
	kvp_pool_destroy(race_pool);
}

int main(void)
{
	RUN(test_bad_args);
	RUN(test_mixed_batch);
	RUN(test_same_block_twice);
	RUN(test_long_batch);
	RUN(test_race);
	RUN(test_same_blocks_opposite_orders);
	return 0;
}
