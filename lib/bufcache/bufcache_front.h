/*
 * lib/bufcache/bufcache_front.h - per-thread fronts of the buffer cache.
 *
 * Each thread that calls a cache gets one front for that cache.  A front
 * holds:
 *   - a handful of recently freed buffers per capacity class: capacities up
 *     to KVPI_BC_FRONT_UNITS * 256 = 128 KiB, at most KVPI_BC_FRONT_DEPTH
 *     per class;
 *   - an unused budget reservation;
 *   - the thread's event counters.
 * A hit or a free served by the front writes only the front (its own cache
 * lines).  It reads the cache's shared bitmap and budget words.  Nobody
 * writes those while every thread is served by its front.
 *
 * Buffers in a front are linked through their first 8 bytes; a cached
 * buffer's contents belong to the cache.  Each class has one FIFO, oldest
 * at the head.  A two-level bitmap (8 words under one) finds the smallest
 * non-empty class at or above a request in two loads.
 *
 * Fronts sit on an add-only list owned by the cache.  A front is freed only
 * with the cache.  A thread finds its front for a cache in a thread-local
 * table, indexed by the cache's registry index.  Any number of caches may
 * exist per thread and per process, each found with one lookup.
 *
 * An exiting thread parks its fronts.  The buffers stay in them, and the
 * reservation goes back.  The next thread that needs a front for that cache
 * takes one whole.  So a new thread starts warm, and the shared tier does
 * not fill with what exited threads held.  Claims reach parked buffers like
 * any front's: evictions (which empty parked fronts first), OOM retries,
 * clear and destroy.
 *
 * Holding a front (state and claim words):
 *
 *   owner:    IDLE --enter: store BUSY, then load claim == 0--> BUSY --leave--> IDLE
 *   claimer:  CAS claim 0 -> token, then (barrier) wait for state == IDLE; holds
 *             it until it stores claim = 0 (token: an address of the claimer's
 *             stack frame, so a claimer tells its own claims from others')
 *
 * Only the holder of a front touches its classes, bitmap, reservation and
 * byte counts.  The holder is its owner between enter and leave, or a
 * claimer between its claim and its release.  An owner that finds the
 * front claimed leaves at once and serves the call from the shared tier; it
 * never waits.  Two pairs of accesses form a Dekker pair: the owner's store
 * of BUSY and load of claim, against the claimer's CAS and load of state.
 * At least one side sees the other.
 *
 * Two protocols make the pair hold.  The library's barrier policy
 * (lib/base/barrier.h) picks one per cache at creation, and each front
 * copies it.
 * - Symmetric: ThreadSanitizer builds, KVPOOL_FORCE_FALLBACK=1, or
 *   membarrier unavailable.  The owner stores BUSY seq_cst (an xchg on
 *   x86) and loads claim seq_cst.
 * - Asymmetric: the default where the kernel allows it.  The owner stores
 *   BUSY relaxed, with only a compiler barrier before its load of claim.
 *   The claimer calls kvpi_barrier_heavy() between its CAS and its loads of
 *   state.  That runs a full barrier on every CPU that runs one of our
 *   threads: membarrier, or its mprotect fallback once membarrier has been
 *   denied.  Either the owner's BUSY was visible before that barrier; then
 *   the claimer sees it and waits.  Or the owner's later load of claim comes
 *   after the barrier, which follows the claimer's CAS; then the owner sees
 *   the claim and backs off.  TSan cannot see this ordering, which is why
 *   its builds use the symmetric protocol.  The race tests run both.
 *
 * Synchronization.  kvpi_bc_front_lookup (lib/bufcache/bufcache_internal.h)
 * is kvpi_bc_front_here, then kvpi_bc_front_get_slow when that finds
 * nothing.  A thread's exit parks its fronts under the registry mutex.
 *
 *   operation                        may run concurrently with     progress
 *   -------------------------------  ----------------------------  --------------------------
 *   kvpi_bc_front_here               everything but destroy        wait-free (TLS table)
 *   kvpi_bc_front_get_slow           everything but destroy        lock-free: takes a parked
 *                                                                  front (CAS) or makes one
 *                                                                  (allocates, CAS push)
 *   kvpi_bc_front_alloc              everything                    allocates
 *   kvpi_bc_front_enter / leave      claims of the same front      wait-free
 *   kvpi_bc_front_find / largest /   nothing on the same front     holder only, O(1)
 *   pop / push
 *   kvpi_bc_front_set / get          readers (relaxed loads)       holder writes; wait-free
 *   kvpi_bc_front_cap                everything                    pure
 *   kvpi_bc_front_ctr_add            readers of the counter        owner thread only
 *   kvpi_bc_fronts_drain             everything but destroy        waits out owners' calls
 *                                                                  and other drainers
 *   kvpi_bc_fronts_reserve_sum       everything but destroy        wait-free, O(fronts);
 *                                                                  a racy sum
 *   kvpi_bc_front_registry_add /     everything                    the registry mutex
 *   remove
 *   reserve, bytes, nbufs            readers (relaxed loads)       written by the holder
 */
#ifndef KVPOOL_LIB_BUFCACHE_FRONT_H
#define KVPOOL_LIB_BUFCACHE_FRONT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <kvpool/bufcache.h>

#include "lib/bufcache/bufcache_stats.h"
#include "lib/base/tsan.h"

#define KVPI_BC_FRONT_UNITS 512 /* classes 0..511: capacities up to 128 KiB */
_Static_assert(((size_t)KVPI_BC_FRONT_UNITS << 8) == KVP_BUF_FRONT_MAX, "front range");
#define KVPI_BC_FRONT_GROUPS (KVPI_BC_FRONT_UNITS / 64)
#define KVPI_BC_FRONT_DEPTH  32 /* buffers per class */

#define KVPI_BC_FRONT_IDLE 0u
#define KVPI_BC_FRONT_BUSY 1u

struct kvp_bufcache;

struct kvpi_bc_front {
	_Atomic uint32_t state __attribute__((aligned(64))); /* owner: IDLE / BUSY */
	int asym;                                            /* the cache's protocol (immutable) */
	_Atomic uintptr_t claim;           /* nonzero (the claimer's token) while claimed */
	uint64_t l1;                       /* holder: bit g set when l2[g] != 0 */
	uint64_t l2[KVPI_BC_FRONT_GROUPS]; /* holder: bit c set when class c is non-empty */
	uint64_t ready;                    /* holder: shared-tier groups known to exist */
	_Atomic size_t reserve;            /* holder writes: budget reserved, not used */
	_Atomic size_t bytes;              /* holder writes: capacity of buffers held */
	_Atomic uint64_t nbufs;            /* holder writes: buffers held */
	_Atomic int taken;                 /* 1 while a live thread owns the front, else parked */
	struct kvpi_bc_front *next;        /* immutable once on the cache's list */
	_Atomic uint64_t ctr[KVPI_BC_N_CTRS]
	    __attribute__((aligned(64))); /* owner thread only writes */
	void *head[KVPI_BC_FRONT_UNITS];  /* oldest buffer of each class */
	void *tail[KVPI_BC_FRONT_UNITS];  /* newest */
	uint8_t cnt[KVPI_BC_FRONT_UNITS];
};

/* A thread's fronts, indexed by the caches' registry index; uid 0: none. */
struct kvpi_bc_tls_slot {
	uint64_t uid; /* the cache's uid (an index is reused after destroy) */
	struct kvpi_bc_front *f;
};

struct kvpi_bc_tls_tab {
	uint32_t n; /* slots */
	struct kvpi_bc_tls_slot s[];
};

extern __thread struct kvpi_bc_tls_tab *kvpi_bc_tls __attribute__((tls_model("initial-exec")));

#ifdef KVPI_TSAN
#define KVPI_BC_ASYM(f) 0 /* TSan cannot model the asymmetric pair */
#else
#define KVPI_BC_ASYM(f) ((f)->asym)
#endif

/* The calling thread's front for @c (index @idx), or NULL when it has none yet. */
static inline struct kvpi_bc_front *kvpi_bc_front_here(uint32_t idx, uint64_t uid)
{
	struct kvpi_bc_tls_tab *t = kvpi_bc_tls;

	if (t && idx < t->n && t->s[idx].uid == uid)
		return t->s[idx].f;
	return NULL;
}

/* The calling thread's front for @c, made on first use; NULL when none could be made. */
struct kvpi_bc_front *kvpi_bc_front_get_slow(struct kvp_bufcache *c);

/* kvpi_bc_front_enter - the owner takes its front; 0 when a claimer holds it (then go shared) */
static inline int kvpi_bc_front_enter(struct kvpi_bc_front *f)
{
	if (KVPI_BC_ASYM(f)) {
		/* Relaxed + compiler barrier: the claimer's membarrier orders it (see above). */
		atomic_store_explicit(&f->state, KVPI_BC_FRONT_BUSY, memory_order_relaxed);
		atomic_signal_fence(memory_order_seq_cst);
	} else {
		/* seq_cst: the store half of the symmetric Dekker pair with the claimer. */
		atomic_store_explicit(&f->state, KVPI_BC_FRONT_BUSY, memory_order_seq_cst);
	}
	/* seq_cst (a plain load on x86): the load half; acquire part: see what a
	 * claimer left when it released the front. */
	if (!atomic_load_explicit(&f->claim, memory_order_seq_cst))
		return 1;
	/* Release: as kvpi_bc_front_leave (we wrote nothing, but the claimer
	 * waiting for IDLE acquires it). */
	atomic_store_explicit(&f->state, KVPI_BC_FRONT_IDLE, memory_order_release);
	return 0;
}

/* kvpi_bc_front_leave - the owner gives its front back */
static inline void kvpi_bc_front_leave(struct kvpi_bc_front *f)
{
	/* Release: the next holder (a claimer's acquire of IDLE) sees everything
	 * written while held. */
	atomic_store_explicit(&f->state, KVPI_BC_FRONT_IDLE, memory_order_release);
}

/* kvpi_bc_front_find - smallest non-empty class >= @cls (< KVPI_BC_FRONT_UNITS), or -1 */
static inline long kvpi_bc_front_find(const struct kvpi_bc_front *f, size_t cls)
{
	size_t g = cls >> 6;
	uint64_t m = f->l2[g] & (~(uint64_t)0 << (cls & 63));

	if (m)
		return (long)((g << 6) + (size_t)__builtin_ctzll(m));
	m = g + 1 < 64 ? f->l1 & (~(uint64_t)0 << (g + 1)) : 0;
	if (!m)
		return -1;
	g = (size_t)__builtin_ctzll(m);
	return (long)((g << 6) + (size_t)__builtin_ctzll(f->l2[g]));
}

/* kvpi_bc_front_largest - largest non-empty class, or -1 */
static inline long kvpi_bc_front_largest(const struct kvpi_bc_front *f)
{
	if (!f->l1)
		return -1;
	size_t g = 63u - (unsigned)__builtin_clzll(f->l1);
	return (long)((g << 6) + 63u - (unsigned)__builtin_clzll(f->l2[g]));
}

static inline size_t kvpi_bc_front_cap(size_t cls)
{
	return (cls + 1) << 8;
}

/* kvpi_bc_front_set - single-writer update of a level the holder keeps */
static inline void kvpi_bc_front_set(_Atomic size_t *v, size_t x)
{
	/* Relaxed: one writer (the holder; holders are ordered by enter/leave and
	 * claims); other readers only sum levels for statistics and hints. */
	atomic_store_explicit(v, x, memory_order_relaxed);
}

/* kvpi_bc_front_get - read a level the holder keeps (exact for the holder) */
static inline size_t kvpi_bc_front_get(_Atomic size_t *v)
{
	/* Relaxed: as kvpi_bc_front_set. */
	return atomic_load_explicit(v, memory_order_relaxed);
}

/* kvpi_bc_front_pop - take the oldest buffer of non-empty class @cls (holder only) */
static inline void *kvpi_bc_front_pop(struct kvpi_bc_front *f, size_t cls)
{
	void *p = f->head[cls];

	f->head[cls] = *(void **)p;
	if (--f->cnt[cls] == 0) {
		size_t g = cls >> 6;
		f->l2[g] &= ~((uint64_t)1 << (cls & 63));
		if (!f->l2[g])
			f->l1 &= ~((uint64_t)1 << g);
	}
	kvpi_bc_front_set(&f->bytes, kvpi_bc_front_get(&f->bytes) - kvpi_bc_front_cap(cls));
	/* Relaxed: a level with one writer, as kvpi_bc_front_set. */
	atomic_store_explicit(&f->nbufs, atomic_load_explicit(&f->nbufs, memory_order_relaxed) - 1,
	                      memory_order_relaxed);
	return p;
}

/* kvpi_bc_front_push - append @p (capacity kvpi_bc_front_cap(@cls)) as the newest of its class */
static inline void kvpi_bc_front_push(struct kvpi_bc_front *f, size_t cls, void *p)
{
	*(void **)p = NULL;
	if (f->cnt[cls]++ == 0) {
		size_t g = cls >> 6;
		f->head[cls] = p;
		f->l2[g] |= (uint64_t)1 << (cls & 63);
		f->l1 |= (uint64_t)1 << g;
	} else {
		*(void **)f->tail[cls] = p;
	}
	f->tail[cls] = p;
	kvpi_bc_front_set(&f->bytes, kvpi_bc_front_get(&f->bytes) + kvpi_bc_front_cap(cls));
	/* Relaxed: a level with one writer, as kvpi_bc_front_set. */
	atomic_store_explicit(&f->nbufs, atomic_load_explicit(&f->nbufs, memory_order_relaxed) + 1,
	                      memory_order_relaxed);
}

/* kvpi_bc_front_ctr_add - add @d to counter @k; only the front's owner thread calls it */
static inline void kvpi_bc_front_ctr_add(struct kvpi_bc_front *f, enum kvpi_bc_ctr k, uint64_t d)
{
	/* Relaxed load + store, no locked instruction: one writer; readers sum. */
	uint64_t v = atomic_load_explicit(&f->ctr[k], memory_order_relaxed);
	atomic_store_explicit(&f->ctr[k], v + d, memory_order_relaxed);
}

/* kvpi_bc_front_alloc - a zeroed, IDLE, untaken front of protocol @asym; NULL when the system fails
 */
struct kvpi_bc_front *kvpi_bc_front_alloc(int asym);

/*
 * kvpi_bc_fronts_drain - claim every front of @c that holds something and empty it
 * @me:      the caller's front (counters), or NULL
 * @buffers: 1: move its buffers to the shared tier and its reservation back;
 *           0: take back its unused reservation only;
 *           KVPI_BC_DRAIN_PARKED: as 1, parked fronts only (no thread owns them)
 *
 * Waits for owners inside a call (a bounded window) and for other drainers.
 * The caller must not hold its own front.  Returns how many buffers moved,
 * plus 1 if any reservation came back.  0 means nothing was reachable.
 */
#define KVPI_BC_DRAIN_PARKED 2
uint64_t kvpi_bc_fronts_drain(struct kvp_bufcache *c, struct kvpi_bc_front *me, int buffers);

/* kvpi_bc_fronts_reserve_sum - unused reservations of fronts other than @me (racy sum) */
size_t kvpi_bc_fronts_reserve_sum(struct kvp_bufcache *c, struct kvpi_bc_front *me);

/*
 * kvpi_bc_front_registry_add / remove - the live-cache registry (thread exit against destroy)
 *
 * Add gives @c the lowest free registry index: c->idx, its slot in every
 * thread's table.  It returns 0, or -1 when the registry could not grow.
 */
int kvpi_bc_front_registry_add(struct kvp_bufcache *c);
void kvpi_bc_front_registry_remove(struct kvp_bufcache *c);

#endif /* KVPOOL_LIB_BUFCACHE_FRONT_H */
