/*
 * lib/pool/pool_alloc.c - kvp_allocate, kvp_free, kvp_free_all and the raw path.
 *
 * A block's life: free (on a stack or in a magazine) -> popped by exactly
 * one thread, which stamps a new generation, the owner and the fill into
 * its state word and links it into the owner's list (under the owner's
 * exclusion: the thread the owner's record is biased to, inside an owner
 * op, or else the shard lock) -> freed by whoever holds a current ref ->
 * pushed back.
 *
 * Who changes an in-use block's state word: an owned block's only writers
 * (kvp_free, kvp_free_all, kvp_block_set_used) all hold the owner's
 * exclusion, so the free checks the generation and in_use and clears them
 * with a plain release store: of several racing frees exactly one sees the
 * block in use, the rest count as stale.  A raw block (KVPI_ST_RAW) has no
 * owner: its free and set_used are CASes on the whole word (a raw ref's
 * CAS can never succeed on an owned hand-out: the word it expects carries
 * KVPI_ST_RAW), except that in the asymmetric mode the thread that
 * allocated it frees it with the plain store while its slot's raw bias
 * stands, which any other thread's change of such a block revokes first
 * (below, "Raw blocks biased to their thread").  docs/DESIGN.md, "Giving
 * blocks back", has the argument.
 *
 * So a stale ref can never change a block that was handed out again.
 */
#include <string.h>

#include "lib/base/spin.h"
#include "lib/pool/pool_internal.h"

#define KVPI_FREE_BATCH 64u

static inline int stream_of_state(const struct kvp_pool *p, uint64_t st)
{
	return p->separate_kv ? (int)kvpi_st_stream(st) : 0;
}

static inline uint64_t freed_state(uint64_t st)
{
	return st & ~(KVPI_ST_IN_USE | KVPI_ST_RAW | KVPI_ST_USED_MASK);
}

/* Stamp a popped block as handed out; returns its new generation.  Sets
 * *reused when the block had been handed out before. */
static inline __attribute__((always_inline)) uint32_t stamp_block(struct kvpi_block *b,
                                                                  uint32_t used, uint64_t flags,
                                                                  kvp_owner owner,
                                                                  kvp_format format, bool *reused)
{
	/* relaxed: we hold the block exclusively since the acquire pop. */
	uint64_t old = atomic_load_explicit(&b->state, memory_order_relaxed);
	uint32_t gen = kvpi_st_gen(old) + 1;
	if (gen == 0)
		gen = 1; /* generation 0 means "never handed out" */
	*reused = (old & KVPI_ST_EVER) != 0;
	/* release: a kvp_block_get that reads this owner (then fences) cannot
	 * read a state word from before the free that preceded this hand-out;
	 * free on x86. */
	atomic_store_explicit(&b->owner, owner, memory_order_release);
	/* release: kvp_block_get's acquire load of the state then sees the
	 * owner written above. */
	atomic_store_explicit(&b->state,
	                      kvpi_st_make(gen, used, KVPI_ST_IN_USE | KVPI_ST_EVER | flags,
	                                   kvpi_st_stream(old), (uint32_t)format),
	                      memory_order_release);
	return gen;
}

/* Clear in_use on a raw block still at @st's generation (no exclusion: a
 * CAS); returns the state it had, or 0 when a racing free got there first. */
static uint64_t clear_in_use(struct kvpi_block *b, uint64_t st, uint32_t gen)
{
	for (;;) {
		if (kvpi_st_gen(st) != gen || !(st & KVPI_ST_IN_USE))
			return 0;
		/* acq_rel: acquire orders the holder's last writes (set_used,
		 * storage) before our push; release is carried by the push. */
		if (atomic_compare_exchange_weak_explicit(&b->state, &st, freed_state(st),
		                                          memory_order_acq_rel,
		                                          memory_order_acquire))
			return st;
	}
}

/*
 * Free a block whose state word is still at @gen and in use; the caller
 * holds the block's exclusion, so no other thread writes the word: for an
 * owned block the owner's (every writer of an owned in-use block holds it:
 * the header above), for a raw block a raw op of the slot it is biased to.
 * Returns the state it had, or 0 when it was stale.
 */
static inline uint64_t release_owned(struct kvpi_block *b, uint32_t gen)
{
	/* acquire: orders the last holder's writes (storage, a set_used of
	 * another thread under the same exclusion) before our push. */
	uint64_t st = atomic_load_explicit(&b->state, memory_order_acquire);
	if (kvpi_st_gen(st) != gen || !(st & KVPI_ST_IN_USE))
		return 0;
	/* release: a kvp_block_get or stale free that reads the freed word
	 * also sees what we did before (a plain store on x86). */
	atomic_store_explicit(&b->state, freed_state(st), memory_order_release);
	return st;
}

/*
 * Raw blocks biased to their thread (asymmetric mode).  A raw block has no
 * owner, so nothing excludes two frees of it but the CAS.  To spare the
 * common case (a thread frees the raw blocks it allocated) that locked
 * instruction, a raw hand-out stamped by a slot whose raw_bias is
 * KVPI_RAW_BIASED carries the slot in its owner word, and that slot's
 * thread frees it with the same Dekker pair as an owner op: it stores
 * KVPI_RAW_OP in its in_owner_op word, loads its raw_bias, and while that
 * is still KVPI_RAW_BIASED checks the generation and clears in_use with a
 * plain release store (release_owned).  Every other thread that changes
 * such a block's state (a free, or a set_used) first revokes the slot's
 * raw bias for good (kvpi_raw_exclude): raw_bias BIASED -> REVOKING
 * (seq_cst), the heavy barrier, a wait while the slot's in_owner_op is
 * KVPI_RAW_OP, then REVOKED (release); other revokers wait for REVOKED.
 * Either the revoker sees the op and waits for its end, or the op sees the
 * bias gone and uses the CAS; after a revocation all changes are CASes,
 * which exclude each other.  A revoked slot stamps 0 from then on, as the
 * fallback mode and the fallback slot always do.  docs/DESIGN.md.
 */

/* The owner word a raw block handed out by slot @s carries. */
static inline uint64_t raw_owner_word(struct kvpi_tslot *s)
{
	/* relaxed: only this slot's thread acts on its own slot's value; a
	 * revocation racing with the stamp leaves a word naming a revoked
	 * slot, which every path treats as "use the CAS". */
	return atomic_load_explicit(&s->raw_bias, memory_order_relaxed) == KVPI_RAW_BIASED
	           ? (uint64_t)(uintptr_t)s
	           : 0;
}

/* Revoke slot @t's raw bias (see above); returns once it is REVOKED. */
static __attribute__((noinline, cold)) void raw_revoke(struct kvp_pool *p, struct kvpi_tslot *t)
{
	struct kvpi_spin spin = {0};
	uint32_t exp = KVPI_RAW_BIASED;
	/* seq_cst: the store half of the revoker's Dekker pair. */
	if (!atomic_compare_exchange_strong_explicit(&t->raw_bias, &exp, KVPI_RAW_REVOKING,
	                                             memory_order_seq_cst, memory_order_acquire)) {
		/* acquire: pairs with the revoker's release store of REVOKED,
		 * after which every raw op of that slot that saw BIASED is over
		 * and its stores visible. */
		while (atomic_load_explicit(&t->raw_bias, memory_order_acquire) != KVPI_RAW_REVOKED)
			kvpi_spin_wait(&spin);
		return;
	}
	kvpi_heavy_barrier(p);
	/* acquire (asym) / seq_cst (fallback): the load half; once it reads
	 * anything but KVPI_RAW_OP (a release store by that thread), the op's
	 * store to the state word is visible. */
	while (atomic_load_explicit(&t->in_owner_op, p->asym ? memory_order_acquire
	                                                     : memory_order_seq_cst) == KVPI_RAW_OP)
		kvpi_spin_wait(&spin);
	/* release: see the acquire above. */
	atomic_store_explicit(&t->raw_bias, KVPI_RAW_REVOKED, memory_order_release);
}

void kvpi_raw_exclude(struct kvp_pool *p, struct kvpi_tslot *s, struct kvpi_block *b, uint64_t st)
{
	/* relaxed: validated by the state re-read below. */
	uint64_t o = atomic_load_explicit(&b->owner, memory_order_relaxed);
	if (o == 0 || o == (uint64_t)(uintptr_t)s)
		return; /* no bias, or our own: our CAS excludes everyone else's */
	/* The word read is this hand-out's (a slot, since the hand-out is raw)
	 * if the block is still in use at @st's generation (@st was loaded with
	 * acquire; a later stamp's owner store would make the free before it
	 * visible here); otherwise no CAS of the caller can succeed.  Only the
	 * generation and in_use: a word merely changed (the slot's own thread
	 * setting the fill, which revokes nothing) would fail the caller's CAS,
	 * which then retries on the new word, or even on @st again (the fill
	 * set back), with the slot's thread perhaps inside a raw op. */
	atomic_thread_fence(memory_order_acquire);
	uint64_t cur = atomic_load_explicit(&b->state, memory_order_relaxed);
	if (kvpi_st_gen(cur) != kvpi_st_gen(st) || !(cur & KVPI_ST_IN_USE))
		return;
	struct kvpi_tslot *t = (struct kvpi_tslot *)(uintptr_t)o;
	/* acquire: as in raw_revoke's wait. */
	if (atomic_load_explicit(&t->raw_bias, memory_order_acquire) != KVPI_RAW_REVOKED)
		raw_revoke(p, t);
}

/* Blocks needed for @n tokens: a shift when block_size is a power of two. */
static inline uint32_t blocks_for_tokens(const struct kvp_pool *p, uint32_t n)
{
	if (p->bs_shift >= 0)
		return (uint32_t)(((uint64_t)n + p->block_size - 1) >> p->bs_shift);
	return n / p->block_size + (n % p->block_size != 0);
}

void kvpi_bias_revoke(struct kvp_pool *p, struct kvpi_tslot *s, struct kvpi_orec *r)
{
	/* relaxed: bias is written only under the shard lock, which we hold. */
	uintptr_t t = atomic_load_explicit(&r->bias, memory_order_relaxed);
	if (t == 0 || t == (uintptr_t)s)
		return;
	/* seq_cst: the store half of the revoker's Dekker pair. */
	atomic_store_explicit(&r->bias, 0, memory_order_seq_cst);
	if (r->revokes < UINT8_MAX)
		r->revokes++;
	kvpi_heavy_barrier(p);
	struct kvpi_tslot *ts = (struct kvpi_tslot *)t;
	struct kvpi_spin spin = {0};
	/* acquire (asym) / seq_cst (fallback): the load half; once it reads
	 * anything but @r (a release store by that thread), the op's list and
	 * count changes are visible. */
	while (atomic_load_explicit(&ts->in_owner_op,
	                            p->asym ? memory_order_acquire : memory_order_seq_cst) ==
	       (uintptr_t)r)
		kvpi_spin_wait(&spin);
}

void kvpi_bias_adopt(struct kvp_pool *p, struct kvpi_tslot *s, struct kvpi_orec *r)
{
	if (kvpi_tslot_is_fallback(p, s))
		return;
	/* relaxed: bias is written only under the shard lock, which we hold;
	 * any thread formerly biased has left its op (kvpi_bias_revoke). */
	uintptr_t t = atomic_load_explicit(&r->bias, memory_order_relaxed);
	if (t == 0) {
		if (r->revokes >= KVPI_BIAS_MAX_REVOKES)
			return;
		atomic_store_explicit(&r->bias, (uintptr_t)s, memory_order_relaxed);
	} else if (t != (uintptr_t)s) {
		return;
	}
	struct kvpi_ocache_ent *e = kvpi_ocache_ent_of(s, r->key);
	e->key = r->key;
	e->rec = r;
	e->epoch = r->epoch;
}

/* kvpi_bt_block for an id past the first segment, out of line: the loops
 * that walk many blocks keep their registers for the common case. */
static __attribute__((noinline)) struct kvpi_block *block_past_seg0(struct kvpi_blocktable *bt,
                                                                    uint32_t id)
{
	return kvpi_bt_block(bt, id);
}

/* The metadata of block @id, given the first segment @seg0 of @n0 blocks. */
static inline __attribute__((always_inline)) struct kvpi_block *
block_at(struct kvpi_blocktable *bt, struct kvpi_block *seg0, uint32_t n0, uint32_t id)
{
	return __builtin_expect(id < n0, 1) ? &seg0[id] : block_past_seg0(bt, id);
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
 * @st (the stream bits kept); returns the new generation, adds 1 to
 * *@reused if it had been handed out before. */
static inline __attribute__((always_inline)) uint32_t stamp_fast(struct kvpi_block *b, uint64_t st,
                                                                 kvp_owner owner, uint64_t *reused)
{
	/* relaxed: we hold the block exclusively since the acquire pop. */
	uint64_t old = atomic_load_explicit(&b->state, memory_order_relaxed);
	uint32_t gen = kvpi_st_gen(old) + 1;
	gen += gen == 0; /* generation 0 means "never handed out" */
	*reused += (old & KVPI_ST_EVER) != 0;
	/* release, both (plain stores on x86): as in stamp_block. */
	atomic_store_explicit(&b->owner, owner, memory_order_release);
	atomic_store_explicit(&b->state, st | gen | (old & (3ull << KVPI_ST_STREAM_SHIFT)),
	                      memory_order_release);
	return gen;
}

/*
 * Stamp the @nb popped blocks whose ids are in ids_in(@refs, @nb) for
 * @owner, append them to @r's list in order and write the refs; the caller
 * holds @r's exclusion.  Returns how many had been handed out before.
 *
 * One pass in allocation order.  Every block was popped by us (acquire),
 * so its metadata is ours to write; the record's exclusion covers the
 * links.  The block table's first segment is read once: the atomic stores
 * would make the compiler load it again for every block.
 */
static uint64_t hand_out(struct kvp_pool *p, struct kvpi_orec *r, kvp_ref *refs, uint32_t nb,
                         uint32_t n_tokens, kvp_owner owner, kvp_format format)
{
	const kvpi_u32_alias *ids = ids_in(refs, nb);
	uint32_t bs = p->block_size;
	struct kvpi_blocktable *bt = &p->bt;
	struct kvpi_block *seg0 = bt->seg0;
	uint32_t n0 = bt->n0;
	uint64_t full = kvpi_st_make(0, bs, KVPI_ST_IN_USE | KVPI_ST_EVER, 0, (uint32_t)format);
	uint64_t reused = 0;
	/* The previous block of the list; a stand-in when the list is empty. */
	struct kvpi_block none;
	uint32_t prev = r->tail;
	struct kvpi_block *pb = prev == KVPI_NO_ID ? &none : kvpi_bt_block(bt, prev);
	uint32_t first = ids[0];

	if (nb == 1) {
		struct kvpi_block *b = block_at(bt, seg0, n0, first);
		uint32_t gen = stamp_fast(b, kvpi_st_with_used(full, n_tokens), owner, &reused);
		kvpi_orec_append_b(r, bt, first, b);
		refs[0] = KVP_MAKE_REF(first, gen);
		return reused;
	}
	for (uint32_t i = 0; i + 1 < nb; i++) {
		uint32_t id = ids[i];
		struct kvpi_block *b = block_at(bt, seg0, n0, id);
		uint32_t gen = stamp_fast(b, full, owner, &reused);
		b->own_prev = prev;
		pb->own_next = id;
		refs[i] = KVP_MAKE_REF(id, gen);
		prev = id;
		pb = b;
	}
	uint32_t id = ids[nb - 1];
	struct kvpi_block *b = block_at(bt, seg0, n0, id);
	uint32_t gen =
	    stamp_fast(b, kvpi_st_with_used(full, n_tokens - (nb - 1) * bs), owner, &reused);
	b->own_prev = prev;
	b->own_next = KVPI_NO_ID;
	pb->own_next = id;
	refs[nb - 1] = KVP_MAKE_REF(id, gen);
	if (r->tail == KVPI_NO_ID)
		r->head = first;
	r->tail = id;
	r->count += nb;
	return reused;
}

static inline __attribute__((always_inline)) int alloc_done(struct kvp_pool *p,
                                                            struct kvpi_tslot *s, uint32_t nb,
                                                            uint32_t n_tokens, uint64_t reused,
                                                            size_t *n_refs)
{
	kvpi_ctr_add(s, KVP_C_ALLOCS, nb);
	kvpi_ctr_add(s, KVP_C_REUSED, reused);
	kvpi_ctr_add(s, KVP_C_NOT_FULL, n_tokens - (nb - 1) * p->block_size < p->block_size);
	kvpi_account_in_use(p, s, nb);
	kvpi_end_call(p, s, true);
	*n_refs = nb;
	return KVP_OK;
}

/*
 * Hand @nb blocks, already taken (their ids in @refs), out to @owner under
 * its shard lock: its record is found, or made from the record the caller
 * reserved in the slot's cache (so it cannot fail), and another thread's
 * bias on it is revoked first.  Returns how many had been handed out before.
 */
static uint64_t hand_out_locked(struct kvp_pool *p, struct kvpi_tslot *s, kvp_ref *refs,
                                uint32_t nb, uint32_t n_tokens, kvp_owner owner, kvp_format format)
{
	uint64_t h = kvpi_owner_hash(owner);
	struct kvpi_oshard *sh = kvpi_owners_shard_h(&p->owners, h);
	pthread_mutex_lock(&sh->lock);
	struct kvpi_orec *r = kvpi_oshard_find_h(sh, owner, h);
	if (r)
		kvpi_bias_revoke(p, s, r);
	else
		r = kvpi_oshard_insert(&p->owners, sh, &s->recs, owner); /* reserved: not NULL */
	uint64_t reused = hand_out(p, r, refs, nb, n_tokens, owner, format);
	kvpi_bias_adopt(p, s, r);
	pthread_mutex_unlock(&sh->lock);
	return reused;
}

/* kvp_allocate's locked path when no owner record could be reserved: the
 * record is made first under the shard lock, held through the block path. */

static int allocate_locked(struct kvp_pool *p, struct kvpi_tslot *s, int si, uint32_t n_tokens,
                           uint32_t nb, kvp_owner owner, uint64_t h, kvp_format format,
                           kvp_ref *refs, size_t *n_refs)
{
	struct kvpi_oshard *sh = kvpi_owners_shard_h(&p->owners, h);
	/*
	 * The owner's shard lock is held for the whole call: the owner record
	 * is found or made first (so running out of memory for it leaves no
	 * trace), and no free of the new blocks can slip in before their refs
	 * are written.  Growth and starvation may run under it: nothing that
	 * holds grow_lock or a claimed magazine ever waits for a shard lock.
	 */
	pthread_mutex_lock(&sh->lock);
	struct kvpi_orec *r = kvpi_oshard_find_h(sh, owner, h);
	bool made = false;
	if (!r) {
		r = kvpi_oshard_insert(&p->owners, sh, &s->recs, owner);
		made = true;
	} else {
		kvpi_bias_revoke(p, s, r);
	}
	int rc = r ? kvpi_get_blocks(p, s, si, ids_in(refs, nb), nb) : KVP_ENOMEM;
	if (rc != KVP_OK) {
		if (r && made)
			kvpi_oshard_remove(&p->owners, sh, &s->recs, r);
		pthread_mutex_unlock(&sh->lock);
		return kvpi_fail_call(p, s, rc);
	}
	uint64_t reused = hand_out(p, r, refs, nb, n_tokens, owner, format);
	kvpi_bias_adopt(p, s, r);
	pthread_mutex_unlock(&sh->lock);
	return alloc_done(p, s, nb, n_tokens, reused, n_refs);
}

/*
 * kvp_allocate's stream index, token count and format in one word, so the
 * general path takes six arguments: all in registers, and the fast path's
 * calls to it are tail calls (no callee-saved registers saved there).
 */
static inline uint64_t alloc_req(int si, uint32_t n_tokens, kvp_format format)
{
	return (uint64_t)n_tokens << 32 | (uint64_t)format << 8 | (uint64_t)si;
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
	 * The blocks are taken first, inside neither the owner's shard lock nor
	 * an owner op: a drain (which waits for other threads' magazines and
	 * issues the heavy barrier) or a growth then holds up no other thread
	 * that touches this owner or any owner of its shard, and a revoker
	 * never waits for an owner op that is draining.  The owner's record,
	 * if it has none yet, is then made from a record reserved here, which
	 * cannot fail; only if not even one record can be had (no memory) is
	 * the record made first and the block path run under the shard lock
	 * (allocate_locked), so a failure still leaves no trace.
	 */
	if (kvpi_rec_cache_reserve(&p->owners, &s->recs) != 0)
		return allocate_locked(p, s, si, n_tokens, nb, owner, kvpi_owner_hash(owner),
		                       format, refs, n_refs);
	/* The caller's refs array doubles as scratch for the ids: no allocation. */
	int rc = kvpi_get_blocks(p, s, si, ids_in(refs, nb), nb);
	if (rc != KVP_OK)
		return kvpi_fail_call(p, s, rc);
	uint64_t reused;
	struct kvpi_orec *r = kvpi_tslot_is_fallback(p, s) ? NULL : kvpi_bias_enter(p, s, owner);
	if (r) {
		/* Inside an owner op on our own record: no lock (a revoker waits). */
		reused = hand_out(p, r, refs, nb, n_tokens, owner, format);
		kvpi_bias_leave(s);
	} else {
		reused = hand_out_locked(p, s, refs, nb, n_tokens, owner, format);
	}
	return alloc_done(p, s, nb, n_tokens, reused, n_refs);
}

/*
 * kvp_allocate's body; the function itself (below) only decides whether this
 * call is one of the thread's sampled ones (lib/pool/pool_latency.h).  Always
 * inlined, so that the untimed path is this code with one TLS increment and
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
	if (n_tokens > p->block_size || refs_cap == 0 || p->mode || !s)
		return allocate_general(p, alloc_req(si, n_tokens, format), owner, refs, refs_cap,
		                        n_refs);
	struct kvpi_orec *r = kvpi_bias_enter(p, s, owner);
	if (!r)
		return allocate_general(p, alloc_req(si, n_tokens, format), owner, refs, refs_cap,
		                        n_refs);
	uint32_t id;
	if (!kvpi_mag_pop(p, s, si, &id)) {
		kvpi_bias_leave(s);
		return allocate_general(p, alloc_req(si, n_tokens, format), owner, refs, refs_cap,
		                        n_refs);
	}
	/* Inside an owner op on our own record: no lock (a revoker waits). */
	bool re;
	struct kvpi_block *b = kvpi_bt_block(&p->bt, id);
	uint32_t gen = stamp_block(b, n_tokens, 0, owner, format, &re);
	kvpi_orec_append_b(r, &p->bt, id, b);
	kvpi_bias_leave(s);
	refs[0] = KVP_MAKE_REF(id, gen);
	*n_refs = 1;
	kvpi_ctr_add(s, KVP_C_ALLOCS, 1);
	kvpi_ctr_add(s, KVP_C_REUSED, re);
	kvpi_ctr_add(s, KVP_C_NOT_FULL, n_tokens < p->block_size);
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
	uint32_t gen = stamp_block(kvpi_bt_block(&p->bt, id), p->block_size, KVPI_ST_RAW,
	                           raw_owner_word(s), format, &re);
	kvpi_ctr_add(s, KVP_C_ALLOCS, 1);
	kvpi_ctr_add(s, KVP_C_REUSED, re);
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
	uint32_t gen = stamp_block(kvpi_bt_block(&p->bt, id), p->block_size, KVPI_ST_RAW,
	                           raw_owner_word(s), format, &re);
	*out = KVP_MAKE_REF(id, gen);
	kvpi_ctr_add(s, KVP_C_ALLOCS, 1);
	kvpi_ctr_add(s, KVP_C_REUSED, re);
	return kvpi_fast_end(p, s, 1);
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
	int si = stream_of_state(p, st);
	a->freed++;
	a->not_full += kvpi_st_used(st) < p->block_size;
	a->ids[si][a->n[si]++] = id;
	if (a->n[si] == KVPI_FREE_BATCH)
		acc_flush(p, s, a, si);
}

/* Hold shard @sh's lock in *held (one at a time). */
static void hold_shard(struct kvpi_oshard **held, struct kvpi_oshard *sh)
{
	if (sh == *held)
		return;
	if (*held)
		pthread_mutex_unlock(&(*held)->lock);
	pthread_mutex_lock(&sh->lock);
	*held = sh;
}

/*
 * Drop @r if it holds nothing and is not registered; shard lock held.
 * The shard lock covers 'registered' and 'bias' but not 'count' while the
 * record is biased to another thread (that thread changes it in its owner
 * ops), so count is read only after making sure no other thread is biased.
 * A record biased to another slot is left alone: that thread drops it
 * itself when one of its frees empties it (free_ref's 'empty').
 */
static void drop_if_empty(struct kvp_pool *p, struct kvpi_tslot *s, struct kvpi_oshard *sh,
                          struct kvpi_orec *r)
{
	if (r->registered)
		return;
	/* relaxed: bias is written only under the shard lock, which we hold. */
	uintptr_t t = atomic_load_explicit(&r->bias, memory_order_relaxed);
	if (t != 0 && t != (uintptr_t)s)
		return;
	/* bias is 0 or ours: this thread's own ops are over, so count holds
	 * still under the shard lock. */
	if (r->count == 0)
		kvpi_oshard_remove(&p->owners, sh, &s->recs, r);
}

/* Free one owned block; the caller holds its owner's shard lock. */
static uint64_t free_owned(struct kvp_pool *p, struct kvpi_tslot *s, struct kvpi_oshard *sh,
                           struct kvpi_block *b, uint32_t id, uint32_t gen, kvp_owner owner,
                           uint64_t h)
{
	struct kvpi_orec *r = kvpi_oshard_find_h(sh, owner, h);
	if (r)
		kvpi_bias_revoke(p, s, r);
	/* Same generation and in use: the owner read before is this hand-out's
	 * (a generation never comes back while the block is in use), so the
	 * shard lock with the bias revoked is its exclusion. */
	uint64_t st = release_owned(b, gen);
	if (!st || !r)
		return st;
	kvpi_orec_unlink(r, &p->bt, id);
	drop_if_empty(p, s, sh, r);
	return st;
}

/* Free one owned block inside an owner op on its record @r (biased to us).
 * Sets *empty when the record is left empty and unregistered. */
static uint64_t free_biased(struct kvp_pool *p, struct kvpi_orec *r, struct kvpi_block *b,
                            uint32_t id, uint32_t gen, bool *empty)
{
	uint64_t st = release_owned(b, gen);
	if (!st)
		return 0;
	kvpi_orec_unlink(r, &p->bt, id);
	*empty = r->count == 0 && !r->registered;
	return st;
}

/* Free the block of one ref; returns the state it had, or 0 if stale. */
static inline __attribute__((always_inline)) uint64_t free_ref(struct kvp_pool *p,
                                                               struct kvpi_tslot *s,
                                                               struct kvpi_oshard **held,
                                                               uint32_t id, uint32_t gen)
{
	struct kvpi_block *b = kvpi_bt_block(&p->bt, id);
	/* acquire: pairs with stamp_block's release. */
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
		st = free_biased(p, r, b, id, gen, &empty);
		kvpi_bias_leave(s);
		if (empty) {
			uint64_t h = kvpi_owner_hash(owner);
			/* Dropping a record changes the shard's table: lock. */
			struct kvpi_oshard *sh = kvpi_owners_shard_h(&p->owners, h);
			hold_shard(held, sh);
			struct kvpi_orec *r2 = kvpi_oshard_find_h(sh, owner, h);
			if (r2)
				drop_if_empty(p, s, sh, r2);
		}
		return st;
	}
	uint64_t h = kvpi_owner_hash(owner);
	struct kvpi_oshard *sh = kvpi_owners_shard_h(&p->owners, h);
	hold_shard(held, sh);
	return free_owned(p, s, sh, b, id, gen, owner, h);
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
		kvpi_ctr_add(s, KVP_C_STALE, 1);
		kvpi_end_call(p, s, false);
		return KVP_OK;
	}
	int si = stream_of_state(p, st);
	kvpi_note_freed(p, s, 1); /* before the block can be taken again */
	if (!kvpi_put_one_fast(p, s, si, id))
		kvpi_put_blocks(p, s, si, &id, 1);
	if (kvpi_st_used(st) < p->block_size)
		kvpi_ctr_add(s, KVP_C_NOT_FULL, (uint64_t)0 - 1);
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
	pthread_mutex_lock(&sh->lock);
	struct kvpi_orec *r = kvpi_oshard_find_h(sh, owner, h);
	if (r)
		drop_if_empty(p, s, sh, r);
	pthread_mutex_unlock(&sh->lock);
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
		kvpi_ctr_add(s, KVP_C_NOT_FULL, (uint64_t)0 - 1);
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
		kvpi_ctr_add(s, KVP_C_NOT_FULL, (uint64_t)0 - 1);
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
	/* acquire: pairs with stamp_block's release. */
	uint64_t st = atomic_load_explicit(&b->state, memory_order_acquire);
	if (kvpi_st_gen(st) != gen || !(st & KVPI_ST_IN_USE))
		return free_single_general(p, id, gen); /* stale: counted there */
	kvp_owner owner = 0;
	bool drop = false;
	if (st & KVPI_ST_RAW) {
		/* relaxed: compared only; the state re-read under the op (same
		 * generation, in use) shows it was this hand-out's. */
		uint64_t o = atomic_load_explicit(&b->owner, memory_order_relaxed);
		if (o == (uint64_t)(uintptr_t)s) {
			/* Biased to us: a raw op (see raw_owner_word). */
			bool asym = p->asym;
			kvpi_light_store_m(asym, &s->in_owner_op, KVPI_RAW_OP);
			/* relaxed (asym) / seq_cst (fallback): the load half of the
			 * Dekker pair with raw_revoke. */
			uint32_t rb = atomic_load_explicit(
			    &s->raw_bias, asym ? memory_order_relaxed : memory_order_seq_cst);
			if (rb == KVPI_RAW_BIASED)
				st = release_owned(b, gen);
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
		st = release_owned(b, gen);
		if (!st) {
			kvpi_bias_leave(s);
			return free_single_general(p, id, gen);
		}
		kvpi_orec_unlink_b(r, &p->bt, id, b);
		drop = r->count == 0 && !r->registered;
		kvpi_bias_leave(s);
	}
	/* The block is ours to give back from here on. */
	int si = stream_of_state(p, st);
	int64_t nd = s->delta_in_use - 1;
	if (__builtin_expect(drop, 0))
		return free_fast_drop(p, s, si, id, st, owner);
	if (__builtin_expect(nd < 0 || nd > s->in_use_room, 0))
		return free_fast_tail(p, s, si, id, st);
	/* Counted before the block can be taken again (kvpi_note_freed). */
	kvpi_ctr_add(s, KVP_C_FREES, 1);
	s->delta_in_use = nd; /* kvpi_account_in_use's common case */
	if (!kvpi_mag_push(p, s, si, id))
		return free_fast_put(p, s, si, id, st);
	if (kvpi_st_used(st) < p->block_size)
		kvpi_ctr_add(s, KVP_C_NOT_FULL, (uint64_t)0 - 1);
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
		kvpi_ctr_add(s, KVP_C_STALE, a.stale);
	if (a.not_full)
		kvpi_ctr_add(s, KVP_C_NOT_FULL, (uint64_t)0 - a.not_full);
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

/*
 * Clear in-use block @b of an owner's list; returns the state it had.  The
 * record's exclusion (shard lock, bias revoked) makes us its only writer.
 */
static inline uint64_t free_listed_block(struct kvpi_block *b)
{
	/* acquire: orders the last holder's writes (storage, a set_used of
	 * another thread under the same exclusion) before the block is given
	 * back. */
	uint64_t st = atomic_load_explicit(&b->state, memory_order_acquire);
	/* release: a kvp_block_get or stale free that reads the freed word
	 * also sees what we did before (a plain store on x86). */
	atomic_store_explicit(&b->state, freed_state(st), memory_order_release);
	return st;
}

/* Lists this short are freed through a buffer on the stack (free_all_small). */
#define FREE_ALL_SMALL 16u

/*
 * kvp_free_all of record @r (shard lock held, bias revoked) when it holds at
 * most FREE_ALL_SMALL blocks: they are cleared, the record dropped and the
 * lock released, then given back through the ordinary block path (one
 * magazine entry per stream).  Ends the call.
 */
static __attribute__((noinline)) int free_all_small(struct kvp_pool *p, struct kvpi_tslot *s,
                                                    struct kvpi_oshard *sh, struct kvpi_orec *r)
{
	uint32_t ids[2][FREE_ALL_SMALL], cnt[2] = {0, 0};
	uint64_t not_full = 0;
	for (uint32_t id = r->head; id != KVPI_NO_ID;) {
		struct kvpi_block *b = kvpi_bt_block(&p->bt, id);
		uint32_t next = b->own_next;
		uint64_t st = free_listed_block(b);
		int si = stream_of_state(p, st);
		not_full += kvpi_st_used(st) < p->block_size;
		ids[si][cnt[si]++] = id;
		id = next;
	}
	kvpi_oshard_remove(&p->owners, sh, &s->recs, r);
	pthread_mutex_unlock(&sh->lock);
	/* Allocation order, the first allocated given last: it ends on top. */
	for (int si = 0; si < 2; si++) {
		for (uint32_t i = 0, j = cnt[si]; i + 1 < j; i++, j--) {
			uint32_t t = ids[si][i];
			ids[si][i] = ids[si][j - 1];
			ids[si][j - 1] = t;
		}
		if (cnt[si])
			kvpi_give_back(p, s, si, ids[si], cnt[si]);
	}
	if (not_full)
		kvpi_ctr_add(s, KVP_C_NOT_FULL, (uint64_t)0 - not_full);
	kvpi_end_call(p, s, true);
	return KVP_OK;
}

/*
 * kvp_free_all in a plain pool.  Under the owner's shard lock (its bias
 * revoked), every block on the record's list is cleared and goes straight
 * into this thread's magazine of its stream when the magazine can take the
 * whole list (it grows by demand): a request's blocks stay with the thread
 * that freed them, and the next request it serves takes them back without
 * touching a line another thread writes.  A stream whose magazine cannot
 * take them (too many, the stream starving, the fallback slot) gets a
 * chain pushed to its global stack with one CAS, after the lock.
 *
 * Either way the first block allocated ends on top, so a request made
 * again gets its old ids in the same order.  The magazines are entered
 * only once the shard lock is held and left before it is dropped: while
 * inside one we wait for nothing (a drainer may be waiting for us, and a
 * drainer may hold a shard lock: lib/pool/pool_internal.h, lock order).
 */
int kvp_free_all(kvp_pool *p, kvp_owner owner)
{
	if (!p)
		return KVP_EINVAL;
	if (__builtin_expect(p->mode != NULL, 0))
		return p->mode->free_all(p, owner);
	struct kvpi_tslot *s = kvpi_tslot_get(p);
	uint64_t h = kvpi_owner_hash(owner);
	struct kvpi_oshard *sh = kvpi_owners_shard_h(&p->owners, h);
	uint32_t first[2] = {KVPI_NO_ID, KVPI_NO_ID}, last[2] = {KVPI_NO_ID, KVPI_NO_ID},
	         cnt[2] = {0, 0}, base[2] = {0, 0};
	struct kvpi_mag *mag[2] = {NULL, NULL};
	uint64_t not_full = 0;

	pthread_mutex_lock(&sh->lock);
	struct kvpi_orec *r = kvpi_oshard_find_h(sh, owner, h);
	if (!r) {
		pthread_mutex_unlock(&sh->lock);
		kvpi_end_call(p, s, false);
		return KVP_ENOENT;
	}
	kvpi_bias_revoke(p, s, r);
	if (r->count <= FREE_ALL_SMALL)
		return free_all_small(p, s, sh, r);
	if (r->count <= UINT32_MAX)
		for (uint32_t si = 0; si < p->n_streams; si++)
			mag[si] = kvpi_mag_hold_room(p, s, (int)si, (uint32_t)r->count, &base[si]);
	/* The table's first segment is read once (the atomic accesses below
	 * would make the compiler reload it for every block). */
	struct kvpi_blocktable *bt = &p->bt;
	struct kvpi_block *seg0 = bt->seg0;
	uint32_t n0 = bt->n0, bs = p->block_size;
	bool two = p->separate_kv;
	if (mag[0] && (!two || mag[1])) {
		/* Every stream's magazine holds room for the whole list. */
		uint32_t *w[2] = {mag[0]->ids + base[0], two ? mag[1]->ids + base[1] : NULL};
		uint32_t *w0 = w[0], *w1 = w[1];
		for (uint32_t id = r->head; id != KVPI_NO_ID;) {
			struct kvpi_block *b = block_at(bt, seg0, n0, id);
			uint32_t next = b->own_next;
			uint64_t st = free_listed_block(b);
			not_full += kvpi_st_used(st) < bs;
			if (two && kvpi_st_stream(st))
				*w1++ = id;
			else
				*w0++ = id;
			id = next;
		}
		cnt[0] = (uint32_t)(w0 - w[0]);
		cnt[1] = two ? (uint32_t)(w1 - w[1]) : 0;
	} else {
		struct kvpi_block *lastb[2] = {NULL, NULL};
		for (uint32_t id = r->head; id != KVPI_NO_ID;) {
			struct kvpi_block *b = block_at(bt, seg0, n0, id);
			uint32_t next = b->own_next;
			uint64_t st = free_listed_block(b);
			int si = two ? (int)kvpi_st_stream(st) : 0;
			not_full += kvpi_st_used(st) < bs;
			if (mag[si]) {
				mag[si]->ids[base[si] + cnt[si]++] = id;
			} else {
				/* relaxed: published by the push CAS (release). */
				atomic_store_explicit(&b->free_next, KVPI_NO_ID,
				                      memory_order_relaxed);
				if (lastb[si])
					atomic_store_explicit(&lastb[si]->free_next, id,
					                      memory_order_relaxed);
				else
					first[si] = id;
				lastb[si] = b;
				last[si] = id;
				cnt[si]++;
			}
			id = next;
		}
	}
	kvpi_oshard_remove(&p->owners, sh, &s->recs, r);
	uint64_t freed = (uint64_t)cnt[0] + cnt[1];
	kvpi_note_freed(p, s, freed); /* before the blocks can be taken again */
	for (int si = 0; si < 2; si++)
		if (mag[si])
			kvpi_mag_release_room(mag[si], base[si], cnt[si]);
	pthread_mutex_unlock(&sh->lock);
	for (int si = 0; si < 2; si++)
		if (!mag[si])
			kvpi_put_chain(p, s, si, first[si], last[si], cnt[si]);
	kvpi_ctr_add(s, KVP_C_NOT_FULL, (uint64_t)0 - not_full);
	kvpi_end_call(p, s, true);
	return KVP_OK;
}
