/*
 * tests/prefix_walk_test.c - an eviction's walk of an LRU shard: it ends, and
 * what it passes over.
 *
 * test_walk_ends: an evictor walks its shard under the shard's mutex and
 * moves each stale cached block (one a match took and let go since it was
 * listed) to the tail; a block it moved is met again further on.  If a match takes and
 * lets go of that block again in between, it is stale once more, and an
 * evictor that moved it again would walk forever: a walk must not move a
 * block twice.  This test makes that interleaving happen every time:
 *
 * The main thread caches two blocks, A and B, on its home shard, and a
 * helper thread takes and lets go of both (so both are stale).  The main
 * thread then allocates a block, which must evict.  Every CAS the evictor
 * makes on a block's state word is wrapped (-Wl,--wrap=kvpi_pfx_cas): before
 * it, the helper takes and lets go of the other block (the one the walk
 * moved last), so whenever the walk meets a block it moved, that block is
 * stale again.  The helper does so ADVERSARY_ROUNDS times at most.  The
 * shard mutex is taken with pthread_mutex_trylock first (lib/prefix/
 * prefix_lru.c, lru_lock), also wrapped: the CAS calls between two of them
 * are one walk's.  A walk visits each block of its list at most twice, so
 * it makes at most 4 CAS calls here; a walk that moves blocks again makes
 * one per round of the helper, and ends only when the helper stops.
 *
 * test_locked_block_passed_over: the one exception to "within a shard, in
 * order of caching time" that kvpool/prefix.h states.  Thread M's lookup
 * finds key K1 on block X and stops; X is evicted, published under K2 and
 * cached again, then Y is cached after it; M goes on and locks X to check
 * it (the CAS is wrapped: M stops again while it holds the lock), and an
 * eviction made meanwhile passes X over and takes Y, younger.  M then
 * sees X is K2's, a miss, and leaves X cached.
 */
#include <kvpool/kvpool.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "lib/testing/pool_peek.h"
#include "tests/prefix_testutil.h"

#define BS               4u
#define ADVERSARY_ROUNDS 200

int __real_pthread_mutex_trylock(pthread_mutex_t *m);
int __wrap_pthread_mutex_trylock(pthread_mutex_t *m);

static kvp_pool *pool;
static kvp_hash keys[2];
/* The state word of block A and B. */
static struct kvpi_block *words[2];
static _Thread_local bool trap;        /* main thread: during the evicting allocation */
static _Thread_local int walk_cas;     /* CAS calls since the last trylock */
static _Thread_local int max_walk_cas; /* the most in one walk */
/* Main -> helper: take and let go of block request - 1 (0: nothing to do). */
static _Atomic int request;
static _Atomic int rounds; /* helper rounds done */
static _Atomic bool stop;
/* test_locked_block_passed_over, thread M: stop after the lookup, and
 * after the CAS that locks the block; m_phase: 1 M found the node, 2 M may
 * lock, 3 M holds the lock, 4 M may go on. */
static _Thread_local bool stall_lookup, hold_lock;
static _Atomic int m_phase;

static void wait_phase(int ph)
{
	while (atomic_load(&m_phase) != ph)
		sched_yield();
}

uint32_t __wrap_kvpi_pfx_index_lookup(struct kvpi_prefix *pf, uint32_t stream, const kvp_hash *key)
{
	uint32_t n = __real_kvpi_pfx_index_lookup(pf, stream, key);
	if (stall_lookup && n != UINT32_MAX) {
		stall_lookup = false;
		atomic_store(&m_phase, 1);
		wait_phase(2);
	}
	return n;
}

int __wrap_pthread_mutex_trylock(pthread_mutex_t *m)
{
	if (trap)
		walk_cas = 0;
	return __real_pthread_mutex_trylock(m);
}

/* Ask the helper to make block @i stale again, and wait until it has. */
static void restale(int i)
{
	if (atomic_load(&rounds) >= ADVERSARY_ROUNDS)
		return;
	atomic_store(&request, i + 1);
	while (atomic_load(&request) != 0)
		sched_yield();
}

bool __wrap_kvpi_pfx_cas(struct kvpi_block *b, uint64_t st, uint64_t nst)
{
	if (trap) {
		if (++walk_cas > max_walk_cas)
			max_walk_cas = walk_cas;
		if (b == words[0] || b == words[1])
			restale(b == words[0] ? 1 : 0);
	}
	bool ok = __real_kvpi_pfx_cas(b, st, nst);
	if (hold_lock && ok) {
		hold_lock = false;
		atomic_store(&m_phase, 3);
		wait_phase(4);
	}
	return ok;
}

/* Take block @i by a match and let go of it: cached again, still listed
 * where it was, and stale. */
static void take_and_let_go(int i)
{
	kvp_ref r;
	size_t m;
	CHECK_EQ(kvp_prefix_match(pool, KVP_KV, KVP_FP16, &keys[i], 1, 7, &r, 1, &m), KVP_OK);
	CHECK_EQ(m, 1);
	CHECK_EQ(kvp_free(pool, &r, 1), KVP_OK);
}

static void *helper_main(void *unused)
{
	(void)unused;
	take_and_let_go(0);
	take_and_let_go(1);
	atomic_store(&request, -1); /* ready */
	while (!atomic_load(&stop)) {
		int q = atomic_load(&request);
		if (q <= 0) {
			sched_yield();
			continue;
		}
		take_and_let_go(q - 1);
		atomic_fetch_add(&rounds, 1);
		atomic_store(&request, 0);
	}
	return NULL;
}

static void test_walk_ends(void)
{
	pool = tpx_pool(BS, 2);
	kvp_ref r[2];
	size_t got;
	CHECK_EQ(kvp_allocate(pool, KVP_KV, 2 * BS, 1, KVP_FP16, r, 2, &got), KVP_OK);
	for (int i = 0; i < 2; i++) {
		keys[i] = (kvp_hash){0x1234u + (uint64_t)i, 0x5678u};
		CHECK_EQ(kvp_prefix_publish(pool, r[i], keys[i]), KVP_OK);
		words[i] = kvpi_bt_block(&pool->bt, KVP_REF_ID(r[i]));
	}
	CHECK(words[0] != words[1]);
	/* Cached on our home shard; every block of the pool is cached. */
	CHECK_EQ(kvp_free_all(pool, 1), KVP_OK);
	pthread_t h;
	CHECK_EQ(pthread_create(&h, NULL, helper_main, NULL), 0);
	while (atomic_load(&request) != -1)
		sched_yield();
	atomic_store(&request, 0);
	/* Both blocks stale: the allocation evicts one of them. */
	trap = true;
	kvp_ref e;
	CHECK_EQ(kvp_alloc_block(pool, KVP_KV, KVP_FP16, &e), KVP_OK);
	trap = false;
	atomic_store(&stop, true);
	CHECK_EQ(pthread_join(h, NULL), 0);
	printf("helper rounds %d, most CAS calls in one walk %d\n", atomic_load(&rounds),
	       max_walk_cas);
	CHECK(atomic_load(&rounds) > 0); /* the interleaving happened */
	CHECK(max_walk_cas <= 4);
	CHECK_EQ(kvp_free(pool, &e, 1), KVP_OK);
	kvp_pool_destroy(pool);
	pool = NULL;
}

/* --- test_locked_block_passed_over --------------------------------------- */

static kvp_hash key_n(uint64_t i)
{
	return (kvp_hash){0xabc0u + i, 0xdefu};
}

/* Thread M: match K1 (found, then stopped), expecting a miss. */
static void *m_main(void *out)
{
	kvp_hash k1 = key_n(1);
	kvp_ref r;
	stall_lookup = hold_lock = true;
	CHECK_EQ(kvp_prefix_match(pool, KVP_KV, KVP_FP16, &k1, 1, 1, &r, 1, (size_t *)out), KVP_OK);
	return NULL;
}

/* Allocate one block for owner 2 (evicting, on a full pool). */
static kvp_ref take_one(void)
{
	kvp_ref r;
	size_t got;
	CHECK_EQ(kvp_allocate(pool, KVP_KV, BS, 2, KVP_FP16, &r, 1, &got), KVP_OK);
	return r;
}

static void test_locked_block_passed_over(void)
{
	pool = tpx_pool(BS, 2);
	kvp_ref r[2];
	size_t got;
	CHECK_EQ(kvp_allocate(pool, KVP_KV, 2 * BS, 2, KVP_FP16, r, 2, &got), KVP_OK);
	CHECK_EQ(kvp_prefix_publish(pool, r[0], key_n(1)), KVP_OK);
	CHECK_EQ(kvp_free(pool, &r[0], 1), KVP_OK); /* X cached under K1 */
	size_t matched = 99;
	pthread_t m;
	CHECK_EQ(pthread_create(&m, NULL, m_main, &matched), 0);
	wait_phase(1); /* M found K1's node (X) */
	/* X evicted, published under K2 and cached again; then Y cached. */
	kvp_ref x = take_one();
	CHECK_EQ(KVP_REF_ID(x), KVP_REF_ID(r[0]));
	CHECK_EQ(kvp_prefix_publish(pool, x, key_n(2)), KVP_OK);
	CHECK_EQ(kvp_free(pool, &x, 1), KVP_OK);
	CHECK_EQ(kvp_prefix_publish(pool, r[1], key_n(3)), KVP_OK);
	CHECK_EQ(kvp_free(pool, &r[1], 1), KVP_OK);
	/* M locks X to check it; while it holds the lock, we evict one. */
	atomic_store(&m_phase, 2);
	wait_phase(3);
	kvp_ref e = take_one();
	atomic_store(&m_phase, 4);
	CHECK_EQ(pthread_join(m, NULL), 0);
	CHECK_EQ(matched, 0); /* X is K2's now: a miss */
	/* Y, cached after X, is gone; X, passed over, is still cached. */
	CHECK_EQ(KVP_REF_ID(e), KVP_REF_ID(r[1]));
	kvp_block_info bi;
	CHECK_EQ(kvp_block_get(pool, x, &bi), KVP_OK);
	CHECK(!bi.in_use && bi.published);
	CHECK_EQ(kvp_free(pool, &e, 1), KVP_OK);
	kvp_pool_destroy(pool);
	pool = NULL;
}

int main(void)
{
	RUN(test_walk_ends);
	RUN(test_locked_block_passed_over);
	return 0;
}
