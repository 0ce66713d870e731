/*
 * lib/bufcache/bufcache_internal.h - the buffer cache object, shared by the
 * cache's files (bufcache.c, bufcache_budget.c, bufcache_create.c,
 * bufcache_snapshot.c) and bufcache_front.c.
 *
 * Budget words (see lib/bufcache/bufcache_budget.c for the protocol):
 *
 *   cached     bytes reserved against the budget: buffers in the shared
 *              tier, buffers in fronts, and the fronts' unused
 *              reservations.  Never above budget.  Written on shared paths,
 *              and when a front takes or gives back a batch.  Front hits and
 *              frees read it but do not write it.
 *   peak       high-water mark of the cached bytes, reservations excluded.
 *   live, live_bytes  buffers from the system not yet given back.  Written
 *              on the miss and system-free paths only.
 *
 * Everything above `cached` is written at creation only, so the front's hot
 * path reads it from a line no thread writes.
 */
#ifndef KVPOOL_LIB_BUFCACHE_INTERNAL_H
#define KVPOOL_LIB_BUFCACHE_INTERNAL_H

#include <kvpool/bufcache.h>

#include "lib/bufcache/bufcache_exact.h"
#include "lib/bufcache/bufcache_front.h"
#include "lib/bufcache/bufcache_large.h"
#include "lib/bufcache/bufcache_stats.h"

struct kvp_bufcache {
	size_t budget;
	uint64_t uid;     /* unique for the process's life; names the cache in TLS */
	uint32_t idx;     /* registry index: the cache's slot in threads' tables */
	int asym;         /* claims use the asymmetric barrier (lib/base/barrier.h) */
	size_t front_max; /* bytes one front may hold */
	size_t batch;     /* reservation batch of a front */
	_Atomic(struct kvpi_bc_front *) fronts; /* add-only list */
	struct kvpi_bc_nodes nodes;
	struct kvpi_bc_exact exact;
	struct kvpi_bc_large large;
	struct kvpi_bc_stats stats;
	_Atomic size_t cached __attribute__((aligned(64))); /* budget reservation, see above */
	_Atomic size_t peak __attribute__((aligned(64)));   /* high-water mark of cached bytes */
	_Atomic size_t live;       /* buffers from the system not yet given back */
	_Atomic size_t live_bytes; /* their capacity */
	_Atomic int parked;        /* hint: an exited thread parked a front holding buffers */
};

/* kvpi_bc_front_lookup - the calling thread's front for @c, made on first use; NULL if none */
static inline struct kvpi_bc_front *kvpi_bc_front_lookup(kvp_bufcache *c)
{
	struct kvpi_bc_front *f = kvpi_bc_front_here(c->idx, c->uid);

	return f ? f : kvpi_bc_front_get_slow(c);
}

/* kvpi_bc_count_by - count an event in @me's counters (the caller's front) or the stripes */
static inline void kvpi_bc_count_by(kvp_bufcache *c, struct kvpi_bc_front *me, enum kvpi_bc_ctr k,
                                    uint64_t d)
{
	if (me)
		kvpi_bc_front_ctr_add(me, k, d);
	else
		kvpi_bc_count(&c->stats, k, d);
}

/* kvpi_bc_unreserve - give @n bytes of reservation back */
static inline void kvpi_bc_unreserve(kvp_bufcache *c, size_t n)
{
	/* relaxed: a budget, not a carrier of data. */
	atomic_fetch_sub_explicit(&c->cached, n, memory_order_relaxed);
}

/*
 * kvpi_bc_shared_first - first non-empty shared exact class >= @cls, or -1
 *
 * Reads only.  Inline: the front's hit path (bufcache.c) asks it on every
 * hit, and eviction (bufcache_budget.c) asks it too.
 */
static inline long kvpi_bc_shared_first(kvp_bufcache *c, size_t cls)
{
	/* seq_cst like every bitmap reader (a plain load on x86): an empty tier is one word. */
	if (!atomic_load_explicit(&c->exact.bm.l0, memory_order_seq_cst))
		return -1;
	return kvpi_bc_bitmap_find(&c->exact.bm, cls);
}

/*
 * kvpi_bc_raise_peak - raise the high-water mark to @v
 *
 * Inline: the front's free path (bufcache.c) calls it whenever the cached
 * bytes pass the mark, and so does budget reservation (bufcache_budget.c).
 */
static inline void kvpi_bc_raise_peak(kvp_bufcache *c, size_t v)
{
	/* Relaxed, here and in the CAS: a statistic. */
	size_t peak = atomic_load_explicit(&c->peak, memory_order_relaxed);
	while (v > peak && !atomic_compare_exchange_weak_explicit(
	                       &c->peak, &peak, v, memory_order_relaxed, memory_order_relaxed))
		;
}

/*
 * kvpi_bc_take_fit - take the smallest shared buffer whose capacity covers @need_units
 *
 * Sets *@p and *@cap to the buffer and its capacity.  Returns 1 on success,
 * 0 when the shared tier holds no such buffer.  The buffer's bytes stay
 * reserved: the caller un-reserves them or keeps them.
 */
int kvpi_bc_take_fit(kvp_bufcache *c, size_t need_units, void **p, size_t *cap);

/*
 * kvpi_bc_alloc_shared - the shared path of an allocation (the miss path)
 *
 * The shared tier's best fit, else a buffer from the system; when the
 * system has none, evict one buffer and retry until nothing is left to
 * evict.  @me is the caller's front, or NULL.  Returns the buffer and sets
 * *@actual to its capacity, or returns NULL with *@actual 0.
 */
void *kvpi_bc_alloc_shared(kvp_bufcache *c, struct kvpi_bc_front *me, size_t requested,
                           size_t *actual);

/*
 * kvpi_bc_reserve - reserve @cap bytes of budget, evicting smallest-first as needed
 *
 * First takes back the other fronts' unused reservations when they cover
 * the shortfall.  @me is the caller's front, or NULL.  Returns 1 on
 * success, 0 when nothing is left to evict and the budget is still short.
 */
int kvpi_bc_reserve(kvp_bufcache *c, struct kvpi_bc_front *me, size_t cap);

/*
 * kvpi_bc_shared_put - put a buffer whose bytes are already reserved into the shared tier
 * Returns 1, or 0 when no node was free (the caller then un-reserves it and
 * gives it back to the system: kvpi_bc_release_to_system).
 */
int kvpi_bc_shared_put(kvp_bufcache *c, void *p, size_t cap);

/* kvpi_bc_release_to_system - give a buffer that is in no part of the cache back to the system */
void kvpi_bc_release_to_system(kvp_bufcache *c, struct kvpi_bc_front *me, void *p, size_t cap);

#endif /* KVPOOL_LIB_BUFCACHE_INTERNAL_H */
