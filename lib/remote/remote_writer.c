/*
 * lib/remote/remote_writer.c - the background writer: queued blocks to SET pipelines.
 *
 * kvp_remote_publish copies a block's rows into a queue cell while its
 * caller still holds the block (it must, to publish it); that copy is all
 * a publisher pays.  The writer takes the filled cells in order, writes
 * each value's header (the checksum runs here, off the publisher's path),
 * and appends up to WRITER_BATCH SET commands to one pipeline: hiredis
 * copies them into its output buffer, so the cells go back to producers
 * before the round trip.  An error or timeout fails the rest of the batch
 * (counted) and closes the connection; the queue keeps filling and drops
 * what does not fit while Redis is away.  With nothing queued the writer
 * sleeps WRITER_IDLE_NS between looks: publishers never signal it, which
 * would cost them a system call.
 *
 * An earlier version queued only the key and had the writer copy the rows
 * under a short hold; in a small pool that churns, most blocks were
 * evicted before the writer came (the replay skipped three writes in
 * four), so the copy moved to the publisher.
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

/* Append the SETs of the first @n filled cells; false after a failure (counted). */
static bool append_batch(struct kvp_remote *r, redisContext *c, size_t n)
{
	char ex[16], key[KVPI_REMOTE_KEY_MAX];
	snprintf(ex, sizeof ex, "%u", r->cfg.expire_s);
	int argc = r->cfg.expire_s ? 5 : 3;
	for (size_t i = 0; i < n; i++) {
		struct kvpi_remote_cell *cell = kvpi_remote_queue_peek(&r->q, i);
		const struct kvpi_remote_rec *rec = &cell->rec;
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
			kvpi_remote_add(&r->st_failed, n);
			kvpi_remote_conn_fail(r, &r->wconn);
			return false;
		}
		r->wlen[i] = lens[2];
	}
	return true;
}

/* Send the first @n filled cells as one pipeline and release them; counts each. */
static void send_batch(struct kvp_remote *r, size_t n)
{
	redisContext *c = kvpi_remote_conn_get(r, &r->wconn);
	if (c == NULL || !append_batch(r, c, n)) {
		if (c == NULL)
			kvpi_remote_add(&r->st_failed, n);
		kvpi_remote_queue_release(&r->q, n);
		return;
	}
	kvpi_remote_queue_release(&r->q, n); /* hiredis holds copies now */
	for (size_t i = 0; i < n; i++) {
		void *rep = NULL;
		if (redisGetReply(c, &rep) != REDIS_OK || rep == NULL) {
			kvpi_remote_add(&r->st_failed, n - i);
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
