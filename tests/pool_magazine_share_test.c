/*
 * tests/pool_magazine_share_test.c - the threads' magazines together park at
 * most a quarter of a stream (white-box).
 *
 * A magazine grows by demand up to thread_cache, and no further than a
 * quarter of its stream's blocks shared among the threads that have used
 * the pool (lib/pool/pool_blocks.c, mag_grow).  Four threads each take a
 * quarter of a one-stream pool as one request and give it back with
 * kvp_free_all, several rounds: with a quarter of the stream for each
 * magazine (the rule before) their magazines held the whole pool, and a
 * pool near exhaustion drained them, a membarrier each time.  Here each
 * magazine's room stays within its share and all of them together hold at
 * most a quarter of the stream; every request still succeeds (the rest
 * waits on the global stack, never lost).
 */
#include <kvpool/kvpool.h>

#include <pthread.h>

#include "lib/testing/pool_peek.h"
#include "tests/testutil.h"

#define THREADS 4u
#define N       4096u /* blocks, one stream */
#define ROUNDS  20u

static kvp_pool *pool;
static pthread_barrier_t all_in, all_done, all_checked;

static void *worker(void *arg)
{
	kvp_owner owner = 100 + (kvp_owner)(uintptr_t)arg;
	static _Thread_local kvp_ref refs[N / THREADS];
	size_t n;
	/* Every thread makes its slot first, so each sizing sees all four. */
	CHECK_EQ(kvp_allocate(pool, KVP_KV, 1, owner, KVP_FP16, refs, 1, &n), KVP_OK);
	CHECK_EQ(kvp_free_all(pool, owner), KVP_OK);
	pthread_barrier_wait(&all_in);
	for (unsigned r = 0; r < ROUNDS; r++) {
		/* A quarter of the pool each: all four fit at once, always. */
		CHECK_EQ(kvp_allocate(pool, KVP_KV, (N / THREADS) * 16, owner, KVP_FP16, refs,
		                      N / THREADS, &n),
		         KVP_OK);
		CHECK_EQ(n, N / THREADS);
		CHECK_EQ(kvp_free_all(pool, owner), KVP_OK);
	}
	pthread_barrier_wait(&all_done);
	pthread_barrier_wait(&all_checked); /* stay alive: the slots stay taken */
	return NULL;
}

static void test_magazines_share_a_quarter(void)
{
	kvp_pool_config c;
	kvp_pool_config_init(&c);
	c.block_size = 16;
	c.n_blocks = N;
	c.separate_kv = false;
	CHECK_EQ(kvp_pool_create(&c, &pool), KVP_OK);
	pthread_barrier_init(&all_in, NULL, THREADS);
	pthread_barrier_init(&all_done, NULL, THREADS + 1);
	pthread_barrier_init(&all_checked, NULL, THREADS + 1);
	pthread_t th[THREADS];
	for (uintptr_t t = 0; t < THREADS; t++)
		CHECK_EQ(pthread_create(&th[t], NULL, worker, (void *)t), 0);
	/* The workers are done with their rounds and out of every call. */
	pthread_barrier_wait(&all_done);
	struct kvp_pool *p = pool;
	uint64_t parked = 0, slots = 0;
	uint32_t share = N / (4 * THREADS);
	for (struct kvpi_tslot *s = atomic_load(&p->slots); s; s = s->next) {
		parked += atomic_load(&s->mag[0].count);
		slots++;
		CHECK(s->mag[0].cap <= (share > KVPI_MAG_INITIAL ? share : KVPI_MAG_INITIAL));
	}
	CHECK_EQ(slots, THREADS);
	CHECK(parked <= N / 4);
	CHECK_EQ(kvp_n_free(pool, KVP_KV), N);
	pthread_barrier_wait(&all_checked);
	for (unsigned t = 0; t < THREADS; t++)
		pthread_join(th[t], NULL);
	pthread_barrier_destroy(&all_in);
	pthread_barrier_destroy(&all_done);
	pthread_barrier_destroy(&all_checked);
	kvp_pool_destroy(pool);
}

int main(void)
{
	RUN(test_magazines_share_a_quarter);
	return 0;
}
