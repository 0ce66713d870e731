/*
 * bench/remote_bench.c - what the remote tier costs: fetch latency and the publish path.
 *
 *   bazel run //bench:remote_bench -- [--rounds N] [--row-dim D] [--url redis://...]
 *
 * Without --url it starts its own redis-server on a free loopback port
 * (tests/remote_testutil.h) and stops it at the end.
 *
 * Fetch: pool A publishes 4096 distinct blocks through its tier and
 * flushes; pool B then fetches them 1, 8 or 64 keys a call (one MGET
 * each), and the owner's blocks are given back and B's keys forgotten
 * (kvp_prefix_reset) between calls, outside the timing, so every call
 * reads, checks, allocates, writes and publishes its blocks.  Printed:
 * p50 and p99 of the call's wall time, and blocks per second.
 *
 * Publish: a pool publishes batches of 1000 full blocks with
 * kvp_prefix_publish (no tier) and with kvp_remote_publish, in alternating
 * rounds of the same process (the order turns every round), once with
 * copy_rows false (the writer copies) and once with copy_rows true (the
 * publisher copies); the writer thread runs (and sends) meanwhile, and a
 * round keeps its blocks until the writer sent them (kvp_remote_flush,
 * outside the timing), so copy_rows false skips none.  Printed: the publishing
 * thread's CPU ns per publish of each (median over the rounds; CPU time,
 * so the writer thread and other work preempting it do not count) and
 * their ratio.  The machine is shared and noisy: read the ratio, which
 * both sides see alike, not the ns.
 */
#include <kvpool/kvpool.h>

#include "bench/clock.h"
#include "tests/remote_testutil.h"

#define NKEYS   4096
#define PUBLISH 1000

static uint32_t row_dim = 128, block_size = 16, rounds = 21;

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double pct(double *v, size_t n, double p)
{
	qsort(v, n, sizeof *v, cmp_double);
	size_t i = (size_t)(p * (double)(n - 1) + 0.5);
	return v[i];
}

typedef struct side {
	kvp_pool *p;
	kvp_storage *s;
	kvp_remote *r;
} side;

static side open_side(const char *url, uint32_t n_blocks, uint32_t queue_cap, bool copy)
{
	side x;
	kvp_pool_config c;
	kvp_remote_config rc;
	kvp_pool_config_init(&c);
	c.block_size = block_size;
	c.n_blocks = n_blocks;
	c.separate_kv = false;
	c.prefix_cache = true;
	CHECK_EQ(kvp_pool_create(&c, &x.p), KVP_OK);
	CHECK_EQ(kvp_storage_create(x.p, row_dim, NULL, &x.s), KVP_OK);
	kvp_remote_config_init(&rc);
	rc.url = url;
	rc.key_namespace = "bench";
	rc.timeout_ms = 1000; /* a benchmark on a loaded machine: no timeouts */
	rc.queue_cap = queue_cap;
	rc.copy_rows = copy;
	CHECK_EQ(kvp_remote_create(x.s, &rc, &x.r), KVP_OK);
	return x;
}

static void close_side(side *x)
{
	kvp_remote_destroy(x->r);
	kvp_storage_destroy(x->s);
	kvp_pool_destroy(x->p);
}

static kvp_hash key_of(uint64_t i, uint64_t salt)
{
	kvp_hash k;
	CHECK_EQ(kvp_prefix_hash(NULL, salt, &i, sizeof i, &k), KVP_OK);
	return k;
}

static void bench_fetch(const char *url, float *rows)
{
	side a = open_side(url, 2 * 64, 8192, true), b = open_side(url, 256, 64, false);
	kvp_hash *keys = malloc(NKEYS * sizeof *keys);
	CHECK(keys != NULL);
	for (uint64_t i = 0; i < NKEYS; i++) {
		kvp_ref ref;
		size_t n;
		keys[i] = key_of(i, 11);
		CHECK_EQ(kvp_allocate(a.p, KVP_KV, block_size, 1, KVP_FP16, &ref, 1, &n), KVP_OK);
		CHECK_EQ(kvp_storage_write(a.s, ref, 0, rows, block_size), KVP_OK);
		CHECK_EQ(kvp_remote_publish(a.r, ref, keys[i]), KVP_OK);
		CHECK_EQ(kvp_free_all(a.p, 1), KVP_OK);
		if (i % 1024 == 1023)
			CHECK_EQ(kvp_remote_flush(a.r, 30000), KVP_OK);
	}
	CHECK_EQ(kvp_remote_flush(a.r, 30000), KVP_OK);
	printf("fetch (one MGET a call; %u-token fp16 blocks of row_dim %u, %zu bytes a value)\n",
	       block_size, row_dim,
	       KVP_REMOTE_HEADER_BYTES + block_size * kvp_storage_row_bytes(b.s, KVP_FP16));
	printf("  keys/call   calls   p50 us   p99 us   blocks/s\n");
	const size_t per[] = {1, 8, 64};
	for (size_t pi = 0; pi < 3; pi++) {
		size_t n = per[pi], calls = 40 * rounds, next = 0;
		double *lat = malloc(calls * sizeof *lat), total = 0;
		kvp_ref refs[64];
		CHECK(lat != NULL);
		for (size_t c = 0; c < calls; c++) {
			size_t got = 0;
			if (next + n > NKEYS)
				next = 0;
			double t = kvb_wall_seconds();
			CHECK_EQ(kvp_remote_fetch(b.r, KVP_KV, KVP_FP16, keys + next, n, 2, refs,
			                          64, &got),
			         KVP_OK);
			lat[c] = kvb_wall_seconds() - t;
			total += lat[c];
			CHECK_EQ(got, n);
			CHECK_EQ(kvp_free_all(b.p, 2), KVP_OK);
			kvp_prefix_reset(b.p);
			next += n;
		}
		printf("  %9zu %7zu %8.1f %8.1f %10.0f\n", n, calls, pct(lat, calls, 0.5) * 1e6,
		       pct(lat, calls, 0.99) * 1e6, (double)(n * calls) / total);
		free(lat);
	}
	free(keys);
	close_side(&a);
	close_side(&b);
}

/* ns per publish of one round of PUBLISH blocks, through the tier or not. */
static double publish_round(side *x, float *rows, bool tier, uint64_t salt)
{
	kvp_ref refs[PUBLISH];
	size_t n = 0;
	CHECK_EQ(kvp_allocate(x->p, KVP_KV, PUBLISH * block_size, 3, KVP_FP16, refs, PUBLISH, &n),
	         KVP_OK);
	CHECK_EQ(n, PUBLISH);
	for (size_t i = 0; i < n; i++)
		CHECK_EQ(kvp_storage_write(x->s, refs[i], 0, rows, block_size), KVP_OK);
	kvp_hash keys[PUBLISH];
	for (size_t i = 0; i < n; i++)
		keys[i] = key_of(i, salt);
	double t = kvb_cpu_seconds();
	if (tier)
		for (size_t i = 0; i < n; i++)
			CHECK_EQ(kvp_remote_publish(x->r, refs[i], keys[i]), KVP_OK);
	else
		for (size_t i = 0; i < n; i++)
			CHECK_EQ(kvp_prefix_publish(x->p, refs[i], keys[i]), KVP_OK);
	t = kvb_cpu_seconds() - t;
	if (tier) /* the blocks stay held until sent: the writer finds every one */
		CHECK_EQ(kvp_remote_flush(x->r, 30000), KVP_OK);
	CHECK_EQ(kvp_free_all(x->p, 3), KVP_OK);
	kvp_prefix_reset(x->p);
	return t / (double)n * 1e9;
}

static void bench_publish(const char *url, float *rows)
{
	/* x: the writer copies (copy_rows false, the default); y: the publisher copies */
	side x = open_side(url, 2 * PUBLISH, 4 * PUBLISH, false);
	side y = open_side(url, 2 * PUBLISH, 4 * PUBLISH, true);
	double *v[4];
	for (int i = 0; i < 4; i++) {
		v[i] = malloc(rounds * sizeof *v[i]);
		CHECK(v[i] != NULL);
	}
	/* warm: storage buffers made, index sized, every queue cell's pages touched */
	for (int w = 0; w < 5; w++) {
		publish_round(&x, rows, false, 1000);
		publish_round(&x, rows, true, 1001 + (uint64_t)w);
		publish_round(&y, rows, false, 1000);
		publish_round(&y, rows, true, 1001 + (uint64_t)w);
		CHECK_EQ(kvp_remote_flush(x.r, 30000), KVP_OK);
		CHECK_EQ(kvp_remote_flush(y.r, 30000), KVP_OK);
	}
	for (uint32_t r = 0; r < rounds; r++) { /* the order turns every round */
		for (int j = 0; j < 4; j++) {
			int i = (j + (int)r) % 4;
			v[i][r] =
			    publish_round(i < 2 ? &x : &y, rows, i % 2 == 1, 2000 + 2 * r + i % 2);
		}
	}
	kvp_remote_stats sx, sy;
	kvp_remote_get_stats(x.r, &sx);
	kvp_remote_get_stats(y.r, &sy);
	double m[4];
	for (int i = 0; i < 4; i++)
		m[i] = pct(v[i], rounds, 0.5);
	printf("publish (%u rounds of %u blocks, alternating; median thread CPU ns; %zu bytes of "
	       "rows a block)\n",
	       rounds, PUBLISH, block_size * kvp_storage_row_bytes(x.s, KVP_FP16));
	printf("  copy_rows false (default): kvp_prefix_publish %7.1f ns, kvp_remote_publish "
	       "%7.1f ns, ratio %.2fx\n",
	       m[0], m[1], m[1] / m[0]);
	printf("    writer: written %llu, skipped %llu, dropped %llu\n",
	       (unsigned long long)sx.writes_done, (unsigned long long)sx.writes_skipped,
	       (unsigned long long)sx.writes_dropped);
	printf("  copy_rows true:            kvp_prefix_publish %7.1f ns, kvp_remote_publish "
	       "%7.1f ns, ratio %.2fx\n",
	       m[2], m[3], m[3] / m[2]);
	printf("    writer: written %llu, skipped %llu, dropped %llu\n",
	       (unsigned long long)sy.writes_done, (unsigned long long)sy.writes_skipped,
	       (unsigned long long)sy.writes_dropped);
	for (int i = 0; i < 4; i++)
		free(v[i]);
	close_side(&x);
	close_side(&y);
}

int main(int argc, char **argv)
{
	char url[256] = "";
	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--rounds") == 0)
			rounds = (uint32_t)atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--row-dim") == 0)
			row_dim = (uint32_t)atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--url") == 0)
			snprintf(url, sizeof url, "%s", argv[i + 1]);
		else {
			fprintf(stderr,
			        "usage: remote_bench [--rounds N] [--row-dim D] [--url URL]\n");
			return 2;
		}
	}
	if (rounds < 3 || row_dim == 0 || row_dim > 65536) {
		fprintf(stderr, "remote_bench: --rounds >= 3, --row-dim 1..65536\n");
		return 2;
	}
	if (url[0] == '\0')
		rt_server_start(url, sizeof url);
	printf("remote_bench: %s (a shared, noisy machine: compare ratios, not absolute "
	       "times)\n",
	       url);
	float *rows = malloc((size_t)block_size * row_dim * sizeof *rows);
	CHECK(rows != NULL);
	for (size_t i = 0; i < (size_t)block_size * row_dim; i++)
		rows[i] = (float)(i % 97) / 16.0f;
	bench_fetch(url, rows);
	bench_publish(url, rows);
	free(rows);
	return 0;
}
