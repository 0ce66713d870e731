/*
 * tests/report_test.c - kvpool/report.h and kvpool/version.h: per-stream
 * counts, the live Prometheus exposition, kvp_pool_dump (text and JSON),
 * KVPOOL_SHOW_STATS at kvp_pool_destroy, the version; and the report calls
 * racing threads that allocate and free (run under TSan too).
 */
#include <kvpool/kvpool.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/testutil.h"

static kvp_pool *make_pool(uint32_t n, bool separate, bool grow)
{
	kvp_pool_config cfg;
	kvp_pool_config_init(&cfg);
	cfg.block_size = 16;
	cfg.n_blocks = n;
	cfg.separate_kv = separate;
	cfg.grow_on_exhaustion = grow;
	kvp_pool *p = NULL;
	CHECK_EQ(kvp_pool_create(&cfg, &p), KVP_OK);
	return p;
}

static void test_version(void)
{
	CHECK(strcmp(kvp_version(), KVP_VERSION) == 0);
	CHECK(strcmp(KVPOOL_VERSION, KVP_VERSION) == 0);
	CHECK_EQ(KVPOOL_VERSION_MAJOR, KVP_VERSION_MAJOR);
	char buf[32];
	snprintf(buf, sizeof buf, "%d.%d.%d", KVP_VERSION_MAJOR, KVP_VERSION_MINOR,
	         KVP_VERSION_PATCH);
	CHECK(strcmp(buf, kvp_version()) == 0);
	CHECK_EQ(KVP_VERSION_NUMBER,
	         KVP_VERSION_MAJOR * 10000 + KVP_VERSION_MINOR * 100 + KVP_VERSION_PATCH);
}

static void test_n_managed(void)
{
	kvp_pool *p = make_pool(65, true, true);
	CHECK_EQ(kvp_pool_n_managed(p, KVP_K), 33); /* K takes the odd one */
	CHECK_EQ(kvp_pool_n_managed(p, KVP_V), 32);
	CHECK_EQ(kvp_pool_n_managed(p, KVP_KV), 0);
	CHECK_EQ(kvp_pool_n_managed(NULL, KVP_K), 0);
	kvp_ref refs[8];
	size_t n;
	/* 40 blocks of K: 7 more than it has, so it grows by 7. */
	kvp_ref big[40];
	CHECK_EQ(kvp_allocate(p, KVP_K, 40 * 16, 1, KVP_FP16, big, 40, &n), KVP_OK);
	CHECK_EQ(kvp_pool_n_managed(p, KVP_K), 40);
	CHECK_EQ(kvp_pool_n_managed(p, KVP_V), 32);
	CHECK_EQ(kvp_free_all(p, 1), KVP_OK);
	uint32_t retired = 0;
	CHECK_EQ(kvp_shrink(p, KVP_K, 30, &retired), KVP_OK);
	CHECK_EQ(kvp_pool_n_managed(p, KVP_K), 40 - retired);
	kvp_stats s;
	CHECK_EQ(kvp_pool_stats(p, &s), KVP_OK);
	CHECK_EQ(kvp_pool_n_managed(p, KVP_K) + kvp_pool_n_managed(p, KVP_V), s.n_blocks);
	kvp_pool_destroy(p);

	p = make_pool(10, false, false);
	CHECK_EQ(kvp_pool_n_managed(p, KVP_KV), 10);
	CHECK_EQ(kvp_pool_n_managed(p, KVP_K), 10); /* one list backs every stream */
	CHECK_EQ(kvp_allocate(p, KVP_V, 20, 1, KVP_FP16, refs, 8, &n), KVP_OK);
	CHECK_EQ(kvp_pool_n_managed(p, KVP_V), 10);
	kvp_pool_destroy(p);
}

static void expect_line(const char *text, const char *line)
{
	char want[256];
	snprintf(want, sizeof want, "\n%s\n", line);
	if (!strstr(text, want)) {
		fprintf(stderr, "missing line '%s' in:\n%s\n", line, text);
		exit(1);
	}
}

static void test_to_prometheus(void)
{
	kvp_pool *p = make_pool(64, true, false);
	kvp_ref refs[8];
	size_t n, len = 0;
	CHECK_EQ(kvp_allocate(p, KVP_K, 40, 1, KVP_FP16, refs, 8, &n), KVP_OK);
	static char buf[8192];
	CHECK_EQ(kvp_pool_to_prometheus(p, NULL, buf, sizeof buf, &len), KVP_OK);
	CHECK_EQ(strlen(buf), len);
	expect_line(buf, "kvpool_block_pool_blocks_in_use 3");
	expect_line(buf, "kvpool_block_pool_blocks_managed 64");
	expect_line(buf, "kvpool_block_pool_usage_ratio 0.046875");
	expect_line(buf, "kvpool_block_pool_stream_blocks_in_use{stream=\"k\"} 3");
	expect_line(buf, "kvpool_block_pool_stream_blocks_in_use{stream=\"v\"} 0");
	expect_line(buf, "kvpool_block_pool_stream_blocks_free{stream=\"k\"} 29");
	expect_line(buf, "kvpool_block_pool_stream_blocks_free{stream=\"v\"} 32");
	expect_line(buf, "# TYPE kvpool_block_pool_build_info gauge");
	char bi[128];
	snprintf(bi, sizeof bi, "kvpool_block_pool_build_info{version=\"%s\"} 1", KVP_VERSION);
	expect_line(buf, bi);
	/* Every family of kvp_stats_to_prometheus is still there, same names. */
	static const char *const names[] = {
	    "blocks_in_use",     "blocks_managed", "fragmentation",    "peak_blocks_in_use",
	    "allocations_total", "frees_total",    "reused_total",     "exhausted_total",
	    "grown_total",       "retired_total",  "stale_frees_total"};
	for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
		char t[128];
		snprintf(t, sizeof t, "# TYPE kvpool_block_pool_%s ", names[i]);
		CHECK(strstr(buf, t) != NULL);
	}
	/* Too small: ERANGE with the length needed, then it fits. */
	size_t need = 0;
	CHECK_EQ(kvp_pool_to_prometheus(p, NULL, buf, 10, &need), KVP_ERANGE);
	CHECK_EQ(need, len);
	CHECK_EQ(kvp_pool_to_prometheus(p, NULL, NULL, 0, &need), KVP_ERANGE);
	CHECK_EQ(need, len);
	CHECK_EQ(kvp_pool_to_prometheus(p, NULL, buf, len + 1, &need), KVP_OK);
	CHECK_EQ(kvp_pool_to_prometheus(p, NULL, buf, len, &need), KVP_ERANGE);
	CHECK_EQ(kvp_pool_to_prometheus(p, "app:kv", buf, sizeof buf, &len), KVP_OK);
	expect_line(buf, "app:kv_stream_blocks_in_use{stream=\"k\"} 3");
	CHECK_EQ(kvp_pool_to_prometheus(p, "9bad", buf, sizeof buf, &len), KVP_EINVAL);
	CHECK_EQ(kvp_pool_to_prometheus(NULL, NULL, buf, sizeof buf, &len), KVP_EINVAL);
	CHECK_EQ(kvp_pool_to_prometheus(p, NULL, buf, sizeof buf, NULL), KVP_EINVAL);
	CHECK_EQ(kvp_pool_to_prometheus(p, NULL, NULL, 5, &len), KVP_EINVAL);
	kvp_pool_destroy(p);

	p = make_pool(8, false, false);
	CHECK_EQ(kvp_allocate(p, KVP_V, 17, 1, KVP_FP16, refs, 8, &n), KVP_OK);
	CHECK_EQ(kvp_pool_to_prometheus(p, NULL, buf, sizeof buf, &len), KVP_OK);
	expect_line(buf, "kvpool_block_pool_stream_blocks_in_use{stream=\"kv\"} 2");
	expect_line(buf, "kvpool_block_pool_stream_blocks_free{stream=\"kv\"} 6");
	CHECK(strstr(buf, "stream=\"k\"") == NULL);
	kvp_pool_destroy(p);
}

/* @p's report with @flags, read back from a temporary file. */
static char *dump_to_string(kvp_pool *p, unsigned flags, int *rc)
{
	FILE *f = tmpfile();
	CHECK(f != NULL);
	*rc = kvp_pool_dump(p, f, flags);
	long size = ftell(f);
	CHECK(size >= 0);
	char *s = calloc(1, (size_t)size + 1);
	CHECK(s != NULL);
	rewind(f);
	CHECK_EQ(fread(s, 1, (size_t)size, f), (size_t)size);
	fclose(f);
	return s;
}

static void test_dump(void)
{
	kvp_pool *p = make_pool(64, true, false);
	kvp_ref refs[8];
	size_t n;
	CHECK_EQ(kvp_allocate(p, KVP_K, 40, 1, KVP_FP16, refs, 8, &n), KVP_OK);
	int rc;
	char *text = dump_to_string(p, 0, &rc);
	CHECK_EQ(rc, KVP_OK);
	char head[64];
	snprintf(head, sizeof head, "kvpool %s pool report\n", KVP_VERSION);
	CHECK(strncmp(text, head, strlen(head)) == 0);
	expect_line(text, "  blocks managed    64 (k 32, v 32)");
	expect_line(text, "  blocks in use     3 (k 3, v 0), peak 3");
	expect_line(text, "  blocks free       k 29, v 32");
	expect_line(text, "  usage ratio       0.047 (in use / managed)");
	expect_line(text, "  fragmentation     0.016 (in use and not full / managed)");
	expect_line(text, "  blocks allocated  3 (cumulative), reused 0");
	free(text);

	char *json = dump_to_string(p, KVP_DUMP_JSON, &rc);
	CHECK_EQ(rc, KVP_OK);
	CHECK(json[0] == '{' && strchr(json, '\n') == json + strlen(json) - 1);
	CHECK(strstr(json, "\"blocks_managed\":64,\"blocks_in_use\":3,") != NULL);
	CHECK(strstr(json, "\"streams\":{\"k\":{\"managed\":32,\"in_use\":3,\"free\":29},"
	                   "\"v\":{\"managed\":32,\"in_use\":0,\"free\":32}}}") != NULL);
	free(json);

	/* Bad arguments write nothing. */
	char *none = dump_to_string(p, 2, &rc);
	CHECK_EQ(rc, KVP_EINVAL);
	CHECK_EQ(strlen(none), 0);
	free(none);
	CHECK_EQ(kvp_pool_dump(NULL, stderr, 0), KVP_EINVAL);
	CHECK_EQ(kvp_pool_dump(p, NULL, 0), KVP_EINVAL);
	/* A stream that cannot take the report: KVP_ERANGE. */
	FILE *full = fopen("/dev/full", "w");
	if (full) {
		CHECK_EQ(kvp_pool_dump(p, full, 0), KVP_ERANGE);
		fclose(full);
	}
	kvp_pool_destroy(p);
}

/* What kvp_pool_destroy writes to stderr with KVPOOL_SHOW_STATS=@value. */
static char *destroy_output(const char *value)
{
	FILE *f = tmpfile();
	CHECK(f != NULL);
	fflush(stderr);
	int saved = dup(2);
	CHECK(saved >= 0);
	CHECK(dup2(fileno(f), 2) >= 0);
	if (value)
		setenv("KVPOOL_SHOW_STATS", value, 1);
	else
		unsetenv("KVPOOL_SHOW_STATS");
	kvp_pool *p = make_pool(64, true, false);
	kvp_ref refs[8];
	size_t n;
	CHECK_EQ(kvp_allocate(p, KVP_V, 40, 1, KVP_FP16, refs, 8, &n), KVP_OK);
	kvp_pool_destroy(p);
	unsetenv("KVPOOL_SHOW_STATS");
	fflush(stderr);
	CHECK(dup2(saved, 2) >= 0);
	close(saved);
	long size = ftell(f);
	char *s = calloc(1, (size_t)size + 1);
	CHECK(s != NULL);
	rewind(f);
	CHECK_EQ(fread(s, 1, (size_t)size, f), (size_t)size);
	fclose(f);
	return s;
}

static void test_show_stats(void)
{
	char *s = destroy_output("1");
	CHECK(strstr(s, "pool report\n") != NULL);
	CHECK(strstr(s, "\n  blocks in use     3 (k 0, v 3), peak 3\n") != NULL);
	free(s);
	s = destroy_output("json");
	CHECK(s[0] == '{' && strstr(s, "\"blocks_in_use\":3,") != NULL);
	free(s);
	s = destroy_output("0");
	CHECK_EQ(strlen(s), 0);
	free(s);
	s = destroy_output(NULL);
	CHECK_EQ(strlen(s), 0);
	free(s);
}

/* --- the report calls race allocating and freeing threads ----------------- */

#define RACE_THREADS 4
#define RACE_ROUNDS  20000

struct race {
	kvp_pool *pool;
	unsigned id;
	_Atomic int *stop;
};

static void *churn(void *arg)
{
	struct race *r = arg;
	uint64_t seed = 0x1234 + r->id;
	kvp_ref refs[8];
	size_t n;
	for (int i = 0; i < RACE_ROUNDS; i++) {
		kvp_owner o = (uint64_t)r->id * 1000000 + (uint64_t)i;
		kvp_stream st = (tu_rand(&seed) & 1) ? KVP_K : KVP_V;
		int rc = kvp_allocate(r->pool, st, 1 + (uint32_t)(tu_rand(&seed) % 100), o,
		                      KVP_FP16, refs, 8, &n);
		CHECK(rc == KVP_OK || rc == KVP_EEXHAUSTED);
		if (rc == KVP_OK)
			CHECK_EQ(kvp_free_all(r->pool, o), KVP_OK);
	}
	return NULL;
}

static void *reporter(void *arg)
{
	struct race *r = arg;
	static char buf[8192];
	FILE *devnull = fopen("/dev/null", "w");
	CHECK(devnull != NULL);
	unsigned rounds = 0;
	while (!atomic_load(r->stop) || rounds < 10) {
		size_t len;
		CHECK_EQ(kvp_pool_to_prometheus(r->pool, NULL, buf, sizeof buf, &len), KVP_OK);
		size_t mk = kvp_pool_n_managed(r->pool, KVP_K);
		CHECK(kvp_n_free(r->pool, KVP_K) <= mk + 8 * RACE_THREADS);
		CHECK_EQ(kvp_pool_dump(r->pool, devnull, rounds & 1 ? KVP_DUMP_JSON : 0), KVP_OK);
		rounds++;
	}
	fclose(devnull);
	return NULL;
}

static void test_race(void)
{
	kvp_pool *p = make_pool(256, true, false);
	_Atomic int stop = 0;
	pthread_t t[RACE_THREADS + 1];
	struct race r[RACE_THREADS + 1];
	for (unsigned i = 0; i <= RACE_THREADS; i++) {
		r[i] = (struct race){p, i, &stop};
		CHECK_EQ(pthread_create(&t[i], NULL, i < RACE_THREADS ? churn : reporter, &r[i]),
		         0);
	}
	for (unsigned i = 0; i < RACE_THREADS; i++)
		pthread_join(t[i], NULL);
	atomic_store(&stop, 1);
	pthread_join(t[RACE_THREADS], NULL);
	/* Quiescent: every figure exact. */
	static char buf[8192];
	size_t len;
	CHECK_EQ(kvp_pool_to_prometheus(p, NULL, buf, sizeof buf, &len), KVP_OK);
	expect_line(buf, "kvpool_block_pool_stream_blocks_in_use{stream=\"k\"} 0");
	expect_line(buf, "kvpool_block_pool_stream_blocks_free{stream=\"k\"} 128");
	expect_line(buf, "kvpool_block_pool_stream_blocks_free{stream=\"v\"} 128");
	kvp_pool_destroy(p);
}

int main(void)
{
	RUN(test_version);
	RUN(test_n_managed);
	RUN(test_to_prometheus);
	RUN(test_dump);
	RUN(test_show_stats);
	RUN(test_race);
	return 0;
}
