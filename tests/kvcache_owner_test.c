/*
 * tests/kvcache_owner_test.c - a kvcache that loses its owner in release
 * never touches the party that took it.
 *
 * kvp_kvcache_release frees its blocks with kvp_free_all (which releases
 * the owner) and then registers the owner again.  The test links with
 * -Wl,--wrap=kvp_register_owner, so another party's registration can be
 * slipped in exactly between the two calls.  After that: append is
 * KVP_EOWNER and adds nothing to the other party's owner; release and
 * destroy leave the other party's blocks and owner alone; once the other
 * party lets go, a release takes the owner back and the kvcache works.
 */
#include <kvpool/kvpool.h>

#include <stdbool.h>

#include "tests/testutil.h"

int __real_kvp_register_owner(kvp_pool *pool, kvp_owner owner);

/* When set, the next registration of this owner is preceded by the other
 * party's (which then wins). */
static kvp_owner steal_owner;

int __wrap_kvp_register_owner(kvp_pool *pool, kvp_owner owner)
{
	if (steal_owner && owner == steal_owner) {
		steal_owner = 0;
		CHECK_EQ(__real_kvp_register_owner(pool, owner), KVP_OK);
	}
	return __real_kvp_register_owner(pool, owner);
}

#define KVH 1
#define HD  4
#define BS  4

struct env {
	kvp_pool *pool;
	kvp_storage *ks, *vs;
};

static struct env env_make(void)
{
	kvp_pool_config pc;
	struct env e;

	kvp_pool_config_init(&pc);
	pc.block_size = BS;
	pc.n_blocks = 64;
	CHECK_EQ(kvp_pool_create(&pc, &e.pool), KVP_OK);
	CHECK_EQ(kvp_storage_create(e.pool, KVH * HD, NULL, &e.ks), KVP_OK);
	CHECK_EQ(kvp_storage_create(e.pool, KVH * HD, NULL, &e.vs), KVP_OK);
	return e;
}

static void env_free(struct env *e)
{
	kvp_storage_destroy(e->ks);
	kvp_storage_destroy(e->vs);
	kvp_pool_destroy(e->pool);
}

static kvp_kvcache *mkcache(struct env *e, kvp_owner owner)
{
	kvp_kvcache_config cfg = {2, KVH, HD, KVP_FP32, owner};
	kvp_kvcache *c;

	CHECK_EQ(kvp_kvcache_create(e->pool, e->ks, e->vs, &cfg, &c), KVP_OK);
	return c;
}

static float rows[6 * KVH * HD];

/* Release loses the owner to another party, which allocates for it. */
static kvp_kvcache *lose_owner(struct env *e, kvp_owner owner, kvp_ref *theirs, size_t *n_theirs)
{
	kvp_kvcache *c = mkcache(e, owner);

	CHECK_EQ(kvp_kvcache_append(c, 0, rows, rows, 6), KVP_OK);
	CHECK_EQ(kvp_kvcache_append(c, 1, rows, rows, 3), KVP_OK);
	CHECK_EQ(kvp_kvcache_blocks_held(c), 6);
	steal_owner = owner;
	kvp_kvcache_release(c);
	CHECK_EQ(steal_owner, 0); /* the other party did register in between */
	CHECK_EQ(kvp_kvcache_blocks_held(c), 0);
	CHECK_EQ(kvp_allocate(e->pool, KVP_K, 2 * BS, owner, KVP_FP16, theirs, 4, n_theirs),
	         KVP_OK);
	CHECK_EQ(*n_theirs, 2);
	return c;
}

static void check_theirs(struct env *e, kvp_owner owner, const kvp_ref *theirs, size_t n_theirs)
{
	kvp_ref refs[16];
	kvp_block_info info;
	size_t n, i;

	CHECK_EQ(kvp_blocks_for(e->pool, owner, refs, 16, &n), KVP_OK);
	CHECK_EQ(n, n_theirs);
	for (i = 0; i < n_theirs; i++) {
		CHECK_EQ(kvp_block_get(e->pool, theirs[i], &info), KVP_OK);
		CHECK(info.in_use);
		CHECK_EQ(info.owner, owner);
		CHECK_EQ(info.format, KVP_FP16);
	}
}

static void test_lost_owner_append_release_destroy(void)
{
	struct env e = env_make();
	kvp_ref theirs[4];
	size_t n_theirs;
	kvp_kvcache *c = lose_owner(&e, 42, theirs, &n_theirs);

	CHECK_EQ(kvp_kvcache_append(c, 0, rows, rows, 1), KVP_EOWNER);
	CHECK_EQ(kvp_kvcache_append(c, 1, rows, rows, 5), KVP_EOWNER);
	CHECK_EQ(kvp_kvcache_len(c, 0), 0);
	CHECK_EQ(kvp_kvcache_blocks_held(c), 0);
	check_theirs(&e, 42, theirs, n_theirs);
	kvp_kvcache_release(c); /* the other party still holds the owner */
	check_theirs(&e, 42, theirs, n_theirs);
	CHECK_EQ(kvp_kvcache_append(c, 0, rows, rows, 1), KVP_EOWNER);
	kvp_kvcache_destroy(c);
	check_theirs(&e, 42, theirs, n_theirs);
	CHECK_EQ(kvp_free_all(e.pool, 42), KVP_OK);
	env_free(&e);
}

static void test_release_takes_owner_back(void)
{
	struct env e = env_make();
	kvp_ref theirs[4], refs[16];
	size_t n_theirs, n;
	kvp_kvcache *c = lose_owner(&e, 43, theirs, &n_theirs);

	CHECK_EQ(kvp_free_all(e.pool, 43), KVP_OK); /* the other party is done */
	kvp_kvcache_release(c);
	CHECK_EQ(kvp_kvcache_append(c, 0, rows, rows, 5), KVP_OK);
	CHECK_EQ(kvp_kvcache_blocks_held(c), 4);
	CHECK_EQ(kvp_blocks_for(e.pool, 43, refs, 16, &n), KVP_OK);
	CHECK_EQ(n, 4);
	kvp_kvcache_destroy(c);
	CHECK_EQ(kvp_blocks_for(e.pool, 43, refs, 16, &n), KVP_ENOENT);
	CHECK_EQ(kvp_n_free(e.pool, KVP_K) + kvp_n_free(e.pool, KVP_V), 64);
	env_free(&e);
}

/* Without interference release keeps the owner: a second kvcache on it is refused. */
static void test_release_keeps_owner(void)
{
	struct env e = env_make();
	kvp_kvcache_config cfg = {1, KVH, HD, KVP_FP32, 44};
	kvp_kvcache *c = mkcache(&e, 44), *d = NULL;

	CHECK_EQ(kvp_kvcache_append(c, 0, rows, rows, 6), KVP_OK);
	kvp_kvcache_release(c);
	CHECK_EQ(kvp_kvcache_create(e.pool, e.ks, e.vs, &cfg, &d), KVP_EOWNER);
	CHECK_EQ(kvp_kvcache_append(c, 0, rows, rows, 6), KVP_OK);
	kvp_kvcache_destroy(c);
	CHECK_EQ(kvp_kvcache_create(e.pool, e.ks, e.vs, &cfg, &d), KVP_OK);
	kvp_kvcache_destroy(d);
	env_free(&e);
}

int main(void)
{
	RUN(test_lost_owner_append_release_destroy);
	RUN(test_release_takes_owner_back);
	RUN(test_release_keeps_owner);
	return 0;
}
