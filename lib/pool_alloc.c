/*
 * lib/pool_alloc.c - kvp_allocate, kvp_free, kvp_free_all and the raw path.
 *
 * A block's life: free (on a stack or in a magazine) -> popped by exactly
 * one thread, which stamps a new generation, the owner and the fill into
 * its state word and links it into the owner's list (under the owner's
 * shard lock) -> freed by whoever holds a current ref: the in_use bit is
 * cleared by a CAS on the state word under the owner's shard lock (raw
 * blocks: by the CAS alone), so of several racing frees exactly one wins
 * and the rest count as stale -> pushed back.
 *
 * A block's state word is only ever changed by its exclusive holder (the
 * thread that popped it) or by a CAS that checks generation and in_use, so
 * a stale ref can never change a block that was handed out again.
 */
#include <string.h>

#include "lib/pool_internal.h"
#include "lib/prefix_internal.h"
#include "lib/rcu.h"

#define KVP_FREE_BATCH 64u

/* The ids are written into the caller's kvp_ref array before it gets its
 * refs: a may_alias type keeps that within C's aliasing rules. */
typedef uint32_t __attribute__((may_alias)) kvp_u32_alias;

static int stream_of_state(const struct kvp_pool *p, uint64_t st)
{
	return p->separate_kv ? (int)kvp_st_stream(st) : 0;
}

static uint64_t freed_state(uint64_t st)
{
	return st & ~(KVP_ST_IN_USE | KVP_ST_RAW | KVP_ST_USED_MASK);
}

/* Stamp a popped block as handed out; returns its new generation.  Sets
 * *reused when the block had been handed out before. */
static uint32_t stamp_block(struct kvp_block *b, uint32_t used, uint64_t flags, kvp_owner owner,
                            kvp_format format, bool *reused)
{
	/* relaxed: we hold the block exclusively since the acquire pop. */
	uint64_t old = atomic_load_explicit(&b->state, memory_order_relaxed);
	uint32_t gen = kvp_st_gen(old) + 1;
	if (gen == 0)
		gen = 1; /* generation 0 means "never handed out" */
	*reused = (old & KVP_ST_EVER) != 0;
	/* release: a kvp_block_get that reads this owner (then fences) cannot
	 * read a state word from before the free that preceded this hand-out;
	 * free on x86. */
	atomic_store_explicit(&b->owner, owner, memory_order_release);
	/* release: kvp_block_get's acquire load of the state then sees the
	 * owner written above. */
	atomic_store_explicit(&b->state,
	                      kvp_st_make(gen, used, KVP_ST_IN_USE | KVP_ST_EVER | flags,
	                                  kvp_st_stream(old), (uint32_t)format),
	                      memory_order_release);
	return gen;
}

/* Clear in_use on a block still at @st's generation; returns the state it
 * had, or 0 when a racing free got there first. */
static uint64_t clear_in_use(struct kvp_block *b, uint64_t st, uint32_t gen)
{
	for (;;) {
		if (kvp_st_gen(st) != gen || !(st & KVP_ST_IN_USE))
			return 0;
		/* acq_rel: acquire orders the holder's last writes (set_used,
		 * storage) before our push; release is carried by the push. */
		if (atomic_compare_exchange_weak_explicit(&b->state, &st, freed_state(st),
		                                          memory_order_acq_rel,
		                                          memory_order_acquire))
			return st;
	}
}

static void end_call(struct kvp_pool *p, struct kvp_tslot *s, bool mutated)
{
	if (mutated)
		kvp_history_tick(p, s);
	kvp_tslot_put(p, s);
}

/* End an allocate call that got no blocks: count an exhaustion, and record it. */
static int fail_call(struct kvp_pool *p, struct kvp_tslot *s, int rc)
{
	if (rc == KVP_EEXHAUSTED) {
		kvp_ctr_add(s, KVP_C_EXHAUSTED, 1);
		kvp_history_record(p);
	}
	end_call(p, s, false);
	return rc;
}

int kvp_allocate(kvp_pool *p, kvp_stream stream, uint32_t n_tokens, kvp_owner owner,
                 kvp_format format, kvp_ref *refs, size_t refs_cap, size_t *n_refs)
{
	if (!n_refs)
		return KVP_EINVAL;
	*n_refs = 0;
	if (!p || !refs || n_tokens == 0 || (unsigned)format >= KVP_N_FORMATS)
		return KVP_EINVAL;
	int si = kvp_stream_index(p, stream);
	if (si < 0)
		return KVP_EINVAL;
	uint32_t bs = p->block_size;
	uint32_t nb = n_tokens / bs + (n_tokens % bs != 0);
	if (refs_cap < nb) {
		*n_refs = nb;
		return KVP_ERANGE;
	}
	if (p->prefix) {
		int prc = kvp_pfx_allocate(p, si, n_tokens, owner, format, refs, nb);
		*n_refs = prc == KVP_OK ? nb : 0;
		return prc;
	}

	struct kvp_tslot *s = kvp_tslot_get(p);
	struct kvp_oshard *sh = kvp_owners_shard(&p->owners, owner);
	/* The caller's refs array doubles as scratch for the ids: no allocation. */
	kvp_u32_alias *ids = (kvp_u32_alias *)refs;
	kvp_rcu_read_lock();
	/*
	 * The owner's shard lock is held for the whole call: the owner record
	 * is found or made first (so running out of memory for it leaves no
	 * trace), and no free of the new blocks can slip in before their refs
	 * are written.  Growth and starvation may run under it: nothing that
	 * holds grow_lock or a claimed magazine ever waits for a shard lock.
	 */
	pthread_mutex_lock(&sh->lock);
	struct kvp_orec *r = kvp_oshard_find(sh, owner);
	bool made = false;
	if (!r) {
		r = kvp_oshard_insert(&p->owners, sh, &s->recs, owner);
		made = true;
	}
	int rc = r ? kvp_get_blocks(p, s, si, (uint32_t *)ids, nb) : KVP_ENOMEM;
	if (rc != KVP_OK) {
		if (r && made)
			kvp_oshard_remove(&p->owners, sh, &s->recs, r);
		pthread_mutex_unlock(&sh->lock);
		kvp_rcu_read_unlock();
		return fail_call(p, s, rc);
	}
	uint64_t reused = 0;
	uint32_t last_used = n_tokens - (nb - 1) * bs;
	for (uint32_t i = 0; i < nb; i++) {
		bool re;
		stamp_block(kvp_bt_block(&p->bt, ids[i]), i + 1 < nb ? bs : last_used, 0, owner,
		            format, &re);
		reused += re;
		kvp_orec_append(r, &p->bt, ids[i]);
	}
	/* Widen ids to refs from the end: refs[i] overlaps ids[2i], ids[2i+1],
	 * which are at or after i and already converted.  Under the shard lock
	 * no free can change a generation before we read it. */
	for (uint32_t i = nb; i-- > 0;) {
		uint32_t id = ids[i];
		uint64_t st =
		    atomic_load_explicit(&kvp_bt_block(&p->bt, id)->state, memory_order_relaxed);
		refs[i] = KVP_MAKE_REF(id, kvp_st_gen(st));
	}
	pthread_mutex_unlock(&sh->lock);
	kvp_ctr_add(s, KVP_C_ALLOCS, nb);
	kvp_ctr_add(s, KVP_C_REUSED, reused);
	kvp_ctr_add(s, KVP_C_NOT_FULL, last_used < bs);
	kvp_account_in_use(p, s, nb);
	kvp_rcu_read_unlock();
	end_call(p, s, true);
	*n_refs = nb;
	return KVP_OK;
}

int kvp_alloc_block(kvp_pool *p, kvp_stream stream, kvp_format format, kvp_ref *out)
{
	if (!p || !out || (unsigned)format >= KVP_N_FORMATS)
		return KVP_EINVAL;
	int si = kvp_stream_index(p, stream);
	if (si < 0)
		return KVP_EINVAL;
	if (p->prefix)
		return kvp_pfx_alloc_block(p, si, format, out);
	struct kvp_tslot *s = kvp_tslot_get(p);
	uint32_t id;
	kvp_rcu_read_lock();
	int rc = kvp_get_blocks(p, s, si, &id, 1);
	if (rc != KVP_OK) {
		kvp_rcu_read_unlock();
		return fail_call(p, s, rc);
	}
	bool re;
	uint32_t gen =
	    stamp_block(kvp_bt_block(&p->bt, id), p->block_size, KVP_ST_RAW, 0, format, &re);
	kvp_ctr_add(s, KVP_C_ALLOCS, 1);
	kvp_ctr_add(s, KVP_C_REUSED, re);
	kvp_account_in_use(p, s, 1);
	kvp_rcu_read_unlock();
	end_call(p, s, true);
	*out = KVP_MAKE_REF(id, gen);
	return KVP_OK;
}

/* Per-call accumulator for kvp_free: freed ids per stream, flushed in batches. */
struct free_acc {
	uint32_t ids[2][KVP_FREE_BATCH];
	uint32_t n[2];
	uint64_t freed, stale, not_full;
};

/* Give a batch back.  The in-use count drops first, so no thread that takes
 * these blocks next can count them in a peak while we still do. */
static void acc_flush(struct kvp_pool *p, struct kvp_tslot *s, struct free_acc *a, int si)
{
	if (a->n[si] == 0)
		return;
	/* Counted before the push too: a summed snapshot then never sees a
	 * block allocated again before its free is counted. */
	kvp_ctr_add(s, KVP_C_FREES, a->n[si]);
	kvp_account_in_use(p, s, -(int64_t)a->n[si]);
	kvp_put_blocks(p, s, si, a->ids[si], a->n[si]);
	a->n[si] = 0;
}

static void acc_add(struct kvp_pool *p, struct kvp_tslot *s, struct free_acc *a, uint64_t st,
                    uint32_t id)
{
	int si = stream_of_state(p, st);
	a->freed++;
	a->not_full += kvp_st_used(st) < p->block_size;
	a->ids[si][a->n[si]++] = id;
	if (a->n[si] == KVP_FREE_BATCH)
		acc_flush(p, s, a, si);
}

/* Free one owned block; the caller holds its owner's shard lock. */
static uint64_t free_owned(struct kvp_pool *p, struct kvp_tslot *s, struct kvp_oshard *sh,
                           struct kvp_block *b, uint32_t id, uint32_t gen)
{
	/* acquire: see the state as the allocator left it. */
	uint64_t st = atomic_load_explicit(&b->state, memory_order_acquire);
	if (kvp_st_gen(st) != gen || !(st & KVP_ST_IN_USE))
		return 0;
	/* Same generation and in use: the owner is the one we locked for. */
	kvp_owner owner = atomic_load_explicit(&b->owner, memory_order_relaxed);
	struct kvp_orec *r = kvp_oshard_find(sh, owner);
	st = clear_in_use(b, st, gen);
	if (!st || !r)
		return st;
	kvp_orec_unlink(r, &p->bt, id);
	if (r->count == 0 && !r->registered)
		kvp_oshard_remove(&p->owners, sh, &s->recs, r);
	return st;
}

int kvp_free(kvp_pool *p, const kvp_ref *refs, size_t n)
{
	if (!p || (!refs && n))
		return KVP_EINVAL;
	if (n == 0)
		return KVP_OK;
	uint32_t n_ids = kvp_pool_n_ids(p);
	for (size_t i = 0; i < n; i++)
		if (KVP_REF_ID(refs[i]) >= n_ids)
			return KVP_ENOENT;
	if (p->prefix)
		return kvp_pfx_free(p, refs, n);

	struct kvp_tslot *s = kvp_tslot_get(p);
	struct free_acc a;
	struct kvp_oshard *held = NULL;
	a.n[0] = a.n[1] = 0;
	a.freed = a.stale = a.not_full = 0;
	kvp_rcu_read_lock();
	for (size_t i = 0; i < n; i++) {
		uint32_t id = KVP_REF_ID(refs[i]), gen = KVP_REF_GEN(refs[i]);
		struct kvp_block *b = kvp_bt_block(&p->bt, id);
		/* acquire: pairs with stamp_block's release. */
		uint64_t st = atomic_load_explicit(&b->state, memory_order_acquire);
		if (kvp_st_gen(st) != gen || !(st & KVP_ST_IN_USE)) {
			a.stale++;
			continue;
		}
		if (st & KVP_ST_RAW) {
			st = clear_in_use(b, st, gen);
		} else {
			kvp_owner owner = atomic_load_explicit(&b->owner, memory_order_relaxed);
			struct kvp_oshard *sh = kvp_owners_shard(&p->owners, owner);
			if (sh != held) {
				if (held)
					pthread_mutex_unlock(&held->lock);
				pthread_mutex_lock(&sh->lock);
				held = sh;
			}
			st = free_owned(p, s, sh, b, id, gen);
		}
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
	kvp_ctr_add(s, KVP_C_STALE, a.stale);
	kvp_ctr_add(s, KVP_C_NOT_FULL, (uint64_t)0 - a.not_full);
	kvp_rcu_read_unlock();
	end_call(p, s, a.freed != 0);
	return KVP_OK;
}

int kvp_free_block(kvp_pool *p, kvp_ref ref)
{
	return kvp_free(p, &ref, 1);
}

int kvp_free_all(kvp_pool *p, kvp_owner owner)
{
	if (!p)
		return KVP_EINVAL;
	if (p->prefix)
		return kvp_pfx_free_all(p, owner);
	struct kvp_tslot *s = kvp_tslot_get(p);
	struct kvp_oshard *sh = kvp_owners_shard(&p->owners, owner);
	uint32_t first[2] = {KVP_NO_ID, KVP_NO_ID}, last[2] = {KVP_NO_ID, KVP_NO_ID},
	         cnt[2] = {0, 0};
	uint64_t not_full = 0;

	kvp_rcu_read_lock();
	pthread_mutex_lock(&sh->lock);
	struct kvp_orec *r = kvp_oshard_find(sh, owner);
	if (!r) {
		pthread_mutex_unlock(&sh->lock);
		kvp_rcu_read_unlock();
		end_call(p, s, false);
		return KVP_ENOENT;
	}
	/* Chain each stream's blocks in allocation order: the first one
	 * allocated ends on top, so a request made again gets its old ids. */
	for (uint32_t id = r->head; id != KVP_NO_ID;) {
		struct kvp_block *b = kvp_bt_block(&p->bt, id);
		uint32_t next = b->own_next;
		uint64_t st = atomic_load_explicit(&b->state, memory_order_acquire);
		st = clear_in_use(b, st, kvp_st_gen(st));
		int si = stream_of_state(p, st);
		not_full += kvp_st_used(st) < p->block_size;
		/* relaxed: published by the push CAS (release). */
		atomic_store_explicit(&b->free_next, KVP_NO_ID, memory_order_relaxed);
		if (last[si] == KVP_NO_ID)
			first[si] = id;
		else
			atomic_store_explicit(&kvp_bt_block(&p->bt, last[si])->free_next, id,
			                      memory_order_relaxed);
		last[si] = id;
		cnt[si]++;
		id = next;
	}
	kvp_oshard_remove(&p->owners, sh, &s->recs, r);
	pthread_mutex_unlock(&sh->lock);
	uint64_t freed = (uint64_t)cnt[0] + cnt[1];
	/* Counted before the blocks can be taken again (see acc_flush). */
	kvp_ctr_add(s, KVP_C_FREES, freed);
	kvp_account_in_use(p, s, -(int64_t)freed);
	for (int si = 0; si < 2; si++)
		kvp_put_chain(p, s, si, first[si], last[si], cnt[si]);
	kvp_ctr_add(s, KVP_C_NOT_FULL, (uint64_t)0 - not_full);
	kvp_rcu_read_unlock();
	end_call(p, s, true);
	return KVP_OK;
}
