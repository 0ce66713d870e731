/*
 * tests/prefix_walk_test.c - an eviction's walk of an LRU shard ends.
 *
 * An evictor walks its shard under the shard's mutex and moves each stale
 * cached block (one a match took and let go since it was listed) to the
 * tail; a block it moved is met again further on.  If a match takes and
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
 */
#include <kvpool/kvpool.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "tests/testutil.h"

#define BS               4u
#define ADVERSARY_ROUNDS 200

struct kvp_block;
bool __real_kvpi_pfx_cas(struct kvp_block *b, uint64_t st, uint64_t nst);
bool __wrap_kvpi_pfx_cas(struct kvp_block *b, uint64_t st, uint64_t nst);
int __real_pthread_mutex_trylock(pthread_mutex_t *m);
int __wrap_pthread_mutex_trylock(pthread_mutex_t *m);

static kvp_pool *pool;
static kvp_hash keys[2];
/* The state word of block A and B, learnt from the CAS of their publish. */
static struct kvp_block *words[2];
static _Thread_local int learn = -1;   /* main thread: the block being published */
static _Thread_local bool trap;        /* main thread: during the evicting allocation */
static _Thread_local int walk_cas;     /* CAS calls since the last trylock */
static _Thread_local int max_walk_cas; /* the most in one walk */
/* Main -> helper: take and let go of block request - 1 (0: nothing to do). */
static _Atomic int request;
static _Atomic int rounds; /* helper rounds done */
static _Atomic bool stop;

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

bool __wrap_kvpi_pfx_cas(struct kvp_block *b, uint64_t st, uint64_t nst)
{
	if (learn >= 0 && !words[learn])
		words[learn] = b;
	if (trap) {
		if (++walk_cas > max_walk_cas)
			max_walk_cas = walk_cas;
		if (b == words[0] || b == words[1])
			restale(b == words[0] ? 1 : 0);
	}
	return __real_kvpi_pfx_cas(b, st, nst);
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
	kvp_pool_config c;
	kvp_pool_config_init(&c);
	c.block_size = BS;
	c.n_blocks = 2;
	c.separate_kv = false;
	c.prefix_cache = true;
	CHECK_EQ(kvp_pool_create(&c, &pool), KVP_OK);
	kvp_ref r[2];
	size_t got;
	CHECK_EQ(kvp_allocate(pool, KVP_KV, 2 * BS, 1, KVP_FP16, r, 2, &got), KVP_OK);
	for (int i = 0; i < 2; i++) {
		keys[i] = (kvp_hash){0x1234u + (uint64_t)i, 0x5678u};
		learn = i;
		CHECK_EQ(kvp_prefix_publish(pool, r[i], keys[i]), KVP_OK);
	}
	learn = -1;
	CHECK(words[0] && words[1] && words[0] != words[1]);
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

int main(void)
{
	RUN(test_walk_ends);
	return 0;
}
