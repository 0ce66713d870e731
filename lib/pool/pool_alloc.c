/*
 * lib/pool/pool_alloc.c - kvp_allocate and kvp_alloc_block in a plain pool.
 *
 * Owns: taking blocks for a request (all or nothing) and handing them out:
 * each block is stamped with a new generation, its owner and its fill, and
 * added to the owner's id array under the owner's exclusion (an owner op on
 * a record biased to this thread, or else the owner's shard's exclusion:
 * its lock, or a shard op of a minted shard biased to this thread).  The
 * common case (one block, an owner biased to this thread, a block in the
 * thread's magazine) is a short inline path; every other case goes to
 * allocate_general having changed nothing.  A prefix pool's calls go to its
 * mode (p->mode) before any of this.
 *
 * May call: the block path (lib/pool/pool_blocks.c, magazine.h), the owner
 * table (lib/pool/owner.h), the bias protocols (lib/pool/bias.c), the
 * state-word helpers (lib/pool/block_state.h) and the statistics.
 */
#include "lib/pool/block_state.h"

/* Blocks needed for @n tokens: a shift when block_size is a power of two. */
static inline uint32_t blocks_for_tokens(const struct kvp_pool *p, uint32_t n)
{
	if (p->bs_shift >= 0)
		return (uint32_t)(((uint64_t)n + p->block_size - 1) >> p->bs_shift);
	return n / p->block_size + (n % p->block_size != 0);
}

/*
 * Where kvp_allocate keeps the ids of the @nb blocks it took: the upper half
 * of the caller's refs array, read as 32-bit words.  hand_out widens them
 * to refs in order; refs[i] covers words 2i and 2i+1, which hold ids[j]
 * only for j = 2i - nb or 2i + 1 - nb, both at most i: an id is read before
 * its word is overwritten.  No allocation, and no second pass.
 */
static inline kvpi_u32_alias *ids_in(kvp_ref *refs, uint32_t nb)
{
	return (kvpi_u32_alias *)refs + nb;
}

/* Stamp block @b (ours since the acquire pop) with generation+1 and state
 * @st, which carries the block's stream bits already; returns the new
 * generation, adds 1 to *@reused if it had been handed out before. */
static inline __attribute__((always_inline)) uint32_t stamp_fast(struct kvpi_block *b, uint64_t st,
                                                                 kvp_owner owner, uint64_t *reused)
{
	/* relaxed: we hold the block exclusively since the acquire pop. */
	uint64_t old = atomic_load_explicit(&b->state, memory_order_relaxed);
	uint32_t gen = kvpi_st_gen(old) + 1;
	gen += gen == 0; /* generation 0 means "never handed out" */
	*reused += (old & KVPI_ST_EVER) != 0;
	/* release, both (plain stores on x86): as in kvpi_stamp_block. */
	atomic_store_explicit(&b->owner, owner, memory_order_release);
	atomic_store_explicit(&b->state, st | gen, memory_order_release);
	return gen;
}

/* Hand block @id (metadata @b) out in state @st: stamped, at position
 * @pos of its owner's array (*@slot), its ref in *@ref. */
static inline __attribute__((always_inline)) void hand_one(struct kvpi_block *b, uint32_t id,
                                                           uint64_t st, kvp_owner owner,
                                                           uint32_t pos, uint32_t *slot,
                                                           kvp_ref *ref, uint64_t *reused)
{
	uint32_t gen = stamp_fast(b, st, owner, reused);
	b->own_pos = pos;
	*slot = id;
	*ref = KVP_MAKE_REF(id, gen);
}

/*
 * Stamp the @nb popped blocks whose ids are read from @src, one every
 * @step, for @owner, append them to @r's id array in order and write the
 * refs; the caller holds @r's exclusion and has reserved room for @nb in
 * its array.  Returns how many had been handed out before.
 *
 * One pass in allocation order.  Every block was popped by us (acquire),
 * or sits in the magazine we hold, so its metadata is ours to write; the
 * record's exclusion covers the array and each block's position in it.
 * When @src is ids_in(@refs, @nb), step i reads its id before it writes
 * refs[i] (ids_in says why that never overwrites an id not yet read).
 * The block table's first segment is read once: the atomic stores would
 * make the compiler load it again for every block.
 */
static inline __attribute__((always_inline)) uint64_t
hand_out_from(struct kvp_pool *p, int si, struct kvpi_orec *r, kvp_ref *refs,
              const kvpi_u32_alias *src, ptrdiff_t step, uint32_t nb, uint32_t n_tokens,
              kvp_owner owner, kvp_format format)
{
	uint32_t bs = p->block_size;
	struct kvpi_blocktable *bt = &p->bt;
	struct kvpi_block *seg0 = bt->seg0;
	uint32_t n0 = bt->n0;
	/* The blocks were taken from stream @si's magazine, stack or growth,
	 * and a block there carries that stream's tag (given when it is made,
	 * lib/pool/pool.c and pool_resize.c, or revived; a free puts a block
	 * back by its tag): so each stamp is one OR, not a read-modify of the
	 * old bits. */
	uint64_t full = kvpi_st_make(0, bs, KVPI_ST_IN_USE | KVPI_ST_EVER, kvpi_stream_tag(p, si),
	                             (uint32_t)format);
	uint64_t reused = 0;
	uint32_t pos = r->ids.len;
	uint32_t *arr = r->ids.ids + pos;
	uint32_t last = nb - 1;

	uint32_t i = 0;
	/*
	 * Every id we hold was made before we took it: its block was pushed
	 * (release) after the growth that made it stored n_ids (release), and
	 * reached us through acquires.  So when n_ids, read now, does not pass
	 * the first segment, neither does any of our ids: the common case, a
	 * loop with no segment check and no call.
	 */
	if (__builtin_expect(atomic_load_explicit(&p->n_ids, memory_order_acquire) <= n0, 1)) {
		for (; i < last; i++, src += step)
			hand_one(&seg0[*src], *src, full, owner, pos + i, &arr[i], &refs[i],
			         &reused);
	} else {
		for (; i < last; i++, src += step) {
			uint32_t id = *src;
			if (__builtin_expect(id >= n0, 0))
				break;
			hand_one(&seg0[id], id, full, owner, pos + i, &arr[i], &refs[i], &reused);
		}
		for (; i < last; i++, src += step) /* the rest, once an id past it came up */
			hand_one(kvpi_bt_block_slow(bt, *src), *src, full, owner, pos + i, &arr[i],
			         &refs[i], &reused);
	}
	/* The last block takes the rest of the tokens. */
	hand_one(kvpi_bt_block_at(bt, seg0, n0, *src), *src,
	         kvpi_st_with_used(full, n_tokens - last * bs), owner, pos + last, &arr[last],
	         &refs[last], &reused);
	r->ids.len = pos + nb;
	r->ids.count += nb;
	r->not_full += n_tokens - last * bs < bs;
	return reused;
}

/* hand_out_from the ids kvpi_get_blocks left in ids_in(@refs, @nb). */
static __attribute__((noinline)) uint64_t hand_out(struct kvp_pool *p, int si, struct kvpi_orec *r,
                                                   kvp_ref *refs, uint32_t nb, uint32_t n_tokens,
                                                   kvp_owner owner, kvp_format format)
{
	return hand_out_from(p, si, r, refs, ids_in(refs, nb), 1, nb, n_tokens, owner, format);
}

/*
 * @owner's record (hash @h) under its shard's exclusion, held on return
 * (@x; a shard op only if @may_op), with room for @nb more ids: found,
 * with another thread's bias on it revoked, or made from the slot's record
 * cache (*@made then true).  NULL, with the exclusion released and nothing
 * changed, when no record or no room could be had (no memory).
 */
static inline __attribute__((always_inline)) struct kvpi_orec *
locked_with_room(struct kvp_pool *p, struct kvpi_tslot *s, kvp_owner owner, uint64_t h, uint32_t nb,
                 bool may_op, struct kvpi_oexcl *x, bool *made)
{
	struct kvpi_oshard *sh = kvpi_owners_shard_h(&p->owners, h);
	x->sh = sh;
	x->op = false;
	if (may_op)
		x->op = kvpi_oshard_enter(p, s, sh);
	else
		kvpi_oshard_lock(p, s, sh);
	struct kvpi_orec *r = kvpi_oshard_find_h(sh, owner, h);
	*made = r == NULL;
	if (r)
		kvpi_bias_revoke(p, s, r);
	else
		r = kvpi_oshard_insert_h(&p->owners, sh, &s->recs, owner, h);
	if (r && kvpi_orec_reserve(&p->owners, r, &p->bt, &s->recs, nb) != 0) {
		if (*made)
			kvpi_oshard_remove(&p->owners, sh, &s->recs, r);
		r = NULL;
	}
	if (!r)
		kvpi_oshard_exit(s, sh, x->op);
	return r;
}

/*
 * Hand @nb blocks of stream @si out to @r (its exclusion held, room in its
 * array) straight from the thread's magazine, stamped where they lie (top
 * first, the order kvpi_get_blocks would take them): no copy of their ids.
 * Returns true with *@reused set; false having changed nothing (too few
 * blocks in the magazine, the stream starving).  Inside the magazine we
 * wait for nothing, so entering it under the owner's exclusion (an owner
 * op, the shard lock or a shard op) is safe, as in the one-block fast path and
 * kvp_free_all.
 */
static inline __attribute__((always_inline)) bool
take_from_mag(struct kvp_pool *p, struct kvpi_tslot *s, int si, struct kvpi_orec *r, kvp_ref *refs,
              uint32_t nb, uint32_t n_tokens, kvp_owner owner, kvp_format format, uint64_t *reused)
{
	struct kvpi_mag *m = &s->mag[si];
	if (!kvpi_mag_enter(p, m, si))
		return false;
	uint32_t cnt = kvpi_mag_count(m);
	bool done = cnt >= nb;
	if (done) {
		*reused = hand_out_from(p, si, r, refs, m->ids + cnt - 1, -1, nb, n_tokens, owner,
		                        format);
		kvpi_mag_set_count(m, cnt - nb);
	}
	kvpi_mag_leave(m);
	return done;
}

/*
 * kvp_allocate served whole from the thread's magazine, under the owner's
 * exclusion: inside an owner op when its record is biased to this thread,
 * else under its shard's exclusion, the record made (from the slot's record
 * cache) if it has none.  Returns true with the blocks handed out and
 * *@reused set; false with no block taken and nothing a caller can see
 * changed (a record made for the owner is dropped again; a bias may have
 * been revoked, the record's array grown), and then the general path
 * takes the blocks first and the owner after.
 */
static __attribute__((noinline)) bool alloc_from_mag(struct kvp_pool *p, struct kvpi_tslot *s,
                                                     int si, kvp_ref *refs, uint32_t nb,
                                                     uint32_t n_tokens, kvp_owner owner,
                                                     kvp_format format, bool unbiased,
                                                     uint64_t *reused)
{
	/* relaxed: our own magazine's count, a hint here (checked inside). */
	if (!kvpi_use_magazine(p, s) ||
	    atomic_load_explicit(&s->mag[si].count, memory_order_relaxed) < nb)
		return false;
	struct kvpi_orec *r = unbiased ? NULL : kvpi_bias_enter(p, s, owner);
	if (r) {
		bool done = (uint64_t)r->ids.len + nb <= r->ids.cap &&
		            take_from_mag(p, s, si, r, refs, nb, n_tokens, owner, format, reused);
		kvpi_bias_leave(s);
		return done;
	}
	if (kvpi_rec_cache_reserve(&p->owners, &s->recs) != 0)
		return false;
	struct kvpi_oexcl x;
	bool made;
	r = locked_with_room(p, s, owner, kvpi_owner_hash(owner), nb, true, &x, &made);
	if (!r)
		return false;
	/* Inside the shard's exclusion (a shard op or its lock) we enter only
	 * the magazine, never an owner op. */
	bool done = take_from_mag(p, s, si, r, refs, nb, n_tokens, owner, format, reused);
	if (done)
		kvpi_bias_adopt(p, s, r);
	else if (made)
		kvpi_oshard_remove(&p->owners, x.sh, &s->recs, r);
	kvpi_oshard_exit(s, x.sh, x.op);
	return done;
}

/* Give back the @nb blocks an allocate took (ids_in(@refs, @nb)) but could
 * not hand out: they were never marked in use.  Outside any owner op. */
static int undo_take(struct kvp_pool *p, struct kvpi_tslot *s, int si, kvp_ref *refs, uint32_t nb)
{
	kvpi_put_blocks(p, s, si, (const uint32_t *)ids_in(refs, nb), nb);
	return kvpi_fail_call(p, s, KVP_ENOMEM);
}

static inline __attribute__((always_inline)) int alloc_done(struct kvp_pool *p,
                                                            struct kvpi_tslot *s, uint32_t nb,
                                                            uint32_t n_tokens, uint64_t reused,
                                                            size_t *n_refs)
{
	kvpi_ctr_add(s, KVPI_C_ALLOCS, nb);
	kvpi_ctr_add(s, KVPI_C_REUSED, reused);
	kvpi_ctr_add(s, KVPI_C_NOT_FULL, n_tokens - (nb - 1) * p->block_size < p->block_size);
	kvpi_account_in_use(p, s, nb);
	kvpi_end_call(p, s, true);
	*n_refs = nb;
	return KVP_OK;
}

/*
 * Hand @nb blocks, already taken (their ids in @refs), out to @owner under
 * its shard's exclusion: its record is found, or made from the record the caller
 * reserved in the slot's cache (so that cannot fail), and another thread's
 * bias on it is revoked first.  Returns 0 with *@reused set to how many
 * had been handed out before, or -1 when the record's id array could not
 * grow (no memory): nothing is then changed, the blocks are still the
 * caller's.
 */
static int hand_out_locked(struct kvp_pool *p, struct kvpi_tslot *s, int si, kvp_ref *refs,
                           uint32_t nb, uint32_t n_tokens, kvp_owner owner, kvp_format format,
                           uint64_t *reused)
{
	struct kvpi_oexcl x;
	bool made;
	struct kvpi_orec *r =
	    locked_with_room(p, s, owner, kvpi_owner_hash(owner), nb, true, &x, &made);
	if (!r)
		return -1;
	*reused = hand_out(p, si, r, refs, nb, n_tokens, owner, format);
	kvpi_bias_adopt(p, s, r);
	kvpi_oshard_exit(s, x.sh, x.op);
	return 0;
}

/* kvp_allocate's locked path when no owner record could be reserved: the
 * record is made first under the shard lock, held through the block path. */

static int allocate_locked(struct kvp_pool *p, struct kvpi_tslot *s, int si, uint32_t n_tokens,
                           uint32_t nb, kvp_owner owner, uint64_t h, kvp_format format,
                           kvp_ref *refs, size_t *n_refs)
{
	/*
	 * The owner's shard lock is held for the whole call: the owner record
	 * and the room in its id array are had first (so running out of
	 * memory for them leaves no trace), and no free of the new blocks can
	 * slip in before their refs are written.  Growth and starvation may
	 * run under it: nothing that holds grow_lock or a claimed magazine
	 * ever waits for a shard lock.
	 */
	struct kvpi_oexcl x;
	bool made;
	/* The lock, not a shard op: the block path below may drain. */
	struct kvpi_orec *r = locked_with_room(p, s, owner, h, nb, false, &x, &made);
	if (!r)
		return kvpi_fail_call(p, s, KVP_ENOMEM);
	int rc = kvpi_get_blocks(p, s, si, ids_in(refs, nb), nb);
	if (rc != KVP_OK) {
		if (made)
			kvpi_oshard_remove(&p->owners, x.sh, &s->recs, r);
		pthread_mutex_unlock(&x.sh->lock);
		return kvpi_fail_call(p, s, rc);
	}
	uint64_t reused = hand_out(p, si, r, refs, nb, n_tokens, owner, format);
	kvpi_bias_adopt(p, s, r);
	pthread_mutex_unlock(&x.sh->lock);
	return alloc_done(p, s, nb, n_tokens, reused, n_refs);
}

/*
 * kvp_allocate's stream index, token count and format in one word, so the
 * general path takes six arguments: all in registers, and the fast path's
 * calls to it are tail calls (no callee-saved registers saved there).
 * @unbiased: the fast path found no record of the owner biased to this
 * thread in its owner cache (so alloc_from_mag need not look again: only
 * this thread could bias one to itself, and it is here).
 */
static inline uint64_t alloc_req(int si, uint32_t n_tokens, kvp_format format, bool unbiased)
{
	return (uint64_t)n_tokens << 32 | (uint64_t)unbiased << 16 | (uint64_t)format << 8 |
	       (uint64_t)si;
}

/*
 * Make room for @nb more ids in @owner's id array before any block is
 * taken, so the hand-out after cannot fail for memory once the blocks (and
 * maybe a growth of the pool) are had: in an owner op when the record is
 * biased to this thread, else under the shard's exclusion (revoking another
 * thread's bias), or, for an owner with no record yet, in the record the
 * slot's cache holds for it (private until kvpi_oshard_insert takes it).
 * 0, or -1 (no memory: nothing else changed).  The slot's record cache
 * holds a record (kvpi_rec_cache_reserve).
 *
 * The room holds until the hand-out unless another thread appends to the
 * same owner in between: then the hand-out reserves again, and only if
 * that finds no memory does the call fail with its blocks given back.
 */
static int prepare_room(struct kvp_pool *p, struct kvpi_tslot *s, kvp_owner owner, uint32_t nb)
{
	struct kvpi_oexcl x;
	struct kvpi_orec *r = kvpi_owner_lock(p, s, owner, &x);
	if (!r)
		r = s->recs.head; /* the record kvpi_oshard_insert will take */
	int rc = kvpi_orec_reserve(&p->owners, r, &p->bt, &s->recs, nb);
	kvpi_owner_unlock(s, &x);
	return rc;
}

/* kvp_allocate with its arguments checked (@req: alloc_req), every case. */
static __attribute__((noinline)) int allocate_general(struct kvp_pool *p, uint64_t req,
                                                      kvp_owner owner, kvp_ref *refs,
                                                      size_t refs_cap, size_t *n_refs)
{
	int si = (int)(req & 0xff);
	kvp_format format = (kvp_format)((req >> 8) & 0xff);
	uint32_t n_tokens = (uint32_t)(req >> 32);
	uint32_t nb = blocks_for_tokens(p, n_tokens);
	if (refs_cap < nb) {
		*n_refs = nb;
		return KVP_ERANGE;
	}
	if (__builtin_expect(p->mode != NULL, 0)) {
		int prc = p->mode->allocate(p, si, n_tokens, owner, format, refs, nb);
		*n_refs = prc == KVP_OK ? nb : 0;
		return prc;
	}

	struct kvpi_tslot *s = kvpi_tslot_get(p);
	/*
	 * When the thread's magazine holds them all, the blocks are handed out
	 * where they lie, under the owner's exclusion (alloc_from_mag): no
	 * drain or growth can be needed then.  Otherwise the blocks are taken
	 * first, inside neither the owner's shard lock, a shard op nor an owner op: a drain (which
	 * waits for other threads' magazines and issues the heavy barrier) or a growth then holds
	 * up no other thread that touches this owner or any owner of its shard, and a revoker never
	 * waits for an owner op that is draining.  The owner's record, if it has none yet, is then
	 * made from a record reserved here, which cannot fail, and room in its id array is made
	 * before the blocks are taken (prepare_room); only if not even one record can be had (no
	 * memory) is the record made first and the block path run under the shard lock
	 * (allocate_locked), so a failure still leaves no trace.
	 */
	uint64_t reused;
	if (alloc_from_mag(p, s, si, refs, nb, n_tokens, owner, format, (req >> 16) & 1, &reused))
		return alloc_done(p, s, nb, n_tokens, reused, n_refs);
	if (kvpi_rec_cache_reserve(&p->owners, &s->recs) != 0)
		return allocate_locked(p, s, si, n_tokens, nb, owner, kvpi_owner_hash(owner),
		                       format, refs, n_refs);
	if (prepare_room(p, s, owner, nb) != 0)
		return kvpi_fail_call(p, s, KVP_ENOMEM);
	/* The caller's refs array doubles as scratch for the ids: no allocation. */
	int rc = kvpi_get_blocks(p, s, si, ids_in(refs, nb), nb);
	if (rc != KVP_OK)
		return kvpi_fail_call(p, s, rc);
	struct kvpi_orec *r = kvpi_tslot_is_fallback(p, s) ? NULL : kvpi_bias_enter(p, s, owner);
	if (r) {
		/* Inside an owner op on our own record: no lock (a revoker waits). */
		bool room = kvpi_orec_reserve(&p->owners, r, &p->bt, &s->recs, nb) == 0;
		if (room)
			reused = hand_out(p, si, r, refs, nb, n_tokens, owner, format);
		kvpi_bias_leave(s);
		if (!room)
			return undo_take(p, s, si, refs, nb);
	} else if (hand_out_locked(p, s, si, refs, nb, n_tokens, owner, format, &reused) != 0) {
		return undo_take(p, s, si, refs, nb);
	}
	return alloc_done(p, s, nb, n_tokens, reused, n_refs);
}

/*
 * The fast path's one block: enter @owner's record as the thread it is
 * biased to, then pop a block of stream @si from the thread's magazine
 * into *@id, when the record's id array has room for it.  Returns the
 * record, inside the owner op; or NULL, inside no op and with nothing
 * taken (*@unbiased set when no record biased to us was found).
 */
static inline __attribute__((always_inline)) struct kvpi_orec *
fast_take(struct kvp_pool *p, struct kvpi_tslot *s, int si, kvp_owner owner, uint32_t *id,
          bool *unbiased)
{
	struct kvpi_orec *r = kvpi_bias_enter(p, s, owner);
	*unbiased = r == NULL;
	if (r && (!kvpi_idarr_room(&r->ids) || !kvpi_mag_pop(p, s, si, id))) {
		kvpi_bias_leave(s);
		return NULL;
	}
	return r;
}

/*
 * kvp_allocate's body; the function itself (below) only decides whether this
 * call is one of the thread's sampled ones (lib/pool/pool_latency.h).  Always
 * inlined, so that the untimed path is this code with one TLS decrement and
 * a branch in front, its tail calls kept.
 */
static inline __attribute__((always_inline)) int allocate_body(kvp_pool *p, kvp_stream stream,
                                                               uint32_t n_tokens, kvp_owner owner,
                                                               kvp_format format, kvp_ref *refs,
                                                               size_t refs_cap, size_t *n_refs)
{
	if (!n_refs)
		return KVP_EINVAL;
	*n_refs = 0;
	if (!p || !refs || n_tokens == 0 || (unsigned)format >= KVP_N_FORMATS)
		return KVP_EINVAL;
	int si = kvpi_stream_index(p, stream);
	if (si < 0)
		return KVP_EINVAL;
	/*
	 * The common case, kept short: one block, for an owner biased to this
	 * thread, from the thread's own magazine.  Every other case, and any
	 * step of this one that does not work out before the block is taken,
	 * goes to allocate_general having changed nothing.  The only calls
	 * here are tail calls (see kvpi_fast_end).
	 */
	struct kvpi_tslot *s = kvpi_tslot_mine(p);
	struct kvpi_orec *r;
	uint32_t id;
	bool unbiased = false;
	if (n_tokens > p->block_size || refs_cap == 0 || p->mode || !s ||
	    !(r = fast_take(p, s, si, owner, &id, &unbiased)))
		return allocate_general(p, alloc_req(si, n_tokens, format, unbiased), owner, refs,
		                        refs_cap, n_refs);
	/* Inside an owner op on our own record: no lock (a revoker waits). */
	bool re, nf = n_tokens < p->block_size; /* once: the atomics below reload */
	struct kvpi_block *b = kvpi_bt_block(&p->bt, id);
	uint32_t gen = kvpi_stamp_block(b, n_tokens, 0, owner, format, &re);
	kvpi_orec_append_b(r, id, b);
	r->not_full += nf;
	kvpi_bias_leave(s);
	refs[0] = KVP_MAKE_REF(id, gen);
	*n_refs = 1;
	kvpi_ctr_add(s, KVPI_C_ALLOCS, 1);
	kvpi_ctr_add(s, KVPI_C_REUSED, re);
	kvpi_ctr_add(s, KVPI_C_NOT_FULL, nf);
	return kvpi_fast_end(p, s, 1);
}

/* A sampled call: timed into the pool's histogram unless its arguments were invalid. */
static __attribute__((noinline)) int allocate_timed(kvp_pool *p, kvp_stream stream,
                                                    uint32_t n_tokens, kvp_owner owner,
                                                    kvp_format format, kvp_ref *refs,
                                                    size_t refs_cap, size_t *n_refs)
{
	uint64_t t0 = kvpi_lat_now();
	int rc = allocate_body(p, stream, n_tokens, owner, format, refs, refs_cap, n_refs);
	if (rc != KVP_EINVAL)
		kvpi_lat_observe(&p->alloc_lat, kvpi_lat_now() - t0);
	return rc;
}

int kvp_allocate(kvp_pool *p, kvp_stream stream, uint32_t n_tokens, kvp_owner owner,
                 kvp_format format, kvp_ref *refs, size_t refs_cap, size_t *n_refs)
{
	if (__builtin_expect(kvpi_lat_tick(), 0))
		return allocate_timed(p, stream, n_tokens, owner, format, refs, refs_cap, n_refs);
	return allocate_body(p, stream, n_tokens, owner, format, refs, refs_cap, n_refs);
}

/* kvp_alloc_block with its arguments checked, every case. */
static __attribute__((noinline)) int alloc_block_general(struct kvp_pool *p, int si,
                                                         kvp_format format, kvp_ref *out)
{
	if (__builtin_expect(p->mode != NULL, 0))
		return p->mode->alloc_block(p, si, format, out);
	struct kvpi_tslot *s = kvpi_tslot_get(p);
	uint32_t id;
	if (!kvpi_get_one_fast(p, s, si, &id)) {
		int rc = kvpi_get_blocks(p, s, si, &id, 1);
		if (rc != KVP_OK)
			return kvpi_fail_call(p, s, rc);
	}
	bool re;
	uint32_t gen = kvpi_stamp_block(kvpi_bt_block(&p->bt, id), p->block_size, KVPI_ST_RAW,
	                                kvpi_raw_owner_word(s), format, &re);
	kvpi_ctr_add(s, KVPI_C_ALLOCS, 1);
	kvpi_ctr_add(s, KVPI_C_REUSED, re);
	kvpi_account_in_use(p, s, 1);
	kvpi_end_call(p, s, true);
	*out = KVP_MAKE_REF(id, gen);
	return KVP_OK;
}

int kvp_alloc_block(kvp_pool *p, kvp_stream stream, kvp_format format, kvp_ref *out)
{
	if (!p || !out || (unsigned)format >= KVP_N_FORMATS)
		return KVP_EINVAL;
	int si = kvpi_stream_index(p, stream);
	if (si < 0)
		return KVP_EINVAL;
	/* The common case, kept short: one block from the thread's own
	 * magazine; only tail calls (see kvpi_fast_end). */
	struct kvpi_tslot *s = kvpi_tslot_mine(p);
	uint32_t id;
	if (p->mode || !s || !kvpi_mag_pop(p, s, si, &id))
		return alloc_block_general(p, si, format, out);
	bool re;
	uint32_t gen = kvpi_stamp_block(kvpi_bt_block(&p->bt, id), p->block_size, KVPI_ST_RAW,
	                                kvpi_raw_owner_word(s), format, &re);
	*out = KVP_MAKE_REF(id, gen);
	kvpi_ctr_add(s, KVPI_C_ALLOCS, 1);
	kvpi_ctr_add(s, KVPI_C_REUSED, re);
	return kvpi_fast_end(p, s, 1);
}
