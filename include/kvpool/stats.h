/*
 * kvpool/stats.h - block pool statistics, history and Prometheus export.
 *
 * Synchronization:
 *
 *   function                    may run concurrently with         progress
 *   --------------------------  --------------------------------  ----------
 *   kvp_pool_stats              every pool call                   wait-free in
 *                                                                 #threads seen
 *   kvp_pool_history            every pool call                   one history lock
 *   kvp_stats_* (pure helpers)  everything (they read a copy)     wait-free
 *
 * Counters are kept per thread (one cache-line padded slot per thread that
 * ever used the pool, written only by that thread with relaxed atomics) and
 * summed when read.  A snapshot taken while other threads run is therefore
 * not an atomic cut: each counter is exact at some instant during the call,
 * and once the pool is quiescent every figure is exact.
 */
#ifndef KVPOOL_STATS_H
#define KVPOOL_STATS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Declared once for C99 too (a repeated typedef is C11 only): stats.h and pool.h both need it. */
#ifndef KVP_POOL_TYPEDEF
#define KVP_POOL_TYPEDEF
typedef struct kvp_pool kvp_pool;
#endif

typedef struct kvp_stats {
	uint64_t n_blocks;           /* blocks the pool manages now */
	uint64_t n_allocations;      /* blocks handed out, cumulative */
	uint64_t n_frees;            /* blocks returned, cumulative */
	uint64_t n_reused;           /* allocations served by a block freed before */
	uint64_t n_exhausted;        /* allocate calls that failed for want of blocks */
	uint64_t n_grown;            /* blocks added by growth */
	uint64_t n_retired;          /* blocks removed by shrink */
	uint64_t peak_blocks_in_use; /* high-water mark of blocks in use */
	uint64_t n_not_full;         /* blocks in use whose n_used < block_size */
	uint64_t n_stale_frees;      /* frees skipped: already free or stale generation */
	/* Prefix cache (kvpool/prefix.h); all 0 when the pool has it off. */
	uint64_t n_cached;         /* published blocks nobody holds, still findable (free) */
	uint64_t n_prefix_queries; /* keys asked for by kvp_prefix_match, cumulative */
	uint64_t n_prefix_hits;    /* blocks kvp_prefix_match handed out, cumulative */
	uint64_t n_evictions;      /* cached blocks evicted, cumulative */
} kvp_stats;

/**
 * kvp_pool_stats - sum the pool's counters into @out
 * @pool: the pool
 * @out:  where to write the snapshot
 *
 * peak_blocks_in_use is exact when one thread uses the pool.  With several
 * threads it holds four promises:
 *   - it never reports a peak that did not happen;
 *   - it may miss one by the blocks each other thread has allocated but not
 *     yet published: at most KVP_PEAK_BATCH when the pool was near its peak
 *     as that thread last published, else at most that thread's share of
 *     the distance to the peak then (the distance divided by the number of
 *     threads that have used the pool).  A thread publishes every net free
 *     at once, and its allocations once they pass that room, so threads
 *     working below the peak touch no shared word for it;
 *   - it is never below the blocks in use at the time of the call when no
 *     other thread allocates or frees during it (with calls racing it, it
 *     may trail a count that moved during the call by what moved);
 *   - it never decreases from one call to the next.
 *
 * Returns KVP_OK, or KVP_EINVAL when @pool or @out is NULL.
 * Thread-safe; reads a per-thread slot list, takes no lock.
 */
int kvp_pool_stats(kvp_pool *pool, kvp_stats *out);

/**
 * kvp_pool_history - copy the recorded snapshots, oldest first
 * @pool: the pool
 * @out:  array of @cap snapshots (may be NULL when @cap is 0)
 * @cap:  capacity of @out
 *
 * A snapshot is recorded by the first mutating call on the pool, by every
 * growth, every shrink and every exhausted allocate, and by each thread once
 * every KVP_HISTORY_EVERY mutating calls it makes.  The ring keeps the newest
 * history_len snapshots.  Recording takes the history lock; the ordinary
 * allocate/free path never does.
 *
 * Returns the number of snapshots written: min(@cap, snapshots held).
 * Returns 0 for a NULL @pool.  Thread-safe (takes the history lock).
 */
size_t kvp_pool_history(kvp_pool *pool, kvp_stats *out, size_t cap);

/** kvp_stats_blocks_in_use - n_allocations - n_frees (0 for NULL) */
uint64_t kvp_stats_blocks_in_use(const kvp_stats *s);

/** kvp_stats_fragmentation - n_not_full / n_blocks (0.0 for NULL or no blocks) */
double kvp_stats_fragmentation(const kvp_stats *s);

/**
 * kvp_stats_format - the one-line AllocationStats(...) summary
 * @s:   the snapshot
 * @buf: output buffer
 * @cap: its capacity in bytes, NUL included
 *
 * Writes e.g. "AllocationStats(in_use=3/64, allocations=3, frees=0,
 * reused=0, exhausted=0, grown=0, retired=0, peak=3, fragmentation=0.016)"
 * (one line, fragmentation with three decimals).
 *
 * Returns the length written without the NUL, KVP_ERANGE when @cap is too
 * small (then @buf holds no partial line beyond an empty string when
 * @cap > 0), or KVP_EINVAL for NULL arguments.  Pure; thread-safe.
 */
int kvp_stats_format(const kvp_stats *s, char *buf, size_t cap);

/**
 * kvp_stats_to_prometheus - Prometheus text exposition of a snapshot
 * @s:      the snapshot
 * @prefix: metric name prefix, NULL for "kvpool_block_pool"
 * @buf:    output buffer (may be NULL when @cap is 0)
 * @cap:    its capacity in bytes
 * @len:    set to the text's length without a NUL (or the length needed)
 *
 * A valid @prefix matches [a-zA-Z_:][a-zA-Z0-9_:]*.  The families are:
 *   - gauges <prefix>_blocks_in_use, _blocks_managed, _fragmentation,
 *     _usage_ratio (blocks in use / blocks managed, 0 when none are
 *     managed), _peak_blocks_in_use;
 *   - counters _allocations_total, _frees_total, _reused_total,
 *     _exhausted_total, _grown_total, _retired_total, _stale_frees_total;
 *   - for the prefix cache (kvpool/prefix.h; 0 when it is off), the gauge
 *     _cached_blocks and the counters _prefix_queries_total,
 *     _prefix_hits_total, _evictions_total.
 *
 * Each comes with # HELP and # TYPE lines.  The text is NUL-terminated when
 * it fits with its NUL.
 *
 * Returns:
 *   - KVP_OK;
 *   - KVP_ERANGE when @cap < *@len + 1, with *@len set to the length needed
 *     and @buf an empty string when @cap > 0 (never partial text);
 *   - KVP_EINVAL for NULL @s/@len or an invalid @prefix.
 *
 * Pure; thread-safe.
 */
int kvp_stats_to_prometheus(const kvp_stats *s, const char *prefix, char *buf, size_t cap,
                            size_t *len);

#ifdef __cplusplus
}
#endif
#endif /* KVPOOL_STATS_H */
