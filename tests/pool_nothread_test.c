/*
 * tests/pool_nothread_test.c - the pool never needs a helper thread.
 *
 * A pool whose block table outgrows its first segment, grows, shrinks and
 * serves calls while every pthread_create in the process fails: nothing in
 * the pool may depend on a thread it would have to start (liburcu's
 * call_rcu worker, started by the first call_rcu, aborts the process with
 * "Unrecoverable error" when its creation fails).  The test replaces
 * pthread_create for the whole process (the dynamic linker binds the
 * shared libraries' calls to this definition), so it runs in the plain
 * build only: ASan and TSan define pthread_create themselves.  A pool
 * with the prefix cache, which does need liburcu's threads, must fail to
 * be created with KVP_ENOMEM rather than abort.
 */
#include <kvpool/kvpool.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>

#include "tests/testutil.h"

static _Atomic int create_calls;

/* Every thread creation in this process fails, as under an address-space
 * or thread limit. */
int pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
	(void)t;
	(void)attr;
	(void)fn;
	(void)arg;
	atomic_fetch_add(&create_calls, 1);
	return EAGAIN;
}

/* Created past 16,384 blocks, grown far past it, shrunk: all succeed. */
static void test_large_pool_without_threads(void)
{
	kvp_pool_config c;
	kvp_pool *p = NULL;
	kvp_pool_config_init(&c);
	c.block_size = 16;
	c.n_blocks = 20000;
	c.grow_on_exhaustion = true;
	CHECK_EQ(kvp_pool_create(&c, &p), KVP_OK);
	static kvp_ref r[65536];
	size_t n;
	/* 20000 + 40000 blocks: growth segments 0..5 made on demand. */
	CHECK_EQ(kvp_allocate(p, KVP_K, 16 * 30000, 1, KVP_FP16, r, 65536, &n), KVP_OK);
	CHECK_EQ(n, 30000);
	CHECK_EQ(kvp_allocate(p, KVP_V, 16 * 30000, 2, KVP_FP16, r, 65536, &n), KVP_OK);
	kvp_ref raw;
	CHECK_EQ(kvp_alloc_block(p, KVP_K, KVP_FP32, &raw), KVP_OK);
	CHECK_EQ(kvp_free_block(p, raw), KVP_OK);
	CHECK_EQ(kvp_free_all(p, 1), KVP_OK);
	CHECK_EQ(kvp_free_all(p, 2), KVP_OK);
	uint32_t k = 0;
	CHECK_EQ(kvp_shrink(p, KVP_K, 100, &k), KVP_OK);
	CHECK(k > 0);
	CHECK_EQ(kvp_n_free(p, KVP_K), 100);
	kvp_stats s;
	CHECK_EQ(kvp_pool_stats(p, &s), KVP_OK);
	CHECK_EQ(kvp_stats_blocks_in_use(&s), 0);
	kvp_pool_destroy(p);
	/* Nothing even tried to start a thread. */
	CHECK_EQ(atomic_load(&create_calls), 0);
}

/* A prefix-cache pool needs liburcu's worker threads (its key index): it
 * starts them at create, so with no thread to be had create fails with
 * KVP_ENOMEM, and leaves nothing behind, instead of liburcu aborting the
 * process (as it did from cds_lfht_new or the first call_rcu). */
static void test_prefix_pool_create_fails_cleanly(void)
{
	kvp_pool_config c;
	kvp_pool *p = (kvp_pool *)&c;
	kvp_pool_config_init(&c);
	c.prefix_cache = true;
	int before = atomic_load(&create_calls);
	CHECK_EQ(kvp_pool_create(&c, &p), KVP_ENOMEM);
	CHECK(p == NULL);
	CHECK(atomic_load(&create_calls) > before); /* it did try */
	/* A plain pool is still fine. */
	c.prefix_cache = false;
	CHECK_EQ(kvp_pool_create(&c, &p), KVP_OK);
	kvp_ref r;
	CHECK_EQ(kvp_alloc_block(p, KVP_K, KVP_FP16, &r), KVP_OK);
	CHECK_EQ(kvp_free_block(p, r), KVP_OK);
	kvp_pool_destroy(p);
}

int main(void)
{
	RUN(test_large_pool_without_threads);
	RUN(test_prefix_pool_create_fails_cleanly);
	return 0;
}
