/*
 * stress/metrics_http.h - a /metrics endpoint (Prometheus text exposition)
 * on 127.0.0.1, served by libmicrohttpd's own thread while a program runs.
 *
 * The program gives a fill function that writes the whole exposition into
 * an mtext; it runs on the server thread for each scrape, so it must only
 * read things that are safe to read concurrently (kvp_pool_stats,
 * kvp_bufcache_get_stats, relaxed atomics).  The buffer grows as needed.
 *
 *   function       threading
 *   -------------  ---------------------------------------------------------
 *   mhttp_start    any thread; starts the server thread
 *   mhttp_stop     the thread that started it; waits for scrapes in flight
 *   mtext_*        only inside a fill function (one scrape at a time)
 */
#ifndef KVPOOL_STRESS_METRICS_HTTP_H
#define KVPOOL_STRESS_METRICS_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <kvpool/kvpool.h>

typedef struct mtext {
	char *buf;
	size_t cap, len;
	bool overflow; /* something did not fit: the server retries with more room */
} mtext;

/** mtext_printf - append formatted text */
void mtext_printf(mtext *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/** mtext_metric - append one family with one unlabelled sample (# HELP, # TYPE, value) */
void mtext_metric(mtext *t, const char *name, const char *type, const char *help, double value);

/** mtext_pool - append kvp_stats_to_prometheus(@s, NULL, ...) */
void mtext_pool(mtext *t, const kvp_stats *s);

/**
 * mtext_pool_live - append kvp_pools_to_prometheus of @pool labelled
 * pool="@name": the kvpool_* families (stats, per-stream, config_info, the
 * library's sampled allocate histogram, build_info)
 */
void mtext_pool_live(mtext *t, kvp_pool *pool, const char *name);

/** mtext_bufcache - append kvp_bufcache_stats_to_prometheus(@s, NULL, ...) */
void mtext_bufcache(mtext *t, const kvp_bufcache_stats *s);

typedef void (*mhttp_fill_fn)(void *arg, mtext *t);

typedef struct mhttp mhttp;

/**
 * mhttp_start - serve GET /metrics on 127.0.0.1:@port
 * @port: TCP port; 0 lets the kernel choose (see mhttp_port)
 * @fill: writes the exposition
 * @arg:  passed to @fill
 * @out:  the server
 * @err:  a message on failure
 *
 * Returns 0 or -1.
 */
int mhttp_start(uint16_t port, mhttp_fill_fn fill, void *arg, mhttp **out, char *err,
                size_t errcap);

/** mhttp_port - the port actually bound */
uint16_t mhttp_port(const mhttp *m);

/** mhttp_scrapes - /metrics requests answered so far */
uint64_t mhttp_scrapes(const mhttp *m);

/** mhttp_stop - stop serving and free the server (NULL is a no-op) */
void mhttp_stop(mhttp *m);

#endif /* KVPOOL_STRESS_METRICS_HTTP_H */
