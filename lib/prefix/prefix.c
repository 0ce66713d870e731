/*
 * lib/prefix/prefix.c - the prefix state's life cycle, kvp_free_owned and
 * kvp_prefix_reset.  lib/prefix/prefix_internal.h has the design.
 *
 * Matching is in lib/prefix/prefix_match.c, publishing in
 * lib/prefix/prefix_publish.c.  Reset unpublishes a block still private to
 * its publisher (lib/prefix/prefix_internal.h, "Private blocks") under that
 * owner's shard mutex, as the owner's own calls change it.
 */
#include <string.h>

#include "lib/prefix/prefix_internal.h"
#include "lib/base/sysmem.h"

/* The segment directory of top entry @t, made zeroed and published (release)
 * if it is missing; NULL when out of memory.  Grow mutex held, or before
 * the pool is shared. */
static _Atomic(struct kvpi_pside *) *side_dir(struct kvpi_prefix *pf, uint32_t t)
{
	/* relaxed: only the grow_lock holder writes these pointers. */
	_Atomic(struct kvpi_pside *) *mid = atomic_load_explicit(&pf->top[t], memory_order_relaxed);
	if (!mid) {
		mid = kvpi_sys_calloc(KVPI_PFX_MID, sizeof(*mid), 64);
		if (!mid)
			return NULL;
		/* release: readers (acquire) see the zeroed directory. */
		atomic_store_explicit(&pf->top[t], mid, memory_order_release);
	}
	return mid;
}

int kvpi_pfx_extend(struct kvpi_prefix *pf, uint32_t n_ids)
{
	uint32_t n_segs = (n_ids + KVPI_SEG_BLOCKS - 1) / KVPI_SEG_BLOCKS;
	for (uint32_t g = 0; g < n_segs; g++) {
		_Atomic(struct kvpi_pside *) *mid = side_dir(pf, g >> KVPI_PFX_MID_SHIFT);
		uint32_t m = g & (KVPI_PFX_MID - 1);
		if (!mid)
			return -1;
		/* relaxed: as in side_dir. */
		if (atomic_load_explicit(&mid[m], memory_order_relaxed))
			continue;
		struct kvpi_pside *seg = kvpi_sys_calloc(KVPI_SEG_BLOCKS, sizeof(*seg), 64);
		if (!seg)
			return -1;
		for (uint32_t i = 0; i < KVPI_SEG_BLOCKS; i++)
			seg[i].lru_prev = seg[i].lru_next = KVPI_NO_ID;
		/* release: readers (acquire) see the initialised entries. */
		atomic_store_explicit(&mid[m], seg, memory_order_release);
	}
	return 0;
}

/*
 * The side entries of the blocks the pool starts with, in one array
 * (pf->seg0): kvpi_pfx_side finds them with one compare and no directory
 * load.  Their segments are entered in the directory too, so the two-level
 * path serves every id alike.  Before the pool is shared.  0, or -1.
 */
static int side_init(struct kvpi_prefix *pf, uint32_t n_blocks)
{
	uint32_t n_segs = (n_blocks + KVPI_SEG_BLOCKS - 1) / KVPI_SEG_BLOCKS;
	if (n_segs == 0)
		return 0;
	struct kvpi_pside *seg0 =
	    kvpi_sys_calloc((size_t)n_segs * KVPI_SEG_BLOCKS, sizeof(*seg0), 64);
	if (!seg0)
		return -1;
	pf->seg0 = seg0;
	pf->n0 = n_segs * KVPI_SEG_BLOCKS;
	for (uint32_t i = 0; i < pf->n0; i++)
		seg0[i].lru_prev = seg0[i].lru_next = KVPI_NO_ID;
	for (uint32_t g = 0; g < n_segs; g++) {
		_Atomic(struct kvpi_pside *) *mid = side_dir(pf, g >> KVPI_PFX_MID_SHIFT);
		if (!mid)
			return -1;
		/* release: as in kvpi_pfx_extend (the pool's creation publishes
		 * it anyway). */
		atomic_store_explicit(&mid[g & (KVPI_PFX_MID - 1)],
		                      seg0 + (size_t)g * KVPI_SEG_BLOCKS, memory_order_release);
	}
	return 0;
}

static void side_destroy(struct kvpi_prefix *pf)
{
	for (uint32_t t = 0; t < KVPI_PFX_TOP; t++) {
		_Atomic(struct kvpi_pside *) *mid =
		    atomic_load_explicit(&pf->top[t], memory_order_relaxed);
		if (!mid)
			continue;
		for (uint32_t m = 0; m < KVPI_PFX_MID; m++) {
			struct kvpi_pside *seg =
			    atomic_load_explicit(&mid[m], memory_order_relaxed);
			/* seg0's segments go with it, below. */
			if (seg && !(seg >= pf->seg0 && seg < pf->seg0 + pf->n0))
				kvpi_sys_free(seg);
		}
		kvpi_sys_free(mid);
	}
	kvpi_sys_free(pf->seg0);
	pf->seg0 = NULL;
	pf->n0 = 0;
}

int kvpi_pfx_create(struct kvp_pool *p, const kvp_pool_config *cfg)
{
	/* Before anything that could make liburcu start a thread (its
	 * call_rcu worker): if no thread can be made, fail here, with
	 * nothing made, instead of liburcu aborting. */
	if (kvpi_rcu_start_threads() != 0)
		return -1;
	struct kvpi_prefix *pf = kvpi_sys_calloc(1, sizeof(*pf), 64);
	if (!pf)
		return -1;
	p->prefix = pf;
	pf->bt = &p->bt;
	/* The prefix layer grows the pool itself, after eviction. */
	pf->grow = cfg->grow_on_exhaustion;
	pf->ahead_cached = KVPI_PFX_EVICT_AHEAD_CACHED;
	p->grow = false;
	/* Per-thread magazines hold uncached free blocks, as in a plain pool;
	 * an allocation that must evict drains them first
	 * (kvpi_pfx_get_blocks), so "uncached first" holds across threads. */
	kvpi_pfx_lru_init(pf);
	if (kvpi_pfx_index_init(pf, cfg->n_blocks) != 0 || side_init(pf, cfg->n_blocks) != 0 ||
	    kvpi_pfx_extend(pf, cfg->n_blocks) != 0)
		return -1;
	return 0;
}

void kvpi_pfx_destroy(struct kvp_pool *p)
{
	struct kvpi_prefix *pf = p->prefix;
	if (!pf)
		return;
	kvpi_pfx_index_destroy(pf);
	side_destroy(pf);
	kvpi_pfx_lru_destroy(pf);
	kvpi_sys_free(pf);
	p->prefix = NULL;
}

int kvp_free_owned(kvp_pool *p, kvp_owner owner, const kvp_ref *refs, size_t n)
{
	if (!p || !p->prefix || (!refs && n))
		return KVP_EINVAL;
	uint32_t n_ids = kvp_pool_n_ids(p);
	for (size_t i = 0; i < n; i++)
		if (KVP_REF_ID(refs[i]) >= n_ids)
			return KVP_ENOENT;
	if (n == 0)
		return KVP_OK;
	return kvpi_pfx_free_owned(p, owner, refs, n);
}

/* Private blocks a reset's index pass could not unpublish at once (their
 * owner's shard mutex was busy) are done after the pass: this many kept on
 * the stack, more in an array grown from the system. */
#define UNPUB_BUSY 64u

struct unpub_arg {
	struct kvp_pool *p;
	size_t n;
	uint32_t first[UNPUB_BUSY];
	uint32_t *busy; /* first, or a grown array */
	uint32_t n_busy, cap;
	bool more; /* busy blocks that found no room: another pass */
};

/* A state reset may unpublish: published and held, not private. */
static bool unpub_ok(uint64_t st, const void *arg)
{
	(void)arg;
	return (st & KVPI_ST_PUBLISHED) && (st & KVPI_ST_IN_USE) && !(st & KVPI_ST_PRIVATE);
}

/* Drop block @e's key (@id, locked or private to an owner whose mutex we
 * hold) if it still has it; returns @st without PUBLISHED if so. */
static uint64_t unpub_key(struct unpub_arg *a, uint32_t id, struct kvpi_pside *e, uint64_t st)
{
	if (!e->pub)
		return st;
	kvpi_pfx_forget_many(a->p->prefix, &id, 1);
	a->n++;
	return st & ~KVPI_ST_PUBLISHED;
}

/*
 * Unpublish block @id if it is held.  An ordinary block is locked; a
 * private one (published by an owner that still holds it alone) is
 * changed under its owner's shard mutex, as its owner's calls change it:
 * taken at once when @wait is false (the index pass, in a read-side
 * section, must not wait for it), else waited for (no lock held, outside
 * any section).  Returns false when @wait is false and that mutex was
 * busy (nothing done).
 */
static bool unpublish_one(struct unpub_arg *a, uint32_t id, bool wait)
{
	struct kvp_pool *p = a->p;
	struct kvpi_block *b = kvpi_bt_block(&p->bt, id);
	struct kvpi_pside *e = kvpi_pfx_side(p->prefix, id);
	const uint64_t priv = KVPI_ST_PRIVATE | KVPI_ST_PUBLISHED | KVPI_ST_IN_USE;
	for (;;) {
		uint64_t seen;
		if (wait)
			kvpi_rcu_read_lock(); /* the index pass's section is left */
		uint64_t st = kvpi_pfx_lock(b, unpub_ok, NULL, &seen);
		if (st)
			kvpi_pfx_unlock(b, unpub_key(a, id, e, st));
		if (wait)
			kvpi_rcu_read_unlock();
		if (st || (seen & priv) != priv)
			return true; /* done; or cached (or evicted) since the eviction pass */
		/* acquire: as in pub_private (lib/prefix/prefix_publish.c). */
		kvp_owner o = atomic_load_explicit(&b->owner, memory_order_acquire);
		struct kvpi_oshard *sh = kvpi_owners_shard(&p->owners, o);
		if (!wait && pthread_mutex_trylock(&sh->lock) != 0)
			return false;
		if (wait) {
			pthread_mutex_lock(&sh->lock);
			kvpi_rcu_read_lock();
		}
		/* acquire: the state as the owner's calls left it. */
		st = atomic_load_explicit(&b->state, memory_order_acquire);
		/* relaxed: after the acquire load of the state. */
		bool same =
		    st == seen && atomic_load_explicit(&b->owner, memory_order_relaxed) == o;
		if (same)
			/* release: as the owner's own stores of the word. */
			atomic_store_explicit(&b->state, unpub_key(a, id, e, st),
			                      memory_order_release);
		if (wait)
			kvpi_rcu_read_unlock();
		pthread_mutex_unlock(&sh->lock);
		if (same)
			return true;
	}
}

/* kvpi_pfx_index_each callback: unpublish_one without waiting; a busy
 * private block is kept for after the pass. */
static void unpublish(uint32_t id, void *arg)
{
	struct unpub_arg *a = arg;
	if (unpublish_one(a, id, false))
		return;
	if (a->n_busy == a->cap) {
		/* Not a hot path: a reset that meets many busy owners. */
		uint32_t *g = kvpi_sys_alloc(2 * (size_t)a->cap * sizeof(*g), 64);
		if (!g) {
			a->more = true;
			return;
		}
		memcpy(g, a->busy, a->n_busy * sizeof(*g));
		if (a->busy != a->first)
			kvpi_sys_free(a->busy);
		a->busy = g;
		a->cap *= 2;
	}
	a->busy[a->n_busy++] = id;
}

size_t kvp_prefix_reset(kvp_pool *p)
{
	if (!p || !p->prefix)
		return 0;
	struct kvpi_prefix *pf = p->prefix;
	struct kvpi_tslot *s = kvpi_tslot_get(p);
	uint32_t ids[64];
	size_t dropped = 0;
	/* An allocation that claimed cached blocks before our scan and gives
	 * them back after it would bring back keys we must drop: it sees this
	 * (kvpi_pfx_unclaim) and evicts them instead.  seq_cst add and fence:
	 * either it sees the add, or our scan below sees its blocks listed. */
	atomic_fetch_add_explicit(&pf->resets, KVPI_PFX_RESET_START, memory_order_seq_cst);
	atomic_thread_fence(memory_order_seq_cst);
	for (uint32_t si = 0; si < p->n_streams; si++) {
		for (;;) {
			kvpi_rcu_read_lock();
			uint32_t e = kvpi_pfx_evict_free(p, s, (int)si, ids, 64, false);
			kvpi_rcu_read_unlock();
			dropped += e;
			if (e < 64)
				break;
		}
	}
	struct unpub_arg a = {.p = p, .cap = UNPUB_BUSY};
	a.busy = a.first;
	do {
		a.n_busy = 0;
		a.more = false;
		kvpi_rcu_read_lock();
		kvpi_pfx_index_each(pf, unpublish, &a);
		kvpi_rcu_read_unlock();
		for (uint32_t k = 0; k < a.n_busy; k++)
			(void)unpublish_one(&a, a.busy[k], true);
	} while (a.more); /* only when memory ran out */
	if (a.busy != a.first)
		kvpi_sys_free(a.busy);
	dropped += a.n;
	/* release: an allocation that reads this (acquire) before it claims
	 * sees our scan done. */
	atomic_fetch_sub_explicit(&pf->resets, 1, memory_order_release);
	if (dropped)
		kvpi_history_tick(p, s);
	kvpi_tslot_put(p, s);
	return dropped;
}
