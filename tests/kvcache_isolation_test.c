/*
 * tests/kvcache_isolation_test.c - a reset leaves what a request adopted unchanged.
 *
 * Request A computes a prompt and publishes its full blocks, then goes
 * (the blocks are cached).  B adopts them.  After kvp_prefix_reset, and a
 * zero-copy kvp_storage_read of every block (which used to zero the
 * shared buffers in place), B's gather returns A's rows and its attend is
 * bit for bit what it was.  With two adopters B and C, the reset leaves
 * both reading A's rows (their blocks are no longer published but still
 * shared, and stay theirs), and neither can write them.
 */
#include <kvpool/kvpool.h>

#include <string.h>

#include "tests/testutil.h"

#define BS     4
#define LAYERS 2
#define KVH    2
#define HD     8
#define ROW    (KVH * HD)
#define NQ     4
#define NB     3 /* full blocks of the prompt */
#define PROMPT (NB * BS)

static float K[LAYERS][PROMPT][ROW], V[LAYERS][PROMPT][ROW];

struct env {
	kvp_pool *pool;
	kvp_storage *ks, *vs;
};

static struct env env_make(void)
{
	kvp_pool_config c;
	struct env e;

	kvp_pool_config_init(&c);
	c.block_size = BS;
	c.n_blocks = 64;
	c.separate_kv = true;
	c.prefix_cache = true;
	CHECK_EQ(kvp_pool_create(&c, &e.pool), KVP_OK);
	CHECK_EQ(kvp_storage_create(e.pool, ROW, NULL, &e.ks), KVP_OK);
	CHECK_EQ(kvp_storage_create(e.pool, ROW, NULL, &e.vs), KVP_OK);
	return e;
}

static void env_free(struct env *e)
{
	kvp_storage_destroy(e->ks);
	kvp_storage_destroy(e->vs);
	kvp_pool_destroy(e->pool);
}

static kvp_kvcache *mk(struct env *e, kvp_owner owner)
{
	kvp_kvcache_config cfg = {LAYERS, KVH, HD, KVP_FP32, owner};
	kvp_kvcache *c = NULL;

	CHECK_EQ(kvp_kvcache_create(e->pool, e->ks, e->vs, &cfg, &c), KVP_OK);
	return c;
}

static void fill_rows(void)
{
	uint64_t rng = 7;

	for (uint32_t l = 0; l < LAYERS; l++)
		for (uint32_t t = 0; t < PROMPT; t++)
			for (uint32_t j = 0; j < ROW; j++) {
				K[l][t][j] = 100.0f + (float)(tu_rand(&rng) % 2001) / 1000.0f;
				V[l][t][j] = 100.0f + (float)(tu_rand(&rng) % 2001) / 1000.0f;
			}
}

static void seq_keys(kvp_hash *keys)
{
	for (size_t b = 0; b < NB; b++) {
		int32_t tok[BS];
		for (int j = 0; j < BS; j++)
			tok[j] = 5000 + (int32_t)(b * BS) + j;
		CHECK_EQ(kvp_prefix_hash(b ? &keys[b - 1] : NULL, 9, tok, sizeof tok, &keys[b]),
		         KVP_OK);
	}
}

/* gather of every layer equals the prompt's rows */
static void gathers_prompt(const kvp_kvcache *c)
{
	static float k[PROMPT * ROW], v[PROMPT * ROW];

	for (uint32_t l = 0; l < LAYERS; l++) {
		CHECK_EQ(kvp_kvcache_len(c, l), PROMPT);
		CHECK_EQ(kvp_kvcache_gather(c, l, k, v), KVP_OK);
		/* layout (n_kv_heads, len, head_dim) */
		for (uint32_t h = 0; h < KVH; h++)
			for (uint32_t t = 0; t < PROMPT; t++)
				for (uint32_t d = 0; d < HD; d++) {
					size_t at = ((size_t)h * PROMPT + t) * HD + d;
					CHECK(k[at] == K[l][t][h * HD + d]);
					CHECK(v[at] == V[l][t][h * HD + d]);
				}
	}
}

static void attend_all(const kvp_kvcache *c, float out[LAYERS][NQ * HD])
{
	float q[NQ * HD];

	for (int i = 0; i < NQ * HD; i++)
		q[i] = (float)((i * 37) % 11) / 7.0f - 0.6f;
	for (uint32_t l = 0; l < LAYERS; l++)
		CHECK_EQ(kvp_kvcache_attend(c, l, q, NQ, 0.35f, out[l]), KVP_OK);
}

/* A zero-copy read of every block @owner holds, in both storages. */
static void read_every_block(struct env *e, kvp_owner owner)
{
	kvp_ref refs[4 * NB * LAYERS];
	size_t n;
	const void *data;
	uint32_t rows;

	CHECK_EQ(kvp_blocks_for(e->pool, owner, refs, 4 * NB * LAYERS, &n), KVP_OK);
	CHECK_EQ(n, 2 * NB * LAYERS);
	for (size_t i = 0; i < n; i++) {
		kvp_block_info info;
		CHECK_EQ(kvp_block_get(e->pool, refs[i], &info), KVP_OK);
		kvp_storage *s = info.stream == KVP_K ? e->ks : e->vs;
		CHECK_EQ(kvp_storage_read(s, refs[i], &data, &rows), KVP_OK);
		CHECK_EQ(rows, BS);
	}
}

/* A publishes, goes; returns the keys */
static void publisher(struct env *e, kvp_hash *keys)
{
	kvp_kvcache *a = mk(e, 1);
	size_t n_pub;

	for (uint32_t l = 0; l < LAYERS; l++)
		CHECK_EQ(kvp_kvcache_append(a, l, K[l][0], V[l][0], PROMPT), KVP_OK);
	CHECK_EQ(kvp_kvcache_publish(a, keys, NB, &n_pub), KVP_OK);
	CHECK_EQ(n_pub, 2 * NB * LAYERS);
	kvp_kvcache_destroy(a);
}

static void test_one_adopter_survives_reset(void)
{
	struct env e = env_make();
	kvp_hash keys[NB];
	static float before[LAYERS][NQ * HD], after[LAYERS][NQ * HD];
	uint32_t got;

	seq_keys(keys);
	publisher(&e, keys);
	kvp_kvcache *b = mk(&e, 2);
	CHECK_EQ(kvp_kvcache_adopt_prefix(b, keys, NB, &got), KVP_OK);
	CHECK_EQ(got, PROMPT);
	gathers_prompt(b);
	attend_all(b, before);
	CHECK_EQ(kvp_prefix_reset(e.pool), 2 * NB * LAYERS);
	read_every_block(&e, 2);
	gathers_prompt(b);
	attend_all(b, after);
	CHECK(memcmp(before, after, sizeof before) == 0);
	kvp_kvcache_destroy(b);
	env_free(&e);
}

static void test_two_adopters_survive_reset(void)
{
	struct env e = env_make();
	kvp_hash keys[NB];
	static float before[LAYERS][NQ * HD], after[LAYERS][NQ * HD];
	uint32_t got;
	kvp_ref refs[4 * NB * LAYERS];
	size_t n;
	float junk[BS * ROW] = {0};

	seq_keys(keys);
	publisher(&e, keys);
	kvp_kvcache *b = mk(&e, 2), *c = mk(&e, 3);
	CHECK_EQ(kvp_kvcache_adopt_prefix(b, keys, NB, &got), KVP_OK);
	CHECK_EQ(got, PROMPT);
	CHECK_EQ(kvp_kvcache_adopt_prefix(c, keys, NB, &got), KVP_OK);
	CHECK_EQ(got, PROMPT);
	attend_all(c, before);
	CHECK_EQ(kvp_prefix_reset(e.pool), 2 * NB * LAYERS);
	/* B cannot write the blocks C shares */
	CHECK_EQ(kvp_blocks_for(e.pool, 2, refs, 4 * NB * LAYERS, &n), KVP_OK);
	for (size_t i = 0; i < n; i++) {
		kvp_block_info info;
		CHECK_EQ(kvp_block_get(e.pool, refs[i], &info), KVP_OK);
		CHECK_EQ(info.n_holders, 2);
		kvp_storage *s = info.stream == KVP_K ? e.ks : e.vs;
		CHECK_EQ(kvp_storage_write(s, refs[i], 0, junk, BS), KVP_EINVAL);
	}
	read_every_block(&e, 2);
	read_every_block(&e, 3);
	gathers_prompt(b);
	gathers_prompt(c);
	attend_all(c, after);
	CHECK(memcmp(before, after, sizeof before) == 0);
	attend_all(b, after);
	CHECK(memcmp(before, after, sizeof before) == 0);
	/* a trim that would cut inside a shared block changes nothing */
	CHECK_EQ(kvp_kvcache_trim(b, 1), KVP_EINVAL);
	gathers_prompt(b);
	gathers_prompt(c);
	kvp_kvcache_destroy(b);
	gathers_prompt(c);
	/* C is the one holder now: its trim works */
	CHECK_EQ(kvp_kvcache_trim(c, 1), KVP_OK);
	CHECK_EQ(kvp_kvcache_len(c, 0), PROMPT - 1);
	kvp_kvcache_destroy(c);
	env_free(&e);
}

int main(void)
{
	fill_rows();
	RUN(test_one_adopter_survives_reset);
	RUN(test_two_adopters_survive_reset);
	return 0;
}
