/*
 * lib/bufcache/bufcache_stats.c - striped counters and the Prometheus text of a snapshot.
 *
 * The exposition follows the block pool's (kvpool/stats.h): one "# HELP" and
 * one "# TYPE" line per family, counters named *_total and printed as plain
 * integers, gauges as integers too (every figure here is a count of bytes or
 * buffers).  The text is built in two passes of the same table, the first to
 * measure, so a short buffer gets KVP_ERANGE and the needed length and no
 * partial text.
 */
#include "lib/bufcache/bufcache_stats.h"

#include <kvpool/bufcache.h>

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

void bc_stats_init(struct bc_stats *st)
{
	for (int s = 0; s < BC_SHARDS; s++)
		for (int c = 0; c < BC_N_CTRS; c++)
			atomic_init(&st->s[s].v[c], 0);
}

void bc_stats_sum(struct bc_stats *st, uint64_t out[BC_N_CTRS])
{
	for (int c = 0; c < BC_N_CTRS; c++)
		out[c] = 0;
	for (int s = 0; s < BC_SHARDS; s++)
		for (int c = 0; c < BC_N_CTRS; c++)
			out[c] += atomic_load_explicit(&st->s[s].v[c], memory_order_relaxed);
}

struct family {
	const char *name;
	const char *type;
	const char *help;
	size_t off;
};

#define F(n, t, h, field)                                                                          \
	{                                                                                          \
		n, t, h, offsetof(kvp_bufcache_stats, field)                                       \
	}
static const struct family families[] = {
    F("hits_total", "counter", "Allocations served from the cache.", hits),
    F("misses_total", "counter", "Allocations that went to the system allocator.", misses),
    F("evictions_total", "counter", "Cached buffers evicted for the budget or to retry after OOM.",
      evictions),
    F("oom_retries_total", "counter", "System allocations retried after evicting a buffer.",
      oom_retries),
    F("system_allocs_total", "counter", "Buffers allocated from the system.", system_allocs),
    F("system_frees_total", "counter", "Buffers given back to the system.", system_frees),
    F("cached_bytes", "gauge", "Bytes of buffers held in the cache.", cached_bytes),
    F("peak_cached_bytes", "gauge", "Highest cached_bytes seen.", peak_cached_bytes),
    F("cached_buffers", "gauge", "Buffers held in the cache.", cached_buffers),
    F("bytes_in_use", "gauge", "Capacity of buffers handed out and not yet freed.", bytes_in_use),
};
#undef F

static int valid_prefix(const char *p)
{
	if (!*p)
		return 0;
	for (const char *c = p; *c; c++) {
		int alpha =
		    (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || *c == '_' || *c == ':';
		if (!alpha && !(c != p && *c >= '0' && *c <= '9'))
			return 0;
	}
	return 1;
}

/* Write every family into @buf (NULL: just measure); returns the text's length. */
static size_t render(const kvp_bufcache_stats *s, const char *prefix, char *buf, size_t cap)
{
	size_t len = 0;

	for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++) {
		const struct family *f = &families[i];
		uint64_t v;
		int k;

		memcpy(&v, (const char *)s + f->off, sizeof(v));
		k = snprintf(buf ? buf + len : NULL, buf ? cap - len : 0,
		             "# HELP %s_%s %s\n# TYPE %s_%s %s\n%s_%s %" PRIu64 "\n", prefix,
		             f->name, f->help, prefix, f->name, f->type, prefix, f->name, v);
		len += (size_t)(k > 0 ? k : 0);
	}
	return len;
}

int kvp_bufcache_stats_to_prometheus(const kvp_bufcache_stats *s, const char *prefix, char *buf,
                                     size_t cap, size_t *len)
{
	size_t need;

	if (!s || !len)
		return KVP_EINVAL;
	if (!prefix)
		prefix = "kvpool_bufcache";
	if (!valid_prefix(prefix) || (!buf && cap))
		return KVP_EINVAL;
	need = render(s, prefix, NULL, 0);
	*len = need;
	if (cap < need + 1) {
		if (cap)
			buf[0] = '\0';
		return KVP_ERANGE;
	}
	render(s, prefix, buf, cap);
	return KVP_OK;
}
