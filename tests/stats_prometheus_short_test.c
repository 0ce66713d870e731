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

int main(void)
{
	RUN(test_short_buffer_is_empty);
	return 0;
}
