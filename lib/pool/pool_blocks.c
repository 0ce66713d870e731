/*
 * lib/pool/pool_blocks.c - the block path: magazines, global stacks, starvation.
 *
 * Taking k blocks of a stream, fastest first:
 *   1. the thread's own magazine holds k: take them (no shared write);
 *   2. magazine + global stack: reserve the rest from the stack's exact
 *      count, all or nothing, plus up to half a magazine to refill it;
 *   3. the global stack alone covers k: reserve and pop;
 *   4. starvation: raise the stream's starving count, issue the heavy
 *      barrier, drain every thread's magazine into the global stack
 *      (claiming idle ones with a CAS, waiting out busy ones; protocol in
 *      lib/pool/tslot.h), then reserve k all or nothing; failing
 *      that, grow by exactly the shortfall when allowed; else exhausted.
 * Because reservations are all or nothing, two threads racing for the
 * last blocks never both fail while the blocks would cover one of them,
 * and because step 4 empties every magazine first, blocks parked in
 * another thread's cache never cause a false KVP_EEXHAUSTED.
 *
 * Giving blocks back mirrors it: into the magazine while it has room
 * (flushing its oldest half to the global stack when full), straight to
 * the global stack for large batches or while the stream is starving.
 * Order is last-freed-first: the magazine is the top of the stack.
 */
#include <sched.h>
#include <string.h>

#include "lib/base/spin.h"
#include "lib/pool/pool_internal.h"

static uint32_t mag_count(struct kvp_mag *m)
{
	/* relaxed: we hold the magazine; the holder's release/acquire on
	 * state orders count between holders. */
	return atomic_load_explicit(&m->count, memory_order_relaxed);
}

static void mag_set_count(struct kvp_mag *m, uint32_t n)
{
	atomic_store_explicit(&m->count, n, memory_order_relaxed);
}

#define use_magazine kvpi_use_magazine

/* Flush the whole magazine (held by the caller) to the global stack. */
static void mag_flush_all(struct kvp_pool *p, int si, struct kvp_mag *m)
{
	uint32_t cnt = mag_count(m);
	kvpi_fs_push_ids(&p->fs[si], &p->bt, m->ids, cnt);
	mag_set_count(m, 0);
}

/*
 * Make room for @k (<= thread_cache) more ids in the held magazine: when it
 * would overflow, its oldest part goes to the global stack, keeping at most
 * half of it.  Returns the count left.
 */
static uint32_t mag_make_room(struct kvp_pool *p, int si, struct kvp_mag *m, uint32_t k)
{
	uint32_t cap = p->thread_cache, cnt = mag_count(m);
	if (cnt + k <= cap)
		return cnt;
	uint32_t keep = cap - k < cap / 2 ? cap - k : cap / 2;
	uint32_t f = cnt - keep;
	kvpi_fs_push_ids(&p->fs[si], &p->bt, m->ids, f);
	memmove(m->ids, m->ids + f, (size_t)keep * sizeof(uint32_t));
	mag_set_count(m, keep);
	return keep;
}

/* Drain one magazine into the global stack.  With @wait, wait out an owner
 * inside a call (or another drainer); without, skip such a magazine.
 * Returns false when it skipped one that held blocks.  The caller raised
 * starving and issued the heavy barrier after it. */
static bool drain_one(struct kvp_pool *p, int si, struct kvp_mag *m, bool wait)
{
	struct kvpi_spin spin = {0};
	for (;;) {
		/* acquire (asym) / seq_cst (fallback): the load half of the
		 * drainer's Dekker pair; acquire sees what the owner left in
		 * the magazine when it stored 0 (release). */
		uintptr_t in = atomic_load_explicit(&m->in_call, p->asym ? memory_order_acquire
		                                                         : memory_order_seq_cst);
		if (in == 0) {
			/* The owner stays out until starving drops: only other
			 * drainers (or its exiting thread) can be here. */
			if (mag_count(m) == 0)
				return true;
			uint32_t exp = 0;
			/* acquire: see the previous claimer's release. */
			if (atomic_compare_exchange_strong_explicit(
			        &m->claimed, &exp, 1, memory_order_acquire, memory_order_relaxed)) {
				mag_flush_all(p, si, m);
				/* release: the next holder sees the emptied magazine. */
				atomic_store_explicit(&m->claimed, 0, memory_order_release);
				return true;
			}
		} else if (!wait) {
			return false;
		}
		/* in_call: its owner is inside a call; claimed: another drainer
		 * is emptying it.  Either ends within a few dozen instructions
		 * unless that thread was preempted: spin a little, then yield. */
		kvpi_spin_wait(&spin);
	}
}

void kvpi_drain_magazines(struct kvp_pool *p, int si, uint32_t want)
{
	/* Pass 0 takes the idle threads' magazines and stops as soon as @want
	 * blocks are reservable; pass 1 (the exact one) waits for every
	 * magazine whose owner is inside a call. */
	kvpi_heavy_barrier(p);
	for (int pass = 0; pass < 2; pass++) {
		bool skipped = false;
		/* seq_cst: after our seq_cst starving store, so a slot pushed by
		 * a thread whose first call missed the flag is on the list. */
		for (struct kvp_tslot *s = atomic_load_explicit(&p->slots, memory_order_seq_cst); s;
		     s = s->next) {
			skipped |= !drain_one(p, si, &s->mag[si], pass == 1);
			/* relaxed: a hint; the caller's reservation decides. */
			if (want &&
			    atomic_load_explicit(&p->fs[si].avail, memory_order_relaxed) >= want)
				return;
		}
		if (!skipped)
			return;
	}
}

/* Reserve @k blocks for growth or from the stack, within max_blocks; grow_lock held. */
static int grow_take(struct kvp_pool *p, struct kvp_tslot *s, int si, kvp_u32_alias *ids,
                     uint32_t k)
{
	struct kvp_freestack *fs = &p->fs[si];
	/* relaxed: managed changes only under grow_lock, which we hold. */
	uint64_t managed = atomic_load_explicit(&p->managed, memory_order_relaxed);
	/* acquire: as in kvpi_fs_reserve. */
	int64_t a = atomic_load_explicit(&fs->avail, memory_order_acquire);
	uint32_t r;
	for (;;) {
		r = a <= 0 ? 0 : (a >= (int64_t)k ? k : (uint32_t)a);
		if (managed + (k - r) > p->max_blocks)
			return KVP_EEXHAUSTED;
		if (r == 0 || atomic_compare_exchange_weak_explicit(&fs->avail, &a, a - r,
		                                                    memory_order_acquire,
		                                                    memory_order_acquire))
			break;
	}
	if (r < k) {
		int rc = kvpi_grow_locked(p, si, k - r, ids + r);
		if (rc != KVP_OK) {
			if (r)
				kvpi_fs_unreserve(fs, r);
			return rc;
		}
		kvpi_ctr_add(s, KVP_C_GROWN, k - r);
	}
	if (r)
		kvpi_fs_pop_reserved(fs, &p->bt, &p->n_ids, ids, r);
	return KVP_OK;
}

/* Step 4. */
static int get_blocks_starving(struct kvp_pool *p, struct kvp_tslot *s, int si, kvp_u32_alias *ids,
                               uint32_t k)
{
	struct kvp_freestack *fs = &p->fs[si];
	int rc = KVP_EEXHAUSTED;

	/* seq_cst: the store half of the Dekker pair (see lib/pool/tslot.h). */
	atomic_fetch_add_explicit(&p->starving[si], 1, memory_order_seq_cst);
	/* Enough idle magazines first; if the reservation still fails, a full
	 * drain (waiting out busy owners) before any growth or exhaustion. */
	kvpi_drain_magazines(p, si, k);
	bool got = kvpi_fs_reserve(fs, k, k) != 0;
	if (!got) {
		kvpi_drain_magazines(p, si, 0);
		got = kvpi_fs_reserve(fs, k, k) != 0;
	}
	if (got) {
		kvpi_fs_pop_reserved(fs, &p->bt, &p->n_ids, ids, k);
		rc = KVP_OK;
	} else if (p->grow) {
		pthread_mutex_lock(&p->grow_lock);
		rc = grow_take(p, s, si, ids, k);
		if (rc == KVP_OK)
			kvpi_history_record(p);
		pthread_mutex_unlock(&p->grow_lock);
	}
	/* release: nothing to publish; only lifts the bypass. */
	atomic_fetch_sub_explicit(&p->starving[si], 1, memory_order_release);
	return rc;
}

int kvpi_get_blocks(struct kvp_pool *p, struct kvp_tslot *s, int si, kvp_u32_alias *ids, uint32_t k)
{
	struct kvp_freestack *fs = &p->fs[si];

	if (use_magazine(p, s)) {
		struct kvp_mag *m = &s->mag[si];
		if (kvpi_mag_enter(p, m, si)) {
			uint32_t cnt = mag_count(m);
			if (cnt >= k) {
				if (k == 1) /* the common case: skip the vectorised copy */
					ids[0] = m->ids[cnt - 1];
				else
					for (uint32_t i = 0; i < k; i++)
						ids[i] = m->ids[cnt - 1 - i];
				mag_set_count(m, cnt - k);
				kvpi_mag_leave(m);
				return KVP_OK;
			}
			uint32_t need = k - cnt;
			uint32_t got = kvpi_fs_reserve(fs, need, need + p->thread_cache / 2);
			if (got) {
				for (uint32_t i = 0; i < cnt; i++)
					ids[i] = m->ids[cnt - 1 - i];
				kvpi_fs_pop_reserved(fs, &p->bt, &p->n_ids, ids + cnt, need);
				uint32_t extra = got - need;
				kvpi_fs_pop_reserved(fs, &p->bt, &p->n_ids, m->ids, extra);
				/* Popped newest first; the magazine keeps its newest on top. */
				for (uint32_t i = 0; i < extra / 2; i++) {
					uint32_t t = m->ids[i];
					m->ids[i] = m->ids[extra - 1 - i];
					m->ids[extra - 1 - i] = t;
				}
				mag_set_count(m, extra);
				kvpi_mag_leave(m);
				return KVP_OK;
			}
			kvpi_mag_leave(m);
		}
	}
	if (kvpi_fs_reserve(fs, k, k)) {
		kvpi_fs_pop_reserved(fs, &p->bt, &p->n_ids, ids, k);
		return KVP_OK;
	}
	return get_blocks_starving(p, s, si, ids, k);
}

void kvpi_put_blocks(struct kvp_pool *p, struct kvp_tslot *s, int si, const uint32_t *ids,
                     uint32_t k)
{
	uint32_t cap = p->thread_cache;

	if (k == 0)
		return;
	if (use_magazine(p, s)) {
		struct kvp_mag *m = &s->mag[si];
		if (kvpi_mag_enter(p, m, si)) {
			if (k <= cap) {
				uint32_t cnt = mag_make_room(p, si, m, k);
				if (k == 1)
					m->ids[cnt] = ids[0];
				else
					memcpy(m->ids + cnt, ids, (size_t)k * sizeof(uint32_t));
				mag_set_count(m, cnt + k);
				kvpi_mag_leave(m);
				return;
			}
			/* A batch larger than the magazine: it goes to the global
			 * stack on top of the magazine's older blocks. */
			mag_flush_all(p, si, m);
			kvpi_mag_leave(m);
		}
	}
	kvpi_fs_push_ids(&p->fs[si], &p->bt, ids, k);
}

void kvpi_put_chain(struct kvp_pool *p, struct kvp_tslot *s, int si, uint32_t first, uint32_t last,
                    uint32_t k)
{
	uint32_t cap = p->thread_cache;

	if (k == 0)
		return;
	if (use_magazine(p, s) && k <= cap) {
		struct kvp_mag *m = &s->mag[si];
		if (kvpi_mag_enter(p, m, si)) {
			uint32_t cnt = mag_make_room(p, si, m, k);
			/* The chain's first block is the newest: it goes on top. */
			uint32_t id = first;
			for (uint32_t i = 0; i < k; i++) {
				m->ids[cnt + k - 1 - i] = id;
				id = atomic_load_explicit(&kvpi_bt_block(&p->bt, id)->free_next,
				                          memory_order_relaxed);
			}
			mag_set_count(m, cnt + k);
			kvpi_mag_leave(m);
			return;
		}
	} else if (use_magazine(p, s)) {
		struct kvp_mag *m = &s->mag[si];
		if (kvpi_mag_enter(p, m, si)) {
			mag_flush_all(p, si, m);
			kvpi_mag_leave(m);
		}
	}
	kvpi_fs_push_chain(&p->fs[si], &p->bt, first, last, k);
}

void kvpi_account_in_use_slow(struct kvp_pool *p, struct kvp_tslot *s, int64_t d)
{
	/*
	 * A thread keeps up to KVP_PEAK_BATCH - 1 newly allocated blocks to
	 * itself before adding them to the pool's count, but publishes any net
	 * free at once, so every unpublished delta is >= 0.  Then the estimate
	 * below (published count + our own delta) never exceeds the true
	 * number in use, so the peak never records one that did not happen.
	 * The fast path keeps a delta only up to in_use_room = peak - published
	 * count as read here (capped at KVP_PEAK_BATCH - 1): with one thread
	 * those two words change only here, so every allocation that would
	 * raise the peak comes here and the peak is exact.  With several
	 * threads the published count may have grown since; at the instant of
	 * the true maximum M the published count P was last raised by a
	 * publish that raised the peak to at least P, and M - P is the sum of
	 * the unpublished deltas: the peak misses at most KVP_PEAK_BATCH - 1
	 * blocks per other thread, as before the room was cached.
	 */
	bool fb = kvpi_tslot_is_fallback(p, s);
	s->delta_in_use += d;
	if (s->delta_in_use >= (int64_t)KVP_PEAK_BATCH || s->delta_in_use < 0 || fb) {
		/* relaxed: a statistic; orders nothing else. */
		atomic_fetch_add_explicit(&p->in_use, s->delta_in_use, memory_order_relaxed);
		s->delta_in_use = 0;
	}
	/* relaxed: statistics, as above. */
	int64_t in_use = atomic_load_explicit(&p->in_use, memory_order_relaxed);
	uint64_t peak = atomic_load_explicit(&p->peak, memory_order_relaxed);
	int64_t est = in_use + s->delta_in_use;
	while (d > 0 && est > 0 && (uint64_t)est > peak) {
		if (atomic_compare_exchange_weak_explicit(
		        &p->peak, &peak, (uint64_t)est, memory_order_relaxed, memory_order_relaxed))
			peak = (uint64_t)est;
	}
	int64_t room = (int64_t)peak - in_use;
	if (room > (int64_t)KVP_PEAK_BATCH - 1)
		room = (int64_t)KVP_PEAK_BATCH - 1;
	s->in_use_room = fb ? -1 : room;
}
