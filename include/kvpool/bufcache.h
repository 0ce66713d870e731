/*
 * kvpool/bufcache.h - cache of 256-byte-aligned scratch buffers.
 *
 * Inference runtimes resize scratch buffers and activations token after
 * token; this cache keeps freed buffers and hands them out again, so that
 * the system allocator (page faults, fragmentation) is visited only on a
 * miss.  It keeps the single-threaded reference allocator's
 * semantics exactly and adds thread safety, with a per-thread front that
 * serves most hits and frees without touching shared memory.
 *
 * Semantics (exact while a single thread uses the cache):
 *
 * - Every pointer returned is KVP_BUF_ALIGN (256) byte aligned; *actual is
 *   its true capacity, a multiple of 256, and is what kvp_bufcache_free must
 *   be given back.
 * - Rounding: kvp_bufcache_round(r) = r + r/8 rounded up to 256, with 0
 *   giving 256 and r > KVP_BUF_MAX_REQUEST giving 0 (checked before the
 *   addition, so it cannot overflow).  round(0) = round(200) = 256,
 *   round(256) = round(257) = 512, round(1024) = 1280.
 * - Hit: the smallest cached buffer whose capacity is >= requested (the
 *   request itself, not its rounding); among several of that capacity, the
 *   least recently cached.  Miss: kvp_bufcache_round(requested) bytes from
 *   the system.
 * - Budget: a freed buffer is cached while cached bytes stay within
 *   max_cached_bytes.  To make room the cache evicts its smallest buffer
 *   first, the least recently cached among equal capacities, until the new
 *   one fits.  A buffer larger than the whole budget goes straight back to
 *   the system.
 * - Out of memory: when the system allocator fails, the cache evicts its
 *   smallest buffer (same order) and retries, until the allocation succeeds
 *   or nothing is cached; then kvp_bufcache_alloc returns NULL.
 *
 * "A single thread" means that every kvp_bufcache_alloc, _free and _clear
 * since kvp_bufcache_create came from one and the same thread (not
 * necessarily the creating one).  With several threads, even taking turns,
 * the rules below apply instead.
 *
 * Structure: each thread that calls the cache has a front for it, holding
 * up to 32 buffers per capacity for capacities up to 128 KiB
 * (KVP_BUF_FRONT_MAX), at most min(max_cached_bytes / 8, 8 MiB) bytes in
 * all; behind the fronts is a shared tier that every thread reaches.  A
 * free goes to the caller's front (what overflows it moves, oldest first,
 * to the shared tier).  Every cache a thread uses has its own front, found
 * in a thread-local table indexed by cache (any number of caches per thread
 * and per process).  An exiting thread parks its fronts with their
 * buffers; the next thread to call that cache without a front takes a
 * parked one whole, so it starts with the buffers the exited thread held.
 *
 * Under concurrency (several threads with fronts):
 *
 * - Which buffer a hit returns: the smallest buffer of the caller's own
 *   front whose capacity is >= requested, unless the shared tier holds a
 *   fitting buffer of that capacity or smaller; then the shared tier's best
 *   fit (smallest fitting capacity, least recently put there).  Buffers in
 *   other threads' fronts, parked ones included, are not searched by a hit:
 *   a hit may return a larger buffer than the smallest cached anywhere, or
 *   a miss may allocate while another front holds a fitting buffer.
 * - Budget: the bytes held by the cache (buffers in fronts and in the
 *   shared tier) never exceed max_cached_bytes, at any instant.  A front
 *   reserves budget in batches of max_cached_bytes / 256 (at most 1 MiB,
 *   rounded down to 256) and keeps at most two batches reserved but unused,
 *   so that its frees and hits write no shared counter.  Those unused
 *   reservations (at most 2 * batch per thread, held until the thread's
 *   next call, its exit, or a claim) are the only slack: they are not
 *   cached bytes, but they are room other threads cannot use until taken
 *   back.  A free that finds the budget full takes them back from the
 *   other fronts as soon as they cover what it lacks, and evicts (smallest
 *   first) only while they do not.
 *   kvp_bufcache_cached_bytes and peak_cached_bytes leave out the
 *   reservations; while threads run they may count a reservation being
 *   taken or given back as cached (never past the budget).
 * - Eviction order: fronts parked by exited threads are first moved to the
 *   shared tier.  Then the smallest buffer of the evicting thread's front
 *   and of the shared tier goes, the shared one on a tie (the least
 *   recently cached first within either).  Only when both are empty are
 *   the other live fronts claimed and moved to the shared tier (oldest
 *   first per capacity), and the smallest of them is evicted.  Two threads
 *   evicting at once may take the two smallest in either order.
 * - No false exhaustion: before a free gives its buffer to the system for
 *   lack of room, and before kvp_bufcache_alloc returns NULL, every buffer
 *   in every thread's front (idle, blocked or busy threads alike) has been
 *   reachable: a thread that finds nothing else to evict claims the other
 *   fronts itself (waiting at most for an owner to finish the call it is
 *   in) and moves their buffers to the shared tier.  A buffer freed into a
 *   front after that pass is a later event.
 * - A buffer being put in by another thread at the instant a hit or an
 *   eviction searches the shared tier may be missed (the search goes on to
 *   the next capacity, or the system).
 * - Counters are exact once the cache is quiescent; a snapshot taken while
 *   threads run is exact per counter at some instant of the call.
 * - Nothing is stranded: an exiting thread's fronts are parked (pthread key
 *   destructor) for the next thread and reached by evictions, out-of-memory
 *   retries and clear like any front; kvp_bufcache_clear claims and empties
 *   every front, and kvp_bufcache_destroy frees every front's buffers,
 *   whatever the threads that own them are doing.
 *
 * Cost: a hit or a free served by the caller's front takes no lock, no
 * locked instruction and allocates nothing: a thread-local table lookup
 * (the same for every cache a thread uses), a store and a load that hold
 * the front against claims, the front's two-level bitmap, one read of the
 * shared tier's bitmap, and the front's own counters.  It does not depend
 * on how many threads came and went before.  The shared tier, used when the front cannot serve the
 * call, takes no lock for capacities up to KVP_BUF_LOCKFREE_MAX (64 MiB): a three-level bitmap
 * lookup (first non-empty capacity >= the request, O(1)) and a lock-free queue.  Capacities above
 * 64 MiB are kept per power of two in short sorted lists (at most max_cached_bytes / 64 MiB entries
 * in all), each under its own mutex.  Only a miss may allocate metadata
 * (node slab growth, a 4 KiB group of 64 size classes) besides the buffer,
 * and a thread's first call on a cache takes a parked front or makes one
 * (about 9 KiB; its table grows to the caches' count); if either fails the
 * call still succeeds (a thread without a front uses the shared tier).
 * Claiming fronts (eviction with both the caller's front and the shared
 * tier empty, a full budget with reservations held elsewhere, clear) costs
 * one membarrier(2) system call (or, where the kernel lacks it, under
 * ThreadSanitizer or with KVPOOL_FORCE_FALLBACK=1 set when the cache was
 * made, each front owner pays a locked store per call instead; should
 * membarrier be denied after start-up, an mprotect of one page takes its
 * place) plus a visit to every front.
 * Metadata is O(buffers alive + size classes used + threads), freed at
 * destroy.
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
 * (1) Threads that used the cache may still be running or exit during or
 *     after destroy (a registry of live caches, under a process-wide mutex,
 *     keeps their exit from touching a destroyed cache); they must not call
 *     it again.
 * (2) A call served by the caller's front is wait-free.  The shared tier is
 *     lock-free up to 64 MiB; a buffer above 64 MiB takes its power-of-two
 *     list's mutex; a miss may take the metadata-growth mutexes; a thread's
 *     first call on a cache, and its exit, take the registry mutex once.  A
 *     call that must claim other fronts waits for each owner to leave the
 *     call it is in (a few dozen instructions unless that thread is
 *     preempted).
 *
 * No function aborts or prints.  Callers need no registration: any thread
 * may allocate, and any thread may free a buffer any other thread allocated.
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
 * No other thread may use @c during or after the call.  Buffers still handed
 * out are not touched: they are plain system memory (posix_memalign) from
 * then on, which the caller releases with free(3), never with this cache.
 */
void kvp_bufcache_destroy(kvp_bufcache *c);

/**
 * kvp_bufcache_alloc - a 256-byte-aligned buffer of at least @requested bytes
 * @c:         the cache
 * @requested: bytes needed (0 is valid and gives at least 256)
 * @actual:    set to the buffer's true capacity, or 0 on failure; must not be NULL
 *
 * A hit returns the smallest cached buffer with capacity >= @requested (the
 * least recently cached among equals; with several threads, the rule for
 * fronts above).  A miss allocates
 * kvp_bufcache_round(@requested) bytes from the system, evicting cached
 * buffers smallest-first and retrying while the system allocator fails.
 * The contents of the buffer are undefined.
 *
 * Returns the buffer, or NULL (with *@actual = 0) when @c or @actual is
 * NULL, when @requested > KVP_BUF_MAX_REQUEST, or when the system allocator
 * failed with nothing left to evict (every front included).  Thread-safe; a
 * hit from the caller's front is wait-free, a hit of up to 64 MiB from the
 * shared tier lock-free, and neither allocates.
 */
void *kvp_bufcache_alloc(kvp_bufcache *c, size_t requested, size_t *actual);

/**
 * kvp_bufcache_free - give a buffer back to the cache
 * @c:      the cache the buffer came from
 * @ptr:    the buffer (NULL is a no-op)
 * @actual: the capacity kvp_bufcache_alloc stored in *actual for @ptr
 *
 * The buffer is cached if it fits in the budget (after evicting smaller
 * buffers, see above); a buffer larger than max_cached_bytes is given
 * straight back to the system.  Any thread may free a buffer any other
 * thread allocated.
 *
 * Passing a pointer that did not come from @c, or any @actual other than
 * the one alloc reported, is the caller's bug: the cache would later hand
 * the buffer out with a wrong capacity.  The cheap checks are made (an
 * @actual that is 0 or not a multiple of 256, a misaligned @ptr): such a
 * buffer is given to the system allocator's free instead of being cached.
 * Thread-safe; wait-free into the caller's front, lock-free into the shared
 * tier for capacities up to 64 MiB, and allocation-free.
 */
void kvp_bufcache_free(kvp_bufcache *c, void *ptr, size_t actual);

/**
 * kvp_bufcache_clear - give every cached buffer back to the system
 * @c: the cache (NULL is a no-op)
 *
 * Claims every thread's front and moves its buffers to the shared tier,
 * then gives back at most as many buffers as that tier then holds, so it
 * returns even while other threads keep freeing: buffers
 * freed by other threads while clear runs may stay cached (and stand in
 * for ones a concurrent hit took).  A clear with no concurrent free leaves
 * nothing cached.  Cleared buffers count as system frees, not as evictions.
 * Thread-safe.
 */
void kvp_bufcache_clear(kvp_bufcache *c);

/**
 * kvp_bufcache_cached_bytes - bytes currently held (or being put in) by the cache
 * @c: the cache (NULL gives 0)
 *
 * Leaves out the fronts' unused reservations; never exceeds
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
 * At quiescence: system_allocs - system_frees = buffers handed out + cached
 * buffers, and bytes_in_use = capacity handed out.  While threads run each
 * event counter is exact at some instant of the call (see above); the
 * levels (cached_buffers, bytes_in_use) are derived from the per-class
 * counts and the cache's byte counters and may be off by the operations in
 * flight.
 *
 * Returns KVP_OK, or KVP_EINVAL when @c or @out is NULL.  Thread-safe,
 * wait-free: sums per-shard stripes, every front's counters, and the counts
 * of the size classes in use (64 per 4 KiB group that a miss ever created).
 */
int kvp_bufcache_get_stats(kvp_bufcache *c, kvp_bufcache_stats *out);

/**
 * kvp_bufcache_stats_to_prometheus - Prometheus text exposition of a snapshot
 * @s:      the snapshot
 * @prefix: metric name prefix ([a-zA-Z_:][a-zA-Z0-9_:]*), NULL for "kvpool_bufcache"
 * @buf:    output buffer (may be NULL when @cap is 0)
 * @cap:    its capacity in bytes
 * @len:    set to the text's length without a NUL (or the length needed)
 *
 * Counters <prefix>_hits_total, _misses_total, _evictions_total,
 * _oom_retries_total, _system_allocs_total, _system_frees_total; gauges
 * _cached_bytes, _peak_cached_bytes, _cached_buffers, _bytes_in_use; each
 * with # HELP and # TYPE lines, newline-terminated, values as plain
 * integers.  `promtool check metrics` accepts the text.  It is
 * NUL-terminated when it fits with its NUL.
 *
 * Returns KVP_OK, KVP_ERANGE when @cap < *@len + 1 (with *@len set to the
 * length needed and @buf an empty string when @cap > 0), or KVP_EINVAL for
 * NULL @s/@len, NULL @buf with @cap > 0, or an invalid @prefix.  Pure;
 * thread-safe.
 */
int kvp_bufcache_stats_to_prometheus(const kvp_bufcache_stats *s, const char *prefix, char *buf,
                                     size_t cap, size_t *len);

#ifdef __cplusplus
}
#endif
#endif /* KVPOOL_BUFCACHE_H */
