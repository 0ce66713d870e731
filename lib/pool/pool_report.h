/*
 * lib/pool/pool_report.h - the KVPOOL_SHOW_STATS hooks of kvp_pool_create and
 * kvp_pool_destroy, and the per-stream figures both Prometheus forms print.
 */
#ifndef KVPOOL_LIB_POOL_REPORT_H
#define KVPOOL_LIB_POOL_REPORT_H

#include <stddef.h>

#include <kvpool/pool.h>

/* A stream's figures as reported: its name ("k", "v" or "kv") and counts. */
struct kvpi_stream_fig {
	const char *name;
	size_t managed, free, in_use;
};

/* kvpi_stream_figs - @pool's streams into @out; returns how many (1 or 2). */
size_t kvpi_stream_figs(kvp_pool *pool, struct kvpi_stream_fig out[2]);

/*
 * kvpi_pool_report_at_create - with KVPOOL_SHOW_STATS set, list @pool for the
 * report at exit (the first call registers the exit handler).  Called by
 * kvp_pool_create once the pool is whole.
 */
void kvpi_pool_report_at_create(kvp_pool *pool);

/*
 * kvpi_pool_report_at_destroy - with KVPOOL_SHOW_STATS set (not "" or "0"),
 * write kvp_pool_dump's report of @pool to stderr ("json": KVP_DUMP_JSON);
 * either way take @pool off the exit list.  Called by kvp_pool_destroy before
 * it frees anything.
 */
void kvpi_pool_report_at_destroy(kvp_pool *pool);

#endif /* KVPOOL_LIB_POOL_REPORT_H */
