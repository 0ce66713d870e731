/*
 * lib/remote/remote.c - the tier's life cycle, the publish hook and its figures.
 *
 * The tier is attached to one storage rather than hooked into
 * kvp_prefix_publish: the prefix cache stays free of any network
 * concern, a pool without a tier pays nothing, and a caller chooses per
 * block whether it goes to Redis (kvp_remote_publish) or stays local
 * (kvp_prefix_publish).  Create does all allocation up front: the queue,
 * the fetch connections' argument arrays and the writer's buffers, so
 * publish and fetch allocate nothing of their own (hiredis allocates its
 * replies).
 */
#include "lib/remote/remote_internal.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

#ifndef KVP_NO_HIREDIS

static bool ns_ok(const char *ns)
{
	size_t n = strlen(ns);
	if (n == 0 || n > KVPI_REMOTE_NS_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)ns[i] <= ' ' || ns[i] == 0x7f)
			return false;
	return true;
}

static void free_tier(struct kvp_remote *r)
{
	for (uint32_t i = 0; r->fconn != NULL && i < r->n_fconn; i++) {
		kvpi_remote_conn_close(&r->fconn[i]);
		pthread_mutex_destroy(&r->fconn[i].mu);
		free(r->fconn[i].argv);
		free(r->fconn[i].argl);
		free(r->fconn[i].keybuf);
	}
	free(r->fconn);
	kvpi_remote_conn_close(&r->wconn);
	kvpi_remote_queue_free(&r->q);
	free(r->zeros);
	free(r);
}

int kvp_remote_create(kvp_storage *storage, const kvp_remote_config *c, kvp_remote **out)
{
	if (storage == NULL || c == NULL || out == NULL || c->timeout_ms == 0 ||
	    c->fetch_conns == 0 || c->fetch_conns > 256 || c->max_fetch == 0 ||
	    c->max_fetch > 65536 || c->queue_cap == 0 || c->queue_cap > (1u << 24))
		return KVP_EINVAL;
	const char *ns = c->key_namespace ? c->key_namespace : "kvp";
	kvp_pool *pool = kvp_storage_pool(storage);
	kvp_ref probe;
	size_t m = 0;
	kvp_hash k0 = {0, 0};
	/* a pool without the prefix cache answers every kvp_prefix_* call with EINVAL */
	if (pool == NULL || !ns_ok(ns) ||
	    kvp_prefix_match(pool, KVP_K, KVP_FP16, &k0, 0, 0, &probe, 1, &m) != KVP_OK)
		return KVP_EINVAL;
	struct kvp_remote *r = calloc(1, sizeof *r);
	if (r == NULL)
		return KVP_ENOMEM;
	r->cfg = *c;
	r->cfg.url = NULL;
	r->cfg.key_namespace = r->ns;
	if (r->cfg.backoff_min_ms == 0)
		r->cfg.backoff_min_ms = 1;
	if (r->cfg.backoff_max_ms < r->cfg.backoff_min_ms)
		r->cfg.backoff_max_ms = r->cfg.backoff_min_ms;
	strcpy(r->ns, ns);
	r->pool = pool;
	r->storage = storage;
	r->block_size = kvp_pool_block_size(pool);
	r->row_dim = kvp_storage_row_dim(storage);
	if (kvpi_remote_parse_url(c->url, &r->ep) != KVP_OK) {
		free(r);
		return KVP_EINVAL;
	}
	int rc = KVP_ENOMEM;
	r->n_fconn = c->fetch_conns;
	r->zeros = calloc((size_t)r->block_size * r->row_dim, sizeof(float));
	r->fconn = calloc(r->n_fconn, sizeof *r->fconn);
	size_t value_cap = KVP_REMOTE_HEADER_BYTES + (size_t)r->block_size * r->row_dim * 4;
	if (r->zeros == NULL || r->fconn == NULL ||
	    kvpi_remote_queue_init(&r->q, c->queue_cap, value_cap))
		goto fail;
	for (uint32_t i = 0; i < r->n_fconn; i++) {
		struct kvpi_remote_conn *k = &r->fconn[i];
		pthread_mutex_init(&k->mu, NULL);
		k->argv = calloc((size_t)c->max_fetch + 1, sizeof *k->argv);
		k->argl = calloc((size_t)c->max_fetch + 1, sizeof *k->argl);
		k->keybuf = malloc((size_t)c->max_fetch * KVPI_REMOTE_KEY_MAX);
		k->timeout_ms = c->timeout_ms;
		if (k->argv == NULL || k->argl == NULL || k->keybuf == NULL)
			goto fail;
	}
	r->wconn.timeout_ms = c->write_timeout_ms ? c->write_timeout_ms : c->timeout_ms;
	/* The writer starts with SIGPIPE blocked (inherited): a server gone
	 * mid-write must not kill the process. */
	sigset_t s, old;
	sigemptyset(&s);
	sigaddset(&s, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &s, &old);
	int prc = pthread_create(&r->writer, NULL, kvpi_remote_writer_main, r);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (prc != 0)
		goto fail;
	r->writer_started = true;
	*out = r;
	return KVP_OK;
fail:
	free_tier(r);
	return rc;
}

void kvp_remote_destroy(kvp_remote *r)
{
	if (r == NULL)
		return;
	/* release: pairs with the writer's acquire */
	atomic_store_explicit(&r->stop, true, memory_order_release);
	if (r->writer_started)
		pthread_join(r->writer, NULL);
	free_tier(r);
}

int kvp_remote_publish(kvp_remote *r, kvp_ref ref, kvp_hash key)
{
	if (r == NULL)
		return KVP_EINVAL;
	int rc = kvp_prefix_publish(r->pool, ref, key);
	if (rc != KVP_OK)
		return rc;
	/* The caller holds the block (it could publish it): its rows stay put. */
	kvp_block_info bi;
	if (kvp_block_get(r->pool, ref, &bi) != KVP_OK) {
		kvpi_remote_add(&r->st_skipped, 1);
		return KVP_OK;
	}
	const void *data = NULL;
	uint32_t n_rows = 0;
	size_t rows_len = 0;
	if (r->cfg.copy_rows) {
		if (kvp_storage_read(r->storage, ref, &data, &n_rows) != KVP_OK || data == NULL ||
		    n_rows != r->block_size) {
			kvpi_remote_add(&r->st_skipped, 1); /* no rows stored: nothing to share */
			return KVP_OK;
		}
		rows_len = (size_t)n_rows * kvp_storage_row_bytes(r->storage, bi.format);
	}
	uint64_t pos;
	struct kvpi_remote_cell *cell = kvpi_remote_queue_claim(&r->q, &pos);
	if (cell == NULL) {
		kvpi_remote_add(&r->st_dropped, 1);
		return KVP_OK;
	}
	if (rows_len > 0)
		memcpy(cell->buf + KVP_REMOTE_HEADER_BYTES, data, rows_len);
	cell->rec = (struct kvpi_remote_rec){.key = key,
	                                     .ref = ref,
	                                     .stream = (uint8_t)bi.stream,
	                                     .format = (uint8_t)bi.format,
	                                     .has_rows = r->cfg.copy_rows,
	                                     .rows_len = (uint32_t)rows_len};
	kvpi_remote_queue_commit(cell, pos);
	return KVP_OK;
}

int kvp_remote_flush(kvp_remote *r, uint32_t timeout_ms)
{
	if (r == NULL)
		return KVP_EINVAL;
	/* relaxed: the records queued before this call are at positions below it */
	uint64_t target = atomic_load_explicit(&r->q.tail, memory_order_relaxed);
	uint64_t deadline = kvpi_remote_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	for (;;) {
		/* acquire: pairs with the writer's release after it finished records */
		if (atomic_load_explicit(&r->retired, memory_order_acquire) >= target)
			return KVP_OK;
		if (kvpi_remote_now_ns() >= deadline)
			return KVP_EREMOTE;
		struct timespec ts = {0, 500000};
		nanosleep(&ts, NULL);
	}
}

static uint64_t rd(_Atomic uint64_t *a)
{
	/* relaxed: statistics */
	return atomic_load_explicit(a, memory_order_relaxed);
}

int kvp_remote_get_stats(kvp_remote *r, kvp_remote_stats *o)
{
	if (r == NULL || o == NULL)
		return KVP_EINVAL;
	memset(o, 0, sizeof *o);
	o->hits = rd(&r->st_hits);
	o->misses = rd(&r->st_misses);
	o->corrupt = rd(&r->st_corrupt);
	o->errors = rd(&r->st_errors);
	o->fetches = rd(&r->st_fetches);
	o->bytes_read = rd(&r->st_bytes_read);
	o->bytes_written = rd(&r->st_bytes_written);
	o->writes_queued = rd(&r->q.tail);
	o->writes_dropped = rd(&r->st_dropped);
	o->writes_failed = rd(&r->st_failed);
	o->writes_skipped = rd(&r->st_skipped);
	o->writes_done = rd(&r->st_done);
	o->reconnects = rd(&r->st_reconnects);
	o->queue_depth = kvpi_remote_queue_depth(&r->q);
	for (unsigned b = 0; b <= KVP_REMOTE_LAT_BUCKETS; b++)
		o->lat_count[b] = rd(&r->st_lat[b]);
	o->lat_sum_us = rd(&r->st_lat_sum_us);
	return KVP_OK;
}

int kvp_remote_to_prometheus(kvp_remote *r, const char *prefix, char *buf, size_t cap, size_t *len)
{
	kvp_remote_stats s;
	if (r == NULL)
		return KVP_EINVAL;
	kvp_remote_get_stats(r, &s);
	return kvp_remote_stats_to_prometheus(&s, prefix, buf, cap, len);
}

#endif /* KVP_NO_HIREDIS */
