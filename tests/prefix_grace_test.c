/*
 * tests/prefix_grace_test.c - a lookup's answer that goes stale before the
 * match locks the block is a miss, never another key's block.
 *
 * Thread R matches key K0, published on a cached block, and stops right
 * after its index lookup found K0's block (kvpi_pfx_index_lookup wrapped,
 * -Wl,--wrap), inside its read-side section and before it locks the block.
 * Meanwhile the main thread resets the cache (evicting that block: K0 is
 * deleted from the index) and then allocates, publishes under fresh keys
 * and caches CHURN blocks on the 8-block pool, so that every allocation
 * evicts and K0's block is published again under other keys, and the
 * index's tables are rebuilt and retired while R's section runs.  Then R
 * goes on.  K0 is in no block any more, so its match must be a miss: the
 * block the lookup named now holds another key, which the match must see
 * under the block's lock.  (TSan cannot tell here: the hand-over of
 * `phase` orders R's reads before the main thread's writes; the miss is
 * the check.)
 *
 * R's owner (1) and the main thread's (2) are on different owner shards
 * of the prefix table, whose mutex R holds while it waits.
 */
#include <kvpool/kvpool.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "tests/prefix_testutil.h"

#define BS      4u
#define NBLOCKS 8u
#define CHURN   300

static kvp_pool *pool;
static _Thread_local bool stall; /* thread R, during its match */
/* 1: R found K0's node and waits; 2: R may go on. */
static _Atomic int phase;

static kvp_hash key_of(uint64_t i)
{
	return (kvp_hash){i * 0x9e3779b97f4a7c15ull + 3, i ^ 0x77u};
}

uint32_t __wrap_kvpi_pfx_index_lookup(struct kvpi_prefix *pf, uint32_t stream, const kvp_hash *key)
{
	uint32_t n = __real_kvpi_pfx_index_lookup(pf, stream, key);
	if (stall && n != UINT32_MAX) {
		stall = false;
		atomic_store(&phase, 1);
		while (atomic_load(&phase) != 2)
			sched_yield();
	}
	return n;
}

static void *r_main(void *out)
{
	kvp_hash k0 = key_of(0);
	kvp_ref r;
	size_t m;
	stall = true;
	CHECK_EQ(kvp_prefix_match(pool, KVP_KV, KVP_FP16, &k0, 1, 1, &r, 1, &m), KVP_OK);
	CHECK(!stall); /* the lookup found K0's node, and waited */
	*(size_t *)out = m;
	if (m)
		CHECK_EQ(kvp_free(pool, &r, 1), KVP_OK);
	return NULL;
}

/* Allocate a block for owner 2, publish it under key @i and cache it. */
static void cache_one(uint64_t i)
{
	kvp_ref r;
	size_t got;
	CHECK_EQ(kvp_allocate(pool, KVP_KV, BS, 2, KVP_FP16, &r, 1, &got), KVP_OK);
	CHECK_EQ(kvp_prefix_publish(pool, r, key_of(i)), KVP_OK);
	CHECK_EQ(kvp_free(pool, &r, 1), KVP_OK);
}

static void test_node_outlives_lookup(void)
{
	pool = tpx_pool(BS, NBLOCKS);
	cache_one(0);
	size_t matched = 99;
	pthread_t r;
	CHECK_EQ(pthread_create(&r, NULL, r_main, &matched), 0);
	while (atomic_load(&phase) != 1)
		sched_yield();
	/* K0's block evicted: its node deleted while R holds it. */
	CHECK_EQ(kvp_prefix_reset(pool), 1);
	for (uint64_t i = 1; i <= CHURN; i++)
		cache_one(i);
	kvp_stats s;
	CHECK_EQ(kvp_pool_stats(pool, &s), KVP_OK);
	CHECK(s.n_evictions >= CHURN - NBLOCKS); /* K0's block was reused all along */
	atomic_store(&phase, 2);
	CHECK_EQ(pthread_join(r, NULL), 0);
	CHECK_EQ(matched, 0);
	/* K0 published again is found. */
	cache_one(0);
	kvp_hash k0 = key_of(0);
	kvp_ref ref;
	size_t m;
	CHECK_EQ(kvp_prefix_match(pool, KVP_KV, KVP_FP16, &k0, 1, 3, &ref, 1, &m), KVP_OK);
	CHECK_EQ(m, 1);
	CHECK_EQ(kvp_free(pool, &ref, 1), KVP_OK);
	kvp_pool_destroy(pool);
	pool = NULL;
}

int main(void)
{
	RUN(test_node_outlives_lookup);
	return 0;
}
