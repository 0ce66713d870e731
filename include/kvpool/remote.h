/*
 * kvpool/remote.h - a remote prefix tier: published blocks shared through Redis.
 *
 * A prefix cache (kvpool/prefix.h) keeps only what its pool holds.  A remote
 * tier attaches a Redis server to one block storage (kvpool/storage.h).
 * Anything that speaks the Redis protocol's SET, MGET, AUTH and SELECT will
 * do.  So blocks published by one process are found again by another, or
 * by the same one after its pool evicted them.
 *
 * Write path.  kvp_remote_publish publishes a block locally
 * (kvp_prefix_publish) and fills a cell of a bounded lock-free queue (the
 * cells' buffers are made at create).  It never waits on the network:
 * when the queue is full the write is dropped and counted.  A background
 * thread, one per tier, takes the filled cells in order.  It puts the
 * header in front of the rows.  It sends up to 256 values to Redis as one
 * pipeline of SET commands (SET key value EX s, with an expiry).
 * config.copy_rows says who copies the rows:
 *   false (default)  the cell holds the key and the ref.  The writer takes a
 *                    short hold on the block by its key (kvp_prefix_match
 *                    with owner config.writer_owner).  It copies the rows
 *                    and lets go.  A publish costs a queue claim.  A block
 *                    evicted before the writer came is skipped (counted).
 *   true             the publisher copies the rows into the cell while it
 *                    holds the block.  No write is lost to eviction; a
 *                    publish costs a copy of the block into a cold cell.
 * A block with no rows stored is not sent (counted as skipped).
 *
 * Read path.  The caller calls kvp_remote_fetch after kvp_prefix_match
 * stopped at key i.  The fetch asks Redis for keys[i..n) in one MGET.  It
 * stops at the first key that is missing or whose value fails a check.  For
 * each value before that key it does four things: allocates a block for
 * the owner, writes the rows into the storage, publishes the block under
 * its key, and returns its ref.  The owner then holds each block, in order,
 * exactly as after a match.
 *
 * Values.  Redis key "<namespace>:<k|v|kv>:<32 hex digits: hi then lo>".
 * The value is a 64-byte little-endian header, then n_rows rows of
 * row_bytes bytes as kvp_storage_read returns them:
 *
 *   offset  size  field
 *   0       4     magic "KVPR"
 *   4       2     version (1)
 *   6       2     header bytes (64)
 *   8       16    the key: lo, then hi
 *   24      1     stream
 *   25      1     format
 *   26      2     zero
 *   28      4     row_dim
 *   32      4     n_rows (the pool's block_size)
 *   36      4     row_bytes (kvp_storage_row_bytes)
 *   40      8     checksum: a 64-bit hash of bytes 0..39 and the rows
 *   48      16    zero
 *
 * A fetched value is used only when every field matches what the caller
 * asked for (key, stream, format) and what the tier's storage holds
 * (row_dim, block_size, row_bytes), its length is exact and its checksum
 * holds.  Anything else is a miss, counted as corrupt, never data.  A
 * tenant's salt in kvp_prefix_hash gives it keys no other tenant has, so
 * tenants stay apart in Redis as in the pool.
 *
 * Faults.  Every network call a caller waits for runs under the request
 * timeout (config.timeout_ms, default 50 ms) for connect, send and
 * receive.  The writer thread, which nobody waits for, uses
 * write_timeout_ms (default 500 ms): a loaded server that answers a
 * pipeline late loses no writes for it.  An
 * error or a timeout closes that connection and starts a back-off: until
 * it ends, calls that need the connection return KVP_EREMOTE at once;
 * the next call after it reconnects.  The back-off doubles from
 * backoff_min_ms to backoff_max_ms and starts again at the minimum after a
 * success.  A fetch that fails takes nothing: the owner's holds are those
 * it had.  The local tier keeps serving.
 *
 * Synchronization:
 *
 *   function                   may run concurrently with   waits for
 *   -------------------------  --------------------------  ---------------------------
 *   kvp_remote_config_init     everything                  -
 *   kvp_remote_create          everything                  the first connect (timeout)
 *   kvp_remote_destroy         nothing on this tier        the writer thread's exit
 *                                                          (at most one pipeline's
 *                                                          write_timeout_ms)
 *   kvp_remote_publish         everything                  kvp_prefix_publish's lock
 *                                                          bit; never the network
 *                                                          (lock-free queue claim;
 *                                                          copy_rows: one copy)
 *   kvp_remote_fetch           everything                  one fetch connection's mutex
 *                                                          and the network, together
 *                                                          at most the timeout
 *   kvp_remote_flush           everything                  the writer, up to its
 *                                                          timeout
 *   kvp_remote_get_stats,      everything                  never (wait-free)
 *   kvp_remote_to_prometheus
 *
 * The writer thread takes no lock a publisher takes.  It reads queue
 * cells, and (copy_rows false) holds a block only while it copies it,
 * through the pool's own calls.  Threads that do not call this API never
 * wait for the network.  Orders:
 *   - The value carries the rows a caller wrote before kvp_remote_publish.
 *     Those are the caller's own writes; the cell's sequence number hands
 *     them to the writer.
 *   - What a fetch writes into a block happens-before any later match of
 *     that block.
 *
 * Builds without hiredis (KVP_NO_HIREDIS) keep every function:
 * kvp_remote_config_init and kvp_remote_stats_to_prometheus work,
 * kvp_remote_create returns KVP_ENOTSUP, the rest return KVP_EINVAL for
 * their NULL tier.
 */
#ifndef KVPOOL_REMOTE_H
#define KVPOOL_REMOTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <kvpool/pool.h>
#include <kvpool/prefix.h>
#include <kvpool/storage.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvp_remote kvp_remote;

/* Bytes in front of the rows of every value the tier writes. */
#define KVP_REMOTE_HEADER_BYTES 64
/* Fetch-latency histogram buckets; upper bounds 100, 250, 500 us, 1, 2.5, 5,
 * 10, 25, 50, 100 ms, then +Inf (lat_count[KVP_REMOTE_LAT_BUCKETS]). */
#define KVP_REMOTE_LAT_BUCKETS 10

typedef struct kvp_remote_config {
	const char *url;           /* redis://[user:password@]host[:port][/db] or unix:///path */
	const char *key_namespace; /* first part of every Redis key; default "kvp" */
	uint32_t timeout_ms;       /* fetch: connect, send and receive; default 50 */
	uint32_t write_timeout_ms; /* the writer thread's; default 500 (0: timeout_ms) */
	uint32_t queue_cap;        /* write-queue records (rounded up to a power of two); 4096 */
	uint32_t expire_s;         /* SET ... EX expire_s; 0 (default) for no expiry */
	uint32_t backoff_min_ms;   /* first back-off after a failure; default 10 */
	uint32_t backoff_max_ms;   /* longest back-off; default 1000 */
	uint32_t max_fetch;        /* keys one fetch asks for at most; default 256 */
	uint32_t fetch_conns;      /* fetch connections (concurrent fetches); default 4 */
	bool copy_rows;            /* publish copies the rows (true) or the writer does (false,
	                              default); see "Write path" */
	kvp_owner writer_owner;    /* copy_rows false: owner id of the writer's short holds;
	                              default UINT64_MAX (keep it out of your owners' range) */
} kvp_remote_config;

typedef struct kvp_remote_stats {
	uint64_t hits;           /* blocks a fetch returned */
	uint64_t misses;         /* fetches that stopped at a key Redis did not have */
	uint64_t corrupt;        /* values refused: short, bad checksum, other key/format/size */
	uint64_t errors;         /* fetches that failed: timeout, connection, back-off */
	uint64_t fetches;        /* kvp_remote_fetch calls that asked Redis */
	uint64_t bytes_read;     /* value bytes of the blocks returned */
	uint64_t bytes_written;  /* value bytes Redis acknowledged */
	uint64_t writes_queued;  /* records put on the write queue */
	uint64_t writes_dropped; /* records refused: the queue was full */
	uint64_t writes_failed;  /* values not written: Redis error, timeout, back-off */
	uint64_t writes_skipped; /* blocks not sent: no rows stored, or evicted first */
	uint64_t writes_done;    /* values Redis acknowledged */
	uint64_t reconnects;     /* connections made after a failure */
	uint64_t queue_depth;    /* records on the queue now */
	uint64_t lat_count[KVP_REMOTE_LAT_BUCKETS + 1]; /* fetch latency, per bucket */
	uint64_t lat_sum_us;                            /* fetch latency, sum */
} kvp_remote_stats;

/**
 * kvp_remote_config_init - fill @c with the defaults
 * @c: the config (url NULL: set it before kvp_remote_create)
 *
 * Returns KVP_OK or KVP_EINVAL (NULL @c).  Thread-safe.
 */
int kvp_remote_config_init(kvp_remote_config *c);

/**
 * kvp_remote_create - attach a Redis server to @storage's blocks
 * @storage: the storage whose published blocks go to Redis and whose
 *           blocks a fetch fills; its pool must have the prefix cache on
 * @c:       the config (copied; the strings too)
 * @out:     the new tier
 *
 * Parses the URL, makes the queue (queue_cap cells of a block's fp32 size
 * plus the header each) and starts the writer thread.  Connections are
 * made by the first call that needs one: a server that does not answer
 * is no error here.
 *
 * Returns:
 *   - KVP_OK;
 *   - KVP_EINVAL: NULL args, a URL it cannot parse, a namespace with a
 *     space or over 64 bytes, timeout_ms 0, or a pool without the prefix
 *     cache;
 *   - KVP_ENOMEM: memory or the thread;
 *   - KVP_ENOTSUP: built without hiredis.
 *
 * Thread-safe.
 */
int kvp_remote_create(kvp_storage *storage, const kvp_remote_config *c, kvp_remote **out);

/**
 * kvp_remote_destroy - stop the writer and free the tier (NULL is a no-op)
 * @r: the tier
 *
 * Records still queued are dropped (kvp_remote_flush first to send them).
 * No other call on @r may run concurrently or follow.  The storage and the
 * pool must still exist.
 */
void kvp_remote_destroy(kvp_remote *r);

/**
 * kvp_remote_publish - publish a block locally and queue it for Redis
 * @r:   the tier
 * @ref: as for kvp_prefix_publish: a full block in use, its rows written
 * @key: its content key
 *
 * Returns what kvp_prefix_publish returned, or KVP_EINVAL for NULL @r.  On
 * KVP_OK the block's rows are copied onto the queue.  When the queue is
 * full they are dropped and counted instead.  They are skipped when the
 * block has no rows stored in the tier's storage.  The caller must hold
 * @ref, as for kvp_prefix_publish.
 * Never waits on the network.  Thread-safe, lock-free apart from the
 * block's lock bit.
 */
int kvp_remote_publish(kvp_remote *r, kvp_ref ref, kvp_hash key);

/**
 * kvp_remote_fetch - take blocks for @keys from Redis, in order
 * @r:         the tier
 * @stream:    the stream the blocks go to
 * @format:    their format (a value of another format is a miss)
 * @keys:      the keys, in sequence order (typically those after a match)
 * @n_keys:    how many; at most config.max_fetch are asked for
 * @owner:     takes a hold on each block returned, as kvp_prefix_match
 * @refs:      out: the blocks' refs, in order
 * @refs_cap:  how many refs @refs holds
 * @n_fetched: out: how many keys were filled (a prefix of @keys)
 *
 * Stops at the first key Redis does not have, whose value fails a check,
 * or for which no block can be had (pool exhausted).  A key another
 * thread published locally meanwhile is taken by a local match instead.
 * No key found is KVP_OK with *@n_fetched = 0.
 *
 * Returns KVP_OK; KVP_EINVAL (NULL pointers with @n_keys > 0, a format
 * without codec); KVP_ERANGE (@refs_cap < min(@n_keys, max_fetch): nothing
 * done); KVP_EREMOTE (no connection, back-off, or no answer within the
 * timeout: nothing taken).  The network part (waiting for a fetch
 * connection, connecting, sending, receiving) ends within config.timeout_ms
 * of the call, whatever the server does; then the call adopts the values
 * it received (local work: allocate, write, publish).  Thread-safe.
 */
int kvp_remote_fetch(kvp_remote *r, kvp_stream stream, kvp_format format, const kvp_hash *keys,
                     size_t n_keys, kvp_owner owner, kvp_ref *refs, size_t refs_cap,
                     size_t *n_fetched);

/**
 * kvp_remote_flush - wait until the write queue is empty
 * @r:          the tier
 * @timeout_ms: how long to wait at most
 *
 * Returns KVP_OK when every record queued before the call was written,
 * failed or skipped; KVP_EREMOTE when time ran out; KVP_EINVAL for NULL.
 * Thread-safe.
 */
int kvp_remote_flush(kvp_remote *r, uint32_t timeout_ms);

/**
 * kvp_remote_get_stats - the tier's counters
 * @r:   the tier
 * @out: the counters
 *
 * Each figure is exact at some instant during the call (not an atomic
 * cut).  Returns KVP_OK or KVP_EINVAL (NULL args).  Thread-safe, wait-free.
 */
int kvp_remote_get_stats(kvp_remote *r, kvp_remote_stats *out);

/**
 * kvp_remote_to_prometheus - Prometheus text exposition of the tier's counters
 * @r:      the tier
 * @prefix: metric name prefix, NULL for "kvpool_remote"
 * @buf:    output buffer (may be NULL when @cap is 0)
 * @cap:    its capacity in bytes
 * @len:    set to the text's length without a NUL (or the length needed)
 *
 * Counters <prefix>_hits_total, _misses_total, _corrupt_total,
 * _errors_total, _fetches_total, _read_bytes_total, _written_bytes_total,
 * _writes_queued_total, _writes_dropped_total, _writes_failed_total,
 * _writes_skipped_total, _writes_total, _reconnects_total; gauge
 * _queue_depth; histogram _fetch_seconds.
 *
 * Returns KVP_OK, KVP_ERANGE (as kvp_stats_to_prometheus: never partial
 * text), KVP_EINVAL (NULL @r or @len, an invalid @prefix).  Thread-safe.
 */
int kvp_remote_to_prometheus(kvp_remote *r, const char *prefix, char *buf, size_t cap, size_t *len);

/**
 * kvp_remote_stats_to_prometheus - Prometheus text of a stats snapshot
 * @s:      the snapshot (kvp_remote_get_stats; several tiers' may be summed)
 * @prefix: metric name prefix, NULL for "kvpool_remote"
 * @buf:    output buffer (may be NULL when @cap is 0)
 * @cap:    its capacity in bytes
 * @len:    set to the text's length without a NUL (or the length needed)
 *
 * The families of kvp_remote_to_prometheus.  Returns KVP_OK, KVP_ERANGE
 * (never partial text), KVP_EINVAL (NULL @s or @len, an invalid @prefix).
 * Pure; thread-safe; works in builds without hiredis.
 */
int kvp_remote_stats_to_prometheus(const kvp_remote_stats *s, const char *prefix, char *buf,
                                   size_t cap, size_t *len);

#ifdef __cplusplus
}
#endif
#endif /* KVPOOL_REMOTE_H */
