/*
 * tests/prefix_evict_test.c - the eviction order kvpool/prefix.h states for
 * several threads: exact within a shard, approximate across.
 *
 * test_per_thread_order: 4 threads each publish 32 blocks and cache them in
 * an order of their own (kvp_free one block at a time, shuffled), then all
 * evict at once (one-block allocations they keep) until 48 of the 128
 * cached blocks are gone.  Each thread's cached blocks sit on its home
 * shard in the order it cached them, and every eviction takes the oldest
 * block of some shard, so for every thread the blocks gone are exactly the
 * first ones it cached, whichever thread evicted them.
 *
 * test_idle_shard_ages: thread A caches 64 blocks and stays alive but idle;
 * 200 ms later thread B caches 64 and then evicts 16.  B's home shard is
 * not empty, but A's oldest block was cached more than the 20 ms window
 * before B's oldest, so every eviction of B takes the stream's oldest:
 * exactly A's first 16 blocks are gone, and none of B's.
 *
 * test_inherited_shard: thread C caches 16 blocks and stays alive; 150 ms
 * later thread A caches 16 more and exits; thread B, which has cached
 * nothing, then evicts 4.  B takes the slot A gave up, and with it A's home
 * shard, which is not empty.  But C's blocks are older than A's by more
 * than the window, so B's evictions take the stream's least recently
 * cached blocks: C's first 4, none of A's.
 *
 * test_local_batch_bound: the main thread B caches 1 block; 150 ms later
 * thread A caches 4; 150 ms later B caches 4 more.  Then B takes 3 blocks in
 * one call.  Its local batch takes its first block and stops at its next,
 * cached more than the window after A's oldest; the other two are A's
 * first two.  None of B's later blocks is gone.
 *
 * The pools have no per-thread caches (thread_cache 0), as kvpool/prefix.h
 * requires for "uncached first" across threads.  All run in the ASan and
 * TSan builds too (no timing is asserted but the 200 ms and 150 ms gaps, far
 * above the 20 ms window).
 */
#include <kvpool/kvpool.h>

#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>

#include "tests/prefix_testutil.h"

#define BS 4u

static kvp_pool *pool;

static kvp_hash key_of(int who, int round, int i)
{
	return tpx_key((uint32_t)who, (uint32_t)round, (uint32_t)i);
}

/* thread_cache 0: the exact cross-thread order below is the one
 * kvpool/prefix.h states for pools without per-thread caches (with them,
 * blocks a busy thread caches stay out of other threads' evictions). */
static void make_pool(uint32_t n_blocks)
{
	kvp_pool_config c;
	kvp_pool_config_init(&c);
	c.block_size = BS;
	c.n_blocks = n_blocks;
	c.separate_kv = false;
	c.prefix_cache = true;
	c.thread_cache = 0;
	CHECK_EQ(kvp_pool_create(&c, &pool), KVP_OK);
}

/* Whether @r is still the cached block it was (not evicted). */
static bool still_cached(kvp_ref r)
{
	kvp_block_info bi;
	return kvp_block_get(pool, r, &bi) == KVP_OK && !bi.in_use && bi.published;
}

/* Allocate @n blocks for @owner, publish them, and cache them one at a time
 * in a shuffled order, written to @order. */
static void cache_shuffled(kvp_owner owner, int who, int round, kvp_ref *order, int n,
                           uint64_t *rng)
{
	kvp_ref r[64];
	size_t got;
	CHECK(n <= 64);
	CHECK_EQ(kvp_allocate(pool, KVP_KV, (uint32_t)n * BS, owner, KVP_FP16, r, (size_t)n, &got),
	         KVP_OK);
	for (int i = 0; i < n; i++)
		CHECK_EQ(kvp_prefix_publish(pool, r[i], key_of(who, round, i)), KVP_OK);
	for (int i = n - 1; i > 0; i--) {
		int j = (int)(tu_rand(rng) % (uint64_t)(i + 1));
		kvp_ref t = r[i];
		r[i] = r[j];
		r[j] = t;
	}
	for (int i = 0; i < n; i++) {
		order[i] = r[i];
		CHECK_EQ(kvp_free(pool, &r[i], 1), KVP_OK);
	}
}

/* Evict @n cached blocks by one-block allocations kept by @owner. */
static void evict(kvp_owner owner, int n)
{
	for (int i = 0; i < n; i++) {
		kvp_ref r;
		size_t got;
		CHECK_EQ(kvp_allocate(pool, KVP_KV, BS, owner, KVP_FP16, &r, 1, &got), KVP_OK);
	}
}

/* The number of blocks of @order gone, checking that they are its first ones. */
static int gone_prefix(const kvp_ref *order, int n)
{
	int gone = 0;
	while (gone < n && !still_cached(order[gone]))
		gone++;
	for (int i = gone; i < n; i++)
		if (!still_cached(order[i])) {
			fprintf(stderr, "block %d of a caching order evicted, block %d kept\n", i,
			        gone);
			CHECK(0);
		}
	return gone;
}

/* --- test_per_thread_order ----------------------------------------------- */

#define PT_THREADS 4
#define PT_BLOCKS  32
#define PT_EVICT   12

struct pt_arg {
	pthread_barrier_t *bar;
	int t, round;
	kvp_ref order[PT_BLOCKS];
};

static void *pt_main(void *p)
{
	struct pt_arg *a = p;
	uint64_t rng = 0x1234567ull * (uint64_t)(a->t + 1) + (uint64_t)a->round;
	cache_shuffled(10 + (kvp_owner)a->t, a->t, a->round, a->order, PT_BLOCKS, &rng);
	pthread_barrier_wait(a->bar); /* everything cached before anyone evicts */
	evict(100 + (kvp_owner)a->t, PT_EVICT);
	return NULL;
}

static void test_per_thread_order(void)
{
	make_pool(PT_THREADS * PT_BLOCKS);
	for (int round = 0; round < 20; round++) {
		pthread_barrier_t bar;
		pthread_barrier_init(&bar, NULL, PT_THREADS);
		struct pt_arg a[PT_THREADS];
		pthread_t th[PT_THREADS];
		for (int t = 0; t < PT_THREADS; t++) {
			a[t] = (struct pt_arg){.bar = &bar, .t = t, .round = round};
			CHECK_EQ(pthread_create(&th[t], NULL, pt_main, &a[t]), 0);
		}
		for (int t = 0; t < PT_THREADS; t++)
			CHECK_EQ(pthread_join(th[t], NULL), 0);
		pthread_barrier_destroy(&bar);
		int total = 0;
		for (int t = 0; t < PT_THREADS; t++)
			total += gone_prefix(a[t].order, PT_BLOCKS);
		CHECK_EQ(total, PT_THREADS * PT_EVICT);
		for (int t = 0; t < PT_THREADS; t++)
			CHECK_EQ(kvp_free_all(pool, 100 + (kvp_owner)t), KVP_OK);
		CHECK_EQ(kvp_prefix_reset(pool), (size_t)(PT_THREADS * (PT_BLOCKS - PT_EVICT)));
	}
	kvp_pool_destroy(pool);
	pool = NULL;
}

/* --- test_idle_shard_ages ------------------------------------------------- */

#define IA_BLOCKS 64
#define IA_EVICT  16

struct ia_shared {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int stage; /* 1: A cached its blocks; 2: B is done, A may exit */
	kvp_ref a_order[IA_BLOCKS], b_order[IA_BLOCKS];
};

static void set_stage(struct ia_shared *sh, int stage)
{
	pthread_mutex_lock(&sh->mu);
	sh->stage = stage;
	pthread_cond_broadcast(&sh->cv);
	pthread_mutex_unlock(&sh->mu);
}

static void wait_stage(struct ia_shared *sh, int stage)
{
	pthread_mutex_lock(&sh->mu);
	while (sh->stage != stage)
		pthread_cond_wait(&sh->cv, &sh->mu);
	pthread_mutex_unlock(&sh->mu);
}

static void *ia_a_main(void *p)
{
	struct ia_shared *sh = p;
	uint64_t rng = 77;
	cache_shuffled(1, 1, 0, sh->a_order, IA_BLOCKS, &rng);
	set_stage(sh, 1);
	/* Stay alive (keeping our per-thread slot, so B gets another home
	 * shard) until B is done. */
	wait_stage(sh, 2);
	return NULL;
}

static void *ia_b_main(void *p)
{
	struct ia_shared *sh = p;
	uint64_t rng = 99;
	cache_shuffled(2, 2, 0, sh->b_order, IA_BLOCKS, &rng);
	evict(3, IA_EVICT);
	return NULL;
}

static void test_idle_shard_ages(void)
{
	make_pool(2 * IA_BLOCKS);
	struct ia_shared sh = {.stage = 0};
	pthread_mutex_init(&sh.mu, NULL);
	pthread_cond_init(&sh.cv, NULL);
	pthread_t a, b;
	CHECK_EQ(pthread_create(&a, NULL, ia_a_main, &sh), 0);
	wait_stage(&sh, 1);
	struct timespec gap = {0, 200 * 1000 * 1000};
	nanosleep(&gap, NULL);
	CHECK_EQ(pthread_create(&b, NULL, ia_b_main, &sh), 0);
	CHECK_EQ(pthread_join(b, NULL), 0);
	set_stage(&sh, 2);
	CHECK_EQ(pthread_join(a, NULL), 0);
	CHECK_EQ(gone_prefix(sh.a_order, IA_BLOCKS), IA_EVICT);
	CHECK_EQ(gone_prefix(sh.b_order, IA_BLOCKS), 0);
	pthread_cond_destroy(&sh.cv);
	pthread_mutex_destroy(&sh.mu);
	kvp_pool_destroy(pool);
	pool = NULL;
}

/* --- test_inherited_shard ------------------------------------------------ */

#define IS_BLOCKS 16
#define IS_EVICT  4

/* Thread C: cache IS_BLOCKS blocks (in sh->a_order), then stay alive until
 * stage 2, keeping its slot and so its home shard. */
static void *is_c_main(void *p)
{
	struct ia_shared *sh = p;
	uint64_t rng = 5;
	cache_shuffled(1, 1, 0, sh->a_order, IS_BLOCKS, &rng);
	set_stage(sh, 1);
	wait_stage(sh, 2);
	return NULL;
}

/* Thread A: cache IS_BLOCKS blocks (in sh->b_order), then exit. */
static void *is_a_main(void *p)
{
	struct ia_shared *sh = p;
	uint64_t rng = 6;
	cache_shuffled(2, 2, 0, sh->b_order, IS_BLOCKS, &rng);
	return NULL;
}

/* Thread B: evict IS_EVICT blocks. */
static void *is_b_main(void *p)
{
	(void)p;
	evict(3, IS_EVICT);
	return NULL;
}

static void test_inherited_shard(void)
{
	make_pool(2 * IS_BLOCKS);
	struct ia_shared sh = {.stage = 0};
	pthread_mutex_init(&sh.mu, NULL);
	pthread_cond_init(&sh.cv, NULL);
	pthread_t c, a, b;
	CHECK_EQ(pthread_create(&c, NULL, is_c_main, &sh), 0);
	wait_stage(&sh, 1);
	struct timespec gap = {0, 150 * 1000 * 1000};
	nanosleep(&gap, NULL);
	CHECK_EQ(pthread_create(&a, NULL, is_a_main, &sh), 0);
	CHECK_EQ(pthread_join(a, NULL), 0);
	/* B takes the slot A gave up at its exit, and with it A's home shard. */
	CHECK_EQ(pthread_create(&b, NULL, is_b_main, &sh), 0);
	CHECK_EQ(pthread_join(b, NULL), 0);
	set_stage(&sh, 2);
	CHECK_EQ(pthread_join(c, NULL), 0);
	CHECK_EQ(gone_prefix(sh.a_order, IS_BLOCKS), IS_EVICT);
	CHECK_EQ(gone_prefix(sh.b_order, IS_BLOCKS), 0);
	pthread_cond_destroy(&sh.cv);
	pthread_mutex_destroy(&sh.mu);
	kvp_pool_destroy(pool);
	pool = NULL;
}

/* --- test_local_batch_bound ---------------------------------------------- */

static kvp_ref lb_a[4];

static void *lb_a_main(void *p)
{
	uint64_t *rng = p;
	cache_shuffled(2, 2, 0, lb_a, 4, rng);
	return NULL;
}

static void test_local_batch_bound(void)
{
	make_pool(9);
	kvp_ref b_old[1], b_new[4];
	uint64_t rng = 17;
	struct timespec gap = {0, 150 * 1000 * 1000};
	cache_shuffled(1, 1, 0, b_old, 1, &rng);
	nanosleep(&gap, NULL);
	pthread_t a;
	CHECK_EQ(pthread_create(&a, NULL, lb_a_main, &rng), 0);
	CHECK_EQ(pthread_join(a, NULL), 0);
	nanosleep(&gap, NULL);
	cache_shuffled(1, 1, 1, b_new, 4, &rng);
	/* Three blocks in one call: the first batch is local and stops at
	 * B's blocks cached 150 ms after A's oldest; the rest are A's. */
	kvp_ref r[3];
	size_t got;
	CHECK_EQ(kvp_allocate(pool, KVP_KV, 3 * BS, 3, KVP_FP16, r, 3, &got), KVP_OK);
	CHECK_EQ(gone_prefix(b_old, 1), 1);
	CHECK_EQ(gone_prefix(lb_a, 4), 2);
	CHECK_EQ(gone_prefix(b_new, 4), 0);
	kvp_pool_destroy(pool);
	pool = NULL;
}

int main(void)
{
	RUN(test_per_thread_order);
	RUN(test_idle_shard_ages);
	RUN(test_inherited_shard);
	RUN(test_local_batch_bound);
	return 0;
}
