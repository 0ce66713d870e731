/*
 * lib/pool_internal.h - the pool object and the functions its .c files share.
 *
 * Locks, and the order they nest in (outer first):
 *   fallback_lock (only a thread without a slot) -> RCU read-side section
 *     -> owner shard lock -> [leave the section] grow_lock -> section again
 *     -> hist_lock
 *   registry lock -> RCU read-side section
 * kvp_rcu_synchronize is called only by kvp_shrink, holding no lock and
 * outside any read-side section, so no reader can be waiting for it.
 * Waits without a lock: on a magazine held by a drainer (whose holder takes
 * no lock while it holds it), and a drainer on BUSY magazines (whose owners
 * take no lock while BUSY).  Neither closes a cycle with the locks above.
 */
#ifndef KVPOOL_LIB_POOL_INTERNAL_H
#define KVPOOL_LIB_POOL_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <kvpool/pool.h>

#include "lib/blocktable.h"
#include "lib/freestack.h"
#include "lib/owner.h"
#include "lib/tslot.h"

struct kvp_retire_hook {
	kvp_retire_fn fn;
	void *arg;
};

struct kvp_pool {
	/* Read-mostly configuration. */
	uint32_t block_size;
	uint32_t max_blocks; /* resolved: never 0 */
	uint32_t thread_cache;
	uint32_t history_len;
	uint32_t n_streams; /* 2 with separate_kv, else 1 */
	bool separate_kv;
	bool grow;    /* false in prefix mode: that layer grows after eviction */
	uint64_t uid; /* unique for the process's life; names the pool in TLS */

	struct kvp_blocktable bt;
	_Atomic uint32_t n_ids; /* blocks ever created; release-published */

	struct kvp_freestack fs[2];
	/* seq_cst: see the magazine protocol in lib/tslot.h. */
	_Atomic uint32_t starving[2] __attribute__((aligned(64)));

	/* Blocks managed (created - retired), per stream and total; grow_lock. */
	_Atomic uint64_t managed_stream[2] __attribute__((aligned(64)));
	_Atomic uint64_t managed;

	/* In-use count published in batches by the threads, and its peak. */
	_Atomic int64_t in_use __attribute__((aligned(64)));
	_Atomic uint64_t peak;

	/* Per-thread slots: add-only lock-free list. */
	_Atomic(struct kvp_tslot *) slots __attribute__((aligned(64)));
	struct kvp_tslot *fallback;
	pthread_mutex_t fallback_lock;

	struct kvp_owners owners;

	pthread_mutex_t grow_lock; /* growth, shrink, retire hooks */
	struct kvp_retire_hook hooks[KVP_MAX_RETIRE_HOOKS];
	/* Retired ids, linked by free_next, for growth to reuse; grow_lock. */
	uint32_t retired_head;
	_Atomic uint32_t n_retired_ids; /* written under grow_lock, read anywhere */

	pthread_mutex_t hist_lock;
	kvp_stats *hist;
	size_t hist_head, hist_n;
	_Atomic int hist_started;

	struct kvp_pool *reg_next; /* registry of live pools (lib/tslot.c) */

	/* Prefix cache (lib/prefix_internal.h); NULL when the pool has it off. */
	struct kvp_prefix *prefix;
};

/* Stream index of @stream for this pool, or -1 if not valid for its layout. */
static inline int kvp_stream_index(const struct kvp_pool *p, kvp_stream stream)
{
	if (!p->separate_kv)
		return (unsigned)stream <= KVP_KV ? 0 : -1;
	return (stream == KVP_K || stream == KVP_V) ? (int)stream : -1;
}

/* Stream tag stored in a block of stream index @si. */
static inline uint32_t kvp_stream_tag(const struct kvp_pool *p, int si)
{
	return p->separate_kv ? (uint32_t)si : (uint32_t)KVP_KV;
}

/**
 * kvp_tslot_get - the calling thread's slot for @p
 *
 * The first thread-local entry is the common case (one pool per thread);
 * otherwise the slow path searches, takes a free slot from the pool's list,
 * or allocates one.  If memory runs out it returns the pool's shared
 * fallback slot with its mutex held (kvp_tslot_put releases it).  Never
 * NULL.
 */
static inline struct kvp_tslot *kvp_tslot_get(struct kvp_pool *p)
{
	struct kvp_tls_ent *e = kvp_tls_head;
	if (e && e->pool == p && e->uid == p->uid)
		return e->slot;
	return kvp_tslot_get_slow(p);
}

/** kvp_tslot_is_fallback - whether @s is the pool's shared fallback slot */
static inline bool kvp_tslot_is_fallback(const struct kvp_pool *p, const struct kvp_tslot *s)
{
	return s == p->fallback;
}

/** kvp_tslot_put - end of a call: releases the fallback slot's mutex if it was taken */
static inline void kvp_tslot_put(struct kvp_pool *p, struct kvp_tslot *s)
{
	if (s == p->fallback)
		kvp_tslot_put_fallback(p);
}

/* lib/pool_blocks.c: the block path. */
int kvp_get_blocks(struct kvp_pool *p, struct kvp_tslot *s, int si, uint32_t *ids, uint32_t k);
void kvp_put_blocks(struct kvp_pool *p, struct kvp_tslot *s, int si, const uint32_t *ids,
                    uint32_t k);
void kvp_put_chain(struct kvp_pool *p, struct kvp_tslot *s, int si, uint32_t first, uint32_t last,
                   uint32_t k);
/* Drain stream @si's magazines into its global stack: until @want blocks are
 * reservable (idle magazines first), or all of them (@want 0).  The caller
 * has raised starving[si] and is inside a read-side section. */
void kvp_drain_magazines(struct kvp_pool *p, int si, uint32_t want);
void kvp_account_in_use_slow(struct kvp_pool *p, struct kvp_tslot *s, int64_t d);

/*
 * kvp_account_in_use - note @d blocks more (or fewer) in use by this thread
 *
 * The common case stays thread-local: a small positive delta that does not
 * raise the thread's estimate above the pool's peak.  See the slow path for
 * the rules that keep the peak honest.
 */
static inline void kvp_account_in_use(struct kvp_pool *p, struct kvp_tslot *s, int64_t d)
{
	int64_t nd = s->delta_in_use + d;
	if (nd >= 0 && nd < (int64_t)KVP_PEAK_BATCH && !kvp_tslot_is_fallback(p, s)) {
		/* relaxed: statistics; the slow path explains the estimate. */
		int64_t est = atomic_load_explicit(&p->in_use, memory_order_relaxed) + nd;
		if (d <= 0 ||
		    est <= (int64_t)atomic_load_explicit(&p->peak, memory_order_relaxed)) {
			s->delta_in_use = nd;
			return;
		}
	}
	kvp_account_in_use_slow(p, s, d);
}

/* lib/pool_resize.c: growth (grow_lock held, outside read-side sections). */
int kvp_grow_locked(struct kvp_pool *p, int si, uint32_t n, uint32_t *ids);
/* kvp_shrink of stream @si, arguments checked (prefix mode retires in two steps). */
int kvp_shrink_stream(struct kvp_pool *p, int si, uint32_t target_free, uint32_t *n_retired);

/* lib/pool_stats.c */
void kvp_stats_sum(struct kvp_pool *p, kvp_stats *out);
void kvp_history_record(struct kvp_pool *p);
void kvp_history_tick_slow(struct kvp_pool *p, uint32_t calls);

/*
 * kvp_history_tick - count a mutating call; on a slot's first call and every
 * KVP_HISTORY_EVERY-th one, see whether a snapshot is due (the pool's first
 * mutating call, or this thread's cadence).
 */
static inline void kvp_history_tick(struct kvp_pool *p, struct kvp_tslot *s)
{
	_Static_assert((KVP_HISTORY_EVERY & (KVP_HISTORY_EVERY - 1)) == 0, "power of two");
	uint32_t calls = s->calls++;
	if ((calls & (KVP_HISTORY_EVERY - 1)) == 0)
		kvp_history_tick_slow(p, calls);
}

#endif /* KVPOOL_LIB_POOL_INTERNAL_H */
