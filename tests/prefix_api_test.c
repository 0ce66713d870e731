/*
 * tests/prefix_api_test.c - one test per rule of kvpool/prefix.h, single
 * threaded: holds and n_holders, publish and its errors, KVP_EEXIST, match
 * stopping at the first miss, format and stream separation, kvp_free on a
 * shared block, kvp_free_owned, cached blocks and generations, eviction
 * order, exhaustion and growth with cached blocks counted, shrink order,
 * reset, statistics identities, and the Prometheus families (promtool).
 */
#include <kvpool/kvpool.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "lib/testing/fault.h"
#include "tests/prefix_testutil.h"
#include "tests/testutil.h"

#define BS 4u

static kvp_pool *mkpool(uint32_t n, bool separate, bool grow, uint32_t max)
{
	kvp_pool_config c;
	kvp_pool *p;
	kvp_pool_config_init(&c);
	c.block_size = BS;
	c.n_blocks = n;
	c.separate_kv = separate;
	c.grow_on_exhaustion = grow;
	c.max_blocks = max;
	c.thread_cache = 0; /* exact free-list order */
	c.prefix_cache = true;
	CHECK_EQ(kvp_pool_create(&c, &p), KVP_OK);
	return p;
}

static kvp_hash key(uint64_t i)
{
	kvp_hash h = {i * 0x9e3779b97f4a7c15ull + 1, i ^ 0x5555};
	return h;
}

static kvp_stats stats_of(kvp_pool *p)
{
	kvp_stats s;
	CHECK_EQ(kvp_pool_stats(p, &s), KVP_OK);
	return s;
}

static kvp_block_info info(kvp_pool *p, kvp_ref r)
{
	kvp_block_info bi;
	CHECK_EQ(kvp_block_get(p, r, &bi), KVP_OK);
	return bi;
}

/* Allocate @nb full blocks for @owner in @stream and publish them under
 * keys @k0, @k0+1, ... */
static void alloc_pub(kvp_pool *p, kvp_stream st, kvp_owner owner, uint32_t nb, uint64_t k0,
                      kvp_ref *r)
{
	size_t n;
	CHECK_EQ(kvp_allocate(p, st, nb * BS, owner, KVP_FP16, r, nb, &n), KVP_OK);
	CHECK_EQ(n, nb);
	for (uint32_t i = 0; i < nb; i++)
		CHECK_EQ(kvp_prefix_publish(p, r[i], key(k0 + i)), KVP_OK);
}

static void test_off(void)
{
	kvp_pool_config c;
	kvp_pool_config_init(&c);
	CHECK(!c.prefix_cache);
	kvp_pool *p;
	CHECK_EQ(kvp_pool_create(&c, &p), KVP_OK);
	kvp_ref r[2];
	size_t n, m = 7;
	kvp_hash h = key(1);
	CHECK_EQ(kvp_allocate(p, KVP_K, 2 * 16, 1, KVP_FP16, r, 2, &n), KVP_OK);
	CHECK_EQ(kvp_prefix_publish(p, r[0], h), KVP_EINVAL);
	CHECK_EQ(kvp_prefix_match(p, KVP_K, KVP_FP16, &h, 1, 2, r, 2, &m), KVP_EINVAL);
	CHECK_EQ(m, 0);
	CHECK_EQ(kvp_free_owned(p, 1, r, 1), KVP_EINVAL);
	CHECK_EQ(kvp_prefix_reset(p), 0);
	kvp_block_info bi = info(p, r[0]);
	CHECK_EQ(bi.n_holders, 1);
	CHECK(!bi.published);
	CHECK_EQ(kvp_free_all(p, 1), KVP_OK);
	CHECK_EQ(info(p, r[0]).n_holders, 0);
	kvp_stats s = stats_of(p);
	CHECK_EQ(s.n_cached + s.n_prefix_queries + s.n_prefix_hits + s.n_evictions, 0);
	kvp_pool_destroy(p);
	CHECK_EQ(kvp_prefix_reset(NULL), 0);
	CHECK_EQ(kvp_prefix_publish(NULL, 0, h), KVP_EINVAL);
	CHECK_EQ(kvp_free_owned(NULL, 1, r, 1), KVP_EINVAL);
}

static void test_holds(void)
{
	kvp_pool *p = mkpool(16, true, false, 0);
	kvp_ref a[3], b[4], again[2];
	size_t m, n;
	kvp_hash k[2] = {key(10), key(11)};
	alloc_pub(p, KVP_K, 1, 2, 10, a);
	CHECK_EQ(kvp_allocate(p, KVP_K, BS, 1, KVP_FP16, a + 2, 1, &n), KVP_OK);
	CHECK_EQ(info(p, a[0]).n_holders, 1);
	CHECK(info(p, a[0]).published);
	CHECK(!info(p, a[2]).published);
	/* B's earlier block, then the matched ones. */
	CHECK_EQ(kvp_allocate(p, KVP_K, BS, 2, KVP_FP16, b, 1, &n), KVP_OK);
	CHECK_EQ(kvp_prefix_match(p, KVP_K, KVP_FP16, k, 2, 2, b + 1, 3, &m), KVP_OK);
	CHECK_EQ(m, 2);
	CHECK_EQ(b[1], a[0]); /* in use: same generation */
	CHECK_EQ(b[2], a[1]);
	kvp_block_info bi = info(p, a[0]);
	CHECK(bi.in_use);
	CHECK_EQ(bi.n_holders, 2);
	CHECK_EQ(bi.n_used, BS);
	/* At most one hold per owner: matching again returns the same refs. */
	CHECK_EQ(kvp_prefix_match(p, KVP_K, KVP_FP16, k, 2, 2, again, 2, &m), KVP_OK);
	CHECK_EQ(m, 2);
	CHECK_EQ(again[0], a[0]);
	CHECK_EQ(info(p, a[0]).n_holders, 2);
	/* The owner that published it matching it: no second hold either. */
	CHECK_EQ(kvp_prefix_match(p, KVP_K, KVP_FP16, k, 1, 1, again, 2, &m), KVP_OK);
	CHECK_EQ(m, 1);
	CHECK_EQ(info(p, a[0]).n_holders, 2);
	kvp_ref got[8];
	CHECK_EQ(kvp_blocks_for(p, 2, got, 8, &n), KVP_OK);
	CHECK_EQ(n, 3);
	CHECK_EQ(got[0], b[0]);
	CHECK_EQ(got[1], a[0]);
	CHECK_EQ(got[2], a[1]);
	CHECK_EQ(kvp_blocks_for(p, 1, got, 8, &n), KVP_OK);
	CHECK_EQ(n, 3);
	CHECK_EQ(got[2], a[2]);
	/* kvp_free_all drops every hold of B; A keeps its own. */
	CHECK_EQ(kvp_free_all(p, 2), KVP_OK);
	CHECK_EQ(kvp_blocks_for(p, 2, got, 8, &n), KVP_ENOENT);
	bi = info(p, a[0]);
	CHECK(bi.in_use);
	CHECK_EQ(bi.n_holders, 1);
	CHECK_EQ(bi.owner, 1);
	CHECK_EQ(stats_of(p).n_cached, 0);
	/* A match by a new owner registers it as kvp_allocate would. */
	CHECK_EQ(kvp_prefix_match(p, KVP_K, KVP_FP16, k, 1, 3, again, 1, &m), KVP_OK);
	CHECK_EQ(kvp_register_owner(p, 3), KVP_EOWNER);
	CHECK_EQ(kvp_free_all(p, 3), KVP_OK);
	kvp_pool_destroy(p);
}

static void test_publish_errors(void)
{
	kvp_pool *p = mkpool(16, true, false, 0);
	kvp_ref r[2], raw;
	size_t n;
	CHECK_EQ(kvp_allocate(p, KVP_K, BS + 1, 1, KVP_FP16, r, 2, &n), KVP_OK);
	/* Not full. */
	CHECK_EQ(kvp_prefix_publish(p, r[1], key(1)), KVP_EINVAL);
	/* Never created. */
	CHECK_EQ(kvp_prefix_publish(p, KVP_MAKE_REF(1000, 1), key(1)), KVP_ENOENT);
	/* Stale generation. */
	CHECK_EQ(kvp_prefix_publish(p, r[0] + (1ull << 32), key(1)), KVP_ENOENT);
	CHECK_EQ(kvp_prefix_publish(p, r[0], key(1)), KVP_OK);
	/* Already published (under any key). */
	CHECK_EQ(kvp_prefix_publish(p, r[0], key(1)), KVP_EINVAL);
	CHECK_EQ(kvp_prefix_publish(p, r[0], key(2)), KVP_EINVAL);
	/* A published block's contents are fixed. */
	CHECK_EQ(kvp_block_set_used(p, r[0], 1), KVP_EINVAL);
	CHECK_EQ(info(p, r[0]).n_used, BS);
	CHECK_EQ(kvp_block_set_used(p, r[1], BS), KVP_OK);
	CHECK_EQ(kvp_prefix_publish(p, r[1], key(2)), KVP_OK);
	/* Not in use: a freed, unpublished block keeps its generation. */
	CHECK_EQ(kvp_allocate(p, KVP_K, BS, 2, KVP_FP16, r, 1, &n), KVP_OK);
	CHECK_EQ(kvp_free(p, r, 1), KVP_OK);
	CHECK_EQ(kvp_prefix_publish(p, r[0], key(3)), KVP_EINVAL);
	/* A raw block has no owner to hold it. */
	CHECK_EQ(kvp_alloc_block(p, KVP_K, KVP_FP16, &raw), KVP_OK);
	CHECK_EQ(kvp_prefix_publish(p, raw, key(4)), KVP_EINVAL);
	CHECK_EQ(kvp_free_block(p, raw), KVP_OK);
	CHECK(!info(p, raw).in_use);
	kvp_pool_destroy(p);
}

static void test_eexist(void)
{
	kvp_pool *p = mkpool(8, true, false, 0);
	kvp_ref a, b, v;
	size_t n;
	alloc_pub(p, KVP_K, 1, 1, 7, &a);
	CHECK_EQ(kvp_allocate(p, KVP_K, BS, 2, KVP_FP16, &b, 1, &n), KVP_OK);
	CHECK_EQ(kvp_prefix_publish(p, b, key(7)), KVP_EEXIST);
	CHECK(!info(p, b).published);
	/* The same key in the other stream is another key. */
	alloc_pub(p, KVP_V, 1, 1, 7, &v);
	/* Once the first is evicted (reset), the key is free again. */
	CHECK_EQ(kvp_free_all(p, 1), KVP_OK);
	CHECK_EQ(stats_of(p).n_cached, 2);
	CHECK_EQ(kvp_prefix_publish(p, b, key(7)), KVP_EEXIST); /* cached still counts */
	CHECK_EQ(kvp_prefix_reset(p), 2);
	CHECK_EQ(kvp_prefix_publish(p, b, key(7)), KVP_OK);
	kvp_pool_destroy(p);
}

static void test_match_stops(void)
{
	kvp_pool *p = mkpool(16, true, false, 0);
	kvp_ref a[3], r[4];
	size_t m = 0, n;
	alloc_pub(p, KVP_K, 1, 3, 20, a);
	kvp_hash ks[4] = {key(20), key(21), key(99), key(22)};
	CHECK_EQ(kvp_prefix_match(p, KVP_K, KVP_FP16, ks, 4, 2, r, 4, &m), KVP_OK);
	CHECK_EQ(m, 2);
	CHECK_EQ(r[0], a[0]);
	CHECK_EQ(r[1], a[1]);
	CHECK_EQ(info(p, a[2]).n_holders, 1);
	/* No match: KVP_OK, 0, and no owner made. */
	CHECK_EQ(kvp_prefix_match(p, KVP_K, KVP_FP16, ks + 2, 2, 3, r, 4, &m), KVP_OK);
	CHECK_EQ(m, 0);
	CHECK_EQ(kvp_blocks_for(p, 3, r, 4, &n), KVP_ENOENT);
	/* refs_cap below n_keys: KVP_ERANGE, n_matched = n_keys, nothing done. */
	CHECK_EQ(kvp_prefix_match(p, KVP_K, KVP_FP16, ks, 4, 4, r, 3, &m), KVP_ERANGE);
	CHECK_EQ(m, 4);
	CHECK_EQ(kvp_blocks_for(p, 4, r, 4, &n), KVP_ENOENT);
	CHECK_EQ(kvp_prefix_match(p, KVP_K, KVP_FP16, ks, 0, 4, r, 0, &m), KVP_OK);
	CHECK_EQ(m, 0);
	/* Argument errors. */
	CHECK_EQ(kvp_prefix_match(p, KVP_K, KVP_FP16, ks, 1, 4, r, 1, NULL), KVP_EINVAL);
	CHECK_EQ(kvp_prefix_match(p, KVP_K, KVP_FP16, NULL, 1, 4, r, 1, &m), KVP_EINVAL);
	CHECK_EQ(kvp_prefix_match(p, KVP_K, KVP_FP16, ks, 1, 4, NULL, 1, &m), KVP_EINVAL);
	CHECK_EQ(kvp_prefix_match(p, KVP_KV, KVP_FP16, ks, 1, 4, r, 1, &m), KVP_EINVAL);
	CHECK_EQ(kvp_prefix_match(p, KVP_K, (kvp_format)99, ks, 1, 4, r, 1, &m), KVP_EINVAL);
	kvp_stats s = stats_of(p);
	CHECK_EQ(s.n_prefix_queries, 6);
	CHECK_EQ(s.n_prefix_hits, 2);
	kvp_pool_destroy(p);
}

static void test_format_and_stream(void)
{
	kvp_pool *p = mkpool(16, true, false, 0);
	kvp_ref a, r;
	size_t m;
	kvp_hash k = key(5);
	alloc_pub(p, KVP_K, 1, 1, 5, &a); /* fp16, stream K */
	CHECK_EQ(kvp_prefix_match(p, KVP_K, KVP_FP32, &k, 1, 2, &r, 1, &m), KVP_OK);
	CHECK_EQ(m, 0);
	CHECK_EQ(kvp_prefix_match(p, KVP_V, KVP_FP16, &k, 1, 2, &r, 1, &m), KVP_OK);
	CHECK_EQ(m, 0);
	CHECK_EQ(kvp_prefix_match(p, KVP_K, KVP_FP16, &k, 1, 2, &r, 1, &m), KVP_OK);
	CHECK_EQ(m, 1);
	CHECK_EQ(r, a);
	kvp_pool_destroy(p);
	/* Without separate_kv the stream argument names the one list. */
	p = mkpool(16, false, false, 0);
	alloc_pub(p, KVP_KV, 1, 1, 5, &a);
	CHECK_EQ(kvp_prefix_match(p, KVP_V, KVP_FP16, &k, 1, 2, &r, 1, &m), KVP_OK);
	CHECK_EQ(m, 1);
	CHECK_EQ(kvp_prefix_match(p, KVP_K, KVP_FP16, &k, 1, 3, &r, 1, &m), KVP_OK);
	CHECK_EQ(m, 1);
	CHECK_EQ(info(p, a).n_holders, 3);
	kvp_pool_destroy(p);
}

static void test_free_shared(void)
{
	kvp_pool *p = mkpool(16, true, false, 0);
	kvp_ref a[2], r;
	size_t m;
	kvp_hash k = key(30);
	alloc_pub(p, KVP_K, 1, 2, 30, a);
	CHECK_EQ(kvp_prefix_match(p, KVP_K, KVP_FP16, &k, 1, 2, &r, 1, &m), KVP_OK);
	kvp_stats s0 = stats_of(p);
	/* a[1] alone is free-able, a[0] is shared: nothing in the call is freed. */
	kvp_ref both[2] = {a[1], a[0]};
	CHECK_EQ(kvp_free(p, both, 2), KVP_EINVAL);
	CHECK(info(p, a[1]).in_use);
	CHECK_EQ(info(p, a[0]).n_holders, 2);
	kvp_stats s1 = stats_of(p);
	CHECK_EQ(s1.n_frees, s0.n_frees);
	CHECK_EQ(s1.n_stale_frees, s0.n_stale_frees);
	CHECK_EQ(kvp_free_block(p, a[0]), KVP_EINVAL);
	/* Once one holder is left, kvp_free works again, for that holder. */
	CHECK_EQ(kvp_free_owned(p, 1, a, 1), KVP_OK);
	kvp_block_info bi = info(p, a[0]);
	CHECK_EQ(bi.n_holders, 1);
	CHECK_EQ(bi.owner, 2);
	CHECK_EQ(kvp_free(p, a, 1), KVP_OK);
	bi = info(p, a[0]);
	CHECK(!bi.in_use);
	CHECK(bi.published); /* cached */
	CHECK_EQ(kvp_blocks_for(p, 2, &r, 1, &m), KVP_ENOENT);
	CHECK_EQ(kvp_blocks_for(p, 1, &r, 1, &m), KVP_OK);
	CHECK_EQ(r, a[1]);
	kvp_pool_destroy(p);
}

static void test_free_owned(void)
{
	kvp_pool *p = mkpool(16, true, false, 0);
	kvp_ref a[3], b, x[3];
	size_t n;
	kvp_hash k = key(40);
	alloc_pub(p, KVP_K, 1, 2, 40, a);
	CHECK_EQ(kvp_allocate(p, KVP_K, BS, 1, KVP_FP16, a + 2, 1, &n), KVP_OK);
	CHECK_EQ(kvp_prefix_match(p, KVP_K, KVP_FP16, &k, 1, 2, &b, 1, &n), KVP_OK);
	/* An id never created: KVP_ENOENT and nothing freed. */
	x[0] = a[2];
	x[1] = KVP_MAKE_REF(5000, 1);
	CHECK_EQ(kvp_free_owned(p, 1, x, 2), KVP_ENOENT);
	CHECK(info(p, a[2]).in_use);
	CHECK_EQ(kvp_free_owned(p, 1, NULL, 1), KVP_EINVAL);
	CHECK_EQ(kvp_free_owned(p, 1, NULL, 0), KVP_OK);
	/* Not held by the owner, stale, or free: skipped as stale frees. */
	uint64_t stale0 = stats_of(p).n_stale_frees;
	CHECK_EQ(kvp_free_owned(p, 2, a + 1, 2), KVP_OK); /* 2 holds neither */
	CHECK_EQ(kvp_free_owned(p, 1, &a[2], 1), KVP_OK);
	CHECK(!info(p, a[2]).in_use);
	CHECK_EQ(kvp_free_owned(p, 1, &a[2], 1), KVP_OK); /* free now */
	x[0] = a[1] + (1ull << 32);
	CHECK_EQ(kvp_free_owned(p, 1, x, 1), KVP_OK);  /* stale generation */
	CHECK_EQ(kvp_free_owned(p, 77, a, 1), KVP_OK); /* unknown owner */
	CHECK_EQ(stats_of(p).n_stale_frees, stale0 + 5);
	/* Dropping one holder's hold leaves the other's. */
	CHECK_EQ(kvp_free_owned(p, 1, a, 2), KVP_OK);
	CHECK_EQ(info(p, a[0]).n_holders, 1);
	CHECK_EQ(info(p, a[0]).owner, 2);
	CHECK(!info(p, a[1]).in_use);
	/* Owner 1 holds nothing and was not registered: released. */
	CHECK_EQ(kvp_blocks_for(p, 1, x, 3, &n), KVP_ENOENT);
	/* A registered owner stays. */
	CHECK_EQ(kvp_register_owner(p, 9), KVP_OK);
	CHECK_EQ(kvp_prefix_match(p, KVP_K, KVP_FP16, &k, 1, 9, &b, 1, &n), KVP_OK);
	CHECK_EQ(kvp_free_owned(p, 9, &b, 1), KVP_OK);
	CHECK_EQ(kvp_blocks_for(p, 9, x, 3, &n), KVP_OK);
	CHECK_EQ(n, 0);
	CHECK_EQ(kvp_release_owner(p, 9), KVP_OK);
	CHECK_EQ(kvp_blocks_for(p, 9, x, 3, &n), KVP_ENOENT);
	kvp_pool_destroy(p);
}

static void test_cached_generation(void)
{
	kvp_pool *p = mkpool(8, true, false, 0);
	kvp_ref a, r;
	size_t m;
	kvp_hash k = key(50);
	uint32_t nk = (uint32_t)kvp_n_free(p, KVP_K);
	alloc_pub(p, KVP_K, 1, 1, 50, &a);
	CHECK_EQ(kvp_n_free(p, KVP_K), nk - 1);
	CHECK_EQ(kvp_free_all(p, 1), KVP_OK);
	/* Cached: free, counted by n_free and n_frees, still published. */
	CHECK_EQ(kvp_n_free(p, KVP_K), nk);
	kvp_stats s = stats_of(p);
	CHECK_EQ(s.n_cached, 1);
	CHECK_EQ(s.n_frees, 1);
	CHECK_EQ(kvp_stats_blocks_in_use(&s), 0);
	kvp_block_info bi = info(p, a);
	CHECK(!bi.in_use);
	CHECK(bi.published);
	CHECK_EQ(bi.n_holders, 0);
	/* A match revives it: an allocation and a reuse, new generation. */
	CHECK_EQ(kvp_prefix_match(p, KVP_K, KVP_FP16, &k, 1, 2, &r, 1, &m), KVP_OK);
	CHECK_EQ(m, 1);
	CHECK_EQ(KVP_REF_ID(r), KVP_REF_ID(a));
	CHECK(KVP_REF_GEN(r) != KVP_REF_GEN(a));
	kvp_block_info tmp;
	CHECK_EQ(kvp_block_get(p, a, &tmp), KVP_ENOENT);
	bi = info(p, r);
	CHECK(bi.in_use);
	CHECK(bi.published);
	CHECK_EQ(bi.n_used, BS);
	CHECK_EQ(bi.owner, 2);
	s = stats_of(p);
	CHECK_EQ(s.n_allocations, 2);
	CHECK_EQ(s.n_reused, 1);
	CHECK_EQ(s.n_cached, 0);
	CHECK_EQ(kvp_n_free(p, KVP_K), nk - 1);
	/* The old ref is stale everywhere. */
	uint64_t st0 = s.n_stale_frees;
	CHECK_EQ(kvp_free(p, &a, 1), KVP_OK);
	CHECK_EQ(stats_of(p).n_stale_frees, st0 + 1);
	CHECK(info(p, r).in_use);
	kvp_pool_destroy(p);
}

/* State of key @k's block: 1 cached, 0 gone. */
static void expect_cached(kvp_pool *p, const kvp_ref *old, const uint64_t *keys, int n,
                          const int *want)
{
	for (int i = 0; i < n; i++) {
		kvp_block_info bi;
		int rc = kvp_block_get(p, old[i], &bi);
		bool cached = rc == KVP_OK && !bi.in_use && bi.published;
		if (cached != (want[i] != 0)) {
			fprintf(stderr, "key %llu: cached %d, want %d\n",
			        (unsigned long long)keys[i], cached, want[i]);
			CHECK(0);
		}
	}
}

static void test_eviction_order(void)
{
	/* One stream of 8 blocks. */
	kvp_pool *p = mkpool(8, false, false, 0);
	kvp_ref a[4], b[2], c[8], u;
	size_t n;
	alloc_pub(p, KVP_KV, 1, 4, 100, a); /* keys 100..103 */
	alloc_pub(p, KVP_KV, 2, 2, 200, b); /* keys 200..201 */
	CHECK_EQ(kvp_allocate(p, KVP_KV, BS, 3, KVP_FP16, &u, 1, &n), KVP_OK);
	/* Cached last block first: 103 102 101 100, then B's by kvp_free_owned
	 * with several refs: 201 200. */
	CHECK_EQ(kvp_free_all(p, 1), KVP_OK);
	CHECK_EQ(kvp_free_owned(p, 2, b, 2), KVP_OK);
	CHECK_EQ(kvp_free(p, &u, 1), KVP_OK); /* an uncached free block */
	kvp_ref old[6] = {a[3], a[2], a[1], a[0], b[1], b[0]};
	uint64_t keys[6] = {103, 102, 101, 100, 201, 200};
	CHECK_EQ(kvp_n_free(p, KVP_KV), 8);
	CHECK_EQ(stats_of(p).n_cached, 6);
	/* Uncached free blocks go first (two: u and the never-used one). */
	CHECK_EQ(kvp_allocate(p, KVP_KV, 2 * BS, 4, KVP_FP16, c, 8, &n), KVP_OK);
	CHECK_EQ(stats_of(p).n_evictions, 0);
	int w0[6] = {1, 1, 1, 1, 1, 1};
	expect_cached(p, old, keys, 6, w0);
	/* Then least recently cached first: the end of A's sequence. */
	CHECK_EQ(kvp_allocate(p, KVP_KV, BS, 4, KVP_FP16, c + 2, 1, &n), KVP_OK);
	CHECK_EQ(KVP_REF_ID(c[2]), KVP_REF_ID(a[3]));
	int w1[6] = {0, 1, 1, 1, 1, 1};
	expect_cached(p, old, keys, 6, w1);
	/* A match makes its block the most recently cached once let go (it
	 * is revived with a new generation). */
	kvp_ref old2[6];
	memcpy(old2, old, sizeof(old));
	kvp_hash k102 = key(102);
	kvp_ref r102;
	size_t m;
	CHECK_EQ(kvp_prefix_match(p, KVP_KV, KVP_FP16, &k102, 1, 8, &r102, 1, &m), KVP_OK);
	CHECK_EQ(m, 1);
	CHECK_EQ(kvp_free_owned(p, 8, &r102, 1), KVP_OK);
	old2[1] = r102;
	CHECK_EQ(kvp_allocate(p, KVP_KV, 3 * BS, 4, KVP_FP16, c + 3, 3, &n), KVP_OK);
	int w2[6] = {0, 1, 0, 0, 0, 1}; /* 101, 100, 201 went; 200 and 102 stay */
	expect_cached(p, old2, keys, 6, w2);
	CHECK_EQ(kvp_allocate(p, KVP_KV, BS, 4, KVP_FP16, c + 6, 1, &n), KVP_OK);
	int w3[6] = {0, 1, 0, 0, 0, 0};
	expect_cached(p, old2, keys, 6, w3);
	CHECK_EQ(stats_of(p).n_evictions, 5);
	CHECK(tpx_findable(p, KVP_KV, key(102)));
	CHECK(!tpx_findable(p, KVP_KV, key(200)));
	kvp_pool_destroy(p);
}

/*
 * A block a match took and let go again is cached anew (kvpool/prefix.h,
 * "Caching time").  Cached in the order X, Y, Z; X and Y are taken, Y let
 * go, then X, all by this thread: each goes to the tail of its list when
 * let go, so eviction is exact least recently cached first: Z, Y, X.
 */
static void test_eviction_order_retaken(void)
{
	kvp_pool *p = mkpool(3, false, false, 0);
	kvp_ref r[3], x, y, z, u;
	size_t n, m;
	alloc_pub(p, KVP_KV, 1, 3, 10, r); /* keys 10, 11, 12 */
	/* Cached last ref first: 12 (X), 11 (Y), 10 (Z). */
	CHECK_EQ(kvp_free_owned(p, 1, r, 3), KVP_OK);
	z = r[0];
	kvp_hash kx = key(12), ky = key(11);
	CHECK_EQ(kvp_prefix_match(p, KVP_KV, KVP_FP16, &kx, 1, 2, &x, 1, &m), KVP_OK);
	CHECK_EQ(m, 1);
	CHECK_EQ(kvp_prefix_match(p, KVP_KV, KVP_FP16, &ky, 1, 2, &y, 1, &m), KVP_OK);
	CHECK_EQ(m, 1);
	CHECK_EQ(kvp_free_owned(p, 2, &y, 1), KVP_OK);
	CHECK_EQ(kvp_free_owned(p, 2, &x, 1), KVP_OK);
	CHECK_EQ(stats_of(p).n_cached, 3);
	kvp_ref old[3] = {x, y, z};
	uint64_t keys[3] = {12, 11, 10};
	CHECK_EQ(kvp_allocate(p, KVP_KV, BS, 3, KVP_FP16, &u, 1, &n), KVP_OK);
	CHECK_EQ(KVP_REF_ID(u), KVP_REF_ID(z));
	int w1[3] = {1, 1, 0};
	expect_cached(p, old, keys, 3, w1);
	CHECK_EQ(kvp_allocate(p, KVP_KV, BS, 3, KVP_FP16, &u, 1, &n), KVP_OK);
	CHECK_EQ(KVP_REF_ID(u), KVP_REF_ID(y));
	int w2[3] = {1, 0, 0};
	expect_cached(p, old, keys, 3, w2);
	CHECK_EQ(kvp_allocate(p, KVP_KV, BS, 3, KVP_FP16, &u, 1, &n), KVP_OK);
	CHECK_EQ(KVP_REF_ID(u), KVP_REF_ID(x));
	CHECK_EQ(stats_of(p).n_evictions, 3);
	CHECK_EQ(stats_of(p).n_cached, 0);
	kvp_pool_destroy(p);
}

/*
 * The same blocks cached again by kvp_free_all from one request, in chain
 * order: a request that matched a prompt's first blocks and published the
 * rest lets them all go last block first, so the matched ones go to the
 * tail after the published ones, and eviction takes the end of the chain
 * before its beginning (no block of a chain outlives an earlier one).
 */
static void test_eviction_order_chain(void)
{
	kvp_pool *p = mkpool(4, false, false, 0);
	kvp_ref r[4], u;
	size_t n, m;
	alloc_pub(p, KVP_KV, 1, 2, 20, r); /* keys 20, 21: a chain's first blocks */
	CHECK_EQ(kvp_free_all(p, 1), KVP_OK);
	/* Owner 2 matches them and publishes two more (22, 23). */
	kvp_hash k2[2] = {key(20), key(21)};
	CHECK_EQ(kvp_prefix_match(p, KVP_KV, KVP_FP16, k2, 2, 2, r, 4, &m), KVP_OK);
	CHECK_EQ(m, 2);
	CHECK_EQ(kvp_allocate(p, KVP_KV, 2 * BS, 2, KVP_FP16, r + 2, 2, &n), KVP_OK);
	CHECK_EQ(kvp_prefix_publish(p, r[2], key(22)), KVP_OK);
	CHECK_EQ(kvp_prefix_publish(p, r[3], key(23)), KVP_OK);
	CHECK_EQ(kvp_free_all(p, 2), KVP_OK);
	CHECK_EQ(stats_of(p).n_cached, 4);
	/* Cached last block first: 23, 22, 21, 20.  Evictions go in that order
	 * (checked with kvp_block_get: a match would take the block again). */
	uint64_t keys[4] = {20, 21, 22, 23};
	for (int k = 3; k >= 0; k--) {
		CHECK_EQ(kvp_allocate(p, KVP_KV, BS, 3, KVP_FP16, &u, 1, &n), KVP_OK);
		CHECK_EQ(KVP_REF_ID(u), KVP_REF_ID(r[k]));
		int want[4];
		for (int j = 0; j < 4; j++)
			want[j] = j < k;
		expect_cached(p, r, keys, 4, want);
	}
	kvp_pool_destroy(p);
}

/*
 * Across shards the lists stay lazy (kvpool/prefix.h, "Caching time"): a
 * block that a thread of another home shard took and let go keeps its
 * place on its list until an eviction reaches it, which moves it to the
 * tail as if cached then.  Cached by this thread in the order X, Y, Z; a
 * second thread takes X and Y, lets go of Y, then X.  Z (the one block no
 * match took) goes first; then X and Y in the order the first eviction
 * moved them (X first: its place was older).
 */
struct retake_arg {
	kvp_pool *p;
	int rc;
};

static void *retake_main(void *arg)
{
	struct retake_arg *a = arg;
	kvp_hash kx = key(12), ky = key(11);
	kvp_ref x, y;
	size_t m1 = 0, m2 = 0;
	a->rc = kvp_prefix_match(a->p, KVP_KV, KVP_FP16, &kx, 1, 2, &x, 1, &m1);
	if (a->rc == KVP_OK)
		a->rc = kvp_prefix_match(a->p, KVP_KV, KVP_FP16, &ky, 1, 2, &y, 1, &m2);
	if (a->rc == KVP_OK && (m1 != 1 || m2 != 1))
		a->rc = -1;
	if (a->rc == KVP_OK)
		a->rc = kvp_free_owned(a->p, 2, &y, 1);
	if (a->rc == KVP_OK)
		a->rc = kvp_free_owned(a->p, 2, &x, 1);
	return NULL;
}

static void test_eviction_order_retaken_elsewhere(void)
{
	kvp_pool *p = mkpool(3, false, false, 0);
	kvp_ref r[3], u;
	size_t n;
	alloc_pub(p, KVP_KV, 1, 3, 10, r); /* keys 10, 11, 12 */
	/* Cached last ref first: 12 (X), 11 (Y), 10 (Z). */
	CHECK_EQ(kvp_free_owned(p, 1, r, 3), KVP_OK);
	struct retake_arg a = {p, -1};
	pthread_t th;
	CHECK_EQ(pthread_create(&th, NULL, retake_main, &a), 0);
	CHECK_EQ(pthread_join(th, NULL), 0);
	CHECK_EQ(a.rc, KVP_OK);
	CHECK_EQ(stats_of(p).n_cached, 3);
	uint32_t x = KVP_REF_ID(r[2]), y = KVP_REF_ID(r[1]), z = KVP_REF_ID(r[0]);
	CHECK_EQ(kvp_allocate(p, KVP_KV, BS, 3, KVP_FP16, &u, 1, &n), KVP_OK);
	CHECK_EQ(KVP_REF_ID(u), z);
	CHECK_EQ(kvp_allocate(p, KVP_KV, BS, 3, KVP_FP16, &u, 1, &n), KVP_OK);
	CHECK_EQ(KVP_REF_ID(u), x);
	CHECK(tpx_findable(p, KVP_KV, key(11)));
	CHECK(!tpx_findable(p, KVP_KV, key(12)));
	CHECK_EQ(kvp_allocate(p, KVP_KV, BS, 3, KVP_FP16, &u, 1, &n), KVP_OK);
	CHECK_EQ(KVP_REF_ID(u), y);
	CHECK_EQ(stats_of(p).n_evictions, 3);
	CHECK_EQ(stats_of(p).n_cached, 0);
	kvp_pool_destroy(p);
}

static void test_exhaustion(void)
{
	kvp_pool *p = mkpool(4, false, false, 0);
	kvp_ref r[8];
	size_t n;
	alloc_pub(p, KVP_KV, 1, 2, 60, r);
	CHECK_EQ(kvp_free_all(p, 1), KVP_OK);
	CHECK_EQ(stats_of(p).n_cached, 2);
	CHECK_EQ(kvp_n_free(p, KVP_KV), 4);
	/* 5 blocks: free + cached cannot cover; nothing changes, nothing evicted. */
	CHECK_EQ(kvp_allocate(p, KVP_KV, 5 * BS, 2, KVP_FP16, r, 8, &n), KVP_EEXHAUSTED);
	CHECK_EQ(n, 0);
	kvp_stats s = stats_of(p);
	CHECK_EQ(s.n_cached, 2);
	CHECK_EQ(s.n_evictions, 0);
	CHECK_EQ(s.n_exhausted, 1);
	CHECK(tpx_findable(p, KVP_KV, key(60)));
	CHECK_EQ(kvp_blocks_for(p, 2, r, 8, &n), KVP_ENOENT);
	/* 4: covered by 2 uncached + 2 evicted. */
	CHECK_EQ(kvp_allocate(p, KVP_KV, 4 * BS, 2, KVP_FP16, r, 8, &n), KVP_OK);
	s = stats_of(p);
	CHECK_EQ(s.n_evictions, 2);
	CHECK_EQ(s.n_cached, 0);
	kvp_pool_destroy(p);

	/* With growth: only the shortfall beyond free + cached is grown. */
	p = mkpool(4, false, true, 6);
	alloc_pub(p, KVP_KV, 1, 2, 60, r);
	CHECK_EQ(kvp_free_all(p, 1), KVP_OK);
	CHECK_EQ(kvp_allocate(p, KVP_KV, 4 * BS, 2, KVP_FP16, r, 8, &n), KVP_OK);
	s = stats_of(p);
	CHECK_EQ(s.n_grown, 0);
	CHECK_EQ(s.n_evictions, 2);
	CHECK_EQ(kvp_free_all(p, 2), KVP_OK);
	alloc_pub(p, KVP_KV, 1, 2, 70, r);
	CHECK_EQ(kvp_free_all(p, 1), KVP_OK);
	/* 7 > max 6: refused before anything is evicted. */
	CHECK_EQ(kvp_allocate(p, KVP_KV, 7 * BS, 2, KVP_FP16, r, 8, &n), KVP_EEXHAUSTED);
	CHECK_EQ(stats_of(p).n_cached, 2);
	CHECK_EQ(kvp_allocate(p, KVP_KV, 5 * BS, 2, KVP_FP16, r, 8, &n), KVP_OK);
	s = stats_of(p);
	CHECK_EQ(s.n_grown, 1);
	CHECK_EQ(s.n_evictions, 4);
	CHECK_EQ(s.n_blocks, 5);
	kvp_pool_destroy(p);
}

static void test_shrink_order(void)
{
	kvp_pool *p = mkpool(8, false, false, 0);
	kvp_ref a[3], u[3], h[2];
	size_t n;
	uint32_t k;
	alloc_pub(p, KVP_KV, 1, 3, 80, a); /* cached later: 82 81 80 */
	CHECK_EQ(kvp_allocate(p, KVP_KV, 3 * BS, 2, KVP_FP16, u, 3, &n), KVP_OK);
	CHECK_EQ(kvp_allocate(p, KVP_KV, 2 * BS, 3, KVP_FP16, h, 2, &n), KVP_OK);
	CHECK_EQ(kvp_free_all(p, 1), KVP_OK);
	CHECK_EQ(kvp_free_all(p, 2), KVP_OK);
	CHECK_EQ(kvp_n_free(p, KVP_KV), 6);
	/* Uncached first. */
	CHECK_EQ(kvp_shrink(p, KVP_KV, 4, &k), KVP_OK);
	CHECK_EQ(k, 2);
	CHECK_EQ(kvp_n_free(p, KVP_KV), 4);
	CHECK_EQ(stats_of(p).n_cached, 3);
	/* Then cached, least recently cached first. */
	CHECK_EQ(kvp_shrink(p, KVP_KV, 1, &k), KVP_OK);
	CHECK_EQ(k, 3);
	CHECK_EQ(kvp_n_free(p, KVP_KV), 1);
	CHECK_EQ(stats_of(p).n_cached, 1);
	CHECK(tpx_findable(p, KVP_KV, key(80)));
	CHECK(!tpx_findable(p, KVP_KV, key(81)));
	CHECK_EQ(kvp_pool_n_retired_ids(p), 5);
	kvp_stats s = stats_of(p);
	CHECK_EQ(s.n_blocks, 3);
	CHECK_EQ(s.n_retired, 5);
	kvp_pool_destroy(p);
}

static void test_reset(void)
{
	kvp_pool *p = mkpool(16, false, false, 0);
	kvp_ref a[2], held[2], r;
	size_t n, m;
	alloc_pub(p, KVP_KV, 1, 2, 90, a);
	CHECK_EQ(kvp_free_all(p, 1), KVP_OK);
	alloc_pub(p, KVP_KV, 2, 1, 95, held);
	CHECK_EQ(kvp_allocate(p, KVP_KV, BS, 2, KVP_FP16, held + 1, 1, &n), KVP_OK);
	kvp_hash k95 = key(95);
	CHECK_EQ(kvp_prefix_match(p, KVP_KV, KVP_FP16, &k95, 1, 3, &r, 1, &m), KVP_OK);
	CHECK_EQ(stats_of(p).n_cached, 2);
	CHECK_EQ(kvp_prefix_reset(p), 3);
	kvp_stats s = stats_of(p);
	CHECK_EQ(s.n_cached, 0);
	CHECK_EQ(s.n_evictions, 2);
	kvp_block_info bi = info(p, held[0]);
	CHECK(bi.in_use);
	CHECK(!bi.published);
	CHECK_EQ(bi.n_holders, 2);
	CHECK(!tpx_findable(p, KVP_KV, key(90)));
	CHECK(!tpx_findable(p, KVP_KV, key(95)));
	/* Unpublished again: its contents may change, and it may be published anew. */
	CHECK_EQ(kvp_free_owned(p, 3, &r, 1), KVP_OK);
	CHECK_EQ(kvp_block_set_used(p, held[0], BS), KVP_OK);
	CHECK_EQ(kvp_free_all(p, 2), KVP_OK);
	CHECK_EQ(stats_of(p).n_cached, 0); /* an ordinary free block */
	CHECK_EQ(kvp_n_free(p, KVP_KV), 16);
	CHECK_EQ(kvp_prefix_reset(p), 0);
	kvp_pool_destroy(p);
}

/* Random single-threaded operations; the identities hold after each. */
static void test_stats_identities(void)
{
	kvp_pool *p = mkpool(32, true, false, 0);
	uint64_t rng = 42;
	kvp_ref r[16];
	size_t n;
	for (int step = 0; step < 3000; step++) {
		kvp_owner o = tu_rand(&rng) % 6;
		kvp_stream st = (kvp_stream)(tu_rand(&rng) % 2);
		uint64_t k0 = (tu_rand(&rng) % 8) * 4;
		kvp_hash ks[4];
		for (int i = 0; i < 4; i++)
			ks[i] = key(k0 + i);
		switch (tu_rand(&rng) % 5) {
		case 0:
		case 1: {
			size_t m;
			CHECK_EQ(kvp_prefix_match(p, st, KVP_FP16, ks, 4, o, r, 16, &m), KVP_OK);
			int rc = kvp_allocate(p, st, (uint32_t)(4 - m + 1) * BS, o, KVP_FP16, r + m,
			                      16 - m, &n);
			if (rc == KVP_OK)
				for (size_t i = m; i < 4 && i < m + n; i++) {
					rc = kvp_prefix_publish(p, r[i], ks[i]);
					CHECK(rc == KVP_OK || rc == KVP_EEXIST);
				}
			else
				CHECK_EQ(rc, KVP_EEXHAUSTED);
			break;
		}
		case 2:
			kvp_free_all(p, o);
			break;
		case 3:
			if (kvp_blocks_for(p, o, r, 16, &n) == KVP_OK && n)
				CHECK_EQ(kvp_free_owned(p, o, r, n / 2 + 1), KVP_OK);
			break;
		default:
			if (tu_rand(&rng) % 50 == 0)
				kvp_prefix_reset(p);
			break;
		}
		/* Identities: in use = distinct held blocks; free (cached included)
		 * + in use = all blocks; hits <= queries. */
		kvp_stats s = stats_of(p);
		uint64_t held = 0;
		bool seen[64] = {false};
		for (kvp_owner q = 0; q < 6; q++) {
			kvp_ref g[64];
			if (kvp_blocks_for(p, q, g, 64, &n) != KVP_OK)
				continue;
			for (size_t i = 0; i < n; i++) {
				kvp_block_info bi = info(p, g[i]);
				CHECK(bi.in_use);
				CHECK(bi.n_holders >= 1);
				if (!seen[KVP_REF_ID(g[i])])
					held++;
				seen[KVP_REF_ID(g[i])] = true;
			}
		}
		CHECK_EQ(kvp_stats_blocks_in_use(&s), held);
		CHECK_EQ(kvp_n_free(p, KVP_K) + kvp_n_free(p, KVP_V) + held, 32);
		CHECK(s.n_prefix_hits <= s.n_prefix_queries);
		CHECK(s.n_cached <= kvp_n_free(p, KVP_K) + kvp_n_free(p, KVP_V));
		CHECK(s.n_evictions <= s.n_frees);
	}
	for (kvp_owner q = 0; q < 6; q++)
		kvp_free_all(p, q);
	kvp_stats s = stats_of(p);
	CHECK_EQ(kvp_stats_blocks_in_use(&s), 0);
	CHECK_EQ(s.n_allocations, s.n_frees);
	kvp_pool_destroy(p);
}

static void test_prometheus(void)
{
	kvp_pool *p = mkpool(16, true, false, 0);
	kvp_ref a[2], r;
	size_t m;
	char buf[8192];
	size_t len;
	kvp_hash ks[2] = {key(1), key(2)};
	alloc_pub(p, KVP_K, 1, 2, 1, a);
	CHECK_EQ(kvp_free_all(p, 1), KVP_OK);
	CHECK_EQ(kvp_prefix_match(p, KVP_K, KVP_FP16, ks, 2, 2, &r, 1, &m), KVP_ERANGE);
	kvp_ref rr[2];
	CHECK_EQ(kvp_prefix_match(p, KVP_K, KVP_FP16, ks, 2, 2, rr, 2, &m), KVP_OK);
	CHECK_EQ(kvp_free_all(p, 2), KVP_OK);
	kvp_prefix_reset(p);
	kvp_stats s = stats_of(p);
	CHECK_EQ(kvp_stats_to_prometheus(&s, NULL, buf, sizeof(buf), &len), KVP_OK);
	const char *must[] = {
	    "# TYPE kvpool_block_pool_cached_blocks gauge\nkvpool_block_pool_cached_blocks 0\n",
	    ("# TYPE kvpool_block_pool_prefix_queries_total counter\n"
	     "kvpool_block_pool_prefix_queries_total 2\n"),
	    ("# TYPE kvpool_block_pool_prefix_hits_total counter\n"
	     "kvpool_block_pool_prefix_hits_total 2\n"),
	    ("# TYPE kvpool_block_pool_evictions_total counter\n"
	     "kvpool_block_pool_evictions_total 2\n"),
	    "# HELP kvpool_block_pool_cached_blocks ",
	};
	for (size_t i = 0; i < sizeof(must) / sizeof(must[0]); i++)
		CHECK(strstr(buf, must[i]) != NULL);
	s.n_cached = 5;
	CHECK_EQ(kvp_stats_to_prometheus(&s, "app", buf, sizeof(buf), &len), KVP_OK);
	CHECK(strstr(buf, "app_cached_blocks 5\n") != NULL);
	FILE *f = popen("promtool check metrics >/dev/null 2>&1", "w");
	CHECK(f != NULL);
	fwrite(buf, 1, len, f);
	CHECK_EQ(pclose(f), 0);
	/* kvp_stats_format's line (include/kvpool/stats.h) has no prefix-cache field. */
	char line[256];
	CHECK(kvp_stats_format(&s, line, sizeof(line)) > 0);
	CHECK(strstr(line, "cached") == NULL);
	kvp_pool_destroy(p);
}

/* Growth with the prefix cache: new ids get their prefix state; running
 * out of memory (here for the owner's id array: owner 1's array of 4096
 * ids is reused, but 4097 ids need a bigger one) changes nothing; creation
 * fails cleanly at every allocation it makes. */
static void test_grow_and_oom(void)
{
	kvp_pool *p = mkpool(2, false, true, 0);
	kvp_ref r[4200];
	size_t n;
	CHECK_EQ(kvp_allocate(p, KVP_KV, 3000 * BS, 1, KVP_FP16, r, 4000, &n), KVP_OK);
	for (size_t i = 0; i < n; i++)
		CHECK_EQ(kvp_prefix_publish(p, r[i], key(1000 + i)), KVP_OK);
	CHECK_EQ(kvp_free_all(p, 1), KVP_OK);
	CHECK_EQ(stats_of(p).n_cached, 3000);
	kvpi_fault_inject(0, -1);
	CHECK_EQ(kvp_allocate(p, KVP_KV, 4097 * BS, 2, KVP_FP16, r, 4200, &n), KVP_ENOMEM);
	kvpi_fault_inject(0, 0);
	CHECK_EQ(stats_of(p).n_cached, 3000);
	CHECK_EQ(kvp_blocks_for(p, 2, r, 4200, &n), KVP_ENOENT); /* no record left */
	/* Owner 1's array serves a request of up to 4096 blocks: no memory asked. */
	kvpi_fault_inject(0, -1);
	CHECK_EQ(kvp_allocate(p, KVP_KV, 2000 * BS, 3, KVP_FP16, r, 4200, &n), KVP_OK);
	kvpi_fault_inject(0, 0);
	CHECK_EQ(kvp_free_all(p, 3), KVP_OK);
	CHECK_EQ(kvp_prefix_reset(p), 1000); /* owner 3 evicted 2000 of the 3000 */
	kvp_pool_destroy(p);
	/* Creation fails cleanly at every allocation. */
	for (long skip = 0; skip < 600; skip++) {
		kvp_pool_config c;
		kvp_pool_config_init(&c);
		c.prefix_cache = true;
		kvp_pool *q = (kvp_pool *)0x1;
		kvpi_fault_inject(skip, 1);
		int rc = kvp_pool_create(&c, &q);
		kvpi_fault_inject(0, 0);
		if (rc == KVP_OK)
			kvp_pool_destroy(q);
		else
			CHECK(rc == KVP_ENOMEM && q == NULL);
	}
}

int main(void)
{
	RUN(test_off);
	RUN(test_holds);
	RUN(test_publish_errors);
	RUN(test_eexist);
	RUN(test_match_stops);
	RUN(test_format_and_stream);
	RUN(test_free_shared);
	RUN(test_free_owned);
	RUN(test_cached_generation);
	RUN(test_eviction_order);
	RUN(test_eviction_order_retaken);
	RUN(test_eviction_order_chain);
	RUN(test_eviction_order_retaken_elsewhere);
	RUN(test_exhaustion);
	RUN(test_shrink_order);
	RUN(test_reset);
	RUN(test_stats_identities);
	RUN(test_prometheus);
	RUN(test_grow_and_oom);
	return 0;
}
