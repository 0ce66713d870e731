/*
 * tests/prefix_private_race_test.c - private blocks raced by every writer
 * they may meet.
 *
 * A prefix pool hands an owned allocation's blocks out private
 * (lib/prefix/prefix_internal.h, "Private blocks"): their state word is
 * written with plain stores under the owner's shard mutex, never locked
 * or CASed.  So every writer of such a word must hold that mutex, and this
 * test runs them all at once on the same blocks, round after round.  Each
 * round allocates blocks for two owners, 1 and 0 (an owner id like any
 * other, and the owner word a raw block carries), then at once:
 *
 *   - the publisher publishes both owners' blocks, interleaved, under the
 *     round's keys (kvp_prefix_publish_many in one call, so it switches
 *     owner mutexes as it goes, or one by one), now and then with a
 *     block given twice or a ref of the previous round (stale, its block
 *     perhaps private to a new owner now);
 *   - the filler sets fills one token short and back (kvp_block_set_used)
 *     on this round's and the previous round's refs, and allocates and
 *     frees a raw block (kvp_alloc_block, kvp_free: a stamp with owner 0
 *     that holds no owner mutex);
 *   - the releaser frees one of owner 1's blocks by ref (kvp_free; refused
 *     when a match shares it), owner 0's by kvp_free_owned, then the rest
 *     of owner 1's (kvp_free_all);
 *   - the matcher matches the round's keys for its own owner, checks what
 *     it got and lets go.
 *
 * What must hold, whatever the interleaving:
 *   - no CAS ever expects a private state (kvpi_pfx_cas is wrapped): a
 *     lock or eviction CAS on a private word would race the owner's plain
 *     stores;
 *   - a block the matcher got is published, full (a publish needs a full
 *     block and a published block takes no fill change, so a fill store
 *     lost under a publish would show here) and held by two owners at most;
 *   - a fill set one short and then restored is restored: while it is
 *     short no publish takes it, and nothing else makes it full;
 *   - every call returns a status its contract allows, and kvp_block_get
 *     never shows a block in use with no holder (a release caching a
 *     private block keeps readers out as a lock does);
 *   - after each round every block is free or cached: none is lost, none
 *     is in use, and the pool's counts add up (no block counted not full:
 *     a fill change lost or counted twice would leave one).
 * A lost mutual exclusion shows as one of these, a block in use after the
 * round, or a ThreadSanitizer report.
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

#include "lib/testing/pool_peek.h"
#include "tests/prefix_testutil.h"

#define BS     4u
#define NB1    8u /* owner 1's blocks a round */
#define NB0    4u /* owner 0's */
#define NB     (NB1 + NB0)
#define POOL   64u
#define ROUNDS 1500

static kvp_pool *pool;
static kvp_ref refs[NB];  /* owner 1's, then owner 0's */
static kvp_ref old[NB];   /* the previous round's */
static kvp_hash keys[NB]; /* refs[i] is published under keys[i] */
static pthread_barrier_t go, done;
static _Atomic bool stop;
static _Atomic int private_cas; /* CASes that expected a private state */
static uint64_t seed;

bool __wrap_kvpi_pfx_cas(struct kvpi_block *b, uint64_t st, uint64_t nst)
{
	if (st & KVPI_ST_PRIVATE)
		atomic_fetch_add(&private_cas, 1);
	return __real_kvpi_pfx_cas(b, st, nst);
}

static void maybe_yield(uint64_t *s)
{
	if (tu_rand(s) % 4 == 0)
		sched_yield();
}

static bool publish_status_ok(int rc)
{
	return rc == KVP_OK || rc == KVP_EEXIST || rc == KVP_EINVAL || rc == KVP_ENOENT;
}

static void *publisher(void *arg)
{
	uint64_t s = seed ^ 0x11;
	(void)arg;
	for (;;) {
		pthread_barrier_wait(&go);
		if (atomic_load(&stop))
			return NULL;
		/* Owner 1's and owner 0's blocks interleaved; one slot now
		 * and then a duplicate or a stale ref. */
		kvp_ref r[NB];
		kvp_hash k[NB];
		int st[NB];
		for (uint32_t i = 0, a = 0, b = 0; i < NB; i++) {
			uint32_t j = i % 2 == 1 && b < NB0 ? NB1 + b++ : a++;
			r[i] = refs[j];
			k[i] = keys[j];
		}
		uint64_t x = tu_rand(&s);
		if (x % 4 == 0)
			r[x / 4 % NB] = r[x / 64 % NB];
		else if (x % 4 == 1)
			r[x / 4 % NB] = old[x / 64 % NB];
		maybe_yield(&s);
		if (tu_rand(&s) % 2) {
			size_t np;
			int rc = kvp_prefix_publish_many(pool, r, k, NB, st, &np);
			CHECK(rc == KVP_OK || rc == KVP_ENOMEM);
		} else {
			for (uint32_t i = 0; i < NB; i++) {
				st[i] = kvp_prefix_publish(pool, r[i], k[i]);
				maybe_yield(&s);
			}
		}
		for (uint32_t i = 0; i < NB; i++)
			CHECK(publish_status_ok(st[i]));
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
			uint64_t x = tu_rand(&s);
			kvp_ref r = x % 4 ? refs[x / 4 % NB] : old[x / 4 % NB];
			/* A consistent snapshot: in use means held. */
			kvp_block_info info;
			if (kvp_block_get(pool, r, &info) == KVP_OK && info.in_use)
				CHECK(info.n_holders >= 1);
			int rc = kvp_block_set_used(pool, r, BS - 1);
			CHECK(rc == KVP_OK || rc == KVP_EINVAL || rc == KVP_ENOENT);
			maybe_yield(&s);
			if (rc == KVP_OK) {
				/* Full again: while it is one short a publish is
				 * refused, and no other thread makes it full. */
				rc = kvp_block_set_used(pool, r, BS);
				CHECK(rc == KVP_OK || rc == KVP_ENOENT);
			}
			if (x % 8 == 0) {
				kvp_ref raw;
				CHECK_EQ(kvp_alloc_block(pool, KVP_KV, KVP_FP16, &raw), KVP_OK);
				maybe_yield(&s);
				CHECK_EQ(kvp_free(pool, &raw, 1), KVP_OK);
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
		uint32_t k = (uint32_t)(tu_rand(&s) % NB1);
		/* KVP_EINVAL: published and matched meanwhile (shared). */
		int rc = kvp_free(pool, &refs[k], 1);
		CHECK(rc == KVP_OK || rc == KVP_EINVAL);
		maybe_yield(&s);
		rc = kvp_free_owned(pool, 0, refs + NB1, NB0);
		CHECK(rc == KVP_OK || rc == KVP_ENOENT);
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
		for (uint32_t i = 0; i < NB; i++)
			old[i] = refs[i];
		CHECK_EQ(kvp_allocate(pool, KVP_KV, NB1 * BS, 1, KVP_FP16, refs, NB1, &got),
		         KVP_OK);
		CHECK_EQ(kvp_allocate(pool, KVP_KV, NB0 * BS, 0, KVP_FP16, refs + NB1, NB0, &got),
		         KVP_OK);
		/* Keys repeat across rounds now and then, so a publish meets
		 * cached blocks under its keys (KVP_EEXIST) and matches find
		 * earlier rounds' blocks. */
		uint64_t base = tu_rand(&s) % 16;
		for (uint32_t i = 0; i < NB; i++)
			keys[i] = (kvp_hash){base * 100 + i + 1, 0xabcdu};
		pthread_barrier_wait(&go);
		pthread_barrier_wait(&done);
		/* Whatever is left of owners 1 and 0 (a release that ran
		 * before a publish or a match let go still ran after it). */
		for (kvp_owner o = 0; o <= 1; o++) {
			int rc = kvp_free_all(pool, o);
			CHECK(rc == KVP_OK || rc == KVP_ENOENT);
		}
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
	CHECK_EQ(atomic_load(&private_cas), 0);
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
