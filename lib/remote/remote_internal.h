/*
 * lib/remote/remote_internal.h - the remote tier's private types.
 *
 * Who touches what:
 *
 *   field                  written by                 read by
 *   ---------------------  -------------------------  ---------------------------
 *   cfg, ep, pool, ...     create, before the thread  everyone (immutable)
 *   q (the write queue)    publishers (enqueue),      publishers, writer, stats
 *                          the writer (dequeue)
 *   wconn                  the writer thread only     the writer thread only
 *   fconn[i]               whoever holds fconn[i].mu  the same
 *   counters (st_*)        any thread, relaxed RMW    stats, Prometheus
 *   stop                   destroy (release)          the writer (acquire)
 */
#ifndef KVPOOL_LIB_REMOTE_INTERNAL_H
#define KVPOOL_LIB_REMOTE_INTERNAL_H

#include <kvpool/remote.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* --- URL (remote_url.c) ------------------------------------------------------------ */

#define KVPI_REMOTE_STR 256

struct kvpi_remote_endpoint {
	bool unix_socket;
	char host[KVPI_REMOTE_STR]; /* host name or address, or the socket's path */
	int port;
	char user[KVPI_REMOTE_STR]; /* empty: no user (AUTH password) */
	char password[KVPI_REMOTE_STR];
	bool has_password;
	int db; /* SELECT db when nonzero */
};

/**
 * kvpi_remote_parse_url - split a redis:// or unix:// URL
 * @url: redis://[user:password@]host[:port][/db] (port 6379, db 0 by
 *       default; an IPv6 host in brackets), or unix:///path[?db=N]
 * @ep:  out
 *
 * Returns KVP_OK or KVP_EINVAL (NULL, unknown scheme, empty host, a port
 * outside 1..65535, a db that is not a number, a part too long).  Pure.
 */
int kvpi_remote_parse_url(const char *url, struct kvpi_remote_endpoint *ep);

/* --- values (remote_value.c) -------------------------------------------------------- */

#define KVPI_REMOTE_MAGIC   0x5250564bu /* "KVPR" little-endian */
#define KVPI_REMOTE_VERSION 1

/* What a value must say to be used. */
struct kvpi_remote_expect {
	kvp_hash key;
	uint8_t stream, format;
	uint32_t row_dim, n_rows, row_bytes;
};

/** kvpi_remote_checksum - 64-bit hash of @n bytes at @p, continuing from @h */
uint64_t kvpi_remote_checksum(uint64_t h, const void *p, size_t n);

/**
 * kvpi_remote_encode_header - write the 64-byte header for @e in front of
 * @rows (the rows follow at @hdr + KVP_REMOTE_HEADER_BYTES and must be
 * written already: the checksum covers them).
 */
void kvpi_remote_encode_header(void *hdr, const struct kvpi_remote_expect *e);

/**
 * kvpi_remote_check - whether the value @v of @len bytes is what @e asks for
 *
 * Returns true only when the length is exact and every header field and
 * the checksum hold.  Pure.
 */
bool kvpi_remote_check(const void *v, size_t len, const struct kvpi_remote_expect *e);

/**
 * kvpi_remote_key - the Redis key of @key in @stream under @ns into @out
 * (at least KVPI_REMOTE_KEY_MAX bytes); returns its length.
 */
#define KVPI_REMOTE_NS_MAX  64
#define KVPI_REMOTE_KEY_MAX (KVPI_REMOTE_NS_MAX + 40)
size_t kvpi_remote_key(char *out, const char *ns, kvp_stream stream, kvp_hash key);

/* --- connections (remote_conn.c) ---------------------------------------------------- */

struct redisContext;

/* One connection with its back-off; used by one thread at a time. */
struct kvpi_remote_conn {
	pthread_mutex_t mu; /* fetch connections: who may use it (the writer's: unused) */
	struct redisContext *c;
	uint64_t retry_at_ns; /* no connect before this (back-off) */
	uint32_t backoff_ms;  /* the next back-off */
	uint32_t timeout_ms;  /* connect, send, receive: timeout_ms, or write_timeout_ms */
	bool failed_before;   /* a connect after this counts as a reconnect */
	/* Fetch connections: MGET's arguments, max_fetch + 1 of them. */
	const char **argv;
	size_t *argl;
	char *keybuf; /* max_fetch keys of KVPI_REMOTE_KEY_MAX bytes */
};

struct kvp_remote;

/**
 * kvpi_remote_conn_get - the connection, connecting if the back-off allows
 *
 * A connect waits at most @timeout_ms (0: the connection's timeout_ms).
 * Returns the context, or NULL (back-off, or the connect failed: then a
 * back-off starts).  The caller is the connection's one user.
 */
struct redisContext *kvpi_remote_conn_get(struct kvp_remote *r, struct kvpi_remote_conn *k,
                                          uint32_t timeout_ms);

/** kvpi_remote_conn_fail - close the connection after an error and start a back-off */
void kvpi_remote_conn_fail(struct kvp_remote *r, struct kvpi_remote_conn *k);

/** kvpi_remote_conn_ok - a request succeeded: the next back-off starts at the minimum */
void kvpi_remote_conn_ok(struct kvp_remote *r, struct kvpi_remote_conn *k);

/** kvpi_remote_conn_close - close and free the connection (destroy) */
void kvpi_remote_conn_close(struct kvpi_remote_conn *k);

/** kvpi_remote_now_ns - CLOCK_MONOTONIC in nanoseconds */
uint64_t kvpi_remote_now_ns(void);

/* --- the write queue (remote_queue.c) ----------------------------------------------- */

/* One record: a block's key, where it goes, and its rows (in the cell's buffer). */
struct kvpi_remote_rec {
	kvp_hash key;
	kvp_ref ref; /* copy_rows off: the block, for the writer to copy */
	uint8_t stream, format;
	bool has_rows;     /* copy_rows on: the publisher copied them already */
	uint32_t rows_len; /* bytes of rows at buf + KVP_REMOTE_HEADER_BYTES */
};

/* A bounded multi-producer queue (Vyukov's ring): a cell's seq says whose turn it is. */
struct kvpi_remote_cell {
	_Atomic uint64_t seq;
	struct kvpi_remote_rec rec;
	unsigned char *buf; /* header space, then the rows; fixed at init */
};

struct kvpi_remote_queue {
	struct kvpi_remote_cell *cells;
	unsigned char *mem;
	size_t value_cap; /* bytes of each cell's buffer */
	uint64_t mask;
	_Alignas(64) _Atomic uint64_t tail; /* next position to fill: records ever claimed */
	_Alignas(64) _Atomic uint64_t head; /* next position to take (the writer) */
};

/** kvpi_remote_queue_init - @cap cells (rounded up to a power of two) of @value_cap bytes */
int kvpi_remote_queue_init(struct kvpi_remote_queue *q, uint32_t cap, size_t value_cap);
void kvpi_remote_queue_free(struct kvpi_remote_queue *q);
/**
 * kvpi_remote_queue_claim - a free cell for a producer to fill, or NULL when
 * the queue is full; *@pos receives its position.  Any thread; lock-free.
 */
struct kvpi_remote_cell *kvpi_remote_queue_claim(struct kvpi_remote_queue *q, uint64_t *pos);
/** kvpi_remote_queue_commit - the producer filled @c (claimed at @pos): the writer may take it */
void kvpi_remote_queue_commit(struct kvpi_remote_cell *c, uint64_t pos);
/**
 * kvpi_remote_queue_peek - the @i-th filled cell from the head, or NULL when
 * it is not filled yet.  The one consumer only.
 */
struct kvpi_remote_cell *kvpi_remote_queue_peek(struct kvpi_remote_queue *q, uint64_t i);
/** kvpi_remote_queue_release - give the first @n peeked cells back to producers */
void kvpi_remote_queue_release(struct kvpi_remote_queue *q, uint64_t n);
/** kvpi_remote_queue_depth - records on the queue now (approximate under races) */
uint64_t kvpi_remote_queue_depth(struct kvpi_remote_queue *q);

/* Values the writer sends as one pipeline at most. */
#define KVPI_REMOTE_WRITER_BATCH 256

/* --- the tier ------------------------------------------------------------------------ */

struct kvp_remote {
	kvp_remote_config cfg;
	char ns[KVPI_REMOTE_NS_MAX + 1];
	struct kvpi_remote_endpoint ep;
	kvp_pool *pool;
	kvp_storage *storage;
	uint32_t block_size, row_dim;

	struct kvpi_remote_queue q;
	pthread_t writer;
	bool writer_started;
	_Atomic bool stop;
	/* Records the writer has finished (written, failed or skipped). */
	_Atomic uint64_t retired;
	struct kvpi_remote_conn wconn;
	size_t wlen[KVPI_REMOTE_WRITER_BATCH]; /* the writer's value lengths of one pipeline */

	struct kvpi_remote_conn *fconn;
	uint32_t n_fconn;
	_Atomic uint32_t fconn_next; /* round-robin start for fetches */
	float *zeros;                /* block_size rows of row_dim zeros (read-only) */

	/* Counters: relaxed RMW, read only for statistics. */
	_Atomic uint64_t st_hits, st_misses, st_corrupt, st_errors, st_fetches, st_bytes_read;
	_Atomic uint64_t st_bytes_written, st_dropped, st_failed, st_skipped, st_done,
	    st_reconnects;
	_Atomic uint64_t st_lat[KVP_REMOTE_LAT_BUCKETS + 1], st_lat_sum_us;
};

/** kvpi_remote_lat_bound_us - upper bound of histogram bucket @b in microseconds */
uint32_t kvpi_remote_lat_bound_us(unsigned b);

/** kvpi_remote_writer_main - the writer thread (remote_writer.c) */
void *kvpi_remote_writer_main(void *arg);

/** kvpi_remote_add - a relaxed counter add (statistics only) */
static inline void kvpi_remote_add(_Atomic uint64_t *a, uint64_t v)
{
	/* relaxed: a statistic, ordered with nothing */
	atomic_fetch_add_explicit(a, v, memory_order_relaxed);
}

#endif /* KVPOOL_LIB_REMOTE_INTERNAL_H */
