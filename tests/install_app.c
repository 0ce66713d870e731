/*
 * tests/install_app.c - a "server built with plain make" for install_test.sh:
 * compiled outside Bazel with `cc app.c $(pkg-config --cflags --libs kvpool)`
 * against what tools/install.sh installed.
 *
 * The example documented at kvp_stats_format (include/kvpool/stats.h): a
 * 64-block pool of 16-token blocks, 40 tokens of stream K for owner 1;
 * prints kvp_stats_format's line after allocating and again after
 * freeing.  Every call's status is checked.
 */
#include <kvpool/kvpool.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check(int status, const char *what)
{
	if (status < 0) {
		fprintf(stderr, "%s: %s\n", what, kvp_strerror(status));
		exit(1);
	}
}

static void print_stats(kvp_pool *pool)
{
	kvp_stats s;
	char line[256];

	check(kvp_pool_stats(pool, &s), "kvp_pool_stats");
	check(kvp_stats_format(&s, line, sizeof(line)), "kvp_stats_format");
	printf("%s\n", line);
}

int main(void)
{
	kvp_pool_config cfg;
	kvp_pool *pool;
	kvp_ref refs[8];
	size_t n_refs;

	/* The library loaded is the one the headers describe. */
	if (strcmp(kvp_version(), KVP_VERSION) != 0 || strcmp(KVPOOL_VERSION, KVP_VERSION) != 0) {
		fprintf(stderr, "kvp_version() %s, headers %s\n", kvp_version(), KVP_VERSION);
		return 1;
	}
	kvp_pool_config_init(&cfg);
	cfg.block_size = 16;
	cfg.n_blocks = 64;
	check(kvp_pool_create(&cfg, &pool), "kvp_pool_create");
	check(kvp_allocate(pool, KVP_K, 40, 1, KVP_FP16, refs, 8, &n_refs), "kvp_allocate");
	if (n_refs != 3) {
		fprintf(stderr, "kvp_allocate: %zu blocks for 40 tokens, expected 3\n", n_refs);
		return 1;
	}
	print_stats(pool);
	check(kvp_free_all(pool, 1), "kvp_free_all");
	print_stats(pool);
	kvp_pool_destroy(pool);
	return 0;
}
