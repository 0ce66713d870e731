/*
 * lib/bufcache.c - the aligned buffer cache: budget, eviction, hit and miss paths.
 *
 * Design (see kvpool/bufcache.h for the contract and docs/BUFCACHE.md):
 *
 * - Buffers are indexed by exact capacity.  Up to 64 MiB each capacity has
 *   its own lock-free FIFO (bufcache_exact.h) and a three-level bitmap finds
 *   the first non-empty capacity >= the request in O(1): the seed's best fit
 *   without its scan.  Above 64 MiB, capacities are grouped per power of two
 *   in short sorted lists, each under its own mutex (bufcache_large.h).
 * - Nodes describing cached buffers live in a type-stable slab
 *   (bufcache_node.h), never inside the buffers, so a thread may read a node
 *   whose buffer another thread just took without touching user memory.  The
 *   slab grows on the miss path only; a hit or a free allocates nothing.
 * - No per-thread cache: every cached buffer is visible to every thread at
 *   all times, so nothing is stranded when a thread exits or idles, the
 *   budget and the eviction order see every buffer, and destroying the cache
 *   needs no coordination with threads that once used it.  The only
 *   per-thread state is a shard number (free-list and stats striping), a
 *   plain integer that needs no destructor.
 * - The budget is one atomic byte count, `cached`, of buffers in the cache
 *   plus buffers being put in.  A free reserves its capacity with a CAS that
 *   never lets `cached` exceed max_cached_bytes, evicting the smallest
 *   buffer while the reservation does not fit; a hit or an eviction gives
 *   the bytes back only after the buffer has left its queue.  Hence the
 *   bytes held in queues are <= cached <= max_cached_bytes at every instant.
 * - Node accounting: a free takes a node only after its reservation, and a
 *   take returns its spare node before un-reserving, so nodes in use are
 *   bounded by the reservations, each >= 256 bytes.  The miss path grows the
 *   slab to dummies + min(live buffers, budget / 256) + slack, which is
 *   enough for every reservation.  Should a free still find no node (only
 *   possible when growth failed for lack of memory, or transiently under
 *   contention), the buffer goes back to the system: caching is an
 *   optimisation, never a correctness requirement.
 */
#include <kvpool/bufcache.h>

#include "lib/bufcache_exact.h"
#include "lib/bufcache_large.h"
#include "lib/bufcache_stats.h"
#include "lib/sysmem.h"

#include <string.h>

#define BC_NODE_SLACK (2 * BC_SHARDS)

struct kvp_bufcache {
	size_t budget;
	struct bc_nodes nodes;
	struct bc_exact exact;
	struct bc_large large;
	struct bc_stats stats;
	_Alignas(64) _Atomic size_t cached; /* budget reservation, see above */
	_Alignas(64) _Atomic size_t peak;   /* high-water mark of cached */
	_Atomic size_t live;                /* buffers from the system not yet given back */
	_Atomic size_t live_bytes;          /* their capacity (bytes_in_use = this - cached) */
};

int kvp_bufcache_create(size_t max_cached_bytes, kvp_bufcache **out)
{
	kvp_bufcache *c;

	if (!out)
		return KVP_EINVAL;
	*out = NULL;
	c = kvp_sys_alloc(sizeof(*c), 128);
	if (!c)
		return KVP_ENOMEM;
	memset(c, 0, sizeof(*c));
	c->budget = max_cached_bytes;
	atomic_init(&c->cached, 0);
	atomic_init(&c->peak, 0);
	atomic_init(&c->live, 0);
	atomic_init(&c->live_bytes, 0);
	bc_stats_init(&c->stats);
	if (bc_nodes_init(&c->nodes))
		goto fail_nodes;
	if (bc_exact_init(&c->exact))
		goto fail_exact;
	if (bc_large_init(&c->large))
		goto fail_large;
	*out = c;
	return KVP_OK;
fail_large:
	bc_exact_destroy(&c->exact);
fail_exact:
	bc_nodes_destroy(&c->nodes);
fail_nodes:
	kvp_sys_free(c);
	return KVP_ENOMEM;
}

/* Take the smallest cached buffer whose capacity covers @need_units; 1 on success. */
static int take_fit(kvp_bufcache *c, size_t need_units, void **p, size_t *cap)
{
	if (need_units <= BC_EXACT_UNITS &&
	    bc_exact_take(&c->exact, &c->nodes, need_units - 1, p, cap))
		return 1;
	return bc_large_take(&c->large, &c->nodes, need_units, p, cap);
}

/* Give a buffer of @cap bytes that is not (or no longer) in the cache back to the system. */
static void release_to_system(kvp_bufcache *c, void *p, size_t cap)
{
	kvp_sys_free(p);
	/* Relaxed: `live` sizes the node slab, live_bytes feeds stats; neither orders memory. */
	atomic_fetch_sub_explicit(&c->live, 1, memory_order_relaxed);
	atomic_fetch_sub_explicit(&c->live_bytes, cap, memory_order_relaxed);
	bc_count(&c->stats, BC_SYS_FREES, 1);
}

/* Un-reserve @cap bytes (relaxed: the queues, not this counter, carry buffers between threads). */
static void unreserve(kvp_bufcache *c, size_t cap)
{
	atomic_fetch_sub_explicit(&c->cached, cap, memory_order_relaxed);
}

/* Evict the smallest (then least recently cached) buffer; 1 if one was evicted. */
static int evict_one(kvp_bufcache *c)
{
	void *p;
	size_t cap;

	if (!take_fit(c, 1, &p, &cap))
		return 0;
	unreserve(c, cap);
	release_to_system(c, p, cap);
	bc_count(&c->stats, BC_EVICTIONS, 1);
	return 1;
}

/* Create what a later free of a @cap-byte buffer will need; failures only cost caching. */
static void prepare_metadata(kvp_bufcache *c, size_t cap)
{
	size_t units = cap >> BC_UNIT_SHIFT;
	size_t live = atomic_load_explicit(&c->live, memory_order_relaxed);
	size_t room = c->budget >> BC_UNIT_SHIFT;
	uint64_t want;

	if (units <= BC_EXACT_UNITS && !bc_exact_ready(&c->exact, units - 1))
		bc_exact_ensure_group(&c->exact, &c->nodes, units - 1);
	want = bc_exact_groups(&c->exact) * BC_GROUP_SIZE + (live < room ? live : room) +
	       BC_NODE_SLACK;
	if (bc_nodes_total(&c->nodes) < want)
		bc_nodes_grow(&c->nodes, want);
}

void *kvp_bufcache_alloc(kvp_bufcache *c, size_t requested, size_t *actual)
{
	size_t cap;
	void *p;

	if (actual)
		*actual = 0;
	if (!c || !actual)
		return NULL;
	cap = kvp_bufcache_round(requested);
	if (!cap)
		return NULL;
	if (take_fit(c, bc_units_for_request(requested), &p, actual)) {
		unreserve(c, *actual);
		bc_count(&c->stats, BC_HITS, 1);
		return p;
	}
	bc_count(&c->stats, BC_MISSES, 1);
	while (!(p = kvp_sys_alloc(cap, KVP_BUF_ALIGN))) {
		if (!evict_one(c))
			return NULL;
		bc_count(&c->stats, BC_OOM_RETRIES, 1);
	}
	atomic_fetch_add_explicit(&c->live, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&c->live_bytes, cap, memory_order_relaxed);
	bc_count(&c->stats, BC_SYS_ALLOCS, 1);
	prepare_metadata(c, cap);
	*actual = cap;
	return p;
}

/* Reserve @cap bytes of budget, evicting smallest-first as needed; 1 on success. */
static int reserve(kvp_bufcache *c, size_t cap)
{
	size_t cur = atomic_load_explicit(&c->cached, memory_order_relaxed), peak;

	for (;;) {
		if (cur <= c->budget - cap) {
			/* Relaxed: the counter is a budget, not a carrier of data. */
			if (atomic_compare_exchange_weak_explicit(&c->cached, &cur, cur + cap,
			                                          memory_order_relaxed,
			                                          memory_order_relaxed))
				break;
			continue;
		}
		if (!evict_one(c))
			return 0;
		cur = atomic_load_explicit(&c->cached, memory_order_relaxed);
	}
	cur += cap;
	peak = atomic_load_explicit(&c->peak, memory_order_relaxed);
	while (cur > peak && !atomic_compare_exchange_weak_explicit(
	                         &c->peak, &peak, cur, memory_order_relaxed, memory_order_relaxed))
		;
	return 1;
}

void kvp_bufcache_free(kvp_bufcache *c, void *ptr, size_t actual)
{
	size_t units = actual >> BC_UNIT_SHIFT;
	uint32_t idx;
	struct bc_node *x;

	if (!c || !ptr)
		return;
	if (!actual || actual % KVP_BUF_ALIGN || (uintptr_t)ptr % KVP_BUF_ALIGN ||
	    actual > c->budget ||
	    (units <= BC_EXACT_UNITS && !bc_exact_ready(&c->exact, units - 1)))
		goto to_system;
	if (!reserve(c, actual))
		goto to_system;
	idx = bc_nodes_pop(&c->nodes);
	if (idx == BC_NIL) {
		unreserve(c, actual);
		goto to_system;
	}
	x = bc_node(&c->nodes, idx);
	/* Relaxed: published by the release that links the node into its class. */
	atomic_store_explicit(&x->ptr, (uintptr_t)ptr, memory_order_relaxed);
	atomic_store_explicit(&x->cap, actual, memory_order_relaxed);
	if (units <= BC_EXACT_UNITS)
		bc_exact_put(&c->exact, &c->nodes, units - 1, idx);
	else
		bc_large_put(&c->large, &c->nodes, idx);
	return;
to_system:
	release_to_system(c, ptr, actual);
}

/* Bounded by the buffers cached when it starts: threads that keep freeing
 * would otherwise keep it taking forever.  The counts are exact when no
 * free or hit is in flight, so a clear with none empties the cache. */
void kvp_bufcache_clear(kvp_bufcache *c)
{
	uint64_t left;
	void *p;
	size_t cap;

	if (!c)
		return;
	left = bc_exact_count(&c->exact) + bc_large_count(&c->large);
	while (left && take_fit(c, 1, &p, &cap)) {
		left--;
		unreserve(c, cap);
		release_to_system(c, p, cap);
	}
}

void kvp_bufcache_destroy(kvp_bufcache *c)
{
	if (!c)
		return;
	kvp_bufcache_clear(c);
	bc_large_destroy(&c->large);
	bc_exact_destroy(&c->exact);
	bc_nodes_destroy(&c->nodes);
	kvp_sys_free(c);
}

size_t kvp_bufcache_cached_bytes(kvp_bufcache *c)
{
	return c ? atomic_load_explicit(&c->cached, memory_order_relaxed) : 0;
}

/* a - b, or 0 when a racing snapshot has b > a */
static uint64_t sub0(uint64_t a, uint64_t b)
{
	return a > b ? a - b : 0;
}

int kvp_bufcache_get_stats(kvp_bufcache *c, kvp_bufcache_stats *out)
{
	uint64_t v[BC_N_CTRS];

	if (!c || !out)
		return KVP_EINVAL;
	bc_stats_sum(&c->stats, v);
	out->hits = v[BC_HITS];
	out->misses = v[BC_MISSES];
	out->evictions = v[BC_EVICTIONS];
	out->oom_retries = v[BC_OOM_RETRIES];
	out->system_allocs = v[BC_SYS_ALLOCS];
	out->system_frees = v[BC_SYS_FREES];
	out->cached_bytes = atomic_load_explicit(&c->cached, memory_order_relaxed);
	out->peak_cached_bytes = atomic_load_explicit(&c->peak, memory_order_relaxed);
	out->cached_buffers = bc_exact_count(&c->exact) + bc_large_count(&c->large);
	out->bytes_in_use =
	    sub0(atomic_load_explicit(&c->live_bytes, memory_order_relaxed), out->cached_bytes);
	return KVP_OK;
}
