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
 *   kvp_pool_dump            every pool call             as kvp_pool_stats; the FILE's
 *                                                        own lock while writing
 *
 * Figures read while other threads allocate and free are each exact at
 * some instant during the call (see kvpool/stats.h); the per-stream in-use
 * count is managed minus free, so it may be off by blocks in transit and
 * is never negative.
 *
 * Environment: with KVPOOL_SHOW_STATS=1 (or any value other than "" and
 * "0"; "json" selects KVP_DUMP_JSON) kvp_pool_destroy writes
 * kvp_pool_dump's report of the pool to stderr before freeing it, as
 * jemalloc's opt.stats_print does.  This is the only output the library
 * ever makes on its own.
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
 * @prefix: metric name prefix ([a-zA-Z_:][a-zA-Z0-9_:]*), NULL for
 *          "kvpool_block_pool"
 * @buf:    output buffer (may be NULL when @cap is 0)
 * @cap:    its capacity in bytes
 * @len:    set to the text's length without a NUL (or the length needed)
 *
 * Writes every family of kvp_stats_to_prometheus for a kvp_pool_stats
 * snapshot, then the per-stream gauges <prefix>_stream_blocks_in_use and
 * <prefix>_stream_blocks_free with a label stream="k" and stream="v"
 * (stream="kv" without separate_kv), and <prefix>_build_info{version="..."}
 * with the value 1.  The text is NUL-terminated when it fits with its NUL.
 *
 * Returns KVP_OK, KVP_ERANGE when @cap < *@len + 1 (with *@len set to the
 * length needed; call again with more room, the figures may have moved),
 * KVP_EINVAL for a NULL @pool or @len, NULL @buf with @cap > 0, or an
 * invalid @prefix.  Thread-safe; takes no lock.
 */
int kvp_pool_to_prometheus(kvp_pool *pool, const char *prefix, char *buf, size_t cap, size_t *len);

/**
 * kvp_pool_dump - write a report of the pool's figures to a stream
 * @pool:  the pool
 * @f:     where to write (e.g. stderr)
 * @flags: 0 for a multi-line human report, KVP_DUMP_JSON for one JSON
 *         object on one line
 *
 * The report holds the layout (block size, separate K/V, thread cache,
 * growth and its cap), blocks managed, in use and free per stream, the
 * usage ratio, the cumulative counters of kvp_stats and the fragmentation.
 * It is composed in memory first and written with one fwrite.
 *
 * Returns KVP_OK; KVP_EINVAL for a NULL @pool or @f, or unknown @flags
 * (nothing written); KVP_ENOMEM when the report cannot be composed
 * (nothing written); KVP_ERANGE when @f did not take the whole report (a
 * write error; ferror(@f) tells more).  Thread-safe; takes no pool lock.
 */
int kvp_pool_dump(kvp_pool *pool, FILE *f, unsigned flags);

#ifdef __cplusplus
}
#endif
#endif /* KVPOOL_REPORT_H */
