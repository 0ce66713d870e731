/*
 * kvpool/report.h - a live pool's figures for people and monitoring:
 * blocks per stream, the Prometheus exposition of a pool, a stats dump.
 *
 * Synchronization:
 *
 *   function                 may run concurrently with   progress / locks taken
 *   -----------------------  --------------------------  ----------------------------
 *   kvp_pool_n_managed       every pool call             wait-free (one atomic load)
 *   kvp_pool_to_prometheus   every pool call             as kvp_pool_stats; no lock
 *   kvp_pools_to_prometheus  every call on those pools   as kvp_pool_stats; no lock;
 *                                                        allocates one snapshot array
 *   kvp_pool_dump            every pool call             as kvp_pool_stats; the FILE's
 *                                                        own lock while writing
 *
 * Figures read while other threads allocate and free are each exact at
 * some instant during the call (see kvpool/stats.h).  The per-stream in-use
 * count is managed minus free.  So it may be off by blocks in transit, and
 * it is never negative.
 *
 * Environment: KVPOOL_SHOW_STATS.  Set it to 1, or any value other than ""
 * and "0", to get reports on stderr; "json" selects KVP_DUMP_JSON.  Then
 * kvp_pool_destroy writes kvp_pool_dump's report of the pool before freeing
 * it, as jemalloc's opt.stats_print does.  At exit (atexit) the library
 * also reports every pool made while the variable was set and not
 * destroyed by then, as mimalloc's MIMALLOC_SHOW_STATS does.  This is the
 * only output the library ever makes on its own.
 *
 * Allocate latency: one kvp_allocate call in 1024 of each thread is timed
 * (CLOCK_MONOTONIC) into its pool's histogram.  The function
 * kvp_pools_to_prometheus exports that histogram.  The other calls pay a
 * thread-local increment and a branch.
 */
#ifndef KVPOOL_REPORT_H
#define KVPOOL_REPORT_H

#include <stddef.h>
#include <stdio.h>

#include <kvpool/pool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* kvp_pool_dump flags. */
#define KVP_DUMP_JSON 1u /* one JSON object on one line instead of the text report */

/**
 * kvp_pool_n_managed - blocks of @stream the pool manages now
 * @pool:   the pool
 * @stream: KVP_K or KVP_V with separate_kv; any stream without it
 *
 * Blocks created for the stream (initially and by growth) minus those
 * retired by kvp_shrink.  With separate_kv the two streams sum to
 * kvp_stats.n_blocks.
 *
 * Returns the count, 0 for a NULL pool or a stream not valid for the
 * pool's layout (KVP_KV with separate_kv).  Thread-safe, wait-free.
 */
size_t kvp_pool_n_managed(kvp_pool *pool, kvp_stream stream);

/**
 * kvp_pool_to_prometheus - Prometheus text exposition of a live pool
 * @pool:   the pool
 * @prefix: metric name prefix, NULL for "kvpool_block_pool"
 * @buf:    output buffer (may be NULL when @cap is 0)
 * @cap:    its capacity in bytes
 * @len:    set to the text's length without a NUL (or the length needed)
 *
 * A valid @prefix matches [a-zA-Z_:][a-zA-Z0-9_:]*.  The text holds, in
 * order:
 *   - every family of kvp_stats_to_prometheus, for a kvp_pool_stats
 *     snapshot;
 *   - the per-stream gauges <prefix>_stream_blocks_in_use and
 *     <prefix>_stream_blocks_free, with a label stream="k" and stream="v"
 *     (stream="kv" without separate_kv);
 *   - <prefix>_config_info, with the value 1 and the labels block_size,
 *     n_blocks (the configured initial count), max_blocks (the growth cap,
 *     "unbounded" without one) and prefix_cache ("true"/"false");
 *   - <prefix>_build_info{version="..."}, with the value 1.
 *
 * The text is NUL-terminated when it fits with its NUL.  Each pool gets its
 * own family names.  To tell pools apart by a label instead, use
 * kvp_pools_to_prometheus.
 *
 * Returns:
 *   - KVP_OK;
 *   - KVP_ERANGE when @cap < *@len + 1, with *@len set to the length
 *     needed (call again with more room; the figures may have moved);
 *   - KVP_EINVAL for a NULL @pool or @len, NULL @buf with @cap > 0, or an
 *     invalid @prefix.
 *
 * Thread-safe; takes no lock.
 */
int kvp_pool_to_prometheus(kvp_pool *pool, const char *prefix, char *buf, size_t cap, size_t *len);

/**
 * kvp_pools_to_prometheus - Prometheus text of several live pools, told apart by a label
 * @pools: the pools, @n of them
 * @names: each pool's value of the label pool="..."; NULL for "0", "1", ...
 * @n:     how many pools (at least 1)
 * @buf:   output buffer (may be NULL when @cap is 0)
 * @cap:   its capacity in bytes
 * @len:   set to the text's length without a NUL (or the length needed)
 *
 * The names must be distinct.  They may be any text; \, " and newline are
 * escaped.  One set of family names serves every pool of a process.  Each
 * family's # HELP and # TYPE come once, then a sample per pool with the
 * label pool.  The families are:
 *   - gauges kvpool_blocks_in_use, _blocks_managed, _usage_ratio,
 *     _fragmentation, _peak_blocks_in_use, _cached_blocks;
 *   - counters kvpool_allocations_total, _frees_total, _reused_total,
 *     _exhausted_total, _grown_total, _retired_total, _stale_frees_total,
 *     _prefix_queries_total, _prefix_hits_total, _evictions_total;
 *   - kvpool_stream_blocks_in_use and _stream_blocks_free, with a label
 *     stream ("k", "v" or "kv");
 *   - kvpool_config_info{block_size, n_blocks, max_blocks, prefix_cache} 1,
 *     as in kvp_pool_to_prometheus;
 *   - the histogram kvpool_allocate_duration_seconds, with buckets from
 *     100 ns to 100 ms;
 *   - once, kvpool_build_info{version="..."} 1.
 *
 * The histogram samples one kvp_allocate call in 1024 per thread.  So its
 * _count is about a 1024th of the calls.  Each pool's figures are read once,
 * so all its families show one snapshot.  The text is NUL-terminated when
 * it fits with its NUL.
 *
 * Returns:
 *   - KVP_OK;
 *   - KVP_ERANGE when @cap < *@len + 1, with *@len set to the length
 *     needed and @buf an empty string when @cap > 0 (call again with more
 *     room; the figures may have moved);
 *   - KVP_ENOMEM when the snapshots cannot be allocated;
 *   - KVP_EINVAL for NULL @pools or @len, @n 0, a NULL pool or name, two
 *     equal names, or NULL @buf with @cap > 0.
 *
 * Thread-safe; takes no lock.
 */
int kvp_pools_to_prometheus(kvp_pool *const *pools, const char *const *names, size_t n, char *buf,
                            size_t cap, size_t *len);

/**
 * kvp_pool_dump - write a report of the pool's figures to a stream
 * @pool:  the pool
 * @f:     where to write (e.g. stderr)
 * @flags: 0 for a multi-line human report, KVP_DUMP_JSON for one JSON
 *         object on one line
 *
 * The report holds the layout: block size, separate K/V, whether the
 * prefix cache is on (JSON "prefix_cache"), thread cache, growth as
 * configured (grow_on_exhaustion, in either mode) and its cap.  A pool
 * without a cap shows "unbounded" (JSON null).
 * It then holds the blocks managed, in use and free per stream, the usage
 * ratio, the cumulative counters of kvp_stats and the fragmentation.  The
 * report is composed in memory first and written with one fwrite.
 *
 * Returns:
 *   - KVP_OK;
 *   - KVP_EINVAL for a NULL @pool or @f, or unknown @flags (nothing
 *     written);
 *   - KVP_ENOMEM when the report cannot be composed (nothing written);
 *   - KVP_ERANGE when @f did not take the whole report (a write error;
 *     ferror() on @f tells more).
 *
 * Thread-safe; takes no pool lock.
 */
int kvp_pool_dump(kvp_pool *pool, FILE *f, unsigned flags);

#ifdef __cplusplus
}
#endif
#endif /* KVPOOL_REPORT_H */
