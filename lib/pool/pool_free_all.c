/*
 * lib/pool/pool_free_all.c - kvp_free_all in a plain pool.
 *
 * Owns: ending an owner.  Under the owner's shard's exclusion (its lock, or
 * a shard op; the record's bias revoked) every block in the owner's id
 * array is cleared, the record dropped, and the blocks given back: into
 * this thread's magazines when they have room for all its blocks, else as
 * one chain per stream pushed on the global stack.
 *
 * May call: the block path (lib/pool/pool_blocks.c, magazine.h), the owner
 * table (lib/pool/owner.h), kvpi_bias_revoke (lib/pool/bias.h), the
 * state-word helpers (lib/pool/block_state.h) and the statistics.
 */
#include "lib/pool/block_state.h"

/*
 * Clear in-use block @b of an owner's id array; returns the state it had.  The
 * record's exclusion (the shard's, bias revoked) makes us its only writer.
 */
static inline uint64_t free_held_block(struct kvpi_block *b)
{
	/* acquire: orders the last holder's writes (storage, a set_used of
	 * another thread under the same exclusion) before the block is given
	 * back. */
	uint64_t st = atomic_load_explicit(&b->state, memory_order_acquire);
	/* release: a kvp_block_get or stale free that reads the freed word
	 * also sees what we did before (a plain store on x86). */
	atomic_store_explicit(&b->state, kvpi_freed_state(st), memory_order_release);
	return st;
}

/* Owners this small are freed through a buffer on the stack (free_all_small). */
#define FREE_ALL_SMALL 16u

/*
 * kvp_free_all of record @r (its shard's exclusion held, @op as
 * kvpi_oshard_enter returned it; bias revoked) when it holds at most
 * FREE_ALL_SMALL blocks: they are cleared, the record dropped and the
 * exclusion released, then given back through the ordinary block path (one
 * magazine entry per stream).  Ends the call.
 */
static __attribute__((noinline)) int free_all_small(struct kvp_pool *p, struct kvpi_tslot *s,
                                                    struct kvpi_oshard *sh, bool op,
                                                    struct kvpi_orec *r)
{
	uint32_t ids[2][FREE_ALL_SMALL], cnt[2] = {0, 0};
	uint64_t not_full = r->not_full; /* exact under the exclusion */
	/* Written top down from the count of each stream's ids (exact under
	 * the exclusion), so the first block allocated is given back last
	 * and ends on top, with no reversal.  One stream: the record's count. */
	uint32_t w[2] = {kvpi_orec_count(r), 0};
	bool two = p->separate_kv;
	if (two) {
		for (uint32_t k = 0; k < r->ids.len; k++) {
			uint32_t id = r->ids.ids[k];
			if (id != KVPI_NO_ID)
				/* relaxed: the exclusion orders the stamp before us. */
				w[1] += (uint32_t)kvpi_st_stream(atomic_load_explicit(
				    &kvpi_bt_block(&p->bt, id)->state, memory_order_relaxed));
		}
		w[0] -= w[1];
	}
	cnt[0] = w[0];
	cnt[1] = w[1];
	for (uint32_t k = 0; k < r->ids.len; k++) {
		uint32_t id = r->ids.ids[k];
		if (id == KVPI_NO_ID)
			continue;
		uint64_t st = free_held_block(kvpi_bt_block(&p->bt, id));
		int si = two ? (int)kvpi_st_stream(st) : 0;
		ids[si][--w[si]] = id;
	}
	kvpi_oshard_remove(&p->owners, sh, &s->recs, r);
	kvpi_oshard_exit(s, sh, op);
	for (int si = 0; si < 2; si++)
		if (cnt[si])
			kvpi_give_back(p, s, si, ids[si], cnt[si]);
	if (not_full)
		kvpi_ctr_add(s, KVPI_C_NOT_FULL, (uint64_t)0 - not_full);
	kvpi_end_call(p, s, true);
	return KVP_OK;
}

/* kvp_free_all of record @r (as free_all_small) holding more blocks: they go
 * into the thread's magazines when those can take them all, else as a chain
 * per stream to the global stack.  Ends the call. */
static __attribute__((noinline)) int free_all_large(struct kvp_pool *p, struct kvpi_tslot *s,
                                                    struct kvpi_oshard *sh, bool op,
                                                    struct kvpi_orec *r)
{
	uint32_t first[2] = {KVPI_NO_ID, KVPI_NO_ID}, last[2] = {KVPI_NO_ID, KVPI_NO_ID},
	         cnt[2] = {0, 0}, base[2] = {0, 0};
	struct kvpi_mag *mag[2] = {NULL, NULL};
	bool top_first = false; /* ids written top down (else in allocation order) */
	uint32_t count = kvpi_orec_count(r);
	uint64_t not_full = r->not_full; /* exact under the exclusion */
	for (uint32_t si = 0; si < p->n_streams; si++)
		mag[si] = kvpi_mag_hold_room(p, s, (int)si, count, &base[si]);
	/* The table's first segment is read once (the atomic accesses below
	 * would make the compiler reload it for every block). */
	struct kvpi_blocktable *bt = &p->bt;
	struct kvpi_block *seg0 = bt->seg0;
	uint32_t n0 = bt->n0;
	bool two = p->separate_kv;
	const uint32_t *ids = r->ids.ids, *end = ids + r->ids.len;
	if (mag[0] && !two) {
		/* One stream, its magazine holding room for all the blocks: the
		 * ids are written top down, so the first block allocated ends on
		 * top with no reversal.  count is exact under the record's
		 * exclusion. */
		uint32_t *w = mag[0]->ids + base[0] + count;
		for (; ids < end; ids++) {
			uint32_t id = *ids;
			struct kvpi_block *b;
			/* One compare in the common case: a hole (KVPI_NO_ID)
			 * is past every segment, so it fails it too. */
			if (__builtin_expect(id < n0, 1))
				b = &seg0[id];
			else if (id == KVPI_NO_ID)
				continue;
			else
				b = kvpi_bt_block_slow(bt, id);
			(void)free_held_block(b);
			*--w = id;
		}
		cnt[0] = count;
		top_first = true;
	} else if (mag[0] && mag[1]) {
		/* Every stream's magazine holds room for all the blocks. */
		uint32_t *w[2] = {mag[0]->ids + base[0], mag[1]->ids + base[1]};
		uint32_t *w0 = w[0], *w1 = w[1];
		for (; ids < end; ids++) {
			uint32_t id = *ids;
			if (id == KVPI_NO_ID)
				continue;
			uint64_t st = free_held_block(kvpi_bt_block_at(bt, seg0, n0, id));
			if (kvpi_st_stream(st))
				*w1++ = id;
			else
				*w0++ = id;
		}
		cnt[0] = (uint32_t)(w0 - w[0]);
		cnt[1] = (uint32_t)(w1 - w[1]);
	} else {
		struct kvpi_block *lastb[2] = {NULL, NULL};
		for (; ids < end; ids++) {
			uint32_t id = *ids;
			if (id == KVPI_NO_ID)
				continue;
			struct kvpi_block *b = kvpi_bt_block_at(bt, seg0, n0, id);
			uint64_t st = free_held_block(b);
			int si = two ? (int)kvpi_st_stream(st) : 0;
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
		}
	}
	uint64_t freed = (uint64_t)cnt[0] + cnt[1];
	kvpi_note_freed(p, s, freed); /* before the blocks can be taken again */
	for (int si = 0; si < 2; si++)
		if (mag[si])
			kvpi_mag_release_room(mag[si], base[si], cnt[si], top_first);
	/* Out of the magazines first: dropping the record may give its id
	 * array to the shared stash (a lock) or the system. */
	kvpi_oshard_remove(&p->owners, sh, &s->recs, r);
	kvpi_oshard_exit(s, sh, op);
	for (int si = 0; si < 2; si++)
		if (!mag[si])
			kvpi_put_chain(p, s, si, first[si], last[si], cnt[si]);
	kvpi_ctr_add(s, KVPI_C_NOT_FULL, (uint64_t)0 - not_full);
	kvpi_end_call(p, s, true);
	return KVP_OK;
}

/*
 * kvp_free_all in a plain pool.  Under the owner's shard's exclusion (its
 * lock, or a shard op when the shard is biased to this thread; the
 * record's bias revoked), every block in the record's id array is cleared
 * and goes straight into this thread's magazine of its stream when the
 * magazine can take the whole array (it grows by demand): a request's
 * blocks stay with the thread
 * that freed them, and the next request it serves takes them back without
 * touching a line another thread writes.  A stream whose magazine cannot
 * take them (too many, the stream starving, the fallback slot) gets a
 * chain pushed to its global stack with one CAS, after the lock.
 *
 * Either way the first block allocated ends on top, so a request made
 * again gets its old ids in the same order.  The magazines are entered
 * only once the exclusion is held and left before it is dropped: while
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
	/* Inside the shard's exclusion we enter only magazines. */
	bool op = kvpi_oshard_enter(p, s, sh);
	struct kvpi_orec *r = kvpi_oshard_find_h(sh, owner, h);
	if (!r) {
		kvpi_oshard_exit(s, sh, op);
		kvpi_end_call(p, s, false);
		return KVP_ENOENT;
	}
	kvpi_bias_revoke(p, s, r);
	if (kvpi_orec_count(r) <= FREE_ALL_SMALL)
		return free_all_small(p, s, sh, op, r);
	return free_all_large(p, s, sh, op, r);
}
