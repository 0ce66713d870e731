/*
 * tests/bufcache_api_test.c - argument checks, stats, Prometheus text, the large tier.
 *
 * - Every entry point survives NULL and bad arguments with the documented
 *   result (no abort, no effect).
 * - Stats identities: hits + misses = allocations, system_allocs -
 *   system_frees = buffers alive, bytes_in_use = capacity handed out; after
 *   clear every system allocation has been given back.
 * - The Prometheus text has every family, counters end in _total, and
 *   `promtool check metrics` accepts it; short buffers get KVP_ERANGE.
 * - Capacities above KVP_BUF_LOCKFREE_MAX (the locked large tier) follow the
 *   same best-fit and eviction rules, and across the tier boundary too.
 * - A zero budget caches nothing; wrong-looking frees are not cached.
 */
#include <kvpool/bufcache.h>

#include "tests/testutil.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static kvp_bufcache_stats stats(kvp_bufcache *c)
{
	kvp_bufcache_stats s;
	CHECK_EQ(kvp_bufcache_get_stats(c, &s), KVP_OK);
	return s;
}

static void null_and_bad_arguments(void)
{
	kvp_bufcache *c = (kvp_bufcache *)&c;
	kvp_bufcache_stats s;
	size_t actual = 5, len = 0;
	char buf[16];

	CHECK_EQ(kvp_bufcache_create(100, NULL), KVP_EINVAL);
	CHECK(kvp_bufcache_alloc(NULL, 10, &actual) == NULL);
	CHECK_EQ(actual, 0);
	kvp_bufcache_free(NULL, buf, 256); /* no-op, must not touch buf */
	kvp_bufcache_clear(NULL);
	kvp_bufcache_destroy(NULL);
	CHECK_EQ(kvp_bufcache_cached_bytes(NULL), 0);
	CHECK_EQ(kvp_bufcache_get_stats(NULL, &s), KVP_EINVAL);

	CHECK_EQ(kvp_bufcache_create(1 << 16, &c), KVP_OK);
	CHECK(c != NULL);
	CHECK(kvp_bufcache_alloc(c, 10, NULL) == NULL); /* *actual is required */
	CHECK_EQ(kvp_bufcache_get_stats(c, NULL), KVP_EINVAL);
	kvp_bufcache_free(c, NULL, 256); /* no-op */
	actual = 9;
	CHECK(kvp_bufcache_alloc(c, SIZE_MAX, &actual) == NULL);
	CHECK_EQ(actual, 0);
	s = stats(c);
	CHECK_EQ(s.hits + s.misses + s.system_allocs + s.system_frees + s.bytes_in_use, 0);

	CHECK_EQ(kvp_bufcache_stats_to_prometheus(NULL, NULL, buf, sizeof(buf), &len), KVP_EINVAL);
	CHECK_EQ(kvp_bufcache_stats_to_prometheus(&s, NULL, buf, sizeof(buf), NULL), KVP_EINVAL);
	CHECK_EQ(kvp_bufcache_stats_to_prometheus(&s, NULL, NULL, 4, &len), KVP_EINVAL);
	CHECK_EQ(kvp_bufcache_stats_to_prometheus(&s, "", buf, sizeof(buf), &len), KVP_EINVAL);
	CHECK_EQ(kvp_bufcache_stats_to_prometheus(&s, "9lives", buf, sizeof(buf), &len),
	         KVP_EINVAL);
	CHECK_EQ(kvp_bufcache_stats_to_prometheus(&s, "bad-name", buf, sizeof(buf), &len),
	         KVP_EINVAL);
	kvp_bufcache_destroy(c);
}

static void stats_identities(void)
{
	kvp_bufcache *c;
	void *p[6];
	size_t a[6], sizes[6] = {0, 300, 5000, 5000, 70000, 1 << 20};
	kvp_bufcache_stats s;

	CHECK_EQ(kvp_bufcache_create(1 << 22, &c), KVP_OK);
	for (int i = 0; i < 6; i++) {
		p[i] = kvp_bufcache_alloc(c, sizes[i], &a[i]);
		CHECK(p[i] != NULL);
		CHECK_EQ(a[i], kvp_bufcache_round(sizes[i]));
	}
	s = stats(c);
	CHECK_EQ(s.misses, 6);
	CHECK_EQ(s.system_allocs, 6);
	CHECK_EQ(s.bytes_in_use, a[0] + a[1] + a[2] + a[3] + a[4] + a[5]);
	for (int i = 0; i < 6; i++)
		kvp_bufcache_free(c, p[i], a[i]);
	s = stats(c);
	CHECK_EQ(s.bytes_in_use, 0);
	CHECK_EQ(s.cached_buffers, 6);
	CHECK_EQ(s.cached_bytes, a[0] + a[1] + a[2] + a[3] + a[4] + a[5]);
	CHECK_EQ(s.peak_cached_bytes, s.cached_bytes);
	CHECK_EQ(kvp_bufcache_cached_bytes(c), s.cached_bytes);
	/* Re-allocate everything: all hits, each the same capacity again. */
	for (int i = 5; i >= 0; i--) {
		size_t x;
		void *q = kvp_bufcache_alloc(c, sizes[i], &x);
		CHECK(q != NULL);
		CHECK_EQ(x, a[i]);
		p[i] = q;
	}
	s = stats(c);
	CHECK_EQ(s.hits, 6);
	CHECK_EQ(s.hits + s.misses, 12);
	CHECK_EQ(s.cached_buffers, 0);
	CHECK_EQ(s.cached_bytes, 0);
	CHECK_EQ(s.system_allocs - s.system_frees, 6);
	for (int i = 0; i < 6; i++)
		kvp_bufcache_free(c, p[i], a[i]);
	kvp_bufcache_clear(c);
	s = stats(c);
	CHECK_EQ(s.cached_buffers, 0);
	CHECK_EQ(s.cached_bytes, 0);
	CHECK_EQ(s.system_allocs, s.system_frees);
	CHECK_EQ(s.evictions, 0); /* cleared buffers are not evictions */
	CHECK_EQ(s.peak_cached_bytes, a[0] + a[1] + a[2] + a[3] + a[4] + a[5]);
	kvp_bufcache_destroy(c);
}

static int have_promtool(void)
{
	return system("command -v promtool >/dev/null 2>&1") == 0;
}

static void prometheus_text(void)
{
	kvp_bufcache_stats s = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
	static const char *const names[] = {
	    "hits_total",          "misses_total",       "evictions_total", "oom_retries_total",
	    "system_allocs_total", "system_frees_total", "cached_bytes",    "peak_cached_bytes",
	    "cached_buffers",      "bytes_in_use"};
	char buf[4096], line[128], small[64];
	size_t len = 0, len2 = 0;

	CHECK_EQ(kvp_bufcache_stats_to_prometheus(&s, NULL, buf, sizeof(buf), &len), KVP_OK);
	CHECK_EQ(strlen(buf), len);
	CHECK(buf[len - 1] == '\n');
	for (int i = 0; i < 10; i++) {
		snprintf(line, sizeof(line), "\nkvpool_bufcache_%s %d\n", names[i], i + 1);
		CHECK(strstr(buf, line) != NULL);
		snprintf(line, sizeof(line), "# TYPE kvpool_bufcache_%s %s\n", names[i],
		         i < 6 ? "counter" : "gauge");
		CHECK(strstr(buf, line) != NULL);
	}
	/* Short buffer: KVP_ERANGE, needed length, empty string. */
	CHECK_EQ(kvp_bufcache_stats_to_prometheus(&s, NULL, small, sizeof(small), &len2),
	         KVP_ERANGE);
	CHECK_EQ(len2, len);
	CHECK_EQ(small[0], '\0');
	CHECK_EQ(kvp_bufcache_stats_to_prometheus(&s, NULL, NULL, 0, &len2), KVP_ERANGE);
	CHECK_EQ(len2, len);
	CHECK_EQ(kvp_bufcache_stats_to_prometheus(&s, NULL, buf, len, &len2), KVP_ERANGE);
	CHECK_EQ(kvp_bufcache_stats_to_prometheus(&s, NULL, buf, len + 1, &len2), KVP_OK);
	/* A custom prefix. */
	CHECK_EQ(kvp_bufcache_stats_to_prometheus(&s, "srv:scratch", buf, sizeof(buf), &len),
	         KVP_OK);
	CHECK(strstr(buf, "\nsrv:scratch_hits_total 1\n") != NULL);

	/* promtool (package prometheus) accepts real stats. */
	{
		kvp_bufcache *c;
		size_t a;
		void *p;
		FILE *f;

		CHECK_EQ(kvp_bufcache_create(1 << 20, &c), KVP_OK);
		p = kvp_bufcache_alloc(c, 1000, &a);
		kvp_bufcache_free(c, p, a);
		p = kvp_bufcache_alloc(c, 1000, &a);
		kvp_bufcache_free(c, p, a);
		s = stats(c);
		kvp_bufcache_destroy(c);
		CHECK_EQ(kvp_bufcache_stats_to_prometheus(&s, NULL, buf, sizeof(buf), &len),
		         KVP_OK);
		if (!have_promtool()) {
			const char *ci = getenv("CI");
			CHECK(!(ci && strcmp(ci, "true") == 0)); /* CI must have promtool */
			printf("SKIP promtool check: promtool not found (package prometheus)\n");
			return;
		}
		f = popen("promtool check metrics", "w");
		CHECK(f != NULL);
		CHECK_EQ(fwrite(buf, 1, len, f), len);
		CHECK_EQ(pclose(f), 0);
	}
}

#define MIB ((size_t)1 << 20)

/* The large tier (above 64 MiB): best fit, eviction order, and the boundary. */
static void large_tier(void)
{
	kvp_bufcache *c;
	size_t a70, a70b, a90, a200, a64, x;
	void *p70, *p70b, *p90, *p200, *p64, *q;
	kvp_bufcache_stats s;

	CHECK_EQ(kvp_bufcache_create(400 * MIB, &c), KVP_OK);
	p64 = kvp_bufcache_alloc(c, 56 * MIB, &a64); /* round: 63 MiB, exact tier */
	p70 = kvp_bufcache_alloc(c, 62 * MIB, &a70); /* 69.75 MiB, large tier */
	p70b = kvp_bufcache_alloc(c, 62 * MIB, &a70b);
	p90 = kvp_bufcache_alloc(c, 80 * MIB, &a90);    /* 90 MiB */
	p200 = kvp_bufcache_alloc(c, 150 * MIB, &a200); /* 168.75 MiB (next power of two) */
	CHECK(p64 && p70 && p70b && p90 && p200);
	CHECK(a64 <= KVP_BUF_LOCKFREE_MAX);
	CHECK(a70 > KVP_BUF_LOCKFREE_MAX);
	CHECK_EQ(a70, a70b);
	kvp_bufcache_free(c, p200, a200);
	kvp_bufcache_free(c, p90, a90);
	kvp_bufcache_free(c, p70, a70);
	kvp_bufcache_free(c, p70b, a70b); /* cached: 168.75 + 90 + 69.75 * 2 = 398.25 MiB */
	CHECK_EQ(stats(c).evictions, 0);
	/* Best fit by request within and across large classes. */
	q = kvp_bufcache_alloc(c, 70 * MIB, &x); /* 69.75 MiB too small: 90 MiB */
	CHECK(q == p90);
	kvp_bufcache_free(c, q, x);
	q = kvp_bufcache_alloc(c, 1, &x); /* smallest, oldest: p70 */
	CHECK(q == p70);
	kvp_bufcache_free(c, q, x);
	q = kvp_bufcache_alloc(c, 100 * MIB, &x);
	CHECK(q == p200);
	kvp_bufcache_free(c, q, x);
	/* The 63 MiB (exact tier) needs room: the oldest 69.75 MiB (p70b) goes first. */
	kvp_bufcache_free(c, p64, a64);
	s = stats(c);
	CHECK_EQ(s.evictions, 1);
	q = kvp_bufcache_alloc(c, 63 * MIB, &x); /* exact-tier hit */
	CHECK(q == p64);
	kvp_bufcache_free(c, q, x);
	q = kvp_bufcache_alloc(c, 64 * MIB, &x); /* > 63 MiB: the remaining 69.75 (p70) */
	CHECK(q == p70);
	CHECK_EQ(x, a70);
	kvp_bufcache_free(c, q, x);
	/* An eviction crossing tiers: the exact tier's 63 MiB is smaller, it goes first. */
	q = kvp_bufcache_alloc(c, 300 * MIB, &x); /* miss */
	CHECK(q != NULL);
	s = stats(c);
	kvp_bufcache_free(c, q, x); /* 337.5 MiB: evicts 63, 69.75, 90, 168.75 */
	CHECK_EQ(stats(c).evictions, s.evictions + 4);
	CHECK_EQ(stats(c).cached_buffers, 1);
	kvp_bufcache_destroy(c);
}

static void zero_budget_and_odd_frees(void)
{
	kvp_bufcache *c;
	size_t a;
	void *p;
	kvp_bufcache_stats s;

	CHECK_EQ(kvp_bufcache_create(0, &c), KVP_OK);
	p = kvp_bufcache_alloc(c, 10, &a);
	CHECK(p != NULL);
	kvp_bufcache_free(c, p, a);
	CHECK_EQ(kvp_bufcache_cached_bytes(c), 0);
	CHECK_EQ(stats(c).system_frees, 1);
	kvp_bufcache_destroy(c);

	CHECK_EQ(kvp_bufcache_create(1 << 20, &c), KVP_OK);
	/* A capacity that is not a multiple of 256 is a caller bug: not cached. */
	p = kvp_bufcache_alloc(c, 10, &a);
	kvp_bufcache_free(c, p, a - 1);
	/* A capacity whose size class never saw a miss: not cached either. */
	p = kvp_bufcache_alloc(c, 10, &a);
	kvp_bufcache_free(c, p, 1 << 19);
	s = stats(c);
	CHECK_EQ(s.cached_buffers, 0);
	CHECK_EQ(s.system_frees, 2);
	kvp_bufcache_destroy(c);
}

int main(void)
{
	RUN(null_and_bad_arguments);
	RUN(stats_identities);
	RUN(prometheus_text);
	RUN(large_tier);
	RUN(zero_budget_and_odd_frees);
	return 0;
}
