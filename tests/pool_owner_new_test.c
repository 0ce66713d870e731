/*
 * tests/pool_owner_new_test.c - kvp_owner_new: fresh ids, homed at the
 * thread that made them, valid in every owner call from any thread.
 *
 * White-box where it checks the home: it asks the owner table
 * (lib/pool/owner.h) which shard an id lives in.
 *   - arguments: NULL pool or id is KVP_EINVAL, nothing written;
 *   - no id twice: threads mint at once, every id is new and carries the tag;
 *   - the home: a thread's ids share one shard, and threads alive at once
 *     get different shards; the record an allocate makes is in that shard;
 *   - a thread that could get no state of its own (every system allocation
 *     failing) still gets new ids, from the shared fallback state;
 *   - an id with the tag that a caller picked itself is an id like any
 *     other;
 *   - a race: threads make owners, allocate, pass some owners to other
 *     threads that extend, list and end them, free blocks one at a time;
 *     no block is ever held by two owners, and every block comes back.
 *     The home threads' minted shards are biased and revoked as it runs
 *     (lib/pool/owner.h, "Biased shards"; checked at the end).
 */
#include <kvpool/kvpool.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "lib/testing/fault.h"
#include "lib/testing/pool_peek.h"
#include "tests/testutil.h"

#define TAG 0xC5u

static kvp_pool *mkpool(uint32_t n_blocks, uint32_t thread_cache)
{
	kvp_pool_config c;
	kvp_pool *p = NULL;
	kvp_pool_config_init(&c);
	c.block_size = 16;
	c.n_blocks = n_blocks;
	c.separate_kv = true;
	c.thread_cache = thread_cache;
	CHECK_EQ(kvp_pool_create(&c, &p), KVP_OK);
	return p;
}

static void test_arguments(void)
{
	kvp_pool *p = mkpool(64, 8);
	kvp_owner o = 12345;
	CHECK_EQ(kvp_owner_new(NULL, &o), KVP_EINVAL);
	CHECK_EQ(o, 12345);
	CHECK_EQ(kvp_owner_new(p, NULL), KVP_EINVAL);
	CHECK_EQ(kvp_owner_new(p, &o), KVP_OK);
	CHECK_EQ(o >> 56, TAG);
	/* Not registered: the id is not active until something makes it so. */
	size_t n;
	CHECK_EQ(kvp_blocks_for(p, o, NULL, 0, &n), KVP_ENOENT);
	CHECK_EQ(kvp_register_owner(p, o), KVP_OK);
	CHECK_EQ(kvp_register_owner(p, o), KVP_EOWNER);
	CHECK_EQ(kvp_release_owner(p, o), KVP_OK);
	kvp_pool_destroy(p);
}

/* --- ids and their home ------------------------------------------------ */

#define MINT_THREADS 4
#define MINT_EACH    20000

static kvp_pool *P;
static pthread_barrier_t mint_bar;
static kvp_owner minted[MINT_THREADS][MINT_EACH];
static struct kvpi_oshard *home[MINT_THREADS];

static void *mint(void *arg)
{
	int t = (int)(intptr_t)arg;
	for (int i = 0; i < MINT_EACH; i++)
		CHECK_EQ(kvp_owner_new(P, &minted[t][i]), KVP_OK);
	home[t] = kvpi_owners_shard(&P->owners, minted[t][0]);
	for (int i = 1; i < MINT_EACH; i++)
		CHECK(kvpi_owners_shard(&P->owners, minted[t][i]) == home[t]);
	/* The record an allocate makes for one lives in that shard. */
	kvp_ref r[2];
	size_t n;
	kvp_owner o = minted[t][MINT_EACH / 2];
	CHECK_EQ(kvp_allocate(P, KVP_K, 20, o, KVP_FP16, r, 2, &n), KVP_OK);
	pthread_mutex_lock(&home[t]->lock);
	CHECK(kvpi_oshard_find(home[t], o) != NULL);
	pthread_mutex_unlock(&home[t]->lock);
	CHECK_EQ(kvp_free_all(P, o), KVP_OK);
	/* Stay alive until every thread has its home: they are alive at once. */
	pthread_barrier_wait(&mint_bar);
	return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static void test_ids_new_and_homed(void)
{
	P = mkpool(256, 8);
	pthread_t th[MINT_THREADS];
	CHECK_EQ(pthread_barrier_init(&mint_bar, NULL, MINT_THREADS), 0);
	for (int t = 0; t < MINT_THREADS; t++)
		CHECK_EQ(pthread_create(&th[t], NULL, mint, (void *)(intptr_t)t), 0);
	for (int t = 0; t < MINT_THREADS; t++)
		CHECK_EQ(pthread_join(th[t], NULL), 0);
	pthread_barrier_destroy(&mint_bar);
	for (int t = 0; t < MINT_THREADS; t++)
		for (int u = t + 1; u < MINT_THREADS; u++)
			CHECK(home[t] != home[u]);
	/* This thread's ids: a home of its own too (its slot is another). */
	kvp_owner mine;
	CHECK_EQ(kvp_owner_new(P, &mine), KVP_OK);
	static kvp_owner all[MINT_THREADS * MINT_EACH + 1];
	memcpy(all, minted, sizeof(minted));
	all[MINT_THREADS * MINT_EACH] = mine;
	size_t n = MINT_THREADS * MINT_EACH + 1;
	qsort(all, n, sizeof(all[0]), cmp_u64);
	for (size_t i = 0; i < n; i++) {
		CHECK_EQ(all[i] >> 56, TAG);
		if (i)
			CHECK(all[i] != all[i - 1]);
	}
	kvp_stats s;
	CHECK_EQ(kvp_pool_stats(P, &s), KVP_OK);
	CHECK_EQ(kvp_stats_blocks_in_use(&s), 0);
	kvp_pool_destroy(P);
}

/* A thread that gets no slot (no memory) mints from the fallback state. */
static kvp_owner fb_ids[3];
static int fb_rc[3];

static void *mint_without_memory(void *arg)
{
	(void)arg;
	kvpi_fault_inject(0, -1);
	for (int i = 0; i < 3; i++)
		fb_rc[i] = kvp_owner_new(P, &fb_ids[i]);
	kvpi_fault_inject(0, 0);
	return NULL;
}

static void test_ids_without_memory(void)
{
	P = mkpool(64, 8);
	kvp_owner a, b;
	CHECK_EQ(kvp_owner_new(P, &a), KVP_OK); /* this thread's slot */
	pthread_t th;
	CHECK_EQ(pthread_create(&th, NULL, mint_without_memory, NULL), 0);
	CHECK_EQ(pthread_join(th, NULL), 0);
	CHECK_EQ(kvp_owner_new(P, &b), KVP_OK);
	for (int i = 0; i < 3; i++) {
		CHECK_EQ(fb_rc[i], KVP_OK);
		CHECK_EQ(fb_ids[i] >> 56, TAG);
		CHECK(fb_ids[i] != a && fb_ids[i] != b);
		for (int j = 0; j < i; j++)
			CHECK(fb_ids[i] != fb_ids[j]);
	}
	CHECK(a != b);
	/* The fallback's ids work like any: allocate and end one here. */
	kvp_ref r[1];
	size_t n;
	CHECK_EQ(kvp_allocate(P, KVP_V, 16, fb_ids[1], KVP_FP16, r, 1, &n), KVP_OK);
	CHECK_EQ(kvp_free_all(P, fb_ids[1]), KVP_OK);
	kvp_pool_destroy(P);
}

/* A caller's own id with the tag: valid, its shard fixed by its bits. */
static void test_own_id_with_tag(void)
{
	kvp_pool *p = mkpool(64, 8);
	kvp_owner ids[] = {(uint64_t)TAG << 56, UINT64_C(0xC5FFFFFFFFFFFFFF),
	                   UINT64_C(0xC5000000000000FF), UINT64_C(0xC512340000000001)};
	kvp_ref r[4];
	size_t n;
	for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
		CHECK_EQ(kvp_allocate(p, KVP_K, 40, ids[i], KVP_FP16, r, 4, &n), KVP_OK);
		CHECK_EQ(n, 3);
	}
	for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
		CHECK_EQ(kvp_blocks_for(p, ids[i], r, 4, &n), KVP_OK);
		CHECK_EQ(n, 3);
		CHECK_EQ(kvp_register_owner(p, ids[i]), KVP_EOWNER);
		CHECK_EQ(kvp_free_all(p, ids[i]), KVP_OK);
		CHECK_EQ(kvp_free_all(p, ids[i]), KVP_ENOENT);
	}
	CHECK_EQ(kvp_n_free(p, KVP_K), 32); /* half of the 64: separate_kv */
	kvp_pool_destroy(p);
}

/* --- the race -------------------------------------------------------- */

#define RACE_THREADS 8
#define RACE_BLOCKS  8192 /* each stream's */
#define RACE_MAX     24   /* blocks a call */
#define MAILBOXES    16

static _Atomic uint64_t held_by[2 * RACE_BLOCKS]; /* the owner holding each block id, or 0 */
static _Atomic uint64_t mailbox[MAILBOXES];       /* owners passed between threads, or 0 */
static int race_rounds;

/* Mark @n blocks as @o's: a block some owner already holds fails the test. */
static void take(const kvp_ref *r, size_t n, kvp_owner o)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t exp = 0;
		CHECK(KVP_REF_ID(r[i]) < 2 * RACE_BLOCKS);
		CHECK(atomic_compare_exchange_strong(&held_by[KVP_REF_ID(r[i])], &exp, o));
	}
}

/* Unmark blocks @o holds before they are freed. */
static void give(const kvp_ref *r, size_t n, kvp_owner o)
{
	for (size_t i = 0; i < n; i++) {
		kvp_block_info bi;
		CHECK_EQ(kvp_block_get(P, r[i], &bi), KVP_OK);
		CHECK(bi.in_use);
		CHECK_EQ(bi.owner, o);
		uint64_t exp = o;
		CHECK(atomic_compare_exchange_strong(&held_by[KVP_REF_ID(r[i])], &exp, 0));
	}
}

/* End @o from this thread: its list must be exactly what was marked. */
static void end_owner(kvp_owner o)
{
	static _Thread_local kvp_ref r[4 * RACE_MAX];
	size_t n;
	CHECK_EQ(kvp_blocks_for(P, o, r, 4 * RACE_MAX, &n), KVP_OK);
	give(r, n, o);
	CHECK_EQ(kvp_free_all(P, o), KVP_OK);
	CHECK_EQ(kvp_blocks_for(P, o, r, 4 * RACE_MAX, &n), KVP_ENOENT);
}

static void grab(kvp_owner o, uint64_t *rng)
{
	kvp_ref r[RACE_MAX];
	size_t n;
	kvp_stream st = tu_rand(rng) & 1 ? KVP_V : KVP_K;
	uint32_t tokens = 1 + (uint32_t)(tu_rand(rng) % (RACE_MAX * 16));
	CHECK_EQ(kvp_allocate(P, st, tokens, o, KVP_FP16, r, RACE_MAX, &n), KVP_OK);
	take(r, n, o);
	if (n > 1 && tu_rand(rng) % 4 == 0) { /* some go back one by one */
		give(r, 1, o);
		CHECK_EQ(kvp_free(P, r, 1), KVP_OK);
	}
}

static void *race(void *arg)
{
	uint64_t rng = 0x51ed + (uint64_t)(intptr_t)arg * 7919;
	for (int i = 0; i < race_rounds; i++) {
		kvp_owner o;
		CHECK_EQ(kvp_owner_new(P, &o), KVP_OK);
		grab(o, &rng);
		uint64_t dice = tu_rand(&rng) % 8;
		if (dice == 0) { /* hand it on; end whatever was there */
			uint64_t old = atomic_exchange(&mailbox[tu_rand(&rng) % MAILBOXES], o);
			if (old)
				end_owner(old);
		} else if (dice == 1) { /* take someone's, extend it, end it */
			uint64_t other = atomic_exchange(&mailbox[tu_rand(&rng) % MAILBOXES], 0);
			if (other) {
				grab(other, &rng);
				end_owner(other);
			}
			end_owner(o);
		} else {
			if (dice == 2)
				grab(o, &rng); /* extend it on its own thread */
			end_owner(o);
		}
	}
	return NULL;
}

static void test_race(void)
{
	P = mkpool(2 * RACE_BLOCKS, 64);
	const char *e = getenv("KVPOOL_RACE_ROUNDS");
	race_rounds = e ? atoi(e) : 4000;
	pthread_t th[RACE_THREADS];
	for (int t = 0; t < RACE_THREADS; t++)
		CHECK_EQ(pthread_create(&th[t], NULL, race, (void *)(intptr_t)t), 0);
	for (int t = 0; t < RACE_THREADS; t++)
		CHECK_EQ(pthread_join(th[t], NULL), 0);
	for (int m = 0; m < MAILBOXES; m++) {
		uint64_t o = atomic_exchange(&mailbox[m], 0);
		if (o)
			end_owner(o);
	}
	for (int b = 0; b < 2 * RACE_BLOCKS; b++)
		CHECK_EQ(atomic_load(&held_by[b]), 0);
	/* The race crossed biased shards: owners handed on were changed by
	 * other threads while their home thread made and ended its own in
	 * shard ops, so shards were biased and revoked along the way. */
	uint64_t revokes = 0;
	for (uint32_t i = KVPI_MINTED_SHARD0; i < KVPI_OWNER_SHARDS; i++)
		revokes += P->owners.shard[i].revokes;
	CHECK(revokes > 0);
	kvp_stats st;
	CHECK_EQ(kvp_pool_stats(P, &st), KVP_OK);
	CHECK_EQ(kvp_stats_blocks_in_use(&st), 0);
	CHECK_EQ(kvp_n_free(P, KVP_K), RACE_BLOCKS);
	CHECK_EQ(kvp_n_free(P, KVP_V), RACE_BLOCKS);
	kvp_pool_destroy(P);
}

int main(void)
{
	RUN(test_arguments);
	RUN(test_ids_new_and_homed);
	RUN(test_ids_without_memory);
	RUN(test_own_id_with_tag);
	RUN(test_race);
	return 0;
}
