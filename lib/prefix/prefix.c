/*
 * lib/prefix/prefix.c - the public prefix-cache calls (kvpool/prefix.h), and the
 * prefix state's life cycle.  lib/prefix/prefix_internal.h has the design.
 *
 * Matching: each key is looked up in the index with no lock; the block it
 * names is then locked (one CAS on its state word, from a state that is
 * published, in use or cached, and of the right format) and checked (still
 * published under that very key).  An in-use block gains a hold; a cached
 * one becomes in use with a new generation, left on its LRU list (marked
 * stale).  An evictor's CAS CACHED -> EVICTING may beat the lock's CAS
 * (then the key is a miss).  The whole call holds the owner's shard mutex,
 * so the owner's hold array takes the matched blocks in order.
 * Publishing is in lib/prefix/prefix_publish.c.
 */
#include <string.h>

#include "lib/prefix/prefix_internal.h"
#include "lib/base/sysmem.h"

/* Keys a match looks up before it takes their holds. */
#define MATCH_CHUNK 16u

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

/* A state a match may lock: published, in use or cached (not being
 * evicted), of format *@arg. */
static bool match_ok(uint64_t st, const void *arg)
{
	return (st & KVPI_ST_PUBLISHED) && (st & (KVPI_ST_IN_USE | KVPI_ST_CACHED)) &&
	       !(st & KVPI_ST_EVICTING) && kvpi_st_format(st) == *(const uint32_t *)arg;
}

/*
 * Take @owner's hold on block @id, which the index gave for (@tag, @key),
 * if it is still published under that key in @format.  Returns false for
 * a miss.  Owner shard mutex held.
 */
static bool take_hold(struct kvp_pool *p, struct kvpi_orec *r, uint32_t id, uint32_t tag,
                      const kvp_hash *key, uint32_t format, kvp_owner owner, kvp_ref *out,
                      int64_t *revived)
{
	struct kvpi_prefix *pf = p->prefix;
	struct kvpi_block *b = kvpi_bt_block(&p->bt, id);
	struct kvpi_pside *e = kvpi_pfx_side(pf, id);
	uint64_t seen;

	/* The one CAS that settles a race with an evictor or a release. */
	uint64_t st = kvpi_pfx_lock(b, match_ok, &format, &seen);
	if (!st)
		return false;
	/* Evicted and published again meanwhile, or another key of the
	 * same 64-bit hash: a miss. */
	if (!e->pub || e->pub_stream != tag || e->pub_key.lo != key->lo ||
	    e->pub_key.hi != key->hi) {
		kvpi_pfx_unlock(b, st);
		return false;
	}
	if (st & KVPI_ST_IN_USE) {
		/* relaxed (holders, owner_xor, owner): under the lock. */
		uint32_t h = atomic_load_explicit(&e->holders, memory_order_relaxed);
		bool mine = h == 1 ? atomic_load_explicit(&b->owner, memory_order_relaxed) == owner
		                   : kvpi_pfx_ofind_pos(pf, r, id) >= 0;
		if (!mine) {
			kvpi_pfx_bump(e);
			atomic_store_explicit(&e->holders, h + 1, memory_order_relaxed);
			atomic_store_explicit(
			    &e->owner_xor,
			    atomic_load_explicit(&e->owner_xor, memory_order_relaxed) ^ owner,
			    memory_order_relaxed);
			kvpi_pfx_oappend(pf, r, id);
		}
		kvpi_pfx_unlock(b, st);
		*out = KVP_MAKE_REF(id, kvpi_st_gen(st));
		return true;
	}
	/* Cached: revive it with a new generation, left where it is on its
	 * LRU list (an evictor that meets it moves or drops it). */
	uint32_t gen = kvpi_st_gen(st) + 1;
	if (gen == 0)
		gen = 1;
	kvpi_pfx_bump(e);
	/* relaxed: under the lock. */
	atomic_store_explicit(&e->holders, 1, memory_order_relaxed);
	atomic_store_explicit(&e->owner_xor, owner, memory_order_relaxed);
	atomic_store_explicit(&b->owner, owner, memory_order_relaxed);
	int si = kvpi_pfx_si(p, st);
	if (kvpi_pfx_flag(&e->listed))
		kvpi_pfx_set_flag(&e->stale, true);
	revived[si]++;
	kvpi_pfx_oappend(pf, r, id);
	kvpi_pfx_unlock(b, kvpi_st_make(gen, p->block_size,
	                                KVPI_ST_IN_USE | KVPI_ST_EVER | KVPI_ST_PUBLISHED,
	                                kvpi_st_stream(st), format));
	/* The cached count drops by *@revived when the call ends, after the
	 * blocks stopped being available: the count never runs low. */
	*out = KVP_MAKE_REF(id, gen);
	return true;
}

int kvp_prefix_match(kvp_pool *p, kvp_stream stream, kvp_format format, const kvp_hash *keys,
                     size_t n_keys, kvp_owner owner, kvp_ref *refs, size_t refs_cap,
                     size_t *n_matched)
{
	if (!n_matched)
		return KVP_EINVAL;
	*n_matched = 0;
	if (!p || !p->prefix || (!keys && n_keys) || (!refs && refs_cap) ||
	    (unsigned)format >= KVP_N_FORMATS)
		return KVP_EINVAL;
	int si = kvpi_stream_index(p, stream);
	if (si < 0)
		return KVP_EINVAL;
	if (refs_cap < n_keys) {
		*n_matched = n_keys;
		return KVP_ERANGE;
	}
	if (n_keys == 0)
		return KVP_OK;
	if (n_keys > UINT32_MAX)
		return KVP_ENOMEM;

	struct kvpi_prefix *pf = p->prefix;
	struct kvpi_tslot *s = kvpi_tslot_get(p);
	struct kvpi_oshard *sh = kvpi_owners_shard(&p->owners, owner);
	uint32_t tag = kvpi_stream_tag(p, si);
	int64_t revived[2] = {0, 0};
	size_t i = 0;

	kvpi_rcu_read_lock();
	pthread_mutex_lock(&sh->lock);
	bool made;
	struct kvpi_orec *r = kvpi_pfx_oget(p, s, sh, owner, &made);
	if (!r || kvpi_pfx_oreserve(p, s, r, (uint32_t)n_keys) != 0) {
		if (r && made)
			kvpi_pfx_oremove(p, s, sh, r);
		pthread_mutex_unlock(&sh->lock);
		kvpi_rcu_read_unlock();
		kvpi_tslot_put(p, s);
		return KVP_ENOMEM;
	}
	/* In chunks: the chunk's home slots are prefetched, then its
	 * lookups run (the blocks' lines are fetched meanwhile), then the
	 * holds in order, up to the first miss.  The prefetch pass puts
	 * the chunk's slot misses in flight together: with it, the
	 * lifecycle benchmark's prefix loop at one thread spent 8.0-9.2 ms
	 * of a run in kvp_prefix_match against 10.0-12.5 without (three
	 * alternating runs each, the benchmark built with a timer around
	 * each call of its loop). */
	while (i < n_keys) {
		uint32_t ids[MATCH_CHUNK];
		size_t c = n_keys - i < MATCH_CHUNK ? n_keys - i : MATCH_CHUNK, found = 0, j = 0;
		for (size_t k = 0; k < c; k++)
			kvpi_pfx_index_prefetch_key(pf, tag, &keys[i + k]);
		for (; found < c; found++) {
			ids[found] = kvpi_pfx_index_lookup(pf, tag, &keys[i + found]);
			if (ids[found] == KVPI_NO_ID)
				break;
			kvpi_pfx_prefetch(p, ids[found]);
		}
		while (j < found && take_hold(p, r, ids[j], tag, &keys[i + j], (uint32_t)format,
		                              owner, &refs[i + j], revived))
			j++;
		i += j;
		if (j < c)
			break;
	}
	if (kvpi_orec_count(r) == 0 && made)
		kvpi_pfx_oremove(p, s, sh, r);
	pthread_mutex_unlock(&sh->lock);
	/* One change of the shared cached count a call, not one a revived
	 * block: with several threads matching, a per-block atomic add moved
	 * the counter's line between the cores for every hit.  Meanwhile the
	 * count is above the blocks cached and unheld, which the exhaustion
	 * decision allows (an allocation that counts them looks again). */
	kvpi_pfx_count_one(pf, 0, -revived[0]);
	kvpi_pfx_count_one(pf, 1, -revived[1]);
	kvpi_ctr_add(s, KVPI_C_PQUERIES, n_keys);
	kvpi_ctr_add(s, KVPI_C_PHITS, i);
	uint64_t nrev = (uint64_t)(revived[0] + revived[1]);
	kvpi_ctr_add(s, KVPI_C_ALLOCS, nrev);
	kvpi_ctr_add(s, KVPI_C_REUSED, nrev);
	if (nrev)
		kvpi_account_in_use(p, s, (int64_t)nrev);
	kvpi_rcu_read_unlock();
	if (i)
		kvpi_history_tick(p, s);
	kvpi_tslot_put(p, s);
	*n_matched = i;
	return KVP_OK;
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

struct unpub_arg {
	struct kvp_pool *p;
	size_t n;
};

/* A state reset may unpublish: published and held. */
static bool unpub_ok(uint64_t st, const void *arg)
{
	(void)arg;
	return (st & KVPI_ST_PUBLISHED) && (st & KVPI_ST_IN_USE);
}

/* Unpublish block @id if it is held (locked here). */
static void unpublish(uint32_t id, void *arg)
{
	struct unpub_arg *a = arg;
	struct kvpi_prefix *pf = a->p->prefix;
	struct kvpi_block *b = kvpi_bt_block(&a->p->bt, id);
	struct kvpi_pside *e = kvpi_pfx_side(pf, id);
	uint64_t seen;
	uint64_t st = kvpi_pfx_lock(b, unpub_ok, NULL, &seen);
	if (!st)
		return; /* cached (or evicted) since the reset's eviction pass */
	if (e->pub) {
		kvpi_pfx_forget_many(pf, &id, 1);
		st &= ~KVPI_ST_PUBLISHED;
		a->n++;
	}
	kvpi_pfx_unlock(b, st);
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
	struct unpub_arg a = {p, 0};
	kvpi_rcu_read_lock();
	kvpi_pfx_index_each(pf, unpublish, &a);
	kvpi_rcu_read_unlock();
	dropped += a.n;
	/* release: an allocation that reads this (acquire) before it claims
	 * sees our scan done. */
	atomic_fetch_sub_explicit(&pf->resets, 1, memory_order_release);
	if (dropped)
		kvpi_history_tick(p, s);
	kvpi_tslot_put(p, s);
	return dropped;
}
