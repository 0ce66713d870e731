/*
 * lib/remote/remote_writer.c - the background writer: queue records to SET pipelines.
 *
 * Publishers only queue a 40-byte record; the rows are copied here, by
 * the writer, so kvp_remote_publish costs a queue push.  The writer takes
 * a short hold on each block by its key (a match under cfg.writer_owner):
 * the publisher may already have let go of the block, and a hold is what
 * keeps a cached block from being evicted and refilled while its rows are
 * copied.  A block no longer published under its key was evicted: the
 * record is skipped.  Up to WRITER_BATCH values go out as one pipeline,
 * so a batch costs one round trip.  An error or timeout fails the rest of
 * the batch (counted) and closes the connection; the queue keeps filling
 * and drops what does not fit while Redis is away.  With nothing queued
 * the writer sleeps WRITER_IDLE_NS between looks: publishers never signal
 * it, which would cost them a system call.
 */
#ifndef KVP_NO_HIREDIS
#include "lib/remote/remote_internal.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WRITER_BATCH   64
#define WRITER_IDLE_NS 1000000L /* 1 ms */

struct wval {
	char key[KVPI_REMOTE_KEY_MAX];
	size_t key_len, len;
	unsigned char *buf;
};

/* Copy the block of @rec behind its header into @v; false when it is gone. */
static bool build(struct kvp_remote *r, const struct kvpi_remote_rec *rec, struct wval *v)
{
	kvp_ref ref;
	size_t m = 0;
	int rc = kvp_prefix_match(r->pool, (kvp_stream)rec->stream, (kvp_format)rec->format,
	                          &rec->key, 1, r->cfg.writer_owner, &ref, 1, &m);
	if (rc != KVP_OK || m != 1)
		return false;
	const void *data = NULL;
	uint32_t n_rows = 0;
	size_t row_bytes = kvp_storage_row_bytes(r->storage, (kvp_format)rec->format);
	bool ok = kvp_storage_read(r->storage, ref, &data, &n_rows) == KVP_OK && data != NULL &&
	          n_rows == r->block_size && row_bytes != 0;
	if (ok) {
		struct kvpi_remote_expect e = {.key = rec->key,
		                               .stream = rec->stream,
		                               .format = rec->format,
		                               .row_dim = r->row_dim,
		                               .n_rows = n_rows,
		                               .row_bytes = (uint32_t)row_bytes};
		memcpy(v->buf + KVP_REMOTE_HEADER_BYTES, data, (size_t)n_rows * row_bytes);
		kvpi_remote_encode_header(v->buf, &e);
		v->len = KVP_REMOTE_HEADER_BYTES + (size_t)n_rows * row_bytes;
		v->key_len = kvpi_remote_key(v->key, r->ns, (kvp_stream)rec->stream, rec->key);
	}
	kvp_free_owned(r->pool, r->cfg.writer_owner, &ref, 1);
	return ok;
}

/* Send @n built values as one pipeline; counts what happened to each. */
static void send_batch(struct kvp_remote *r, struct wval *v, size_t n)
{
	redisContext *c = kvpi_remote_conn_get(r, &r->wconn);
	if (c == NULL) {
		kvpi_remote_add(&r->st_failed, n);
		return;
	}
	char ex[16];
	snprintf(ex, sizeof ex, "%u", r->cfg.expire_s);
	int argc = r->cfg.expire_s ? 5 : 3;
	for (size_t i = 0; i < n; i++) {
		const char *argv[5] = {"SET", v[i].key, (const char *)v[i].buf, "EX", ex};
		size_t lens[5] = {3, v[i].key_len, v[i].len, 2, strlen(ex)};
		if (redisAppendCommandArgv(c, argc, argv, lens) != REDIS_OK) {
			kvpi_remote_add(&r->st_failed, n);
			kvpi_remote_conn_fail(r, &r->wconn);
			return;
		}
	}
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
			kvpi_remote_add(&r->st_bytes_written, v[i].len);
		}
		freeReplyObject(rep);
	}
	kvpi_remote_conn_ok(r, &r->wconn);
}

void *kvpi_remote_writer_main(void *arg)
{
	struct kvp_remote *r = arg;
	size_t cap = KVP_REMOTE_HEADER_BYTES + (size_t)r->block_size * r->row_dim * sizeof(float);
	struct wval *v = calloc(WRITER_BATCH, sizeof *v);
	unsigned char *mem = malloc(WRITER_BATCH * cap);
	if (v == NULL || mem == NULL) {
		/* no memory for the buffers: drain the queue as failed writes */
		free(v);
		free(mem);
		v = NULL;
	} else {
		for (size_t i = 0; i < WRITER_BATCH; i++)
			v[i].buf = mem + i * cap;
	}
	/* acquire: pairs with destroy's release; nothing else to see, but cheap */
	while (!atomic_load_explicit(&r->stop, memory_order_acquire)) {
		struct kvpi_remote_rec rec;
		size_t got = 0, built = 0;
		while (got < WRITER_BATCH && kvpi_remote_queue_pop(&r->q, &rec)) {
			got++;
			if (v == NULL)
				kvpi_remote_add(&r->st_failed, 1);
			else if (build(r, &rec, &v[built]))
				built++;
			else
				kvpi_remote_add(&r->st_skipped, 1);
		}
		if (built > 0)
			send_batch(r, v, built);
		if (got > 0) {
			/* release: flush's acquire sees the counts of what it waited for */
			atomic_fetch_add_explicit(&r->retired, got, memory_order_release);
			continue;
		}
		struct timespec ts = {0, WRITER_IDLE_NS};
		nanosleep(&ts, NULL);
	}
	if (v != NULL) {
		free(v[0].buf);
		free(v);
	}
	return NULL;
}

#endif /* KVP_NO_HIREDIS */
