/*
 * kvpool/bufcache.h - cache of 256-byte-aligned scratch buffers.
 *
 * Inference runtimes resize scratch buffers and activations token after
 * token.  This cache keeps freed buffers and hands them out again.  So the
 * system allocator (page faults, fragmentation) is visited only on a miss.
 * The cache keeps the semantics of the single-threaded reference algorithm
 * exactly (docs/BUFCACHE.md), and adds thread safety.  A per-thread front
 * serves most hits and frees without touching shared memory.
 *
 * Semantics (exact while a single thread uses the cache):
 *
 * - Alignment: every pointer returned is KVP_BUF_ALIGN (256) byte aligned.
 *   *actual is its true capacity, a multiple of 256.  It is what
 *   kvp_bufcache_free must be given back.
 * - Rounding: kvp_bufcache_round(r) = r + r/8 rounded up to 256.  Zero gives
 *   256, and r > KVP_BUF_MAX_REQUEST gives 0.  That check comes before the
 *   addition, so the addition cannot overflow.  Examples: round(0) =
 *   round(200) = 256, round(256) = round(257) = 512, round(1024) = 1280.
 * - Hit: the smallest cached buffer whose capacity is >= requested.  The
 *   request itself counts, not its rounding.  Among several buffers of that
 *   capacity, the least recently cached one.
 * - Miss: kvp_bufcache_round(requested) bytes from the system.
 * - Budget: a freed buffer is cached while cached bytes stay within
 *   max_cached_bytes.  To make room the cache evicts its smallest buffer
 *   first, the least recently cached among equal capacities, until the new
 *   one fits.  A buffer larger than the whole budget goes straight back to
 *   the system.
 * - Out of memory: when the system allocator fails, the cache evicts its
 *   smallest buffer (same order) and retries.  It stops when the allocation
 *   succeeds or nothing is cached; kvp_bufcache_alloc then returns NULL.
 *
 * "A single thread" means that every kvp_bufcache_alloc, _free and _clear
 * since kvp_bufcache_create came from one and the same thread.  That need
 * not be the creating thread.  With several threads, even taking turns,
 * the rules below apply instead.
 *
 * Structure.  Each thread that calls the cache has a front for it.  A front
 * holds up to 32 buffers per capacity, for capacities up to 128 KiB
 * (KVP_BUF_FRONT_MAX).  It holds at most min(max_cached_bytes / 8, 8 MiB)
 * bytes in all.  Behind the fronts is a shared tier that every thread
 * reaches.  A free goes to the caller's front.  What overflows the front
 * moves to the shared tier, oldest first.
 *
 * Every cache a thread uses has its own front.  The thread finds it in a
 * thread-local table indexed by cache.  Any number of caches may exist per
 * thread and per process.  An exiting thread parks its fronts with their
 * buffers.  The next thread to call that cache without a front takes a
 * parked one whole.  So it starts with the buffers the exited thread held.
 *
 * Under concurrency (several threads with fronts):
 *
 * - Which buffer a hit returns.  Normally it is the smallest buffer of the
 *   caller's own front whose capacity is >= requested.  If the shared
 *   tier holds a fitting buffer of that capacity or smaller, the hit
 *   returns the shared tier's best fit instead: the smallest fitting
 *   capacity, least recently put there.  A hit does not search buffers in other
 *   threads' fronts, parked ones included.  So a hit may return a larger
 *   buffer than the smallest cached anywhere.  And a miss may allocate
 *   while another front holds a fitting buffer.
 * - Budget.  The bytes held by the cache (buffers in fronts and in the
 *   shared tier) never exceed max_cached_bytes, at any instant.  A front
 *   reserves budget in batches of max_cached_bytes / 256, at most 1 MiB,
 *   rounded down to 256.  It keeps at most two batches reserved but
 *   unused.  So its frees and hits write no shared counter.
 * - Reservations are the only slack.  A thread holds at most 2 * batch
 *   unused, until its next call, its exit, or a claim.  Those bytes are not
 *   cached bytes.  But they are room other threads cannot use until it is
 *   taken back.  A free that finds the budget full takes reservations back
 *   from the other fronts, as soon as they cover what it lacks.  It evicts
 *   (smallest first) only while they do not.
 * - kvp_bufcache_cached_bytes and peak_cached_bytes leave out the
 *   reservations.  While threads run, they may count a reservation being
 *   taken or given back as cached, but never past the budget.
 * - Eviction order.  Fronts parked by exited threads are first moved to
 *   the shared tier.  Then the smallest buffer of the evicting thread's
 *   front and of the shared tier goes; the shared one goes on a tie.
 *   Within either, the least recently cached goes first.  Only when both
 *   are empty are the other live fronts claimed.  Their buffers move to the
 *   shared tier (oldest first per capacity), and the smallest of them is
 *   evicted.  Two threads evicting at once may take the two smallest in
 *   either order.
 * - No false exhaustion.  A free may give its buffer to the system for lack
 *   of room, and kvp_bufcache_alloc may return NULL.  Before either, every
 *   buffer in every thread's front has been reachable: idle, blocked or
 *   busy threads alike.  A thread that finds nothing else to evict claims
 *   the other fronts itself.  It waits at most for an owner to finish the
 *   call it is in.  It moves their buffers to the shared tier.  A buffer
 *   freed into a front after that pass is a later event.
 * - A search of the shared tier may miss a buffer that another thread puts
 *   in at that instant.  This holds for hits and evictions alike.  The
 *   search goes on to the next capacity, or to the system.
 * - Counters are exact once the cache is quiescent.  A snapshot taken while
 *   threads run is exact per counter at some instant of the call.
 * - Nothing is stranded.  An exiting thread's fronts are parked for the
 *   next thread, by a pthread key destructor.  Evictions, out-of-memory
 *   retries and clear reach them like any front.  kvp_bufcache_clear
 *   claims and empties every front.  kvp_bufcache_destroy frees every
 *   front's buffers, whatever the threads that own them are doing.
 *
 * Cost of a front hit or free.  A hit or a free served by the caller's
 * front takes no lock, no locked instruction and allocates nothing.  It
 * costs:
 *   - a thread-local table lookup, the same for every cache a thread uses;
 *   - a store and a load that hold the front against claims;
 *   - the front's two-level bitmap;
 *   - one read of the shared tier's bitmap;
 *   - the front's own counters.
 * It does not depend on how many threads came and went before.
 *
 * Cost of the shared tier.  The shared tier serves what the front cannot.
 * It takes no lock for capacities up to KVP_BUF_LOCKFREE_MAX (64 MiB).
 * There it does a three-level bitmap lookup (first non-empty capacity >=
 * the request, O(1)) and uses a lock-free queue.  Capacities above 64 MiB
 * are kept per power of two in short sorted lists, each under its own
 * mutex.  Those lists hold at most max_cached_bytes / 64 MiB entries in
 * all.
 *
 * Metadata.  Only a miss may allocate metadata besides the buffer: node
 * slab growth, or a 4 KiB group of 64 size classes.  A thread's first call
 * on a cache takes a parked front or makes one, of about 9 KiB.  Its table
 * then grows to the caches' count.  If either allocation fails, the call
 * still succeeds: a thread without a front uses the shared tier.  Metadata
 * is O(buffers alive + size classes used + threads), freed at destroy.
 *
 * Claiming fronts.  Three things claim fronts: an eviction with both the
 * caller's front and the shared tier empty, a full budget with
 * reservations held elsewhere, and clear.  A claim costs one membarrier(2)
 * system call plus a visit to every front.  Some setups have no
 * membarrier: a kernel that lacks it, ThreadSanitizer builds, and caches
 * made with KVPOOL_FORCE_FALLBACK=1 set.  There each front owner pays a
 * locked store per call instead.  Should membarrier be denied after
 * start-up, an mprotect of one page takes its place.
 *
 * Synchronization:
 *
 *   function                        may run concurrently with       progress
 *   ------------------------------  ------------------------------  ------------------
 *   kvp_bufcache_round              everything                      pure
 *   kvp_bufcache_create             everything (new object)         -
 *   kvp_bufcache_destroy            nothing on the same cache (1)   -
 *   kvp_bufcache_alloc              alloc, free, clear, stats       see (2)
 *   kvp_bufcache_free               alloc, free, clear, stats       see (2)
 *   kvp_bufcache_clear              alloc, free, clear, stats       see (2)
 *   kvp_bufcache_cached_bytes       everything but destroy          wait-free, O(threads)
 *   kvp_bufcache_get_stats          everything but destroy          wait-free, O(threads)
 *   kvp_bufcache_stats_to_prometheus everything (reads a copy)      pure
 *
 * (1) Threads that used the cache may still be running, or exit, during or
 *     after destroy.  A registry of live caches, under a process-wide
 *     mutex, keeps their exit from touching a destroyed cache.  They must
 *     not call the cache again.
 * (2) A call served by the caller's front is wait-free.  The shared tier is
 *     lock-free up to 64 MiB.  A buffer above 64 MiB takes its
 *     power-of-two list's mutex.  A miss may take the metadata-growth
 *     mutexes.  A thread's first call on a cache takes a parked front with a
 *     CAS, or makes one; it takes no kvpool mutex.  A thread's exit takes the
 *     registry mutex once.  A call that must claim other fronts waits for
 *     each owner to leave the call it is in.  That is a few dozen
 *     instructions, unless that thread is preempted.
 *
 * No function aborts or prints.  Callers need no registration.  Any thread
 * may allocate, and any thread may free a buffer any other thread
 * allocated.
 */
#ifndef KVPOOL_BUFCACHE_H
#define KVPOOL_BUFCACHE_H

#include <stddef.h>
#include <stdint.h>

#include <kvpool/status.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KVP_BUF_ALIGN       256
#define KVP_BUF_MAX_REQUEST (((SIZE_MAX - KVP_BUF_ALIGN) / 9) * 8)
/* Capacities up to this have their own lock-free size class (hit and free take no lock). */
#define KVP_BUF_LOCKFREE_MAX ((size_t)64 << 20)
/* Capacities up to this are kept in the calling thread's front (see above). */
#define KVP_BUF_FRONT_MAX ((size_t)128 << 10)

typedef struct kvp_bufcache kvp_bufcache;

/**
 * kvp_bufcache_round - the capacity a miss allocates for @requested bytes
 * @requested: bytes asked for
 *
 * Returns @requested + @requested / 8 rounded up to a multiple of 256, 256
 * for 0, and 0 when @requested > KVP_BUF_MAX_REQUEST.  Pure; thread-safe.
 */
size_t kvp_bufcache_round(size_t requested);

/**
 * kvp_bufcache_create - make an empty cache
 * @max_cached_bytes: budget of bytes the cache may hold (0: cache nothing)
 * @out:              set to the new cache (NULL on failure)
 *
 * Returns KVP_OK, KVP_EINVAL when @out is NULL, or KVP_ENOMEM.
 * Thread-safe (creates a new object).
 */
int kvp_bufcache_create(size_t max_cached_bytes, kvp_bufcache **out);

/**
 * kvp_bufcache_destroy - give every cached buffer back to the system and free the cache
 * @c: the cache (NULL is a no-op)
 *
 * No other thread may use @c during or after the call.  Buffers still
 * handed out are not touched.  They are plain system memory
 * (posix_memalign) from then on.  The caller releases them with free(3),
 * never with this cache.
 */
void kvp_bufcache_destroy(kvp_bufcache *c);

/**
 * kvp_bufcache_alloc - a 256-byte-aligned buffer of at least @requested bytes
 * @c:         the cache
 * @requested: bytes needed (0 is valid and gives at least 256)
 * @actual:    set to the buffer's true capacity, or 0 on failure; must not be NULL
 *
 * A hit returns the smallest cached buffer with capacity >= @requested,
 * the least recently cached among equals.  With several threads the rule
 * for fronts above applies.  A miss allocates kvp_bufcache_round(@requested)
 * bytes from the system.  While the system allocator fails, it evicts
 * cached buffers smallest-first and retries.  The contents of the buffer
 * are undefined.
 *
 * Returns the buffer, or NULL with *@actual = 0.  NULL comes back when @c
 * or @actual is NULL, when @requested > KVP_BUF_MAX_REQUEST, or when the
 * system allocator failed with nothing left to evict (every front
 * included).  Thread-safe.  A hit from the caller's front is wait-free.  A
 * hit of up to 64 MiB from the shared tier is lock-free.  Neither
 * allocates.
 */
void *kvp_bufcache_alloc(kvp_bufcache *c, size_t requested, size_t *actual);

/**
 * kvp_bufcache_free - give a buffer back to the cache
 * @c:      the cache the buffer came from
 * @ptr:    the buffer (NULL is a no-op)
 * @actual: for @ptr, the capacity kvp_bufcache_alloc stored in *actual
 *
 * The buffer is cached if it fits in the budget, after evicting smaller
 * buffers (see above).  A buffer larger than max_cached_bytes goes
 * straight back to the system.  Any thread may free a buffer any other
 * thread allocated.
 *
 * Passing a pointer that did not come from @c is the caller's bug.  So is
 * any @actual other than the one alloc reported.  The cache would later
 * hand the buffer out with a wrong capacity.  The cheap checks are made:
 * an @actual that is 0 or not a multiple of 256, and a misaligned @ptr.
 * Such a buffer goes to the system allocator's free instead of being
 * cached.
 *
 * Thread-safe and allocation-free.  Wait-free into the caller's front;
 * lock-free into the shared tier for capacities up to 64 MiB.
 */
void kvp_bufcache_free(kvp_bufcache *c, void *ptr, size_t actual);

/**
 * kvp_bufcache_clear - give every cached buffer back to the system
 * @c: the cache (NULL is a no-op)
 *
 * Claims every thread's front and moves its buffers to the shared tier.
 * Then gives back at most as many buffers as that tier then holds.  So it
 * returns even while other threads keep freeing.  Buffers freed by other
 * threads while clear runs may stay cached, standing in for ones a
 * concurrent hit took.  A clear with no concurrent free leaves nothing
 * cached.  Cleared buffers count as system frees, not as evictions.
 * Thread-safe.
 */
void kvp_bufcache_clear(kvp_bufcache *c);

/**
 * kvp_bufcache_cached_bytes - bytes currently held (or being put in) by the cache
 * @c: the cache (NULL gives 0)
 *
 * Leaves out the fronts' unused reservations.  Never exceeds
 * max_cached_bytes.  Thread-safe, wait-free, O(threads that used @c).
 */
size_t kvp_bufcache_cached_bytes(kvp_bufcache *c);

typedef struct kvp_bufcache_stats {
	uint64_t hits;              /* allocations served from the cache */
	uint64_t misses;            /* allocations that went to the system (failed ones too) */
	uint64_t evictions;         /* buffers evicted for the budget or an OOM retry */
	uint64_t oom_retries;       /* system allocations retried after an eviction */
	uint64_t system_allocs;     /* buffers obtained from the system */
	uint64_t system_frees;      /* buffers given back to the system (evicted, cleared,
	                               too large, or over budget) */
	uint64_t cached_bytes;      /* as kvp_bufcache_cached_bytes */
	uint64_t peak_cached_bytes; /* highest cached_bytes so far */
	uint64_t cached_buffers;    /* buffers held by the cache */
	uint64_t bytes_in_use;      /* capacity handed out and not yet freed */
} kvp_bufcache_stats;

/**
 * kvp_bufcache_get_stats - snapshot of the cache's counters
 * @c:   the cache
 * @out: where to write the snapshot
 *
 * At quiescence, system_allocs - system_frees = buffers handed out +
 * cached buffers.  Also bytes_in_use = capacity handed out.  While threads
 * run, each event counter is exact at some instant of the call (see
 * above).  The levels (cached_buffers, bytes_in_use) are derived from the
 * per-class counts and the cache's byte counters.  They may be off by the
 * operations in flight.
 *
 * Returns KVP_OK, or KVP_EINVAL when @c or @out is NULL.  Thread-safe and
 * wait-free.  It sums per-shard stripes, every front's counters, and the
 * counts of the size classes in use: 64 per 4 KiB group that a miss ever
 * created.
 */
int kvp_bufcache_get_stats(kvp_bufcache *c, kvp_bufcache_stats *out);

/**
 * kvp_bufcache_stats_to_prometheus - Prometheus text exposition of a snapshot
 * @s:      the snapshot
 * @prefix: metric name prefix, NULL for "kvpool_bufcache"
 * @buf:    output buffer (may be NULL when @cap is 0)
 * @cap:    its capacity in bytes
 * @len:    set to the text's length without a NUL (or the length needed)
 *
 * A valid @prefix matches [a-zA-Z_:][a-zA-Z0-9_:]*.  The families are:
 *   - counters <prefix>_hits_total, _misses_total, _evictions_total,
 *     _oom_retries_total, _system_allocs_total, _system_frees_total;
 *   - gauges _cached_bytes, _peak_cached_bytes, _cached_buffers,
 *     _bytes_in_use.
 *
 * Each comes with # HELP and # TYPE lines, newline-terminated, and values
 * as plain integers.  `promtool check metrics` accepts the text.  It is
 * NUL-terminated when it fits with its NUL.
 *
 * Returns:
 *   - KVP_OK;
 *   - KVP_ERANGE when @cap < *@len + 1, with *@len set to the length
 *     needed and @buf an empty string when @cap > 0;
 *   - KVP_EINVAL for NULL @s/@len, NULL @buf with @cap > 0, or an invalid
 *     @prefix.
 *
 * Pure; thread-safe.
 */
int kvp_bufcache_stats_to_prometheus(const kvp_bufcache_stats *s, const char *prefix, char *buf,
                                     size_t cap, size_t *len);

#ifdef __cplusplus
}
#endif
#endif /* KVPOOL_BUFCACHE_H */
