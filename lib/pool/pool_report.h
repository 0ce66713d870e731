/*
 * lib/pool/pool_report.h - the KVPOOL_SHOW_STATS hook of kvp_pool_destroy.
 */
#ifndef KVPOOL_LIB_POOL_REPORT_H
#define KVPOOL_LIB_POOL_REPORT_H

#include <kvpool/pool.h>

/*
 * kvpi_pool_report_at_destroy - with KVPOOL_SHOW_STATS set (not "" or "0"),
 * write kvp_pool_dump's report of @pool to stderr ("json": KVP_DUMP_JSON).
 * Called by kvp_pool_destroy before it frees anything.
 */
void kvpi_pool_report_at_destroy(kvp_pool *pool);

#endif /* KVPOOL_LIB_POOL_REPORT_H */
