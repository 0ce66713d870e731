/*
 * tests/prefix_private_race_test.c - private blocks raced by every writer
 * they may meet.
 *
 * A prefix pool hands an owned allocation's blocks out private
 * (lib/prefix/prefix_internal.h, "Private blocks"): their state word is
 * written with plain stores under the owner's shard mutex, not locked.  So
 * every writer of such a word must hold that mutex, and this test runs
 * them all at once on the same blocks, round after round:
 *
 *   - the publisher publishes the owner's blocks under the round's keys
 *     (kvp_prefix_publish_many, all in one call or one by one);
 *   - the filler sets the blocks' fill to one token short and back
 *     (kvp_block_set_used);
 *   - the releaser frees one block by ref (kvp_free; refused when a match
 *     shares it) and then the rest (kvp_free_all);
 *   - the matcher matches the round's keys for its own owner, checks what
 *     it got and lets go.
 *
 * What must hold, whatever the interleaving:
 *   - a block the matcher got is published, full (its fill is exactly the
 *     block size: a publish needs a full block and a published block
 *     takes no fill change, so a fill store lost under a publish would
 *     show here) and held by two owners at most;
 *   - every call returns a status its contract allows: set_used KVP_OK,
 *     KVP_EINVAL (published, or not full when a publish came first) or
 *     KVP_ENOENT (freed); a publish KVP_OK, KVP_EEXIST, KVP_EINVAL or
 *     KVP_ENOENT;
 *   - after each round every block is free or cached: none is lost, none
 *     is in use, and the pool's counts add up (no block counted not full:
 *     a fill change lost or counted twice would leave one).
 * A lost mutual exclusion (a lock CAS and a plain store on one word) shows
 * as a block in use after the round, a double free caught by the pool's
 * counts, or a ThreadSanitizer report.
 *
 * Run with the pool's seq_cst fallback protocols too (tests/BUILD).
 * KVP_RACE_SEED picks the random seed.
 */
#include <kvpool/kvpool.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include "tests/prefix_testutil.h"

#define BS     4u
#define NB     8u /* blocks a round */
#define POOL   64u
#define ROUNDS 1500

static kvp_pool *pool;
static kvp_ref refs[NB];
static kvp_hash keys[NB];
static pthread_barrier_t go, done;
static _Atomic bool stop;
static uint64_t seed;

static void maybe_yield(uint64_t *s)
{
	if (tu_rand(s) % 4 == 0)
		sched_yield();
}

static void *publisher(void *arg)
{
	uint64_t s = seed ^ 0x11;
	(void)arg;
	for (;;) {
		pthread_barrier_wait(&go);
		if (atomic_load(&stop))
			return NULL;
		int st[NB];
		size_t np;
		maybe_yield(&s);
		if (tu_rand(&s) % 2) {
			int rc = kvp_prefix_publish_many(pool, refs, keys, NB, st, &np);
			CHECK(rc == KVP_OK || rc == KVP_ENOMEM);
		} else {
			for (uint32_t i = 0; i < NB; i++) {
				st[i] = kvp_prefix_publish(pool, refs[i], keys[i]);
				maybe_yield(&s);
			}
		}
		for (uint32_t i = 0; i < NB; i++)
			CHECK(st[i] == KVP_OK || st[i] == KVP_EEXIST || st[i] == KVP_EINVAL ||
			      st[i] == KVP_ENOENT);
		pthread_barrier_wait(&done);
	}
}

static void *filler(void *arg)
{
	uint64_t s = seed ^ 0x22;
	(void)arg;
	for (;;) {
		pthread_barrier_wait(&go);
		if (atomic_load(&stop))
			return NULL;
		for (uint32_t k = 0; k < 2 * NB; k++) {
			uint32_t i = (uint32_t)(tu_rand(&s) % NB);
			int rc = kvp_block_set_used(pool, refs[i], BS - 1);
			CHECK(rc == KVP_OK || rc == KVP_EINVAL || rc == KVP_ENOENT);
			maybe_yield(&s);
			if (rc == KVP_OK) {
				/* Full again: while it is one short a publish is
				 * refused, and no other thread makes it full. */
				rc = kvp_block_set_used(pool, refs[i], BS);
				CHECK(rc == KVP_OK || rc == KVP_ENOENT);
			}
		}
		pthread_barrier_wait(&done);
	}
}

static void *releaser(void *arg)
{
	uint64_t s = seed ^ 0x33;
	(void)arg;
	for (;;) {
		pthread_barrier_wait(&go);
		if (atomic_load(&stop))
			return NULL;
		maybe_yield(&s);
		uint32_t k = (uint32_t)(tu_rand(&s) % NB);
		/* KVP_EINVAL: published and matched meanwhile (shared). */
		int rc = kvp_free(pool, &refs[k], 1);
		CHECK(rc == KVP_OK || rc == KVP_EINVAL);
		maybe_yield(&s);
		rc = kvp_free_all(pool, 1);
		CHECK(rc == KVP_OK || rc == KVP_ENOENT);
		pthread_barrier_wait(&done);
	}
}

static void *matcher(void *arg)
{
	uint64_t s = seed ^ 0x44;
	(void)arg;
	for (;;) {
		pthread_barrier_wait(&go);
		if (atomic_load(&stop))
			return NULL;
		for (int t = 0; t < 3; t++) {
			kvp_ref got[NB];
			size_t m = 0;
			uint32_t from = (uint32_t)(tu_rand(&s) % NB);
			CHECK_EQ(kvp_prefix_match(pool, KVP_KV, KVP_FP16, &keys[from], NB - from, 2,
			                          got, NB, &m),
			         KVP_OK);
			for (size_t i = 0; i < m; i++) {
				kvp_block_info info;
				CHECK_EQ(kvp_block_get(pool, got[i], &info), KVP_OK);
				CHECK(info.published);
				CHECK_EQ(info.n_used, BS);
				CHECK(info.n_holders >= 1 && info.n_holders <= 2);
			}
			if (m)
				CHECK_EQ(kvp_free_all(pool, 2), KVP_OK);
			maybe_yield(&s);
		}
		pthread_barrier_wait(&done);
	}
}

static void test_private_writers_race(void)
{
	void *(*fns[])(void *) = {publisher, filler, releaser, matcher};
	enum { NT = sizeof(fns) / sizeof(fns[0]) };
	pthread_t th[NT];
	uint64_t s = seed;
	pool = tpx_pool(BS, POOL);
	CHECK_EQ(pthread_barrier_init(&go, NULL, NT + 1), 0);
	CHECK_EQ(pthread_barrier_init(&done, NULL, NT + 1), 0);
	for (int t = 0; t < NT; t++)
		CHECK_EQ(pthread_create(&th[t], NULL, fns[t], NULL), 0);
	for (int r = 0; r < ROUNDS; r++) {
		size_t got;
		CHECK_EQ(kvp_allocate(pool, KVP_KV, NB * BS, 1, KVP_FP16, refs, NB, &got), KVP_OK);
		CHECK_EQ(got, NB);
		/* Keys repeat across rounds now and then, so a publish meets
		 * cached blocks under its keys (KVP_EEXIST) and matches find
		 * earlier rounds' blocks. */
		uint64_t base = tu_rand(&s) % 16;
		for (uint32_t i = 0; i < NB; i++)
			keys[i] = (kvp_hash){base * 100 + i + 1, 0xabcdu};
		pthread_barrier_wait(&go);
		pthread_barrier_wait(&done);
		/* Whatever is left of owner 1 (a free_all that ran before the
		 * allocation's blocks were all published still ran after it). */
		int rc = kvp_free_all(pool, 1);
		CHECK(rc == KVP_OK || rc == KVP_ENOENT);
		CHECK_EQ(kvp_n_free(pool, KVP_KV), POOL);
		/* The counts agree: nothing in use, and no fill change lost
		 * or counted twice (a block one short counts as not full). */
		kvp_stats st;
		CHECK_EQ(kvp_pool_stats(pool, &st), KVP_OK);
		CHECK_EQ(kvp_stats_blocks_in_use(&st), 0);
		CHECK_EQ(st.n_not_full, 0);
		for (uint32_t i = 0; i < NB; i++) {
			kvp_block_info info;
			if (kvp_block_get(pool, refs[i], &info) == KVP_OK)
				CHECK(!info.in_use);
		}
	}
	atomic_store(&stop, true);
	pthread_barrier_wait(&go);
	for (int t = 0; t < NT; t++)
		CHECK_EQ(pthread_join(th[t], NULL), 0);
	pthread_barrier_destroy(&go);
	pthread_barrier_destroy(&done);
	kvp_pool_destroy(pool);
}

int main(void)
{
	seed = tpx_seed();
	RUN(test_private_writers_race);
	return 0;
}
