/*
 * tests/prefix_claim_test.c - a request that fails evicts nothing, even when
 * matches take the cached blocks it counted.
 *
 * An allocation of two blocks on a pool whose two blocks are both cached
 * counts them, and then evicts.  The count is wrapped (-Wl,--wrap=
 * kvpi_pfx_n_cached): right after it, another thread matches the first key
 * and so takes one of the two blocks.  The allocation then finds one block
 * to evict where it needs two, and fails (the pool may not grow).  It must
 * leave the other cached block as it was: still cached, its key still
 * found, nothing counted as evicted.  (Before the claim/commit split the
 * block it had evicted went back as an uncached free block, its key gone.)
 *
 * A reset that runs while an allocation holds a claimed block (the claim is
 * wrapped, -Wl,--wrap=kvpi_pfx_claim: right after it, another thread resets
 * the cache) must not leave that block's key findable once the failed
 * allocation gives the block back: kvp_prefix_reset evicts every cached
 * block, and that block was cached before the reset began.  (Before the
 * fix the claimed block was off its list and not in use, so the reset
 * passed it over, and the allocation put it back with its key.)
 * Runs in plain, ASan and TSan builds.
 */
#include <kvpool/kvpool.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "tests/prefix_testutil.h"

#define BS 4u

struct kvp_prefix;
uint64_t __real_kvpi_pfx_n_cached(struct kvp_prefix *pf, int si);
uint64_t __wrap_kvpi_pfx_n_cached(struct kvp_prefix *pf, int si);
struct kvp_pool;
struct kvp_tslot;
uint32_t __real_kvpi_pfx_claim(struct kvp_pool *p, struct kvp_tslot *s, int si, uint32_t *ids,
                               uint32_t n);
uint32_t __wrap_kvpi_pfx_claim(struct kvp_pool *p, struct kvp_tslot *s, int si, uint32_t *ids,
                               uint32_t n);

static kvp_pool *pool;
static _Thread_local bool interfere;  /* the allocating thread, once */
static _Thread_local bool reset_next; /* the allocating thread, once */
static uint32_t key_set = 1;          /* the first key of tpx_key(key_set, 0, i) */

static void *take_first(void *arg)
{
	(void)arg;
	kvp_hash k = tpx_key(key_set, 0, 0);
	kvp_ref r;
	size_t n = 0;
	CHECK_EQ(kvp_prefix_match(pool, KVP_KV, KVP_FP16, &k, 1, 77, &r, 1, &n), KVP_OK);
	CHECK_EQ(n, 1);
	return NULL;
}

/* After the count: another thread takes one of the counted blocks. */
uint64_t __wrap_kvpi_pfx_n_cached(struct kvp_prefix *pf, int si)
{
	uint64_t c = __real_kvpi_pfx_n_cached(pf, si);
	if (interfere) {
		interfere = false;
		pthread_t t;
		CHECK_EQ(pthread_create(&t, NULL, take_first, NULL), 0);
		CHECK_EQ(pthread_join(t, NULL), 0);
	}
	return c;
}

static void *reset_cache(void *arg)
{
	*(size_t *)arg = kvp_prefix_reset(pool);
	return NULL;
}

static size_t reset_dropped;

/* After the claim: another thread resets the cache (and waits for it). */
uint32_t __wrap_kvpi_pfx_claim(struct kvp_pool *p, struct kvp_tslot *s, int si, uint32_t *ids,
                               uint32_t n)
{
	uint32_t got = __real_kvpi_pfx_claim(p, s, si, ids, n);
	if (reset_next) {
		reset_next = false;
		pthread_t t;
		CHECK_EQ(pthread_create(&t, NULL, reset_cache, &reset_dropped), 0);
		CHECK_EQ(pthread_join(t, NULL), 0);
	}
	return got;
}

static void test_failed_request_evicts_nothing(void)
{
	pool = tpx_pool(BS, 2);
	kvp_ref r[2];
	size_t n;
	CHECK_EQ(kvp_allocate(pool, KVP_KV, 2 * BS, 5, KVP_FP16, r, 2, &n), KVP_OK);
	for (uint32_t i = 0; i < 2; i++)
		CHECK_EQ(kvp_prefix_publish(pool, r[i], tpx_key(1, 0, i)), KVP_OK);
	CHECK_EQ(kvp_free_all(pool, 5), KVP_OK);
	kvp_stats st;
	CHECK_EQ(kvp_pool_stats(pool, &st), KVP_OK);
	CHECK_EQ(st.n_cached, 2);

	interfere = true;
	kvp_ref got[2];
	CHECK_EQ(kvp_allocate(pool, KVP_KV, 2 * BS, 6, KVP_FP16, got, 2, &n), KVP_EEXHAUSTED);
	CHECK(!interfere); /* the count ran, and the other thread matched */

	/* The second block: still cached under its key, nothing evicted. */
	kvp_block_info bi;
	CHECK_EQ(kvp_block_get(pool, r[1], &bi), KVP_OK);
	CHECK(!bi.in_use && bi.published);
	CHECK_EQ(kvp_pool_stats(pool, &st), KVP_OK);
	CHECK_EQ(st.n_evictions, 0);
	CHECK_EQ(st.n_cached, 1);
	kvp_hash k = tpx_key(1, 0, 1);
	kvp_ref m;
	CHECK_EQ(kvp_prefix_match(pool, KVP_KV, KVP_FP16, &k, 1, 8, &m, 1, &n), KVP_OK);
	CHECK_EQ(n, 1);
	CHECK_EQ(KVP_REF_ID(m), KVP_REF_ID(r[1]));
	/* And the pool still works: both blocks back, a full request met. */
	CHECK_EQ(kvp_free_all(pool, 8), KVP_OK);
	CHECK_EQ(kvp_free_all(pool, 77), KVP_OK);
	CHECK_EQ(kvp_allocate(pool, KVP_KV, 2 * BS, 6, KVP_FP16, got, 2, &n), KVP_OK);
	CHECK_EQ(kvp_free_all(pool, 6), KVP_OK);
	kvp_pool_destroy(pool);
	pool = NULL;
}

/*
 * As above, and a reset runs to its end between the claim and the failure:
 * the claimed block's key is gone afterwards, as every key cached before
 * the reset, and the pool is whole (both blocks free, usable).
 */
static void test_reset_while_claimed_drops_key(void)
{
	key_set = 2;
	pool = tpx_pool(BS, 2);
	kvp_ref r[2];
	size_t n;
	CHECK_EQ(kvp_allocate(pool, KVP_KV, 2 * BS, 5, KVP_FP16, r, 2, &n), KVP_OK);
	for (uint32_t i = 0; i < 2; i++)
		CHECK_EQ(kvp_prefix_publish(pool, r[i], tpx_key(2, 0, i)), KVP_OK);
	CHECK_EQ(kvp_free_all(pool, 5), KVP_OK);

	interfere = true;
	reset_next = true;
	kvp_ref got[2];
	CHECK_EQ(kvp_allocate(pool, KVP_KV, 2 * BS, 6, KVP_FP16, got, 2, &n), KVP_EEXHAUSTED);
	CHECK(!interfere && !reset_next); /* the match and the reset ran */
	CHECK_EQ(reset_dropped, 1);       /* the held block's key */

	/* The claimed block: its key dropped, as the reset promises. */
	kvp_hash k = tpx_key(2, 0, 1);
	kvp_ref m;
	CHECK_EQ(kvp_prefix_match(pool, KVP_KV, KVP_FP16, &k, 1, 8, &m, 1, &n), KVP_OK);
	CHECK_EQ(n, 0);
	kvp_block_info bi;
	CHECK_EQ(kvp_block_get(pool, r[1], &bi), KVP_OK);
	CHECK(!bi.in_use && !bi.published);
	kvp_stats st;
	CHECK_EQ(kvp_pool_stats(pool, &st), KVP_OK);
	CHECK_EQ(st.n_cached, 0);
	/* The pool is whole: the held block back, a full request met. */
	CHECK_EQ(kvp_free_all(pool, 77), KVP_OK);
	CHECK_EQ(kvp_n_free(pool, KVP_KV), 2);
	CHECK_EQ(kvp_allocate(pool, KVP_KV, 2 * BS, 6, KVP_FP16, got, 2, &n), KVP_OK);
	CHECK_EQ(kvp_free_all(pool, 6), KVP_OK);
	kvp_pool_destroy(pool);
	pool = NULL;
}

int main(void)
{
	RUN(test_failed_request_evicts_nothing);
	RUN(test_reset_while_claimed_drops_key);
	return 0;
}
