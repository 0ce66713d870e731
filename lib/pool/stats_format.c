/*
 * lib/pool/stats_format.c - pure functions over a kvp_stats snapshot: the AllocationStats
 * one-line summary and Prometheus text exposition.
 */
#include <kvpool/stats.h>
#include <kvpool/status.h>

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

/* Prometheus metric name rule: [a-zA-Z_:][a-zA-Z0-9_:]* */
static bool valid_prefix(const char *p)
{
	if (!*p)
		return false;
	for (const char *c = p; *c; c++) {
		bool alpha =
		    (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || *c == '_' || *c == ':';
		bool digit = *c >= '0' && *c <= '9';
		if (!alpha && !(digit && c != p))
			return false;
	}
	return true;
}

/* Appends to a buffer that may be too small, counting the length needed. */
struct textbuf {
	char *buf;
	size_t cap, len;
};

static void tb_printf(struct textbuf *t, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	size_t room = t->len < t->cap ? t->cap - t->len : 0;
	int n = vsnprintf(room ? t->buf + t->len : NULL, room, fmt, ap);
	va_end(ap);
	if (n > 0)
		t->len += (size_t)n;
}

static void metric_u64(struct textbuf *t, const char *prefix, const char *name, const char *type,
                       const char *help, uint64_t v)
{
	tb_printf(t, "# HELP %s_%s %s\n# TYPE %s_%s %s\n%s_%s %llu\n", prefix, name, help, prefix,
	          name, type, prefix, name, (unsigned long long)v);
}

int kvp_stats_to_prometheus(const kvp_stats *s, const char *prefix, char *buf, size_t cap,
                            size_t *len)
{
	if (!s || !len || (!buf && cap))
		return KVP_EINVAL;
	if (!prefix)
		prefix = "kvpool_block_pool";
	if (!valid_prefix(prefix))
		return KVP_EINVAL;
	struct textbuf t = {buf, cap, 0};
	metric_u64(&t, prefix, "blocks_in_use", "gauge", "Blocks handed out and not yet freed.",
	           kvp_stats_blocks_in_use(s));
	metric_u64(&t, prefix, "blocks_managed", "gauge", "Blocks the pool manages now.",
	           s->n_blocks);
	tb_printf(&t,
	          "# HELP %s_fragmentation Fraction of managed blocks in use and not full.\n"
	          "# TYPE %s_fragmentation gauge\n%s_fragmentation %.6f\n",
	          prefix, prefix, prefix, kvp_stats_fragmentation(s));
	uint64_t in_use = kvp_stats_blocks_in_use(s);
	tb_printf(&t,
	          "# HELP %s_usage_ratio Blocks in use / blocks managed (0 when none managed).\n"
	          "# TYPE %s_usage_ratio gauge\n%s_usage_ratio %.6f\n",
	          prefix, prefix, prefix, s->n_blocks ? (double)in_use / (double)s->n_blocks : 0.0);
	metric_u64(&t, prefix, "peak_blocks_in_use", "gauge", "High-water mark of blocks in use.",
	           s->peak_blocks_in_use);
	metric_u64(&t, prefix, "allocations_total", "counter", "Blocks handed out.",
	           s->n_allocations);
	metric_u64(&t, prefix, "frees_total", "counter", "Blocks returned.", s->n_frees);
	metric_u64(&t, prefix, "reused_total", "counter",
	           "Allocations served by a block freed before.", s->n_reused);
	metric_u64(&t, prefix, "exhausted_total", "counter",
	           "Allocate calls that failed for want of blocks.", s->n_exhausted);
	metric_u64(&t, prefix, "grown_total", "counter", "Blocks added by growth.", s->n_grown);
	metric_u64(&t, prefix, "retired_total", "counter", "Blocks removed by shrink.",
	           s->n_retired);
	metric_u64(&t, prefix, "stale_frees_total", "counter",
	           "Frees skipped: block already free or stale generation.", s->n_stale_frees);
	metric_u64(&t, prefix, "cached_blocks", "gauge",
	           "Published blocks nobody holds, free but still findable by key.", s->n_cached);
	metric_u64(&t, prefix, "prefix_queries_total", "counter",
	           "Keys asked for by prefix matches.", s->n_prefix_queries);
	metric_u64(&t, prefix, "prefix_hits_total", "counter",
	           "Blocks handed out by prefix matches.", s->n_prefix_hits);
	metric_u64(&t, prefix, "evictions_total", "counter", "Cached blocks evicted.",
	           s->n_evictions);
	*len = t.len;
	if (t.len + 1 > cap) {
		if (cap) /* no partial text: an empty string, as the bufcache's version */
			buf[0] = '\0';
		return KVP_ERANGE;
	}
	return KVP_OK;
}
