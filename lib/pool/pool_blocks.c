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
 *      (claiming idle ones with a CAS, waiting out busy ones: protocol in
 *      lib/pool/magazine.h, the drain in lib/pool/magazine.c), then reserve k all or nothing;
 * failing that, grow by exactly the shortfall when allowed; else exhausted. Because reservations
 * are all or nothing, two threads racing for the last blocks never both fail while the blocks would
 * cover one of them, and because step 4 empties every magazine first, blocks parked in another
 * thread's cache never cause a false KVP_EEXHAUSTED.
 *
 * Giving blocks back mirrors it: into the magazine while it has room
 * (flushing its oldest half to the global stack when full), straight to
 * the global stack for large batches or while the stream is starving.
 * Order is last-freed-first: the magazine is the top of the stack.
 */
#include <sched.h>
#include <string.h>

#include "lib/base/spin.h"
#include "lib/base/sysmem.h"
#include "lib/pool/pool_internal.h"

/*
 * Grow held magazine @m of stream @si to room for @need ids, doubling, up to
 * its limit: thread_cache, and no more than a quarter of the blocks the
 * stream manages shared among the threads that have used the pool (so the
 * magazines together never park most of a small pool: a pool near
 * exhaustion, a server's normal state, then drains them less, and each
 * drain costs a membarrier; docs/BENCHMARKS.md, "Draining near
 * exhaustion").  Returns
 * false at the limit or when no memory could be had; the caller then
 * flushes as before.  Rare: a thread's magazine grows a few times in its
 * life, to the size of the largest batch it gives back.
 *
 * Only the holder touches ids and cap: a drainer claims a magazine only
 * while its owner is outside every call (lib/pool/magazine.h), and the
 * owner holds it here, so the old array is freed at once.
 */
static __attribute__((noinline, cold)) bool mag_grow(struct kvp_pool *p, int si, struct kvpi_mag *m,
                                                     uint32_t need)
{
	/* relaxed (both): sizing hints; any recent value will do. */
	uint64_t managed = atomic_load_explicit(&p->managed_stream[si], memory_order_relaxed);
	uint64_t threads = atomic_load_explicit(&p->n_slots, memory_order_relaxed);
	uint64_t share = managed / (4 * (threads ? threads : 1));
	uint64_t lim = share > KVPI_MAG_INITIAL ? share : KVPI_MAG_INITIAL;
	if (lim > p->thread_cache)
		lim = p->thread_cache;
	if (m->cap >= lim)
		return false;
	uint64_t cap = m->cap ? m->cap : 1;
	while (cap < need && cap < lim)
		cap *= 2;
	if (cap > lim)
		cap = lim;
	uint32_t *ids = kvpi_sys_alloc((size_t)cap * sizeof(uint32_t), 64);
	if (!ids)
		return false;
	memcpy(ids, m->ids, (size_t)kvpi_mag_count(m) * sizeof(uint32_t));
	kvpi_sys_free(m->heap);
	m->ids = m->heap = ids;
	m->cap = (uint32_t)cap;
	return true;
}

/*
 * Make room for @k more ids in the held magazine: grow it if it may, and
 * when it would still overflow, its oldest part goes to the global stack,
 * keeping at most half of it.  Returns the count left, or UINT32_MAX when
 * @k ids do not fit even in an empty magazine (then nothing moved).
 */
static uint32_t mag_make_room(struct kvp_pool *p, int si, struct kvpi_mag *m, uint32_t k)
{
	uint32_t cnt = kvpi_mag_count(m);
	if (cnt + k <= m->cap)
		return cnt;
	if (mag_grow(p, si, m, cnt + k) && cnt + k <= m->cap)
		return cnt;
	uint32_t cap = m->cap;
	if (k > cap)
		return UINT32_MAX;
	uint32_t keep = cap - k < cap / 2 ? cap - k : cap / 2;
	uint32_t f = cnt - keep;
	kvpi_fs_push_ids(&p->fs[si], &p->bt, m->ids, f);
	memmove(m->ids, m->ids + f, (size_t)keep * sizeof(uint32_t));
	kvpi_mag_set_count(m, keep);
	return keep;
}

/* Reserve @k blocks for growth or from the stack, within max_blocks; grow_lock held. */
static int grow_take(struct kvp_pool *p, struct kvpi_tslot *s, int si, kvpi_u32_alias *ids,
                     uint32_t k)
{
	struct kvpi_freestack *fs = &p->fs[si];
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
		kvpi_ctr_add(s, KVPI_C_GROWN, k - r);
	}
	if (r)
		kvpi_fs_pop_reserved(fs, &p->bt, &p->n_ids, ids, r);
	return KVP_OK;
}

/* Step 4. */
static int get_blocks_starving(struct kvp_pool *p, struct kvpi_tslot *s, int si,
                               kvpi_u32_alias *ids, uint32_t k)
{
	struct kvpi_freestack *fs = &p->fs[si];
	int rc = KVP_EEXHAUSTED;

	kvpi_starve_begin(p, si);
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
	kvpi_starve_end(p, si);
	return rc;
}

/* kvpi_get_blocks_fast's body, inlined into kvpi_get_blocks. */
static inline __attribute__((always_inline)) bool
get_blocks_fast(struct kvp_pool *p, struct kvpi_tslot *s, int si, kvpi_u32_alias *ids, uint32_t k)
{
	struct kvpi_freestack *fs = &p->fs[si];

	if (kvpi_use_magazine(p, s)) {
		struct kvpi_mag *m = &s->mag[si];
		if (kvpi_mag_enter(p, m, si)) {
			uint32_t cnt = kvpi_mag_count(m);
			if (cnt >= k) {
				if (k == 1) { /* the common case: skip the vectorised copy */
					ids[0] = m->ids[cnt - 1];
					kvpi_mag_set_count(m, cnt - 1);
				} else {
					kvpi_mag_take_top(m, cnt, ids, k);
				}
				kvpi_mag_leave(m);
				return true;
			}
			uint32_t need = k - cnt;
			uint32_t got = kvpi_fs_reserve(fs, need, need + m->cap / 2);
			if (got) {
				kvpi_mag_take_top(m, cnt, ids, cnt);
				kvpi_fs_pop_reserved(fs, &p->bt, &p->n_ids, ids + cnt, need);
				uint32_t extra = got - need;
				kvpi_fs_pop_reserved(fs, &p->bt, &p->n_ids, m->ids, extra);
				/* Popped newest first; the magazine keeps its newest on top. */
				for (uint32_t i = 0; i < extra / 2; i++) {
					uint32_t t = m->ids[i];
					m->ids[i] = m->ids[extra - 1 - i];
					m->ids[extra - 1 - i] = t;
				}
				kvpi_mag_set_count(m, extra);
				kvpi_mag_leave(m);
				return true;
			}
			kvpi_mag_leave(m);
		}
	}
	if (kvpi_fs_reserve(fs, k, k)) {
		kvpi_fs_pop_reserved(fs, &p->bt, &p->n_ids, ids, k);
		return true;
	}
	return false;
}

bool kvpi_get_blocks_fast(struct kvp_pool *p, struct kvpi_tslot *s, int si, kvpi_u32_alias *ids,
                          uint32_t k)
{
	return get_blocks_fast(p, s, si, ids, k);
}

int kvpi_get_blocks(struct kvp_pool *p, struct kvpi_tslot *s, int si, kvpi_u32_alias *ids,
                    uint32_t k)
{
	if (get_blocks_fast(p, s, si, ids, k))
		return KVP_OK;
	return get_blocks_starving(p, s, si, ids, k);
}

struct kvpi_mag *kvpi_mag_hold_room(struct kvp_pool *p, struct kvpi_tslot *s, int si, uint32_t n,
                                    uint32_t *base)
{
	if (!kvpi_use_magazine(p, s))
		return NULL;
	struct kvpi_mag *m = &s->mag[si];
	if (!kvpi_mag_enter(p, m, si))
		return NULL;
	uint32_t cnt = mag_make_room(p, si, m, n);
	if (cnt == UINT32_MAX) {
		kvpi_mag_leave(m);
		return NULL;
	}
	*base = cnt;
	return m;
}

void kvpi_mag_release_room(struct kvpi_mag *m, uint32_t base, uint32_t k, bool top_first)
{
	/* Written in the order the blocks were allocated unless @top_first;
	 * the first one goes on top. */
	for (uint32_t i = base, j = base + k; !top_first && i + 1 < j; i++, j--) {
		uint32_t t = m->ids[i];
		m->ids[i] = m->ids[j - 1];
		m->ids[j - 1] = t;
	}
	kvpi_mag_set_count(m, base + k);
	kvpi_mag_leave(m);
}

void kvpi_put_blocks(struct kvp_pool *p, struct kvpi_tslot *s, int si, const uint32_t *ids,
                     uint32_t k)
{
	if (k == 0)
		return;
	if (kvpi_use_magazine(p, s)) {
		struct kvpi_mag *m = &s->mag[si];
		if (kvpi_mag_enter(p, m, si)) {
			uint32_t cnt = mag_make_room(p, si, m, k);
			if (cnt != UINT32_MAX) {
				if (k == 1)
					m->ids[cnt] = ids[0];
				else
					memcpy(m->ids + cnt, ids, (size_t)k * sizeof(uint32_t));
				kvpi_mag_set_count(m, cnt + k);
				kvpi_mag_leave(m);
				return;
			}
			/* A batch larger than the magazine: it goes to the global
			 * stack on top of the magazine's older blocks. */
			kvpi_mag_flush_all(p, si, m);
			kvpi_mag_leave(m);
		}
	}
	kvpi_fs_push_ids(&p->fs[si], &p->bt, ids, k);
}

void kvpi_put_chain(struct kvp_pool *p, struct kvpi_tslot *s, int si, uint32_t first, uint32_t last,
                    uint32_t k)
{
	if (k == 0)
		return;
	if (kvpi_use_magazine(p, s)) {
		struct kvpi_mag *m = &s->mag[si];
		if (kvpi_mag_enter(p, m, si)) {
			uint32_t cnt = mag_make_room(p, si, m, k);
			if (cnt != UINT32_MAX) {
				/* The chain's first block is the newest: it goes on top. */
				uint32_t id = first;
				for (uint32_t i = 0; i < k; i++) {
					m->ids[cnt + k - 1 - i] = id;
					id = atomic_load_explicit(
					    &kvpi_bt_block(&p->bt, id)->free_next,
					    memory_order_relaxed);
				}
				kvpi_mag_set_count(m, cnt + k);
				kvpi_mag_leave(m);
				return;
			}
			/* A batch larger than the magazine: it goes to the global
			 * stack on top of the magazine's older blocks. */
			kvpi_mag_flush_all(p, si, m);
			kvpi_mag_leave(m);
		}
	}
	kvpi_fs_push_chain(&p->fs[si], &p->bt, first, last, k);
}
