/*
 * lib/prefix/prefix_alloc.c - kvp_allocate and kvp_alloc_block in prefix mode.
 *
 * Owns: taking blocks for a request and handing them out fresh.  A request
 * takes uncached free blocks first, then evicts cached ones, then grows
 * (kvpi_pfx_get_blocks); it is all or nothing, and nothing is evicted
 * unless the request is met, but for blocks a failed request finds it
 * must not cache again (a reset ran, or a publish took the key over:
 * kvpi_pfx_unclaim).  The pool's own growth is off in prefix mode.
 * Owns also the exhaustion rule (below): a request fails only on a count of
 * one instant that falls short.
 *
 * May call: the pool's free stacks and growth (lib/pool), the LRU's claim,
 * commit and unclaim (lib/prefix/prefix_lru.c) and the prefix owner table
 * (lib/prefix/prefix_owner.c).  Lock order: lib/prefix/prefix_internal.h.
 */
#include <time.h>

#include "lib/pool/block_state.h"
#include "lib/prefix/prefix_internal.h"

/* Hand out block @id, held exclusively (popped, evicted or grown); returns
 * its new generation. */
static uint32_t stamp(struct kvp_pool *p, uint32_t id, uint32_t used, uint64_t flags,
                      kvp_owner owner, kvp_format format, bool *reused)
{
	struct kvpi_block *b = kvpi_bt_block(&p->bt, id);
	struct kvpi_pside *e = kvpi_pfx_side(p->prefix, id);
	/* relaxed: we hold the block exclusively. */
	uint64_t old = atomic_load_explicit(&b->state, memory_order_relaxed);
	uint32_t gen = kvpi_next_gen(old);
	*reused = (old & KVPI_ST_EVER) != 0;
	/* A fresh hand-out: the rows of earlier ones are not this holder's
	 * (kvpool/storage.h).  release: kvpi_block_get_epoch reads it with no
	 * lock; a reader that sees it (then an acquire fence) sees the block
	 * left its previous hand-out, so its state re-check fails. */
	atomic_store_explicit(&e->epoch, gen, memory_order_release);
	/* relaxed: published by the release store of the state below. */
	atomic_store_explicit(&e->holders, 1, memory_order_relaxed);
	atomic_store_explicit(&e->owner_xor, owner, memory_order_relaxed);
	kvpi_stamp_publish(b, owner,
	                   kvpi_st_make(gen, used, KVPI_ST_IN_USE | KVPI_ST_EVER | flags,
	                                kvpi_st_stream(old), (uint32_t)format));
	return gen;
}

/*
 * Exhaustion.  kvpool/pool.h: KVP_EEXHAUSTED means that at some instant
 * during the call fewer blocks were free (or cached and unheld) than the
 * request needed.  The rule here: a request fails only on a count of one
 * instant (available_now) that is below its need, read after it gave back
 * everything it took.  Whatever another request holds for the moment (a
 * partial reservation, claimed cached blocks) is in that count, so a
 * request bound to fail never makes one that fits fail: the latter sees
 * the shortfall is held, not gone, and tries again.  docs/PREFIX.md has
 * the argument.
 *
 * The counts: the free stack's avail (exact), the cached count (one
 * counter, never below the blocks cached and unheld: kvpi_pfx_count_one),
 * and prefix.pend, the blocks reserved by allocations that may still give
 * them back.  A claimed block stays in the cached count until committed.
 */
#define PEND_GIVEBACK ((uint64_t)1 << 32)

/* Free, cached and unheld, or held by an undecided allocation, at one
 * instant: see "Exhaustion" above. */
static uint64_t available_now(struct kvp_pool *p, int si)
{
	struct kvpi_prefix *pf = p->prefix;
	struct kvpi_spin spin = {0};
	for (;;) {
		/* acquire (all): pair with the release of each update, so a
		 * block a load sees gone from one count is seen in the next. */
		uint64_t w1 = atomic_load_explicit(&pf->pend.n[si], memory_order_acquire);
		uint64_t c = kvpi_pfx_n_cached(pf, si);
		int64_t a = atomic_load_explicit(&p->fs[si].avail, memory_order_acquire);
		uint64_t w2 = atomic_load_explicit(&pf->pend.n[si], memory_order_acquire);
		/* A give-back between the loads could hide its blocks from
		 * both avail and pend: read again. */
		if ((w1 >> 32) == (w2 >> 32))
			return c + (a > 0 ? (uint64_t)a : 0) + (uint32_t)w2;
		kvpi_spin_wait(&spin);
	}
}

/* One try at the shared blocks: KVP_OK with @k blocks, or a failure after
 * giving back all. */
static int get_blocks_shared(struct kvp_pool *p, struct kvpi_tslot *s, int si, kvpi_u32_alias *ids,
                             uint32_t k)
{
	struct kvpi_prefix *pf = p->prefix;
	struct kvpi_freestack *fs = &p->fs[si];
	_Atomic int64_t *pend = &pf->pend.n[si];
	int rc = KVP_OK;
	/*
	 * The caller took its own magazine's blocks (take_own), so the
	 * uncached free blocks this thread may take are on the stream's
	 * global stack (all of them once the magazines are drained:
	 * kvpi_pfx_get_blocks).  Whatever
	 * uncached blocks there
	 * are, then cached ones (evicted), then growth: all or nothing, and
	 * nothing evicted unless the request is met (but for what
	 * kvpi_pfx_unclaim must evict).  The cached blocks are
	 * claimed first and evicted only once the request is sure to be met:
	 * if matches took some of those counted meanwhile, or growth fails,
	 * the claimed ones go back to the cache as they were.
	 */
	uint32_t r = kvpi_fs_reserve(fs, k, k), e = 0;
	if (r == k) {
		kvpi_fs_pop_reserved(fs, &p->bt, &p->n_ids, ids, r);
		return KVP_OK;
	}
	/* A partial reservation we may give back: in pend before it leaves
	 * avail.  acq_rel, then a release fence before the reserve's CAS: a
	 * reader that sees avail lowered (acquire) sees pend raised. */
	atomic_fetch_add_explicit(pend, k, memory_order_acq_rel);
	atomic_thread_fence(memory_order_release);
	r = kvpi_fs_reserve(fs, 1, k);
	if (r < k) /* relaxed: lowers only what no block backs */
		atomic_fetch_sub_explicit(pend, k - r, memory_order_relaxed);
	uint64_t c = kvpi_pfx_n_cached(pf, si);
	if ((uint64_t)r + c < k) {
		uint64_t shortfall = k - r - c;
		/* relaxed: a pre-check; growth checks again under grow_lock. */
		uint64_t managed = atomic_load_explicit(&p->managed, memory_order_relaxed);
		if (!pf->grow || managed + shortfall > p->max_blocks)
			rc = KVP_EEXHAUSTED; /* nothing evicted */
	}
	uint64_t resets0 = 0;
	if (rc == KVP_OK) {
		/* acquire: a reset that ended before this load evicted, before
		 * the claim below, every block it could see (kvpi_pfx_unclaim). */
		resets0 = atomic_load_explicit(&pf->resets, memory_order_acquire);
		e = kvpi_pfx_claim(p, s, si, ids + r, k - r);
	}
	uint32_t rest = k - r - e;
	if (rc == KVP_OK && rest && !pf->grow) {
		rc = KVP_EEXHAUSTED;
	} else if (rc == KVP_OK && rest &&
	           atomic_load_explicit(&fs->avail, memory_order_relaxed) > 0) {
		/* Blocks came to the free stack since our reserve: frees, or
		 * cached blocks a shrink, a reset or an eviction ahead moved
		 * there after we read the stack and before we read the
		 * cached count.  Give back and try again (get_blocks_retry)
		 * rather than grow past them.  relaxed: a hint; the retry's
		 * decision reads the counts of one instant. */
		rc = KVP_EEXHAUSTED;
	} else if (rc == KVP_OK && rest) {
		/* As the plain pool: no read-side section across the wait. */
		kvpi_rcu_read_unlock();
		pthread_mutex_lock(&p->grow_lock);
		/* relaxed: managed changes only under grow_lock. */
		uint64_t managed = atomic_load_explicit(&p->managed, memory_order_relaxed);
		if (managed + rest > p->max_blocks) {
			rc = KVP_EEXHAUSTED;
		} else {
			rc = kvpi_grow_locked(p, si, rest, ids + r + e);
			if (rc == KVP_OK) {
				kvpi_ctr_add(s, KVPI_C_GROWN, rest);
				kvpi_history_record(p);
			}
		}
		pthread_mutex_unlock(&p->grow_lock);
		kvpi_rcu_read_lock();
	}
	if (rc != KVP_OK) {
		/* Lost a race for the cached blocks, or no room to grow: give
		 * back what we took, the claimed blocks to the cache.  avail
		 * first, then pend with a give-back counted (release: a reader
		 * that sees it sees avail raised). */
		if (r)
			kvpi_fs_unreserve(fs, r);
		atomic_fetch_add_explicit(pend, PEND_GIVEBACK - r, memory_order_release);
		kvpi_pfx_unclaim(p, s, si, ids + r, e, resets0);
		return rc;
	}
	kvpi_pfx_commit(p, s, si, ids + r, e);
	if (r)
		kvpi_fs_pop_reserved(fs, &p->bt, &p->n_ids, ids, r);
	/* relaxed: the blocks are ours now, a drop no reader must see first */
	atomic_fetch_sub_explicit(pend, r, memory_order_relaxed);
	return KVP_OK;
}

/*
 * Take up to @k of the calling thread's own cached free blocks of @si (its
 * magazine) into @ids, newest first; returns how many.  The blocks go
 * straight to the request: pushing the magazine to the global stack and
 * popping it back (as this did before) wrote every block's stack link
 * twice and the stack's head once more a request, and left what the
 * request did not need on the stack for other threads: taking them here
 * took kvpool's CPU a block on the lifecycle benchmark's prefix loop at two
 * threads from 119.9 to 104.7 and from 112.6 to 96.3 ns in two
 * before/after runs, the same at one (docs/DESIGN.md, "Prefix cache").  They are counted in pend
 * first, as a partial reservation is: an allocation that drains the
 * magazines meanwhile finds ours empty and must see them held, not gone.
 * A try that fails gives them back to the global stack (get_blocks_once).
 */
static uint32_t take_own(struct kvp_pool *p, struct kvpi_tslot *s, int si, kvpi_u32_alias *ids,
                         uint32_t k)
{
	if (!kvpi_use_magazine(p, s))
		return 0;
	struct kvpi_mag *m = &s->mag[si];
	if (!kvpi_mag_enter(p, m, si))
		return 0;
	uint32_t cnt = kvpi_mag_count(m), t = cnt < k ? cnt : k;
	if (t) {
		/* acq_rel, as get_blocks_shared's partial reservation:
		 * counted before the blocks leave the magazine. */
		atomic_fetch_add_explicit(&p->prefix->pend.n[si], t, memory_order_acq_rel);
		kvpi_mag_take_top(m, cnt, ids, t);
	}
	kvpi_mag_leave(m);
	return t;
}

/* End take_own's count of @t blocks: the request got them (@kept), or
 * they go to the global stack, as get_blocks_shared gives back a partial
 * reservation (avail first, then pend with a give-back counted). */
static void end_own(struct kvp_pool *p, int si, const kvpi_u32_alias *ids, uint32_t t, bool kept)
{
	_Atomic int64_t *pend = &p->prefix->pend.n[si];
	if (t == 0)
		return;
	if (kept) {
		/* relaxed: the blocks are ours now, as in get_blocks_shared. */
		atomic_fetch_sub_explicit(pend, t, memory_order_relaxed);
		return;
	}
	kvpi_fs_push_ids(&p->fs[si], &p->bt, (const uint32_t *)ids, t);
	/* release: a reader that sees the give-back sees avail raised. */
	atomic_fetch_add_explicit(pend, PEND_GIVEBACK - t, memory_order_release);
}

/*
 * One try: the thread's own magazine's blocks (take_own), then the rest
 * from the shared ones (get_blocks_shared).  A try that fails gives back
 * everything, its own blocks to the global stack: a request that held them
 * across its retries could wait forever for another that holds its own
 * (each sees the other's in pend, neither gives up).  A try that succeeds,
 * the common case, never moves them through the stack.
 */
static int get_blocks_once(struct kvp_pool *p, struct kvpi_tslot *s, int si, kvpi_u32_alias *ids,
                           uint32_t k)
{
	uint32_t own = take_own(p, s, si, ids, k);
	int rc = own < k ? get_blocks_shared(p, s, si, ids + own, k - own) : KVP_OK;
	end_own(p, si, ids, own, rc == KVP_OK);
	return rc;
}

/* The exhaustion loop: get_blocks_once until it succeeds, or until the
 * blocks it lacked are gone at one instant (see "Exhaustion" above). */
static int get_blocks_retry(struct kvp_pool *p, struct kvpi_tslot *s, int si, kvpi_u32_alias *ids,
                            uint32_t k)
{
	struct kvpi_spin spin = {0};
	for (;;) {
		int rc = get_blocks_once(p, s, si, ids, k);
		if (rc != KVP_EEXHAUSTED)
			return rc;
		/* Exhausted only if, at one instant after our give-back, the
		 * free, cached and undecided blocks and the room to grow fall
		 * short.  Otherwise another request held what we lacked:
		 * try again once it had time to decide. */
		uint64_t room = 0;
		if (p->prefix->grow) {
			/* relaxed: as the pre-check in get_blocks_shared */
			uint64_t managed = atomic_load_explicit(&p->managed, memory_order_relaxed);
			room = managed < p->max_blocks ? p->max_blocks - managed : 0;
		}
		if (available_now(p, si) + room < k)
			return KVP_EEXHAUSTED;
		kvpi_spin_wait(&spin);
	}
}

/* Whether this evicting allocation should drain the idle threads'
 * magazines first: at most once per KVPI_PFX_IDLE_DRAIN_NS per stream. */
static bool idle_drain_due(struct kvpi_prefix *pf, int si)
{
	struct timespec ts;
#ifdef CLOCK_MONOTONIC_COARSE
	if (clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) != 0)
		return false;
#else
	if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
		return false;
#endif
	uint64_t now = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	/* relaxed (both): a rate limit; the CAS picks one drainer per
	 * period, and the drain orders itself (starving, heavy barrier). */
	uint64_t last = atomic_load_explicit(&pf->idle_drain[si], memory_order_relaxed);
	return now - last >= KVPI_PFX_IDLE_DRAIN_NS &&
	       atomic_compare_exchange_strong_explicit(&pf->idle_drain[si], &last, now,
	                                               memory_order_relaxed, memory_order_relaxed);
}

/*
 * Evicting ahead.  In a warm cache every allocation evicts, and a decode
 * step's one-block allocation paid a whole eviction for one block: the
 * pend and cached counts, an LRU shard mutex, an index shard mutex and the
 * claim's CAS, several of them on lines every evicting thread writes.  So
 * an allocation of k < KVPI_PFX_EVICT_AHEAD blocks that had to go past
 * its thread's magazine and the global stack (kvpi_pfx_get_blocks' slow
 * path), and after which the stack is empty and more than
 * KVPI_PFX_EVICT_AHEAD_CACHED blocks of the stream are cached, evicts
 * KVPI_PFX_EVICT_AHEAD - k more into its thread's magazine
 * (kvpi_pfx_evict_free; the global stack when the pool has no
 * magazines, the stream is starving, or they do not fit).  The thread's
 * next small allocations take them from its magazine, with no eviction
 * and no line another thread writes.  They are the least recently cached
 * blocks, the ones the next evictions would have taken, evicted a few
 * allocations early: at most KVPI_PFX_EVICT_AHEAD - 1 per thread at a
 * time, a small share of a cache that large.  A smaller cache evicts
 * exactly what it needs.  The caller runs it once it holds no lock (the
 * owner's shard mutex released), so no owner of that shard waits for it.
 *
 * Into the magazine rather than onto the global stack, and 64 rather than
 * 16: on the lifecycle benchmark with a trace that shares no prefix (every
 * allocation evicts), kvpool's CPU time a block fell 14-15% at two and
 * eight threads in one before/after run and 8-9% in another, and 2-4% on
 * the conversation trace; 16 onto the stack had made the decode step
 * 19-39% cheaper than one eviction a block (docs/BENCHMARKS.md).
 * Exhaustion is unchanged: blocks in a magazine are found by the drain
 * that precedes any KVP_EEXHAUSTED, as freed blocks there are
 * (kvpi_pfx_get_blocks).
 *
 * With grow_on_exhaustion, an allocation that read the stack before an
 * eviction ahead pushed to it and the cached count after misses those
 * blocks; get_blocks_once looks at the stack again before it grows and
 * tries again if blocks came there.  A push after that look, or blocks
 * in a magazine, may still make it grow by up to those blocks, as beside
 * a kvp_shrink or a kvp_prefix_reset that evicts (docs/PREFIX.md,
 * "Exhaustion").
 */
void kvpi_pfx_evict_ahead(struct kvp_pool *p, struct kvpi_tslot *s, int si, uint32_t k)
{
	uint32_t ids[KVPI_PFX_EVICT_AHEAD];
	if (k >= KVPI_PFX_EVICT_AHEAD)
		return;
	/* relaxed (both): a heuristic; the eviction orders itself. */
	if (atomic_load_explicit(&p->fs[si].avail, memory_order_relaxed) > 0 ||
	    kvpi_pfx_n_cached(p->prefix, si) <= p->prefix->ahead_cached)
		return;
	/* Claims and evictions touch the index: in a read-side section. */
	kvpi_rcu_read_lock();
	kvpi_pfx_evict_free(p, s, si, ids, KVPI_PFX_EVICT_AHEAD - k, true);
	kvpi_rcu_read_unlock();
}

/*
 * Uncached free blocks first.  The thread's own magazine and the global
 * stack come first, with no wait: that is all a request needs while the
 * cache has free room.  When they fall short, the request takes every block
 * of the thread's magazine (take_own), the idle threads' magazines go to the
 * global stack (those of threads
 * outside a call: at most once a millisecond per stream, since a drain is a
 * heavy barrier); get_blocks_once then takes every uncached block there
 * before it evicts.  Busy threads' magazines are not waited for before an
 * eviction: in a warm cache nearly every allocation evicts, one block at a
 * time while decoding, and a full drain before each made two threads
 * slower than one (docs/PREFIX.md).  They are before a failure: an
 * allocation reports KVP_EEXHAUSTED only after a try with the stream
 * starving and every magazine drained, when the exhaustion rule above
 * counts every free block.
 */
int kvpi_pfx_get_blocks(struct kvp_pool *p, struct kvpi_tslot *s, int si, kvpi_u32_alias *ids,
                        uint32_t k, bool *slow)
{
	*slow = false;
	if (kvpi_get_blocks_fast(p, s, si, ids, k))
		return KVP_OK;
	/* Claims and evictions touch the index: in a read-side section. */
	kvpi_rcu_read_lock();
	int rc;
	if (!p->thread_cache) {
		rc = get_blocks_retry(p, s, si, ids, k);
	} else {
		if (idle_drain_due(p->prefix, si)) {
			kvpi_starve_begin(p, si);
			kvpi_drain_idle_magazines(p, si);
			kvpi_starve_end(p, si);
		}
		rc = get_blocks_retry(p, s, si, ids, k);
		if (rc == KVP_EEXHAUSTED) {
			kvpi_starve_begin(p, si);
			kvpi_drain_magazines(p, si, 0);
			rc = get_blocks_retry(p, s, si, ids, k);
			kvpi_starve_end(p, si);
		}
	}
	kvpi_rcu_read_unlock();
	*slow = rc == KVP_OK;
	return rc;
}

int kvpi_pfx_allocate(struct kvp_pool *p, int si, uint32_t n_tokens, kvp_owner owner,
                      kvp_format format, kvp_ref *refs, uint32_t nb)
{
	struct kvpi_prefix *pf = p->prefix;
	struct kvpi_tslot *s = kvpi_tslot_get(p);
	struct kvpi_oshard *sh = kvpi_owners_shard(&p->owners, owner);
	kvpi_u32_alias *ids = (kvpi_u32_alias *)refs;
	uint32_t bs = p->block_size;

	/* The owner's shard mutex for the whole call, as in the plain pool. */
	pthread_mutex_lock(&sh->lock);
	bool made;
	struct kvpi_orec *r = kvpi_pfx_oget(p, s, sh, owner, &made);
	int rc = KVP_ENOMEM;
	bool slow = false;
	if (r && kvpi_pfx_oreserve(p, s, r, nb) == 0)
		rc = kvpi_pfx_get_blocks(p, s, si, ids, nb, &slow);
	if (rc != KVP_OK) {
		if (r && made)
			kvpi_pfx_oremove(p, s, sh, r);
		pthread_mutex_unlock(&sh->lock);
		return kvpi_fail_call(p, s, rc);
	}
	uint64_t reused = 0;
	uint32_t last_used = n_tokens - (nb - 1) * bs;
	for (uint32_t i = 0; i < nb; i++) {
		bool re;
		/* Private: the owner's alone until published (the shard
		 * mutex we hold orders every later writer of the word). */
		stamp(p, ids[i], i + 1 < nb ? bs : last_used, KVPI_ST_PRIVATE, owner, format, &re);
		reused += re;
		kvpi_pfx_oappend(pf, r, ids[i]);
	}
	/* Widen ids to refs from the end (refs[i] covers ids[2i], ids[2i+1]). */
	for (uint32_t i = nb; i-- > 0;) {
		uint32_t id = ids[i];
		/* relaxed: we stamped it, and hold its owner's shard mutex. */
		uint64_t st =
		    atomic_load_explicit(&kvpi_bt_block(&p->bt, id)->state, memory_order_relaxed);
		refs[i] = KVP_MAKE_REF(id, kvpi_st_gen(st));
	}
	pthread_mutex_unlock(&sh->lock);
	if (slow)
		kvpi_pfx_evict_ahead(p, s, si, nb);
	kvpi_ctr_add(s, KVPI_C_ALLOCS, nb);
	kvpi_ctr_add(s, KVPI_C_REUSED, reused);
	kvpi_ctr_add(s, KVPI_C_NOT_FULL, last_used < bs);
	kvpi_account_in_use(p, s, nb);
	kvpi_end_call(p, s, true);
	return KVP_OK;
}

int kvpi_pfx_alloc_block(struct kvp_pool *p, int si, kvp_format format, kvp_ref *out)
{
	struct kvpi_tslot *s = kvpi_tslot_get(p);
	uint32_t id;
	bool slow;
	int rc = kvpi_pfx_get_blocks(p, s, si, &id, 1, &slow);
	if (rc != KVP_OK)
		return kvpi_fail_call(p, s, rc);
	bool re;
	uint32_t gen = stamp(p, id, p->block_size, KVPI_ST_RAW, 0, format, &re);
	if (slow)
		kvpi_pfx_evict_ahead(p, s, si, 1);
	kvpi_ctr_add(s, KVPI_C_ALLOCS, 1);
	kvpi_ctr_add(s, KVPI_C_REUSED, re);
	kvpi_account_in_use(p, s, 1);
	kvpi_end_call(p, s, true);
	*out = KVP_MAKE_REF(id, gen);
	return KVP_OK;
}
