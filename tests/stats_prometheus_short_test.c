/*
 * tests/stats_prometheus_short_test.c - kvp_stats_to_prometheus given a
 * buffer too short for the text leaves an empty string (KVP_ERANGE, the
 * length needed), like kvp_bufcache_stats_to_prometheus: never partial
 * text that a careless caller would serve.  Before the fix the buffer held
 * the text cut at the buffer's end.
 */
#include <kvpool/kvpool.h>

#include <string.h>

#include "tests/testutil.h"

static void test_short_buffer_is_empty(void)
{
	kvp_stats s;
	kvp_bufcache_stats bs;
	char buf[8192];
	size_t need, len, caps[] = {1, 2, 100, 0};

	memset(&s, 0, sizeof s);
	memset(&bs, 0, sizeof bs);
	CHECK_EQ(kvp_stats_to_prometheus(&s, NULL, NULL, 0, &need), KVP_ERANGE);
	CHECK(need > 100);
	caps[3] = need; /* one short: no room for the NUL */
	for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++) {
		memset(buf, 'x', sizeof buf);
		CHECK_EQ(kvp_stats_to_prometheus(&s, NULL, buf, caps[i], &len), KVP_ERANGE);
		CHECK_EQ(len, need);
		CHECK_EQ(buf[0], '\0');
		if (caps[i] > 100)
			continue;
		/* the bufcache's version, for comparison */
		memset(buf, 'x', sizeof buf);
		CHECK_EQ(kvp_bufcache_stats_to_prometheus(&bs, NULL, buf, caps[i], &len),
		         KVP_ERANGE);
		CHECK_EQ(buf[0], '\0');
	}
	CHECK_EQ(kvp_stats_to_prometheus(&s, NULL, buf, need + 1, &len), KVP_OK);
	CHECK_EQ(strlen(buf), need);
}

/* kvp_pool_to_prometheus (the stats families, per-stream series and
 * build_info) follows the same rule at every cut, also one that falls after
 * the stats families: before the shared text writer it left those families
 * in the buffer. */
static void test_pool_text_short_buffer_is_empty(void)
{
	kvp_pool *p;
	char buf[16384];
	size_t need, len, stats_need;
	kvp_stats s;

	CHECK_EQ(kvp_pool_create(NULL, &p), KVP_OK);
	CHECK_EQ(kvp_pool_stats(p, &s), KVP_OK);
	CHECK_EQ(kvp_stats_to_prometheus(&s, NULL, NULL, 0, &stats_need), KVP_ERANGE);
	CHECK_EQ(kvp_pool_to_prometheus(p, NULL, NULL, 0, &need), KVP_ERANGE);
	CHECK(need > stats_need && need < sizeof buf);
	size_t caps[] = {1, 50, stats_need, stats_need + 1, stats_need + 10, need};
	for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++) {
		memset(buf, 'x', sizeof buf);
		CHECK_EQ(kvp_pool_to_prometheus(p, NULL, buf, caps[i], &len), KVP_ERANGE);
		CHECK_EQ(len, need);
		CHECK_EQ(buf[0], '\0');
	}
	CHECK_EQ(kvp_pool_to_prometheus(p, NULL, buf, need + 1, &len), KVP_OK);
	CHECK_EQ(strlen(buf), need);
	kvp_pool_destroy(p);
}

int main(void)
{
	RUN(test_short_buffer_is_empty);
	RUN(test_pool_text_short_buffer_is_empty);
	return 0;
}
