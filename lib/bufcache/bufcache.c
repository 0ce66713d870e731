/*
 * lib/bufcache/bufcache.c - the aligned buffer cache's get and put paths.
 *
 * Owns: kvp_bufcache_alloc and kvp_bufcache_free, through the calling
 * thread's front.  A hit takes the front's smallest fitting buffer, unless
 * the shared tier has one as good.  A free goes into the front.  The
 * front's reservation is owned here too: a batch taken from the budget,
 * trimmed above two batches.  So is spilling what overflows a front into
 * the shared tier.  A free the front cannot take goes the shared way
 * (free_slow).  The hit path is always inlined into kvp_bufcache_alloc.
 * Both fast paths stay in this file, with no call out of it:
 * bench/callgrind_bufcache.sh counts their instructions.
 *
 * May call: the fronts (bufcache_front.h), kvpi_bc_shared_first and the
 * counters, and the shared side in bufcache_budget.c: the miss path
 * (kvpi_bc_alloc_shared), budget reservation with eviction
 * (kvpi_bc_reserve), kvpi_bc_shared_put and kvpi_bc_release_to_system.  It
 * takes no lock.
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
 * - Budget and eviction: bufcache_budget.c.
 * - Nodes describing buffers in the shared tier live in a type-stable slab
 *   (bufcache_node.h), never inside the buffers.  Fronts link their buffers
 *   through the buffers' first word: only the holder reads those.  The slab
 *   grows on the miss path only; hits and frees allocate nothing.  Should a
 *   spill or a free find no node (only when growth failed for lack of
 *   memory), the buffer goes back to the system: caching is an
 *   optimisation, never a correctness requirement.
 */
#include "lib/bufcache/bufcache_internal.h"

#define KVPI_BC_SPILL_MAX 8

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
 * anything else goes to kvpi_bc_alloc_shared.
 */
static inline __attribute__((always_inline)) void *
alloc_front(kvp_bufcache *c, struct kvpi_bc_front *f, size_t requested, size_t *actual)
{
	size_t cls = kvpi_bc_units_for_request(requested) - 1;
	if (!kvpi_bc_front_enter(f))
		return kvpi_bc_alloc_shared(c, f, requested, actual);
	long k = kvpi_bc_front_find(f, cls), g;
	if (k < 0 || ((g = kvpi_bc_shared_first(c, cls)) >= 0 && g <= k)) {
		kvpi_bc_front_leave(f);
		return kvpi_bc_alloc_shared(c, f, requested, actual);
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
	return kvpi_bc_alloc_shared(c, f, requested, actual);
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

/* Take at least @need more bytes of reservation for the front (held); 1 on success. */
static int take_batch(kvp_bufcache *c, size_t need, size_t *res)
{
	/* Relaxed: a budget, as in kvpi_bc_reserve(). */
	size_t cur = atomic_load_explicit(&c->cached, memory_order_relaxed);
	size_t want;

	for (;;) {
		if (cur > c->budget || c->budget - cur < need)
			return 0;
		want = need + c->batch;
		if (want > c->budget - cur)
			want = c->budget - cur;
		/* Relaxed: a budget, as in kvpi_bc_reserve(). */
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
		kvpi_bc_raise_peak(c, v);
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
	if (!kvpi_bc_reserve(c, me, actual)) {
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
