/*
 * tests/pool_share_race_test.c - threads taking turns on the same owners.
 *
 * Three threads allocate and free one block at a time for the same three
 * owners, so each owner record's bias moves between threads on almost every
 * call: revocations, re-biasing, and a free that empties a record racing an
 * allocate that re-biases it to another thread.  Under TSan a read of the
 * record's block count that only the shard lock protected (while another
 * thread it was biased to changed it lock-free) was reported as a data
 * race.  At the end every record is gone and every block is free.
 *
 * The same with the prefix cache on (one owner table for both modes): the
 * threads also publish their blocks under a few keys and match those keys
 * for the shared owners, so matches, releases, allocates and the dropping
 * of emptied records race on the same records while blocks are shared
 * between owners and refused to kvp_free.
 */
#include <kvpool/kvpool.h>

#include <pthread.h>

#include "tests/testutil.h"

#define N_THREADS 3
#define N_OWNERS  3
#define ITERS     40000

static kvp_pool *P;
static bool prefix; /* the pool has the prefix cache on */

static kvp_hash key_of(uint64_t k)
{
	kvp_hash h = {k + 1, k * 0x9e3779b97f4a7c15ull};
	return h;
}

/* Prefix mode: publish @r under one of a few keys, or match one for @o
 * and let the matched block go again (refused when shared: then free_all). */
static void prefix_step(kvp_owner o, kvp_ref r, uint64_t *seed)
{
	uint64_t k = tu_rand(seed) % 8;
	if (tu_rand(seed) % 2) {
		int rc = kvp_prefix_publish(P, r, key_of(k));
		CHECK(rc == KVP_OK || rc == KVP_EEXIST || rc == KVP_ENOENT || rc == KVP_EINVAL);
		return;
	}
	kvp_hash key = key_of(k);
	kvp_ref m;
	size_t n = 0;
	CHECK_EQ(kvp_prefix_match(P, KVP_KV, KVP_FP16, &key, 1, o, &m, 1, &n), KVP_OK);
	if (n) {
		int rc = kvp_free_owned(P, o, &m, 1);
		CHECK(rc == KVP_OK);
	}
}

static void *worker(void *arg)
{
	uint64_t seed = (uint64_t)(uintptr_t)arg;
	kvp_ref r[4];
	size_t n;
	for (int i = 0; i < ITERS; i++) {
		kvp_owner o = (kvp_owner)(tu_rand(&seed) % N_OWNERS);
		CHECK_EQ(kvp_allocate(P, KVP_KV, 16, o, KVP_FP16, r, 4, &n), KVP_OK);
		CHECK_EQ(n, 1);
		if (prefix)
			prefix_step(o, r[0], &seed);
		/* Mostly the one ref (OK even if another thread's free_all
		 * freed it already); sometimes everything of the owner, which
		 * another thread may have emptied and dropped just before. */
		if (tu_rand(&seed) % 16) {
			int rc = kvp_free(P, r, 1);
			/* prefix: a block shared by a match is refused */
			CHECK(rc == KVP_OK || (prefix && rc == KVP_EINVAL));
			if (rc != KVP_OK)
				CHECK_EQ(kvp_free_owned(P, o, r, 1), KVP_OK);
		} else {
			int rc = kvp_free_all(P, o);
			CHECK(rc == KVP_OK || rc == KVP_ENOENT);
		}
	}
	return NULL;
}

static void shared_owners(bool with_prefix)
{
	kvp_pool_config c;
	kvp_pool_config_init(&c);
	c.separate_kv = false;
	c.n_blocks = 256;
	c.prefix_cache = prefix = with_prefix;
	CHECK_EQ(kvp_pool_create(&c, &P), KVP_OK);
	pthread_t t[N_THREADS];
	for (uintptr_t i = 0; i < N_THREADS; i++)
		CHECK_EQ(pthread_create(&t[i], NULL, worker, (void *)(i * 7919 + 1)), 0);
	for (int i = 0; i < N_THREADS; i++)
		CHECK_EQ(pthread_join(t[i], NULL), 0);
	kvp_ref r[4];
	size_t n;
	for (kvp_owner o = 0; o < N_OWNERS; o++)
		CHECK_EQ(kvp_blocks_for(P, o, r, 4, &n), KVP_ENOENT); /* no record left */
	CHECK_EQ(kvp_n_free(P, KVP_KV), 256); /* free or cached and unheld */
	kvp_stats s;
	CHECK_EQ(kvp_pool_stats(P, &s), KVP_OK);
	if (!with_prefix) /* prefix: matches of cached blocks count too */
		CHECK_EQ(s.n_allocations, (uint64_t)N_THREADS * ITERS);
	CHECK_EQ(kvp_stats_blocks_in_use(&s), 0);
	kvp_pool_destroy(P);
}

static void test_shared_owners(void)
{
	shared_owners(false);
}

static void test_shared_owners_prefix(void)
{
	shared_owners(true);
}

int main(void)
{
	RUN(test_shared_owners);
	RUN(test_shared_owners_prefix);
	return 0;
}
