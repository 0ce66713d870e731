/*
 * lib/pool/bias.c - the slow sides of the two bias protocols.
 *
 * Owns: revoking an owner record's bias (kvpi_bias_revoke_slow), biasing
 * and revoking a minted shard (kvpi_oshard_note_slow), and revoking a
 * slot's raw-block bias (kvpi_raw_exclude).  The rest is
 * inline: kvpi_bias_enter, kvpi_bias_leave, kvpi_bias_adopt and
 * kvpi_bias_revoke's first test, and the shard ops, in lib/pool/bias.h, and the raw op
 * in kvp_free's fast path (lib/pool/pool_free.c).  May call: the heavy barrier and the spin wait;
 * it takes no lock (its callers hold the owner's shard's exclusion, its lock
 * or a shard op, where needed).
 *
 * Owner bias.  A record biased to a slot is changed by that slot's thread
 * inside an owner op, with no lock.  Another thread that needs the record
 * takes its shard's exclusion (the lock, or a shard op for the thread the
 * shard is biased to), clears the bias (seq_cst), issues the heavy barrier
 * and waits until the biased thread is not inside an op on it: the two
 * sides form a Dekker pair, so either the op sees the bias gone or the
 * revoker sees the op and waits for its end.
 *
 * Shard bias.  The same pair one level up (lib/pool/owner.h, "Biased
 * shards"): a minted shard biased to a slot is changed by that slot's
 * thread inside a shard op (in_owner_op = the shard), and a thread that
 * takes the shard's lock revokes the bias the same way before it changes
 * anything.  The op's word and the record op's are one, so a thread is in
 * at most one of the two at a time, and a revoker of either waits only for
 * its own value.
 *
 * Raw bias (asymmetric mode only).  A raw block has no owner, so only a
 * CAS excludes two frees of it.  The common case is a thread freeing the
 * raw blocks it allocated; the raw bias spares it that locked instruction.
 *
 *   1. A slot whose raw_bias is KVPI_RAW_BIASED stamps itself into the
 *      owner word of each raw block it hands out (kvpi_raw_owner_word).
 *   2. That slot's thread frees such a block inside a raw op: it stores
 *      KVPI_RAW_OP in its in_owner_op word, then loads its raw_bias.  While
 *      the bias stands, it checks the generation and clears in_use with a
 *      plain release store (kvpi_release_owned).
 *   3. Any other thread that changes such a block (a free, a set_used)
 *      first revokes the slot's raw bias for good (kvpi_raw_exclude):
 *      BIASED -> REVOKING (seq_cst), the heavy barrier, a wait while the
 *      slot's in_owner_op is KVPI_RAW_OP, then REVOKED (release).  Other
 *      revokers wait for REVOKED.
 *
 * Steps 2 and 3 form the same Dekker pair as an owner op.  Either the
 * revoker sees the op and waits for its end, or the op sees the bias gone
 * and uses the CAS.  After a revocation every change is a CAS, and CASes
 * exclude each other.  A revoked slot stamps 0 from then on, as the
 * fallback mode and the fallback slot always do.  docs/DESIGN.md has the
 * argument.
 */
#include "lib/base/spin.h"
#include "lib/pool/pool_internal.h"

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

/*
 * The revoker's half of both Dekker pairs: clear the bias word @bias (of a
 * record or a shard), issue the heavy barrier, and wait until slot @t's
 * thread is no longer inside an op on @what (the record or the shard).
 */
static void revoke_and_wait(struct kvp_pool *p, _Atomic uintptr_t *bias, uintptr_t t,
                            uintptr_t what)
{
	/* seq_cst: the store half of the revoker's Dekker pair. */
	atomic_store_explicit(bias, 0, memory_order_seq_cst);
	kvpi_heavy_barrier(p);
	struct kvpi_tslot *ts = (struct kvpi_tslot *)t;
	struct kvpi_spin spin = {0};
	/* acquire (asym) / seq_cst (fallback): the load half; once it reads
	 * anything but @what (a release store by that thread ending its op,
	 * or a later op's word), the op's changes are visible. */
	while (atomic_load_explicit(&ts->in_owner_op,
	                            p->asym ? memory_order_acquire : memory_order_seq_cst) == what)
		kvpi_spin_wait(&spin);
}

void kvpi_bias_revoke_slow(struct kvp_pool *p, struct kvpi_orec *r, uintptr_t t)
{
	if (r->revokes < UINT8_MAX)
		r->revokes++;
	revoke_and_wait(p, &r->bias, t, (uintptr_t)r);
}

/* Clear shard @sh's bias to slot @t and wait until @t's thread is out of
 * any shard op on it; the caller holds the lock. */
static __attribute__((noinline, cold)) void oshard_revoke(struct kvp_pool *p,
                                                          struct kvpi_oshard *sh, uintptr_t t)
{
	if (sh->revokes < UINT32_MAX)
		sh->revokes++;
	revoke_and_wait(p, &sh->bias, t, (uintptr_t)sh);
}

void kvpi_oshard_note_slow(struct kvp_pool *p, struct kvpi_tslot *s, struct kvpi_oshard *sh,
                           uintptr_t t)
{
	if (t != 0)
		oshard_revoke(p, sh, t);
	if (t != 0 || sh->streak_slot != s) {
		sh->streak_slot = s;
		sh->streak = 1;
		return;
	}
	/* A streak long enough: bias the shard to @s if it is @s's own
	 * minted shard in a plain pool (a prefix pool's calls take the lock
	 * without kvpi_oshard_lock, so its shards are never biased; the
	 * fallback slot is never biased to). */
	size_t i = (size_t)(sh - p->owners.shard);
	sh->streak = 0;
	if (p->mode || kvpi_tslot_is_fallback(p, s) || i < KVPI_MINTED_SHARD0 ||
	    (s->idx & 0xff) != i - KVPI_MINTED_SHARD0)
		return;
	/* relaxed: bias is written under the lock only, which we hold; our
	 * own shard ops read it in program order, and any other thread reads
	 * it under the lock (or racily, acting only on its own slot). */
	atomic_store_explicit(&sh->bias, (uintptr_t)s, memory_order_relaxed);
}
