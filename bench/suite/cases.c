/*
 * bench/suite/cases.c - loops of the kvpool, mutex-pool and limit cases.
 *
 * The loops check every status: an unexpected one is reported with
 * kvb_fail() and ends the thread's run, so a figure is never made of
 * failed calls.
 */
#define _GNU_SOURCE
#include "bench/suite/cases.h"

#include <stdlib.h>

static atomic_uint_fast64_t next_owner = 1ull << 40;

kvp_owner kvb_new_owner(void)
{
	/* Relaxed: only uniqueness matters. */
	return atomic_fetch_add_explicit(&next_owner, 1, memory_order_relaxed);
}

typedef struct kvctx {
	kvp_pool *kv;
	mpool *mp;
	kvp_stream stream;
	unsigned k;
	bool free_all;
	bool minted; /* new-owner case: ids from kvp_owner_new */
} kvctx;

typedef struct kvtls {
	kvp_owner owner;
	bool registered;
	kvp_ref refs[KVB_MAX_BATCH];
} kvtls;

static void *kv_setup(void *ctx, int tid)
{
	kvctx *c = ctx;
	kvtls *t = calloc(1, sizeof(*t));

	(void)tid;
	if (!t) {
		kvb_fail("setup calloc", 0);
		return NULL;
	}
	t->owner = kvb_new_owner();
	if (!c->free_all) {
		int rc = c->kv ? kvp_register_owner(c->kv, t->owner)
		               : mpool_register_owner(c->mp, t->owner);
		if (rc != 0)
			kvb_fail("register owner", rc);
		t->registered = rc == 0;
	}
	return t;
}

static void kv_teardown(void *ctx, void *tls, int tid)
{
	kvctx *c = ctx;
	kvtls *t = tls;

	(void)tid;
	if (t && t->registered) {
		int rc = c->kv ? kvp_release_owner(c->kv, t->owner)
		               : mpool_release_owner(c->mp, t->owner);
		if (rc != 0)
			kvb_fail("release owner", rc);
	}
	free(t);
}

static uint64_t kv_run_full(void *ctx, void *tls, int tid, const atomic_int *stop)
{
	kvctx *c = ctx;
	kvtls *t = tls;
	uint64_t ops = 0;
	uint32_t tokens = c->k * KVB_BLOCK_SIZE;
	size_t n;
	int rc;

	(void)tid;
	if (!t)
		return 0;
	KVB_LOOP(stop, ops, {
		rc = kvp_allocate(c->kv, c->stream, tokens, t->owner, KVP_FP16, t->refs,
		                  KVB_MAX_BATCH, &n);
		if (rc != KVP_OK) {
			kvb_fail("kvp_allocate", rc);
			return ops;
		}
		rc = c->free_all ? kvp_free_all(c->kv, t->owner) : kvp_free(c->kv, t->refs, n);
		if (rc != KVP_OK) {
			kvb_fail(c->free_all ? "kvp_free_all" : "kvp_free", rc);
			return ops;
		}
	});
	return ops;
}

/*
 * One request per op: a new owner id each time (the thread's own sequence,
 * never reused, or with c->minted an id from kvp_owner_new), kvp_allocate
 * of k blocks, then kvp_free_all, which releases the owner: the owner is
 * made and dropped on every op.
 */
static uint64_t kv_run_new_owner(void *ctx, void *tls, int tid, const atomic_int *stop)
{
	kvctx *c = ctx;
	kvtls *t = tls;
	/* Ids of this thread's run: top bit set, its unique owner's low bits, a sequence. */
	uint64_t ops = 0, seq = t ? 1ull << 63 | (t->owner & 0xffffffffull) << 32 : 0;
	uint32_t tokens = c->k * KVB_BLOCK_SIZE;
	size_t n;
	int rc;

	(void)tid;
	if (!t)
		return 0;
	KVB_LOOP(stop, ops, {
		kvp_owner owner = seq++;
		if (c->minted && (rc = kvp_owner_new(c->kv, &owner)) != KVP_OK) {
			kvb_fail("kvp_owner_new", rc);
			return ops;
		}
		rc = kvp_allocate(c->kv, c->stream, tokens, owner, KVP_FP16, t->refs, KVB_MAX_BATCH,
		                  &n);
		if (rc != KVP_OK) {
			kvb_fail("kvp_allocate", rc);
			return ops;
		}
		rc = kvp_free_all(c->kv, owner);
		if (rc != KVP_OK) {
			kvb_fail("kvp_free_all", rc);
			return ops;
		}
	});
	return ops;
}

static uint64_t kv_run_raw(void *ctx, void *tls, int tid, const atomic_int *stop)
{
	kvctx *c = ctx;
	uint64_t ops = 0;
	kvp_ref ref;
	int rc;

	(void)tls, (void)tid;
	KVB_LOOP(stop, ops, {
		rc = kvp_alloc_block(c->kv, c->stream, KVP_FP16, &ref);
		if (rc != KVP_OK) {
			kvb_fail("kvp_alloc_block", rc);
			return ops;
		}
		rc = kvp_free_block(c->kv, ref);
		if (rc != KVP_OK) {
			kvb_fail("kvp_free_block", rc);
			return ops;
		}
	});
	return ops;
}

static uint64_t mp_run(void *ctx, void *tls, int tid, const atomic_int *stop)
{
	kvctx *c = ctx;
	kvtls *t = tls;
	uint64_t ops = 0;
	uint32_t tokens = c->k * KVB_BLOCK_SIZE;
	size_t n;
	int rc;

	(void)tid;
	if (!t)
		return 0;
	KVB_LOOP(stop, ops, {
		rc = mpool_allocate(c->mp, tokens, t->owner, t->refs, KVB_MAX_BATCH, &n);
		if (rc != 0) {
			kvb_fail("mpool_allocate", rc);
			return ops;
		}
		rc = c->free_all ? mpool_free_all(c->mp, t->owner) : mpool_free(c->mp, t->refs, n);
		if (rc != 0) {
			kvb_fail("mpool_free", rc);
			return ops;
		}
	});
	return ops;
}

static kvctx *new_ctx(kvp_pool *kv, mpool *mp, kvp_stream s, unsigned k, bool free_all)
{
	kvctx *c = kvb_ctx_alloc(sizeof(*c));

	c->kv = kv;
	c->mp = mp;
	c->stream = s;
	c->k = k < 1 ? 1 : k > KVB_MAX_BATCH ? KVB_MAX_BATCH : k;
	c->free_all = free_all;
	return c;
}

void kvb_case_kv_full(kvb_case *c, kvp_pool *pool, kvp_stream s, unsigned k)
{
	*c = (kvb_case){kv_setup, kv_run_full, kv_teardown, new_ctx(pool, NULL, s, k, false)};
}

void kvb_case_kv_free_all(kvb_case *c, kvp_pool *pool, kvp_stream s, unsigned k)
{
	*c = (kvb_case){kv_setup, kv_run_full, kv_teardown, new_ctx(pool, NULL, s, k, true)};
}

void kvb_case_kv_new_owner(kvb_case *c, kvp_pool *pool, kvp_stream s, unsigned k)
{
	*c = (kvb_case){kv_setup, kv_run_new_owner, kv_teardown, new_ctx(pool, NULL, s, k, true)};
}

void kvb_case_kv_minted_owner(kvb_case *c, kvp_pool *pool, kvp_stream s, unsigned k)
{
	kvctx *ctx = new_ctx(pool, NULL, s, k, true);
	ctx->minted = true;
	*c = (kvb_case){kv_setup, kv_run_new_owner, kv_teardown, ctx};
}

void kvb_case_kv_raw(kvb_case *c, kvp_pool *pool, kvp_stream s)
{
	*c = (kvb_case){NULL, kv_run_raw, NULL, new_ctx(pool, NULL, s, 1, false)};
}

void kvb_case_mutex(kvb_case *c, mpool *pool, unsigned k, bool free_all)
{
	*c = (kvb_case){kv_setup, mp_run, kv_teardown, new_ctx(NULL, pool, KVP_K, k, free_all)};
}

/* --- the limit ------------------------------------------------------------ */

static uint64_t limit_run(void *ctx, void *tls, int tid, const atomic_int *stop)
{
	uint32_t stack[64];
	int top = 64;
	uint64_t ops = 0;

	(void)ctx, (void)tls;
	for (int i = 0; i < 64; i++)
		stack[i] = (uint32_t)(tid * 64 + i);
	/* The array escapes, so every pop and push below is a real load/store. */
	KVB_ESCAPE(stack);
	KVB_LOOP(stop, ops, {
		uint32_t id = stack[--top];
		KVB_ESCAPE(id);
		stack[top++] = id;
	});
	return ops;
}

void kvb_case_limit(kvb_case *c)
{
	*c = (kvb_case){NULL, limit_run, NULL, kvb_ctx_alloc(1)};
}
