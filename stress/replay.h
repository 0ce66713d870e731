/*
 * stress/replay.h - the serving replay engine behind kvpool_replay.
 *
 * A scheduler (the calling thread) releases requests at their arrival
 * times (scaled by --speed), admits them FCFS when their whole KV
 * footprint fits, and hands them to T worker threads.  Each worker runs a
 * continuous batch of up to B requests: prefill (the prompt's K and V
 * blocks), then one decode step per request per iteration (one new token,
 * a new block only at block boundaries), then free.  The allocation
 * mechanism is a backend: kvpool (rp_backend_pool) or a naive path that
 * mallocs every token's K and V row (rp_backend_naive), so both see the
 * identical request stream, scheduling and concurrency.
 *
 * Admission: a request reserves ceil((prompt + output) / block_size)
 * blocks per stream for its whole life (a scheduler that knows max_tokens,
 * like TGI's), so decode never runs out of blocks and never deadlocks.
 * When the head of the queue does not fit, it waits (an "exhaustion wait")
 * until finishing requests give blocks back.  A request that could never
 * fit (larger than the pool) is rejected with a message.
 *
 * Prefix cache (rp_config.prefix, a pool with prefix_cache on): at
 * admission the scheduler matches the request's full prompt blocks in K and
 * V (kvp_prefix_match with its keys; the shorter of the two matches is
 * kept), so prefill allocates only the rest; the worker publishes the full
 * prompt blocks it computed right after prefill.  The admission arithmetic
 * then reads the pool itself: a request fits when, in both streams, the
 * free blocks (cached ones included: allocation evicts them) minus the
 * blocks admitted requests have still to allocate cover the blocks it will
 * allocate (its lifetime need minus its matched blocks).  Matched blocks
 * are already there and cost nothing.
 *
 * Threads: rp_run blocks its caller and starts T workers and one monitor;
 * the rp_live it is given may be read from any thread (the /metrics server)
 * while it runs.
 */
#ifndef KVPOOL_STRESS_REPLAY_H
#define KVPOOL_STRESS_REPLAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <kvpool/kvpool.h>

#include "stress/hist.h"
#include "stress/promhist.h"
#include "stress/trace.h"

typedef enum { RP_POOL, RP_NAIVE } rp_kind;

typedef struct rp_config {
	const trace_request *req;
	size_t n;
	rp_kind kind;
	unsigned threads;        /* worker threads */
	unsigned batch;          /* active requests per worker */
	double speed;            /* trace time / wall time; 0 = as fast as possible */
	double step_ms;          /* trace-time length of one decode step (used when speed > 0) */
	uint32_t block_size;     /* tokens per block */
	uint64_t capacity;       /* blocks per stream the scheduler may reserve */
	uint32_t row_dim;        /* elements per K (and per V) row */
	unsigned latency_every;  /* time one allocation call in this many (>= 1) */
	kvp_pool *pool;          /* RP_POOL */
	kvp_storage *storage[2]; /* RP_POOL with --storage: K and V rows; else NULL */
	bool write_rows;         /* write real rows (storage, or into the mallocs) */
	bool progress;           /* progress line on a terminal */
	const char *label;       /* for the progress line */
	FILE *log;               /* rejections and errors (NULL: stderr) */
	/* Prefix cache (RP_POOL only): request i's full prompt blocks have the
	 * keys keys[key_off[i] .. key_off[i] + n_keys[i]) (the leading blocks
	 * the trace's hash ids cover; see rp_prefix_keys). */
	bool prefix;
	const kvp_hash *keys;
	const size_t *key_off;
	const uint32_t *n_keys;
	/* Remote tier (--remote-cache; prefix and storage only): K and V tiers.
	 * A match that stops short fetches the rest of the prefix from them. */
	kvp_remote *remote[2];
	/* Prefix with storage: keyed prompt blocks get rows rp_key_rows gives,
	 * and every matched block's rows are checked against them at admission. */
	bool check_rows;
} rp_config;

typedef struct rp_result {
	uint64_t requests_done, rejected;
	uint64_t prompt_tokens, output_tokens; /* stored, over completed requests */
	uint64_t wall_ns;
	uint64_t alloc_calls;          /* kvp_allocate, or malloc */
	uint64_t free_calls;           /* kvp_free_all, or free */
	uint64_t set_used_calls;       /* kvp_block_set_used (pool) */
	uint64_t row_writes;           /* kvp_storage_write calls, or rows copied (naive) */
	uint64_t blocks_allocated;     /* blocks handed out (pool), as counted by the replay */
	uint64_t expected_blocks;      /* sum over completed requests of 2*ceil(tokens/bs) */
	uint64_t unexpected_exhausted; /* KVP_EEXHAUSTED despite admission (pool bug) */
	uint64_t errors;               /* any other failed call */
	char first_error[256];
	hist alloc_lat;   /* ns per allocation call (sampled per latency_every) */
	hist queue_delay; /* ns from arrival to admission */
	uint64_t waits;   /* requests that waited for blocks at the queue head */
	uint64_t wait_ns_total, wait_ns_max;
	uint64_t slot_waits;        /* times the head waited for a batch slot instead */
	uint64_t peak_blocks;       /* sampled max of blocks held (K + V) */
	uint64_t peak_tokens;       /* tokens held at that sample */
	uint64_t peak_bytes;        /* sampled max of bytes held (naive: malloc_usable_size) */
	uint64_t peak_reserved;     /* max blocks per stream reserved by admission */
	double frag_mean, frag_max; /* kvp_stats_fragmentation, sampled (pool) */
	uint64_t samples;
	/* Prefix cache, per stream unless said otherwise, over completed requests. */
	uint64_t prefix_blocks;    /* full prompt blocks */
	uint64_t prefix_matched;   /* of them, matched at admission and used */
	uint64_t prefix_returned;  /* blocks the match calls returned, K + V (extras included) */
	uint64_t prefix_published; /* blocks published, K + V */
	uint64_t prefix_dup;       /* publishes refused: the key was published meanwhile (K + V) */
	uint64_t remote_hits; /* of prefix_matched, blocks the remote tier supplied (admitted) */
	uint64_t remote_fetch_failed;          /* fetches that returned KVP_EREMOTE (K + V) */
	uint64_t remote_fetch_max_ns;          /* the longest kvp_remote_fetch call */
	uint64_t row_checks, row_check_failed; /* matched blocks whose rows were checked (K + V) */
} rp_result;

/*
 * Live figures, published by the engine's monitor thread every few
 * milliseconds while rp_run runs, readable from any thread (the /metrics
 * server).  Relaxed atomics: each figure is a gauge on its own; no reader
 * needs two of them to agree.
 */
typedef struct rp_live {
	_Atomic uint64_t done, rejected, in_flight, queued, tokens, blocks_held, bytes_held;
	_Atomic uint64_t waits, alloc_calls, elapsed_ns;
	_Atomic bool running;
	promhist alloc_lat; /* the timed allocate calls, as hist_record sees them */
} rp_live;

/**
 * rp_key_rows - the rows the replay writes into the keyed block @key of
 * stream @si: @n_rows rows of @row_dim values, a function of the key alone,
 * each a multiple of 1/64 in [-16, 16] (exact in fp16, so a read gives
 * back exactly these floats).
 */
void rp_key_rows(kvp_hash key, int si, uint32_t n_rows, uint32_t row_dim, float *out);

/** rp_blocks_needed - blocks per stream a request needs for its whole life */
static inline uint64_t rp_blocks_needed(const trace_request *r, uint32_t block_size)
{
	uint64_t t = (uint64_t)r->prompt + r->output;
	return (t + block_size - 1) / block_size;
}

/** rp_rejected - whether the replay rejects @r (it needs more than @capacity blocks a stream) */
static inline bool rp_rejected(const trace_request *r, uint32_t block_size, uint64_t capacity)
{
	return rp_blocks_needed(r, block_size) > capacity;
}

/**
 * rp_prefix_keys - the keys of a Mooncake request's full prompt blocks
 * @r:          the request
 * @hash_ids:   the trace's hash ids (trace.hash_ids)
 * @block_size: tokens per block
 * @keys:       out: up to @cap keys
 * @cap:        capacity of @keys (>= prompt / block_size suffices)
 *
 * Hash id h of the request stands for its tokens [512 h, 512 (h + 1)).
 * Block j (tokens [j bs, (j + 1) bs)) has a key when it is full and the
 * hash ids cover it; its key is kvp_prefix_hash(j ? &key[j - 1] : NULL, 0,
 * bytes), bytes = (j bs) mod 512 and bs as 4-byte little-endian each, then
 * the hash ids of every 512-token chunk the block touches, 8 bytes
 * little-endian each.  The chain makes the key a function of the whole
 * prefix up to the block.  Returns how many keys (the leading keyed
 * blocks), or -1 if hashing failed.
 */
long rp_prefix_keys(const trace_request *r, const uint64_t *hash_ids, uint32_t block_size,
                    kvp_hash *keys, size_t cap);

/**
 * rp_run - replay @c's requests; fills @res
 * @live: if not NULL, kept up to date while the run goes on
 *
 * Returns 0 when every call behaved (requests may still be rejected), -1
 * on a setup failure or when a call failed (res->first_error says which).
 */
int rp_run(const rp_config *c, rp_result *res, rp_live *live);

#endif /* KVPOOL_STRESS_REPLAY_H */
