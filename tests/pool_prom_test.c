/*
 * tests/pool_prom_test.c - kvp_pools_to_prometheus (one set of kvpool_*
 * families, pools told apart by pool="..."), kvpool_config_info, the
 * sampled allocate latency histogram, the dump's "unbounded" growth cap and
 * KVPOOL_SHOW_STATS at exit.
 *
 * The at-exit report is checked in a child process (this program run again
 * with "exit-child"), which makes pools and exits without destroying them.
 */
#include <kvpool/kvpool.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lib/testing/latency.h"
#include "tests/testutil.h"

static kvp_pool *make_pool(uint32_t n, bool separate, bool grow, uint32_t max, bool prefix)
{
	kvp_pool_config cfg;
	kvp_pool_config_init(&cfg);
	cfg.block_size = 16;
	cfg.n_blocks = n;
	cfg.separate_kv = separate;
	cfg.grow_on_exhaustion = grow;
	cfg.max_blocks = max;
	cfg.prefix_cache = prefix;
	kvp_pool *p = NULL;
	CHECK_EQ(kvp_pool_create(&cfg, &p), KVP_OK);
	return p;
}

/* Whether @text holds @line as a whole line. */
static bool has_line(const char *text, const char *line)
{
	size_t n = strlen(line);
	for (const char *s = text; (s = strstr(s, line)) != NULL; s++)
		if ((s == text || s[-1] == '\n') && s[n] == '\n')
			return true;
	return false;
}

static void expect_line(const char *text, const char *line)
{
	if (!has_line(text, line)) {
		fprintf(stderr, "missing line: %s\nin:\n%s\n", line, text);
		exit(1);
	}
}

static size_t count_of(const char *text, const char *needle)
{
	size_t c = 0;
	for (const char *s = text; (s = strstr(s, needle)) != NULL; s += strlen(needle))
		c++;
	return c;
}

static bool promtool_accepts(const char *text, size_t len)
{
	FILE *f = popen("promtool check metrics >/dev/null 2>&1", "w");
	CHECK(f != NULL);
	fwrite(text, 1, len, f);
	return pclose(f) == 0;
}

static char buf[1 << 16];

static void test_two_pools_one_family_set(void)
{
	kvp_pool *a = make_pool(64, true, false, 0, false);
	kvp_pool *b = make_pool(32, false, true, 0, true);
	kvp_ref refs[8];
	size_t n, len;
	CHECK_EQ(kvp_allocate(a, KVP_K, 40, 1, KVP_FP16, refs, 8, &n), KVP_OK);
	CHECK_EQ(kvp_allocate(b, KVP_KV, 20, 1, KVP_FP16, refs, 8, &n), KVP_OK);
	kvp_pool *pools[2] = {a, b};
	const char *names[2] = {"main", "draft \"2\"\\x"};
	CHECK_EQ(kvp_pools_to_prometheus(pools, names, 2, buf, sizeof buf, &len), KVP_OK);
	CHECK_EQ(strlen(buf), len);

	expect_line(buf, "# TYPE kvpool_blocks_in_use gauge");
	expect_line(buf, "kvpool_blocks_in_use{pool=\"main\"} 3");
	expect_line(buf, "kvpool_blocks_in_use{pool=\"draft \\\"2\\\"\\\\x\"} 2");
	expect_line(buf, "kvpool_blocks_managed{pool=\"main\"} 64");
	expect_line(buf, "kvpool_allocations_total{pool=\"main\"} 3");
	expect_line(buf, "kvpool_stream_blocks_in_use{pool=\"main\",stream=\"k\"} 3");
	expect_line(buf, "kvpool_stream_blocks_free{pool=\"main\",stream=\"v\"} 32");
	expect_line(buf,
	            "kvpool_stream_blocks_free{pool=\"draft \\\"2\\\"\\\\x\",stream=\"kv\"} 30");
	expect_line(buf, "kvpool_config_info{pool=\"main\",block_size=\"16\",n_blocks=\"64\","
	                 "max_blocks=\"unbounded\",prefix_cache=\"false\"} 1");
	expect_line(buf, "kvpool_config_info{pool=\"draft \\\"2\\\"\\\\x\",block_size=\"16\","
	                 "n_blocks=\"32\",max_blocks=\"unbounded\",prefix_cache=\"true\"} 1");
	char bi[128];
	snprintf(bi, sizeof bi, "kvpool_build_info{version=\"%s\"} 1", kvp_version());
	expect_line(buf, bi);
	/* Every family once; every sample but build_info carries a pool label. */
	CHECK_EQ(count_of(buf, "# TYPE kvpool_blocks_in_use "), 1);
	CHECK_EQ(count_of(buf, "# TYPE kvpool_config_info "), 1);
	CHECK_EQ(count_of(buf, "# TYPE kvpool_allocate_duration_seconds histogram"), 1);
	CHECK_EQ(count_of(buf, "# TYPE kvpool_build_info "), 1);
	size_t samples = 0, labelled = 0;
	for (const char *l = buf; *l; l = strchr(l, '\n') + 1) {
		if (*l != '#') {
			samples++;
			labelled += strncmp(l, "kvpool_", 7) == 0 &&
			            strstr(l, "{pool=\"") != NULL &&
			            strstr(l, "{pool=\"") < strchr(l, '\n');
		}
	}
	CHECK(samples > 40);
	CHECK_EQ(labelled, samples - 1); /* all but kvpool_build_info */
	CHECK(promtool_accepts(buf, len));

	/* The same pools without names: "0" and "1". */
	CHECK_EQ(kvp_pools_to_prometheus(pools, NULL, 2, buf, sizeof buf, &len), KVP_OK);
	expect_line(buf, "kvpool_blocks_in_use{pool=\"1\"} 2");
	CHECK(promtool_accepts(buf, len));

	/* Short buffer: the length needed and no partial text. */
	size_t need = len;
	char small[64];
	CHECK_EQ(kvp_pools_to_prometheus(pools, NULL, 2, small, sizeof small, &len), KVP_ERANGE);
	CHECK_EQ(len, need);
	CHECK_EQ(small[0], '\0');
	CHECK_EQ(kvp_pools_to_prometheus(pools, NULL, 2, NULL, 0, &len), KVP_ERANGE);
	CHECK_EQ(len, need);

	/* Bad arguments. */
	const char *same[2] = {"x", "x"};
	const char *null_name[2] = {"x", NULL};
	kvp_pool *null_pool[2] = {a, NULL};
	CHECK_EQ(kvp_pools_to_prometheus(pools, same, 2, buf, sizeof buf, &len), KVP_EINVAL);
	CHECK_EQ(kvp_pools_to_prometheus(pools, null_name, 2, buf, sizeof buf, &len), KVP_EINVAL);
	CHECK_EQ(kvp_pools_to_prometheus(null_pool, NULL, 2, buf, sizeof buf, &len), KVP_EINVAL);
	CHECK_EQ(kvp_pools_to_prometheus(pools, NULL, 0, buf, sizeof buf, &len), KVP_EINVAL);
	CHECK_EQ(kvp_pools_to_prometheus(NULL, NULL, 1, buf, sizeof buf, &len), KVP_EINVAL);
	CHECK_EQ(kvp_pools_to_prometheus(pools, NULL, 1, buf, sizeof buf, NULL), KVP_EINVAL);
	CHECK_EQ(kvp_pools_to_prometheus(pools, NULL, 1, NULL, 8, &len), KVP_EINVAL);
	kvp_pool_destroy(a);
	kvp_pool_destroy(b);
}

/* The old per-prefix form carries <prefix>_config_info too. */
static void test_prefix_form_config_info(void)
{
	kvp_pool *p = make_pool(64, true, true, 100, false);
	size_t len;
	CHECK_EQ(kvp_pool_to_prometheus(p, "app", buf, sizeof buf, &len), KVP_OK);
	expect_line(buf, "# TYPE app_config_info gauge");
	expect_line(buf, "app_config_info{block_size=\"16\",n_blocks=\"64\",max_blocks=\"100\","
	                 "prefix_cache=\"false\"} 1");
	CHECK(promtool_accepts(buf, len));
	kvp_pool_destroy(p);
}

/* Reads kvpool_allocate_duration_seconds_count{pool="NAME"} out of @text. */
static unsigned long long hist_count(const char *text, const char *name)
{
	char key[128];
	snprintf(key, sizeof key, "kvpool_allocate_duration_seconds_count{pool=\"%s\"} ", name);
	const char *s = strstr(text, key);
	CHECK(s != NULL);
	return strtoull(s + strlen(key), NULL, 10);
}

struct lat_arg {
	kvp_pool *pool;
	int calls;
	kvp_owner owner; /* each thread its own */
};

/* A fresh thread: its sample counter starts at 0, so exactly calls / 1024 are timed. */
static void *lat_thread(void *arg)
{
	struct lat_arg *a = arg;
	kvp_ref refs[4];
	size_t n;
	for (int i = 0; i < a->calls; i++) {
		CHECK_EQ(kvp_allocate(a->pool, KVP_K, 20, a->owner, KVP_FP16, refs, 4, &n), KVP_OK);
		CHECK_EQ(kvp_free_all(a->pool, a->owner), KVP_OK);
	}
	return NULL;
}

static void test_latency_histogram_sampled(void)
{
	kvp_pool *p = make_pool(64, true, false, 0, false);
	kvp_pool *names_p[1] = {p};
	const char *names[1] = {"lat"};
	size_t len;
	CHECK_EQ(kvp_pools_to_prometheus(names_p, names, 1, buf, sizeof buf, &len), KVP_OK);
	CHECK_EQ(hist_count(buf, "lat"), 0);
	struct lat_arg a[2] = {{p, 1024 * 10, 7}, {p, 1024 * 10, 8}};
	pthread_t t[2];
	for (int i = 0; i < 2; i++)
		CHECK_EQ(pthread_create(&t[i], NULL, lat_thread, &a[i]), 0);
	for (int i = 0; i < 2; i++)
		CHECK_EQ(pthread_join(t[i], NULL), 0);
	CHECK_EQ(kvp_pools_to_prometheus(names_p, names, 1, buf, sizeof buf, &len), KVP_OK);
	CHECK_EQ(hist_count(buf, "lat"), 20); /* 2 threads x 10240 calls / 1024 */
	expect_line(buf, "kvpool_allocate_duration_seconds_bucket{pool=\"lat\",le=\"+Inf\"} 20");
	/* Buckets never decrease; the sum is positive. */
	unsigned long long prev = 0;
	for (const char *s = buf; (s = strstr(s, "_bucket{pool=\"lat\",le=")) != NULL; s++) {
		const char *v = strchr(s, '}') + 2;
		unsigned long long c = strtoull(v, NULL, 10);
		CHECK(c >= prev);
		prev = c;
	}
	const char *sum = strstr(buf, "kvpool_allocate_duration_seconds_sum{pool=\"lat\"} ");
	CHECK(sum != NULL);
	CHECK(strtod(strchr(sum, '}') + 2, NULL) > 0.0);
	CHECK(promtool_accepts(buf, len));
	kvp_pool_destroy(p);
}

/* @calls one-block allocations (and free_all) of owner 7 in this thread. */
static void allocs(kvp_pool *p, int calls)
{
	kvp_ref r;
	size_t n;
	for (int i = 0; i < calls; i++) {
		CHECK_EQ(kvp_allocate(p, KVP_K, 16, 7, KVP_FP16, &r, 1, &n), KVP_OK);
		CHECK_EQ(kvp_free_all(p, 7), KVP_OK);
	}
}

static unsigned long long lat_count(kvp_pool *p)
{
	kvp_pool *names_p[1] = {p};
	const char *names[1] = {"per"};
	size_t len;
	CHECK_EQ(kvp_pools_to_prometheus(names_p, names, 1, buf, sizeof buf, &len), KVP_OK);
	return hist_count(buf, "per");
}

/* The sampling period, set by the calling thread, starts there: 0 times
 * every call, UINT32_MAX none of the next ones, the default one in 1024
 * counted from the setting, whatever the thread's countdown was. */
static void test_latency_period_setting(void)
{
	kvp_pool *p = make_pool(64, true, false, 0, false);
	allocs(p, 300); /* mid-period: a countdown that must not leak into the settings */
	unsigned long long c0 = lat_count(p);
	kvpi_lat_set_mask(0);
	allocs(p, 37);
	CHECK_EQ(lat_count(p), c0 + 37);
	kvpi_lat_set_mask(UINT32_MAX);
	allocs(p, 3000);
	CHECK_EQ(lat_count(p), c0 + 37);
	kvpi_lat_set_mask(KVPI_LAT_EVERY - 1);
	allocs(p, KVPI_LAT_EVERY - 1);
	CHECK_EQ(lat_count(p), c0 + 37);
	allocs(p, 1);
	CHECK_EQ(lat_count(p), c0 + 38);
	allocs(p, 2 * KVPI_LAT_EVERY);
	CHECK_EQ(lat_count(p), c0 + 40);
	kvp_pool_destroy(p);
}

/* The dump names no cap "unbounded" (text) and null (JSON), a cap by its value. */
static char *dump_of(kvp_pool *p, unsigned flags)
{
	FILE *f = tmpfile();
	CHECK(f != NULL);
	CHECK_EQ(kvp_pool_dump(p, f, flags), KVP_OK);
	long size = ftell(f);
	char *s = calloc(1, (size_t)size + 1);
	CHECK(s != NULL);
	rewind(f);
	CHECK_EQ(fread(s, 1, (size_t)size, f), (size_t)size);
	fclose(f);
	return s;
}

static void test_dump_unbounded(void)
{
	kvp_pool *p = make_pool(64, true, true, 0, false);
	char *s = dump_of(p, 0);
	CHECK(strstr(s, "growth            on, max_blocks unbounded\n") != NULL);
	CHECK(strstr(s, "2147483647") == NULL);
	free(s);
	s = dump_of(p, KVP_DUMP_JSON);
	CHECK(strstr(s, "\"max_blocks\":null,") != NULL);
	free(s);
	kvp_pool_destroy(p);
	p = make_pool(64, true, true, 100, false);
	s = dump_of(p, 0);
	CHECK(strstr(s, "growth            on, max_blocks 100\n") != NULL);
	free(s);
	s = dump_of(p, KVP_DUMP_JSON);
	CHECK(strstr(s, "\"max_blocks\":100,") != NULL);
	free(s);
	kvp_pool_destroy(p);
}

/* A prefix pool grows in its own layer (the pool's own growth is off
 * there): the report still says growth is on, and that the prefix cache is. */
static void test_dump_prefix_growth(void)
{
	kvp_pool *p = make_pool(8, false, true, 0, true);
	kvp_ref refs[20];
	size_t n;
	CHECK_EQ(kvp_allocate(p, KVP_KV, 20 * 16, 1, KVP_FP16, refs, 20, &n), KVP_OK);
	CHECK_EQ(n, 20);
	char *s = dump_of(p, 0);
	CHECK(strstr(s, ", prefix cache on\n") != NULL);
	CHECK(strstr(s, "growth            on, max_blocks unbounded\n") != NULL);
	free(s);
	s = dump_of(p, KVP_DUMP_JSON);
	CHECK(strstr(s, "\"prefix_cache\":true,") != NULL);
	CHECK(strstr(s, "\"grow_on_exhaustion\":true,") != NULL);
	free(s);
	CHECK_EQ(kvp_free_all(p, 1), KVP_OK);
	kvp_pool_destroy(p);
	p = make_pool(8, false, false, 0, true);
	s = dump_of(p, KVP_DUMP_JSON);
	CHECK(strstr(s, "\"grow_on_exhaustion\":false,") != NULL);
	free(s);
	kvp_pool_destroy(p);
	p = make_pool(8, false, true, 0, false);
	s = dump_of(p, 0);
	CHECK(strstr(s, ", prefix cache off\n") != NULL);
	free(s);
	s = dump_of(p, KVP_DUMP_JSON);
	CHECK(strstr(s, "\"prefix_cache\":false,") != NULL);
	free(s);
	kvp_pool_destroy(p);
}

/* The child: two pools, one destroyed (reported then), one left to exit. */
static int exit_child(void)
{
	kvp_pool *kept = make_pool(64, true, false, 0, false);
	kvp_pool *gone = make_pool(32, true, false, 0, false);
	kvp_ref refs[8];
	size_t n;
	CHECK_EQ(kvp_allocate(kept, KVP_V, 40, 1, KVP_FP16, refs, 8, &n), KVP_OK);
	kvp_pool_destroy(gone);
	return 0; /* exit without kvp_pool_destroy(kept) */
}

static char *child_stderr(const char *self, const char *show)
{
	int fd[2];
	CHECK_EQ(pipe(fd), 0);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		dup2(fd[1], 2);
		close(fd[0]);
		close(fd[1]);
		if (show)
			setenv("KVPOOL_SHOW_STATS", show, 1);
		else
			unsetenv("KVPOOL_SHOW_STATS");
		/* The kept pool is a leak on purpose: LeakSanitizer must not fail the child. */
		setenv("ASAN_OPTIONS", "detect_leaks=0", 1);
		execl(self, self, "exit-child", (char *)NULL);
		_exit(127);
	}
	close(fd[1]);
	static char out[1 << 14];
	size_t len = 0;
	ssize_t r;
	while ((r = read(fd[0], out + len, sizeof out - 1 - len)) > 0)
		len += (size_t)r;
	out[len] = '\0';
	close(fd[0]);
	int st;
	CHECK_EQ(waitpid(pid, &st, 0), pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	return out;
}

static void test_show_stats_at_exit(const char *self)
{
	char *s = child_stderr(self, "1");
	/* Two reports: the destroyed pool's at destroy, the kept one's at exit. */
	CHECK_EQ(count_of(s, "pool report\n"), 2);
	CHECK(strstr(s, "  blocks managed    32 (k 16, v 16)\n") != NULL);
	const char *kept = strstr(s, "  blocks managed    64 (k 32, v 32)\n");
	CHECK(kept != NULL);
	CHECK(strstr(kept, "  blocks in use     3 (k 0, v 3), peak 3\n") != NULL);
	s = child_stderr(self, "json");
	CHECK_EQ(count_of(s, "{\"version\":"), 2);
	CHECK(strstr(s, "\"blocks_in_use\":3,") != NULL);
	s = child_stderr(self, NULL);
	CHECK_EQ(strlen(s), 0);
	s = child_stderr(self, "0");
	CHECK_EQ(strlen(s), 0);
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "exit-child") == 0)
		return exit_child();
	unsetenv("KVPOOL_SHOW_STATS");
	RUN(test_two_pools_one_family_set);
	RUN(test_prefix_form_config_info);
	RUN(test_latency_histogram_sampled);
	RUN(test_latency_period_setting);
	RUN(test_dump_unbounded);
	RUN(test_dump_prefix_growth);
	test_show_stats_at_exit("/proc/self/exe");
	printf("ok test_show_stats_at_exit\n");
	return 0;
}
