/*
 * lib/bufcache/bufcache.c - the aligned buffer cache: fronts, budget, eviction, hit and miss paths.
 *
 * Design (see kvpool/bufcache.h for the contract and docs/BUFCACHE.md):
 *
 * - Two tiers.  Each thread has a front for the cache (bufcache_front.h): up
 *   to KVPI_BC_FRONT_DEPTH buffers per capacity class up to 128 KiB, in FIFO order,
 *   touched only by that thread except when another thread claims it.  Behind
 *   the fronts is the shared tier every thread reaches: up to 64 MiB one
 *   lock-free FIFO per capacity (bufcache_exact.h) indexed by a three-level
 *   bitmap; above 64 MiB short sorted lists per power of two, each under its
 *   own mutex (bufcache_large.h).
 * - A hit takes the front's smallest fitting buffer only when the shared
 *   tier has no fitting buffer of that capacity or smaller (a read of the
 *   shared bitmap); otherwise the shared tier's best fit.  A free goes to the
 *   front; a class deeper than KVPI_BC_FRONT_DEPTH, or a front holding more than
 *   front_max bytes, spills its oldest buffers to the tail of the shared
 *   queues.  So, per class, every shared buffer that came from a thread's
 *   front is older than that front's: with one thread the two tiers together
 *   behave exactly as one best-fit, oldest-first cache.
 * - Budget: `cached` counts the bytes of buffers in either tier plus the
 *   fronts' unused reservations, and a CAS never lets it pass the budget.  A
 *   front takes reservation in batches (need + batch) and keeps at most
 *   2 * batch unused, so a free into the front and a hit from it write no
 *   shared word.  The cached bytes reported are `cached` minus the fronts'
 *   reservations.  With one thread a free into the front needs room exactly
 *   when the reference would (the front's own reservation counts as room).
 * - Eviction: fronts parked by exited threads join the shared tier first
 *   (their buffers go before a live thread's); then the smallest buffer of
 *   the caller's front and the shared tier (the shared one on a tie: it is
 *   older); when both are empty, every other front is claimed and emptied
 *   into the shared tier first, so a buffer in an idle thread's front never
 *   causes a false eviction-miss or a NULL from alloc.  A free that finds the budget full takes back the
 *   other fronts' unused reservations once they cover what it lacks, and
 *   evicts only while they do not.
 * - Nodes describing buffers in the shared tier live in a type-stable slab
 *   (bufcache_node.h), never inside the buffers.  Fronts link their buffers
 *   through the buffers' first word: only the holder reads those.  The slab
 *   grows on the miss path only; hits and frees allocate nothing.  Should a
 *   spill or a free find no node (only when growth failed for lack of
 *   memory), the buffer goes back to the system: caching is an
 *   optimisation, never a correctness requirement.
 */
#include "lib/bufcache/bufcache_internal.h"
#include "lib/base/barrier.h"
#include "lib/base/sysmem.h"

#include <string.h>

#define KVPI_BC_NODE_SLACK   (2 * KVPI_BC_SHARDS)
#define KVPI_BC_SPILL_MAX    8
#define KVPI_BC_FRONT_MAXCAP ((size_t)8 << 20)
#define KVPI_BC_BATCH_MAX    ((size_t)1 << 20)

static _Atomic uint64_t next_uid = 1;

/* Set up @c's shared tier and node slab; on failure undo what was set up.  0 or -1. */
static int parts_init(kvp_bufcache *c)
{
	if (kvpi_bc_nodes_init(&c->nodes))
		return -1;
	if (kvpi_bc_exact_init(&c->exact))
		goto undo_nodes;
	if (kvpi_bc_large_init(&c->large))
		goto undo_exact;
	return 0;
undo_exact:
	kvpi_bc_exact_destroy(&c->exact);
undo_nodes:
	kvpi_bc_nodes_destroy(&c->nodes);
	return -1;
}

/* Undo parts_init (single-threaded). */
static void parts_destroy(kvp_bufcache *c)
{
	kvpi_bc_large_destroy(&c->large);
	kvpi_bc_exact_destroy(&c->exact);
	kvpi_bc_nodes_destroy(&c->nodes);
}

/* Free every front of @c and the buffers in them (single-threaded, out of the registry). */
static void fronts_free(kvp_bufcache *c)
{
	struct kvpi_bc_front *next;

	/* Acquire: pairs with the release push of each front (it is initialised). */
	for (struct kvpi_bc_front *f = atomic_load_explicit(&c->fronts, memory_order_acquire); f;
	     f = next) {
		next = f->next;
		while (f->l1)
			kvpi_sys_free(kvpi_bc_front_pop(f, (size_t)kvpi_bc_front_find(f, 0)));
		kvpi_sys_free(f);
	}
}

int kvp_bufcache_create(size_t max_cached_bytes, kvp_bufcache **out)
{
	if (!out)
		return KVP_EINVAL;
	*out = NULL;
	kvp_bufcache *c = kvpi_sys_alloc(sizeof(*c), 128);
	if (!c)
		return KVP_ENOMEM;
	memset(c, 0, sizeof(*c));
	c->budget = max_cached_bytes;
	c->asym = kvpi_barrier_asym_ok(); /* before any front exists (each copies it) */
	/* Relaxed: any distinct value will do. */
	c->uid = atomic_fetch_add_explicit(&next_uid, 1, memory_order_relaxed);
	c->front_max = max_cached_bytes / 8 < KVPI_BC_FRONT_MAXCAP ? max_cached_bytes / 8
	                                                           : KVPI_BC_FRONT_MAXCAP;
	c->batch = (max_cached_bytes / 256 < KVPI_BC_BATCH_MAX ? max_cached_bytes / 256
	                                                       : KVPI_BC_BATCH_MAX) &
	           ~(size_t)(KVP_BUF_ALIGN - 1);
	atomic_init(&c->fronts, NULL);
	atomic_init(&c->cached, 0);
	atomic_init(&c->peak, 0);
	atomic_init(&c->live, 0);
	atomic_init(&c->live_bytes, 0);
	atomic_init(&c->parked, 0);
	kvpi_bc_stats_init(&c->stats);
	if (parts_init(c)) {
		kvpi_sys_free(c);
		return KVP_ENOMEM;
	}
	if (kvpi_bc_front_registry_add(c)) {
		parts_destroy(c);
		kvpi_sys_free(c);
		return KVP_ENOMEM;
	}
	/* The creating thread's front now, so its first calls allocate nothing more. */
	if (!kvpi_bc_front_lookup(c)) {
		kvpi_bc_front_registry_remove(c);
		fronts_free(c);
		parts_destroy(c);
		kvpi_sys_free(c);
		return KVP_ENOMEM;
	}
	*out = c;
	return KVP_OK;
}

/* Take the smallest shared buffer whose capacity covers @need_units; 1 on success. */
static int take_fit(kvp_bufcache *c, size_t need_units, void **p, size_t *cap)
{
	if (need_units <= KVPI_BC_EXACT_UNITS &&
	    kvpi_bc_exact_take(&c->exact, &c->nodes, need_units - 1, p, cap))
		return 1;
	return kvpi_bc_large_take(&c->large, &c->nodes, need_units, p, cap);
}

/* First non-empty shared exact class >= @cls, or -1 (reads only). */
static inline long shared_first(kvp_bufcache *c, size_t cls)
{
	/* seq_cst like every bitmap reader (a plain load on x86): an empty tier is one word. */
	if (!atomic_load_explicit(&c->exact.bm.l0, memory_order_seq_cst))
		return -1;
	return kvpi_bc_bitmap_find(&c->exact.bm, cls);
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

/* Put buffers taken out of a front into the shared tier (their bytes stay reserved). */
static void put_spills(kvp_bufcache *c, struct kvpi_bc_front *me, void **p, const size_t *cap,
                       int n)
{
	for (int i = 0; i < n; i++) {
		if (kvpi_bc_shared_put(c, p[i], cap[i]))
			continue;
		kvpi_bc_unreserve(c, cap[i]);
		kvpi_bc_release_to_system(c, me, p[i], cap[i]);
	}
}

/* Raise the high-water mark to @v. */
static void raise_peak(kvp_bufcache *c, size_t v)
{
	/* Relaxed, here and in the CAS: a statistic. */
	size_t peak = atomic_load_explicit(&c->peak, memory_order_relaxed);
	while (v > peak && !atomic_compare_exchange_weak_explicit(
	                       &c->peak, &peak, v, memory_order_relaxed, memory_order_relaxed))
		;
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
		long g = f >= 0 ? shared_first(c, 0) : -1;
		if (f >= 0 && (g < 0 || g > f)) {
			p = kvpi_bc_front_pop(me, (size_t)f);
			cap = kvpi_bc_front_cap((size_t)f);
		}
		kvpi_bc_front_leave(me);
	}
	/* Both tiers empty: other fronts' buffers must still be reachable.  Two
	 * rounds at most, so a thread whose drained buffers others keep taking
	 * returns instead of chasing them. */
	for (int round = 0; !p && !take_fit(c, 1, &p, &cap); round++)
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
static __attribute__((noinline)) void *alloc_shared(kvp_bufcache *c, struct kvpi_bc_front *me,
                                                    size_t requested, size_t *actual)
{
	size_t cap = kvp_bufcache_round(requested);
	void *p;

	if (take_fit(c, kvpi_bc_units_for_request(requested), &p, actual)) {
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

/* Give back the part of a front's reservation above one batch (held). */
static __attribute__((noinline)) size_t trim_reserve(kvp_bufcache *c, size_t res)
{
	kvpi_bc_unreserve(c, res - c->batch);
	return c->batch;
}

/*
 * The hit path from the calling thread's front @f: its smallest fitting
 * buffer when the shared tier has none as good (one read of the shared
 * bitmap's top word when that tier is empty).  It writes only the front;
 * anything else goes to alloc_shared.
 */
static inline __attribute__((always_inline)) void *
alloc_front(kvp_bufcache *c, struct kvpi_bc_front *f, size_t requested, size_t *actual)
{
	size_t cls = kvpi_bc_units_for_request(requested) - 1;
	if (!kvpi_bc_front_enter(f))
		return alloc_shared(c, f, requested, actual);
	long k = kvpi_bc_front_find(f, cls), g;
	if (k < 0 || ((g = shared_first(c, cls)) >= 0 && g <= k)) {
		kvpi_bc_front_leave(f);
		return alloc_shared(c, f, requested, actual);
	}
	void *p = kvpi_bc_front_pop(f, (size_t)k);
	size_t got = kvpi_bc_front_cap((size_t)k);
	/* The buffer's bytes stay reserved, as the front's; keep at most 2 batches. */
	size_t res = kvpi_bc_front_get(&f->reserve) + got;
	if (res > 2 * c->batch)
		res = trim_reserve(c, res);
	kvpi_bc_front_set(&f->reserve, res);
	kvpi_bc_front_ctr_add(f, KVPI_BC_HITS, 1);
	kvpi_bc_front_leave(f);
	*actual = got;
	return p;
}

/* Checks, and a thread's first call on @c (its front made or taken: it may hold buffers). */
static __attribute__((noinline)) void *alloc_slow(kvp_bufcache *c, size_t requested, size_t *actual)
{
	if (actual)
		*actual = 0;
	if (!c || !actual || requested > KVP_BUF_MAX_REQUEST)
		return NULL;
	struct kvpi_bc_front *f = kvpi_bc_front_lookup(c);
	if (f && requested <= (size_t)KVPI_BC_FRONT_UNITS << KVPI_BC_UNIT_SHIFT)
		return alloc_front(c, f, requested, actual);
	return alloc_shared(c, f, requested, actual);
}

/* The hit path: the calling thread's front, found in its table of fronts (alloc_front). */
void *kvp_bufcache_alloc(kvp_bufcache *c, size_t requested, size_t *actual)
{
	struct kvpi_bc_front *f;

	if (!c || !actual || requested > (size_t)KVPI_BC_FRONT_UNITS << KVPI_BC_UNIT_SHIFT ||
	    !(f = kvpi_bc_front_here(c->idx, c->uid)))
		return alloc_slow(c, requested, actual);
	return alloc_front(c, f, requested, actual);
}

/* Reserve @cap bytes of budget, evicting smallest-first as needed; 1 on success. */
static int reserve(kvp_bufcache *c, struct kvpi_bc_front *me, size_t cap)
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
	raise_peak(c, cur + cap);
	return 1;
}

/* Take at least @need more bytes of reservation for the front (held); 1 on success. */
static int take_batch(kvp_bufcache *c, size_t need, size_t *res)
{
	/* Relaxed: a budget, as in reserve(). */
	size_t cur = atomic_load_explicit(&c->cached, memory_order_relaxed);
	size_t want;

	for (;;) {
		if (cur > c->budget || c->budget - cur < need)
			return 0;
		want = need + c->batch;
		if (want > c->budget - cur)
			want = c->budget - cur;
		/* Relaxed: a budget, as in reserve(). */
		if (atomic_compare_exchange_weak_explicit(
		        &c->cached, &cur, cur + want, memory_order_relaxed, memory_order_relaxed))
			break;
	}
	*res += want;
	return 1;
}

/* Whether class @cls's shared group exists (so the buffer can spill); front held. */
static inline int front_ready(kvp_bufcache *c, struct kvpi_bc_front *me, size_t cls)
{
	uint64_t bit = (uint64_t)1 << (cls >> KVPI_BC_GROUP_BITS);

	if (me->ready & bit)
		return 1;
	if (!kvpi_bc_exact_ready(&c->exact, cls))
		return 0;
	me->ready |= bit;
	return 1;
}

/* Spill what overflows the held front (class @cls too deep, or too many bytes), then leave. */
static __attribute__((noinline)) void front_spill(kvp_bufcache *c, struct kvpi_bc_front *me,
                                                  size_t cls)
{
	size_t scap[KVPI_BC_SPILL_MAX];
	void *sp[KVPI_BC_SPILL_MAX];
	int n = 0;

	if (me->cnt[cls] > KVPI_BC_FRONT_DEPTH) {
		sp[n] = kvpi_bc_front_pop(me, cls);
		scap[n++] = kvpi_bc_front_cap(cls);
	}
	while (kvpi_bc_front_get(&me->bytes) > c->front_max && n < KVPI_BC_SPILL_MAX) {
		long l = kvpi_bc_front_largest(me);
		sp[n] = kvpi_bc_front_pop(me, (size_t)l);
		scap[n++] = kvpi_bc_front_cap((size_t)l);
	}
	kvpi_bc_front_leave(me);
	put_spills(c, me, sp, scap, n);
}

/*
 * Append @p to the held front, whose reservation already covers it, then
 * leave the front (spilling what overflows).  @res is the front's
 * reservation after this buffer's bytes were taken from it.
 */
static inline void front_put(kvp_bufcache *c, struct kvpi_bc_front *me, void *p, size_t cap,
                             size_t res)
{
	size_t cls = (cap >> KVPI_BC_UNIT_SHIFT) - 1;

	kvpi_bc_front_push(me, cls, p);
	kvpi_bc_front_set(&me->reserve, res);
	/* The cached bytes, less this front's reservation (exact with one thread).
	 * Relaxed, both loads: a budget and a statistic; they order nothing. */
	size_t v = atomic_load_explicit(&c->cached, memory_order_relaxed) - res;
	if (v > atomic_load_explicit(&c->peak, memory_order_relaxed))
		raise_peak(c, v);
	if (me->cnt[cls] > KVPI_BC_FRONT_DEPTH || kvpi_bc_front_get(&me->bytes) > c->front_max)
		front_spill(c, me, cls);
	else
		kvpi_bc_front_leave(me);
}

/* The front could not take the buffer: the shared path, with evictions. */
static __attribute__((noinline)) void free_slow(kvp_bufcache *c, struct kvpi_bc_front *me,
                                                void *ptr, size_t actual)
{
	size_t units = actual >> KVPI_BC_UNIT_SHIFT;

	if (units <= KVPI_BC_EXACT_UNITS && !kvpi_bc_exact_ready(&c->exact, units - 1)) {
		kvpi_bc_release_to_system(c, me, ptr, actual);
		return;
	}
	if (me && kvpi_bc_front_enter(me)) {
		/* Our unused reservation is room: give it back before deciding to evict. */
		size_t res = kvpi_bc_front_get(&me->reserve);
		if (res) {
			kvpi_bc_unreserve(c, res);
			kvpi_bc_front_set(&me->reserve, 0);
		}
		kvpi_bc_front_leave(me);
	}
	if (!reserve(c, me, actual)) {
		kvpi_bc_release_to_system(c, me, ptr, actual);
		return;
	}
	if (me && units <= KVPI_BC_FRONT_UNITS && kvpi_bc_front_enter(me)) {
		if (front_ready(c, me, units - 1)) {
			front_put(c, me, ptr, actual, kvpi_bc_front_get(&me->reserve));
			return;
		}
		kvpi_bc_front_leave(me);
	}
	if (kvpi_bc_shared_put(c, ptr, actual))
		return;
	kvpi_bc_unreserve(c, actual);
	kvpi_bc_release_to_system(c, me, ptr, actual);
}

/* A free that is not a plain front free: checks, then the front or the shared path. */
static __attribute__((noinline)) void free_checked(kvp_bufcache *c, void *ptr, size_t actual)
{
	if (!c || !ptr)
		return;
	struct kvpi_bc_front *me = kvpi_bc_front_lookup(c);
	if (!actual || actual % KVP_BUF_ALIGN || (uintptr_t)ptr % KVP_BUF_ALIGN ||
	    actual > c->budget) {
		kvpi_bc_release_to_system(c, me, ptr, actual);
		return;
	}
	size_t units = actual >> KVPI_BC_UNIT_SHIFT;
	if (me && units <= KVPI_BC_FRONT_UNITS && kvpi_bc_front_enter(me)) {
		size_t res = kvpi_bc_front_get(&me->reserve);
		if (front_ready(c, me, units - 1) &&
		    (res >= actual || take_batch(c, actual - res, &res))) {
			front_put(c, me, ptr, actual, res - actual);
			return;
		}
		kvpi_bc_front_leave(me);
	}
	free_slow(c, me, ptr, actual);
}

/*
 * The free path: into the calling thread's front when its reservation
 * covers the buffer and its class's shared group exists; anything else
 * (argument checks included) goes to free_checked.
 */
void kvp_bufcache_free(kvp_bufcache *c, void *ptr, size_t actual)
{
	struct kvpi_bc_front *f;

	if (!c || !ptr || !actual || (actual | (uintptr_t)ptr) % KVP_BUF_ALIGN ||
	    actual > c->budget || actual > (size_t)KVPI_BC_FRONT_UNITS << KVPI_BC_UNIT_SHIFT ||
	    !(f = kvpi_bc_front_here(c->idx, c->uid))) {
		free_checked(c, ptr, actual);
		return;
	}
	if (!kvpi_bc_front_enter(f)) {
		free_slow(c, f, ptr, actual);
		return;
	}
	size_t res = kvpi_bc_front_get(&f->reserve);
	if (res < actual || !front_ready(c, f, (actual >> KVPI_BC_UNIT_SHIFT) - 1)) {
		kvpi_bc_front_leave(f);
		free_checked(c, ptr, actual);
		return;
	}
	front_put(c, f, ptr, actual, res - actual);
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
	while (left && take_fit(c, 1, &p, &cap)) {
		left--;
		kvpi_bc_unreserve(c, cap);
		kvpi_bc_release_to_system(c, me, p, cap);
	}
}

void kvp_bufcache_destroy(kvp_bufcache *c)
{
	if (!c)
		return;
	/* After this no exiting thread touches the cache (registry lock). */
	kvpi_bc_front_registry_remove(c);
	fronts_free(c);
	void *p;
	size_t cap;
	while (take_fit(c, 1, &p, &cap))
		kvpi_sys_free(p);
	parts_destroy(c);
	kvpi_sys_free(c);
}

/* a - b, or 0 when a racing snapshot has b > a */
static uint64_t sub0(uint64_t a, uint64_t b)
{
	return a > b ? a - b : 0;
}

/* Sum the fronts' counters into @v; their reservations and buffers into the rest. */
static void sum_fronts(kvp_bufcache *c, uint64_t v[KVPI_BC_N_CTRS], uint64_t *res, uint64_t *bufs)
{
	*res = *bufs = 0;
	/* Acquire: pairs with the release push of each front (it is initialised). */
	for (struct kvpi_bc_front *f = atomic_load_explicit(&c->fronts, memory_order_acquire); f;
	     f = f->next) {
		for (int k = 0; k < KVPI_BC_N_CTRS; k++)
			/* Relaxed: counters order nothing (bufcache_stats.h). */
			v[k] += atomic_load_explicit(&f->ctr[k], memory_order_relaxed);
		*res += kvpi_bc_front_get(&f->reserve);
		/* Relaxed: a level read for statistics, as kvpi_bc_front_get. */
		*bufs += atomic_load_explicit(&f->nbufs, memory_order_relaxed);
	}
}

size_t kvp_bufcache_cached_bytes(kvp_bufcache *c)
{
	uint64_t v[KVPI_BC_N_CTRS] = {0}, res, bufs;

	if (!c)
		return 0;
	sum_fronts(c, v, &res, &bufs);
	/* Relaxed: a statistic, exact once the cache is quiescent. */
	return sub0(atomic_load_explicit(&c->cached, memory_order_relaxed), res);
}

int kvp_bufcache_get_stats(kvp_bufcache *c, kvp_bufcache_stats *out)
{
	uint64_t v[KVPI_BC_N_CTRS], res, bufs;

	if (!c || !out)
		return KVP_EINVAL;
	kvpi_bc_stats_sum(&c->stats, v);
	sum_fronts(c, v, &res, &bufs);
	out->hits = v[KVPI_BC_HITS];
	out->misses = v[KVPI_BC_MISSES];
	out->evictions = v[KVPI_BC_EVICTIONS];
	out->oom_retries = v[KVPI_BC_OOM_RETRIES];
	out->system_allocs = v[KVPI_BC_SYS_ALLOCS];
	out->system_frees = v[KVPI_BC_SYS_FREES];
	/* Relaxed, the three loads below: statistics, exact once the cache is quiescent. */
	out->cached_bytes = sub0(atomic_load_explicit(&c->cached, memory_order_relaxed), res);
	out->peak_cached_bytes = atomic_load_explicit(&c->peak, memory_order_relaxed);
	out->cached_buffers =
	    kvpi_bc_exact_count(&c->exact) + kvpi_bc_large_count(&c->large) + bufs;
	out->bytes_in_use =
	    sub0(atomic_load_explicit(&c->live_bytes, memory_order_relaxed), out->cached_bytes);
	return KVP_OK;
}
