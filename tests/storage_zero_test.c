/*
 * tests/storage_zero_test.c - rows a block's holder did not write read as
 * zeros: never a previous owner's rows, never the bytes a new buffer came
 * with (kvp_storage_read, kvp_storage_read_f32), and the written-rows mark
 * resets at each hand-out.  Before the mark existed, every check below that
 * expects zeros saw the previous owner's rows (or 0xAB filler).
 */
#include <kvpool/kvpool.h>

#include <string.h>

#include "tests/testutil.h"

enum { BS = 8, DIM = 6 };

static kvp_pool *mkpool(void)
{
	kvp_pool_config c;
	kvp_pool *p = NULL;

	kvp_pool_config_init(&c);
	c.block_size = BS;
	c.n_blocks = 4;
	c.separate_kv = false;
	c.thread_cache = 0; /* the freed block is the next one handed out */
	CHECK_EQ(kvp_pool_create(&c, &p), KVP_OK);
	return p;
}

static kvp_ref alloc1(kvp_pool *p, kvp_format f, kvp_owner o)
{
	kvp_ref r;
	size_t n;

	CHECK_EQ(kvp_allocate(p, KVP_KV, 1, o, f, &r, 1, &n), KVP_OK);
	return r;
}

static void ones(float *x, size_t n, float v)
{
	for (size_t i = 0; i < n; i++)
		x[i] = v + (float)i;
}

static int all_zero(const void *p, size_t n)
{
	const unsigned char *b = p;

	for (size_t i = 0; i < n; i++)
		if (b[i])
			return 0;
	return 1;
}

/* Owner 1 fills a block; owner 2 gets the same id and raises n_used without
 * writing: both reads show zeros, in every format. */
static void test_reused_block_reads_zeros(void)
{
	static const kvp_format fmts[] = {KVP_FP32, KVP_FP16, KVP_BF16, KVP_INT8, KVP_INT4};
	float rows[BS * DIM], back[BS * DIM];

	for (size_t f = 0; f < sizeof fmts / sizeof fmts[0]; f++) {
		kvp_pool *p = mkpool();
		kvp_storage *s;
		const void *data;
		uint32_t n;
		kvp_ref a, b;

		CHECK_EQ(kvp_storage_create(p, DIM, NULL, &s), KVP_OK);
		a = alloc1(p, fmts[f], 1);
		ones(rows, BS * DIM, 3.0f);
		CHECK_EQ(kvp_storage_write(s, a, 0, rows, BS), KVP_OK);
		CHECK_EQ(kvp_free(p, &a, 1), KVP_OK);
		b = alloc1(p, fmts[f], 2);
		CHECK_EQ(KVP_REF_ID(b), KVP_REF_ID(a)); /* the same buffer, reused */
		CHECK_EQ(kvp_block_set_used(p, b, BS), KVP_OK);
		CHECK_EQ(kvp_storage_read_f32(s, b, back, BS, &n), KVP_OK);
		CHECK_EQ(n, BS);
		CHECK(all_zero(back, sizeof back));
		CHECK_EQ(kvp_storage_read(s, b, &data, &n), KVP_OK);
		CHECK_EQ(n, BS);
		CHECK(data != NULL);
		CHECK(all_zero(data, (size_t)BS * kvp_storage_row_bytes(s, fmts[f])));
		/* a write to row 5 keeps rows 0-4 zero and row 5 its own */
		CHECK_EQ(kvp_storage_write(s, b, 5, rows, 1), KVP_OK);
		CHECK_EQ(kvp_storage_read_f32(s, b, back, BS, &n), KVP_OK);
		CHECK(all_zero(back, 5 * DIM * sizeof(float)));
		CHECK(back[5 * DIM + 1] != 0.0f);
		CHECK(all_zero(back + 6 * DIM, 2 * DIM * sizeof(float)));
		kvp_free(p, &b, 1);
		kvp_storage_destroy(s);
		kvp_pool_destroy(p);
	}
}

/* A gap left by a write (rows 0-1, then 6) reads as zeros, and read_f32
 * alone (no kvp_storage_read) never shows the old rows either. */
static void test_gap_and_read_f32_only(void)
{
	kvp_pool *p = mkpool();
	kvp_storage *s;
	float rows[BS * DIM], back[BS * DIM];
	uint32_t n;
	kvp_ref a, b;

	CHECK_EQ(kvp_storage_create(p, DIM, NULL, &s), KVP_OK);
	a = alloc1(p, KVP_FP32, 1);
	ones(rows, BS * DIM, 7.0f);
	CHECK_EQ(kvp_storage_write(s, a, 0, rows, BS), KVP_OK);
	CHECK_EQ(kvp_free(p, &a, 1), KVP_OK);
	b = alloc1(p, KVP_FP32, 2);
	CHECK_EQ(KVP_REF_ID(b), KVP_REF_ID(a));
	CHECK_EQ(kvp_storage_write(s, b, 0, rows, 2), KVP_OK);
	CHECK_EQ(kvp_block_set_used(p, b, 5), KVP_OK);
	CHECK_EQ(kvp_storage_read_f32(s, b, back, BS, &n), KVP_OK);
	CHECK_EQ(n, 5);
	CHECK(memcmp(back, rows, 2 * DIM * sizeof(float)) == 0);
	CHECK(all_zero(back + 2 * DIM, 3 * DIM * sizeof(float)));
	CHECK_EQ(kvp_storage_write(s, b, 6, rows, 1), KVP_OK);
	CHECK_EQ(kvp_storage_read_f32(s, b, back, BS, &n), KVP_OK);
	CHECK_EQ(n, 7);
	CHECK(all_zero(back + 2 * DIM, 4 * DIM * sizeof(float)));
	CHECK(memcmp(back + 6 * DIM, rows, DIM * sizeof(float)) == 0);
	/* the holder's own rows survive a lower n_used and a raise again */
	CHECK_EQ(kvp_block_set_used(p, b, 1), KVP_OK);
	CHECK_EQ(kvp_block_set_used(p, b, 7), KVP_OK);
	CHECK_EQ(kvp_storage_read_f32(s, b, back, BS, &n), KVP_OK);
	CHECK(memcmp(back + DIM, rows + DIM, DIM * sizeof(float)) == 0);
	kvp_free(p, &b, 1);
	kvp_storage_destroy(s);
	kvp_pool_destroy(p);
}

/* A buffer the bufcache hands out full of another user's bytes (0xAB):
 * the rows the holder did not write read as zeros. */
static void test_new_buffer_bytes_hidden(void)
{
	kvp_pool *p = mkpool();
	kvp_bufcache *bc;
	kvp_storage *s;
	float rows[DIM], back[BS * DIM];
	const void *data;
	size_t need = KVP_STORAGE_HEADER_BYTES + (size_t)BS * DIM * sizeof(float), cap;
	uint32_t n;
	void *junk;
	kvp_ref a;

	CHECK_EQ(kvp_bufcache_create(1u << 20, &bc), KVP_OK);
	junk = kvp_bufcache_alloc(bc, need, &cap);
	CHECK(junk != NULL);
	memset(junk, 0xAB, cap);
	kvp_bufcache_free(bc, junk, cap);
	CHECK_EQ(kvp_storage_create(p, DIM, bc, &s), KVP_OK);
	a = alloc1(p, KVP_FP32, 1);
	ones(rows, DIM, 1.0f);
	CHECK_EQ(kvp_storage_write(s, a, 3, rows, 1), KVP_OK);
	CHECK_EQ(kvp_storage_read(s, a, &data, &n), KVP_OK);
	CHECK_EQ(n, 4);
	CHECK(data == (const char *)junk + KVP_STORAGE_HEADER_BYTES); /* that very buffer */
	CHECK(all_zero(data, 3 * DIM * sizeof(float)));
	CHECK_EQ(kvp_block_set_used(p, a, BS), KVP_OK);
	CHECK_EQ(kvp_storage_read_f32(s, a, back, BS, &n), KVP_OK);
	CHECK(all_zero(back + 4 * DIM, 4 * DIM * sizeof(float)));
	CHECK_EQ(kvp_storage_read(s, a, &data, &n), KVP_OK);
	CHECK_EQ(n, BS);
	CHECK(all_zero((const float *)data + 4 * DIM, 4 * DIM * sizeof(float)));
	kvp_free(p, &a, 1);
	kvp_storage_destroy(s);
	kvp_bufcache_destroy(bc);
	kvp_pool_destroy(p);
}

int main(void)
{
	RUN(test_reused_block_reads_zeros);
	RUN(test_gap_and_read_f32_only);
	RUN(test_new_buffer_bytes_hidden);
	return 0;
}
