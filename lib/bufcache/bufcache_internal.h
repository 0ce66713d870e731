/*
 * lib/bufcache/bufcache_internal.h - the buffer cache object, shared by bufcache.c and
 * bufcache_front.c.
 *
 * Budget words (see lib/bufcache/bufcache.c for the protocol):
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
 * kvpi_bc_shared_put - put a buffer whose bytes are already reserved into the shared tier
 * Returns 1, or 0 when no node was free (the caller then un-reserves it and
 * gives it back to the system: kvpi_bc_release_to_system).
 */
int kvpi_bc_shared_put(kvp_bufcache *c, void *p, size_t cap);

/* kvpi_bc_release_to_system - give a buffer that is in no part of the cache back to the system */
void kvpi_bc_release_to_system(kvp_bufcache *c, struct kvpi_bc_front *me, void *p, size_t cap);

#endif /* KVPOOL_LIB_BUFCACHE_INTERNAL_H */
