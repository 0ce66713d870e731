/*
 * tests/prefix_magazine_test.c - per-thread caches in a prefix pool: their
 * uncached blocks are taken before any eviction, and never lost to an
 * exhaustion.
 *
 * kvpool/prefix.h, "Per-thread caches": an allocation takes uncached blocks
 * before it evicts, and reports KVP_EEXHAUSTED only after it emptied every
 * thread's cache.  Here thread A frees 16 unpublished blocks into its own
 * cache and stays alive, idle.  The main thread caches the other 48 blocks
 * of the pool.  A request for all 64 must then succeed, taking A's 16 and
 * evicting exactly the 48 cached ones; a request for 65 must fail having
 * evicted nothing.
 */
#include <kvpool/kvpool.h>

#include <pthread.h>

#include "tests/testutil.h"

#define BS 4u
#define N  64u
#define A  16u

static kvp_pool *pool;
static pthread_barrier_t freed, done;

static kvp_hash key(uint64_t i)
{
	kvp_hash h = {i * 0x9e3779b97f4a7c15ull + 3, i ^ 0x3c3c};
	return h;
}

/* Thread A: 16 unpublished blocks into its own cache, then idle until the
 * main thread is done. */
static void *thread_a(void *arg)
{
	(void)arg;
	kvp_ref r[A];
	size_t n;
	CHECK_EQ(kvp_allocate(pool, KVP_KV, A * BS, 500, KVP_FP16, r, A, &n), KVP_OK);
	CHECK_EQ(kvp_free_all(pool, 500), KVP_OK);
	pthread_barrier_wait(&freed);
	pthread_barrier_wait(&done);
	return NULL;
}

static kvp_stats stats(void)
{
	kvp_stats s;
	CHECK_EQ(kvp_pool_stats(pool, &s), KVP_OK);
	return s;
}

static void test_other_threads_cache(void)
{
	kvp_pool_config c;
	kvp_pool_config_init(&c);
	c.block_size = BS;
	c.n_blocks = N;
	c.separate_kv = false;
	c.prefix_cache = true; /* default thread_cache: per-thread caches on */
	CHECK_EQ(kvp_pool_create(&c, &pool), KVP_OK);
	pthread_barrier_init(&freed, NULL, 2);
	pthread_barrier_init(&done, NULL, 2);
	pthread_t th;
	CHECK_EQ(pthread_create(&th, NULL, thread_a, NULL), 0);
	pthread_barrier_wait(&freed);

	/* The other 48 blocks, published and cached. */
	kvp_ref r[N + 1];
	size_t n;
	CHECK_EQ(kvp_allocate(pool, KVP_KV, (N - A) * BS, 1, KVP_FP16, r, N, &n), KVP_OK);
	for (uint32_t i = 0; i < N - A; i++)
		CHECK_EQ(kvp_prefix_publish(pool, r[i], key(i)), KVP_OK);
	CHECK_EQ(kvp_free_all(pool, 1), KVP_OK);
	kvp_stats s = stats();
	CHECK_EQ(s.n_cached, (uint64_t)(N - A));
	CHECK_EQ(s.n_allocations - s.n_frees, 0u);

	/* One more than the pool: exhausted, and nothing evicted. */
	CHECK_EQ(kvp_allocate(pool, KVP_KV, (N + 1) * BS, 2, KVP_FP16, r, N + 1, &n),
	         KVP_EEXHAUSTED);
	s = stats();
	CHECK_EQ(s.n_evictions, 0u);
	CHECK_EQ(s.n_cached, (uint64_t)(N - A));

	/* The whole pool: A's 16 uncached blocks, then the 48 cached ones. */
	CHECK_EQ(kvp_allocate(pool, KVP_KV, N * BS, 2, KVP_FP16, r, N, &n), KVP_OK);
	CHECK_EQ(n, (size_t)N);
	s = stats();
	CHECK_EQ(s.n_evictions, (uint64_t)(N - A));
	CHECK_EQ(s.n_cached, 0u);
	CHECK_EQ(kvp_free_all(pool, 2), KVP_OK);

	pthread_barrier_wait(&done);
	CHECK_EQ(pthread_join(th, NULL), 0);
	pthread_barrier_destroy(&freed);
	pthread_barrier_destroy(&done);
	kvp_pool_destroy(pool);
}

/* The same with the uncached blocks in the caller's own cache: they are
 * taken first, and a request they cover evicts nothing. */
static void test_own_cache_first(void)
{
	kvp_pool_config c;
	kvp_pool_config_init(&c);
	c.block_size = BS;
	c.n_blocks = N;
	c.separate_kv = false;
	c.prefix_cache = true;
	CHECK_EQ(kvp_pool_create(&c, &pool), KVP_OK);
	kvp_ref r[N];
	size_t n;
	CHECK_EQ(kvp_allocate(pool, KVP_KV, (N - A) * BS, 1, KVP_FP16, r, N, &n), KVP_OK);
	for (uint32_t i = 0; i < N - A; i++)
		CHECK_EQ(kvp_prefix_publish(pool, r[i], key(100 + i)), KVP_OK);
	CHECK_EQ(kvp_allocate(pool, KVP_KV, A * BS, 3, KVP_FP16, r, N, &n), KVP_OK);
	CHECK_EQ(kvp_free_all(pool, 3), KVP_OK); /* 16 uncached, into our cache */
	CHECK_EQ(kvp_free_all(pool, 1), KVP_OK); /* 48 cached */
	CHECK_EQ(kvp_allocate(pool, KVP_KV, A * BS, 4, KVP_FP16, r, N, &n), KVP_OK);
	kvp_stats s = stats();
	CHECK_EQ(s.n_evictions, 0u);
	CHECK_EQ(s.n_cached, (uint64_t)(N - A));
	CHECK_EQ(kvp_free_all(pool, 4), KVP_OK);
	kvp_pool_destroy(pool);
}

int main(void)
{
	RUN(test_other_threads_cache);
	RUN(test_own_cache_first);
	return 0;
}
