/*
 * tests/bufcache_ref_test.c - the reference behaviour in a four-phase check.
 *
 * Phase 1: rounding boundaries.  Phase 2: headroom math and the overflow
 * guard.  Phase 3: a live allocation is 256-aligned, holds a 0xAA fill, and
 * cached bytes account for it.  Phase 4: exact pointer reuse, smallest-first
 * eviction under a 1024-byte budget, and KVP_BUF_MAX_REQUEST + 1 failing.
 * Plus the rules around them (include/kvpool/bufcache.h, "Semantics"):
 * best fit by the request (not its rounding), least-recently-cached order
 * among equal capacities, and a buffer larger than the budget going
 * straight back to the system.
 */
#include <kvpool/bufcache.h>

#include "tests/testutil.h"

#include <stdint.h>
#include <string.h>

static kvp_bufcache_stats stats(kvp_bufcache *c)
{
	kvp_bufcache_stats s;
	CHECK_EQ(kvp_bufcache_get_stats(c, &s), KVP_OK);
	return s;
}

static void phase1_rounding_boundaries(void)
{
	CHECK_EQ(kvp_bufcache_round(0), 256);
	CHECK_EQ(kvp_bufcache_round(1), 256);
	CHECK_EQ(kvp_bufcache_round(256), 512);
	CHECK_EQ(kvp_bufcache_round(257), 512);
	/* 228 + 228/8 = 256 is the largest request that still fits 256 bytes. */
	CHECK_EQ(kvp_bufcache_round(228), 256);
	CHECK_EQ(kvp_bufcache_round(229), 512);
	for (size_t r = 0; r < 5000; r++) {
		size_t c = kvp_bufcache_round(r);
		CHECK(c % 256 == 0);
		CHECK(c >= r + r / 8);
		CHECK(c < r + r / 8 + 256 || (r == 0 && c == 256));
	}
}

static void phase2_headroom_and_overflow(void)
{
	size_t max = KVP_BUF_MAX_REQUEST, top;

	CHECK_EQ(kvp_bufcache_round(0), 256);
	CHECK_EQ(kvp_bufcache_round(200), 256);
	CHECK_EQ(kvp_bufcache_round(256), 512);
	CHECK_EQ(kvp_bufcache_round(1024), 1280);
	/* Overflow guard: the largest request rounds without wrapping, one more gives 0. */
	top = kvp_bufcache_round(max);
	CHECK(top != 0);
	CHECK(top % 256 == 0);
	CHECK(top >= max + max / 8);
	CHECK(top > max);
	CHECK_EQ(kvp_bufcache_round(max + 1), 0);
	CHECK_EQ(kvp_bufcache_round(SIZE_MAX), 0);
	CHECK_EQ(kvp_bufcache_round(max + 256), 0);
}

static void phase3_live_allocation(void)
{
	kvp_bufcache *c;
	size_t actual = 1;
	unsigned char *p;

	CHECK_EQ(kvp_bufcache_create(1 << 20, &c), KVP_OK);
	p = kvp_bufcache_alloc(c, 1000, &actual);
	CHECK(p != NULL);
	CHECK_EQ(actual, kvp_bufcache_round(1000));
	CHECK_EQ(actual, 1280);
	CHECK_EQ((uintptr_t)p % 256, 0);
	memset(p, 0xAA, actual);
	for (size_t i = 0; i < actual; i++)
		CHECK_EQ(p[i], 0xAA);
	CHECK_EQ(kvp_bufcache_cached_bytes(c), 0);
	CHECK_EQ(stats(c).bytes_in_use, 1280);
	CHECK_EQ(stats(c).misses, 1);
	kvp_bufcache_free(c, p, actual);
	CHECK_EQ(kvp_bufcache_cached_bytes(c), 1280);
	CHECK_EQ(stats(c).cached_buffers, 1);
	CHECK_EQ(stats(c).bytes_in_use, 0);
	CHECK_EQ(stats(c).peak_cached_bytes, 1280);
	kvp_bufcache_destroy(c);
}

static void phase4_reuse_eviction_limit(void)
{
	kvp_bufcache *c;
	size_t a1, a2, a3, a4, x;
	void *p1, *p2, *p3, *p4, *q;

	CHECK_EQ(kvp_bufcache_create(1024, &c), KVP_OK);
	/* Exact pointer reuse. */
	p1 = kvp_bufcache_alloc(c, 200, &a1);
	kvp_bufcache_free(c, p1, a1);
	q = kvp_bufcache_alloc(c, 200, &x);
	CHECK(q == p1);
	CHECK_EQ(x, 256);
	CHECK_EQ(stats(c).hits, 1);
	/* Fill the 1024-byte budget: 256 + 512 + 256 (p4's capacity comes later). */
	p2 = kvp_bufcache_alloc(c, 256, &a2); /* 512 */
	p3 = kvp_bufcache_alloc(c, 100, &a3); /* 256 */
	p4 = kvp_bufcache_alloc(c, 300, &a4); /* 512 */
	CHECK(p2 && p3 && p4);
	CHECK_EQ(a2, 512);
	CHECK_EQ(a3, 256);
	CHECK_EQ(a4, 512);
	kvp_bufcache_free(c, q, x);   /* cached: q(256) */
	kvp_bufcache_free(c, p2, a2); /* cached: q(256) p2(512) = 768 */
	kvp_bufcache_free(c, p3, a3); /* cached: q p2 p3 = 1024, at the budget */
	CHECK_EQ(kvp_bufcache_cached_bytes(c), 1024);
	CHECK_EQ(stats(c).evictions, 0);
	/* 1024 + 512 > 1024: the two 256s go, q (older) first, then p3. */
	kvp_bufcache_free(c, p4, a4);
	CHECK_EQ(stats(c).evictions, 2);
	CHECK_EQ(kvp_bufcache_cached_bytes(c), 1024);
	CHECK_EQ(stats(c).cached_buffers, 2);
	/* Only 512s are left: a 1-byte request takes the older one, p2. */
	q = kvp_bufcache_alloc(c, 1, &x);
	CHECK(q == p2);
	CHECK_EQ(x, 512);
	kvp_bufcache_free(c, q, x);
	/* Cached: p4 then p2.  Among equal capacities a hit takes the older: p4. */
	p3 = kvp_bufcache_alloc(c, 50, &a3);
	CHECK_EQ(a3, 512);
	CHECK(p3 == p4);
	kvp_bufcache_free(c, p3, a3);
	CHECK_EQ(kvp_bufcache_cached_bytes(c), 1024);
	/* A buffer larger than the whole budget goes straight back. */
	{
		kvp_bufcache_stats before = stats(c), after;
		p1 = kvp_bufcache_alloc(c, 1024, &a1); /* 1280 */
		CHECK(p1 != NULL);
		CHECK_EQ(a1, 1280);
		kvp_bufcache_free(c, p1, a1);
		after = stats(c);
		CHECK_EQ(after.system_frees, before.system_frees + 1);
		CHECK_EQ(after.evictions, before.evictions);
		CHECK_EQ(kvp_bufcache_cached_bytes(c), 1024);
	}
	/* KVP_BUF_MAX_REQUEST + 1 returns NULL with *actual = 0. */
	x = 77;
	CHECK(kvp_bufcache_alloc(c, (size_t)KVP_BUF_MAX_REQUEST + 1, &x) == NULL);
	CHECK_EQ(x, 0);
	kvp_bufcache_destroy(c);
}

static void best_fit_uses_request_not_rounding(void)
{
	kvp_bufcache *c;
	size_t a, b, d, x;
	void *pa, *pb, *pd, *q;

	CHECK_EQ(kvp_bufcache_create(1 << 20, &c), KVP_OK);
	pa = kvp_bufcache_alloc(c, 1, &a);    /* 256 */
	pb = kvp_bufcache_alloc(c, 256, &b);  /* 512 */
	pd = kvp_bufcache_alloc(c, 1024, &d); /* 1280 */
	kvp_bufcache_free(c, pd, d);
	kvp_bufcache_free(c, pb, b);
	kvp_bufcache_free(c, pa, a);
	/* round(500) = 768, but the cached 512 holds 500 bytes: it is the best fit. */
	q = kvp_bufcache_alloc(c, 500, &x);
	CHECK(q == pb);
	CHECK_EQ(x, 512);
	/* 513 bytes: the 512 is gone anyway; the 1280 is the smallest that fits. */
	kvp_bufcache_free(c, q, x);
	q = kvp_bufcache_alloc(c, 513, &x);
	CHECK(q == pd);
	CHECK_EQ(x, 1280);
	kvp_bufcache_free(c, q, x);
	/* 1281 bytes: nothing fits, a miss of round(1281) = 1536. */
	q = kvp_bufcache_alloc(c, 1281, &x);
	CHECK(q != pa && q != pb && q != pd);
	CHECK_EQ(x, 1536);
	CHECK_EQ(stats(c).misses, 4);
	CHECK_EQ(stats(c).hits, 2);
	kvp_bufcache_free(c, q, x);
	kvp_bufcache_destroy(c);
}

int main(void)
{
	RUN(phase1_rounding_boundaries);
	RUN(phase2_headroom_and_overflow);
	RUN(phase3_live_allocation);
	RUN(phase4_reuse_eviction_limit);
	RUN(best_fit_uses_request_not_rounding);
	return 0;
}
