/*
 * tests/prefix_testutil.h - what the prefix cache's tests share.
 *
 * tpx_pool makes the pool most of them race on: the prefix cache on, one
 * stream for K and V, @n_blocks blocks of @bs tokens made up front.
 *
 * The race tests widen windows by wrapping internal calls of the prefix
 * cache with -Wl,--wrap=<name> (tests/BUILD); a test defines the __wrap_
 * functions it links and calls the __real_ ones.  Their declarations are
 * here, once, with the signatures of lib/prefix/prefix_internal.h.
 */
#ifndef KVPOOL_TESTS_PREFIX_TESTUTIL_H
#define KVPOOL_TESTS_PREFIX_TESTUTIL_H

#include <kvpool/kvpool.h>

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "tests/testutil.h"

/* tpx_pool_tc - tpx_pool with @tc blocks per thread cache (< 0: the default) */
static inline kvp_pool *tpx_pool_tc(uint32_t bs, uint32_t n_blocks, long tc)
{
	kvp_pool_config c;
	kvp_pool_config_init(&c);
	c.block_size = bs;
	c.n_blocks = n_blocks;
	c.separate_kv = false;
	c.prefix_cache = true;
	if (tc >= 0)
		c.thread_cache = (uint32_t)tc;
	kvp_pool *p = NULL;
	CHECK_EQ(kvp_pool_create(&c, &p), KVP_OK);
	return p;
}

/* tpx_pool - a prefix-cache pool of @n_blocks blocks of @bs tokens, one stream. */
static inline kvp_pool *tpx_pool(uint32_t bs, uint32_t n_blocks)
{
	return tpx_pool_tc(bs, n_blocks, -1);
}

/* tpx_findable - whether a block is published under @h in stream @st: a
 * match by a throw-away owner, dropped again at once. */
static inline bool tpx_findable(kvp_pool *p, kvp_stream st, kvp_hash h)
{
	kvp_ref r;
	size_t m;
	CHECK_EQ(kvp_prefix_match(p, st, KVP_FP16, &h, 1, 999999, &r, 1, &m), KVP_OK);
	if (m)
		CHECK_EQ(kvp_free_owned(p, 999999, &r, 1), KVP_OK);
	return m == 1;
}

/* tpx_key - a content key from three small numbers (distinct numbers, distinct keys) */
static inline kvp_hash tpx_key(uint32_t a, uint32_t b, uint32_t c)
{
	uint64_t x = ((uint64_t)a << 40) | ((uint64_t)b << 16) | (uint64_t)c;
	kvp_hash h = {x * 0x9e3779b97f4a7c15ull + 7, x ^ 0xabcdefull};
	return h;
}

/* tpx_tag - the content tag a ledger test writes for key @k (never 0) */
static inline uint64_t tpx_tag(kvp_hash k)
{
	return (k.lo ^ (k.hi << 1)) | 1;
}

/* tpx_violation - count a ledger violation in @n and say what it was */
static inline void tpx_violation(_Atomic uint64_t *n, const char *what, uint32_t id)
{
	fprintf(stderr, "violation: %s (block %u)\n", what, id);
	atomic_fetch_add(n, 1);
}

/* tpx_seed - the race tests' random seed: KVP_RACE_SEED, or a fixed default; printed */
static inline uint64_t tpx_seed(void)
{
	const char *e = getenv("KVP_RACE_SEED");
	uint64_t seed = e ? strtoull(e, NULL, 0) : 20261201u;
	printf("seed %llu\n", (unsigned long long)seed);
	return seed;
}

struct kvpi_prefix;
struct kvpi_block;
struct kvpi_tslot;

/* The key index's lookup (lib/prefix/prefix_index.c). */
uint32_t __real_kvpi_pfx_index_lookup(struct kvpi_prefix *pf, uint32_t stream, const kvp_hash *key);
uint32_t __wrap_kvpi_pfx_index_lookup(struct kvpi_prefix *pf, uint32_t stream, const kvp_hash *key);
/* Every CAS on a block's state word (lib/prefix/prefix_cas.c). */
bool __real_kvpi_pfx_cas(struct kvpi_block *b, uint64_t st, uint64_t nst);
bool __wrap_kvpi_pfx_cas(struct kvpi_block *b, uint64_t st, uint64_t nst);
/* Listing a block at its last release (lib/prefix/prefix_lru.c). */
void __real_kvpi_pfx_lru_insert(struct kvpi_prefix *pf, const struct kvpi_tslot *s, int si,
                                uint32_t id);
void __wrap_kvpi_pfx_lru_insert(struct kvpi_prefix *pf, const struct kvpi_tslot *s, int si,
                                uint32_t id);

#endif /* KVPOOL_TESTS_PREFIX_TESTUTIL_H */
