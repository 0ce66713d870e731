/*
 * lib/bufcache/bufcache_budget.c - the buffer cache's budget, eviction and miss path.
 *
 * Owns: the shared side of the cache.  It reserves budget and evicts to make
 * room (kvpi_bc_reserve).  It serves a request the front cannot: the shared
 * tier's best fit, else the system (kvpi_bc_alloc_shared).  When the system
 * has no memory, that path evicts one buffer and retries.  It puts buffers
 * into the shared tier and takes them out (kvpi_bc_shared_put,
 * kvpi_bc_take_fit).  It gives buffers back to the system
 * (kvpi_bc_release_to_system).  kvp_bufcache_clear lives here too.
 *
 * May call: the shared tier (bufcache_exact.h, bufcache_large.h), the node
 * slab (bufcache_node.h), the fronts' claims and drains (bufcache_front.h),
 * the counters and the system door (lib/base/sysmem.h).  It takes no lock
 * itself; the large tier's classes and the slab's growth lock their own.
 *
 * Budget: `cached` counts the bytes of buffers in either tier plus the
 * fronts' unused reservations.  A CAS never lets it pass the budget.  A
 * front takes reservation in batches (need + batch) and keeps at most
 * 2 * batch unused.  So a free into the front and a hit from it write no
 * shared word.  The cached bytes reported are `cached` minus the fronts'
 * reservations.  With one thread a free into the front needs room exactly
 * when the reference would (the front's own reservation counts as room).
 *
 * Eviction: fronts parked by exited threads join the shared tier first;
 * their buffers go before a live thread's.  Then goes the smallest buffer
 * of the caller's front and the shared tier (the shared one on a tie: it is
 * older).  When both are empty, every other front is claimed and emptied
 * into the shared tier first.  So a buffer in an idle thread's front never
 * causes a false eviction-miss or a NULL from alloc.  A free that finds the
 * budget full takes back the other fronts' unused reservations once they
 * cover what it lacks.  It evicts only while they do not.
 */
#include "lib/bufcache/bufcache_internal.h"
#include "lib/base/sysmem.h"

#define KVPI_BC_NODE_SLACK (2 * KVPI_BC_SHARDS)

/* Take the smallest shared buffer whose capacity covers @need_units; 1 on success. */
int kvpi_bc_take_fit(kvp_bufcache *c, size_t need_units, void **p, size_t *cap)
{
	if (need_units <= KVPI_BC_EXACT_UNITS &&
	    kvpi_bc_exact_take(&c->exact, &c->nodes, need_units - 1, p, cap))
		return 1;
	return kvpi_bc_large_take(&c->large, &c->nodes, need_units, p, cap);
}

void kvpi_bc_release_to_system(kvp_bufcache *c, struct kvpi_bc_front *me, void *p, size_t cap)
{
	kvpi_sys_free(p);
	/* Relaxed, both: `live` sizes the node slab, live_bytes feeds stats;
	 * neither orders memory. */
	atomic_fetch_sub_explicit(&c->live, 1, memory_order_relaxed);
	atomic_fetch_sub_explicit(&c->live_bytes, cap, memory_order_relaxed);
	kvpi_bc_count_by(c, me, KVPI_BC_SYS_FREES, 1);
}

int kvpi_bc_shared_put(kvp_bufcache *c, void *p, size_t cap)
{
	size_t units = cap >> KVPI_BC_UNIT_SHIFT;
	uint32_t idx = kvpi_bc_nodes_pop(&c->nodes);
	if (idx == KVPI_BC_NIL)
		return 0;
	struct kvpi_bc_node *x = kvpi_bc_node(&c->nodes, idx);
	/* Relaxed, both: published by what links the node into its class (the
	 * exact queue's release CAS, or the large class's mutex). */
	atomic_store_explicit(&x->ptr, (uintptr_t)p, memory_order_relaxed);
	atomic_store_explicit(&x->cap, cap, memory_order_relaxed);
	if (units <= KVPI_BC_EXACT_UNITS)
		kvpi_bc_exact_put(&c->exact, &c->nodes, units - 1, idx);
	else
		kvpi_bc_large_put(&c->large, &c->nodes, idx);
	return 1;
}

/* Evict the smallest (then least recently cached) buffer; 1 if one was evicted. */
static int evict_one(kvp_bufcache *c, struct kvpi_bc_front *me)
{
	void *p = NULL;
	size_t cap = 0;

	/* Buffers parked by exited threads go before any live thread's: into
	 * the shared tier, where the smallest is evicted first.  Relaxed, both:
	 * a hint (bufcache_front.c); a front parked after the store sets it again. */
	if (atomic_load_explicit(&c->parked, memory_order_relaxed)) {
		atomic_store_explicit(&c->parked, 0, memory_order_relaxed);
		kvpi_bc_fronts_drain(c, me, KVPI_BC_DRAIN_PARKED);
	}
	if (me && kvpi_bc_front_enter(me)) {
		long f = kvpi_bc_front_find(me, 0);
		long g = f >= 0 ? kvpi_bc_shared_first(c, 0) : -1;
		if (f >= 0 && (g < 0 || g > f)) {
			p = kvpi_bc_front_pop(me, (size_t)f);
			cap = kvpi_bc_front_cap((size_t)f);
		}
		kvpi_bc_front_leave(me);
	}
	/* Both tiers empty: other fronts' buffers must still be reachable.  Two
	 * rounds at most, so a thread whose drained buffers others keep taking
	 * returns instead of chasing them. */
	for (int round = 0; !p && !kvpi_bc_take_fit(c, 1, &p, &cap); round++)
		if (round == 2 || !kvpi_bc_fronts_drain(c, me, 1))
			return 0;
	kvpi_bc_unreserve(c, cap);
	kvpi_bc_release_to_system(c, me, p, cap);
	kvpi_bc_count_by(c, me, KVPI_BC_EVICTIONS, 1);
	return 1;
}

/* Create what a later free of a @cap-byte buffer will need; failures only cost caching. */
static void prepare_metadata(kvp_bufcache *c, size_t cap)
{
	size_t units = cap >> KVPI_BC_UNIT_SHIFT;
	/* Relaxed: a sizing hint; orders nothing. */
	size_t live = atomic_load_explicit(&c->live, memory_order_relaxed);
	size_t room = c->budget >> KVPI_BC_UNIT_SHIFT;

	if (units <= KVPI_BC_EXACT_UNITS && !kvpi_bc_exact_ready(&c->exact, units - 1))
		kvpi_bc_exact_ensure_group(&c->exact, &c->nodes, units - 1);
	uint64_t want = kvpi_bc_exact_groups(&c->exact) * KVPI_BC_GROUP_SIZE +
	                (live < room ? live : room) + KVPI_BC_NODE_SLACK;
	if (kvpi_bc_nodes_total(&c->nodes) < want)
		kvpi_bc_nodes_grow(&c->nodes, want);
}

/* The shared path of an allocation: shared best fit, else the system (@me may be NULL). */
void *kvpi_bc_alloc_shared(kvp_bufcache *c, struct kvpi_bc_front *me, size_t requested,
                           size_t *actual)
{
	size_t cap = kvp_bufcache_round(requested);
	void *p;

	if (kvpi_bc_take_fit(c, kvpi_bc_units_for_request(requested), &p, actual)) {
		kvpi_bc_unreserve(c, *actual);
		kvpi_bc_count_by(c, me, KVPI_BC_HITS, 1);
		return p;
	}
	kvpi_bc_count_by(c, me, KVPI_BC_MISSES, 1);
	while (!(p = kvpi_sys_alloc(cap, KVP_BUF_ALIGN))) {
		if (!evict_one(c, me)) {
			*actual = 0;
			return NULL;
		}
		kvpi_bc_count_by(c, me, KVPI_BC_OOM_RETRIES, 1);
	}
	/* Relaxed, both: as in kvpi_bc_release_to_system. */
	atomic_fetch_add_explicit(&c->live, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&c->live_bytes, cap, memory_order_relaxed);
	kvpi_bc_count_by(c, me, KVPI_BC_SYS_ALLOCS, 1);
	prepare_metadata(c, cap);
	*actual = cap;
	return p;
}

/* Reserve @cap bytes of budget, evicting smallest-first as needed; 1 on success. */
int kvpi_bc_reserve(kvp_bufcache *c, struct kvpi_bc_front *me, size_t cap)
{
	/* Relaxed, every access to `cached` here: a budget, not a carrier of data
	 * (the CAS alone keeps it from passing the budget). */
	size_t cur = atomic_load_explicit(&c->cached, memory_order_relaxed);
	int reclaimed = 0;

	for (;;) {
		if (cur <= c->budget - cap) {
			/* Relaxed: the counter is a budget, not a carrier of data. */
			if (atomic_compare_exchange_weak_explicit(&c->cached, &cur, cur + cap,
			                                          memory_order_relaxed,
			                                          memory_order_relaxed))
				break;
			continue;
		}
		if (!reclaimed && kvpi_bc_fronts_reserve_sum(c, me) >= cur - (c->budget - cap)) {
			/* Other fronts' unused reservations cover the shortfall: take them
			 * back instead of evicting (once; a claim pass costs a membarrier). */
			reclaimed = 1;
			kvpi_bc_fronts_drain(c, me, 0);
		} else if (!evict_one(c, me)) {
			/* Nothing left to evict, but emptying the other fronts may have
			 * given their reservations back: room, if they were enough.
			 * Relaxed: as above. */
			cur = atomic_load_explicit(&c->cached, memory_order_relaxed);
			if (cur <= c->budget - cap)
				continue;
			return 0;
		}
		/* Relaxed: as above. */
		cur = atomic_load_explicit(&c->cached, memory_order_relaxed);
	}
	kvpi_bc_raise_peak(c, cur + cap);
	return 1;
}

/* Bounded by the buffers cached when it starts (after the fronts were emptied
 * into the shared tier): threads that keep freeing would otherwise keep it
 * taking forever.  The counts are exact when no free or hit is in flight, so
 * a clear with none empties the cache. */
void kvp_bufcache_clear(kvp_bufcache *c)
{
	if (!c)
		return;
	struct kvpi_bc_front *me = kvpi_bc_front_lookup(c);
	kvpi_bc_fronts_drain(c, me, 1);
	uint64_t left = kvpi_bc_exact_count(&c->exact) + kvpi_bc_large_count(&c->large);
	void *p;
	size_t cap;
	while (left && kvpi_bc_take_fit(c, 1, &p, &cap)) {
		left--;
		kvpi_bc_unreserve(c, cap);
		kvpi_bc_release_to_system(c, me, p, cap);
	}
}
