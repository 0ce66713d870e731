/*
 * lib/prefix/prefix_pool.c - the block pool's calls in prefix mode.
 *
 * kvp_allocate, kvp_alloc_block, kvp_free, kvp_free_all, kvp_blocks_for,
 * kvp_register_owner, kvp_release_owner, kvp_shrink and kvp_block_get
 * come here when the pool has the prefix cache on (lib/prefix/prefix_internal.h
 * has the design and the lock order).  Free blocks that are not cached
 * live on the ordinary block path (magazines and free stacks,
 * lib/pool/pool_blocks.c), whose growth is switched off in prefix mode: a
 * request first takes uncached free blocks, then evicts cached ones, and
 * only then grows (kvpi_pfx_get_blocks).
 *
 * The free paths, kvp_blocks_for and kvp_block_get read no index node, so
 * they run outside RCU read-side sections (the side table never moves).
 *
 * Dropping a hold (drop_hold) runs under the holder's owner shard mutex
 * with the block locked (its state word's lock bit): the last hold of a
 * published block makes it cached (counted, and put on its LRU list unless
 * it is still there, before the unlock, so no evictor sees it cached and
 * unlisted); the last hold of any other block frees it onto the block
 * path, in batches, after the locks are gone.
 */
#include <string.h>

#include "lib/prefix/prefix_internal.h"

#define FREE_BATCH 64u
/* Blocks a release brings into the cache before it starts. */
#define PREFETCH_MAX 32u

/* Hand out block @id, held exclusively (popped, evicted or grown); returns
 * its new generation. */
static uint32_t stamp(struct kvp_pool *p, uint32_t id, uint32_t used, uint64_t flags,
                      kvp_owner owner, kvp_format format, bool *reused)
{
	struct kvpi_block *b = kvpi_bt_block(&p->bt, id);
	struct kvpi_pside *e = kvpi_pfx_side(p->prefix, id);
	/* relaxed: we hold the block exclusively. */
	uint64_t old = atomic_load_explicit(&b->state, memory_order_relaxed);
	uint32_t gen = kvpi_st_gen(old) + 1;
	if (gen == 0)
		gen = 1;
	*reused = (old & KVPI_ST_EVER) != 0;
	/* A fresh hand-out: the rows of earlier ones are not this holder's
	 * (kvpool/storage.h).  release: kvpi_block_get_epoch reads it with no
	 * lock; a reader that sees it (then an acquire fence) sees the block
	 * left its previous hand-out, so its state re-check fails. */
	atomic_store_explicit(&e->epoch, gen, memory_order_release);
	/* relaxed: published by the release store of the state below. */
	atomic_store_explicit(&e->holders, 1, memory_order_relaxed);
	atomic_store_explicit(&e->owner_xor, owner, memory_order_relaxed);
	/* release: as in the plain pool (kvp_block_get's seqlock). */
	atomic_store_explicit(&b->owner, owner, memory_order_release);
	/* release: readers that acquire the state see the fields above. */
	atomic_store_explicit(&b->state,
	                      kvpi_st_make(gen, used, KVPI_ST_IN_USE | KVPI_ST_EVER | flags,
	                                   kvpi_st_stream(old), (uint32_t)format),
	                      memory_order_release);
	return gen;
}

/*
 * Exhaustion.  kvpool/pool.h: KVP_EEXHAUSTED means that at some instant
 * during the call fewer blocks were free (or cached and unheld) than the
 * request needed.  The rule here: a request fails only on a count of one
 * instant (available_now) that is below its need, read after it gave back
 * everything it took.  Whatever another request holds for the moment (a
 * partial reservation, claimed cached blocks) is in that count, so a
 * request bound to fail never makes one that fits fail: the latter sees
 * the shortfall is held, not gone, and tries again.  docs/PREFIX.md has
 * the argument.
 *
 * The counts: the free stack's avail (exact), the cached count (one
 * counter, never below the blocks cached and unheld: kvpi_pfx_count_one),
 * and prefix.pend, the blocks reserved by allocations that may still give
 * them back.  A claimed block stays in the cached count until committed.
 */
#define PEND_GIVEBACK ((uint64_t)1 << 32)

/* Free, cached and unheld, or held by an undecided allocation, at one
 * instant: see "Exhaustion" above. */
static uint64_t available_now(struct kvp_pool *p, int si)
{
	struct kvpi_prefix *pf = p->prefix;
	struct kvpi_spin spin = {0};
	for (;;) {
		/* acquire (all): pair with the release of each update, so a
		 * block a load sees gone from one count is seen in the next. */
		uint64_t w1 = atomic_load_explicit(&pf->pend.n[si], memory_order_acquire);
		uint64_t c = kvpi_pfx_n_cached(pf, si);
		int64_t a = atomic_load_explicit(&p->fs[si].avail, memory_order_acquire);
		uint64_t w2 = atomic_load_explicit(&pf->pend.n[si], memory_order_acquire);
		/* A give-back between the loads could hide its blocks from
		 * both avail and pend: read again. */
		if ((w1 >> 32) == (w2 >> 32))
			return c + (a > 0 ? (uint64_t)a : 0) + (uint32_t)w2;
		kvpi_spin_wait(&spin);
	}
}

/* One try: KVP_OK with @k blocks, or a failure after giving back all. */
static int get_blocks_once(struct kvp_pool *p, struct kvpi_tslot *s, int si, kvpi_u32_alias *ids,
                           uint32_t k)
{
	struct kvpi_prefix *pf = p->prefix;
	struct kvpi_freestack *fs = &p->fs[si];
	_Atomic int64_t *pend = &pf->pend.n[si];
	int rc = KVP_OK;
	/*
	 * A prefix pool has no per-thread magazines (kvpi_pfx_create), so every
	 * uncached free block is on the stream's global stack: no drain, no
	 * starving flag, no heavy barrier.  Whatever uncached blocks there
	 * are, then cached ones (evicted), then growth: all or nothing, and
	 * nothing evicted unless the request is met.  The cached blocks are
	 * claimed first and evicted only once the request is sure to be met:
	 * if matches took some of those counted meanwhile, or growth fails,
	 * the claimed ones go back to the cache as they were.
	 */
	uint32_t r = kvpi_fs_reserve(fs, k, k), e = 0;
	if (r == k) {
		kvpi_fs_pop_reserved(fs, &p->bt, &p->n_ids, ids, r);
		return KVP_OK;
	}
	/* A partial reservation we may give back: in pend before it leaves
	 * avail.  acq_rel, then a release fence before the reserve's CAS: a
	 * reader that sees avail lowered (acquire) sees pend raised. */
	atomic_fetch_add_explicit(pend, k, memory_order_acq_rel);
	atomic_thread_fence(memory_order_release);
	r = kvpi_fs_reserve(fs, 1, k);
	if (r < k) /* relaxed: lowers only what no block backs */
		atomic_fetch_sub_explicit(pend, k - r, memory_order_relaxed);
	uint64_t c = kvpi_pfx_n_cached(pf, si);
	if ((uint64_t)r + c < k) {
		uint64_t shortfall = k - r - c;
		/* relaxed: a pre-check; growth checks again under grow_lock. */
		uint64_t managed = atomic_load_explicit(&p->managed, memory_order_relaxed);
		if (!pf->grow || managed + shortfall > p->max_blocks)
			rc = KVP_EEXHAUSTED; /* nothing evicted */
	}
	uint64_t resets0 = 0;
	if (rc == KVP_OK) {
		/* acquire: a reset that ended before this load evicted, before
		 * the claim below, every block it could see (kvpi_pfx_unclaim). */
		resets0 = atomic_load_explicit(&pf->resets, memory_order_acquire);
		e = kvpi_pfx_claim(p, s, si, ids + r, k - r);
	}
	uint32_t rest = k - r - e;
	if (rc == KVP_OK && rest && !pf->grow) {
		rc = KVP_EEXHAUSTED;
	} else if (rc == KVP_OK && rest) {
		/* As the plain pool: no read-side section across the wait. */
		kvpi_rcu_read_unlock();
		pthread_mutex_lock(&p->grow_lock);
		/* relaxed: managed changes only under grow_lock. */
		uint64_t managed = atomic_load_explicit(&p->managed, memory_order_relaxed);
		if (managed + rest > p->max_blocks) {
			rc = KVP_EEXHAUSTED;
		} else {
			rc = kvpi_grow_locked(p, si, rest, ids + r + e);
			if (rc == KVP_OK) {
				kvpi_ctr_add(s, KVP_C_GROWN, rest);
				kvpi_history_record(p);
			}
		}
		pthread_mutex_unlock(&p->grow_lock);
		kvpi_rcu_read_lock();
	}
	if (rc != KVP_OK) {
		/* Lost a race for the cached blocks, or no room to grow: give
		 * back what we took, the claimed blocks to the cache.  avail
		 * first, then pend with a give-back counted (release: a reader
		 * that sees it sees avail raised). */
		if (r)
			kvpi_fs_unreserve(fs, r);
		atomic_fetch_add_explicit(pend, PEND_GIVEBACK - r, memory_order_release);
		kvpi_pfx_unclaim(p, s, si, ids + r, e, resets0);
		return rc;
	}
	kvpi_pfx_commit(p, s, si, ids + r, e);
	if (r)
		kvpi_fs_pop_reserved(fs, &p->bt, &p->n_ids, ids, r);
	/* relaxed: the blocks are ours now, a drop no reader must see first */
	atomic_fetch_sub_explicit(pend, r, memory_order_relaxed);
	return KVP_OK;
}

int kvpi_pfx_get_blocks(struct kvp_pool *p, struct kvpi_tslot *s, int si, kvpi_u32_alias *ids,
                        uint32_t k)
{
	struct kvpi_spin spin = {0};
	for (;;) {
		int rc = get_blocks_once(p, s, si, ids, k);
		if (rc != KVP_EEXHAUSTED)
			return rc;
		/* Exhausted only if, at one instant after our give-back, the
		 * free, cached and undecided blocks and the room to grow fall
		 * short.  Otherwise another request held what we lacked:
		 * try again once it had time to decide. */
		uint64_t room = 0;
		if (p->prefix->grow) {
			/* relaxed: as the pre-check in get_blocks_once */
			uint64_t managed = atomic_load_explicit(&p->managed, memory_order_relaxed);
			room = managed < p->max_blocks ? p->max_blocks - managed : 0;
		}
		if (available_now(p, si) + room < k)
			return KVP_EEXHAUSTED;
		kvpi_spin_wait(&spin);
	}
}

int kvpi_pfx_allocate(struct kvp_pool *p, int si, uint32_t n_tokens, kvp_owner owner,
                      kvp_format format, kvp_ref *refs, uint32_t nb)
{
	struct kvpi_prefix *pf = p->prefix;
	struct kvpi_tslot *s = kvpi_tslot_get(p);
	struct kvpi_poshard *sh = kvpi_pfx_oshard(pf, owner);
	kvpi_u32_alias *ids = (kvpi_u32_alias *)refs;
	uint32_t bs = p->block_size;

	kvpi_rcu_read_lock();
	/* The owner's shard mutex for the whole call, as in the plain pool. */
	pthread_mutex_lock(&sh->lock);
	struct kvpi_porec *r = kvpi_pfx_ofind(sh, owner);
	bool made = false;
	if (!r) {
		r = kvpi_pfx_oinsert(sh, owner);
		made = true;
	}
	int rc = KVP_ENOMEM;
	if (r && kvpi_pfx_oreserve(pf, r, nb) == 0)
		rc = kvpi_pfx_get_blocks(p, s, si, ids, nb);
	if (rc != KVP_OK) {
		if (r && made)
			kvpi_pfx_oremove(sh, r);
		pthread_mutex_unlock(&sh->lock);
		kvpi_rcu_read_unlock();
		return kvpi_fail_call(p, s, rc);
	}
	uint64_t reused = 0;
	uint32_t last_used = n_tokens - (nb - 1) * bs;
	for (uint32_t i = 0; i < nb; i++) {
		bool re;
		stamp(p, ids[i], i + 1 < nb ? bs : last_used, 0, owner, format, &re);
		reused += re;
		kvpi_pfx_oappend(pf, r, ids[i]);
	}
	/* Widen ids to refs from the end (refs[i] covers ids[2i], ids[2i+1]). */
	for (uint32_t i = nb; i-- > 0;) {
		uint32_t id = ids[i];
		/* relaxed: we stamped it, and hold its owner's shard mutex. */
		uint64_t st =
		    atomic_load_explicit(&kvpi_bt_block(&p->bt, id)->state, memory_order_relaxed);
		refs[i] = KVP_MAKE_REF(id, kvpi_st_gen(st));
	}
	pthread_mutex_unlock(&sh->lock);
	kvpi_ctr_add(s, KVP_C_ALLOCS, nb);
	kvpi_ctr_add(s, KVP_C_REUSED, reused);
	kvpi_ctr_add(s, KVP_C_NOT_FULL, last_used < bs);
	kvpi_account_in_use(p, s, nb);
	kvpi_rcu_read_unlock();
	kvpi_end_call(p, s, true);
	return KVP_OK;
}

int kvpi_pfx_alloc_block(struct kvp_pool *p, int si, kvp_format format, kvp_ref *out)
{
	struct kvpi_tslot *s = kvpi_tslot_get(p);
	uint32_t id;
	kvpi_rcu_read_lock();
	int rc = kvpi_pfx_get_blocks(p, s, si, &id, 1);
	if (rc != KVP_OK) {
		kvpi_rcu_read_unlock();
		return kvpi_fail_call(p, s, rc);
	}
	bool re;
	uint32_t gen = stamp(p, id, p->block_size, KVPI_ST_RAW, 0, format, &re);
	kvpi_ctr_add(s, KVP_C_ALLOCS, 1);
	kvpi_ctr_add(s, KVP_C_REUSED, re);
	kvpi_account_in_use(p, s, 1);
	kvpi_rcu_read_unlock();
	kvpi_end_call(p, s, true);
	*out = KVP_MAKE_REF(id, gen);
	return KVP_OK;
}

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
 * Drop @owner's hold on block @id (at generation @gen unless @any_gen).
 * The caller holds @owner's shard mutex (none for a raw block, owner 0)
 * and has checked that @owner holds the block; the state is checked again
 * here with the block locked.  *@st_out gets the state before a free or
 * before the block became cached.
 */
static enum drop drop_hold(struct kvp_pool *p, struct kvpi_tslot *s, uint32_t id, uint32_t gen,
                           bool any_gen, kvp_owner owner, uint64_t *st_out)
{
	struct kvpi_prefix *pf = p->prefix;
	struct kvpi_block *b = kvpi_bt_block(&p->bt, id);
	struct kvpi_pside *e = kvpi_pfx_side(pf, id);
	struct drop_arg arg = {gen, any_gen};
	uint64_t seen;

	uint64_t st = kvpi_pfx_lock(b, drop_ok, &arg, &seen);
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
	int si = kvpi_pfx_si(p, st);
	if (st & KVPI_ST_PUBLISHED) {
		kvpi_note_freed(p, s, 1); /* before a match can take it again */
		/* Still listed (a match took it from its list and left it
		 * there): stays; the evictor moves it to the tail. */
		if (!kvpi_pfx_flag(&e->listed))
			kvpi_pfx_lru_insert(pf, s, si, id);
		/* counted before the unlock makes it claimable: the count
		 * never runs below the blocks cached and unheld */
		kvpi_pfx_count_one(pf, si, 1);
		*st_out = st;
		kvpi_pfx_unlock(b, (st & ~(KVPI_ST_IN_USE | KVPI_ST_RAW)) | KVPI_ST_CACHED);
		return D_CACHED;
	}
	/* Unpublished by a reset while held: off its list before it is free. */
	if (kvpi_pfx_flag(&e->listed))
		kvpi_pfx_lru_unlink(pf, si, id);
	*st_out = st;
	kvpi_pfx_unlock(b, st & ~(KVPI_ST_IN_USE | KVPI_ST_RAW | KVPI_ST_USED_MASK));
	return D_FREED;
}

static void note(struct kvp_pool *p, struct kvpi_tslot *s, struct acc *a, enum drop d, uint64_t st,
                 uint32_t id)
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
	kvpi_ctr_add(s, KVP_C_STALE, a->stale);
	kvpi_ctr_add(s, KVP_C_NOT_FULL, (uint64_t)0 - a->not_full);
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
	struct kvpi_poshard *held = NULL;
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
			enum drop d = drop_hold(p, s, id, gen, false, 0, &fst);
			note(p, s, &a, d, fst, id);
			continue;
		}
		/* relaxed: checked below under the owner's shard mutex. */
		kvp_owner owner = atomic_load_explicit(&b->owner, memory_order_relaxed);
		struct kvpi_poshard *sh = kvpi_pfx_oshard(pf, owner);
		if (sh != held) {
			if (held)
				pthread_mutex_unlock(&held->lock);
			pthread_mutex_lock(&sh->lock);
			held = sh;
		}
		struct kvpi_porec *r = kvpi_pfx_ofind(sh, owner);
		int64_t pos = r ? kvpi_pfx_ofind_pos(pf, r, id) : -1;
		if (pos < 0) {
			a.stale++;
			continue;
		}
		enum drop d = drop_hold(p, s, id, gen, false, owner, &fst);
		if (d != D_STALE) {
			kvpi_pfx_oremove_at(r, (uint32_t)pos);
			if (r->count == 0 && !r->registered)
				kvpi_pfx_oremove(sh, r);
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
	struct kvpi_poshard *sh = kvpi_pfx_oshard(pf, owner);
	struct acc a;
	acc_init(&a);
	pthread_mutex_lock(&sh->lock);
	for (size_t i = 0; i < n && i < PREFETCH_MAX; i++)
		kvpi_pfx_prefetch(p, KVP_REF_ID(refs[i]));
	struct kvpi_porec *r = kvpi_pfx_ofind(sh, owner);
	for (size_t i = n; i-- > 0;) {
		uint32_t id = KVP_REF_ID(refs[i]);
		int64_t pos = r ? kvpi_pfx_ofind_pos(pf, r, id) : -1;
		uint64_t fst = 0;
		enum drop d = D_STALE;
		if (pos >= 0)
			d = drop_hold(p, s, id, KVP_REF_GEN(refs[i]), false, owner, &fst);
		if (d != D_STALE)
			kvpi_pfx_oremove_at(r, (uint32_t)pos);
		note(p, s, &a, d, fst, id);
	}
	if (r && r->count == 0 && !r->registered)
		kvpi_pfx_oremove(sh, r);
	pthread_mutex_unlock(&sh->lock);
	acc_finish(p, s, &a);
	kvpi_end_call(p, s, a.changed);
	return KVP_OK;
}

int kvpi_pfx_free_all(struct kvp_pool *p, kvp_owner owner)
{
	struct kvpi_prefix *pf = p->prefix;
	struct kvpi_tslot *s = kvpi_tslot_get(p);
	struct kvpi_poshard *sh = kvpi_pfx_oshard(pf, owner);
	struct acc a;
	acc_init(&a);
	pthread_mutex_lock(&sh->lock);
	struct kvpi_porec *r = kvpi_pfx_ofind(sh, owner);
	if (!r) {
		pthread_mutex_unlock(&sh->lock);
		kvpi_end_call(p, s, false);
		return KVP_ENOENT;
	}
	/* Last block first: published ones become cached in that order, so
	 * eviction takes the end of a sequence before its beginning. */
	for (uint32_t i = r->len; i-- > 0;) {
		uint32_t id = r->ids[i];
		if (id == KVPI_NO_ID)
			continue;
		uint64_t fst = 0;
		enum drop d = drop_hold(p, s, id, 0, true, owner, &fst);
		note(p, s, &a, d, fst, id);
	}
	kvpi_pfx_oremove(sh, r);
	pthread_mutex_unlock(&sh->lock);
	acc_finish(p, s, &a);
	kvpi_end_call(p, s, true);
	return KVP_OK;
}

int kvpi_pfx_blocks_for(struct kvp_pool *p, kvp_owner owner, kvp_ref *refs, size_t cap, size_t *n)
{
	struct kvpi_prefix *pf = p->prefix;
	struct kvpi_poshard *sh = kvpi_pfx_oshard(pf, owner);
	int rc = KVP_OK;
	pthread_mutex_lock(&sh->lock);
	struct kvpi_porec *r = kvpi_pfx_ofind(sh, owner);
	if (!r) {
		rc = KVP_ENOENT;
	} else if (r->count > cap) {
		*n = r->count;
		rc = KVP_ERANGE;
	} else {
		size_t k = 0;
		for (uint32_t i = 0; i < r->len; i++) {
			uint32_t id = r->ids[i];
			if (id == KVPI_NO_ID)
				continue;
			/* relaxed: a held block keeps its generation; the shard
			 * mutex orders its hand-out before us. */
			uint64_t st = atomic_load_explicit(&kvpi_bt_block(&p->bt, id)->state,
			                                   memory_order_relaxed);
			refs[k++] = KVP_MAKE_REF(id, kvpi_st_gen(st));
		}
		*n = k;
	}
	pthread_mutex_unlock(&sh->lock);
	return rc;
}

int kvpi_pfx_register_owner(struct kvp_pool *p, kvp_owner owner)
{
	struct kvpi_poshard *sh = kvpi_pfx_oshard(p->prefix, owner);
	int rc = KVP_OK;
	pthread_mutex_lock(&sh->lock);
	struct kvpi_porec *r = kvpi_pfx_ofind(sh, owner);
	if (r)
		rc = KVP_EOWNER;
	else if (!(r = kvpi_pfx_oinsert(sh, owner)))
		rc = KVP_ENOMEM;
	else
		r->registered = true;
	pthread_mutex_unlock(&sh->lock);
	return rc;
}

int kvpi_pfx_release_owner(struct kvp_pool *p, kvp_owner owner)
{
	struct kvpi_poshard *sh = kvpi_pfx_oshard(p->prefix, owner);
	int rc = KVP_OK;
	pthread_mutex_lock(&sh->lock);
	struct kvpi_porec *r = kvpi_pfx_ofind(sh, owner);
	if (!r) {
		rc = KVP_ENOENT;
	} else {
		r->registered = false;
		if (r->count == 0)
			kvpi_pfx_oremove(sh, r);
	}
	pthread_mutex_unlock(&sh->lock);
	return rc;
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
		uint32_t e = kvpi_pfx_evict_to_stack(p, s, si, ids, want);
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
