/*
 * lib/remote/remote_fetch.c - the read path: one MGET, then blocks as a match gives them.
 *
 * One round trip asks for every key at once (MGET keeps the answers in
 * key order).  The leading run of values that pass every check becomes
 * blocks; the first missing or refused value ends it, because a prefix
 * is useful only up to its first gap.  For each value the owner gets a
 * block: one another thread published under the key meanwhile (a local
 * match), else a new block whose rows are the value's rows.  The rows go
 * in through kvp_storage_write (which makes the buffer, sets n_used and
 * the written-rows mark) as zeros, and the value's encoded bytes are then
 * copied over them through kvp_storage_read's pointer: the block is this
 * owner's alone and not yet published, so nobody reads it, and the rows
 * are bit for bit what the writer copied (a decode and re-encode of int8
 * or int4 rows need not be).  Then the block is published, as the
 * process that computed it did.
 *
 * Deadline: a fetch's network part (waiting for a connection, connecting,
 * sending and receiving) ends by start + cfg.timeout_ms, whatever the
 * server does; what follows is local work on the values received.
 * Connections: cfg.fetch_conns, each with a mutex.  A fetch takes the
 * first free one; when all are busy it waits for one until the deadline.  SIGPIPE is
 * blocked around the network calls (a server killed mid-write would
 * otherwise kill the process) and a SIGPIPE they raised is consumed.
 */
#ifndef KVP_NO_HIREDIS
#include "lib/remote/remote_internal.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <time.h>

static void observe(struct kvp_remote *r, uint64_t ns)
{
	uint64_t us = ns / 1000;
	unsigned b = 0;
	while (b < KVP_REMOTE_LAT_BUCKETS && us > kvpi_remote_lat_bound_us(b))
		b++;
	kvpi_remote_add(&r->st_lat[b], 1);
	kvpi_remote_add(&r->st_lat_sum_us, us);
}

static void pipe_block(sigset_t *old)
{
	sigset_t s;
	sigemptyset(&s);
	sigaddset(&s, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &s, old);
}

/* Consume a SIGPIPE the calls raised (when it was not blocked before) and restore the mask. */
static void pipe_restore(const sigset_t *old)
{
	if (!sigismember(old, SIGPIPE)) {
		sigset_t s, pend;
		sigemptyset(&s);
		sigaddset(&s, SIGPIPE);
		if (sigpending(&pend) == 0 && sigismember(&pend, SIGPIPE)) {
			struct timespec zero = {0, 0};
			while (sigtimedwait(&s, NULL, &zero) < 0 && errno == EINTR)
				;
		}
	}
	pthread_sigmask(SIG_SETMASK, old, NULL);
}

/* Milliseconds left until @deadline (monotonic ns), 0 when it passed. */
static uint32_t left_ms(uint64_t deadline)
{
	uint64_t now = kvpi_remote_now_ns();
	return now >= deadline ? 0 : (uint32_t)((deadline - now + 999999) / 1000000);
}

/* Wait until the socket is ready for @events, at most until @deadline. */
static bool wait_fd(int fd, short events, uint64_t deadline)
{
	for (;;) {
		uint32_t ms = left_ms(deadline);
		if (ms == 0)
			return false;
		struct pollfd p = {.fd = fd, .events = events};
		int n = poll(&p, 1, (int)ms);
		if (n > 0)
			return true;
		if (n == 0 || errno != EINTR)
			return false;
	}
}

/*
 * One command and its reply, all of it by @deadline: hiredis's blocking
 * timeout bounds each read() alone, so a reply that trickles in could take
 * many timeouts; here poll() bounds the whole round trip.
 */
static redisReply *round_trip(redisContext *c, int argc, const char **argv, const size_t *argl,
                              uint64_t deadline)
{
	if (redisAppendCommandArgv(c, argc, argv, argl) != REDIS_OK)
		return NULL;
	int done = 0;
	while (!done) {
		if (redisBufferWrite(c, &done) != REDIS_OK)
			return NULL;
		if (!done && !wait_fd(c->fd, POLLOUT, deadline))
			return NULL;
	}
	for (;;) {
		void *rep = NULL;
		if (redisGetReplyFromReader(c, &rep) != REDIS_OK)
			return NULL;
		if (rep != NULL)
			return rep;
		if (!wait_fd(c->fd, POLLIN, deadline) || redisBufferRead(c) != REDIS_OK)
			return NULL;
	}
}

/* Take a fetch connection: a free one, else wait for one until @deadline. */
static struct kvpi_remote_conn *take_conn(struct kvp_remote *r, uint64_t deadline)
{
	/* relaxed: only spreads fetches over the connections */
	uint32_t start = atomic_fetch_add_explicit(&r->fconn_next, 1, memory_order_relaxed);
	for (uint32_t i = 0; i < r->n_fconn; i++) {
		struct kvpi_remote_conn *k = &r->fconn[(start + i) % r->n_fconn];
		if (pthread_mutex_trylock(&k->mu) == 0)
			return k;
	}
	struct kvpi_remote_conn *k = &r->fconn[start % r->n_fconn];
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	uint64_t ns = (uint64_t)dl.tv_nsec + (uint64_t)left_ms(deadline) * 1000000ull;
	dl.tv_sec += (time_t)(ns / 1000000000ull);
	dl.tv_nsec = (long)(ns % 1000000000ull);
	return pthread_mutex_timedlock(&k->mu, &dl) == 0 ? k : NULL;
}

/* Count the leading values that pass every check; counts the miss or refusal that ends it. */
static size_t usable(struct kvp_remote *r, redisReply *rep, const kvp_hash *keys, size_t n,
                     kvp_stream stream, kvp_format format, uint32_t row_bytes)
{
	for (size_t j = 0; j < n; j++) {
		redisReply *el = rep->element[j];
		if (el->type == REDIS_REPLY_NIL) {
			kvpi_remote_add(&r->st_misses, 1);
			return j;
		}
		struct kvpi_remote_expect e = {.key = keys[j],
		                               .stream = (uint8_t)stream,
		                               .format = (uint8_t)format,
		                               .row_dim = r->row_dim,
		                               .n_rows = r->block_size,
		                               .row_bytes = row_bytes};
		if (el->type != REDIS_REPLY_STRING ||
		    !kvpi_remote_check(el->str, (size_t)el->len, &e)) {
			kvpi_remote_add(&r->st_corrupt, 1);
			return j;
		}
	}
	return n;
}

/* A new block for @owner holding the value's rows @v, published under @key. */
static int adopt(struct kvp_remote *r, kvp_stream stream, kvp_format format, kvp_hash key,
                 kvp_owner owner, const unsigned char *rows, size_t rows_len, kvp_ref *out)
{
	size_t m = 0;
	/* someone published it here meanwhile: take theirs */
	if (kvp_prefix_match(r->pool, stream, format, &key, 1, owner, out, 1, &m) == KVP_OK &&
	    m == 1)
		return KVP_OK;
	kvp_ref ref;
	int rc = kvp_allocate(r->pool, stream, r->block_size, owner, format, &ref, 1, &m);
	if (rc != KVP_OK)
		return rc;
	const void *data = NULL;
	uint32_t n_rows = 0;
	rc = kvp_storage_write(r->storage, ref, 0, r->zeros, r->block_size);
	if (rc == KVP_OK)
		rc = kvp_storage_read(r->storage, ref, &data, &n_rows);
	if (rc == KVP_OK && (data == NULL || n_rows != r->block_size))
		rc = KVP_EINVAL;
	if (rc == KVP_OK) {
		/* the owner's block alone, unpublished: nobody reads it (see the top) */
		memcpy((void *)(uintptr_t)data, rows, rows_len);
		rc = kvp_prefix_publish(r->pool, ref, key);
	}
	if (rc == KVP_OK) {
		*out = ref;
		return KVP_OK;
	}
	kvp_free_owned(r->pool, owner, &ref, 1);
	if (rc == KVP_EEXIST && /* published meanwhile, after our look: take theirs */
	    kvp_prefix_match(r->pool, stream, format, &key, 1, owner, out, 1, &m) == KVP_OK &&
	    m == 1)
		return KVP_OK;
	return rc;
}

int kvp_remote_fetch(kvp_remote *r, kvp_stream stream, kvp_format format, const kvp_hash *keys,
                     size_t n_keys, kvp_owner owner, kvp_ref *refs, size_t refs_cap,
                     size_t *n_fetched)
{
	if (r == NULL || n_fetched == NULL || (n_keys > 0 && (keys == NULL || refs == NULL)))
		return KVP_EINVAL;
	size_t row_bytes = kvp_storage_row_bytes(r->storage, format);
	if (row_bytes == 0 || (unsigned)stream > KVP_KV)
		return KVP_EINVAL;
	size_t n = n_keys < r->cfg.max_fetch ? n_keys : r->cfg.max_fetch;
	*n_fetched = 0;
	if (refs_cap < n)
		return KVP_ERANGE;
	if (n == 0)
		return KVP_OK;
	uint64_t t0 = kvpi_remote_now_ns();
	uint64_t deadline = t0 + (uint64_t)r->cfg.timeout_ms * 1000000ull;
	struct kvpi_remote_conn *k = take_conn(r, deadline);
	if (k == NULL) {
		kvpi_remote_add(&r->st_errors, 1);
		return KVP_EREMOTE;
	}
	kvpi_remote_add(&r->st_fetches, 1);
	sigset_t old;
	pipe_block(&old);
	redisReply *rep = NULL;
	uint32_t ms = left_ms(deadline);
	redisContext *c = ms > 0 ? kvpi_remote_conn_get(r, k, ms) : NULL;
	if (c != NULL) {
		k->argv[0] = "MGET";
		k->argl[0] = 4;
		char *kb = k->keybuf;
		for (size_t j = 0; j < n; j++) {
			char *s = kb + j * KVPI_REMOTE_KEY_MAX;
			k->argl[j + 1] = kvpi_remote_key(s, r->ns, stream, keys[j]);
			k->argv[j + 1] = s;
		}
		rep = round_trip(c, (int)n + 1, k->argv, k->argl, deadline);
		if (rep == NULL || rep->type != REDIS_REPLY_ARRAY || rep->elements != n) {
			if (rep != NULL)
				freeReplyObject(rep);
			rep = NULL;
			kvpi_remote_conn_fail(r, k);
		} else {
			kvpi_remote_conn_ok(r, k);
		}
	}
	pipe_restore(&old);
	pthread_mutex_unlock(&k->mu);
	if (rep == NULL) {
		kvpi_remote_add(&r->st_errors, 1);
		observe(r, kvpi_remote_now_ns() - t0);
		return KVP_EREMOTE;
	}
	size_t good = usable(r, rep, keys, n, stream, format, (uint32_t)row_bytes);
	size_t got = 0;
	for (; got < good; got++) {
		redisReply *el = rep->element[got];
		if (adopt(r, stream, format, keys[got], owner,
		          (const unsigned char *)el->str + KVP_REMOTE_HEADER_BYTES,
		          (size_t)el->len - KVP_REMOTE_HEADER_BYTES, &refs[got]) != KVP_OK)
			break;
		kvpi_remote_add(&r->st_bytes_read, (uint64_t)el->len);
	}
	kvpi_remote_add(&r->st_hits, got);
	freeReplyObject(rep);
	observe(r, kvpi_remote_now_ns() - t0);
	*n_fetched = got;
	return KVP_OK;
}

#endif /* KVP_NO_HIREDIS */
