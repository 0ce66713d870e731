/*
 * tests/pool_bias_test.c - which calls bias an owner record and which revoke.
 *
 * White-box: it reads the record's 'bias' and 'revokes' fields
 * (lib/pool/owner.h) between calls, with every other thread joined.
 *   - kvp_register_owner leaves the record unbiased, so a worker thread
 *     allocating for an owner a scheduler thread registered pays no
 *     revocation (a membarrier per request before);
 *   - the first allocate biases it to the allocating thread;
 *   - kvp_blocks_for revokes only a record biased to another thread, and
 *     never one that is unbiased or biased to the caller;
 *   - raw blocks: in the asymmetric mode a thread's raw blocks carry its
 *     slot, its own frees keep the slot's raw bias, another thread's free
 *     (or kvp_block_set_used) revokes it for good, after which new raw
 *     blocks carry no slot; kvp_block_get reports no owner for either.  In
 *     the fallback mode no slot is ever raw-biased;
 *   - an allocate that must drain other threads' magazines holds no owner
 *     shard lock while it waits for them: another thread can take the
 *     owner's shard lock meanwhile (it used to wait for the whole drain);
 *   - biased shards: a thread that makes and ends owners it minted gets
 *     its minted shard biased to its slot after KVPI_SHARD_REBIAS calls in
 *     a row; another thread's call on one of those owners revokes it (and
 *     sees the owner's blocks exactly); the next bias takes twice as many
 *     calls; a shard op changes the table without the lock (a locked mutex
 *     does not stop it); a prefix pool never biases a shard.
 */
#include <kvpool/kvpool.h>

#include <pthread.h>
#include <sched.h>
#include <string.h>

#include "lib/testing/pool_peek.h"
#include "tests/testutil.h"

static kvp_pool *P;

struct bias_view {
	uintptr_t bias;
	unsigned revokes;
};

/* The bias and revocation count of @owner's record (which must exist). */
static struct bias_view view(kvp_owner owner)
{
	struct kvpi_oshard *sh = kvpi_owners_shard(&P->owners, owner);
	pthread_mutex_lock(&sh->lock);
	struct kvpi_orec *r = kvpi_oshard_find(sh, owner);
	CHECK(r != NULL);
	struct bias_view v = {atomic_load_explicit(&r->bias, memory_order_relaxed), r->revokes};
	pthread_mutex_unlock(&sh->lock);
	return v;
}

static void *allocate_for(void *arg)
{
	kvp_ref r[2];
	size_t n;
	CHECK_EQ(kvp_allocate(P, KVP_KV, 32, (kvp_owner)(uintptr_t)arg, KVP_FP16, r, 2, &n),
	         KVP_OK);
	return NULL;
}

static void test_register_then_other_thread_allocates(void)
{
	CHECK_EQ(kvp_register_owner(P, 10), KVP_OK);
	struct bias_view v = view(10);
	CHECK_EQ(v.bias, 0); /* registering does not bias */
	pthread_t t;
	CHECK_EQ(pthread_create(&t, NULL, allocate_for, (void *)(uintptr_t)10), 0);
	CHECK_EQ(pthread_join(t, NULL), 0);
	v = view(10);
	CHECK(v.bias != 0);     /* the worker's allocate biased it to the worker */
	CHECK_EQ(v.revokes, 0); /* and nothing had to be revoked */

	/* Listing a record biased to another thread revokes once... */
	kvp_ref refs[4];
	size_t n;
	CHECK_EQ(kvp_blocks_for(P, 10, refs, 4, &n), KVP_OK);
	CHECK_EQ(n, 2);
	v = view(10);
	CHECK_EQ(v.bias, 0);
	CHECK_EQ(v.revokes, 1);
	/* ...and an unbiased one not at all. */
	CHECK_EQ(kvp_blocks_for(P, 10, refs, 4, &n), KVP_OK);
	CHECK_EQ(view(10).revokes, 1);
	CHECK_EQ(kvp_free_all(P, 10), KVP_OK); /* frees and releases it */
}

static void test_own_biased_owner_not_revoked(void)
{
	kvp_ref r[2];
	size_t n;
	CHECK_EQ(kvp_allocate(P, KVP_KV, 32, 20, KVP_FP16, r, 2, &n), KVP_OK);
	struct bias_view v0 = view(20);
	CHECK(v0.bias != 0); /* biased to this thread */
	kvp_ref refs[4];
	CHECK_EQ(kvp_blocks_for(P, 20, refs, 4, &n), KVP_OK);
	CHECK_EQ(n, 2);
	struct bias_view v = view(20);
	CHECK_EQ(v.bias, v0.bias); /* its own thread listed it: still biased */
	CHECK_EQ(v.revokes, 0);
	CHECK_EQ(kvp_free_all(P, 20), KVP_OK);
}

static kvp_ref raw_ref;

static void *free_raw_ref(void *arg)
{
	(void)arg;
	CHECK_EQ(kvp_free_block(P, raw_ref), KVP_OK);
	return NULL;
}

static void *set_raw_ref(void *arg)
{
	(void)arg;
	CHECK_EQ(kvp_block_set_used(P, raw_ref, 3), KVP_OK);
	return NULL;
}

static uint64_t owner_word(kvp_ref r)
{
	return atomic_load(&kvpi_bt_block(&P->bt, KVP_REF_ID(r))->owner);
}

static void raw_case(void *(*foreign)(void *))
{
	kvp_pool_config c;
	kvp_pool_config_init(&c);
	c.n_blocks = 64;
	kvp_pool *saved = P;
	CHECK_EQ(kvp_pool_create(&c, &P), KVP_OK);
	kvp_ref r;
	CHECK_EQ(kvp_alloc_block(P, KVP_K, KVP_FP16, &r), KVP_OK);
	struct kvpi_tslot *me = kvpi_tslot_get(P);
	kvpi_tslot_put(P, me);
	bool biased = P->asym;
	CHECK_EQ(atomic_load(&me->raw_bias), biased ? KVPI_RAW_BIASED : KVPI_RAW_REVOKED);
	CHECK_EQ(owner_word(r), biased ? (uint64_t)(uintptr_t)me : 0);
	kvp_block_info info;
	CHECK_EQ(kvp_block_get(P, r, &info), KVP_OK);
	CHECK_EQ(info.owner, 0);
	CHECK_EQ(kvp_free_block(P, r), KVP_OK); /* our own: the bias stays */
	CHECK_EQ(atomic_load(&me->raw_bias), biased ? KVPI_RAW_BIASED : KVPI_RAW_REVOKED);

	CHECK_EQ(kvp_alloc_block(P, KVP_K, KVP_FP16, &raw_ref), KVP_OK);
	pthread_t t;
	CHECK_EQ(pthread_create(&t, NULL, foreign, NULL), 0);
	CHECK_EQ(pthread_join(t, NULL), 0);
	CHECK_EQ(atomic_load(&me->raw_bias), KVPI_RAW_REVOKED); /* for good */
	if (foreign == set_raw_ref) {
		CHECK_EQ(kvp_block_get(P, raw_ref, &info), KVP_OK);
		CHECK_EQ(info.n_used, 3);
		CHECK_EQ(kvp_free_block(P, raw_ref), KVP_OK);
	}
	CHECK_EQ(kvp_free_block(P, raw_ref), KVP_OK); /* now stale */
	CHECK_EQ(kvp_alloc_block(P, KVP_K, KVP_FP16, &r), KVP_OK);
	CHECK_EQ(owner_word(r), 0); /* a revoked slot stamps no slot */
	CHECK_EQ(kvp_free_block(P, r), KVP_OK);
	kvp_stats st;
	CHECK_EQ(kvp_pool_stats(P, &st), KVP_OK);
	CHECK_EQ(st.n_allocations, 3);
	CHECK_EQ(st.n_frees, 3);
	CHECK_EQ(st.n_stale_frees, 1);
	CHECK_EQ(st.n_not_full, 0);
	kvp_pool_destroy(P);
	P = saved;
}

static void test_raw_bias_revoked_by_other_thread_free(void)
{
	raw_case(free_raw_ref);
}

static void test_raw_bias_revoked_by_other_thread_set_used(void)
{
	raw_case(set_raw_ref);
}

/* ---- a drain holds no shard lock ---- */

struct drain_case {
	kvp_pool *pool;
	pthread_barrier_t parked, release;
	kvp_ref got[64];
	uint32_t want; /* blocks: one more than the global stack holds */
	struct kvpi_tslot *parked_slot;
	int rc;
};

/* Fills its magazine with 8 free blocks, then stays alive (its slot taken). */
static void *park_full_magazine(void *arg)
{
	struct drain_case *d = arg;
	kvp_ref r[8];
	for (int i = 0; i < 8; i++)
		CHECK_EQ(kvp_alloc_block(d->pool, KVP_KV, KVP_FP16, &r[i]), KVP_OK);
	for (int i = 0; i < 8; i++)
		CHECK_EQ(kvp_free_block(d->pool, r[i]), KVP_OK);
	d->parked_slot = kvpi_tslot_get(d->pool);
	kvpi_tslot_put(d->pool, d->parked_slot);
	pthread_barrier_wait(&d->parked);
	pthread_barrier_wait(&d->release);
	return NULL;
}

/* Needs one block more than the global stack has: must drain the parked
 * thread's magazine. */
static void *allocate_needing_drain(void *arg)
{
	struct drain_case *d = arg;
	size_t n;
	d->rc = kvp_allocate(d->pool, KVP_KV, d->want * 16, 77, KVP_FP16, d->got, 64, &n);
	return NULL;
}

static void test_drain_holds_no_shard_lock(void)
{
	struct drain_case d;
	memset(&d, 0, sizeof(d));
	kvp_pool_config c;
	kvp_pool_config_init(&c);
	c.separate_kv = false;
	c.n_blocks = 64;
	c.block_size = 16;
	c.thread_cache = 8;
	CHECK_EQ(kvp_pool_create(&c, &d.pool), KVP_OK);
	pthread_barrier_init(&d.parked, NULL, 2);
	pthread_barrier_init(&d.release, NULL, 2);
	pthread_t parker, alloc;
	CHECK_EQ(pthread_create(&parker, NULL, park_full_magazine, &d), 0);
	pthread_barrier_wait(&d.parked);
	/* Pretend the parked thread is inside a call, so a drainer must wait
	 * for it to take the blocks cached in its magazine. */
	struct kvpi_tslot *ps = d.parked_slot;
	uint32_t cached = atomic_load(&ps->mag[0].count);
	CHECK(cached > 0);
	CHECK_EQ(kvp_n_free(d.pool, KVP_KV), 64);
	d.want = 64 - cached + 1;
	atomic_store(&ps->mag[0].in_call, 1);
	CHECK_EQ(pthread_create(&alloc, NULL, allocate_needing_drain, &d), 0);
	/* Wait until the allocate is draining (it raised starving)... */
	while (atomic_load(&d.pool->starving[0]) == 0)
		sched_yield();
	/* ...and take the owner's shard lock meanwhile: free, since the
	 * allocate takes it only after it has its blocks. */
	struct kvpi_oshard *sh = kvpi_owners_shard(&d.pool->owners, 77);
	CHECK_EQ(pthread_mutex_trylock(&sh->lock), 0);
	pthread_mutex_unlock(&sh->lock);
	atomic_store(&ps->mag[0].in_call, 0); /* the "call" ends: the drain goes on */
	CHECK_EQ(pthread_join(alloc, NULL), 0);
	CHECK_EQ(d.rc, KVP_OK);
	CHECK_EQ(kvp_free_all(d.pool, 77), KVP_OK);
	pthread_barrier_wait(&d.release);
	CHECK_EQ(pthread_join(parker, NULL), 0);
	CHECK_EQ(kvp_n_free(d.pool, KVP_KV), 64);
	pthread_barrier_destroy(&d.parked);
	pthread_barrier_destroy(&d.release);
	kvp_pool_destroy(d.pool);
}

/* --- biased shards ---------------------------------------------------- */

/* One request of a minted owner, made and ended here: @n blocks. */
static void mint_cycle(kvp_pool *p, uint32_t n)
{
	kvp_owner o;
	kvp_ref r[4];
	size_t got;
	CHECK_EQ(kvp_owner_new(p, &o), KVP_OK);
	CHECK_EQ(kvp_allocate(p, KVP_KV, 16 * n, o, KVP_FP16, r, 4, &got), KVP_OK);
	CHECK_EQ(got, n);
	CHECK_EQ(kvp_free_all(p, o), KVP_OK);
}

/* The minted shard of the calling thread's slot in @p. */
static struct kvpi_oshard *my_minted_shard(kvp_pool *p)
{
	kvp_owner o;
	CHECK_EQ(kvp_owner_new(p, &o), KVP_OK);
	return kvpi_owners_shard(&p->owners, o);
}

static uintptr_t shard_bias(struct kvpi_oshard *sh)
{
	return atomic_load_explicit(&sh->bias, memory_order_relaxed);
}

static kvp_owner listed_owner;
static size_t listed_n;

static void *list_owner(void *arg)
{
	kvp_ref r[4];
	(void)arg;
	CHECK_EQ(kvp_blocks_for(P, listed_owner, r, 4, &listed_n), KVP_OK);
	return NULL;
}

static void test_minted_shard_biased_and_revoked(void)
{
	struct kvpi_oshard *sh = my_minted_shard(P);
	struct kvpi_tslot *me = kvpi_tslot_get(P); /* this thread's own slot */
	CHECK(!kvpi_tslot_is_fallback(P, me));
	CHECK(sh >= &P->owners.shard[KVPI_MINTED_SHARD0]);
	CHECK_EQ(shard_bias(sh), 0);
	/* Each request is two locked calls (allocate, free_all) until then. */
	for (uint32_t i = 0; i < KVPI_SHARD_REBIAS / 2 - 1; i++)
		mint_cycle(P, 1 + i % 3);
	CHECK_EQ(shard_bias(sh), 0);
	mint_cycle(P, 2);
	CHECK_EQ(shard_bias(sh), (uintptr_t)me);
	CHECK_EQ(sh->revokes, 0);

	/* In a shard op the table changes without the lock: with the mutex
	 * held here, this thread still makes and ends its owners. */
	CHECK_EQ(pthread_mutex_lock(&sh->lock), 0);
	uint32_t n0 = sh->n;
	kvp_ref r[4];
	size_t got;
	CHECK_EQ(kvp_owner_new(P, &listed_owner), KVP_OK);
	CHECK_EQ(kvp_allocate(P, KVP_KV, 40, listed_owner, KVP_FP16, r, 4, &got), KVP_OK);
	CHECK_EQ(sh->n, n0 + 1);
	CHECK_EQ(pthread_mutex_unlock(&sh->lock), 0);

	/* Another thread lists the owner: the shard's bias is revoked. */
	pthread_t th;
	CHECK_EQ(pthread_create(&th, NULL, list_owner, NULL), 0);
	CHECK_EQ(pthread_join(th, NULL), 0);
	CHECK_EQ(listed_n, 3);
	CHECK_EQ(shard_bias(sh), 0);
	CHECK_EQ(sh->revokes, 1);
	CHECK_EQ(kvp_free_all(P, listed_owner), KVP_OK);

	/* Twice the streak for the next bias: that free_all was its first
	 * call, and 2 * KVPI_SHARD_REBIAS - 2 more leave it one short. */
	for (uint32_t i = 0; i < KVPI_SHARD_REBIAS - 1; i++)
		mint_cycle(P, 1);
	CHECK_EQ(shard_bias(sh), 0);
	mint_cycle(P, 1);
	CHECK_EQ(shard_bias(sh), (uintptr_t)me);
	CHECK_EQ(sh->n, n0);
}

static void test_prefix_pool_never_biases(void)
{
	kvp_pool_config c;
	kvp_pool *p;
	kvp_pool_config_init(&c);
	c.separate_kv = false;
	c.n_blocks = 64;
	c.prefix_cache = true;
	CHECK_EQ(kvp_pool_create(&c, &p), KVP_OK);
	struct kvpi_oshard *sh = my_minted_shard(p);
	/* kvp_blocks_for is a call both modes share, through the locking
	 * that counts the streak (kvpi_oshard_lock): 4 x the streak of them
	 * on this thread's minted owners would bias a plain pool's shard. */
	for (uint32_t i = 0; i < 4 * KVPI_SHARD_REBIAS; i++) {
		kvp_owner o;
		kvp_ref r[2];
		size_t got;
		CHECK_EQ(kvp_owner_new(p, &o), KVP_OK);
		CHECK_EQ(kvp_allocate(p, KVP_KV, 32, o, KVP_FP16, r, 2, &got), KVP_OK);
		CHECK_EQ(kvp_blocks_for(p, o, r, 2, &got), KVP_OK);
		CHECK_EQ(got, 2);
		CHECK_EQ(kvp_free_all(p, o), KVP_OK);
	}
	CHECK_EQ(shard_bias(sh), 0);
	CHECK_EQ(kvp_n_free(p, KVP_KV), 64);
	kvp_pool_destroy(p);
}

int main(void)
{
	kvp_pool_config c;
	kvp_pool_config_init(&c);
	c.separate_kv = false;
	c.n_blocks = 64;
	CHECK_EQ(kvp_pool_create(&c, &P), KVP_OK);
	RUN(test_register_then_other_thread_allocates);
	RUN(test_own_biased_owner_not_revoked);
	RUN(test_raw_bias_revoked_by_other_thread_free);
	RUN(test_raw_bias_revoked_by_other_thread_set_used);
	RUN(test_drain_holds_no_shard_lock);
	RUN(test_minted_shard_biased_and_revoked);
	RUN(test_prefix_pool_never_biases);
	CHECK_EQ(kvp_n_free(P, KVP_KV), 64);
	kvp_pool_destroy(P);
	return 0;
}
