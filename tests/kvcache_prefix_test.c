/*
 * tests/kvcache_prefix_test.c - kvp_kvcache_adopt_prefix and _publish.
 *
 * A request that adopts a published prefix and decodes on the shared
 * blocks gets attend outputs equal, bit for bit (fp32), to a request that
 * computed the same rows into private blocks; shared blocks stay correct
 * while their first holder goes away and after they were cached and
 * revived; adopt keeps the shortest match over layers and streams (keys
 * derived as kvcache.h documents, computed here by hand); publish skips
 * adopted blocks and tolerates KVP_EEXIST; trim refuses to cut inside a
 * published block; every hold is dropped at the end.
 */
#include <kvpool/kvpool.h>

#include <string.h>

#include "tests/testutil.h"

#define BS     4
#define LAYERS 3
#define KVH    2
#define HD     8
#define ROW    (KVH * HD)
#define NQ     4 /* query heads */
#define PROMPT (3 * BS + 2)
#define DECODE 9
#define TOTAL  (PROMPT + DECODE)

struct env {
	kvp_pool *pool;
	kvp_storage *ks, *vs;
};

static float K[LAYERS][TOTAL][ROW], V[LAYERS][TOTAL][ROW];

static struct env env_make(bool prefix, bool sep)
{
	kvp_pool_config c;
	struct env e;

	kvp_pool_config_init(&c);
	c.block_size = BS;
	c.n_blocks = 512;
	c.separate_kv = sep;
	c.prefix_cache = prefix;
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

/* Sequence keys of the prompt's full blocks: token ids 1000 + t. */
static void seq_keys(kvp_hash *keys, size_t n)
{
	for (size_t b = 0; b < n; b++) {
		int32_t tok[BS];
		for (int j = 0; j < BS; j++)
			tok[j] = 1000 + (int32_t)(b * BS) + j;
		CHECK_EQ(kvp_prefix_hash(b ? &keys[b - 1] : NULL, 42, tok, sizeof tok, &keys[b]),
		         KVP_OK);
	}
}

/* The derived key of layer @l's K or V block, as kvcache.h documents it. */
static kvp_hash derived(const kvp_hash *seq, uint32_t l, int v)
{
	uint8_t t[8] = {
	    (uint8_t)l, (uint8_t)(l >> 8), (uint8_t)(l >> 16), (uint8_t)(l >> 24), (uint8_t)v, 0, 0,
	    0};
	kvp_hash out;

	CHECK_EQ(kvp_prefix_hash(seq, 0, t, sizeof t, &out), KVP_OK);
	return out;
}

static void append_range(kvp_kvcache *c, uint32_t from, uint32_t to)
{
	for (uint32_t l = 0; l < LAYERS; l++)
		CHECK_EQ(kvp_kvcache_append(c, l, K[l][from], V[l][from], to - from), KVP_OK);
}

/* attend of every layer, for a fixed query */
static void attend_all(const kvp_kvcache *c, float out[LAYERS][NQ * HD])
{
	float q[NQ * HD];

	for (int i = 0; i < NQ * HD; i++)
		q[i] = (float)((i * 37) % 11) / 7.0f - 0.6f;
	for (uint32_t l = 0; l < LAYERS; l++)
		CHECK_EQ(kvp_kvcache_attend(c, l, q, NQ, 0.35f, out[l]), KVP_OK);
}

static void same_attend(const kvp_kvcache *a, const kvp_kvcache *b)
{
	static float x[LAYERS][NQ * HD], y[LAYERS][NQ * HD];

	attend_all(a, x);
	attend_all(b, y);
	CHECK(memcmp(x, y, sizeof x) == 0);
}

static void fill_rows(void)
{
	uint64_t rng = 99;

	for (uint32_t l = 0; l < LAYERS; l++)
		for (uint32_t t = 0; t < TOTAL; t++)
			for (uint32_t j = 0; j < ROW; j++) {
				K[l][t][j] = (float)(tu_rand(&rng) % 2001) / 1000.0f - 1.0f;
				V[l][t][j] = (float)(tu_rand(&rng) % 2001) / 1000.0f - 1.0f;
			}
}

static uint32_t holders(kvp_pool *p, kvp_ref r)
{
	kvp_block_info info;

	CHECK_EQ(kvp_block_get(p, r, &info), KVP_OK);
	return info.in_use ? info.n_holders : 0;
}

/* Shared prefix vs private copy, through decode, first holder gone, cache, revive. */
static void run_shared_vs_private(bool sep)
{
	struct env e = env_make(true, sep), priv_env = env_make(false, sep);
	kvp_hash keys[PROMPT / BS];
	kvp_kvcache *a = mk(&e, 1), *b = mk(&e, 2), *p = mk(&priv_env, 1), *d;
	size_t n_pub;
	uint32_t got;
	kvp_ref refs[64];
	size_t n_refs;

	seq_keys(keys, PROMPT / BS);
	/* a computes the prompt and publishes its full blocks */
	append_range(a, 0, PROMPT);
	CHECK_EQ(kvp_kvcache_publish(a, keys, PROMPT / BS, &n_pub), KVP_OK);
	CHECK_EQ(n_pub, 2 * LAYERS * (PROMPT / BS));
	/* publishing again publishes nothing */
	CHECK_EQ(kvp_kvcache_publish(a, keys, PROMPT / BS, &n_pub), KVP_OK);
	CHECK_EQ(n_pub, 0);
	/* b adopts them and appends only the rest of the prompt */
	CHECK_EQ(kvp_kvcache_adopt_prefix(b, keys, PROMPT / BS, &got), KVP_OK);
	CHECK_EQ(got, (PROMPT / BS) * BS);
	for (uint32_t l = 0; l < LAYERS; l++)
		CHECK_EQ(kvp_kvcache_len(b, l), got);
	CHECK_EQ(kvp_kvcache_blocks_held(b), 2 * LAYERS * (PROMPT / BS));
	append_range(b, got, PROMPT);
	/* the private copy computes everything itself */
	append_range(p, 0, PROMPT);
	CHECK_EQ(kvp_blocks_for(e.pool, 2, refs, 64, &n_refs), KVP_OK);
	CHECK_EQ(holders(e.pool, refs[0]), 2);
	same_attend(b, p);
	same_attend(a, p);
	/* decode on shared blocks: one token at a time, a goes away midway */
	for (uint32_t t = PROMPT; t < TOTAL; t++) {
		append_range(b, t, t + 1);
		append_range(p, t, t + 1);
		if (a)
			append_range(a, t, t + 1);
		same_attend(b, p);
		if (a)
			same_attend(a, p);
		if (t == PROMPT + 3) {
			kvp_kvcache_destroy(a);
			a = NULL;
			CHECK_EQ(holders(e.pool, refs[0]), 1);
		}
	}
	/* b goes: its published blocks are cached; d revives them */
	kvp_kvcache_destroy(b);
	{
		kvp_stats st;
		CHECK_EQ(kvp_pool_stats(e.pool, &st), KVP_OK);
		CHECK_EQ(st.n_cached, 2 * LAYERS * (PROMPT / BS));
		CHECK_EQ(kvp_stats_blocks_in_use(&st), 0);
	}
	d = mk(&e, 3);
	CHECK_EQ(kvp_kvcache_adopt_prefix(d, keys, PROMPT / BS, &got), KVP_OK);
	CHECK_EQ(got, (PROMPT / BS) * BS);
	append_range(d, got, TOTAL);
	same_attend(d, p);
	/* adopt needs an empty kvcache */
	CHECK_EQ(kvp_kvcache_adopt_prefix(d, keys, 1, &got), KVP_EINVAL);
	/* trim inside a published block is refused; whole blocks are fine */
	CHECK_EQ(kvp_kvcache_trim(d, TOTAL - (PROMPT / BS) * BS + 1), KVP_EINVAL);
	CHECK_EQ(kvp_kvcache_len(d, 0), TOTAL);
	CHECK_EQ(kvp_kvcache_trim(d, TOTAL - 2 * BS), KVP_OK);
	CHECK_EQ(kvp_kvcache_len(d, 0), 2 * BS);
	CHECK_EQ(kvp_kvcache_blocks_held(d), 2 * LAYERS * 2);
	kvp_kvcache_destroy(d);
	kvp_kvcache_destroy(p);
	{
		kvp_stats st;
		CHECK_EQ(kvp_pool_stats(e.pool, &st), KVP_OK);
		CHECK_EQ(kvp_stats_blocks_in_use(&st), 0);
	}
	env_free(&e);
	env_free(&priv_env);
}

static void test_shared_equals_private_separate_kv(void)
{
	run_shared_vs_private(true);
}

static void test_shared_equals_private_one_stream(void)
{
	run_shared_vs_private(false);
}

/* adopt keeps the shortest match over layers and streams and drops the rest. */
static void test_adopt_takes_shortest_match(void)
{
	struct env e = env_make(true, true);
	kvp_hash keys[3];
	kvp_kvcache *a = mk(&e, 1), *b = mk(&e, 2);
	kvp_ref refs[64];
	size_t n;
	uint32_t got;

	seq_keys(keys, 3);
	append_range(a, 0, 3 * BS);
	/* blocks_for: layer by layer, K blocks then V blocks */
	CHECK_EQ(kvp_blocks_for(e.pool, 1, refs, 64, &n), KVP_OK);
	CHECK_EQ(n, 2 * LAYERS * 3);
	for (uint32_t l = 0; l < LAYERS; l++)
		for (int v = 0; v < 2; v++) {
			/* every layer publishes 3 blocks, but layer 1's V only 2 */
			uint32_t nb = l == 1 && v ? 2 : 3;
			for (uint32_t blk = 0; blk < nb; blk++)
				CHECK_EQ(kvp_prefix_publish(e.pool,
				                            refs[l * 6 + (uint32_t)v * 3 + blk],
				                            derived(&keys[blk], l, v)),
				         KVP_OK);
		}
	CHECK_EQ(kvp_kvcache_adopt_prefix(b, keys, 3, &got), KVP_OK);
	CHECK_EQ(got, 2 * BS);
	CHECK_EQ(kvp_kvcache_blocks_held(b), 2 * LAYERS * 2);
	/* the third blocks matched in layer 0 were let go again */
	CHECK_EQ(holders(e.pool, refs[2]), 1);
	CHECK_EQ(holders(e.pool, refs[1]), 2);
	/* a kvcache that publishes the same blocks again: all EEXIST or adopted */
	{
		kvp_kvcache *c = mk(&e, 3);
		size_t n_pub;
		append_range(c, 0, 3 * BS);
		CHECK_EQ(kvp_kvcache_publish(c, keys, 3, &n_pub), KVP_OK);
		CHECK_EQ(n_pub, 1); /* only layer 1's third V block had no key yet */
		kvp_kvcache_destroy(c);
	}
	kvp_kvcache_destroy(b);
	kvp_kvcache_destroy(a);
	env_free(&e);
}

static void test_no_match_and_errors(void)
{
	struct env e = env_make(true, true), off = env_make(false, true);
	kvp_hash keys[2];
	kvp_kvcache *a = mk(&e, 1), *o = mk(&off, 1);
	uint32_t got = 77;
	size_t n_pub;

	seq_keys(keys, 2);
	CHECK_EQ(kvp_kvcache_adopt_prefix(a, keys, 2, &got), KVP_OK);
	CHECK_EQ(got, 0);
	CHECK_EQ(kvp_kvcache_len(a, 0), 0);
	CHECK_EQ(kvp_kvcache_blocks_held(a), 0);
	CHECK_EQ(kvp_kvcache_adopt_prefix(a, NULL, 0, &got), KVP_OK);
	CHECK_EQ(kvp_kvcache_adopt_prefix(a, NULL, 1, &got), KVP_EINVAL);
	CHECK_EQ(kvp_kvcache_adopt_prefix(a, keys, 2, NULL), KVP_EINVAL);
	CHECK_EQ(kvp_kvcache_adopt_prefix(NULL, keys, 2, &got), KVP_EINVAL);
	CHECK_EQ(kvp_kvcache_publish(NULL, keys, 2, &n_pub), KVP_EINVAL);
	CHECK_EQ(kvp_kvcache_publish(a, keys, 2, NULL), KVP_EINVAL);
	/* nothing full yet: nothing to publish */
	CHECK_EQ(kvp_kvcache_publish(a, keys, 2, &n_pub), KVP_OK);
	CHECK_EQ(n_pub, 0);
	/* prefix cache off */
	CHECK_EQ(kvp_kvcache_adopt_prefix(o, keys, 2, &got), KVP_EINVAL);
	append_range(o, 0, 2 * BS);
	CHECK_EQ(kvp_kvcache_publish(o, keys, 2, &n_pub), KVP_EINVAL);
	CHECK_EQ(kvp_kvcache_trim(o, 1), KVP_OK); /* unpublished: trims as ever */
	kvp_kvcache_destroy(a);
	kvp_kvcache_destroy(o);
	env_free(&e);
	env_free(&off);
}

int main(void)
{
	fill_rows();
	RUN(test_shared_equals_private_separate_kv);
	RUN(test_shared_equals_private_one_stream);
	RUN(test_adopt_takes_shortest_match);
	RUN(test_no_match_and_errors);
	return 0;
}
