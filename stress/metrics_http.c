/*
 * stress/metrics_http.c - see metrics_http.h.
 *
 * libmicrohttpd with its internal polling thread: one extra thread, no
 * event loop in the programs.  Bound to 127.0.0.1 only (MHD_OPTION_SOCK_ADDR):
 * the endpoint is for a local Prometheus, not for the network.  Each scrape
 * builds the text into a fresh malloc'd buffer that libmicrohttpd frees
 * after sending it (MHD_RESPMEM_MUST_FREE), so scrapes share no state.
 *
 * Slow clients: about 1,000 local connections sending a byte every few
 * seconds used to make every scrape fail (select() mode cannot watch a
 * socket above FD_SETSIZE, and a 10-s inactivity timeout kept them all).
 * Now the daemon polls with epoll, holds at most MHTTP_MAX_CONN
 * connections (MHTTP_MAX_PER_IP per address), and closes a connection
 * after MHTTP_TIMEOUT_S seconds without a byte; tests/metrics_slow_test.sh
 * scrapes while 1,000 slow clients hold or wait for connections.
 *
 * The limit left: a timeout of inactivity, not a deadline.  Clients on the
 * scraper's own address that keep MHTTP_MAX_PER_IP connections each
 * sending a byte more often than every MHTTP_TIMEOUT_S seconds keep new
 * connections from that address out for as long as they do (the process
 * itself is unaffected).  libmicrohttpd has no deadline for a request's
 * head; the endpoint is for a local Prometheus where local users are
 * trusted (docs/REPLAY.md says so).
 */
#include "stress/metrics_http.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define MHTTP_MAX_CONN   512 /* connections held at once */
#define MHTTP_MAX_PER_IP 384 /* of which from one address */
#define MHTTP_TIMEOUT_S  1   /* seconds without a byte before a connection is closed */

struct mhttp {
	struct MHD_Daemon *d;
	mhttp_fill_fn fill;
	void *arg;
	uint16_t port;
	/* Read by the program's thread for its report; relaxed: a plain counter. */
	atomic_uint_fast64_t scrapes;
};

void mtext_printf(mtext *t, const char *fmt, ...)
{
	va_list ap;
	if (t->overflow)
		return;
	va_start(ap, fmt);
	int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= t->cap - t->len) {
		t->overflow = true;
		return;
	}
	t->len += (size_t)n;
}

void mtext_metric(mtext *t, const char *name, const char *type, const char *help, double value)
{
	mtext_printf(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
	if (value == (double)(uint64_t)value && value < 1e17)
		mtext_printf(t, "%s %llu\n", name, (unsigned long long)value);
	else
		mtext_printf(t, "%s %.9g\n", name, value);
}

static void mtext_from(mtext *t, int rc, size_t len)
{
	if (rc == KVP_ERANGE)
		t->overflow = true;
	else if (rc == KVP_OK)
		t->len += len;
}

void mtext_pool(mtext *t, const kvp_stats *s)
{
	size_t len = 0;
	if (t->overflow)
		return;
	mtext_from(t, kvp_stats_to_prometheus(s, NULL, t->buf + t->len, t->cap - t->len, &len),
	           len);
}

void mtext_pool_live(mtext *t, kvp_pool *pool, const char *name)
{
	size_t len = 0;
	if (t->overflow)
		return;
	mtext_from(t,
	           kvp_pools_to_prometheus(&pool, &name, 1, t->buf + t->len, t->cap - t->len, &len),
	           len);
}

void mtext_bufcache(mtext *t, const kvp_bufcache_stats *s)
{
	size_t len = 0;
	if (t->overflow)
		return;
	mtext_from(
	    t, kvp_bufcache_stats_to_prometheus(s, NULL, t->buf + t->len, t->cap - t->len, &len),
	    len);
}

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned status, char *body, size_t len,
                             const char *type)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
	if (r == NULL) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(r, "Content-Type", type);
	enum MHD_Result ret = MHD_queue_response(conn, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload_data,
                              size_t *upload_data_size, void **con_cls)
{
	mhttp *m = cls;
	(void)version;
	(void)upload_data;
	(void)con_cls;
	if (*upload_data_size != 0) /* no request bodies: drop them */
		*upload_data_size = 0;
	if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
		char *b = strdup("method not allowed\n");
		return b ? reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED, b, strlen(b), "text/plain")
		         : MHD_NO;
	}
	if (strcmp(url, "/metrics") != 0) {
		char *b = strdup("kvpool: metrics are at /metrics\n");
		return b ? reply(conn, MHD_HTTP_NOT_FOUND, b, strlen(b), "text/plain") : MHD_NO;
	}
	mtext t = {.cap = 16384};
	for (;;) {
		t.buf = malloc(t.cap);
		if (t.buf == NULL)
			return MHD_NO;
		t.len = 0;
		t.overflow = false;
		m->fill(m->arg, &t);
		if (!t.overflow)
			break;
		free(t.buf);
		if (t.cap > (64u << 20))
			return MHD_NO;
		t.cap *= 4;
	}
	atomic_fetch_add_explicit(&m->scrapes, 1, memory_order_relaxed);
	return reply(conn, MHD_HTTP_OK, t.buf, t.len, "text/plain; version=0.0.4; charset=utf-8");
}

int mhttp_start(uint16_t port, mhttp_fill_fn fill, void *arg, mhttp **out, char *err, size_t errcap)
{
	mhttp *m = calloc(1, sizeof *m);
	if (m == NULL) {
		snprintf(err, errcap, "metrics: out of memory");
		return -1;
	}
	m->fill = fill;
	m->arg = arg;
	atomic_init(&m->scrapes, 0);
	struct sockaddr_in sa;
	memset(&sa, 0, sizeof sa);
	sa.sin_family = AF_INET;
	sa.sin_port = htons(port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	/* Slow or idle clients must not starve a scrape (see the top of the
	 * file): epoll, not select() (no FD_SETSIZE ceiling), at most
	 * MHTTP_MAX_CONN connections (then new ones wait in the listen backlog,
	 * first come first served, until one closes) and MHTTP_MAX_PER_IP from
	 * one address, and a connection silent for MHTTP_TIMEOUT_S seconds is
	 * closed.  A scrape answers in microseconds, so the timeout only ever
	 * cuts incomplete or idle requests. */
	m->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL, port, NULL, NULL,
	                        handle, m, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
	                        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)MHTTP_TIMEOUT_S,
	                        MHD_OPTION_CONNECTION_LIMIT, (unsigned int)MHTTP_MAX_CONN,
	                        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned int)MHTTP_MAX_PER_IP,
	                        MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned int)4096, MHD_OPTION_END);
	if (m->d == NULL) {
		snprintf(err, errcap,
		         "metrics: cannot listen on 127.0.0.1:%u (port in use or not allowed)",
		         (unsigned)port);
		free(m);
		return -1;
	}
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(m->d, MHD_DAEMON_INFO_BIND_PORT);
	m->port = info != NULL && info->port != 0 ? info->port : port;
	*out = m;
	return 0;
}

uint16_t mhttp_port(const mhttp *m)
{
	return m->port;
}

uint64_t mhttp_scrapes(const mhttp *m)
{
	return atomic_load_explicit(&((mhttp *)m)->scrapes, memory_order_relaxed);
}

void mhttp_stop(mhttp *m)
{
	if (m == NULL)
		return;
	MHD_stop_daemon(m->d);
	free(m);
}
