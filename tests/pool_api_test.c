/*
 * tests/pool_api_test.c - one test per documented behaviour and error code
 * of kvpool/pool.h and kvpool/stats.h, single-threaded (one test hands some
 * calls to a second thread, joined before it goes on).
 */
#include <kvpool/kvpool.h>

#include <pthread.h>

#include <stdio.h>
#include <string.h>

#include <urcu/urcu-bp.h>

#include "lib/testing/fault.h"
#include "tests/testutil.h"

static kvp_pool *mkpool(uint32_t bs, uint32_t n, bool sep, bool grow, uint32_t max, uint32_t tc)
{
	kvp_pool_config c;
	kvp_pool *p = NULL;
	kvp_pool_config_init(&c);
	c.block_size = bs;
	c.n_blocks = n;
	c.separate_kv = sep;
	c.grow_on_exhaustion = grow;
	c.max_blocks = max;
	c.thread_cache = tc;
	CHECK_EQ(kvp_pool_create(&c, &p), KVP_OK);
	CHECK(p != NULL);
	return p;
}

static kvp_stats stats_of(kvp_pool *p)
{
	kvp_stats s;
	CHECK_EQ(kvp_pool_stats(p, &s), KVP_OK);
	return s;
}

static void test_strerror_and_formats(void)
{
	int codes[] = {KVP_OK,     KVP_EINVAL, KVP_EEXHAUSTED, KVP_EOWNER,
	               KVP_ENOMEM, KVP_ERANGE, KVP_ENOENT};
	for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
		CHECK(kvp_strerror(codes[i]) != NULL);
		CHECK(strcmp(kvp_strerror(codes[i]), "unknown status") != 0);
		for (size_t j = 0; j < i; j++)
			CHECK(strcmp(kvp_strerror(codes[i]), kvp_strerror(codes[j])) != 0);
	}
	CHECK(strcmp(kvp_strerror(12345), "unknown status") == 0);
	const char *names[] = {"fp32", "fp16", "bf16", "int8", "int4", "int2", "int1"};
	for (int f = 0; f < KVP_N_FORMATS; f++) {
		kvp_format out = KVP_FP32;
		CHECK(strcmp(kvp_format_name((kvp_format)f), names[f]) == 0);
		CHECK_EQ(kvp_format_parse(names[f], &out), KVP_OK);
		CHECK_EQ(out, f);
	}
	kvp_format keep = KVP_INT8;
	CHECK(kvp_format_name((kvp_format)99) == NULL);
	CHECK_EQ(kvp_format_parse("fp64", &keep), KVP_EINVAL);
	CHECK_EQ(keep, KVP_INT8);
	CHECK_EQ(kvp_format_parse(NULL, &keep), KVP_EINVAL);
	CHECK_EQ(kvp_format_parse("fp16", NULL), KVP_EINVAL);
}

static void test_config_defaults_and_errors(void)
{
	kvp_pool_config c;
	kvp_pool *p = (kvp_pool *)0x1;
	kvp_pool_config_init(&c);
	CHECK_EQ(c.block_size, 16);
	CHECK_EQ(c.n_blocks, 1024);
	CHECK(c.separate_kv);
	CHECK(!c.grow_on_exhaustion);
	CHECK_EQ(c.max_blocks, 0);
	CHECK_EQ(c.thread_cache, KVP_DEFAULT_THREAD_CACHE);
	CHECK(c.thread_cache > 0);
	CHECK_EQ(c.history_len, 256);
	kvp_pool_config_init(NULL); /* no crash */

	CHECK_EQ(kvp_pool_create(&c, NULL), KVP_EINVAL);
	struct {
		uint32_t bs, n, max, tc;
		bool sep;
	} bad[] = {
	    {0, 64, 0, 8, true},
	    {16, 0, 0, 8, true},
	    {16, 64, 32, 8, true},
	    {16, 64, 0, KVP_MAX_THREAD_CACHE + 1, true},
	    {KVP_MAX_BLOCK_SIZE + 1, 64, 0, 8, true},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		kvp_pool_config_init(&c);
		c.block_size = bad[i].bs;
		c.n_blocks = bad[i].n;
		c.max_blocks = bad[i].max;
		c.thread_cache = bad[i].tc;
		c.separate_kv = bad[i].sep;
		p = (kvp_pool *)0x1;
		CHECK_EQ(kvp_pool_create(&c, &p), KVP_EINVAL);
		CHECK(p == NULL);
	}
	/* One block with separate_kv: K takes it, V starts empty (and may grow). */
	kvp_pool_config_init(&c);
	c.n_blocks = 1;
	c.grow_on_exhaustion = true;
	CHECK_EQ(kvp_pool_create(&c, &p), KVP_OK);
	CHECK_EQ(kvp_n_free(p, KVP_K), 1);
	CHECK_EQ(kvp_n_free(p, KVP_V), 0);
	kvp_ref one;
	size_t got;
	CHECK_EQ(kvp_allocate(p, KVP_V, 1, 1, KVP_FP16, &one, 1, &got), KVP_OK);
	CHECK_EQ(KVP_REF_ID(one), 1); /* grown */
	kvp_pool_destroy(p);
	/* max_blocks equal to n_blocks and a 1-block shared pool are fine. */
	kvp_pool_config_init(&c);
	c.n_blocks = 1;
	c.separate_kv = false;
	c.max_blocks = 1;
	CHECK_EQ(kvp_pool_create(&c, &p), KVP_OK);
	kvp_pool_destroy(p);
	CHECK_EQ(kvp_pool_create(NULL, &p), KVP_OK); /* NULL config: defaults */
	CHECK_EQ(kvp_n_free(p, KVP_K) + kvp_n_free(p, KVP_V), 1024);
	kvp_pool_destroy(p);
	kvp_pool_destroy(NULL);
}

/* The example line documented at kvp_stats_format in include/kvpool/stats.h. */
static void test_documented_example_line(void)
{
	kvp_pool *p = mkpool(16, 64, true, false, 0, KVP_DEFAULT_THREAD_CACHE);
	kvp_ref refs[8];
	size_t n = 0;
	char buf[256];
	CHECK_EQ(kvp_allocate(p, KVP_K, 40, 1, KVP_FP16, refs, 8, &n), KVP_OK);
	CHECK_EQ(n, 3);
	kvp_stats s = stats_of(p);
	int len = kvp_stats_format(&s, buf, sizeof(buf));
	const char *want = "AllocationStats(in_use=3/64, allocations=3, frees=0, reused=0, "
	                   "exhausted=0, grown=0, retired=0, peak=3, fragmentation=0.016)";
	CHECK(strcmp(buf, want) == 0);
	CHECK_EQ(len, (int)strlen(want));
	CHECK_EQ(kvp_stats_format(&s, buf, strlen(want)), KVP_ERANGE);
	CHECK_EQ(buf[0], '\0');
	CHECK_EQ(kvp_stats_format(&s, buf, strlen(want) + 1), (int)strlen(want));
	CHECK_EQ(kvp_stats_format(NULL, buf, 10), KVP_EINVAL);
	CHECK_EQ(kvp_stats_blocks_in_use(&s), 3);
	CHECK(kvp_stats_fragmentation(&s) > 0.0156 && kvp_stats_fragmentation(&s) < 0.0157);
	CHECK_EQ(kvp_stats_blocks_in_use(NULL), 0);
	CHECK(kvp_stats_fragmentation(NULL) == 0.0);
	kvp_pool_destroy(p);
}

static void test_split_and_layout(void)
{
	kvp_pool *p = mkpool(16, 5, true, false, 0, 4);
	CHECK_EQ(kvp_n_free(p, KVP_K), 3); /* K takes the odd one */
	CHECK_EQ(kvp_n_free(p, KVP_V), 2);
	CHECK_EQ(kvp_n_free(p, KVP_KV), 0);
	CHECK_EQ(kvp_n_free(NULL, KVP_K), 0);
	CHECK_EQ(kvp_pool_block_size(p), 16);
	CHECK(kvp_pool_separate_kv(p));
	CHECK_EQ(kvp_pool_n_ids(p), 5);
	/* Ids are unique across streams: K 0..2, V 3..4, lowest first. */
	kvp_ref k[3], v[2];
	size_t n;
	CHECK_EQ(kvp_allocate(p, KVP_K, 48, 7, KVP_FP32, k, 3, &n), KVP_OK);
	CHECK_EQ(kvp_allocate(p, KVP_V, 32, 7, KVP_FP32, v, 2, &n), KVP_OK);
	CHECK_EQ(KVP_REF_ID(k[0]), 0);
	CHECK_EQ(KVP_REF_ID(k[2]), 2);
	CHECK_EQ(KVP_REF_ID(v[0]), 3);
	CHECK_EQ(KVP_REF_ID(v[1]), 4);
	kvp_block_info bi;
	CHECK_EQ(kvp_block_get(p, v[1], &bi), KVP_OK);
	CHECK_EQ(bi.stream, KVP_V);
	/* Streams never borrow: K is empty, V too. */
	CHECK_EQ(kvp_allocate(p, KVP_K, 1, 8, KVP_FP32, k, 3, &n), KVP_EEXHAUSTED);
	CHECK_EQ(kvp_allocate(p, KVP_KV, 1, 8, KVP_FP32, k, 3, &n), KVP_EINVAL);
	kvp_pool_destroy(p);

	/* Without separate_kv one list backs every stream argument. */
	p = mkpool(16, 4, false, false, 0, 4);
	CHECK(!kvp_pool_separate_kv(p));
	CHECK_EQ(kvp_n_free(p, KVP_K), 4);
	CHECK_EQ(kvp_n_free(p, KVP_V), 4);
	CHECK_EQ(kvp_n_free(p, KVP_KV), 4);
	CHECK_EQ(kvp_allocate(p, KVP_K, 16, 1, KVP_FP32, k, 3, &n), KVP_OK);
	CHECK_EQ(kvp_allocate(p, KVP_V, 16, 1, KVP_FP32, k, 3, &n), KVP_OK);
	CHECK_EQ(kvp_allocate(p, KVP_KV, 32, 1, KVP_FP32, k, 3, &n), KVP_OK);
	CHECK_EQ(kvp_n_free(p, KVP_V), 0);
	CHECK_EQ(kvp_block_get(p, k[0], &bi), KVP_OK);
	CHECK_EQ(bi.stream, KVP_KV);
	kvp_pool_destroy(p);
}

static void test_allocate_arguments(void)
{
	kvp_pool *p = mkpool(16, 8, true, false, 0, 4);
	kvp_ref refs[8];
	size_t n = 99;
	CHECK_EQ(kvp_allocate(p, KVP_K, 0, 1, KVP_FP16, refs, 8, &n), KVP_EINVAL);
	CHECK_EQ(n, 0);
	CHECK_EQ(kvp_allocate(NULL, KVP_K, 1, 1, KVP_FP16, refs, 8, &n), KVP_EINVAL);
	CHECK_EQ(kvp_allocate(p, KVP_K, 1, 1, KVP_FP16, NULL, 8, &n), KVP_EINVAL);
	CHECK_EQ(kvp_allocate(p, KVP_K, 1, 1, KVP_FP16, refs, 8, NULL), KVP_EINVAL);
	CHECK_EQ(kvp_allocate(p, (kvp_stream)7, 1, 1, KVP_FP16, refs, 8, &n), KVP_EINVAL);
	CHECK_EQ(kvp_allocate(p, KVP_K, 1, 1, (kvp_format)9, refs, 8, &n), KVP_EINVAL);
	/* A short refs array: KVP_ERANGE, the count needed, nothing handed out. */
	CHECK_EQ(kvp_allocate(p, KVP_K, 33, 1, KVP_FP16, refs, 2, &n), KVP_ERANGE);
	CHECK_EQ(n, 3);
	CHECK_EQ(kvp_n_free(p, KVP_K), 4);
	CHECK_EQ(kvp_blocks_for(p, 1, refs, 8, &n), KVP_ENOENT);
	CHECK_EQ(stats_of(p).n_allocations, 0);
	kvp_pool_destroy(p);
}

/* n_used: all full but the last; owner extension; allocation order. */
static void test_fill_and_extension(void)
{
	kvp_pool *p = mkpool(16, 64, true, false, 0, 8);
	kvp_ref a[4], b[4], all[8];
	size_t na, nb, n;
	CHECK_EQ(kvp_allocate(p, KVP_K, 40, 5, KVP_INT8, a, 4, &na), KVP_OK);
	CHECK_EQ(kvp_allocate(p, KVP_V, 17, 5, KVP_INT4, b, 4, &nb), KVP_OK);
	CHECK_EQ(na, 3);
	CHECK_EQ(nb, 2);
	uint32_t want_used[] = {16, 16, 8};
	for (size_t i = 0; i < na; i++) {
		kvp_block_info bi;
		CHECK_EQ(kvp_block_get(p, a[i], &bi), KVP_OK);
		CHECK_EQ(bi.id, KVP_REF_ID(a[i]));
		CHECK_EQ(bi.n_used, want_used[i]);
		CHECK_EQ(bi.format, KVP_INT8);
		CHECK_EQ(bi.owner, 5);
		CHECK(bi.in_use && bi.ever_allocated);
		CHECK_EQ(bi.stream, KVP_K);
	}
	CHECK_EQ(kvp_blocks_for(p, 5, all, 8, &n), KVP_OK);
	CHECK_EQ(n, 5);
	for (int i = 0; i < 3; i++)
		CHECK(all[i] == a[i]);
	for (int i = 0; i < 2; i++)
		CHECK(all[3 + i] == b[i]);
	/* A short array: KVP_ERANGE with the count. */
	CHECK_EQ(kvp_blocks_for(p, 5, all, 4, &n), KVP_ERANGE);
	CHECK_EQ(n, 5);
	CHECK_EQ(kvp_blocks_for(p, 5, NULL, 0, &n), KVP_ERANGE);
	CHECK_EQ(kvp_blocks_for(p, 5, all, 8, NULL), KVP_EINVAL);
	CHECK_EQ(kvp_blocks_for(NULL, 5, all, 8, &n), KVP_EINVAL);
	/* Two not-full blocks: fragmentation 2/64. */
	CHECK_EQ(stats_of(p).n_not_full, 2);
	kvp_pool_destroy(p);
}

static void test_exhaustion_all_or_nothing(void)
{
	kvp_pool *p = mkpool(16, 8, true, false, 0, 4); /* 4 K, 4 V */
	kvp_ref r[8];
	size_t n;
	CHECK_EQ(kvp_allocate(p, KVP_K, 48, 1, KVP_FP16, r, 8, &n), KVP_OK);
	size_t before = kvp_n_free(p, KVP_K);
	CHECK_EQ(before, 1);
	CHECK_EQ(kvp_allocate(p, KVP_K, 17, 2, KVP_FP16, r, 8, &n), KVP_EEXHAUSTED);
	CHECK_EQ(n, 0);
	CHECK_EQ(kvp_n_free(p, KVP_K), before);
	CHECK_EQ(kvp_blocks_for(p, 2, r, 8, &n), KVP_ENOENT); /* no owner left behind */
	kvp_stats s = stats_of(p);
	CHECK_EQ(s.n_exhausted, 1);
	CHECK_EQ(s.n_allocations, 3);
	CHECK_EQ(kvp_allocate(p, KVP_K, 16, 2, KVP_FP16, r, 8, &n), KVP_OK);
	kvp_pool_destroy(p);
}

static void test_growth(void)
{
	kvp_pool *p = mkpool(16, 4, true, true, 12, 4); /* 2 K, 2 V, cap 12 */
	kvp_ref r[16];
	size_t n;
	CHECK_EQ(kvp_allocate(p, KVP_K, 16 * 5, 1, KVP_FP16, r, 16, &n), KVP_OK);
	kvp_stats s = stats_of(p);
	CHECK_EQ(s.n_grown, 3); /* just the shortfall */
	CHECK_EQ(s.n_blocks, 7);
	CHECK_EQ(kvp_pool_n_ids(p), 7);
	CHECK_EQ(kvp_n_free(p, KVP_K), 0);
	CHECK_EQ(kvp_n_free(p, KVP_V), 2); /* V untouched */
	for (size_t i = 0; i < n; i++) {
		kvp_block_info bi;
		CHECK_EQ(kvp_block_get(p, r[i], &bi), KVP_OK);
		CHECK_EQ(bi.stream, KVP_K);
		CHECK_EQ(bi.owner, 1);
	}
	/* 5 more would make 12: allowed; then the cap stops us, nothing changes. */
	CHECK_EQ(kvp_allocate(p, KVP_K, 16 * 5, 2, KVP_FP16, r, 16, &n), KVP_OK);
	CHECK_EQ(stats_of(p).n_blocks, 12);
	CHECK_EQ(kvp_allocate(p, KVP_V, 16 * 3, 3, KVP_FP16, r, 16, &n), KVP_EEXHAUSTED);
	CHECK_EQ(kvp_n_free(p, KVP_V), 2);
	CHECK_EQ(stats_of(p).n_blocks, 12);
	CHECK_EQ(kvp_allocate(p, KVP_V, 16 * 2, 3, KVP_FP16, r, 16, &n), KVP_OK);
	/* Many growths: the directory gets republished, blocks stay put. */
	kvp_pool_destroy(p);
	p = mkpool(4, 2, false, true, 0, 0);
	kvp_ref first;
	CHECK_EQ(kvp_allocate(p, KVP_KV, 4, 1, KVP_FP16, &first, 1, &n), KVP_OK);
	for (int i = 0; i < 40; i++) {
		kvp_ref big[2000];
		CHECK_EQ(kvp_allocate(p, KVP_KV, 4 * 2000, 100 + i, KVP_FP16, big, 2000, &n),
		         KVP_OK);
	}
	kvp_block_info bi;
	CHECK_EQ(kvp_block_get(p, first, &bi), KVP_OK);
	CHECK_EQ(bi.owner, 1);
	CHECK_EQ(stats_of(p).n_blocks, 80001);
	kvp_pool_destroy(p);
}

static void test_free_stale_and_enoent(void)
{
	kvp_pool *p = mkpool(16, 8, true, false, 0, 4);
	kvp_ref r[4], r2[4];
	size_t n;
	CHECK_EQ(kvp_allocate(p, KVP_K, 32, 1, KVP_FP16, r, 4, &n), KVP_OK);
	/* A ref whose id was never created: KVP_ENOENT and nothing freed. */
	kvp_ref mixed[2] = {r[0], KVP_MAKE_REF(1000, 1)};
	CHECK_EQ(kvp_free(p, mixed, 2), KVP_ENOENT);
	CHECK_EQ(stats_of(p).n_frees, 0);
	CHECK_EQ(kvp_free(p, NULL, 1), KVP_EINVAL);
	CHECK_EQ(kvp_free(NULL, r, 1), KVP_EINVAL);
	CHECK_EQ(kvp_free(p, NULL, 0), KVP_OK);
	/* Free, then free again: idempotent, counted as stale. */
	CHECK_EQ(kvp_free(p, r, 1), KVP_OK);
	CHECK_EQ(kvp_free(p, r, 1), KVP_OK);
	kvp_stats s = stats_of(p);
	CHECK_EQ(s.n_frees, 1);
	CHECK_EQ(s.n_stale_frees, 1);
	/* The freed block goes to owner 2 (last freed, first reused)... */
	CHECK_EQ(kvp_allocate(p, KVP_K, 16, 2, KVP_FP16, r2, 4, &n), KVP_OK);
	CHECK_EQ(KVP_REF_ID(r2[0]), KVP_REF_ID(r[0]));
	CHECK(KVP_REF_GEN(r2[0]) != KVP_REF_GEN(r[0]));
	/* ...and owner 1's stale ref can neither free nor change it. */
	CHECK_EQ(kvp_free(p, r, 1), KVP_OK);
	CHECK_EQ(kvp_block_set_used(p, r[0], 3), KVP_ENOENT);
	kvp_block_info bi;
	CHECK_EQ(kvp_block_get(p, r[0], &bi), KVP_ENOENT);
	CHECK_EQ(kvp_block_get(p, r2[0], &bi), KVP_OK);
	CHECK(bi.in_use);
	CHECK_EQ(bi.owner, 2);
	CHECK_EQ(bi.n_used, 16);
	s = stats_of(p);
	CHECK_EQ(s.n_stale_frees, 2);
	CHECK_EQ(s.n_reused, 1); /* block 0 had been handed out before */
	kvp_pool_destroy(p);
}

static void test_reuse_counts_and_lifo(void)
{
	kvp_pool *p = mkpool(16, 16, true, false, 0, 4);
	kvp_ref a, b, c;
	size_t n;
	CHECK_EQ(kvp_allocate(p, KVP_K, 16, 1, KVP_FP16, &a, 1, &n), KVP_OK);
	CHECK_EQ(kvp_allocate(p, KVP_K, 16, 1, KVP_FP16, &b, 1, &n), KVP_OK);
	CHECK_EQ(kvp_free(p, &a, 1), KVP_OK);
	CHECK_EQ(kvp_free(p, &b, 1), KVP_OK);
	CHECK_EQ(kvp_allocate(p, KVP_K, 16, 2, KVP_FP16, &c, 1, &n), KVP_OK);
	CHECK_EQ(KVP_REF_ID(c), KVP_REF_ID(b)); /* last freed, first reused */
	CHECK_EQ(kvp_allocate(p, KVP_K, 16, 2, KVP_FP16, &c, 1, &n), KVP_OK);
	CHECK_EQ(KVP_REF_ID(c), KVP_REF_ID(a));
	kvp_stats s = stats_of(p);
	CHECK_EQ(s.n_reused, 2);
	CHECK_EQ(s.n_allocations, 4);
	CHECK_EQ(s.peak_blocks_in_use, 2);
	kvp_pool_destroy(p);
}

static void test_owners(void)
{
	kvp_pool *p = mkpool(16, 16, true, false, 0, 4);
	kvp_ref r[4];
	size_t n;
	/* Any id is valid, 0 and UINT64_MAX included. */
	CHECK_EQ(kvp_register_owner(p, 0), KVP_OK);
	CHECK_EQ(kvp_register_owner(p, 0), KVP_EOWNER);
	CHECK_EQ(kvp_register_owner(p, UINT64_MAX), KVP_OK);
	CHECK_EQ(kvp_blocks_for(p, 0, r, 4, &n), KVP_OK);
	CHECK_EQ(n, 0);
	CHECK_EQ(kvp_release_owner(p, 0), KVP_OK);
	CHECK_EQ(kvp_release_owner(p, 0), KVP_ENOENT);
	CHECK_EQ(kvp_blocks_for(p, 0, r, 4, &n), KVP_ENOENT);
	/* An owner holding blocks is active; release frees nothing. */
	CHECK_EQ(kvp_allocate(p, KVP_K, 20, 9, KVP_FP16, r, 4, &n), KVP_OK);
	CHECK_EQ(kvp_register_owner(p, 9), KVP_EOWNER);
	CHECK_EQ(kvp_register_owner(p, UINT64_MAX), KVP_EOWNER);
	CHECK_EQ(kvp_release_owner(p, 9), KVP_OK);
	CHECK_EQ(kvp_blocks_for(p, 9, r, 4, &n), KVP_OK);
	CHECK_EQ(n, 2);
	CHECK_EQ(stats_of(p).n_frees, 0);
	/* Freeing its last block by kvp_free ends an unregistered owner. */
	CHECK_EQ(kvp_free(p, r, 2), KVP_OK);
	CHECK_EQ(kvp_blocks_for(p, 9, r, 4, &n), KVP_ENOENT);
	CHECK_EQ(kvp_register_owner(p, 9), KVP_OK);
	/* A registered owner stays active when its blocks go by kvp_free... */
	CHECK_EQ(kvp_allocate(p, KVP_V, 20, 9, KVP_FP16, r, 4, &n), KVP_OK);
	CHECK_EQ(kvp_free(p, r, 2), KVP_OK);
	CHECK_EQ(kvp_register_owner(p, 9), KVP_EOWNER);
	/* ...and free_all releases it. */
	CHECK_EQ(kvp_allocate(p, KVP_V, 20, 9, KVP_FP16, r, 4, &n), KVP_OK);
	CHECK_EQ(kvp_free_all(p, 9), KVP_OK);
	CHECK_EQ(kvp_free_all(p, 9), KVP_ENOENT);
	CHECK_EQ(kvp_register_owner(p, 9), KVP_OK);
	CHECK_EQ(kvp_free_all(p, 9), KVP_OK); /* an active owner with no blocks */
	CHECK_EQ(kvp_free_all(NULL, 9), KVP_EINVAL);
	CHECK_EQ(kvp_register_owner(NULL, 9), KVP_EINVAL);
	CHECK_EQ(kvp_release_owner(NULL, 9), KVP_EINVAL);
	kvp_stats s = stats_of(p);
	CHECK_EQ(kvp_stats_blocks_in_use(&s), 0);
	CHECK_EQ(kvp_n_free(p, KVP_K) + kvp_n_free(p, KVP_V), 16);
	kvp_pool_destroy(p);
}

/* free_all returns both streams' blocks, and a repeat request gets its old ids. */
static void test_free_all(void)
{
	kvp_pool *p = mkpool(16, 64, true, false, 0, 8);
	kvp_ref k[4], v[4], k2[4];
	size_t n;
	CHECK_EQ(kvp_allocate(p, KVP_K, 50, 3, KVP_FP16, k, 4, &n), KVP_OK);
	CHECK_EQ(kvp_allocate(p, KVP_V, 50, 3, KVP_FP16, v, 4, &n), KVP_OK);
	CHECK_EQ(kvp_free_all(p, 3), KVP_OK);
	CHECK_EQ(kvp_n_free(p, KVP_K), 32);
	CHECK_EQ(kvp_n_free(p, KVP_V), 32);
	kvp_stats s = stats_of(p);
	CHECK_EQ(s.n_frees, 8);
	CHECK_EQ(s.n_not_full, 0);
	for (int i = 0; i < 4; i++) {
		kvp_block_info bi;
		CHECK_EQ(kvp_block_get(p, k[i], &bi), KVP_OK); /* generation still current */
		CHECK(!bi.in_use);
		CHECK(bi.ever_allocated);
		CHECK_EQ(bi.n_used, 0);
	}
	CHECK_EQ(kvp_allocate(p, KVP_K, 50, 4, KVP_FP16, k2, 4, &n), KVP_OK);
	for (int i = 0; i < 4; i++)
		CHECK_EQ(KVP_REF_ID(k2[i]), KVP_REF_ID(k[i]));
	kvp_pool_destroy(p);
}

static void test_block_get_set_used(void)
{
	kvp_pool *p = mkpool(16, 8, true, false, 0, 4);
	kvp_ref r = 0;
	size_t n;
	kvp_block_info bi;
	/* A never-allocated block answers to generation 0. */
	CHECK_EQ(kvp_block_get(p, KVP_MAKE_REF(5, 0), &bi), KVP_OK);
	CHECK(!bi.ever_allocated && !bi.in_use);
	CHECK_EQ(bi.stream, KVP_V);
	CHECK_EQ(kvp_block_get(p, KVP_MAKE_REF(5, 1), &bi), KVP_ENOENT);
	CHECK_EQ(kvp_block_get(p, KVP_MAKE_REF(8, 0), &bi), KVP_ENOENT);
	CHECK_EQ(kvp_block_get(p, r, NULL), KVP_EINVAL);
	CHECK_EQ(kvp_block_get(NULL, r, &bi), KVP_EINVAL);

	CHECK_EQ(kvp_allocate(p, KVP_K, 5, 1, KVP_BF16, &r, 1, &n), KVP_OK);
	CHECK_EQ(stats_of(p).n_not_full, 1);
	CHECK_EQ(kvp_block_set_used(p, r, 17), KVP_ERANGE);
	CHECK_EQ(kvp_block_set_used(p, r, 16), KVP_OK);
	CHECK_EQ(stats_of(p).n_not_full, 0);
	CHECK_EQ(kvp_block_get(p, r, &bi), KVP_OK);
	CHECK_EQ(bi.n_used, 16);
	CHECK_EQ(bi.format, KVP_BF16);
	CHECK_EQ(kvp_block_set_used(p, r, 0), KVP_OK);
	CHECK_EQ(stats_of(p).n_not_full, 1);
	CHECK_EQ(kvp_block_set_used(p, KVP_MAKE_REF(999, 1), 1), KVP_ENOENT);
	CHECK_EQ(kvp_block_set_used(NULL, r, 1), KVP_EINVAL);
	CHECK_EQ(kvp_free(p, &r, 1), KVP_OK);
	CHECK_EQ(stats_of(p).n_not_full, 0);
	CHECK_EQ(kvp_block_set_used(p, r, 1), KVP_ENOENT); /* free: not in use */
	kvp_pool_destroy(p);
}

/*
 * The pool's not-full count follows every change of an owner's blocks: the
 * last block of each allocate, set_used both ways, single frees of full and
 * not-full blocks; kvp_free_all takes exactly the owner's not-full blocks
 * off (another owner's stay counted).  Small and large owners (the
 * free_all paths differ), one and two streams, with and without thread
 * caches, and free_all called from the allocating thread or another one.
 */
struct nf_case {
	kvp_pool *p;
	kvp_owner owner;
	kvp_ref ref; /* 0, or a block to free first */
};

static void *nf_free_all(void *arg)
{
	struct nf_case *c = arg;
	if (c->ref)
		CHECK_EQ(kvp_free(c->p, &c->ref, 1), KVP_OK);
	else
		CHECK_EQ(kvp_free_all(c->p, c->owner), KVP_OK);
	return NULL;
}

/* nf_free_all(@c) on this thread, or on another one (@other_thread) */
static void nf_run(struct nf_case *c, bool other_thread)
{
	if (other_thread) {
		pthread_t t;
		CHECK_EQ(pthread_create(&t, NULL, nf_free_all, c), 0);
		CHECK_EQ(pthread_join(t, NULL), 0);
	} else {
		nf_free_all(c);
	}
}

static void not_full_case(bool sep, uint32_t tc, uint32_t prompt_blocks, bool other_thread)
{
	kvp_pool *p = mkpool(16, 512, sep, false, 0, tc);
	static kvp_ref r[256], d[8];
	size_t n;
	int64_t want = 0;
	/* Owner 1: a prompt whose last block is not full, decode blocks. */
	CHECK_EQ(kvp_allocate(p, KVP_K, 16 * (prompt_blocks - 1) + 5, 1, KVP_FP16, r, 256, &n),
	         KVP_OK);
	want += 1;
	CHECK_EQ(kvp_allocate(p, KVP_V, 16 * 3, 1, KVP_FP16, d, 8, &n), KVP_OK); /* all full */
	for (int i = 0; i < 4; i++) {
		CHECK_EQ(kvp_allocate(p, KVP_K, 3, 1, KVP_FP16, &d[4 + (i & 3)], 1, &n), KVP_OK);
		want += 1;
	}
	CHECK_EQ(stats_of(p).n_not_full, want);
	/* Owner 2 holds two not-full blocks throughout. */
	kvp_ref o2[2];
	CHECK_EQ(kvp_allocate(p, KVP_K, 2, 2, KVP_FP16, &o2[0], 1, &n), KVP_OK);
	CHECK_EQ(kvp_allocate(p, KVP_V, 9, 2, KVP_FP16, &o2[1], 1, &n), KVP_OK);
	want += 2;
	CHECK_EQ(stats_of(p).n_not_full, want);
	/* set_used both ways. */
	CHECK_EQ(kvp_block_set_used(p, r[0], 4), KVP_OK); /* full -> not full */
	CHECK_EQ(kvp_block_set_used(p, r[1], 0), KVP_OK);
	want += 2;
	CHECK_EQ(kvp_block_set_used(p, r[prompt_blocks - 1], 16), KVP_OK); /* -> full */
	want -= 1;
	CHECK_EQ(kvp_block_set_used(p, r[1], 7), KVP_OK); /* not full -> not full */
	CHECK_EQ(stats_of(p).n_not_full, want);
	/* Single frees: a not-full block and a full one. */
	CHECK_EQ(kvp_free(p, &r[0], 1), KVP_OK);
	want -= 1;
	CHECK_EQ(kvp_free(p, &r[2], 1), KVP_OK);
	CHECK_EQ(stats_of(p).n_not_full, want);
	/* The same on the owner's other side (its bias revoked when another
	 * thread frees). */
	CHECK_EQ(kvp_block_set_used(p, r[3], 1), KVP_OK);
	want += 1;
	struct nf_case c = {p, 1, r[3]};
	nf_run(&c, other_thread);
	want -= 1;
	c.ref = d[0];
	nf_run(&c, other_thread);
	CHECK_EQ(stats_of(p).n_not_full, want);
	/* Owner 1 ends: its not-full blocks (r[1] and the four decode
	 * blocks) go, owner 2's two stay. */
	c.ref = 0;
	nf_run(&c, other_thread);
	CHECK_EQ(stats_of(p).n_not_full, 2);
	CHECK_EQ(kvp_free_all(p, 2), KVP_OK);
	CHECK_EQ(stats_of(p).n_not_full, 0);
	kvp_stats s = stats_of(p);
	CHECK_EQ(kvp_stats_blocks_in_use(&s), 0);
	kvp_pool_destroy(p);
}

static void test_not_full_counted_through_free_all(void)
{
	for (int sep = 0; sep < 2; sep++)
		for (int other = 0; other < 2; other++) {
			not_full_case(sep, KVP_DEFAULT_THREAD_CACHE, 4, other);   /* small owner */
			not_full_case(sep, KVP_DEFAULT_THREAD_CACHE, 200, other); /* magazines */
			not_full_case(sep, 0, 200, other);                        /* chains */
			not_full_case(sep, 64, 200, other); /* a magazine without room */
		}
}

static uint32_t hook_ids[64];
static int hook_n;
static void hook(void *arg, uint32_t id)
{
	CHECK_EQ(*(int *)arg, 42);
	hook_ids[hook_n++] = id;
}

static void test_shrink(void)
{
	kvp_pool *p = mkpool(16, 32, true, false, 0, 4); /* 16 K */
	int tag = 42;
	kvp_ref r[8];
	size_t n;
	uint32_t retired = 99;
	hook_n = 0;
	CHECK_EQ(kvp_pool_add_retire_hook(p, hook, &tag), KVP_OK);
	CHECK_EQ(kvp_allocate(p, KVP_K, 16 * 4, 1, KVP_FP16, r, 8, &n), KVP_OK);
	CHECK_EQ(kvp_free(p, r, 1), KVP_OK); /* into this thread's cache */
	CHECK_EQ(kvp_shrink(p, KVP_K, 5, &retired), KVP_OK);
	CHECK_EQ(retired, 8); /* 13 free -> 5 */
	CHECK_EQ(hook_n, 8);
	CHECK_EQ(kvp_n_free(p, KVP_K), 5);
	CHECK_EQ(kvp_n_free(p, KVP_V), 16);
	kvp_stats s = stats_of(p);
	CHECK_EQ(s.n_retired, 8);
	CHECK_EQ(s.n_blocks, 24);
	/* In-use blocks untouched; retired ones are gone for block_get. */
	for (int i = 1; i < 4; i++) {
		kvp_block_info bi;
		CHECK_EQ(kvp_block_get(p, r[i], &bi), KVP_OK);
		CHECK(bi.in_use);
	}
	for (int i = 0; i < hook_n; i++) {
		kvp_block_info bi;
		CHECK_EQ(kvp_block_get(p, KVP_MAKE_REF(hook_ids[i], 0), &bi), KVP_ENOENT);
		CHECK_EQ(kvp_block_get(p, KVP_MAKE_REF(hook_ids[i], 1), &bi), KVP_ENOENT);
		CHECK(hook_ids[i] < 16); /* a K block */
	}
	/* Shrinking below what is free retires nothing; target above too. */
	CHECK_EQ(kvp_shrink(p, KVP_K, 5, &retired), KVP_OK);
	CHECK_EQ(retired, 0);
	CHECK_EQ(kvp_shrink(p, KVP_K, 100, NULL), KVP_OK);
	CHECK_EQ(kvp_shrink(p, KVP_KV, 0, &retired), KVP_EINVAL);
	CHECK_EQ(kvp_shrink(NULL, KVP_K, 0, &retired), KVP_EINVAL);
	/* Everything free can go; allocation then reports exhaustion. */
	CHECK_EQ(kvp_shrink(p, KVP_K, 0, &retired), KVP_OK);
	CHECK_EQ(retired, 5);
	CHECK_EQ(kvp_allocate(p, KVP_K, 1, 2, KVP_FP16, r + 4, 4, &n), KVP_EEXHAUSTED);
	/* Frees of blocks in use still work, and they can be reused. */
	CHECK_EQ(kvp_free_all(p, 1), KVP_OK);
	CHECK_EQ(kvp_n_free(p, KVP_K), 3);
	s = stats_of(p);
	CHECK_EQ(s.n_blocks, 19);
	CHECK_EQ(kvp_stats_blocks_in_use(&s) + kvp_n_free(p, KVP_K) + kvp_n_free(p, KVP_V),
	         s.n_blocks);
	CHECK_EQ(kvp_pool_remove_retire_hook(p, hook, &tag), KVP_OK);
	CHECK_EQ(kvp_pool_remove_retire_hook(p, hook, &tag), KVP_ENOENT);
	CHECK_EQ(kvp_pool_add_retire_hook(p, NULL, &tag), KVP_EINVAL);
	for (int i = 0; i < KVP_MAX_RETIRE_HOOKS; i++)
		CHECK_EQ(kvp_pool_add_retire_hook(p, hook, &tag), KVP_OK);
	CHECK_EQ(kvp_pool_add_retire_hook(p, hook, &tag), KVP_ERANGE);
	kvp_pool_destroy(p);
}

/* Growth after a shrink reuses the retired ids, with a new generation. */
static void test_shrink_then_grow_reuses_ids(void)
{
	kvp_pool *p = mkpool(16, 8, true, true, 0, 0); /* 4 K ids 0..3, 4 V ids 4..7 */
	kvp_ref r[8], old = KVP_MAKE_REF(1, 0);
	size_t n;
	uint32_t retired;
	kvp_block_info bi;
	CHECK_EQ(kvp_shrink(p, KVP_K, 0, &retired), KVP_OK);
	CHECK_EQ(retired, 4);
	CHECK_EQ(kvp_pool_n_retired_ids(p), 4);
	CHECK_EQ(kvp_block_get(p, old, &bi), KVP_ENOENT);
	/* V grows by 4: the four retired K ids come back as V blocks. */
	CHECK_EQ(kvp_allocate(p, KVP_V, 16 * 8, 1, KVP_FP16, r, 8, &n), KVP_OK);
	CHECK_EQ(kvp_pool_n_retired_ids(p), 0);
	CHECK_EQ(kvp_pool_n_ids(p), 8); /* no new ids: 4 V + 4 revived */
	int revived = 0;
	for (size_t i = 0; i < n; i++) {
		CHECK_EQ(kvp_block_get(p, r[i], &bi), KVP_OK);
		CHECK_EQ(bi.stream, KVP_V);
		revived += KVP_REF_ID(r[i]) < 4;
	}
	CHECK_EQ(revived, 4);
	CHECK_EQ(kvp_block_get(p, old, &bi), KVP_ENOENT); /* stale across the revival */
	kvp_stats s;
	CHECK_EQ(kvp_pool_stats(p, &s), KVP_OK);
	CHECK_EQ(s.n_blocks, 8);
	CHECK_EQ(s.n_grown, 4);
	CHECK_EQ(s.n_retired, 4);
	CHECK_EQ(kvp_allocate(p, KVP_V, 16 * 2, 2, KVP_FP16, r, 8, &n), KVP_OK); /* 2 new ids */
	CHECK_EQ(kvp_pool_n_ids(p), 10);
	kvp_pool_destroy(p);
}

static void test_history(void)
{
	kvp_pool_config c;
	kvp_pool *p;
	kvp_stats h[8];
	kvp_ref r[64];
	size_t n;
	kvp_pool_config_init(&c);
	c.n_blocks = 8;
	c.history_len = 4;
	c.grow_on_exhaustion = true;
	CHECK_EQ(kvp_pool_create(&c, &p), KVP_OK);
	CHECK_EQ(kvp_pool_history(p, h, 8), 0);
	CHECK_EQ(kvp_allocate(p, KVP_K, 16, 1, KVP_FP16, r, 64, &n), KVP_OK); /* first call */
	CHECK_EQ(kvp_pool_history(p, h, 8), 1);
	CHECK_EQ(h[0].n_allocations, 1);
	CHECK_EQ(kvp_allocate(p, KVP_K, 16 * 10, 1, KVP_FP16, r, 64, &n), KVP_OK); /* grows */
	CHECK_EQ(kvp_pool_history(p, h, 8), 2);
	CHECK_EQ(h[1].n_grown, 7);
	CHECK_EQ(kvp_shrink(p, KVP_V, 0, NULL), KVP_OK);
	CHECK_EQ(kvp_pool_history(p, h, 8), 3);
	CHECK_EQ(h[2].n_retired, 4);
	kvp_pool_destroy(p);

	c.grow_on_exhaustion = false;
	CHECK_EQ(kvp_pool_create(&c, &p), KVP_OK);
	for (int i = 0; i < 6; i++)
		CHECK_EQ(kvp_allocate(p, KVP_K, 16 * 5, 1, KVP_FP16, r, 64, &n), KVP_EEXHAUSTED);
	/* The ring keeps the newest history_len, oldest first. */
	CHECK_EQ(kvp_pool_history(p, h, 8), 4);
	for (int i = 0; i < 4; i++)
		CHECK_EQ(h[i].n_exhausted, (uint64_t)(3 + i));
	CHECK_EQ(kvp_pool_history(p, h, 2), 2);
	CHECK_EQ(h[0].n_exhausted, 5);
	CHECK_EQ(h[1].n_exhausted, 6);
	CHECK_EQ(kvp_pool_history(p, NULL, 0), 0);
	CHECK_EQ(kvp_pool_history(NULL, h, 8), 0);
	kvp_pool_destroy(p);
}

static void test_prometheus(void)
{
	kvp_pool *p = mkpool(16, 64, true, false, 0, 4);
	kvp_ref r[4];
	size_t n, len = 0, len2 = 0;
	char buf[4096];
	CHECK_EQ(kvp_allocate(p, KVP_K, 40, 1, KVP_FP16, r, 4, &n), KVP_OK);
	kvp_stats s = stats_of(p);
	CHECK_EQ(kvp_stats_to_prometheus(&s, NULL, buf, sizeof(buf), &len), KVP_OK);
	CHECK_EQ(strlen(buf), len);
	const char *must[] = {
	    "# TYPE kvpool_block_pool_blocks_in_use gauge\nkvpool_block_pool_blocks_in_use 3\n",
	    "# TYPE kvpool_block_pool_blocks_managed gauge\nkvpool_block_pool_blocks_managed 64\n",
	    "# TYPE kvpool_block_pool_fragmentation gauge\n",
	    "# TYPE kvpool_block_pool_peak_blocks_in_use gauge\n",
	    ("# TYPE kvpool_block_pool_allocations_total counter\n"
	     "kvpool_block_pool_allocations_total 3\n"),
	    "# TYPE kvpool_block_pool_frees_total counter\n",
	    "# TYPE kvpool_block_pool_reused_total counter\n",
	    "# TYPE kvpool_block_pool_exhausted_total counter\n",
	    "# TYPE kvpool_block_pool_grown_total counter\n",
	    "# TYPE kvpool_block_pool_retired_total counter\n",
	    "# TYPE kvpool_block_pool_stale_frees_total counter\n",
	    "# HELP kvpool_block_pool_blocks_in_use ",
	};
	for (size_t i = 0; i < sizeof(must) / sizeof(must[0]); i++)
		CHECK(strstr(buf, must[i]) != NULL);
	CHECK_EQ(buf[len - 1], '\n');
	/* Short buffer: KVP_ERANGE and the length needed; a NULL buffer asks. */
	CHECK_EQ(kvp_stats_to_prometheus(&s, NULL, buf, len, &len2), KVP_ERANGE);
	CHECK_EQ(len2, len);
	CHECK_EQ(kvp_stats_to_prometheus(&s, NULL, NULL, 0, &len2), KVP_ERANGE);
	CHECK_EQ(len2, len);
	CHECK_EQ(kvp_stats_to_prometheus(&s, "my_app:kv", buf, sizeof(buf), &len), KVP_OK);
	CHECK(strstr(buf, "my_app:kv_allocations_total 3\n") != NULL);
	CHECK_EQ(kvp_stats_to_prometheus(&s, "9bad", buf, sizeof(buf), &len), KVP_EINVAL);
	CHECK_EQ(kvp_stats_to_prometheus(&s, "has space", buf, sizeof(buf), &len), KVP_EINVAL);
	CHECK_EQ(kvp_stats_to_prometheus(&s, "", buf, sizeof(buf), &len), KVP_EINVAL);
	CHECK_EQ(kvp_stats_to_prometheus(NULL, NULL, buf, sizeof(buf), &len), KVP_EINVAL);
	CHECK_EQ(kvp_stats_to_prometheus(&s, NULL, buf, sizeof(buf), NULL), KVP_EINVAL);

	/* promtool accepts it (package prometheus). */
	CHECK_EQ(kvp_stats_to_prometheus(&s, NULL, buf, sizeof(buf), &len), KVP_OK);
	FILE *f = popen("promtool check metrics >/dev/null 2>&1", "w");
	CHECK(f != NULL);
	fwrite(buf, 1, len, f);
	int st = pclose(f);
	CHECK_EQ(st, 0);
	CHECK_EQ(kvp_pool_stats(NULL, &s), KVP_EINVAL);
	CHECK_EQ(kvp_pool_stats(p, NULL), KVP_EINVAL);
	kvp_pool_destroy(p);
}

static void test_thread_cache_zero(void)
{
	kvp_pool *p = mkpool(8, 10, true, false, 0, 0);
	kvp_ref r[8];
	size_t n;
	for (int round = 0; round < 3; round++) {
		CHECK_EQ(kvp_allocate(p, KVP_V, 40, 1, KVP_FP16, r, 8, &n), KVP_OK);
		CHECK_EQ(kvp_n_free(p, KVP_V), 0);
		CHECK_EQ(kvp_free(p, r, n), KVP_OK);
		CHECK_EQ(kvp_n_free(p, KVP_V), 5);
	}
	kvp_pool_destroy(p);
}

/* Out of memory: every failing call reports KVP_ENOMEM and changes nothing. */
static void test_out_of_memory(void)
{
	kvp_pool_config c;
	kvp_pool *p = (kvp_pool *)0x1;
	kvp_pool_config_init(&c);
	for (long skip = 0; skip < 12; skip++) {
		kvpi_fault_inject(skip, 1);
		int rc = kvp_pool_create(&c, &p);
		kvpi_fault_inject(0, 0);
		if (rc == KVP_OK) {
			kvp_pool_destroy(p);
		} else {
			CHECK_EQ(rc, KVP_ENOMEM);
			CHECK(p == NULL);
		}
	}
	/* Growth that cannot get memory: KVP_ENOMEM, nothing handed out. */
	c.n_blocks = 4;
	c.grow_on_exhaustion = true;
	c.thread_cache = 0;
	CHECK_EQ(kvp_pool_create(&c, &p), KVP_OK);
	kvp_ref r[4096];
	size_t n;
	CHECK_EQ(kvp_allocate(p, KVP_K, 16, 1, KVP_FP16, r, 1, &n), KVP_OK); /* slot made */
	kvpi_fault_inject(0, -1);
	CHECK_EQ(kvp_allocate(p, KVP_K, 16 * 3000, 2, KVP_FP16, r, 4096, &n), KVP_ENOMEM);
	/* A new owner's record cannot be made either. */
	CHECK_EQ(kvp_allocate(p, KVP_K, 16, 3, KVP_FP16, r, 4096, &n), KVP_ENOMEM);
	kvpi_fault_inject(0, 0);
	CHECK_EQ(kvp_n_free(p, KVP_K), 1);
	kvp_stats s = stats_of(p);
	CHECK_EQ(s.n_blocks, 4);
	CHECK_EQ(kvp_stats_blocks_in_use(&s), 1);
	CHECK_EQ(kvp_allocate(p, KVP_K, 16 * 3000, 2, KVP_FP16, r, 4096, &n), KVP_OK);
	kvp_pool_destroy(p);
}

/* Once warm, a serving loop (an owner per request, blocks in and out) asks
 * the system for nothing: with every system allocation failing, it runs on. */
static void serve_requests(kvp_pool *p, uint64_t first_owner, int n)
{
	kvp_ref r[64];
	size_t got;
	for (int i = 0; i < n; i++) {
		kvp_owner o = first_owner + (uint64_t)i;
		CHECK_EQ(
		    kvp_allocate(p, KVP_K, 1 + (uint32_t)(i * 37) % 500, o, KVP_FP16, r, 64, &got),
		    KVP_OK);
		CHECK_EQ(
		    kvp_allocate(p, KVP_V, 1 + (uint32_t)(i * 53) % 500, o, KVP_FP16, r, 64, &got),
		    KVP_OK);
		if (i >= 16) /* 16 requests live at once */
			CHECK_EQ(kvp_free_all(p, o - 16), KVP_OK);
	}
	for (int i = n - 16; i < n; i++)
		CHECK_EQ(kvp_free_all(p, first_owner + (uint64_t)i), KVP_OK);
}

static void test_steady_state_makes_no_system_allocation(void)
{
	kvp_pool *p = mkpool(16, 2048, true, false, 0, KVP_DEFAULT_THREAD_CACHE);
	serve_requests(p, 1000, 2000); /* warm: records, buckets, thread slot */
	unsigned long before = kvpi_fault_injected();
	kvpi_fault_inject(0, -1);
	serve_requests(p, 100000, 2000); /* new owner ids, same peak */
	kvpi_fault_inject(0, 0);
	CHECK_EQ(kvpi_fault_injected(), before); /* nothing even asked */
	kvp_stats s;
	CHECK_EQ(kvp_pool_stats(p, &s), KVP_OK);
	CHECK_EQ(kvp_stats_blocks_in_use(&s), 0);
	kvp_pool_destroy(p);
}

/* An application inside its own liburcu-bp read-side section: the pool no
 * longer uses liburcu, so growth through many segments and a shrink both
 * work there (neither waits for a grace period). */
static void test_inside_callers_rcu_section(void)
{
	kvp_pool *p = mkpool(16, 2, false, true, 0, 0);
	kvp_ref r[4096];
	size_t n;
	uint32_t k = 7;
	urcu_bp_read_lock();
	for (int i = 0; i < 6; i++) /* 24576 blocks: growth segments 0..4 */
		CHECK_EQ(kvp_allocate(p, KVP_KV, 16 * 4096, 10 + i, KVP_FP16, r, 4096, &n), KVP_OK);
	CHECK_EQ(kvp_shrink(p, KVP_KV, 0, &k), KVP_OK);
	CHECK_EQ(k, 0); /* nothing free */
	for (int i = 0; i < 6; i++)
		CHECK_EQ(kvp_free_all(p, 10 + i), KVP_OK);
	CHECK_EQ(kvp_shrink(p, KVP_KV, 0, &k), KVP_OK);
	urcu_bp_read_unlock();
	CHECK(k > 16 * 1024);
	kvp_pool_destroy(p);
}

int main(void)
{
	RUN(test_strerror_and_formats);
	RUN(test_config_defaults_and_errors);
	RUN(test_documented_example_line);
	RUN(test_split_and_layout);
	RUN(test_allocate_arguments);
	RUN(test_fill_and_extension);
	RUN(test_exhaustion_all_or_nothing);
	RUN(test_growth);
	RUN(test_free_stale_and_enoent);
	RUN(test_reuse_counts_and_lifo);
	RUN(test_owners);
	RUN(test_free_all);
	RUN(test_block_get_set_used);
	RUN(test_not_full_counted_through_free_all);
	RUN(test_shrink);
	RUN(test_shrink_then_grow_reuses_ids);
	RUN(test_history);
	RUN(test_prometheus);
	RUN(test_thread_cache_zero);
	RUN(test_out_of_memory);
	RUN(test_inside_callers_rcu_section);
	RUN(test_steady_state_makes_no_system_allocation);
	return 0;
}
