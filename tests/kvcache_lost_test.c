/*
 * tests/kvcache_lost_test.c - a kvcache whose blocks were freed behind its
 * back never reads them: attend, gather and append return KVP_ENOENT.
 *
 * Before the kvcache checked its blocks, test_freed_and_retired was a
 * heap-use-after-free in kvcache_attend.c under ASan (the buffer freed by
 * the storage's retire hook in kvp_shrink), and test_freed_and_reused read
 * another request's rows.
 */
#include <kvpool/kvpool.h>

#include <string.h>

#include "tests/testutil.h"

enum { BS = 4, HEADS = 2, HD = 8, DIM = HEADS * HD, TOK = 10 };

struct env {
	kvp_pool *p;
	kvp_storage *ks, *vs;
	kvp_kvcache *c;
};

static void setup(struct env *e, kvp_owner owner)
{
	kvp_pool_config pc;
	kvp_kvcache_config kc = {
	    .n_layers = 2, .n_kv_heads = HEADS, .head_dim = HD, .format = KVP_FP32, .owner = owner};
	float k[TOK * DIM], v[TOK * DIM];

	kvp_pool_config_init(&pc);
	pc.block_size = BS;
	pc.n_blocks = 64;
	CHECK_EQ(kvp_pool_create(&pc, &e->p), KVP_OK);
	CHECK_EQ(kvp_storage_create(e->p, DIM, NULL, &e->ks), KVP_OK);
	CHECK_EQ(kvp_storage_create(e->p, DIM, NULL, &e->vs), KVP_OK);
	CHECK_EQ(kvp_kvcache_create(e->p, e->ks, e->vs, &kc, &e->c), KVP_OK);
	for (int i = 0; i < TOK * DIM; i++) {
		k[i] = (float)(i % 7) * 0.25f;
		v[i] = (float)(i % 5);
	}
	CHECK_EQ(kvp_kvcache_append(e->c, 0, k, v, TOK), KVP_OK);
	CHECK_EQ(kvp_kvcache_append(e->c, 1, k, v, 1), KVP_OK);
}

static void teardown(struct env *e)
{
	kvp_kvcache_destroy(e->c);
	kvp_storage_destroy(e->ks);
	kvp_storage_destroy(e->vs);
	kvp_pool_destroy(e->p);
}

static void expect_lost(struct env *e, uint32_t layer)
{
	float q[HEADS * HD], out[HEADS * HD], kout[TOK * DIM], vout[TOK * DIM], one[DIM] = {0};

	memset(q, 0, sizeof q);
	memset(out, 0x5a, sizeof out);
	CHECK_EQ(kvp_kvcache_attend(e->c, layer, q, HEADS, 0.5f, out), KVP_ENOENT);
	CHECK(((unsigned char *)out)[0] == 0x5a); /* untouched */
	CHECK_EQ(kvp_kvcache_gather(e->c, layer, kout, vout), KVP_ENOENT);
	CHECK_EQ(kvp_kvcache_gather(e->c, layer, kout, NULL), KVP_ENOENT);
	CHECK_EQ(kvp_kvcache_append(e->c, layer, one, one, 1), KVP_ENOENT);
}

/* free_all behind the cache's back, then shrink retires the blocks (and
 * the storages' retire hooks free the buffers the cache points at). */
static void test_freed_and_retired(void)
{
	struct env e;
	uint32_t n;

	setup(&e, 7);
	CHECK_EQ(kvp_free_all(e.p, 7), KVP_OK);
	CHECK_EQ(kvp_shrink(e.p, KVP_K, 0, &n), KVP_OK);
	CHECK_EQ(kvp_shrink(e.p, KVP_V, 0, &n), KVP_OK);
	expect_lost(&e, 0);
	expect_lost(&e, 1);
	/* release gives the cache a clean start; then it works again */
	kvp_kvcache_release(e.c);
	CHECK_EQ(kvp_kvcache_len(e.c, 0), 0);
	teardown(&e);
}

/* The freed blocks go to another request, which writes them. */
static void test_freed_and_reused(void)
{
	struct env e;
	kvp_ref refs[64];
	float row[DIM];
	size_t n;

	setup(&e, 7);
	CHECK_EQ(kvp_free_all(e.p, 7), KVP_OK);
	CHECK_EQ(kvp_allocate(e.p, KVP_K, 64 * BS / 2, 9, KVP_FP32, refs, 64, &n), KVP_OK);
	for (int i = 0; i < DIM; i++)
		row[i] = 1000.0f;
	for (size_t i = 0; i < n; i++)
		CHECK_EQ(kvp_storage_write(e.ks, refs[i], 0, row, 1), KVP_OK);
	expect_lost(&e, 0);
	CHECK_EQ(kvp_free(e.p, refs, n), KVP_OK);
	teardown(&e);
}

/* One block of one layer freed with kvp_free: only that layer is lost. */
static void test_one_block_freed(void)
{
	struct env e;
	kvp_ref refs[16];
	size_t n;
	float q[HEADS * HD] = {0}, out[HEADS * HD];

	setup(&e, 7);
	CHECK_EQ(kvp_blocks_for(e.p, 7, refs, 16, &n), KVP_OK);
	CHECK(n >= 2);
	CHECK_EQ(kvp_kvcache_attend(e.c, 1, q, HEADS, 0.5f, out), KVP_OK);
	CHECK_EQ(kvp_free(e.p, &refs[1], 1), KVP_OK); /* layer 0's second K block */
	expect_lost(&e, 0);
	CHECK_EQ(kvp_kvcache_attend(e.c, 1, q, HEADS, 0.5f, out), KVP_OK);
	teardown(&e);
}

int main(void)
{
	RUN(test_freed_and_retired);
	RUN(test_freed_and_reused);
	RUN(test_one_block_freed);
	return 0;
}
