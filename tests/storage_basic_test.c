/*
 * tests/storage_basic_test.c - kvpool/storage.h, single-threaded: every
 * documented behaviour and error code, each format, buffer reuse, format
 * change, release, retire by shrink, and the bufcache path.
 */
#include <kvpool/kvpool.h>

#include <math.h>
#include <string.h>

#include "lib/testing/codec.h"
#include "tests/testutil.h"

enum { BS = 8, DIM = 12 };

static kvp_pool *mkpool(uint32_t n, bool grow)
{
	kvp_pool_config c;
	kvp_pool *p = NULL;

	kvp_pool_config_init(&c);
	c.block_size = BS;
	c.n_blocks = n;
	c.separate_kv = false;
	c.grow_on_exhaustion = grow;
	CHECK_EQ(kvp_pool_create(&c, &p), KVP_OK);
	return p;
}

static kvp_ref alloc1(kvp_pool *p, uint32_t tokens, kvp_format f, kvp_owner o)
{
	kvp_ref r;
	size_t n;

	CHECK_EQ(kvp_allocate(p, KVP_KV, tokens, o, f, &r, 1, &n), KVP_OK);
	CHECK_EQ(n, 1);
	return r;
}

static uint32_t used_of(kvp_pool *p, kvp_ref r)
{
	kvp_block_info bi;

	CHECK_EQ(kvp_block_get(p, r, &bi), KVP_OK);
	return bi.n_used;
}

static void fill(float *x, size_t n, uint64_t *seed)
{
	size_t i;

	for (i = 0; i < n; i++)
		x[i] = (float)((double)(tu_rand(seed) >> 11) * 0x1p-53 * 4.0 - 2.0);
}

static kvp_storage_stats sstats(kvp_storage *s)
{
	kvp_storage_stats st;

	CHECK_EQ(kvp_storage_get_stats(s, &st), KVP_OK);
	return st;
}

static void test_create_errors(void)
{
	kvp_pool *p = mkpool(16, false);
	kvp_storage *s = NULL, *many[KVP_MAX_RETIRE_HOOKS];
	int i;

	CHECK_EQ(kvp_storage_create(NULL, DIM, NULL, &s), KVP_EINVAL);
	CHECK_EQ(kvp_storage_create(p, 0, NULL, &s), KVP_EINVAL);
	CHECK_EQ(kvp_storage_create(p, 1u << 30, NULL, &s), KVP_EINVAL); /* 4 GiB rows */
	CHECK_EQ(kvp_storage_create(p, DIM, NULL, NULL), KVP_EINVAL);
	CHECK(s == NULL);
	/* one retire hook per storage: the pool's hook slots bound the storages */
	for (i = 0; i < KVP_MAX_RETIRE_HOOKS; i++)
		CHECK_EQ(kvp_storage_create(p, DIM, NULL, &many[i]), KVP_OK);
	CHECK_EQ(kvp_storage_create(p, DIM, NULL, &s), KVP_ERANGE);
	for (i = 0; i < KVP_MAX_RETIRE_HOOKS; i++)
		kvp_storage_destroy(many[i]);
	CHECK_EQ(kvp_storage_create(p, DIM, NULL, &s), KVP_OK);
	CHECK_EQ(kvp_storage_row_dim(s), DIM);
	CHECK(kvp_storage_pool(s) == p);
	CHECK_EQ(kvp_storage_row_bytes(s, KVP_FP16), 2 * DIM);
	CHECK_EQ(kvp_storage_row_bytes(s, KVP_INT2), 0);
	CHECK_EQ(kvp_storage_resident_bytes(s), 0);
	kvp_storage_destroy(s);
	kvp_storage_destroy(NULL);
	kvp_pool_destroy(p);
}

static void test_fp32_write_read(void)
{
	kvp_pool *p = mkpool(16, false);
	kvp_storage *s;
	float rows[BS * DIM], out[BS * DIM];
	const void *data;
	uint32_t n;
	uint64_t seed = 1;
	kvp_ref r;

	CHECK_EQ(kvp_storage_create(p, DIM, NULL, &s), KVP_OK);
	fill(rows, BS * DIM, &seed);
	r = alloc1(p, 1, KVP_FP32, 7);
	/* a block never written has no buffer and no rows stored */
	CHECK_EQ(kvp_storage_read(s, r, &data, &n), KVP_OK);
	CHECK(data == NULL);
	CHECK_EQ(n, 0);
	CHECK_EQ(kvp_storage_resident_bytes(s), 0);

	CHECK_EQ(kvp_storage_write(s, r, 2, rows, 3), KVP_OK);
	CHECK_EQ(used_of(p, r), 5); /* raised to cover rows 2..4 */
	CHECK_EQ(kvp_storage_write(s, r, 0, rows + 5 * DIM, 2), KVP_OK);
	CHECK_EQ(used_of(p, r), 5); /* never lowered */
	CHECK_EQ(kvp_storage_read(s, r, &data, &n), KVP_OK);
	CHECK_EQ(n, 5);
	CHECK(((uintptr_t)data % 64) == 0);
	CHECK(memcmp((const float *)data + 2 * DIM, rows, 3 * DIM * sizeof(float)) == 0);
	CHECK(memcmp(data, rows + 5 * DIM, 2 * DIM * sizeof(float)) == 0);
	CHECK_EQ(kvp_storage_read_f32(s, r, out, BS, &n), KVP_OK);
	CHECK_EQ(n, 5);
	CHECK(memcmp(out, data, 5 * DIM * sizeof(float)) == 0);
	/* resident bytes: the one buffer, header included */
	CHECK_EQ(kvp_storage_resident_bytes(s), KVP_STORAGE_HEADER_BYTES + BS * DIM * 4);
	CHECK_EQ(sstats(s).n_buffers, 1);

	/* errors */
	CHECK_EQ(kvp_storage_write(s, r, BS - 1, rows, 2), KVP_ERANGE);
	CHECK_EQ(kvp_storage_write(s, r, BS, rows, 1), KVP_ERANGE);
	CHECK_EQ(kvp_storage_write(s, r, 0, rows, BS + 1), KVP_ERANGE);
	CHECK_EQ(kvp_storage_write(s, r, 0, rows, 0), KVP_EINVAL);
	CHECK_EQ(kvp_storage_write(s, r, 0, NULL, 1), KVP_EINVAL);
	CHECK_EQ(kvp_storage_write(NULL, r, 0, rows, 1), KVP_EINVAL);
	CHECK_EQ(kvp_storage_write(s, KVP_MAKE_REF(999, 1), 0, rows, 1), KVP_ENOENT);
	CHECK_EQ(kvp_storage_read(s, r, NULL, &n), KVP_EINVAL);
	CHECK_EQ(kvp_storage_read_f32(s, r, NULL, BS, &n), KVP_EINVAL);
	n = 0;
	CHECK_EQ(kvp_storage_read_f32(s, r, out, 4, &n), KVP_ERANGE);
	CHECK_EQ(n, 5); /* the rows needed */
	CHECK_EQ(used_of(p, r), 5);
	/* the last slot is writable */
	CHECK_EQ(kvp_storage_write(s, r, BS - 1, rows, 1), KVP_OK);
	CHECK_EQ(used_of(p, r), BS);
	kvp_storage_destroy(s);
	kvp_pool_destroy(p);
}

static void test_stale_refs_and_reuse(void)
{
	kvp_pool *p = mkpool(1, false);
	kvp_storage *s;
	float rows[BS * DIM], out[BS * DIM];
	uint64_t seed = 2;
	kvp_storage_stats before;
	const void *data;
	uint32_t n;
	kvp_ref r1, r2;

	CHECK_EQ(kvp_storage_create(p, DIM, NULL, &s), KVP_OK);
	fill(rows, BS * DIM, &seed);
	r1 = alloc1(p, BS, KVP_FP32, 1);
	CHECK_EQ(kvp_storage_write(s, r1, 0, rows, BS), KVP_OK);
	before = sstats(s);
	CHECK_EQ(kvp_free(p, &r1, 1), KVP_OK);
	/* a freed block: its refs can neither write nor read it */
	CHECK_EQ(kvp_storage_write(s, r1, 0, rows, 1), KVP_ENOENT);
	CHECK_EQ(kvp_storage_read(s, r1, &data, &n), KVP_ENOENT);
	CHECK_EQ(kvp_storage_read_f32(s, r1, out, BS, &n), KVP_ENOENT);
	/* handed out again (the pool has one block): same id, new generation */
	r2 = alloc1(p, 3, KVP_FP32, 2);
	CHECK_EQ(KVP_REF_ID(r2), KVP_REF_ID(r1));
	CHECK(r2 != r1);
	CHECK_EQ(kvp_storage_write(s, r1, 0, rows, 1), KVP_ENOENT);
	CHECK_EQ(kvp_storage_read(s, r1, &data, &n), KVP_ENOENT);
	CHECK_EQ(kvp_storage_release(s, r1), KVP_ENOENT);
	/* the buffer is reused in place: no new buffer, same bytes */
	CHECK_EQ(kvp_storage_write(s, r2, 0, rows + DIM, 1), KVP_OK);
	CHECK_EQ(sstats(s).buffers_made, before.buffers_made);
	CHECK_EQ(kvp_storage_resident_bytes(s), before.resident_bytes);
	CHECK_EQ(kvp_storage_read(s, r2, &data, &n), KVP_OK);
	CHECK_EQ(n, 3); /* n_used as kvp_allocate set it: rows 1, 2 are the old owner's */
	CHECK(memcmp(data, rows + DIM, DIM * sizeof(float)) == 0);
	kvp_storage_destroy(s);
	kvp_pool_destroy(p);
}

static void test_formats(void)
{
	static const kvp_format fmts[] = {KVP_FP16, KVP_BF16, KVP_INT8, KVP_INT4};
	kvp_pool *p = mkpool(16, false);
	kvp_storage *s;
	float rows[BS * DIM], out[BS * DIM];
	uint8_t enc[BS * DIM * 4];
	uint64_t seed = 3;
	size_t fi, i;

	CHECK_EQ(kvp_storage_create(p, DIM, NULL, &s), KVP_OK);
	for (fi = 0; fi < sizeof fmts / sizeof fmts[0]; fi++) {
		kvp_format f = fmts[fi];
		kvp_ref r = alloc1(p, 1, f, 10 + fi);
		size_t rb = kvp_storage_row_bytes(s, f);
		const void *data;
		uint32_t n;
		fill(rows, BS * DIM, &seed);
		CHECK_EQ(kvp_storage_write(s, r, 0, rows, BS), KVP_OK);
		/* read gives the rows as stored: exactly the codec's encoding */
		kvpi_codec_encode(f, enc, rows, BS, DIM);
		CHECK_EQ(kvp_storage_read(s, r, &data, &n), KVP_OK);
		CHECK_EQ(n, BS);
		CHECK(memcmp(data, enc, BS * rb) == 0);
		CHECK_EQ(kvp_storage_read_f32(s, r, out, BS, &n), KVP_OK);
		for (i = 0; i < BS * DIM; i++) {
			double x = rows[i], err = fabs((double)out[i] - x);
			/* bounds from lib/storage/codec.h; |x| <= 2 so absmax <= 2 */
			double bound = f == KVP_FP16   ? ldexp(fabs(x), -11) + 0x1p-25
			               : f == KVP_BF16 ? ldexp(fabs(x), -8)
			               : f == KVP_INT8 ? 2.0 / 254 * (1 + 0x1p-12)
			                               : 2.0 / 14 * (1 + 0x1p-12);
			CHECK(err <= bound);
		}
		CHECK_EQ(kvp_storage_resident_bytes(s) > 0, 1);
	}
	/* int2 / int1 are tags: no codec, writes refused, nothing made */
	{
		kvp_storage_stats st = sstats(s);
		kvp_ref r2 = alloc1(p, 1, KVP_INT2, 20), r1 = alloc1(p, 1, KVP_INT1, 21);
		CHECK_EQ(kvp_storage_write(s, r2, 0, rows, 1), KVP_EINVAL);
		CHECK_EQ(kvp_storage_write(s, r1, 0, rows, 1), KVP_EINVAL);
		CHECK_EQ(sstats(s).buffers_made, st.buffers_made);
	}
	/* inf / NaN cannot be quantized: nothing written, n_used unchanged */
	{
		kvp_ref r = alloc1(p, 1, KVP_INT8, 22);
		float good[DIM], bad[DIM];
		uint32_t n;
		fill(good, DIM, &seed);
		memcpy(bad, good, sizeof bad);
		bad[3] = NAN;
		CHECK_EQ(kvp_storage_write(s, r, 0, good, 1), KVP_OK);
		CHECK_EQ(kvp_storage_read_f32(s, r, out, BS, &n), KVP_OK);
		CHECK_EQ(kvp_storage_write(s, r, 0, bad, 1), KVP_EINVAL);
		bad[3] = -INFINITY;
		CHECK_EQ(kvp_storage_write(s, r, 1, bad, 1), KVP_EINVAL);
		CHECK_EQ(used_of(p, r), 1);
		CHECK_EQ(kvp_storage_read_f32(s, r, out + DIM, BS - 1, &n), KVP_OK);
		CHECK(memcmp(out, out + DIM, DIM * sizeof(float)) == 0);
	}
	kvp_storage_destroy(s);
	kvp_pool_destroy(p);
}

static void test_format_change_replaces_buffer(void)
{
	kvp_pool *p = mkpool(1, false);
	kvp_storage *s;
	float rows[BS * DIM], out[BS * DIM];
	uint64_t seed = 4;
	kvp_storage_stats st;
	const void *data;
	uint32_t n;
	kvp_ref r;

	CHECK_EQ(kvp_storage_create(p, DIM, NULL, &s), KVP_OK);
	fill(rows, BS * DIM, &seed);
	r = alloc1(p, 1, KVP_FP32, 1);
	CHECK_EQ(kvp_storage_write(s, r, 0, rows, BS), KVP_OK);
	CHECK_EQ(kvp_free(p, &r, 1), KVP_OK);
	r = alloc1(p, 1, KVP_FP16, 2);
	/* the buffer holds fp32 rows: no rows of the block's format are stored */
	CHECK_EQ(kvp_storage_read(s, r, &data, &n), KVP_OK);
	CHECK(data == NULL && n == 0);
	CHECK_EQ(kvp_storage_write(s, r, 0, rows, 2), KVP_OK);
	st = sstats(s);
	CHECK_EQ(st.format_changes, 1);
	CHECK_EQ(st.buffers_made, 2);
	CHECK_EQ(st.buffers_dropped, 1);
	CHECK_EQ(st.n_buffers, 1);
	CHECK_EQ(st.resident_bytes, KVP_STORAGE_HEADER_BYTES + BS * DIM * 2);
	CHECK_EQ(kvp_storage_read_f32(s, r, out, BS, &n), KVP_OK);
	CHECK_EQ(n, 2);
	CHECK(fabsf(out[5] - rows[5]) <= ldexpf(fabsf(rows[5]), -11) + 0x1p-25f);
	kvp_storage_destroy(s);
	kvp_pool_destroy(p);
}

static void test_release(void)
{
	kvp_pool *p = mkpool(4, false);
	kvp_storage *s;
	float rows[DIM] = {1, 2, 3};
	kvp_ref r, fresh;

	CHECK_EQ(kvp_storage_create(p, DIM, NULL, &s), KVP_OK);
	r = alloc1(p, 1, KVP_FP32, 1);
	CHECK_EQ(kvp_storage_write(s, r, 0, rows, 1), KVP_OK);
	/* in use: the holder keeps its buffer */
	CHECK_EQ(kvp_storage_release(s, r), KVP_EINVAL);
	CHECK_EQ(sstats(s).n_buffers, 1);
	CHECK_EQ(kvp_free(p, &r, 1), KVP_OK);
	CHECK_EQ(kvp_storage_release(s, r), KVP_OK);
	CHECK_EQ(kvp_storage_resident_bytes(s), 0);
	CHECK_EQ(sstats(s).n_buffers, 0);
	CHECK_EQ(sstats(s).buffers_dropped, 1);
	CHECK_EQ(kvp_storage_release(s, r), KVP_OK); /* nothing left: still fine */
	/* a free block that never had a buffer */
	fresh = alloc1(p, 1, KVP_FP32, 2);
	CHECK_EQ(kvp_free(p, &fresh, 1), KVP_OK);
	CHECK_EQ(kvp_storage_release(s, fresh), KVP_OK);
	CHECK_EQ(kvp_storage_release(s, KVP_MAKE_REF(1000, 0)), KVP_ENOENT);
	CHECK_EQ(kvp_storage_release(NULL, r), KVP_EINVAL);
	kvp_storage_destroy(s);
	kvp_pool_destroy(p);
}

/* kvp_shrink retires free blocks: their buffers go, the others stay */
static void test_retire_by_shrink(void)
{
	kvp_pool *p = mkpool(8, false);
	kvp_storage *s;
	float rows[DIM] = {4, 5, 6};
	kvp_ref refs[8];
	size_t n;
	uint32_t retired, i;
	size_t one;

	CHECK_EQ(kvp_storage_create(p, DIM, NULL, &s), KVP_OK);
	CHECK_EQ(kvp_allocate(p, KVP_KV, 8 * BS, 1, KVP_FP32, refs, 8, &n), KVP_OK);
	for (i = 0; i < 8; i++)
		CHECK_EQ(kvp_storage_write(s, refs[i], 0, rows, 1), KVP_OK);
	one = kvp_storage_resident_bytes(s) / 8;
	CHECK_EQ(kvp_free(p, refs, 5), KVP_OK);
	CHECK_EQ(kvp_shrink(p, KVP_KV, 0, &retired), KVP_OK);
	CHECK_EQ(retired, 5);
	CHECK_EQ(kvp_storage_resident_bytes(s), 3 * one);
	CHECK_EQ(sstats(s).n_buffers, 3);
	CHECK_EQ(kvp_storage_write(s, refs[0], 0, rows, 1), KVP_ENOENT);
	CHECK_EQ(kvp_storage_release(s, refs[0]), KVP_ENOENT);
	for (i = 5; i < 8; i++) {
		float out[BS * DIM];
		uint32_t got;
		CHECK_EQ(kvp_storage_read_f32(s, refs[i], out, BS, &got), KVP_OK);
		CHECK(out[2] == 6.0f);
	}
	kvp_storage_destroy(s);
	kvp_pool_destroy(p);
}

/* ids in several segments of the slot table (1024, 2048, 4096 slots ...) */
static void test_table_segments(void)
{
	enum { N = 5000 };
	static const uint32_t ids[] = {0, 1, 1023, 1024, 3071, 3072, 4999};
	kvp_pool *p = mkpool(N, false);
	kvp_storage *s;
	kvp_ref *refs = malloc(N * sizeof(kvp_ref));
	float rows[DIM], out[BS * DIM];
	size_t n, i, j;
	uint32_t got;

	CHECK(refs);
	CHECK_EQ(kvp_storage_create(p, DIM, NULL, &s), KVP_OK);
	CHECK_EQ(kvp_allocate(p, KVP_KV, N * BS, 1, KVP_FP32, refs, N, &n), KVP_OK);
	for (i = 0; i < sizeof ids / sizeof ids[0]; i++) {
		for (j = 0; j < N && KVP_REF_ID(refs[j]) != ids[i]; j++)
			;
		CHECK(j < N);
		rows[0] = (float)ids[i];
		CHECK_EQ(kvp_storage_write(s, refs[j], 0, rows, 1), KVP_OK);
		CHECK_EQ(kvp_storage_read_f32(s, refs[j], out, BS, &got), KVP_OK);
		CHECK(out[0] == (float)ids[i]);
	}
	CHECK_EQ(sstats(s).n_buffers, sizeof ids / sizeof ids[0]);
	kvp_storage_destroy(s);
	kvp_pool_destroy(p);
	free(refs);
}

/* buffers come from the bufcache and go back to it; reuse makes none */
static void test_bufcache_path(void)
{
	kvp_pool *p = mkpool(2, false);
	kvp_bufcache *bc;
	kvp_storage *s;
	kvp_bufcache_stats b0, b1;
	float rows[DIM] = {1};
	kvp_ref r;

	CHECK_EQ(kvp_bufcache_create(1 << 20, &bc), KVP_OK);
	CHECK_EQ(kvp_storage_create(p, DIM, bc, &s), KVP_OK);
	r = alloc1(p, 1, KVP_FP32, 1);
	CHECK_EQ(kvp_storage_write(s, r, 0, rows, 1), KVP_OK);
	CHECK_EQ(kvp_bufcache_get_stats(bc, &b0), KVP_OK);
	CHECK_EQ(b0.misses + b0.hits, 1);
	/* resident counts the bufcache's true capacity */
	CHECK_EQ(kvp_storage_resident_bytes(s),
	         kvp_bufcache_round(KVP_STORAGE_HEADER_BYTES + BS * DIM * 4));
	CHECK_EQ(kvp_free(p, &r, 1), KVP_OK);
	r = alloc1(p, 1, KVP_FP32, 2);
	CHECK_EQ(kvp_storage_write(s, r, 0, rows, 1), KVP_OK);
	CHECK_EQ(kvp_bufcache_get_stats(bc, &b1), KVP_OK);
	CHECK_EQ(b1.misses + b1.hits, b0.misses + b0.hits); /* no new buffer */
	CHECK_EQ(kvp_free(p, &r, 1), KVP_OK);
	CHECK_EQ(kvp_storage_release(s, r), KVP_OK);
	CHECK_EQ(kvp_bufcache_get_stats(bc, &b1), KVP_OK);
	CHECK_EQ(b1.cached_buffers, b0.cached_buffers + 1); /* it went back to the cache */
	kvp_storage_destroy(s);
	kvp_bufcache_destroy(bc);
	kvp_pool_destroy(p);
}

int main(void)
{
	RUN(test_create_errors);
	RUN(test_fp32_write_read);
	RUN(test_stale_refs_and_reuse);
	RUN(test_formats);
	RUN(test_format_change_replaces_buffer);
	RUN(test_release);
	RUN(test_retire_by_shrink);
	RUN(test_table_segments);
	RUN(test_bufcache_path);
	return 0;
}
