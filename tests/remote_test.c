/*
 * tests/remote_test.c - the remote tier against a real redis-server.
 *
 * One process plays two servers: pool A publishes through its tier, pool B
 * (empty) fetches through its own.  Checked: every format's rows arrive
 * bit for bit; a fetch stops at the first key Redis lacks; values made
 * wrong with redis-cli (truncated, a flipped byte, another key's value,
 * garbage) and values of another format are misses counted as corrupt;
 * the namespace keeps two tiers apart; the URL parser refuses bad URLs;
 * the Prometheus text has every family and promtool accepts it.
 */
#include <kvpool/kvpool.h>

#include "tests/remote_testutil.h"

#define BS  4
#define ROW 16
#define NB  64

static char url[64];
static bool copy_rows; /* the tiers' config.copy_rows */

typedef struct side {
	kvp_pool *p;
	kvp_storage *s;
	kvp_remote *r;
} side;

static side open_side(const char *ns, uint32_t timeout_ms)
{
	side x;
	kvp_pool_config c;
	kvp_remote_config rc;
	kvp_pool_config_init(&c);
	c.block_size = BS;
	c.n_blocks = NB;
	c.separate_kv = true;
	c.prefix_cache = true;
	CHECK_EQ(kvp_pool_create(&c, &x.p), KVP_OK);
	CHECK_EQ(kvp_storage_create(x.p, ROW, NULL, &x.s), KVP_OK);
	CHECK_EQ(kvp_remote_config_init(&rc), KVP_OK);
	CHECK_EQ(rc.timeout_ms, 50);
	rc.url = url;
	rc.key_namespace = ns;
	rc.timeout_ms = timeout_ms;
	rc.copy_rows = copy_rows;
	CHECK_EQ(kvp_remote_create(x.s, &rc, &x.r), KVP_OK);
	return x;
}

static void close_side(side *x)
{
	kvp_remote_destroy(x->r);
	kvp_storage_destroy(x->s);
	kvp_pool_destroy(x->p);
}

static kvp_hash key_of(uint64_t i)
{
	kvp_hash k;
	CHECK_EQ(kvp_prefix_hash(NULL, 7, &i, sizeof i, &k), KVP_OK);
	return k;
}

static void rows_of(kvp_hash k, float *r)
{
	uint64_t s = k.lo ^ k.hi;
	for (int i = 0; i < BS * ROW; i++)
		r[i] = (float)((int64_t)(tu_rand(&s) % 2001) - 1000) / 64.0f;
}

/* Owner @o publishes key @i in @f on side @x through its tier. */
static void put(side *x, kvp_stream st, kvp_format f, uint64_t i, kvp_owner o)
{
	kvp_ref ref;
	size_t n;
	float rows[BS * ROW];
	rows_of(key_of(i), rows);
	CHECK_EQ(kvp_allocate(x->p, st, BS, o, f, &ref, 1, &n), KVP_OK);
	CHECK_EQ(kvp_storage_write(x->s, ref, 0, rows, BS), KVP_OK);
	CHECK_EQ(kvp_remote_publish(x->r, ref, key_of(i)), KVP_OK);
}

static kvp_remote_stats rstats(side *x)
{
	kvp_remote_stats s;
	CHECK_EQ(kvp_remote_get_stats(x->r, &s), KVP_OK);
	return s;
}

static void round_trip_every_format(const char *ns)
{
	side a = open_side(ns, 500), b = open_side(ns, 500);
	kvp_format fs[] = {KVP_FP32, KVP_FP16, KVP_BF16, KVP_INT8, KVP_INT4};
	for (unsigned fi = 0; fi < 5; fi++) {
		kvp_hash keys[3];
		kvp_ref refs[3], aref[3];
		size_t n, m;
		for (unsigned j = 0; j < 3; j++) {
			keys[j] = key_of(100 * fi + j);
			put(&a, KVP_V, fs[fi], 100 * fi + j, 1);
		}
		CHECK_EQ(kvp_remote_flush(a.r, 5000), KVP_OK);
		CHECK_EQ(kvp_remote_fetch(b.r, KVP_V, fs[fi], keys, 3, 9, refs, 3, &n), KVP_OK);
		CHECK_EQ(n, 3);
		CHECK_EQ(kvp_prefix_match(a.p, KVP_V, fs[fi], keys, 3, 2, aref, 3, &m), KVP_OK);
		CHECK_EQ(m, 3);
		for (unsigned j = 0; j < 3; j++) {
			const void *da, *db;
			uint32_t na, nb;
			kvp_block_info bi;
			CHECK_EQ(kvp_storage_read(a.s, aref[j], &da, &na), KVP_OK);
			CHECK_EQ(kvp_storage_read(b.s, refs[j], &db, &nb), KVP_OK);
			CHECK_EQ(na, BS);
			CHECK_EQ(nb, BS);
			CHECK(memcmp(da, db, BS * kvp_storage_row_bytes(a.s, fs[fi])) == 0);
			/* a block of the owner's, published: a later match in B finds it */
			CHECK_EQ(kvp_block_get(b.p, refs[j], &bi), KVP_OK);
			CHECK(bi.published && bi.in_use && bi.format == fs[fi] &&
			      bi.stream == KVP_V);
			CHECK_EQ(bi.n_used, BS);
		}
		/* the stream is part of the key: K has none of these */
		CHECK_EQ(kvp_remote_fetch(b.r, KVP_K, fs[fi], keys, 3, 10, refs, 3, &n), KVP_OK);
		CHECK_EQ(n, 0);
		CHECK_EQ(kvp_free_all(a.p, 1), KVP_OK);
		CHECK_EQ(kvp_free_all(a.p, 2), KVP_OK);
		CHECK_EQ(kvp_free_all(b.p, 9), KVP_OK);
	}
	kvp_remote_stats s = rstats(&b);
	CHECK_EQ(s.hits, 15);
	CHECK_EQ(s.corrupt, 0);
	CHECK(s.bytes_read > 15 * KVP_REMOTE_HEADER_BYTES);
	s = rstats(&a);
	CHECK_EQ(s.writes_done, 15);
	CHECK_EQ(s.writes_queued, 15);
	CHECK_EQ(s.writes_dropped + s.writes_failed + s.writes_skipped, 0);
	close_side(&a);
	close_side(&b);
}

/* The writer copies (copy_rows false), then the publisher does. */
static void test_round_trip_every_format(void)
{
	copy_rows = false;
	round_trip_every_format("rt");
	copy_rows = true;
	round_trip_every_format("rt-copy");
	copy_rows = false;
}

/* copy_rows false: a block evicted before the writer came is skipped, never sent wrong. */
static void test_writer_skips_evicted_blocks(void)
{
	side a = open_side("skip", 500), b = open_side("skip", 500);
	kvp_hash k = key_of(9000);
	kvp_ref ref, got;
	size_t n;
	/* many publishes and an immediate reset: most are gone when the writer looks */
	for (uint64_t round = 0; round < 50; round++) {
		for (uint64_t i = 0; i < 16; i++)
			put(&a, KVP_K, KVP_FP16, 9000 + 16 * round + i, 1);
		CHECK_EQ(kvp_free_all(a.p, 1), KVP_OK);
		kvp_prefix_reset(a.p);
	}
	CHECK_EQ(kvp_remote_flush(a.r, 5000), KVP_OK);
	kvp_remote_stats s = rstats(&a);
	CHECK_EQ(s.writes_queued, 800);
	CHECK_EQ(s.writes_done + s.writes_skipped + s.writes_failed + s.writes_dropped, 800);
	CHECK_EQ(s.writes_failed + s.writes_dropped, 0);
	CHECK(s.writes_skipped > 0); /* the writer sleeps 1 ms when idle: it came too late */
	/* whatever was written holds the right rows: fetch every key and compare */
	for (uint64_t i = 0; i < 800; i++) {
		float want[BS * ROW], rows[BS * ROW];
		uint32_t nr;
		k = key_of(9000 + i);
		CHECK_EQ(kvp_remote_fetch(b.r, KVP_K, KVP_FP16, &k, 1, 3, &got, 1, &n), KVP_OK);
		if (n == 0)
			continue;
		rows_of(k, want);
		CHECK_EQ(kvp_storage_read_f32(b.s, got, rows, BS, &nr), KVP_OK);
		CHECK(memcmp(want, rows, sizeof rows) == 0); /* exact in fp16: multiples of 1/64 */
		CHECK_EQ(kvp_free_all(b.p, 3), KVP_OK);
		kvp_prefix_reset(b.p);
	}
	CHECK_EQ(rstats(&b).corrupt, 0);
	(void)ref;
	close_side(&a);
	close_side(&b);
}

static void test_fetch_stops_at_first_miss(void)
{
	side a = open_side("miss", 500), b = open_side("miss", 500);
	kvp_hash keys[6];
	kvp_ref refs[6];
	size_t n;
	for (unsigned j = 0; j < 6; j++) {
		keys[j] = key_of(1000 + j);
		if (j != 3)
			put(&a, KVP_K, KVP_FP16, 1000 + j, 1);
	}
	CHECK_EQ(kvp_remote_flush(a.r, 5000), KVP_OK);
	CHECK_EQ(kvp_remote_fetch(b.r, KVP_K, KVP_FP16, keys, 6, 5, refs, 6, &n), KVP_OK);
	CHECK_EQ(n, 3);
	CHECK_EQ(rstats(&b).misses, 1);
	/* the owner holds exactly those three, in order */
	kvp_ref held[8];
	size_t nh = 0;
	CHECK_EQ(kvp_blocks_for(b.p, 5, held, 8, &nh), KVP_OK);
	CHECK_EQ(nh, 3);
	for (unsigned j = 0; j < 3; j++)
		CHECK_EQ(held[j], refs[j]);
	/* a later fetch from key 4 on gets 4 and 5 */
	CHECK_EQ(kvp_remote_fetch(b.r, KVP_K, KVP_FP16, keys + 4, 2, 6, refs, 2, &n), KVP_OK);
	CHECK_EQ(n, 2);
	/* refs_cap too small: nothing done */
	CHECK_EQ(kvp_remote_fetch(b.r, KVP_K, KVP_FP16, keys, 6, 7, refs, 5, &n), KVP_ERANGE);
	close_side(&a);
	close_side(&b);
}

/* The Redis key of @i in stream K, namespace @ns. */
static void rkey(char *out, const char *ns, uint64_t i)
{
	kvp_hash k = key_of(i);
	sprintf(out, "%s:k:%016llx%016llx", ns, (unsigned long long)k.hi, (unsigned long long)k.lo);
}

static void test_bad_values_are_misses(void)
{
	side a = open_side("bad", 500), b = open_side("bad", 500), c = open_side("other", 500);
	char k[8][128];
	kvp_hash keys[8];
	kvp_ref refs[8];
	size_t n;
	for (unsigned j = 0; j < 8; j++) {
		put(&a, KVP_K, KVP_FP16, 2000 + j, 1);
		rkey(k[j], "bad", 2000 + j);
		keys[j] = key_of(2000 + j);
	}
	CHECK_EQ(kvp_remote_flush(a.r, 5000), KVP_OK);
	/* all good first (and the namespace "other" sees none of them) */
	CHECK_EQ(kvp_remote_fetch(c.r, KVP_K, KVP_FP16, keys, 8, 3, refs, 8, &n), KVP_OK);
	CHECK_EQ(n, 0);
	/* truncated: the first 100 bytes kept */
	CHECK_EQ(
	    rt_cli("EVAL",
	           "redis.call('SET', KEYS[1], string.sub(redis.call('GET', KEYS[1]), 1, 100))",
	           "1", k[0], NULL),
	    0);
	/* one row byte changed */
	CHECK_EQ(rt_cli("SETRANGE", k[1], "80", "X", NULL), 0);
	/* another key's value, intact */
	CHECK_EQ(rt_cli("COPY", k[7], k[2], "REPLACE", NULL), 0);
	/* garbage */
	CHECK_EQ(rt_cli("SET", k[3], "hello", NULL), 0);
	/* one byte too many */
	CHECK_EQ(rt_cli("APPEND", k[4], "Z", NULL), 0);
	/* a header byte (row_dim) changed, checksum left as it was */
	CHECK_EQ(rt_cli("SETRANGE", k[5], "28", "\x11", NULL), 0);
	uint64_t before = rstats(&b).corrupt;
	for (unsigned j = 0; j < 6; j++) {
		CHECK_EQ(kvp_remote_fetch(b.r, KVP_K, KVP_FP16, keys + j, 1, 4, refs, 1, &n),
		         KVP_OK);
		CHECK_EQ(n, 0);
		CHECK_EQ(rstats(&b).corrupt, before + j + 1);
	}
	/* key 6 is fine as fp16 but a miss as fp32 or bf16 (another format) */
	CHECK_EQ(kvp_remote_fetch(b.r, KVP_K, KVP_FP32, keys + 6, 1, 4, refs, 1, &n), KVP_OK);
	CHECK_EQ(n, 0);
	CHECK_EQ(kvp_remote_fetch(b.r, KVP_K, KVP_BF16, keys + 6, 1, 4, refs, 1, &n), KVP_OK);
	CHECK_EQ(n, 0);
	CHECK_EQ(rstats(&b).corrupt, before + 8);
	CHECK_EQ(kvp_remote_fetch(b.r, KVP_K, KVP_FP16, keys + 6, 2, 4, refs, 2, &n), KVP_OK);
	CHECK_EQ(n, 2);
	/* nothing was taken by the refused fetches: owner 4 holds just these */
	kvp_ref held[8];
	size_t nh;
	CHECK_EQ(kvp_blocks_for(b.p, 4, held, 8, &nh), KVP_OK);
	CHECK_EQ(nh, 2);
	close_side(&a);
	close_side(&b);
	close_side(&c);
}

static void test_config_and_url(void)
{
	kvp_pool_config c;
	kvp_pool *p, *plain;
	kvp_storage *s, *ps;
	kvp_remote_config rc;
	kvp_remote *r;
	kvp_pool_config_init(&c);
	c.block_size = BS;
	c.n_blocks = 8;
	c.prefix_cache = true;
	CHECK_EQ(kvp_pool_create(&c, &p), KVP_OK);
	CHECK_EQ(kvp_storage_create(p, ROW, NULL, &s), KVP_OK);
	c.prefix_cache = false;
	CHECK_EQ(kvp_pool_create(&c, &plain), KVP_OK);
	CHECK_EQ(kvp_storage_create(plain, ROW, NULL, &ps), KVP_OK);
	kvp_remote_config_init(&rc);
	const char *bad[] = {NULL,
	                     "http://x",
	                     "redis://",
	                     "redis://h:0",
	                     "redis://h:70000",
	                     "redis://h:12x",
	                     "redis://h:1/db",
	                     "redis://user@h",
	                     "unix://",
	                     "unix:///s?db=x",
	                     "redis://[::1"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		rc.url = bad[i];
		CHECK_EQ(kvp_remote_create(s, &rc, &r), KVP_EINVAL);
	}
	rc.url = url;
	CHECK_EQ(kvp_remote_create(ps, &rc, &r), KVP_EINVAL); /* no prefix cache */
	rc.key_namespace = "has space";
	CHECK_EQ(kvp_remote_create(s, &rc, &r), KVP_EINVAL);
	rc.key_namespace = "ok";
	rc.timeout_ms = 0;
	CHECK_EQ(kvp_remote_create(s, &rc, &r), KVP_EINVAL);
	/* good URLs of every shape create (a server that is not there is no error) */
	const char *good[] = {"redis://127.0.0.1:1", "redis://:pw@127.0.0.1:1/3",
	                      "redis://u:pw@[::1]:1", "unix:///nonexistent/sock?db=2",
	                      "redis://localhost"};
	rc.timeout_ms = 20;
	for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
		kvp_hash k = key_of(1);
		kvp_ref ref;
		size_t n = 9;
		rc.url = good[i];
		CHECK_EQ(kvp_remote_create(s, &rc, &r), KVP_OK);
		if (i != 4) { /* nothing listens there */
			CHECK_EQ(kvp_remote_fetch(r, KVP_KV, KVP_FP16, &k, 1, 1, &ref, 1, &n),
			         KVP_EREMOTE);
			CHECK_EQ(n, 0);
		}
		kvp_remote_destroy(r);
	}
	CHECK_EQ(kvp_remote_publish(NULL, 0, key_of(1)), KVP_EINVAL);
	CHECK_EQ(kvp_remote_flush(NULL, 1), KVP_EINVAL);
	kvp_storage_destroy(s);
	kvp_storage_destroy(ps);
	kvp_pool_destroy(p);
	kvp_pool_destroy(plain);
}

static void test_prometheus(void)
{
	side a = open_side("prom", 500);
	char buf[8192];
	size_t len;
	CHECK_EQ(kvp_remote_to_prometheus(a.r, NULL, buf, 10, &len), KVP_ERANGE);
	CHECK_EQ(buf[0], '\0');
	CHECK_EQ(kvp_remote_to_prometheus(a.r, "bad name", buf, sizeof buf, &len), KVP_EINVAL);
	CHECK_EQ(kvp_remote_to_prometheus(a.r, NULL, buf, sizeof buf, &len), KVP_OK);
	const char *fam[] = {"kvpool_remote_hits_total ",
	                     "kvpool_remote_misses_total ",
	                     "kvpool_remote_corrupt_total ",
	                     "kvpool_remote_read_bytes_total ",
	                     "kvpool_remote_written_bytes_total ",
	                     "kvpool_remote_writes_queued_total ",
	                     "kvpool_remote_writes_dropped_total ",
	                     "kvpool_remote_writes_failed_total ",
	                     "kvpool_remote_reconnects_total ",
	                     "kvpool_remote_fetch_seconds_bucket{le=\"+Inf\"} ",
	                     "kvpool_remote_fetch_seconds_count "};
	for (size_t i = 0; i < sizeof fam / sizeof fam[0]; i++)
		CHECK(strstr(buf, fam[i]) != NULL);
	/* after traffic (a hit, a miss, writes): promtool accepts the exposition */
	side b = open_side("prom", 500);
	kvp_hash keys[2] = {key_of(5000), key_of(5001)};
	kvp_ref refs[2];
	size_t n;
	put(&a, KVP_K, KVP_FP16, 5000, 1);
	CHECK_EQ(kvp_remote_flush(a.r, 5000), KVP_OK);
	CHECK_EQ(kvp_remote_fetch(b.r, KVP_K, KVP_FP16, keys, 2, 1, refs, 2, &n), KVP_OK);
	CHECK_EQ(n, 1);
	CHECK_EQ(kvp_remote_to_prometheus(b.r, NULL, buf, sizeof buf, &len), KVP_OK);
	CHECK(strstr(buf, "kvpool_remote_hits_total 1\n") != NULL);
	CHECK(strstr(buf, "kvpool_remote_misses_total 1\n") != NULL);
	CHECK(strstr(buf, "kvpool_remote_fetch_seconds_count 1\n") != NULL);
	char path[] = "/tmp/kvpool_remote_promXXXXXX";
	int fd = mkstemp(path);
	CHECK(fd >= 0);
	CHECK(write(fd, buf, len) == (ssize_t)len);
	close(fd);
	char cmd[128];
	snprintf(cmd, sizeof cmd, "promtool check metrics < %s", path);
	int st = system(cmd);
	unlink(path);
	CHECK(st == 0);
	close_side(&b);
	close_side(&a);
}

int main(void)
{
	rt_server_start(url, sizeof url);
	RUN(test_round_trip_every_format);
	RUN(test_writer_skips_evicted_blocks);
	RUN(test_fetch_stops_at_first_miss);
	RUN(test_bad_values_are_misses);
	RUN(test_config_and_url);
	RUN(test_prometheus);
	return 0;
}
