/*
 * lib/pool/stats_format.c - pure functions over a kvp_stats snapshot: the AllocationStats
 * one-line summary and Prometheus text exposition.
 */
#include <kvpool/stats.h>
#include <kvpool/status.h>

#include "lib/base/text.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

uint64_t kvp_stats_blocks_in_use(const kvp_stats *s)
{
	if (!s || s->n_allocations < s->n_frees)
		return 0;
	return s->n_allocations - s->n_frees;
}

double kvp_stats_fragmentation(const kvp_stats *s)
{
	if (!s || s->n_blocks == 0)
		return 0.0;
	return (double)s->n_not_full / (double)s->n_blocks;
}

int kvp_stats_format(const kvp_stats *s, char *buf, size_t cap)
{
	if (!s || !buf)
		return KVP_EINVAL;
	int n = snprintf(buf, cap,
	                 "AllocationStats(in_use=%llu/%llu, allocations=%llu, frees=%llu, "
	                 "reused=%llu, exhausted=%llu, grown=%llu, retired=%llu, peak=%llu, "
	                 "fragmentation=%.3f)",
	                 (unsigned long long)kvp_stats_blocks_in_use(s),
	                 (unsigned long long)s->n_blocks, (unsigned long long)s->n_allocations,
	                 (unsigned long long)s->n_frees, (unsigned long long)s->n_reused,
	                 (unsigned long long)s->n_exhausted, (unsigned long long)s->n_grown,
	                 (unsigned long long)s->n_retired,
	                 (unsigned long long)s->peak_blocks_in_use, kvp_stats_fragmentation(s));
	if (n < 0)
		return KVP_EINVAL;
	if ((size_t)n >= cap) {
		if (cap)
			buf[0] = '\0';
		return KVP_ERANGE;
	}
	return n;
}

int kvp_stats_to_prometheus(const kvp_stats *s, const char *prefix, char *buf, size_t cap,
                            size_t *len)
{
	if (!s || !len || (!buf && cap))
		return KVP_EINVAL;
	if (!prefix)
		prefix = "kvpool_block_pool";
	if (!kvpi_prom_valid_name(prefix))
		return KVP_EINVAL;
	struct kvpi_text t = {buf, cap, 0};
	kvpi_prom_u64(&t, prefix, "blocks_in_use", "gauge", "Blocks handed out and not yet freed.",
	              kvp_stats_blocks_in_use(s));
	kvpi_prom_u64(&t, prefix, "blocks_managed", "gauge", "Blocks the pool manages now.",
	              s->n_blocks);
	kvpi_prom_f64(&t, prefix, "fragmentation",
	              "Fraction of managed blocks in use and not full.",
	              kvp_stats_fragmentation(s));
	uint64_t in_use = kvp_stats_blocks_in_use(s);
	kvpi_prom_f64(&t, prefix, "usage_ratio",
	              "Blocks in use / blocks managed (0 when none managed).",
	              s->n_blocks ? (double)in_use / (double)s->n_blocks : 0.0);
	kvpi_prom_u64(&t, prefix, "peak_blocks_in_use", "gauge",
	              "High-water mark of blocks in use.", s->peak_blocks_in_use);
	kvpi_prom_u64(&t, prefix, "allocations_total", "counter", "Blocks handed out.",
	              s->n_allocations);
	kvpi_prom_u64(&t, prefix, "frees_total", "counter", "Blocks returned.", s->n_frees);
	kvpi_prom_u64(&t, prefix, "reused_total", "counter",
	              "Allocations served by a block freed before.", s->n_reused);
	kvpi_prom_u64(&t, prefix, "exhausted_total", "counter",
	              "Allocate calls that failed for want of blocks.", s->n_exhausted);
	kvpi_prom_u64(&t, prefix, "grown_total", "counter", "Blocks added by growth.", s->n_grown);
	kvpi_prom_u64(&t, prefix, "retired_total", "counter", "Blocks removed by shrink.",
	              s->n_retired);
	kvpi_prom_u64(&t, prefix, "stale_frees_total", "counter",
	              "Frees skipped: block already free or stale generation.", s->n_stale_frees);
	kvpi_prom_u64(&t, prefix, "cached_blocks", "gauge",
	              "Published blocks nobody holds, free but still findable by key.",
	              s->n_cached);
	kvpi_prom_u64(&t, prefix, "prefix_queries_total", "counter",
	              "Keys asked for by prefix matches.", s->n_prefix_queries);
	kvpi_prom_u64(&t, prefix, "prefix_hits_total", "counter",
	              "Blocks handed out by prefix matches.", s->n_prefix_hits);
	kvpi_prom_u64(&t, prefix, "evictions_total", "counter", "Cached blocks evicted.",
	              s->n_evictions);
	return kvpi_text_finish(&t, len);
}
