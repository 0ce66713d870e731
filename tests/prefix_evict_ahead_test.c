/*
 * tests/prefix_evict_ahead_test.c - evicting ahead (kvpool/prefix.h, "Eviction").
 *
 * An allocation of fewer than 64 blocks that must evict, and after which
 * more than 4096 blocks of its stream are still cached, evicts 64 blocks in
 * all, the least recently cached, and leaves the ones it did not take in
 * its thread's cache (on the global stack when they do not fit there); the
 * thread's next small allocations take those and evict nothing.  An
 * allocation of 64 or more, or one after which 4096 or fewer
 * stay cached, evicts exactly what it needs.  One thread, so every count
 * and every evicted block is exact.
 *
 * Each test caches N blocks the same way: one owner allocates all N (the
 * pool's every block), publishes block i under key (1, 0, i) and lets go
 * with kvp_free_all, which caches them last block first: block N - 1 is
 * the least recently cached, then N - 2, and so on.
 */
#include <kvpool/kvpool.h>

#include <stdatomic.h>
#include <stdlib.h>

#include "lib/testing/prefix_peek.h"
#include "tests/prefix_testutil.h"

#define BS    16u
#define AHEAD 64u /* kvpool/prefix.h, "Eviction" */

static uint64_t evictions(kvp_pool *p)
{
	kvp_stats s;
	CHECK_EQ(kvp_pool_stats(p, &s), KVP_OK);
	return s.n_evictions;
}

static uint64_t cached(kvp_pool *p)
{
	kvp_stats s;
	CHECK_EQ(kvp_pool_stats(p, &s), KVP_OK);
	return s.n_cached;
}

/* A pool of @n blocks (thread_cache @tc), all cached as the top comment
 * says; their refs in *@refs (the caller frees them). */
static kvp_pool *cached_pool(uint32_t n, uint32_t tc, kvp_ref **refs)
{
	kvp_pool *p = tpx_pool_tc(BS, n, tc);
	kvp_ref *r = malloc(n * sizeof(*r));
	CHECK(r != NULL);
	size_t got;
	CHECK_EQ(kvp_allocate(p, KVP_KV, n * BS, 1, KVP_FP16, r, n, &got), KVP_OK);
	CHECK_EQ(got, n);
	for (uint32_t i = 0; i < n; i++)
		CHECK_EQ(kvp_prefix_publish(p, r[i], tpx_key(1, 0, i)), KVP_OK);
	CHECK_EQ(kvp_free_all(p, 1), KVP_OK);
	CHECK_EQ(cached(p), n);
	CHECK_EQ(evictions(p), 0);
	*refs = r;
	return p;
}

/* Whether block @r (of the caching above) is still cached under its key. */
static bool still_cached(kvp_pool *p, kvp_ref r)
{
	kvp_block_info bi;
	return kvp_block_get(p, r, &bi) == KVP_OK && bi.published && !bi.in_use;
}

/* Exactly blocks [@from, n) of the caching are gone: the @n - @from least
 * recently cached. */
static void check_gone_from(kvp_pool *p, const kvp_ref *r, uint32_t n, uint32_t from)
{
	for (uint32_t i = 0; i < n; i++)
		if (still_cached(p, r[i]) != (i < from)) {
			fprintf(stderr, "block %u of %u: cached=%d, expected %d\n", i, n,
			        still_cached(p, r[i]), i < from);
			CHECK(0);
		}
}

/* Let go of every block owner 2 holds, check all @n blocks are free
 * (cached or not), and drop the pool and its refs @r. */
static void finish(kvp_pool *p, kvp_ref *r, uint32_t n)
{
	CHECK_EQ(kvp_free_all(p, 2), KVP_OK);
	CHECK_EQ(kvp_n_free(p, KVP_KV), n);
	free(r);
	kvp_pool_destroy(p);
}

static void alloc_one(kvp_pool *p, kvp_owner o)
{
	kvp_ref r;
	size_t got;
	CHECK_EQ(kvp_allocate(p, KVP_KV, BS, o, KVP_FP16, &r, 1, &got), KVP_OK);
	CHECK_EQ(got, 1);
}

/* Above the threshold: AHEAD evicted by the first one-block allocation,
 * none by the next AHEAD - 1, AHEAD again by the one after; then an
 * allocation of AHEAD + 6 blocks takes the AHEAD - 1 left free and evicts
 * 7. */
static void test_evicts_ahead(uint32_t tc)
{
	const uint32_t n = 4200;
	kvp_ref *r;
	kvp_pool *p = cached_pool(n, tc, &r);
	kvp_stats s0, s1;
	CHECK_EQ(kvp_pool_stats(p, &s0), KVP_OK);
	alloc_one(p, 2);
	CHECK_EQ(evictions(p), AHEAD);
	CHECK_EQ(cached(p), n - AHEAD);
	/* Evicted blocks were counted free when they were cached: one more in
	 * use, no free counted. */
	CHECK_EQ(kvp_pool_stats(p, &s1), KVP_OK);
	CHECK_EQ(kvp_stats_blocks_in_use(&s1), 1);
	CHECK_EQ(s1.n_frees, s0.n_frees);
	check_gone_from(p, r, n, n - AHEAD);
	CHECK_EQ(kvp_n_free(p, KVP_KV), n - 1); /* AHEAD - 1 uncached free, the rest cached */
	for (uint32_t i = 0; i < AHEAD - 1; i++)
		alloc_one(p, 2);
	CHECK_EQ(evictions(p), AHEAD);
	check_gone_from(p, r, n, n - AHEAD);
	alloc_one(p, 2);
	CHECK_EQ(evictions(p), 2 * AHEAD);
	check_gone_from(p, r, n, n - 2 * AHEAD);
	kvp_ref big[AHEAD + 6];
	size_t got;
	CHECK_EQ(kvp_allocate(p, KVP_KV, (AHEAD + 6) * BS, 3, KVP_FP16, big, AHEAD + 6, &got),
	         KVP_OK);
	CHECK_EQ(evictions(p), 2 * AHEAD + 7);
	CHECK_EQ(cached(p), n - (2 * AHEAD + 7));
	check_gone_from(p, r, n, n - (2 * AHEAD + 7));
	CHECK_EQ(kvp_free_all(p, 3), KVP_OK);
	finish(p, r, n);
}

/* Uncached free blocks on the global stack of @p's one stream. */
static uint64_t on_stack(kvp_pool *p)
{
	return atomic_load_explicit(&p->fs[0].avail, memory_order_acquire);
}

/* Where the blocks evicted ahead go: with room in the thread's cache
 * (thread_cache @tc of AHEAD or more) they stay there, and the global stack
 * stays empty; with no per-thread caches, or ones too small, they are on
 * the global stack.  (Whether another thread then takes them or evicts
 * depends on the clock: an evicting allocation drains idle threads'
 * caches at most once a millisecond.) */
static void test_where_they_go(uint32_t tc)
{
	const uint32_t n = 4200;
	kvp_ref *r;
	kvp_pool *p = cached_pool(n, tc, &r);
	CHECK_EQ(on_stack(p), 0);
	alloc_one(p, 2);
	CHECK_EQ(evictions(p), AHEAD);
	CHECK_EQ(on_stack(p), (tc >= AHEAD ? 0u : AHEAD - 1));
	CHECK_EQ(kvp_n_free(p, KVP_KV), n - 1);
	finish(p, r, n);
}

/* At the threshold: 4097 cached, 4096 left after the first eviction, so
 * one block is evicted a time; with 4098 cached, the first evicts AHEAD. */
static void test_threshold(void)
{
	const uint32_t n = 4097;
	kvp_ref *r;
	kvp_pool *p = cached_pool(n, 16, &r);
	for (uint32_t i = 1; i <= 3; i++) {
		alloc_one(p, 2);
		CHECK_EQ(evictions(p), i);
		check_gone_from(p, r, n, n - i);
	}
	finish(p, r, n);
	p = cached_pool(n + 1, 16, &r);
	alloc_one(p, 2);
	CHECK_EQ(evictions(p), AHEAD);
	check_gone_from(p, r, n + 1, n + 1 - AHEAD);
	finish(p, r, n + 1);
}

/* AHEAD blocks in one call: exactly AHEAD evicted, none ahead. */
static void test_large_request_exact(void)
{
	const uint32_t n = 5000;
	kvp_ref *r;
	kvp_pool *p = cached_pool(n, 16, &r);
	kvp_ref got_refs[AHEAD];
	size_t got;
	CHECK_EQ(kvp_allocate(p, KVP_KV, AHEAD * BS, 2, KVP_FP16, got_refs, AHEAD, &got), KVP_OK);
	CHECK_EQ(evictions(p), AHEAD);
	CHECK_EQ(kvp_n_free(p, KVP_KV), n - AHEAD); /* nothing left uncached */
	check_gone_from(p, r, n, n - AHEAD);
	finish(p, r, n);
}

int main(void)
{
	test_evicts_ahead(256); /* in the thread's cache */
	test_evicts_ahead(16);  /* too many for it: on the global stack */
	test_evicts_ahead(0);   /* no per-thread caches: the same on the global stack */
	test_where_they_go(256);
	test_where_they_go(16);
	test_where_they_go(0);
	test_threshold();
	test_large_request_exact();
	printf("ok prefix_evict_ahead_test\n");
	return 0;
}
