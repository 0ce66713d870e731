/*
 * tests/bufcache_clear_test.c - kvp_bufcache_clear is bounded by what was
 * cached when it started.
 *
 * - Refilled clear (deterministic): the test links with
 *   -Wl,--wrap=kvpi_sys_free, and every buffer the clear gives back to the
 *   system is followed, in the same thread, by a free of a new buffer into
 *   the cache: the worst interleaving of a freeing thread.  The clear must
 *   give back exactly the N buffers cached at its start (before the fix it
 *   went on taking the refills until the test's supply ran out).
 * - Racing clear: a thread allocates and frees without pause while the main
 *   thread clears; every clear returns.
 * - Quiescent clear: nothing is left cached.
 */
#include <kvpool/bufcache.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "lib/testing/fault.h"
#include "tests/testutil.h"

#define N   64
#define CAP 4096

void __real_kvpi_sys_free(void *p);

/* The refill: set by the test around one clear. */
static kvp_bufcache *refill_cache;
static void *refill[N];
static size_t refill_cap[N];
static int n_refill, n_sys_frees;

void __wrap_kvpi_sys_free(void *p)
{
	__real_kvpi_sys_free(p);
	if (!refill_cache || !p)
		return;
	n_sys_frees++;
	if (n_refill > 0) {
		n_refill--;
		kvp_bufcache_free(refill_cache, refill[n_refill], refill_cap[n_refill]);
	}
}

static kvp_bufcache_stats stats(kvp_bufcache *c)
{
	kvp_bufcache_stats s;

	CHECK_EQ(kvp_bufcache_get_stats(c, &s), KVP_OK);
	return s;
}

static void test_refilled_clear_is_bounded(void)
{
	kvp_bufcache *c;
	void *p[N];
	size_t cap[N];
	int i;

	CHECK_EQ(kvp_bufcache_create((size_t)4 * N * CAP, &c), KVP_OK);
	for (i = 0; i < N; i++) {
		CHECK((p[i] = kvp_bufcache_alloc(c, CAP, &cap[i])) != NULL);
		CHECK((refill[i] = kvp_bufcache_alloc(c, CAP, &refill_cap[i])) != NULL);
	}
	for (i = 0; i < N; i++)
		kvp_bufcache_free(c, p[i], cap[i]);
	CHECK_EQ(stats(c).cached_buffers, N);

	n_refill = N;
	n_sys_frees = 0;
	refill_cache = c;
	kvp_bufcache_clear(c);
	refill_cache = NULL;
	/* the N buffers of the start went back; the N refills stay cached */
	CHECK_EQ(n_sys_frees, N);
	CHECK_EQ(n_refill, 0);
	CHECK_EQ(stats(c).cached_buffers, N);

	kvp_bufcache_clear(c);
	CHECK_EQ(stats(c).cached_buffers, 0);
	CHECK_EQ(kvp_bufcache_cached_bytes(c), 0);
	kvp_bufcache_destroy(c);
}

static atomic_bool stop;
static atomic_long churned;

static void *churn(void *arg)
{
	kvp_bufcache *c = arg;
	uint64_t seed = 7;

	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		size_t got, want = 256 + (size_t)(tu_rand(&seed) % 8) * 1024;
		void *b = kvp_bufcache_alloc(c, want, &got);
		CHECK(b != NULL);
		kvp_bufcache_free(c, b, got);
		atomic_fetch_add_explicit(&churned, 1, memory_order_relaxed);
	}
	return NULL;
}

static void test_clear_racing_frees_returns(void)
{
	kvp_bufcache *c;
	pthread_t t[2];
	int i;

	CHECK_EQ(kvp_bufcache_create((size_t)1 << 20, &c), KVP_OK);
	atomic_store(&stop, false);
	atomic_store(&churned, 0);
	for (i = 0; i < 2; i++)
		CHECK_EQ(pthread_create(&t[i], NULL, churn, c), 0);
	/* clears overlap at least 20000 alloc/free pairs of the other threads */
	for (i = 0; i < 2000 || atomic_load(&churned) < 20000; i++)
		kvp_bufcache_clear(c);
	atomic_store(&stop, true);
	for (i = 0; i < 2; i++)
		CHECK_EQ(pthread_join(t[i], NULL), 0);
	kvp_bufcache_clear(c);
	CHECK_EQ(stats(c).cached_buffers, 0);
	CHECK_EQ(kvp_bufcache_cached_bytes(c), 0);
	CHECK_EQ(stats(c).bytes_in_use, 0);
	kvp_bufcache_destroy(c);
}

int main(void)
{
	RUN(test_refilled_clear_is_bounded);
	RUN(test_clear_racing_frees_returns);
	return 0;
}
