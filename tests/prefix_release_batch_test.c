/*
 * tests/prefix_release_batch_test.c - kvp_free_all caches blocks in
 * batches without deadlock or loss when holders release shared blocks in
 * opposite orders.
 *
 * kvp_free_all keeps the blocks it makes cached locked until it lists
 * them together, then counts and unlocks them.  Here every thread matches
 * the same published blocks in its own random order, so shared blocks are
 * released in opposite orders, and matches revive blocks while batches
 * hold them.  Checked: every thread finishes (a batch left locked, or a
 * wait that never ends, times the test out), every match finds all keys
 * (no block lost from the index or the cache), and at the end every block
 * is cached exactly once: n_cached equals the keys, nothing is in use, and
 * each key still names the block first published under it.
 */
#include <kvpool/kvpool.h>

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "tests/testutil.h"

#define BS     4u
#define KEYS   96
#define T      6
#define ROUNDS 300

static kvp_pool *pool;
static kvp_ref pub[KEYS];

static kvp_hash key(uint64_t i)
{
	kvp_hash h = {i * 0x9e3779b97f4a7c15ull + 7, i ^ 0xa5a5};
	return h;
}

static void *worker(void *arg)
{
	int t = (int)(intptr_t)arg;
	uint64_t seed = 0x2545f4914f6cdd1dull * (uint64_t)(t + 3);
	kvp_hash k[KEYS];
	kvp_ref r[KEYS];
	for (int round = 0; round < ROUNDS; round++) {
		for (int i = 0; i < KEYS; i++)
			k[i] = key((uint64_t)i);
		for (int i = KEYS - 1; i > 0; i--) { /* this round's hold order */
			seed ^= seed << 13;
			seed ^= seed >> 7;
			seed ^= seed << 17;
			int j = (int)(seed % (uint64_t)(i + 1));
			kvp_hash tmp = k[i];
			k[i] = k[j];
			k[j] = tmp;
		}
		kvp_owner owner = (kvp_owner)(1000000 * (t + 1) + round);
		size_t m;
		CHECK_EQ(kvp_prefix_match(pool, KVP_KV, KVP_FP16, k, KEYS, owner, r, KEYS, &m),
		         KVP_OK);
		CHECK_EQ(m, (size_t)KEYS); /* nothing evicted: the pool never runs short */
		CHECK_EQ(kvp_free_all(pool, owner), KVP_OK);
	}
	return NULL;
}

static void test_opposite_orders(void)
{
	kvp_pool_config c;
	kvp_pool_config_init(&c);
	c.block_size = BS;
	c.n_blocks = 4 * KEYS;
	c.separate_kv = false;
	c.prefix_cache = true;
	CHECK_EQ(kvp_pool_create(&c, &pool), KVP_OK);
	size_t n;
	CHECK_EQ(kvp_allocate(pool, KVP_KV, KEYS * BS, 1, KVP_FP16, pub, KEYS, &n), KVP_OK);
	for (int i = 0; i < KEYS; i++)
		CHECK_EQ(kvp_prefix_publish(pool, pub[i], key((uint64_t)i)), KVP_OK);
	CHECK_EQ(kvp_free_all(pool, 1), KVP_OK); /* all cached, in one batched release */

	pthread_t th[T];
	for (int t = 0; t < T; t++)
		CHECK_EQ(pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t), 0);
	for (int t = 0; t < T; t++)
		CHECK_EQ(pthread_join(th[t], NULL), 0);

	kvp_stats s;
	CHECK_EQ(kvp_pool_stats(pool, &s), KVP_OK);
	CHECK_EQ(s.n_cached, (uint64_t)KEYS);
	CHECK_EQ(s.n_allocations - s.n_frees, 0u);
	CHECK_EQ(s.n_evictions, 0u);
	for (int i = 0; i < KEYS; i++) {
		kvp_hash h = key((uint64_t)i);
		kvp_ref r;
		size_t m;
		CHECK_EQ(kvp_prefix_match(pool, KVP_KV, KVP_FP16, &h, 1, 7, &r, 1, &m), KVP_OK);
		CHECK_EQ(m, 1u);
		kvp_block_info bi;
		CHECK_EQ(kvp_block_get(pool, r, &bi), KVP_OK);
		CHECK_EQ(bi.n_holders, 1u);
		CHECK_EQ(bi.id, KVP_REF_ID(pub[i])); /* the block published under it */
		CHECK_EQ(kvp_free_all(pool, 7), KVP_OK);
	}
	kvp_pool_destroy(pool);
}

int main(void)
{
	RUN(test_opposite_orders);
	return 0;
}
