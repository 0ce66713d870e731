/*
 * tests/storage_slotless_test.c - a storage write by a thread that gets no
 * thread slot never waits for the pool while it holds a block's slot lock.
 *
 * The cycle from the review of e4e5a8f: a writer holding a slot lock calls
 * kvp_block_set_used, which (no thread slot: allocation failed) waits for
 * the pool's fallback-slot mutex; the fallback holder waits for grow_lock;
 * kvp_shrink holds grow_lock and its storage retire hook spins on that slot
 * lock.  Here the main thread plays both the fallback holder (it takes the
 * fallback mutex itself, white-box) and the shrink: before the fix the
 * shrink spins forever (the test times out); after it, the writer has let
 * the slot lock go before it reaches the pool's mutex.
 */
#include <kvpool/kvpool.h>

#include <pthread.h>
#include <sched.h>

#include "lib/testing/pool_peek.h"
#include "lib/testing/fault.h"
#include "tests/testutil.h"

#define ROW 4

static kvp_pool *pool;
static kvp_storage *st;
static kvp_ref ref;
static int write_rc = -100;

static void *writer(void *arg)
{
	float rows[2 * ROW] = {1, 2, 3, 4, 5, 6, 7, 8};

	(void)arg;
	/* rows 1..2 of a block with n_used 1: the write must raise n_used,
	 * and this thread's first pool call cannot get a thread slot */
	write_rc = kvp_storage_write(st, ref, 1, rows, 2);
	return NULL;
}

static void test_slotless_write_vs_shrink(void)
{
	kvp_pool_config pc;
	kvp_block_info info;
	float row[ROW] = {0};
	pthread_t w;
	unsigned long base;
	uint32_t n_retired = 0;

	kvp_pool_config_init(&pc);
	pc.block_size = 4;
	pc.n_blocks = 4;
	pc.separate_kv = false;
	CHECK_EQ(kvp_pool_create(&pc, &pool), KVP_OK);
	CHECK_EQ(kvp_storage_create(pool, ROW, NULL, &st), KVP_OK);
	CHECK_EQ(kvp_alloc_block(pool, KVP_KV, KVP_FP32, &ref), KVP_OK);
	CHECK_EQ(kvp_block_set_used(pool, ref, 0), KVP_OK);
	/* the block's table segment and buffer exist: the writer allocates nothing */
	CHECK_EQ(kvp_storage_write(st, ref, 0, row, 1), KVP_OK);

	pthread_mutex_lock(&pool->fallback_lock);
	base = kvpi_fault_injected();
	kvpi_fault_inject(0, -1);
	CHECK_EQ(pthread_create(&w, NULL, writer, NULL), 0);
	/* the writer's first thread-slot allocation failed: it is on its way
	 * to the fallback mutex, which we hold */
	while (kvpi_fault_injected() == base)
		sched_yield();
	kvpi_fault_inject(0, 0);

	/* the block's owner frees it and a shrink retires it: the retire hook
	 * takes the block's slot lock under grow_lock */
	CHECK_EQ(kvp_free_block(pool, ref), KVP_OK);
	CHECK_EQ(kvp_shrink(pool, KVP_KV, 0, &n_retired), KVP_OK);
	CHECK(n_retired >= 1);
	CHECK_EQ(kvp_block_get(pool, ref, &info), KVP_ENOENT); /* retired */
	CHECK_EQ(kvp_storage_resident_bytes(st), 0);

	pthread_mutex_unlock(&pool->fallback_lock);
	CHECK_EQ(pthread_join(w, NULL), 0);
	/* validated while the block was in use, rows stored before the free:
	 * the write took effect; n_used of the retired block is moot */
	CHECK_EQ(write_rc, KVP_OK);

	kvp_storage_destroy(st);
	kvp_pool_destroy(pool);
}

/* The write's n_used rule after the change: raised to cover it, never lowered. */
static void test_write_raises_n_used_only(void)
{
	kvp_pool_config pc;
	kvp_block_info info;
	float rows[3 * ROW] = {0};
	kvp_ref r, stale;

	kvp_pool_config_init(&pc);
	pc.block_size = 4;
	pc.n_blocks = 4;
	pc.separate_kv = false;
	CHECK_EQ(kvp_pool_create(&pc, &pool), KVP_OK);
	CHECK_EQ(kvp_storage_create(pool, ROW, NULL, &st), KVP_OK);
	CHECK_EQ(kvp_alloc_block(pool, KVP_KV, KVP_FP32, &r), KVP_OK);
	CHECK_EQ(kvp_block_set_used(pool, r, 0), KVP_OK);
	CHECK_EQ(kvp_storage_write(st, r, 0, rows, 3), KVP_OK);
	CHECK_EQ(kvp_block_get(pool, r, &info), KVP_OK);
	CHECK_EQ(info.n_used, 3);
	CHECK_EQ(kvp_storage_write(st, r, 0, rows, 1), KVP_OK);
	CHECK_EQ(kvp_block_get(pool, r, &info), KVP_OK);
	CHECK_EQ(info.n_used, 3);
	CHECK_EQ(kvp_storage_write(st, r, 2, rows, 2), KVP_OK);
	CHECK_EQ(kvp_block_get(pool, r, &info), KVP_OK);
	CHECK_EQ(info.n_used, 4);
	/* a stale ref: KVP_ENOENT, nothing changes for the block's next holder */
	stale = r;
	CHECK_EQ(kvp_free_block(pool, r), KVP_OK);
	CHECK_EQ(kvp_alloc_block(pool, KVP_KV, KVP_FP32, &r), KVP_OK);
	CHECK_EQ(KVP_REF_ID(r), KVP_REF_ID(stale));
	CHECK_EQ(kvp_block_set_used(pool, r, 1), KVP_OK);
	CHECK_EQ(kvp_storage_write(st, stale, 0, rows, 3), KVP_ENOENT);
	CHECK_EQ(kvp_block_get(pool, r, &info), KVP_OK);
	CHECK_EQ(info.n_used, 1);
	kvp_storage_destroy(st);
	kvp_pool_destroy(pool);
}

int main(void)
{
	RUN(test_slotless_write_vs_shrink);
	RUN(test_write_raises_n_used_only);
	return 0;
}
