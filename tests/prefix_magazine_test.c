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
 * evicted nothing.  And two threads whose caches hold half the pool each,
 * racing for more than half: one gets it, the other fails, neither hangs.
 */
#include <kvpool/kvpool.h>

#include <pthread.h>
#include <unistd.h>

#include "tests/prefix_testutil.h"

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

/*
 * Two threads, each with half the pool in its own cache, ask at once for
 * more than half: together they cannot both have it, one alone can.  An
 * allocation takes its own cache's blocks first; if it kept them while it
 * waited for the rest, each would see the other's as held, not gone, and
 * both would wait forever.  So exactly one must succeed and the other fail
 * with KVP_EEXHAUSTED, round after round (an alarm fails a hang).
 */
#define HALF 32u
#define WANT 40u
static pthread_barrier_t go;

struct half_arg {
	kvp_owner owner;
	int rc;
};

static void *half_thread(void *argp)
{
	struct half_arg *a = argp;
	kvp_ref r[WANT];
	size_t n;
	/* HALF unpublished blocks into this thread's own cache. */
	CHECK_EQ(kvp_allocate(pool, KVP_KV, HALF * BS, a->owner, KVP_FP16, r, WANT, &n), KVP_OK);
	CHECK_EQ(kvp_free_all(pool, a->owner), KVP_OK);
	pthread_barrier_wait(&go);
	a->rc = kvp_allocate(pool, KVP_KV, WANT * BS, a->owner, KVP_FP16, r, WANT, &n);
	pthread_barrier_wait(&go); /* both answered: hold until the main thread looked */
	pthread_barrier_wait(&go);
	return NULL;
}

static void test_two_caches_race(void)
{
	alarm(60);
	for (int round = 0; round < 500; round++) {
		pool = tpx_pool(BS, 2 * HALF);
		CHECK_EQ(pthread_barrier_init(&go, NULL, 3), 0);
		struct half_arg a[2] = {{10, -1}, {11, -1}};
		pthread_t th[2];
		for (int i = 0; i < 2; i++)
			CHECK_EQ(pthread_create(&th[i], NULL, half_thread, &a[i]), 0);
		pthread_barrier_wait(&go);
		pthread_barrier_wait(&go);
		CHECK((a[0].rc == KVP_OK) != (a[1].rc == KVP_OK));
		CHECK(a[0].rc == KVP_EEXHAUSTED || a[1].rc == KVP_EEXHAUSTED);
		kvp_stats s = stats();
		CHECK_EQ(kvp_stats_blocks_in_use(&s), WANT);
		pthread_barrier_wait(&go);
		for (int i = 0; i < 2; i++)
			CHECK_EQ(pthread_join(th[i], NULL), 0);
		pthread_barrier_destroy(&go);
		kvp_pool_destroy(pool);
	}
	alarm(0);
}

int main(void)
{
	RUN(test_other_threads_cache);
	RUN(test_own_cache_first);
	RUN(test_two_caches_race);
	return 0;
}
