/*
 * lib/pool/bias.h - the inline half of the bias protocols: owner ops and
 * shard ops, and the exclusion of an owner or a shard built on them.
 *
 * Included by lib/pool/pool_internal.h once struct kvp_pool is defined;
 * the slow sides (revocation, biasing a shard) are in lib/pool/bias.c,
 * whose head comment gives the protocols.
 *
 * Synchronization:
 *
 *   function             caller                      waits for
 *   -------------------  --------------------------  ------------------------
 *   kvpi_bias_enter      the slot's thread           nothing
 *   kvpi_bias_revoke     holds the shard's exclusion the biased thread's op
 *   kvpi_bias_adopt      holds the shard's exclusion nothing
 *   kvpi_oshard_lock     any thread, in no op        the lock; the biased
 *                                                    thread's shard op
 *   kvpi_oshard_enter    any thread, in no op        as kvpi_oshard_lock,
 *                                                    unless biased to it
 *   kvpi_owner_lock      any thread, in no op        as kvpi_oshard_enter
 *
 * A thread is inside at most one owner op, raw op or shard op at a time
 * (they share its slot's in_owner_op word), and takes no other shard's
 * exclusion inside a shard op.
 */
#ifndef KVPOOL_LIB_POOL_BIAS_H
#define KVPOOL_LIB_POOL_BIAS_H

#ifndef KVPOOL_LIB_POOL_INTERNAL_H
#error "include lib/pool/pool_internal.h, which includes this header"
#endif

/** kvpi_ocache_ent_of - @owner's entry in @s's owner cache */
static inline struct kvpi_ocache_ent *kvpi_ocache_ent_of(struct kvpi_tslot *s, kvp_owner owner)
{
	_Static_assert((KVPI_OCACHE_N & (KVPI_OCACHE_N - 1)) == 0, "power of two");
	return &s->ocache[kvpi_ocache_index(owner, __builtin_ctz(KVPI_OCACHE_N))];
}

/*
 * kvpi_bias_enter - enter @owner's record as the thread it is biased to
 *
 * Looks the owner up in the slot's owner cache.  The cached record may
 * still be biased to this slot and still be @owner's (key and epoch).  The
 * thread is then inside an owner op on it until kvpi_bias_leave.  Meanwhile
 * it may change the record's ids without a lock.  Returns the
 * record, or NULL: then use the locked path.  Never for the fallback slot.
 */
static inline __attribute__((always_inline)) struct kvpi_orec *
kvpi_bias_enter(struct kvp_pool *p, struct kvpi_tslot *s, kvp_owner owner)
{
	struct kvpi_ocache_ent *e = kvpi_ocache_ent_of(s, owner);
	struct kvpi_orec *r = e->rec;
	if (!r || e->key != owner)
		return NULL;
	bool asym = p->asym; /* read once, as in kvpi_mag_enter */
	kvpi_light_store_m(asym, &s->in_owner_op, (uintptr_t)r);
	/* relaxed (asym) / seq_cst (fallback): the load half of the Dekker
	 * pair with kvpi_bias_revoke.  Only the value 's' matters, which only
	 * this slot's thread ever stores. */
	uintptr_t b =
	    atomic_load_explicit(&r->bias, asym ? memory_order_relaxed : memory_order_seq_cst);
	/* The record is ours while biased to us: key and epoch are stable. */
	if (b == (uintptr_t)s && r->key == owner && r->epoch == e->epoch)
		return r;
	/* release: we touched nothing; a revoker waiting on us goes on. */
	atomic_store_explicit(&s->in_owner_op, 0, memory_order_release);
	return NULL;
}

/** kvpi_bias_leave - end the owner op begun by kvpi_bias_enter */
static inline void kvpi_bias_leave(struct kvpi_tslot *s)
{
	/* release: a revoker that reads 0 (acquire) sees our changes. */
	atomic_store_explicit(&s->in_owner_op, 0, memory_order_release);
}

/*
 * kvpi_bias_revoke - make @r an ordinary shard-locked record
 *
 * Caller holds @r's shard's exclusion (its lock, or a shard op).  If @r is biased to another slot,
 * clears the bias, issues the heavy barrier and waits until that slot's thread is not inside an
 * owner op on @r (kvpi_bias_revoke_slow, lib/pool/bias.c).  A record biased to the caller's own
 * slot @s stays biased: its thread is here, not inside an op.
 */
static inline void kvpi_bias_revoke(struct kvp_pool *p, struct kvpi_tslot *s, struct kvpi_orec *r)
{
	/* relaxed: bias is written only under the shard's exclusion, which we
	 * hold (its lock or a shard op). */
	uintptr_t t = atomic_load_explicit(&r->bias, memory_order_relaxed);
	if (t != 0 && t != (uintptr_t)s)
		kvpi_bias_revoke_slow(p, r, t);
}

/*
 * kvpi_oshard_lock - take shard @sh's lock as slot @s's thread
 *
 * With the lock held, a bias of the shard to another slot is revoked
 * (that thread is then outside any shard op on it, and stays out), so the
 * lock is the shard's exclusion.  A shard biased to @s stays biased: its
 * thread is here, not inside a shard op.  End with pthread_mutex_unlock.
 * Never inside a magazine, an owner op or a shard op (a revocation waits).
 */
static inline void kvpi_oshard_lock(struct kvp_pool *p, struct kvpi_tslot *s,
                                    struct kvpi_oshard *sh)
{
	pthread_mutex_lock(&sh->lock);
	/* relaxed: bias is written under the lock only, which we hold. */
	uintptr_t t = atomic_load_explicit(&sh->bias, memory_order_relaxed);
	if (t == (uintptr_t)s || (t == 0 && sh < &p->owners.shard[KVPI_MINTED_SHARD0]))
		return; /* ours, or a shard that is never biased */
	if (t == 0 && sh->streak_slot == s &&
	    ++sh->streak < KVPI_SHARD_REBIAS << (sh->revokes < KVPI_SHARD_REBIAS_MAXSHIFT
	                                             ? sh->revokes
	                                             : KVPI_SHARD_REBIAS_MAXSHIFT))
		return;
	kvpi_oshard_note_slow(p, s, sh, t);
}

/*
 * kvpi_oshard_enter - take shard @sh's exclusion as slot @s's thread
 *
 * A shard op when the shard is biased to @s: a plain store of the slot's
 * in_owner_op word (the shard's address) and a load of 'bias', no lock
 * (returns true).  Else kvpi_oshard_lock (returns false).  Inside a shard
 * op the thread does what the lock would let it do, but it enters no owner
 * op and no raw op (they share the in_owner_op word) and takes no other
 * shard's exclusion.  End with kvpi_oshard_exit.
 */
static inline __attribute__((always_inline)) bool
kvpi_oshard_enter(struct kvp_pool *p, struct kvpi_tslot *s, struct kvpi_oshard *sh)
{
	/* relaxed: a hint; only the value 's' matters, which only this slot's
	 * own locked call stores. */
	if (atomic_load_explicit(&sh->bias, memory_order_relaxed) == (uintptr_t)s) {
		bool asym = p->asym; /* read once, as in kvpi_bias_enter */
		kvpi_light_store_m(asym, &s->in_owner_op, (uintptr_t)sh);
		/* relaxed (asym) / seq_cst (fallback): the load half of the
		 * Dekker pair with kvpi_oshard_note_slow's revocation. */
		if (atomic_load_explicit(&sh->bias, asym ? memory_order_relaxed
		                                         : memory_order_seq_cst) == (uintptr_t)s)
			return true;
		/* release: we touched nothing; the revoker waiting on us goes on. */
		atomic_store_explicit(&s->in_owner_op, 0, memory_order_release);
	}
	kvpi_oshard_lock(p, s, sh);
	return false;
}

/** kvpi_oshard_exit - end kvpi_oshard_enter's exclusion (@op: what it returned) */
static inline void kvpi_oshard_exit(struct kvpi_tslot *s, struct kvpi_oshard *sh, bool op)
{
	if (op)
		/* release: a revoker that reads the word changed (acquire) sees
		 * every change we made to the shard. */
		atomic_store_explicit(&s->in_owner_op, 0, memory_order_release);
	else
		pthread_mutex_unlock(&sh->lock);
}

/* What kvpi_owner_lock took: nothing but an owner op (sh NULL), or shard
 * @sh's exclusion, a shard op if @op. */
struct kvpi_oexcl {
	struct kvpi_oshard *sh;
	bool op;
};

/*
 * kvpi_owner_lock - take @owner's exclusion for a short change
 *
 * An owner op on its record when the record is biased to this thread
 * (@x->sh = NULL); else its shard's exclusion (kvpi_oshard_enter), with
 * another thread's bias on the record revoked.  Returns the record, or
 * NULL (only under the shard's exclusion) when the owner has none.  End
 * with kvpi_owner_unlock.  Never inside a magazine (a revocation waits).
 */
static inline struct kvpi_orec *kvpi_owner_lock(struct kvp_pool *p, struct kvpi_tslot *s,
                                                kvp_owner owner, struct kvpi_oexcl *x)
{
	struct kvpi_orec *r = kvpi_tslot_is_fallback(p, s) ? NULL : kvpi_bias_enter(p, s, owner);
	if (r) {
		x->sh = NULL;
		return r;
	}
	uint64_t h = kvpi_owner_hash(owner);
	x->sh = kvpi_owners_shard_h(&p->owners, h);
	x->op = kvpi_oshard_enter(p, s, x->sh);
	r = kvpi_oshard_find_h(x->sh, owner, h);
	if (r)
		kvpi_bias_revoke(p, s, r);
	return r;
}

/** kvpi_owner_unlock - end kvpi_owner_lock's exclusion (@x as it set it) */
static inline void kvpi_owner_unlock(struct kvpi_tslot *s, const struct kvpi_oexcl *x)
{
	if (x->sh)
		kvpi_oshard_exit(s, x->sh, x->op);
	else
		kvpi_bias_leave(s);
}

/*
 * kvpi_bias_adopt - bias @r to slot @s and cache it there
 *
 * Caller holds @r's shard's exclusion, and @r is not biased to another slot.  Does
 * nothing for the fallback slot, or for a record revoked too often to be
 * worth it (KVPI_BIAS_MAX_REVOKES).
 */
static inline __attribute__((always_inline)) void
kvpi_bias_adopt(struct kvp_pool *p, struct kvpi_tslot *s, struct kvpi_orec *r)
{
	if (kvpi_tslot_is_fallback(p, s))
		return;
	/* relaxed: bias is written only under the shard's exclusion, which we
	 * hold;
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

#endif /* KVPOOL_LIB_POOL_BIAS_H */
