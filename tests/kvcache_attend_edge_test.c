/*
 * tests/kvcache_attend_edge_test.c - kvp_kvcache_attend at the edges of fp32.
 *
 * Scores whose product q . k overflows fp32 while the scaled score does not
 * (the scale must apply to q before the dot product); a first 128-token
 * chunk whose scores are all -inf (the online softmax must not compute
 * -inf - -inf); scores that are +inf even after scaling (they share the
 * weight, the other tokens weigh 0).  Cases from the review of e4e5a8f.
 */
#include <kvpool/kvpool.h>

#include <math.h>

#include "tests/testutil.h"

struct env {
	kvp_pool *pool;
	kvp_storage *ks, *vs;
};

static struct env env_make(void)
{
	kvp_pool_config pc;
	struct env e;

	kvp_pool_config_init(&pc);
	pc.block_size = 4;
	pc.n_blocks = 256;
	CHECK_EQ(kvp_pool_create(&pc, &e.pool), KVP_OK);
	CHECK_EQ(kvp_storage_create(e.pool, 1, NULL, &e.ks), KVP_OK);
	CHECK_EQ(kvp_storage_create(e.pool, 1, NULL, &e.vs), KVP_OK);
	return e;
}

static void env_free(struct env *e)
{
	kvp_storage_destroy(e->ks);
	kvp_storage_destroy(e->vs);
	kvp_pool_destroy(e->pool);
}

/* One layer, one head, head_dim 1: out = sum softmax(scale q k_t) v_t. */
static kvp_kvcache *cache_1d(struct env *e, kvp_owner owner, const float *k, const float *v,
                             uint32_t n)
{
	kvp_kvcache_config cfg = {1, 1, 1, KVP_FP32, owner};
	kvp_kvcache *c;

	CHECK_EQ(kvp_kvcache_create(e->pool, e->ks, e->vs, &cfg, &c), KVP_OK);
	CHECK_EQ(kvp_kvcache_append(c, 0, k, v, n), KVP_OK);
	return c;
}

/* q . k = 1e40 and 1e39 overflow fp32; scale 1e-2 brings them to 1e38 and
 * 1e37, so the softmax puts all the weight on the first token: out = 1. */
static void test_product_overflow_scaled_finite(void)
{
	struct env e = env_make();
	float k[2] = {1e20f, 1e19f}, v[2] = {1.0f, 2.0f}, q = 1e20f, out = 0;
	kvp_kvcache *c = cache_1d(&e, 7, k, v, 2);

	CHECK_EQ(kvp_kvcache_attend(c, 0, &q, 1, 1e-2f, &out), KVP_OK);
	CHECK(out == 1.0f);
	kvp_kvcache_destroy(c);
	env_free(&e);
}

/* With scale 1 both scores are +inf in fp32: they tie, out = mean(V) = 1.5
 * (never NaN). */
static void test_scores_inf_after_scale_tie(void)
{
	struct env e = env_make();
	float k[3] = {1e20f, 1e19f, 1.0f}, v[3] = {1.0f, 2.0f, 100.0f}, q = 1e20f, out = 0;
	kvp_kvcache *c = cache_1d(&e, 7, k, v, 3);

	CHECK_EQ(kvp_kvcache_attend(c, 0, &q, 1, 1.0f, &out), KVP_OK);
	CHECK(out == 1.5f);
	kvp_kvcache_destroy(c);
	env_free(&e);
}

/* A +inf score in a later chunk discards what earlier chunks accumulated. */
static void test_inf_score_in_second_chunk(void)
{
	static float k[200], v[200];
	struct env e = env_make();
	float q = 1.0f, out = 0;
	kvp_kvcache *c;

	for (int i = 0; i < 200; i++) {
		k[i] = i == 150 ? INFINITY : (float)(i % 7);
		v[i] = i == 150 ? 9.0f : -1.0f;
	}
	c = cache_1d(&e, 7, k, v, 200);
	CHECK_EQ(kvp_kvcache_attend(c, 0, &q, 1, 1.0f, &out), KVP_OK);
	CHECK(out == 9.0f);
	kvp_kvcache_destroy(c);
	env_free(&e);
}

/* The first 128-token chunk (the kernel's chunk) scores -inf throughout;
 * the two finite tokens after it share the weight: out = their V = 3. */
static void test_first_chunk_all_neg_inf(void)
{
	static float k[130], v[130];
	struct env e = env_make();
	float q = 1.0f, out = 0;
	kvp_kvcache *c;

	for (int i = 0; i < 130; i++) {
		k[i] = i < 128 ? -INFINITY : 0.0f;
		v[i] = i < 128 ? 5.0f : 3.0f;
	}
	c = cache_1d(&e, 8, k, v, 130);
	CHECK_EQ(kvp_kvcache_attend(c, 0, &q, 1, 1.0f, &out), KVP_OK);
	CHECK(out == 3.0f);
	kvp_kvcache_destroy(c);
	env_free(&e);
}

/* Same, with the finite tokens weighted differently (scores 0 and ln 3):
 * out = (1 * 2 + 3 * 6) / 4 = 5. */
static void test_first_chunk_all_neg_inf_weighted(void)
{
	static float k[130], v[130];
	struct env e = env_make();
	float q = 1.0f, out = 0;
	kvp_kvcache *c;

	for (int i = 0; i < 128; i++) {
		k[i] = -INFINITY;
		v[i] = 1e6f;
	}
	k[128] = 0.0f;
	v[128] = 2.0f;
	k[129] = logf(3.0f);
	v[129] = 6.0f;
	c = cache_1d(&e, 9, k, v, 130);
	CHECK_EQ(kvp_kvcache_attend(c, 0, &q, 1, 1.0f, &out), KVP_OK);
	CHECK(fabsf(out - 5.0f) < 1e-5f);
	kvp_kvcache_destroy(c);
	env_free(&e);
}

int main(void)
{
	RUN(test_product_overflow_scaled_finite);
	RUN(test_scores_inf_after_scale_tie);
	RUN(test_inf_score_in_second_chunk);
	RUN(test_first_chunk_all_neg_inf);
	RUN(test_first_chunk_all_neg_inf_weighted);
	return 0;
}
