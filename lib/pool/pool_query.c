/*
 * lib/pool/pool_query.c - owner ids minted and registered, owner listing, and per-block calls.
 *
 * kvp_block_get reads a block's state word, then its owner, then the state
 * again (a seqlock without a writer lock): the state word carries the
 * generation, so an unchanged word proves the owner read in between belongs
 * to the same hand-out.  kvp_block_set_used of an owned block takes the
 * owner's exclusion, as a free does, and stores the new fill; of a raw
 * block (or in a prefix pool) it is one CAS on the state word.
 */
#include "lib/pool/pool_internal.h"

/*
 * A fresh id from the calling thread's slot (lib/pool/owner.h, "Minted
 * owner ids").  The slot's sequence has one writer: the slot's thread, or
 * whoever holds the fallback slot's lock.  Nothing is registered, so the
 * call takes no lock and writes nothing another thread reads.
 */
int kvp_owner_new(kvp_pool *p, kvp_owner *owner)
{
	if (!p || !owner)
		return KVP_EINVAL;
	/* The thread's own slot in the common case: no fallback lock to give
	 * back (kvpi_tslot_mine). */
	struct kvpi_tslot *mine = kvpi_tslot_mine(p);
	struct kvpi_tslot *s = mine ? mine : kvpi_tslot_get(p);
	int rc = KVP_OK;
	if (s->idx >= KVPI_MINT_MAX_SLOTS || s->minted >= 1ull << KVPI_MINT_SEQ_BITS) {
		rc = KVP_EEXHAUSTED;
	} else {
		*owner = KVPI_MINT_TAG << 56 | (uint64_t)(s->idx & 0xff) << 48 |
		         (uint64_t)(s->idx >> 8) << KVPI_MINT_SEQ_BITS | s->minted++;
	}
	if (!mine)
		kvpi_tslot_put(p, s);
	return rc;
}

int kvp_register_owner(kvp_pool *p, kvp_owner owner)
{
	if (!p)
		return KVP_EINVAL;
	struct kvpi_tslot *s = kvpi_tslot_get(p);
	uint64_t h = kvpi_owner_hash(owner);
	struct kvpi_oshard *sh = kvpi_owners_shard_h(&p->owners, h);
	int rc = KVP_OK;
	kvpi_oshard_lock(p, s, sh);
	struct kvpi_orec *r = kvpi_oshard_find_h(sh, owner, h);
	if (r) {
		rc = KVP_EOWNER; /* nothing of the record is touched: its bias stays */
	} else if (!(r = kvpi_oshard_insert(&p->owners, sh, &s->recs, owner))) {
		rc = KVP_ENOMEM;
	} else {
		/* Unbiased: the first allocate biases it to its thread.  A
		 * scheduler that registers owners for workers to allocate for
		 * would otherwise pay a revocation per owner. */
		r->registered = true;
	}
	pthread_mutex_unlock(&sh->lock);
	kvpi_tslot_put(p, s);
	return rc;
}

int kvp_release_owner(kvp_pool *p, kvp_owner owner)
{
	if (!p)
		return KVP_EINVAL;
	struct kvpi_tslot *s = kvpi_tslot_get(p);
	struct kvpi_oshard *sh = kvpi_owners_shard(&p->owners, owner);
	int rc = KVP_OK;
	kvpi_oshard_lock(p, s, sh);
	struct kvpi_orec *r = kvpi_oshard_find(sh, owner);
	if (!r) {
		rc = KVP_ENOENT;
	} else {
		kvpi_bias_revoke(p, s, r);
		r->registered = false;
		if (kvpi_orec_count(r) == 0)
			kvpi_oshard_remove(&p->owners, sh, &s->recs, r);
	}
	pthread_mutex_unlock(&sh->lock);
	kvpi_tslot_put(p, s);
	return rc;
}

int kvp_blocks_for(kvp_pool *p, kvp_owner owner, kvp_ref *refs, size_t cap, size_t *n)
{
	if (!p || !n || (!refs && cap))
		return KVP_EINVAL;
	*n = 0;
	struct kvpi_tslot *s = kvpi_tslot_get(p);
	struct kvpi_oshard *sh = kvpi_owners_shard(&p->owners, owner);
	int rc = KVP_OK;
	kvpi_oshard_lock(p, s, sh);
	struct kvpi_orec *r = kvpi_oshard_find(sh, owner);
	/* Its ids must hold still: a revocation only if the record is
	 * biased to another thread (kvpi_bias_revoke returns at once when it
	 * is unbiased or biased to us, and then the shard lock suffices). */
	if (r)
		kvpi_bias_revoke(p, s, r);
	if (!r) {
		rc = KVP_ENOENT;
	} else if (kvpi_orec_count(r) > cap) {
		*n = kvpi_orec_count(r);
		rc = KVP_ERANGE;
	} else {
		size_t i = 0;
		for (uint32_t k = 0; k < r->ids.len; k++) {
			uint32_t id = r->ids.ids[k];
			if (id == KVPI_NO_ID)
				continue;
			struct kvpi_block *b = kvpi_bt_block(&p->bt, id);
			/* relaxed: the shard lock orders the stamp of every block
			 * the record holds before us; the generation is stable
			 * while the block is held. */
			uint64_t st = atomic_load_explicit(&b->state, memory_order_relaxed);
			refs[i++] = KVP_MAKE_REF(id, kvpi_st_gen(st));
		}
		*n = i;
	}
	pthread_mutex_unlock(&sh->lock);
	kvpi_tslot_put(p, s);
	return rc;
}

size_t kvp_n_free(kvp_pool *p, kvp_stream stream)
{
	if (!p)
		return 0;
	int si = kvpi_stream_index(p, stream);
	if (si < 0)
		return 0;
	/* relaxed: a count, exact when quiescent; see the header. */
	int64_t n = atomic_load_explicit(&p->fs[si].avail, memory_order_relaxed);
	for (struct kvpi_tslot *s = atomic_load_explicit(&p->slots, memory_order_acquire); s;
	     s = s->next)
		n += atomic_load_explicit(&s->mag[si].count, memory_order_relaxed);
	if (p->mode) /* cached blocks are free too */
		n += (int64_t)p->mode->n_cached(p, si);
	return n > 0 ? (size_t)n : 0;
}

/* The block of @ref if its id was created, else NULL. */
static struct kvpi_block *ref_block(struct kvp_pool *p, kvp_ref ref)
{
	if (KVP_REF_ID(ref) >= kvp_pool_n_ids(p))
		return NULL;
	return kvpi_bt_block(&p->bt, KVP_REF_ID(ref));
}

int kvp_block_get(kvp_pool *p, kvp_ref ref, kvp_block_info *out)
{
	if (!p || !out)
		return KVP_EINVAL;
	if (p->mode)
		return p->mode->block_get(p, ref, out);
	int rc = KVP_ENOENT;
	struct kvpi_block *b = ref_block(p, ref);
	if (b) {
		uint64_t st, st2;
		kvp_owner owner;
		do {
			/* acquire: pairs with stamp_block's release store. */
			st = atomic_load_explicit(&b->state, memory_order_acquire);
			owner = atomic_load_explicit(&b->owner, memory_order_relaxed);
			/* acquire fence: keeps the owner load before the re-read. */
			atomic_thread_fence(memory_order_acquire);
			st2 = atomic_load_explicit(&b->state, memory_order_relaxed);
		} while (st != st2);
		if (kvpi_st_gen(st) == KVP_REF_GEN(ref) && !(st & KVPI_ST_RETIRED)) {
			out->id = KVP_REF_ID(ref);
			out->stream = (kvp_stream)kvpi_st_stream(st);
			out->format = (kvp_format)kvpi_st_format(st);
			out->n_used = kvpi_st_used(st);
			out->in_use = (st & KVPI_ST_IN_USE) != 0;
			out->ever_allocated = (st & KVPI_ST_EVER) != 0;
			/* A raw block's owner word names the slot it is biased to. */
			out->owner = out->in_use && !(st & KVPI_ST_RAW) ? owner : 0;
			out->n_holders = out->in_use ? 1u : 0u;
			out->published = false;
			rc = KVP_OK;
		}
	}
	return rc;
}

/* A successful set_used's change to the n_not_full counter (from state
 * @st to fill @n_used); returns it: -1, 0 or 1. */
static int count_fill_change(struct kvp_pool *p, struct kvpi_tslot *s, uint64_t st, uint32_t n_used)
{
	int d = (int)(n_used < p->block_size) - (int)(kvpi_st_used(st) < p->block_size);
	kvpi_ctr_add(s, KVPI_C_NOT_FULL, (uint64_t)(int64_t)d);
	return d;
}

/* set_used of a raw block, or any block of a prefix pool: a CAS on the
 * whole word (no owner's exclusion to rely on); @st was loaded with acquire. */
static int set_used_cas(struct kvp_pool *p, struct kvpi_tslot *s, struct kvpi_block *b, uint64_t st,
                        uint32_t gen, uint32_t n_used)
{
	for (;;) {
		if (kvpi_st_gen(st) != gen || !(st & KVPI_ST_IN_USE))
			return KVP_ENOENT;
		if (st & KVPI_ST_PUBLISHED) /* prefix mode: contents fixed */
			return KVP_EINVAL;
		if (st & KVPI_ST_LOCKED) { /* prefix mode: wait for the lock holder */
			sched_yield();
			/* acquire: see the state the lock holder left. */
			st = atomic_load_explicit(&b->state, memory_order_acquire);
			continue;
		}
		if (!p->mode)
			/* A raw block another thread may free without a CAS:
			 * revoke that (lib/pool/bias.c). */
			kvpi_raw_exclude(p, s, b, st);
		/* release: a later free (acq_rel CAS) orders after this;
		 * acquire on failure re-reads a coherent word. */
		if (atomic_compare_exchange_weak_explicit(
		        &b->state, &st, kvpi_st_with_used(st, n_used), memory_order_release,
		        memory_order_acquire)) {
			count_fill_change(p, s, st, n_used);
			return KVP_OK;
		}
	}
}

/* set_used of an owned block of record @r (NULL: the owner has none, so
 * the block is stale); the caller holds the owner's exclusion, so no free
 * can clear the word between our load and store (the free's plain store
 * relies on that, lib/pool/pool_free.c). */
static int set_used_owned(struct kvp_pool *p, struct kvpi_tslot *s, struct kvpi_orec *r,
                          struct kvpi_block *b, uint32_t gen, uint32_t n_used)
{
	/* acquire: see the state as its last writer left it. */
	uint64_t st = atomic_load_explicit(&b->state, memory_order_acquire);
	if (kvpi_st_gen(st) != gen || !(st & KVPI_ST_IN_USE))
		return KVP_ENOENT;
	/* release: a kvp_block_get that reads the new fill sees what the
	 * caller wrote before (a plain store on x86). */
	atomic_store_explicit(&b->state, kvpi_st_with_used(st, n_used), memory_order_release);
	int d = count_fill_change(p, s, st, n_used);
	/* In use at its generation under the exclusion: @r is its owner's
	 * record (the owner word was read before, and validated by this). */
	if (r)
		r->not_full += (uint32_t)d;
	return KVP_OK;
}

/*
 * set_used of a private block of a prefix pool (lib/pool/blocktable.h,
 * KVPI_ST_PRIVATE): every writer of its word holds its owner's shard
 * mutex and stores without a CAS, so this does too.  The owner is read
 * after the state; with its mutex held, a private state read again with
 * the same owner is that owner's hand-out (another hand-out to it would
 * have needed the mutex).  @st was loaded with acquire.
 */
static int set_used_private(struct kvp_pool *p, struct kvpi_tslot *s, struct kvpi_block *b,
                            uint64_t st, uint32_t gen, uint32_t n_used)
{
	while (st & KVPI_ST_PRIVATE) {
		/* acquire: checked again under the mutex, and the state's
		 * re-read there must not be satisfied before it (as in
		 * set_used_exclusive). */
		kvp_owner o = atomic_load_explicit(&b->owner, memory_order_acquire);
		struct kvpi_oshard *sh = kvpi_owners_shard(&p->owners, o);
		pthread_mutex_lock(&sh->lock);
		/* acquire: the state as its last writer left it. */
		uint64_t s1 = atomic_load_explicit(&b->state, memory_order_acquire);
		if ((s1 & KVPI_ST_PRIVATE) &&
		    atomic_load_explicit(&b->owner, memory_order_relaxed) == o) {
			int rc = KVP_ENOENT;
			if (kvpi_st_gen(s1) == gen && (s1 & KVPI_ST_PUBLISHED)) {
				/* Published by its owner since the first check
				 * (and private still): contents fixed. */
				rc = KVP_EINVAL;
			} else if (kvpi_st_gen(s1) == gen) {
				/* release: as in set_used_owned. */
				atomic_store_explicit(&b->state, kvpi_st_with_used(s1, n_used),
				                      memory_order_release);
				count_fill_change(p, s, s1, n_used);
				rc = KVP_OK;
			}
			pthread_mutex_unlock(&sh->lock);
			return rc;
		}
		pthread_mutex_unlock(&sh->lock);
		st = s1;
	}
	/* No longer private (published since, or freed): never private again
	 * in this generation. */
	return set_used_cas(p, s, b, st, gen, n_used);
}

/*
 * kvp_block_set_used of an owned block: under the owner's exclusion, as a
 * free of it would be (an owner op when the record is biased to us, else
 * the shard lock with the bias revoked).  The owner read from the block is
 * checked by the generation under the exclusion.
 */
static int set_used_exclusive(struct kvp_pool *p, struct kvpi_tslot *s, struct kvpi_block *b,
                              uint32_t gen, uint32_t n_used)
{
	/* acquire (a plain load on x86): the generation check under the owner's
	 * exclusion validates this word.  Should it be a later hand-out's owner,
	 * the free before that hand-out happens-before the re-check, which then
	 * sees the block freed or re-stamped (docs/DESIGN.md, "Why an owned
	 * block's free needs no CAS"); relaxed would not order the re-check. */
	kvp_owner owner = atomic_load_explicit(&b->owner, memory_order_acquire);
	struct kvpi_oexcl x;
	/* No record: the block was freed (its owner's last block) since the
	 * owner load; set_used_owned then finds it stale. */
	struct kvpi_orec *r = kvpi_owner_lock(p, s, owner, &x);
	int rc = set_used_owned(p, s, r, b, gen, n_used);
	kvpi_owner_unlock(s, &x);
	return rc;
}

int kvp_block_set_used(kvp_pool *p, kvp_ref ref, uint32_t n_used)
{
	if (!p)
		return KVP_EINVAL;
	struct kvpi_block *b = ref_block(p, ref);
	if (!b)
		return KVP_ENOENT;
	uint32_t gen = KVP_REF_GEN(ref);
	/* acquire: see the state as its last writer left it. */
	uint64_t st = atomic_load_explicit(&b->state, memory_order_acquire);
	if (kvpi_st_gen(st) != gen || !(st & KVPI_ST_IN_USE))
		return KVP_ENOENT;
	if (st & KVPI_ST_PUBLISHED) /* prefix mode: contents fixed */
		return KVP_EINVAL;
	if (n_used > p->block_size)
		return KVP_ERANGE;
	/* prefix mode: a block with two or more holders (a reset unpublished
	 * it) is fixed too; it gains no holder unless published again, which
	 * the CAS below would see (kvpool/prefix.h, "Storage"). */
	kvp_block_info info;
	if (p->mode && p->mode->block_get(p, ref, &info) == KVP_OK && info.in_use &&
	    info.n_holders >= 2)
		return KVP_EINVAL;
	struct kvpi_tslot *s = kvpi_tslot_get(p);
	int rc = (st & KVPI_ST_PRIVATE)          ? set_used_private(p, s, b, st, gen, n_used)
	         : p->mode || (st & KVPI_ST_RAW) ? set_used_cas(p, s, b, st, gen, n_used)
	                                         : set_used_exclusive(p, s, b, gen, n_used);
	kvpi_tslot_put(p, s);
	return rc;
}
