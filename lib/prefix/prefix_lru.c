/*
 * lib/prefix/prefix_lru.c - cached blocks, least recently cached first.
 *
 * Per stream, KVP_PFX_LRU_SHARDS doubly linked lists through the blocks'
 * side entries, each under its own mutex; a block lives in shard
 * (id % KVP_PFX_LRU_SHARDS).  Caching a block stamps it with the next value
 * of one global sequence counter while holding its shard's mutex and
 * appends it, so every list is in sequence order, and each shard publishes
 * the sequence number of its head (head_seq).
 *
 * Eviction scans the shards' head_seq, locks the shard with the smallest,
 * and takes the first block of that list that is still cached (CAS
 * CACHED -> EVICTING), provided its sequence number is not above the
 * second smallest head seen; otherwise it scans again (another thread took
 * a block meanwhile, so the retry is progress somewhere).
 *
 * What holds (documented in kvpool/prefix.h's terms):
 *   - within a shard, blocks are evicted strictly in caching order;
 *   - an eviction during which no block is cached takes the least recently
 *     cached block of the whole stream at the moment it takes it (heads
 *     only move to later blocks while nothing is cached, so the smallest
 *     head seen stays the smallest); in particular eviction is exact LRU
 *     with one thread, and when many threads only evict;
 *   - a block cached while an eviction scans may be ordered either way
 *     against the block that eviction takes.
 */
#include <sched.h>

#include "lib/base/spin.h"
#include "lib/prefix/prefix_internal.h"

void kvpi_pfx_lru_init(struct kvp_prefix *pf)
{
	for (int si = 0; si < 2; si++)
		for (uint32_t i = 0; i < KVP_PFX_LRU_SHARDS; i++) {
			struct kvp_plru *l = &pf->lru[si][i];
			pthread_mutex_init(&l->lock, NULL);
			l->head = l->tail = KVP_NO_ID;
			atomic_init(&l->head_seq, UINT64_MAX);
			atomic_init(&l->n, 0);
		}
}

void kvpi_pfx_lru_destroy(struct kvp_prefix *pf)
{
	for (int si = 0; si < 2; si++)
		for (uint32_t i = 0; i < KVP_PFX_LRU_SHARDS; i++)
			pthread_mutex_destroy(&pf->lru[si][i].lock);
}

static struct kvp_plru *shard_of(struct kvp_prefix *pf, int si, uint32_t id)
{
	return &pf->lru[si][id % KVP_PFX_LRU_SHARDS];
}

/* relaxed stores: head_seq and n are hints for scans, kept exact under the
 * shard mutex; nothing else is published through them. */
static void set_head(struct kvp_prefix *pf, struct kvp_plru *l, uint32_t id)
{
	l->head = id;
	atomic_store_explicit(&l->head_seq,
	                      id == KVP_NO_ID ? UINT64_MAX : kvpi_pfx_side(pf, id)->lru_seq,
	                      memory_order_relaxed);
}

void kvpi_pfx_lru_insert(struct kvp_prefix *pf, int si, uint32_t id)
{
	struct kvp_plru *l = shard_of(pf, si, id);
	struct kvp_pside *e = kvpi_pfx_side(pf, id);
	pthread_mutex_lock(&l->lock);
	/* relaxed: a number taken under the shard mutex, so each list is sorted. */
	e->lru_seq = atomic_fetch_add_explicit(&pf->seq, 1, memory_order_relaxed);
	e->lru_next = KVP_NO_ID;
	e->lru_prev = l->tail;
	if (l->tail == KVP_NO_ID)
		set_head(pf, l, id);
	else
		kvpi_pfx_side(pf, l->tail)->lru_next = id;
	l->tail = id;
	atomic_store_explicit(&l->n, atomic_load_explicit(&l->n, memory_order_relaxed) + 1,
	                      memory_order_relaxed);
	pthread_mutex_unlock(&l->lock);
}

/* Shard mutex held. */
static void unlink_locked(struct kvp_prefix *pf, struct kvp_plru *l, uint32_t id)
{
	struct kvp_pside *e = kvpi_pfx_side(pf, id);
	if (e->lru_prev == KVP_NO_ID)
		set_head(pf, l, e->lru_next);
	else
		kvpi_pfx_side(pf, e->lru_prev)->lru_next = e->lru_next;
	if (e->lru_next == KVP_NO_ID)
		l->tail = e->lru_prev;
	else
		kvpi_pfx_side(pf, e->lru_next)->lru_prev = e->lru_prev;
	e->lru_prev = e->lru_next = KVP_NO_ID;
	atomic_store_explicit(&l->n, atomic_load_explicit(&l->n, memory_order_relaxed) - 1,
	                      memory_order_relaxed);
}

void kvpi_pfx_lru_unlink(struct kvp_prefix *pf, int si, uint32_t id)
{
	struct kvp_plru *l = shard_of(pf, si, id);
	pthread_mutex_lock(&l->lock);
	unlink_locked(pf, l, id);
	pthread_mutex_unlock(&l->lock);
}

uint64_t kvpi_pfx_n_cached(struct kvp_prefix *pf, int si)
{
	uint64_t n = 0;
	for (uint32_t i = 0; i < KVP_PFX_LRU_SHARDS; i++)
		/* relaxed: a count, exact when quiescent. */
		n += atomic_load_explicit(&pf->lru[si][i].n, memory_order_relaxed);
	return n;
}

bool kvpi_pfx_leave_cached(struct kvp_block *b, uint64_t st, uint64_t nst)
{
	/* acq_rel: the winner owns the block (evictor) or its contents
	 * (match) from here on, ordered after the writes of its last holders
	 * (their release store of CACHED). */
	return atomic_compare_exchange_strong_explicit(&b->state, &st, nst, memory_order_acq_rel,
	                                               memory_order_acquire);
}

/* Take the least recently cached block of stream @si off its list, its state
 * now EVICTING; KVP_NO_ID when no block is cached. */
static uint32_t evict_one(struct kvp_pool *p, int si)
{
	struct kvp_prefix *pf = p->prefix;
	struct kvpi_spin spin = {0};
	for (;;) {
		uint64_t m1 = UINT64_MAX, m2 = UINT64_MAX;
		int best = -1;
		for (uint32_t i = 0; i < KVP_PFX_LRU_SHARDS; i++) {
			/* relaxed: a hint, checked under the shard mutex below. */
			uint64_t v =
			    atomic_load_explicit(&pf->lru[si][i].head_seq, memory_order_relaxed);
			if (v < m1) {
				m2 = m1;
				m1 = v;
				best = (int)i;
			} else if (v < m2) {
				m2 = v;
			}
		}
		if (best < 0)
			return KVP_NO_ID;
		struct kvp_plru *l = &pf->lru[si][best];
		pthread_mutex_lock(&l->lock);
		for (uint32_t id = l->head; id != KVP_NO_ID;) {
			struct kvp_pside *e = kvpi_pfx_side(pf, id);
			if (e->lru_seq > m2)
				break; /* another shard may now hold an older block */
			struct kvp_block *b = kvpi_bt_block(&p->bt, id);
			/* acquire: see the state its last holder left. */
			uint64_t st = atomic_load_explicit(&b->state, memory_order_acquire);
			if ((st & KVP_ST_CACHED) &&
			    kvpi_pfx_leave_cached(b, st, (st & ~KVP_ST_CACHED) | KVP_ST_EVICTING)) {
				unlink_locked(pf, l, id);
				pthread_mutex_unlock(&l->lock);
				return id;
			}
			/* A match took it and will unlink it. */
			id = e->lru_next;
		}
		pthread_mutex_unlock(&l->lock);
		kvpi_spin_wait(&spin);
	}
}

uint32_t kvpi_pfx_evict(struct kvp_pool *p, struct kvp_tslot *s, int si, uint32_t *ids, uint32_t n)
{
	struct kvp_prefix *pf = p->prefix;
	uint32_t got = 0;
	while (got < n) {
		uint32_t id = evict_one(p, si);
		if (id == KVP_NO_ID)
			break;
		struct kvp_block *b = kvpi_bt_block(&p->bt, id);
		struct kvp_pside *e = kvpi_pfx_side(pf, id);
		pthread_mutex_t *lk = kvpi_pfx_stripe(pf, id);
		/* Matchers validate the key under this mutex: after it, none can
		 * find the block by its old key. */
		pthread_mutex_lock(lk);
		kvpi_pfx_forget(pf, e);
		/* relaxed load: we own the block (EVICTING).  release store: a
		 * kvp_block_get (acquire) sees a whole word. */
		uint64_t st = atomic_load_explicit(&b->state, memory_order_relaxed);
		atomic_store_explicit(&b->state, st & ~(KVP_ST_EVICTING | KVP_ST_PUBLISHED),
		                      memory_order_release);
		pthread_mutex_unlock(lk);
		ids[got++] = id;
	}
	kvpi_ctr_add(s, KVP_C_EVICTIONS, got);
	return got;
}
