/*
 * tests/pool_bias_test.c - which calls bias an owner record and which revoke.
 *
 * White-box: it reads the record's 'bias' and 'revokes' fields
 * (lib/pool/owner.h) between calls, with every other thread joined.
 *   - kvp_register_owner leaves the record unbiased, so a worker thread
 *     allocating for an owner a scheduler thread registered pays no
 *     revocation (a membarrier per request before);
 *   - the first allocate biases it to the allocating thread;
 *   - kvp_blocks_for revokes only a record biased to another thread, and
 *     never one that is unbiased or biased to the caller.
 */
#include <kvpool/kvpool.h>

#include <pthread.h>

#include "lib/testing/pool_peek.h"
#include "tests/testutil.h"

static kvp_pool *P;

struct bias_view {
	uintptr_t bias;
	unsigned revokes;
};

/* The bias and revocation count of @owner's record (which must exist). */
static struct bias_view view(kvp_owner owner)
{
	struct kvp_oshard *sh = kvpi_owners_shard(&P->owners, owner);
	pthread_mutex_lock(&sh->lock);
	struct kvp_orec *r = kvpi_oshard_find(sh, owner);
	CHECK(r != NULL);
	struct bias_view v = {atomic_load_explicit(&r->bias, memory_order_relaxed), r->revokes};
	pthread_mutex_unlock(&sh->lock);
	return v;
}

static void *allocate_for(void *arg)
{
	kvp_ref r[2];
	size_t n;
	CHECK_EQ(kvp_allocate(P, KVP_KV, 32, (kvp_owner)(uintptr_t)arg, KVP_FP16, r, 2, &n),
	         KVP_OK);
	return NULL;
}

static void test_register_then_other_thread_allocates(void)
{
	CHECK_EQ(kvp_register_owner(P, 10), KVP_OK);
	struct bias_view v = view(10);
	CHECK_EQ(v.bias, 0); /* registering does not bias */
	pthread_t t;
	CHECK_EQ(pthread_create(&t, NULL, allocate_for, (void *)(uintptr_t)10), 0);
	CHECK_EQ(pthread_join(t, NULL), 0);
	v = view(10);
	CHECK(v.bias != 0);     /* the worker's allocate biased it to the worker */
	CHECK_EQ(v.revokes, 0); /* and nothing had to be revoked */

	/* Listing a record biased to another thread revokes once... */
	kvp_ref refs[4];
	size_t n;
	CHECK_EQ(kvp_blocks_for(P, 10, refs, 4, &n), KVP_OK);
	CHECK_EQ(n, 2);
	v = view(10);
	CHECK_EQ(v.bias, 0);
	CHECK_EQ(v.revokes, 1);
	/* ...and an unbiased one not at all. */
	CHECK_EQ(kvp_blocks_for(P, 10, refs, 4, &n), KVP_OK);
	CHECK_EQ(view(10).revokes, 1);
	CHECK_EQ(kvp_free_all(P, 10), KVP_OK); /* frees and releases it */
}

static void test_own_biased_owner_not_revoked(void)
{
	kvp_ref r[2];
	size_t n;
	CHECK_EQ(kvp_allocate(P, KVP_KV, 32, 20, KVP_FP16, r, 2, &n), KVP_OK);
	struct bias_view v0 = view(20);
	CHECK(v0.bias != 0); /* biased to this thread */
	kvp_ref refs[4];
	CHECK_EQ(kvp_blocks_for(P, 20, refs, 4, &n), KVP_OK);
	CHECK_EQ(n, 2);
	struct bias_view v = view(20);
	CHECK_EQ(v.bias, v0.bias); /* its own thread listed it: still biased */
	CHECK_EQ(v.revokes, 0);
	CHECK_EQ(kvp_free_all(P, 20), KVP_OK);
}

int main(void)
{
	kvp_pool_config c;
	kvp_pool_config_init(&c);
	c.separate_kv = false;
	c.n_blocks = 64;
	CHECK_EQ(kvp_pool_create(&c, &P), KVP_OK);
	RUN(test_register_then_other_thread_allocates);
	RUN(test_own_biased_owner_not_revoked);
	CHECK_EQ(kvp_n_free(P, KVP_KV), 64);
	kvp_pool_destroy(P);
	return 0;
}
