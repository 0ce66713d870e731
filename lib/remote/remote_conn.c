/*
 * lib/remote/remote_conn.c - one Redis connection with timeouts and back-off.
 *
 * hiredis's blocking context is used with SO_RCVTIMEO/SO_SNDTIMEO set to
 * the connection's timeout (redisSetTimeout), and the connect itself
 * bounded by the same timeout (fetch connections: the request timeout;
 * the writer's: write_timeout_ms, as nobody waits for it), so no call waits longer than that on a
 * server that is down, paused (SIGSTOP) or slow.  Any error closes the context: a blocking hiredis
 * context that timed out mid-reply is out of step with the server and cannot be reused.  The next
 * attempt waits for a back-off that doubles from backoff_min_ms to backoff_max_ms; a success resets
 * it. While the back-off runs, kvpi_remote_conn_get returns NULL at once, so a dead server costs
 * callers nothing but a clock read.
 *
 * A host name is resolved by getaddrinfo inside hiredis's connect, which
 * the timeout does not bound; give an address for strict bounds.
 */
#ifndef KVP_NO_HIREDIS
#include "lib/remote/remote_internal.h"

#include <hiredis/hiredis.h>
#include <string.h>
#include <time.h>

uint64_t kvpi_remote_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static struct timeval tv_ms(uint32_t ms)
{
	struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (long)(ms % 1000) * 1000};
	return tv;
}

/* One command on a fresh context whose reply must not be an error. */
static bool command_ok(redisContext *c, int argc, const char **argv)
{
	redisReply *rep = redisCommandArgv(c, argc, argv, NULL);
	bool ok = rep != NULL && rep->type != REDIS_REPLY_ERROR;
	if (rep != NULL)
		freeReplyObject(rep);
	return ok;
}

static redisContext *dial(const struct kvp_remote *r, uint32_t timeout_ms)
{
	const struct kvpi_remote_endpoint *ep = &r->ep;
	struct timeval tv = tv_ms(timeout_ms);
	redisContext *c = ep->unix_socket ? redisConnectUnixWithTimeout(ep->host, tv)
	                                  : redisConnectWithTimeout(ep->host, ep->port, tv);
	if (c == NULL)
		return NULL;
	if (c->err != 0 || redisSetTimeout(c, tv) != REDIS_OK)
		goto bad;
	if (ep->has_password) {
		const char *auth[3] = {"AUTH", ep->user, ep->password};
		bool ok = ep->user[0] != '\0'
		              ? command_ok(c, 3, auth)
		              : command_ok(c, 2, (const char *[]){"AUTH", ep->password});
		if (!ok)
			goto bad;
	}
	if (ep->db != 0) {
		char db[16];
		snprintf(db, sizeof db, "%d", ep->db);
		if (!command_ok(c, 2, (const char *[]){"SELECT", db}))
			goto bad;
	}
	return c;
bad:
	redisFree(c);
	return NULL;
}

static void backoff(const struct kvp_remote *r, struct kvpi_remote_conn *k)
{
	uint32_t b = k->backoff_ms ? k->backoff_ms : r->cfg.backoff_min_ms;
	k->retry_at_ns = kvpi_remote_now_ns() + (uint64_t)b * 1000000ull;
	k->backoff_ms = b >= r->cfg.backoff_max_ms / 2 ? r->cfg.backoff_max_ms : 2 * b;
	k->failed_before = true;
}

redisContext *kvpi_remote_conn_get(struct kvp_remote *r, struct kvpi_remote_conn *k,
                                   uint32_t timeout_ms)
{
	if (k->c != NULL)
		return k->c;
	if (k->retry_at_ns != 0 && kvpi_remote_now_ns() < k->retry_at_ns)
		return NULL;
	k->c = dial(r, timeout_ms && timeout_ms < k->timeout_ms ? timeout_ms : k->timeout_ms);
	if (k->c == NULL) {
		backoff(r, k);
		return NULL;
	}
	if (k->failed_before)
		kvpi_remote_add(&r->st_reconnects, 1);
	return k->c;
}

void kvpi_remote_conn_fail(struct kvp_remote *r, struct kvpi_remote_conn *k)
{
	if (k->c != NULL) {
		redisFree(k->c);
		k->c = NULL;
	}
	backoff(r, k);
}

void kvpi_remote_conn_ok(struct kvp_remote *r, struct kvpi_remote_conn *k)
{
	(void)r;
	k->backoff_ms = 0;
	k->retry_at_ns = 0;
}

void kvpi_remote_conn_close(struct kvpi_remote_conn *k)
{
	if (k->c != NULL) {
		redisFree(k->c);
		k->c = NULL;
	}
}

#endif /* KVP_NO_HIREDIS */
