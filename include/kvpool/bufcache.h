/*
 * kvpool/bufcache.h - cache of 256-byte-aligned scratch buffers.
 *
 * Inference runtimes resize scratch buffers and activations token after
 * token; this cache keeps freed buffers and hands them out again, so that
 * the system allocator (page faults, fragmentation) is visited only on a
 * miss.  It keeps the seed dynamic_pool_allocator's single-threaded
 * semantics exactly and adds thread safety with a lock-free hit path.
 *
 * Semantics (exact whenever one thread uses the cache at a time):
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
 * Under concurrency (what holds exactly, and what is approximate):
 *
 * - The budget holds at every instant, not only at quiescence: the bytes
 *   held by the cache never exceed max_cached_bytes (a free reserves its
 *   bytes with a compare-and-swap that cannot pass the budget, before the
 *   buffer becomes visible; a hit releases them after the buffer left).
 *   kvp_bufcache_cached_bytes counts buffers being put in as cached, so it
 *   may run ahead of the buffers actually findable, never past the budget.
 * - Best fit and eviction order are exact per size class: a hit takes the
 *   oldest buffer of the smallest capacity that was visible when its search
 *   passed that capacity; an eviction takes the oldest buffer of the
 *   smallest capacity so visible.  A buffer being put in by another thread at
 *   that moment may be missed (the hit then goes to the next capacity or to
 *   the system, the eviction to the next capacity), and two threads evicting
 *   at once take the two smallest in either order.  A free whose room is
 *   held by reservations still in flight on other threads may evict one
 *   buffer more than a sequential run would, or give its buffer back to the
 *   system when nothing is left to evict.
 * - Counters are exact once the cache is quiescent; a snapshot taken while
 *   threads run is exact per counter at some instant of the call.
 * - Nothing is ever stranded: there are no per-thread caches, every cached
 *   buffer is visible to every thread, to eviction and to
 *   kvp_bufcache_clear/destroy at all times, whatever threads do or exit.
 *
 * Cost: a hit for a capacity up to KVP_BUF_LOCKFREE_MAX (64 MiB) takes no
 * lock and allocates nothing: a bitmap lookup (first non-empty capacity >=
 * the request, O(1)) and a lock-free queue dequeue.  Capacities above 64 MiB
 * are kept per power of two in short sorted lists (at most
 * max_cached_bytes / 64 MiB entries in all), each under its own mutex.  A
 * free allocates nothing either.  Only a miss may allocate metadata (node
 * slab growth, a 4 KiB group of 64 size classes) besides the buffer; if that
 * fails the allocation still succeeds, and the buffer is simply not cached
 * when freed.  Metadata is O(buffers alive + size classes used), freed at
 * destroy.
 *
 * Synchronization:
 *
 *   function                        may run concurrently with       progress
 *   ------------------------------  ------------------------------  ------------------
 *   kvp_bufcache_round              everything                      pure
 *   kvp_bufcache_create             everything (new object)         -
 *   kvp_bufcache_destroy            nothing on the same cache       -
 *   kvp_bufcache_alloc              alloc, free, clear, stats       lock-free (1)
 *   kvp_bufcache_free               alloc, free, clear, stats       lock-free (1)
 *   kvp_bufcache_clear              alloc, free, clear, stats       lock-free (1)
 *   kvp_bufcache_cached_bytes       everything but destroy          wait-free
 *   kvp_bufcache_get_stats          everything but destroy          wait-free
 *   kvp_bufcache_stats_to_prometheus everything (reads a copy)      pure
 *
 * (1) Lock-free as long as only buffers up to 64 MiB are involved: a hit,
 *     free or eviction that must look at or move a buffer above 64 MiB
 *     takes that power-of-two list's mutex (only when such buffers are
 *     cached), and a miss goes to the system allocator and may take the
 *     metadata-growth mutexes (node slab, size-class groups), which no hit
 *     or free ever takes.
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
 * least recently cached among equals).  A miss allocates
 * kvp_bufcache_round(@requested) bytes from the system, evicting cached
 * buffers smallest-first and retrying while the system allocator fails.
 * The contents of the buffer are undefined.
 *
 * Returns the buffer, or NULL (with *@actual = 0) when @c or @actual is
 * NULL, when @requested > KVP_BUF_MAX_REQUEST, or when the system allocator
 * failed with nothing left to evict.  Thread-safe; a hit of up to 64 MiB is
 * lock-free and allocates nothing.
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
 * Thread-safe; lock-free and allocation-free for capacities up to 64 MiB.
 */
void kvp_bufcache_free(kvp_bufcache *c, void *ptr, size_t actual);

/**
 * kvp_bufcache_clear - give every cached buffer back to the system
 * @c: the cache (NULL is a no-op)
 *
 * Gives back at most as many buffers as the cache held when the call
 * started, so it returns even while other threads keep freeing: buffers
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
 * Never exceeds max_cached_bytes.  Thread-safe, wait-free.
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
 * wait-free: sums per-shard stripes and the counts of the size classes in
 * use (64 per 4 KiB group that a miss ever created).
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
