/*
 * lib/pool/pool_free.c - kvp_free and kvp_free_block in a plain pool.
 *
 * Owns: freeing blocks by ref.  A free checks the ref's generation against
 * the block's state word and clears it: an owned block under its owner's
 * exclusion (an owner op, or the shard's exclusion with the bias revoked)
 * with a plain store, a raw block with a CAS, or with a plain store inside a raw
 * op while its slot's raw bias stands (lib/pool/bias.c).  A stale ref
 * changes nothing and is counted.  The freed blocks go to this thread's
 * magazine or the global stack.  One ref takes a short inline path; every
 * other case goes to free_single_general or free_batch.
 *
 * May call: the block path (lib/pool/pool_blocks.c, magazine.h), the owner
 * table (lib/pool/owner.h), the bias protocols (lib/pool/bias.c), the
 * state-word helpers (lib/pool/block_state.h) and the statistics.
 */
#include "lib/pool/block_state.h"

#define KVPI_FREE_BATCH 64u

/* Clear in_use on a raw block still at @st's generation (no exclusion: a
 * CAS); returns the state it had, or 0 when a racing free got there first. */
static uint64_t clear_in_use(struct kvpi_block *b, uint64_t st, uint32_t gen)
{
	for (;;) {
		if (kvpi_st_gen(st) != gen || !(st & KVPI_ST_IN_USE))
			return 0;
		/* acq_rel: acquire orders the holder's last writes (set_used,
		 * storage) before our push; release is carried by the push. */
		if (atomic_compare_exchange_weak_explicit(&b->state, &st, kvpi_freed_state(st),
		                                          memory_order_acq_rel,
		                                          memory_order_acquire))
			return st;
	}
}

/* Per-call accumulator for kvp_free: freed ids per stream, flushed in batches. */
struct free_acc {
	uint32_t ids[2][KVPI_FREE_BATCH];
	uint32_t n[2];
	uint64_t freed, stale, not_full;
};

/* Give a batch back (counted first: kvpi_note_freed). */
static void acc_flush(struct kvp_pool *p, struct kvpi_tslot *s, struct free_acc *a, int si)
{
	if (a->n[si] == 0)
		return;
	kvpi_give_back(p, s, si, a->ids[si], a->n[si]);
	a->n[si] = 0;
}

static void acc_add(struct kvp_pool *p, struct kvpi_tslot *s, struct free_acc *a, uint64_t st,
                    uint32_t id)
{
	int si = kvpi_stream_of_state(p, st);
	a->freed++;
	a->not_full += kvpi_st_used(st) < p->block_size;
	a->ids[si][a->n[si]++] = id;
	if (a->n[si] == KVPI_FREE_BATCH)
		acc_flush(p, s, a, si);
}

/* Hold shard @sh's lock in *held (one at a time).  The lock, never a
 * shard op: the next ref's free may enter an owner op while it is held. */
static void hold_shard(struct kvp_pool *p, struct kvpi_tslot *s, struct kvpi_oshard **held,
                       struct kvpi_oshard *sh)
{
	if (sh == *held)
		return;
	if (*held)
		pthread_mutex_unlock(&(*held)->lock);
	kvpi_oshard_lock(p, s, sh);
	*held = sh;
}

/*
 * Drop @r if it holds nothing and is not registered; the shard's exclusion
 * held (its lock or a shard op).  The exclusion covers 'registered' and
 * 'bias' but not 'count' while the record is biased to another thread
 * (that thread changes it in its owner ops), so count is read only after
 * making sure no other thread is biased.  A record biased to another slot
 * is left alone: that thread drops it itself when one of its frees empties
 * it (free_ref's 'empty').
 */
static void drop_if_empty(struct kvp_pool *p, struct kvpi_tslot *s, struct kvpi_oshard *sh,
                          struct kvpi_orec *r)
{
	if (r->registered)
		return;
	/* relaxed: bias is written only under the shard's exclusion, which we
	 * hold. */
	uintptr_t t = atomic_load_explicit(&r->bias, memory_order_relaxed);
	if (t != 0 && t != (uintptr_t)s)
		return;
	/* bias is 0 or ours: this thread's own ops are over, so count holds
	 * still under the shard's exclusion. */
	if (kvpi_orec_count(r) == 0)
		kvpi_oshard_remove(&p->owners, sh, &s->recs, r);
}

/* Free one owned block; the caller holds its owner's shard lock. */
static uint64_t free_owned(struct kvp_pool *p, struct kvpi_tslot *s, struct kvpi_oshard *sh,
                           struct kvpi_block *b, uint32_t gen, kvp_owner owner, uint64_t h)
{
	struct kvpi_orec *r = kvpi_oshard_find_h(sh, owner, h);
	if (r)
		kvpi_bias_revoke(p, s, r);
	/* Same generation and in use: the owner read before is this hand-out's
	 * (a generation never comes back while the block is in use), so the
	 * shard lock with the bias revoked is its exclusion. */
	uint64_t st = kvpi_release_owned(b, gen);
	if (!st || !r)
		return st;
	kvpi_orec_unlink_b(r, b, kvpi_st_used(st) < p->block_size);
	drop_if_empty(p, s, sh, r);
	return st;
}

/* Free one owned block inside an owner op on its record @r (biased to us).
 * Sets *empty when the record is left empty and unregistered. */
static uint64_t free_biased(struct kvp_pool *p, struct kvpi_orec *r, struct kvpi_block *b,
                            uint32_t gen, bool *empty)
{
	uint64_t st = kvpi_release_owned(b, gen);
	if (!st)
		return 0;
	kvpi_orec_unlink_b(r, b, kvpi_st_used(st) < p->block_size);
	*empty = kvpi_orec_count(r) == 0 && !r->registered;
	return st;
}

/* Free the block of one ref; returns the state it had, or 0 if stale. */
static inline __attribute__((always_inline)) uint64_t free_ref(struct kvp_pool *p,
                                                               struct kvpi_tslot *s,
                                                               struct kvpi_oshard **held,
                                                               uint32_t id, uint32_t gen)
{
	struct kvpi_block *b = kvpi_bt_block(&p->bt, id);
	/* acquire: pairs with kvpi_stamp_block's release. */
	uint64_t st = atomic_load_explicit(&b->state, memory_order_acquire);
	if (kvpi_st_gen(st) != gen || !(st & KVPI_ST_IN_USE))
		return 0;
	if (st & KVPI_ST_RAW) {
		kvpi_raw_exclude(p, s, b, st);
		return clear_in_use(b, st, gen);
	}
	/* acquire (a plain load on x86): the generation check under the owner's
	 * exclusion validates this word.  Should it be a later hand-out's owner,
	 * the free before that hand-out happens-before the re-check, which then
	 * sees the block freed or re-stamped (docs/DESIGN.md, "Why an owned
	 * block's free needs no CAS"); relaxed would not order the re-check. */
	kvp_owner owner = atomic_load_explicit(&b->owner, memory_order_acquire);
	struct kvpi_orec *r = kvpi_tslot_is_fallback(p, s) ? NULL : kvpi_bias_enter(p, s, owner);
	if (r) {
		bool empty = false;
		st = free_biased(p, r, b, gen, &empty);
		kvpi_bias_leave(s);
		if (empty) {
			uint64_t h = kvpi_owner_hash(owner);
			/* Dropping a record changes the shard's table: lock. */
			struct kvpi_oshard *sh = kvpi_owners_shard_h(&p->owners, h);
			hold_shard(p, s, held, sh);
			struct kvpi_orec *r2 = kvpi_oshard_find_h(sh, owner, h);
			if (r2)
				drop_if_empty(p, s, sh, r2);
		}
		return st;
	}
	uint64_t h = kvpi_owner_hash(owner);
	struct kvpi_oshard *sh = kvpi_owners_shard_h(&p->owners, h);
	hold_shard(p, s, held, sh);
	return free_owned(p, s, sh, b, gen, owner, h);
}

/*
 * KVP_OK, opaque to the optimizer.  The out-of-line ends of kvp_free's fast
 * path return it: for a static function that always returns KVP_OK the
 * compiler drops the result and makes the fast path's tail calls into
 * calls (and saves and restores callee-saved registers on every free).
 */
static inline int ok_opaque(void)
{
	int rc = KVP_OK;
	__asm__("" : "+r"(rc));
	return rc;
}

/* kvp_free of one ref (id checked), without the batch accumulator: every case. */
static __attribute__((noinline)) int free_single_general(struct kvp_pool *p, uint32_t id,
                                                         uint32_t gen)
{
	struct kvpi_tslot *s = kvpi_tslot_get(p);
	struct kvpi_oshard *held = NULL;
	uint64_t st = free_ref(p, s, &held, id, gen);
	if (held)
		pthread_mutex_unlock(&held->lock);
	if (!st) {
		kvpi_ctr_add(s, KVPI_C_STALE, 1);
		kvpi_end_call(p, s, false);
		return KVP_OK;
	}
	int si = kvpi_stream_of_state(p, st);
	kvpi_note_freed(p, s, 1); /* before the block can be taken again */
	if (!kvpi_put_one_fast(p, s, si, id))
		kvpi_put_blocks(p, s, si, &id, 1);
	if (kvpi_st_used(st) < p->block_size)
		kvpi_ctr_add(s, KVPI_C_NOT_FULL, (uint64_t)0 - 1);
	kvpi_end_call(p, s, true);
	return ok_opaque();
}

/* A free through the fast path emptied record @owner's (unregistered) list:
 * drop it, as free_ref does.  Rare (an unregistered owner's last block). */
static __attribute__((noinline, cold)) void drop_emptied(struct kvp_pool *p, struct kvpi_tslot *s,
                                                         kvp_owner owner)
{
	uint64_t h = kvpi_owner_hash(owner);
	struct kvpi_oshard *sh = kvpi_owners_shard_h(&p->owners, h);
	bool op = kvpi_oshard_enter(p, s, sh);
	struct kvpi_orec *r = kvpi_oshard_find_h(sh, owner, h);
	if (r)
		drop_if_empty(p, s, sh, r);
	kvpi_oshard_exit(s, sh, op);
}

/*
 * The end of a free through the fast path once the block is cleared (its
 * old state @st, stream @si), every case: count the free, note the block out
 * of use, give it back, count the fill and tick the history.  The fast
 * path's rare cases end here, as a tail call.
 */
static __attribute__((noinline)) int free_fast_tail(struct kvp_pool *p, struct kvpi_tslot *s,
                                                    int si, uint32_t id, uint64_t st)
{
	kvpi_note_freed(p, s, 1); /* before the block can be taken again */
	if (!kvpi_mag_push(p, s, si, id))
		kvpi_put_blocks(p, s, si, &id, 1);
	if (kvpi_st_used(st) < p->block_size)
		kvpi_ctr_add(s, KVPI_C_NOT_FULL, (uint64_t)0 - 1);
	kvpi_history_tick(p, s);
	return ok_opaque();
}

/* free_fast_tail after the free emptied the record of @owner (unregistered):
 * drop it first. */
static __attribute__((noinline, cold)) int free_fast_drop(struct kvp_pool *p, struct kvpi_tslot *s,
                                                          int si, uint32_t id, uint64_t st,
                                                          kvp_owner owner)
{
	drop_emptied(p, s, owner);
	return free_fast_tail(p, s, si, id, st);
}

/* The fast path's end when its magazine was full or the stream starving
 * (counted and accounted already): the block goes to the global stack. */
static __attribute__((noinline)) int free_fast_put(struct kvp_pool *p, struct kvpi_tslot *s, int si,
                                                   uint32_t id, uint64_t st)
{
	kvpi_put_blocks(p, s, si, &id, 1);
	if (kvpi_st_used(st) < p->block_size)
		kvpi_ctr_add(s, KVPI_C_NOT_FULL, (uint64_t)0 - 1);
	kvpi_history_tick(p, s);
	return ok_opaque();
}

/* The fast path's end when a history snapshot may be due (the call is
 * counted already, as @calls). */
static __attribute__((noinline)) int free_fast_tick(struct kvp_pool *p, uint32_t calls)
{
	kvpi_history_tick_slow(p, calls);
	return ok_opaque();
}

/*
 * kvp_free of one ref.  The common case is kept short: a block (id below
 * n_ids) freed into the thread's own magazine, a raw block by its CAS, an
 * owned one inside an owner op on its record biased to this thread.
 * Every other case, and any step of this one that does not work out before
 * the block's state changes, goes to free_single_general having changed
 * nothing.  The only calls are tail calls (see kvpi_fast_end).
 */
static inline __attribute__((always_inline)) int free_single(struct kvp_pool *p, kvp_ref ref)
{
	uint32_t id = KVP_REF_ID(ref), gen = KVP_REF_GEN(ref);
	/* acquire: ids below n_ids are fully made (see kvp_pool_n_ids). */
	if (id >= atomic_load_explicit(&p->n_ids, memory_order_acquire))
		return KVP_ENOENT;
	struct kvpi_tslot *s = kvpi_tslot_mine(p);
	if (!s)
		return free_single_general(p, id, gen);
	struct kvpi_block *b = kvpi_bt_block(&p->bt, id);
	/* acquire: pairs with kvpi_stamp_block's release. */
	uint64_t st = atomic_load_explicit(&b->state, memory_order_acquire);
	if (kvpi_st_gen(st) != gen || !(st & KVPI_ST_IN_USE))
		return free_single_general(p, id, gen); /* stale: counted there */
	kvp_owner owner = 0;
	bool drop = false, nf;
	if (st & KVPI_ST_RAW) {
		/* relaxed: compared only; the state re-read under the op (same
		 * generation, in use) shows it was this hand-out's. */
		uint64_t o = atomic_load_explicit(&b->owner, memory_order_relaxed);
		if (o == (uint64_t)(uintptr_t)s) {
			/* Biased to us: a raw op (see kvpi_raw_owner_word). */
			bool asym = p->asym;
			kvpi_light_store_m(asym, &s->in_owner_op, KVPI_RAW_OP);
			/* relaxed (asym) / seq_cst (fallback): the load half of the
			 * Dekker pair with raw_revoke. */
			uint32_t rb = atomic_load_explicit(
			    &s->raw_bias, asym ? memory_order_relaxed : memory_order_seq_cst);
			if (rb == KVPI_RAW_BIASED)
				st = kvpi_release_owned(b, gen);
			/* release: a revoker waiting on us sees our store. */
			atomic_store_explicit(&s->in_owner_op, 0, memory_order_release);
			if (rb != KVPI_RAW_BIASED)
				st = clear_in_use(b, st, gen);
		} else if (o == 0) {
			st = clear_in_use(b, st, gen);
		} else {
			return free_single_general(p, id, gen); /* another slot's: revoke */
		}
		if (!st)
			return free_single_general(p, id, gen);
		nf = kvpi_st_used(st) < p->block_size; /* for the counter below */
	} else {
		/* acquire (a plain load on x86): the generation check under the owner's
		 * exclusion validates this word.  Should it be a later hand-out's owner,
		 * the free before that hand-out happens-before the re-check, which then
		 * sees the block freed or re-stamped (docs/DESIGN.md, "Why an owned
		 * block's free needs no CAS"); relaxed would not order the re-check. */
		owner = atomic_load_explicit(&b->owner, memory_order_acquire);
		struct kvpi_orec *r = kvpi_bias_enter(p, s, owner);
		if (!r)
			return free_single_general(p, id, gen);
		st = kvpi_release_owned(b, gen);
		if (!st) {
			kvpi_bias_leave(s);
			return free_single_general(p, id, gen);
		}
		/* Computed once: the counter below needs it too, and the
		 * atomics between would make the compiler load it again. */
		nf = kvpi_st_used(st) < p->block_size;
		kvpi_orec_unlink_b(r, b, nf);
		drop = kvpi_orec_count(r) == 0 && !r->registered;
		kvpi_bias_leave(s);
	}
	/* The block is ours to give back from here on. */
	int si = kvpi_stream_of_state(p, st);
	int64_t nd = s->delta_in_use - 1;
	if (__builtin_expect(drop, 0))
		return free_fast_drop(p, s, si, id, st, owner);
	if (__builtin_expect(nd < 0 || nd > s->in_use_room, 0))
		return free_fast_tail(p, s, si, id, st);
	/* Counted before the block can be taken again (kvpi_note_freed). */
	kvpi_ctr_add(s, KVPI_C_FREES, 1);
	s->delta_in_use = nd; /* kvpi_account_in_use's common case */
	if (!kvpi_mag_push(p, s, si, id))
		return free_fast_put(p, s, si, id, st);
	if (nf)
		kvpi_ctr_add(s, KVPI_C_NOT_FULL, (uint64_t)0 - 1);
	uint32_t calls = s->calls++;
	if (__builtin_expect((calls & (KVP_HISTORY_EVERY - 1)) == 0, 0))
		return free_fast_tick(p, calls);
	return KVP_OK;
}

/* kvp_free of @n > 1 refs (or any in a prefix pool), arguments checked. */
static __attribute__((noinline)) int free_batch(struct kvp_pool *p, const kvp_ref *refs, size_t n)
{
	uint32_t n_ids = kvp_pool_n_ids(p);
	for (size_t i = 0; i < n; i++)
		if (KVP_REF_ID(refs[i]) >= n_ids)
			return KVP_ENOENT;
	if (__builtin_expect(p->mode != NULL, 0))
		return p->mode->free(p, refs, n);

	struct kvpi_tslot *s = kvpi_tslot_get(p);
	struct free_acc a;
	struct kvpi_oshard *held = NULL;
	a.n[0] = a.n[1] = 0;
	a.freed = a.stale = a.not_full = 0;
	for (size_t i = 0; i < n; i++) {
		uint32_t id = KVP_REF_ID(refs[i]);
		uint64_t st = free_ref(p, s, &held, id, KVP_REF_GEN(refs[i]));
		if (!st) {
			a.stale++;
			continue;
		}
		acc_add(p, s, &a, st, id);
	}
	if (held)
		pthread_mutex_unlock(&held->lock);
	for (int si = 0; si < 2; si++)
		acc_flush(p, s, &a, si);
	if (a.stale)
		kvpi_ctr_add(s, KVPI_C_STALE, a.stale);
	if (a.not_full)
		kvpi_ctr_add(s, KVPI_C_NOT_FULL, (uint64_t)0 - a.not_full);
	kvpi_end_call(p, s, a.freed != 0);
	return ok_opaque();
}

int kvp_free(kvp_pool *p, const kvp_ref *refs, size_t n)
{
	if (!p || (!refs && n))
		return KVP_EINVAL;
	if (n == 0)
		return KVP_OK;
	if (n == 1 && !p->mode)
		return free_single(p, refs[0]);
	return free_batch(p, refs, n);
}

/* kvp_free_block in a prefix pool: that layer's kvp_free. */
static __attribute__((noinline)) int free_block_prefix(struct kvp_pool *p, kvp_ref ref)
{
	return kvp_free(p, &ref, 1);
}

int kvp_free_block(kvp_pool *p, kvp_ref ref)
{
	if (!p)
		return KVP_EINVAL;
	if (p->mode)
		return free_block_prefix(p, ref);
	return free_single(p, ref);
}
