/*
 * lib/remote/remote_writer.c - the background writer: queued blocks to SET pipelines.
 *
 * The writer takes the filled queue cells in order, writes each value's
 * header (the checksum runs here, off the publisher's path) and appends up
 * to WRITER_BATCH SET commands to one pipeline: hiredis copies them into
 * its output buffer, so the cells go back to producers before the round
 * trip.  With copy_rows off a cell holds only the key: the writer takes a
 * short hold on the block by its key, because the publisher may have let
 * go of it, and a hold is what keeps a cached block from being evicted
 * and refilled while its rows are copied; a block no longer published
 * under its key was evicted and is skipped.  In a small pool that churns
 * fast (the replay at full speed) that loses most writes, hence copy_rows,
 * where the publisher copies while it holds the block.
 *
 * An error or timeout fails the rest of the batch (counted) and closes the
 * connection; the queue keeps filling and drops what does not fit while
 * Redis is away.  With nothing queued the writer sleeps WRITER_IDLE_NS
 * between looks: publishers never signal it, which would cost them a
 * system call.
 */
#ifndef KVP_NO_HIREDIS
#include "lib/remote/remote_internal.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WRITER_BATCH   KVPI_REMOTE_WRITER_BATCH
#define WRITER_IDLE_NS 1000000L /* 1 ms */

/*
 * copy_rows off: copy the block of @rec into @cell under a short hold by
 * its key; false when it is gone (evicted, or published again without
 * rows).
 */
static bool fill_rows(struct kvp_remote *r, struct kvpi_remote_cell *cell)
{
	struct kvpi_remote_rec *rec = &cell->rec;
	kvp_ref ref;
	size_t m = 0;
	if (kvp_prefix_match(r->pool, (kvp_stream)rec->stream, (kvp_format)rec->format, &rec->key,
	                     1, r->cfg.writer_owner, &ref, 1, &m) != KVP_OK ||
	    m != 1)
		return false;
	const void *data = NULL;
	uint32_t n_rows = 0;
	size_t row_bytes = kvp_storage_row_bytes(r->storage, (kvp_format)rec->format);
	bool ok = kvp_storage_read(r->storage, ref, &data, &n_rows) == KVP_OK && data != NULL &&
	          n_rows == r->block_size && row_bytes != 0;
	if (ok) {
		rec->rows_len = (uint32_t)(n_rows * row_bytes);
		memcpy(cell->buf + KVP_REMOTE_HEADER_BYTES, data, rec->rows_len);
	}
	kvp_free_owned(r->pool, r->cfg.writer_owner, &ref, 1);
	return ok;
}

/*
 * Append the SETs of the first @n filled cells (skipping blocks that are
 * gone); returns how many were appended, or -1 after a failure (counted).
 */
static long append_batch(struct kvp_remote *r, redisContext *c, size_t n)
{
	char ex[16], key[KVPI_REMOTE_KEY_MAX];
	snprintf(ex, sizeof ex, "%u", r->cfg.expire_s);
	int argc = r->cfg.expire_s ? 5 : 3;
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		struct kvpi_remote_cell *cell = kvpi_remote_queue_peek(&r->q, i);
		const struct kvpi_remote_rec *rec = &cell->rec;
		if (!rec->has_rows && !fill_rows(r, cell)) {
			kvpi_remote_add(&r->st_skipped, 1);
			continue;
		}
		struct kvpi_remote_expect e = {.key = rec->key,
		                               .stream = rec->stream,
		                               .format = rec->format,
		                               .row_dim = r->row_dim,
		                               .n_rows = r->block_size,
		                               .row_bytes = rec->rows_len / r->block_size};
		kvpi_remote_encode_header(cell->buf, &e);
		size_t klen = kvpi_remote_key(key, r->ns, (kvp_stream)rec->stream, rec->key);
		const char *argv[5] = {"SET", key, (const char *)cell->buf, "EX", ex};
		size_t lens[5] = {3, klen, KVP_REMOTE_HEADER_BYTES + (size_t)rec->rows_len, 2,
		                  strlen(ex)};
		if (redisAppendCommandArgv(c, argc, argv, lens) != REDIS_OK) {
			kvpi_remote_add(&r->st_failed, n - i + k);
			kvpi_remote_conn_fail(r, &r->wconn);
			return -1;
		}
		r->wlen[k++] = lens[2];
	}
	return (long)k;
}

/* Send the first @n filled cells as one pipeline and release them; counts each. */
static void send_batch(struct kvp_remote *r, size_t n)
{
	redisContext *c = kvpi_remote_conn_get(r, &r->wconn, 0);
	long k = c != NULL ? append_batch(r, c, n) : -1;
	if (c == NULL)
		kvpi_remote_add(&r->st_failed, n);
	kvpi_remote_queue_release(&r->q, n); /* hiredis holds copies of what it sends */
	for (long i = 0; i < k; i++) {
		void *rep = NULL;
		if (redisGetReply(c, &rep) != REDIS_OK || rep == NULL) {
			kvpi_remote_add(&r->st_failed, (uint64_t)(k - i));
			kvpi_remote_conn_fail(r, &r->wconn);
			return;
		}
		if (((redisReply *)rep)->type == REDIS_REPLY_ERROR) {
			kvpi_remote_add(&r->st_failed, 1);
		} else {
			kvpi_remote_add(&r->st_done, 1);
			kvpi_remote_add(&r->st_bytes_written, r->wlen[i]);
		}
		freeReplyObject(rep);
	}
	if (k >= 0)
		kvpi_remote_conn_ok(r, &r->wconn);
}

void *kvpi_remote_writer_main(void *arg)
{
	struct kvp_remote *r = arg;
	/* acquire: pairs with destroy's release */
	while (!atomic_load_explicit(&r->stop, memory_order_acquire)) {
		size_t n = 0;
		while (n < WRITER_BATCH && kvpi_remote_queue_peek(&r->q, n) != NULL)
			n++;
		if (n > 0) {
			send_batch(r, n);
			/* release: flush's acquire sees the counts of what it waited for */
			atomic_fetch_add_explicit(&r->retired, n, memory_order_release);
			continue;
		}
		struct timespec ts = {0, WRITER_IDLE_NS};
		nanosleep(&ts, NULL);
	}
	return NULL;
}

#endif /* KVP_NO_HIREDIS */
