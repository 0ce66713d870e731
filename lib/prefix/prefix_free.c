/*
 * lib/prefix/prefix_free.c - the pool's release and query calls in prefix mode.
 *
 * Owns: kvp_free, kvp_free_all, kvp_blocks_for, kvp_register_owner,
 * kvp_release_owner, kvp_shrink and kvp_block_get when the pool has the
 * prefix cache on.  These read no index table, so they run outside RCU
 * read-side sections (the side table never moves).
 *
 * Dropping a hold (drop_hold) runs under the holder's owner shard mutex,
 * with the block locked (its state word's lock bit: a CAS, or a plain store
 * on a block private to that owner, whose word no other thread writes
 * without the mutex: lib/prefix/prefix_internal.h, "Private blocks"; a
 * private unpublished one is freed with one store).  The last hold of a
 * published block makes it cached: counted, and put at the tail of its
 * thread's LRU list unless it stays on another thread's
 * (kvpi_pfx_lru_insert), before the unlock.  So no evictor sees it cached
 * and unlisted.  The last hold of any other block frees it onto the block
 * path, in batches, after the locks are gone.
 *
 * May call: the pool's block path and owner table (lib/pool), the LRU
 * (prefix_lru.c), the prefix owner calls (prefix_owner.c) and the index only through an
 * eviction (shrink).  Lock order: lib/prefix/prefix_internal.h.
 */
#include <string.h>

#include "lib/pool/block_state.h"
#include "lib/prefix/prefix_internal.h"

#define FREE_BATCH 64u
/* Blocks a release brings into the cache before it starts. */
#define PREFETCH_MAX 32u

/* Per-call accumulator: blocks freed (not cached), flushed in batches. */
struct acc {
	uint32_t ids[2][FREE_BATCH];
	uint32_t n[2];
	uint64_t stale, not_full;
	bool changed;
};

static void acc_flush(struct kvp_pool *p, struct kvpi_tslot *s, struct acc *a, int si)
{
	if (a->n[si] == 0)
		return;
	kvpi_give_back(p, s, si, a->ids[si], a->n[si]);
	a->n[si] = 0;
}

enum drop { D_STALE, D_KEPT, D_CACHED, D_FREED };

/* The state a block whose last hold is dropped in state @st takes when it
 * is published: cached (not in use, raw or private). */
static inline uint64_t cached_state(uint64_t st)
{
	return (st & ~(KVPI_ST_IN_USE | KVPI_ST_RAW | KVPI_ST_PRIVATE)) | KVPI_ST_CACHED;
}

/*
 * Blocks one kvp_free_all makes cached, kept locked until they are listed
 * together: one LRU mutex, one clock read, one count update and one in-use
 * note per batch instead of per block.  A block still listed (a match took
 * it from its list) joins the batch too: counted and unlocked with it, and
 * moved to the tail with it when it is on this thread's list.
 * Counting each such block on its own took a locked add a block: 22% of
 * kvpi_pfx_free_all's own perf samples (cpu-clock) on the lifecycle
 * benchmark's prefix loop at one thread, where most of a request's matched
 * blocks are still listed when it ends.
 *
 * Why a batch cannot close a cycle of waits.  A block in a batch has no
 * holder left, so no other release ever needs its lock.  The others that
 * may wait for it (a match reviving it, a snapshot) hold no block lock
 * while they wait, and an evictor only tries block locks.  A holder of an
 * LRU mutex never waits for a block lock, so waiting for that mutex with a
 * batch held is safe too.  drop_lock still flushes the batch before it
 * waits for any block lock: every waiter then holds at most its owner's
 * shard mutex, as without batches, and a match waits no longer than one
 * batch's releases (CACHE_BATCH blocks).
 */
/* 128: one cached-count update and one LRU mutex hold per 128 blocks of a
 * request.  Against 32, the lifecycle benchmark's prefix loop at eight
 * threads ran at 124 against 127-135 CPU ns a block (two runs each); at
 * one and two threads the same within noise. */
#define CACHE_BATCH 128u
struct cache_batch {
	uint32_t ids[2][CACHE_BATCH];
	uint64_t st[2][CACHE_BATCH]; /* each block's cached state, to unlock to */
	uint32_t n[2];
};

/* List, count and unlock stream @si's batched blocks, in the order of a
 * single release: noted out of use, listed, counted, then unlocked. */
static void cache_flush(struct kvp_pool *p, struct kvpi_tslot *s, struct cache_batch *cb, int si)
{
	uint32_t n = cb->n[si];
	if (n == 0)
		return;
	kvpi_note_freed(p, s, n); /* before a match can take them again */
	kvpi_pfx_lru_insert_many(p->prefix, s, si, cb->ids[si], n);
	/* counted before the unlocks make them claimable */
	kvpi_pfx_count_one(p->prefix, si, (int64_t)n);
	struct kvpi_block *seg0 = p->bt.seg0;
	uint32_t n0 = p->bt.n0;
	for (uint32_t i = 0; i < n; i++)
		kvpi_pfx_unlock(kvpi_bt_block_at(&p->bt, seg0, n0, cb->ids[si][i]), cb->st[si][i]);
	cb->n[si] = 0;
}

static void cache_flush_all(struct kvp_pool *p, struct kvpi_tslot *s, struct cache_batch *cb)
{
	cache_flush(p, s, cb, 0);
	cache_flush(p, s, cb, 1);
}

struct drop_arg {
	uint32_t gen;
	bool any_gen;
};

/* A state a release may lock: in use, of the ref's hand-out. */
static bool drop_ok(uint64_t st, const void *arg)
{
	const struct drop_arg *a = arg;
	return (st & KVPI_ST_IN_USE) && (a->any_gen || kvpi_st_gen(st) == a->gen);
}

/*
 * kvpi_pfx_lock for a release that may hold a batch @cb (or NULL): before
 * it waits for a lock another thread holds, it flushes the batch.
 */
static uint64_t drop_lock(struct kvp_pool *p, struct kvpi_tslot *s, struct cache_batch *cb,
                          struct kvpi_block *b, const struct drop_arg *arg, uint64_t *seen)
{
	if (cb && (cb->n[0] | cb->n[1]) != 0) {
		uint64_t st = kvpi_pfx_trylock(b, drop_ok, arg, seen);
		if (st != KVPI_PFX_BUSY)
			return st;
		cache_flush_all(p, s, cb); /* never wait holding a batch */
	}
	return kvpi_pfx_lock(b, drop_ok, arg, seen);
}

/*
 * Drop @owner's hold on block @id (at generation @gen unless @any_gen).
 * The caller holds @owner's shard mutex (none for a raw block, owner 0)
 * and has checked that @owner holds the block; the state is checked again
 * here with the block locked.  *@st_out gets the state before a free or
 * before the block became cached.
 */
static inline __attribute__((always_inline)) enum drop
drop_hold_at(struct kvp_pool *p, struct kvpi_tslot *s, uint32_t id, struct kvpi_block *b,
             struct kvpi_pside *e, uint32_t gen, bool any_gen, kvp_owner owner, uint64_t *st_out,
             struct cache_batch *cb)
{
	struct kvpi_prefix *pf = p->prefix;
	struct drop_arg arg = {gen, any_gen};
	uint64_t seen;

	/* acquire: the state as its last writer left it. */
	uint64_t st = atomic_load_explicit(&b->state, memory_order_acquire);
	if ((st & KVPI_ST_PRIVATE) && drop_ok(st, &arg)) {
		/* Private: @owner's alone, and every writer of the word
		 * holds @owner's shard mutex, as we do; no CAS needed.  It
		 * is locked all the same, with a plain store, until its
		 * freed or cached state is stored: snapshot readers wait
		 * (as for a locked block) instead of seeing it in use with
		 * no holder, and an evictor that meets it listed leaves it.
		 * relaxed: the bump's release store and fence below order it
		 * before the holder stores, as a lock's CAS is.  The bump
		 * tells snapshot readers the holders changed. */
		atomic_store_explicit(&b->state, st | KVPI_ST_LOCKED, memory_order_relaxed);
		kvpi_pfx_bump(e);
		/* relaxed: published by the release store of the state. */
		atomic_store_explicit(&e->holders, 0, memory_order_relaxed);
		atomic_store_explicit(&e->owner_xor, 0, memory_order_relaxed);
		*st_out = st;
		if (!(st & KVPI_ST_PUBLISHED)) {
			/* release: the next hand-out, and any reader that sees
			 * the block free, sees the changes above. */
			atomic_store_explicit(&b->state, kvpi_freed_state(st),
			                      memory_order_release);
			return D_FREED;
		}
		/* Published by its owner and private still: locked above,
		 * it becomes cached below as any locked block does. */
	} else {
		st = drop_lock(p, s, cb, b, &arg, &seen);
		if (!st)
			return D_STALE;
		kvpi_pfx_bump(e);
		/* relaxed (holders, owner_xor, owner): under the lock. */
		uint32_t h = atomic_load_explicit(&e->holders, memory_order_relaxed) - 1;
		uint64_t x = atomic_load_explicit(&e->owner_xor, memory_order_relaxed) ^ owner;
		atomic_store_explicit(&e->holders, h, memory_order_relaxed);
		atomic_store_explicit(&e->owner_xor, x, memory_order_relaxed);
		if (h > 0) {
			if (h == 1) /* the XOR of one holder is that holder */
				atomic_store_explicit(&b->owner, x, memory_order_relaxed);
			kvpi_pfx_unlock(b, st);
			return D_KEPT;
		}
	}
	int si = kvpi_pfx_si(p, st);
	if ((st & KVPI_ST_PUBLISHED) && cb) {
		/* Cached, counted with the batch, and put at the tail of
		 * this thread's list with it unless it stays on another
		 * thread's list (cache_flush).  Meanwhile an evictor that
		 * meets a listed one locked passes it over. */
		uint32_t k = cb->n[si]++;
		cb->ids[si][k] = id;
		cb->st[si][k] = cached_state(st);
		if (cb->n[si] == CACHE_BATCH)
			cache_flush(p, s, cb, si);
		*st_out = st;
		return D_CACHED;
	}
	if (st & KVPI_ST_PUBLISHED) {
		kvpi_note_freed(p, s, 1); /* before a match can take it again */
		kvpi_pfx_lru_insert(pf, s, si, id);
		/* counted before the unlock makes it claimable: the count
		 * never runs below the blocks cached and unheld */
		kvpi_pfx_count_one(pf, si, 1);
		*st_out = st;
		kvpi_pfx_unlock(b, cached_state(st));
		return D_CACHED;
	}
	/* Unpublished by a reset while held: off its list before it is free. */
	if (kvpi_pfx_flag(&e->listed))
		kvpi_pfx_lru_unlink(pf, si, id);
	*st_out = st;
	kvpi_pfx_unlock(b, kvpi_freed_state(st));
	return D_FREED;
}

/* drop_hold_at of block @id, its metadata and side entry looked up. */
static inline __attribute__((always_inline)) enum drop
drop_hold(struct kvp_pool *p, struct kvpi_tslot *s, uint32_t id, uint32_t gen, bool any_gen,
          kvp_owner owner, uint64_t *st_out, struct cache_batch *cb)
{
	return drop_hold_at(p, s, id, kvpi_bt_block(&p->bt, id), kvpi_pfx_side(p->prefix, id), gen,
	                    any_gen, owner, st_out, cb);
}

static inline __attribute__((always_inline)) void
note(struct kvp_pool *p, struct kvpi_tslot *s, struct acc *a, enum drop d, uint64_t st, uint32_t id)
{
	if (d == D_STALE) {
		a->stale++;
		return;
	}
	a->changed = true;
	int si = kvpi_pfx_si(p, st);
	if (d != D_FREED)
		return;
	a->not_full += kvpi_st_used(st) < p->block_size;
	a->ids[si][a->n[si]++] = id;
	if (a->n[si] == FREE_BATCH)
		acc_flush(p, s, a, si);
}

static void acc_finish(struct kvp_pool *p, struct kvpi_tslot *s, struct acc *a)
{
	for (int si = 0; si < 2; si++)
		acc_flush(p, s, a, si);
	kvpi_ctr_add(s, KVPI_C_STALE, a->stale);
	kvpi_ctr_add(s, KVPI_C_NOT_FULL, (uint64_t)0 - a->not_full);
}

static void acc_init(struct acc *a)
{
	a->n[0] = a->n[1] = 0;
	a->stale = a->not_full = 0;
	a->changed = false;
}

/* Whether the current hand-out of @ref has two or more holders. */
static bool shared_now(struct kvp_pool *p, kvp_ref ref)
{
	uint32_t id = KVP_REF_ID(ref);
	kvp_owner owner;
	uint32_t holders;
	uint64_t st = kvpi_pfx_snapshot(kvpi_bt_block(&p->bt, id), kvpi_pfx_side(p->prefix, id),
	                                &owner, &holders);
	return kvpi_st_gen(st) == KVP_REF_GEN(ref) && (st & KVPI_ST_IN_USE) && holders >= 2;
}

int kvpi_pfx_free(struct kvp_pool *p, const kvp_ref *refs, size_t n)
{
	struct kvpi_prefix *pf = p->prefix;
	struct kvpi_tslot *s = kvpi_tslot_get(p);
	struct kvpi_oshard *held = NULL;
	struct acc a;
	acc_init(&a);
	for (size_t i = 0; i < n; i++) {
		if (shared_now(p, refs[i])) {
			kvpi_end_call(p, s, false);
			return KVP_EINVAL;
		}
	}
	/* Last ref first, so published blocks become cached last one first.
	 * A block with one holder when checked loses that holder's hold (a
	 * match racing with this call keeps its own). */
	for (size_t i = n; i-- > 0;) {
		uint32_t id = KVP_REF_ID(refs[i]), gen = KVP_REF_GEN(refs[i]);
		struct kvpi_block *b = kvpi_bt_block(&p->bt, id);
		/* acquire: pairs with the hand-out's release. */
		uint64_t st = atomic_load_explicit(&b->state, memory_order_acquire), fst = 0;
		if (kvpi_st_gen(st) != gen || !(st & KVPI_ST_IN_USE)) {
			a.stale++;
			continue;
		}
		if (st & KVPI_ST_RAW) {
			enum drop d = drop_hold(p, s, id, gen, false, 0, &fst, NULL);
			note(p, s, &a, d, fst, id);
			continue;
		}
		/* relaxed: checked below under the owner's shard mutex. */
		kvp_owner owner = atomic_load_explicit(&b->owner, memory_order_relaxed);
		struct kvpi_oshard *sh = kvpi_owners_shard(&p->owners, owner);
		if (sh != held) {
			if (held)
				pthread_mutex_unlock(&held->lock);
			pthread_mutex_lock(&sh->lock);
			held = sh;
		}
		struct kvpi_orec *r = kvpi_oshard_find(sh, owner);
		int64_t pos = r ? kvpi_pfx_ofind_pos(pf, r, id) : -1;
		if (pos < 0) {
			a.stale++;
			continue;
		}
		enum drop d = drop_hold(p, s, id, gen, false, owner, &fst, NULL);
		if (d != D_STALE) {
			kvpi_idarr_remove_at(&r->ids, (uint32_t)pos);
			if (kvpi_orec_count(r) == 0 && !r->registered)
				kvpi_pfx_oremove(p, s, sh, r);
		}
		note(p, s, &a, d, fst, id);
	}
	if (held)
		pthread_mutex_unlock(&held->lock);
	acc_finish(p, s, &a);
	kvpi_end_call(p, s, a.changed);
	return KVP_OK;
}

int kvpi_pfx_free_owned(struct kvp_pool *p, kvp_owner owner, const kvp_ref *refs, size_t n)
{
	struct kvpi_prefix *pf = p->prefix;
	struct kvpi_tslot *s = kvpi_tslot_get(p);
	struct kvpi_oshard *sh = kvpi_owners_shard(&p->owners, owner);
	struct acc a;
	acc_init(&a);
	pthread_mutex_lock(&sh->lock);
	for (size_t i = 0; i < n && i < PREFETCH_MAX; i++)
		kvpi_pfx_prefetch(p, KVP_REF_ID(refs[i]));
	struct kvpi_orec *r = kvpi_oshard_find(sh, owner);
	for (size_t i = n; i-- > 0;) {
		uint32_t id = KVP_REF_ID(refs[i]);
		int64_t pos = r ? kvpi_pfx_ofind_pos(pf, r, id) : -1;
		uint64_t fst = 0;
		enum drop d = D_STALE;
		if (pos >= 0)
			d = drop_hold(p, s, id, KVP_REF_GEN(refs[i]), false, owner, &fst, NULL);
		if (d != D_STALE)
			kvpi_idarr_remove_at(&r->ids, (uint32_t)pos);
		note(p, s, &a, d, fst, id);
	}
	if (r && kvpi_orec_count(r) == 0 && !r->registered)
		kvpi_pfx_oremove(p, s, sh, r);
	pthread_mutex_unlock(&sh->lock);
	acc_finish(p, s, &a);
	kvpi_end_call(p, s, a.changed);
	return KVP_OK;
}

int kvpi_pfx_free_all(struct kvp_pool *p, kvp_owner owner)
{
	struct kvpi_tslot *s = kvpi_tslot_get(p);
	struct kvpi_oshard *sh = kvpi_owners_shard(&p->owners, owner);
	struct acc a;
	struct cache_batch cb;
	cb.n[0] = cb.n[1] = 0;
	acc_init(&a);
	pthread_mutex_lock(&sh->lock);
	struct kvpi_orec *r = kvpi_oshard_find(sh, owner);
	if (!r) {
		pthread_mutex_unlock(&sh->lock);
		kvpi_end_call(p, s, false);
		return KVP_ENOENT;
	}
	/* Last block first: published ones become cached in that order, so
	 * eviction takes the end of a sequence before its beginning.  The
	 * first segments of the block and side tables are read once (they
	 * never change): the atomics in the loop would make the compiler
	 * load them again for every block. */
	struct kvpi_block *bseg0 = p->bt.seg0;
	uint32_t bn0 = p->bt.n0;
	struct kvpi_pside *pseg0 = p->prefix->seg0;
	uint32_t pn0 = p->prefix->n0;
	for (uint32_t i = r->ids.len; i-- > 0;) {
		uint32_t id = r->ids.ids[i];
		if (id == KVPI_NO_ID)
			continue;
		uint64_t fst = 0;
		enum drop d = drop_hold_at(p, s, id, kvpi_bt_block_at(&p->bt, bseg0, bn0, id),
		                           kvpi_pfx_side_at(p->prefix, pseg0, pn0, id), 0, true,
		                           owner, &fst, &cb);
		note(p, s, &a, d, fst, id);
	}
	cache_flush_all(p, s, &cb);
	kvpi_pfx_oremove(p, s, sh, r);
	pthread_mutex_unlock(&sh->lock);
	acc_finish(p, s, &a);
	kvpi_end_call(p, s, true);
	return KVP_OK;
}

/* Evict up to @n cached blocks of @si onto the free stack; returns how many. */
static uint64_t evict_to_free(struct kvp_pool *p, int si, uint64_t n)
{
	uint32_t ids[FREE_BATCH];
	uint64_t done = 0;
	struct kvpi_tslot *s = kvpi_tslot_get(p);
	while (done < n) {
		uint32_t want = n - done < FREE_BATCH ? (uint32_t)(n - done) : FREE_BATCH;
		kvpi_rcu_read_lock();
		uint32_t e = kvpi_pfx_evict_free(p, s, si, ids, want, false);
		kvpi_rcu_read_unlock();
		done += e;
		if (e < want)
			break;
	}
	kvpi_tslot_put(p, s);
	return done;
}

int kvpi_pfx_shrink(struct kvp_pool *p, int si, uint32_t target_free, uint32_t *n_retired)
{
	struct kvpi_prefix *pf = p->prefix;
	uint32_t k1 = 0, k2 = 0;
	/* Uncached free blocks first: keep target_free - cached of them. */
	uint64_t c = kvpi_pfx_n_cached(pf, si);
	uint32_t t1 = target_free > c ? target_free - (uint32_t)c : 0;
	int rc = kvpi_shrink_stream(p, si, t1, &k1);
	if (rc == KVP_OK && c > target_free && evict_to_free(p, si, c - target_free) > 0) {
		/* Then cached ones: evicted to the free stack, and retired. */
		uint64_t c2 = kvpi_pfx_n_cached(pf, si);
		uint32_t t2 = target_free > c2 ? target_free - (uint32_t)c2 : 0;
		rc = kvpi_shrink_stream(p, si, t2, &k2);
	}
	if (n_retired)
		*n_retired = k1 + k2;
	return rc;
}

int kvpi_pfx_block_get(struct kvp_pool *p, kvp_ref ref, kvp_block_info *out)
{
	int rc = KVP_ENOENT;
	uint32_t id = KVP_REF_ID(ref);
	if (id < kvp_pool_n_ids(p)) {
		struct kvpi_block *b = kvpi_bt_block(&p->bt, id);
		kvp_owner owner;
		uint32_t holders;
		uint64_t st = kvpi_pfx_snapshot(b, kvpi_pfx_side(p->prefix, id), &owner, &holders);
		if (kvpi_st_gen(st) == KVP_REF_GEN(ref) && !(st & KVPI_ST_RETIRED)) {
			out->id = id;
			out->stream = (kvp_stream)kvpi_st_stream(st);
			out->format = (kvp_format)kvpi_st_format(st);
			out->n_used = kvpi_st_used(st);
			out->in_use = (st & KVPI_ST_IN_USE) != 0;
			out->ever_allocated = (st & KVPI_ST_EVER) != 0;
			out->owner = out->in_use ? owner : 0;
			out->n_holders = out->in_use ? holders : 0;
			out->published = (st & KVPI_ST_PUBLISHED) != 0;
			rc = KVP_OK;
		}
	}
	return rc;
}
