/*
 * lib/bufcache/bufcache_stats.c - striped counters and the Prometheus text of a snapshot.
 *
 * The exposition follows the block pool's (kvpool/stats.h): one "# HELP" and
 * one "# TYPE" line per family, counters named *_total and printed as plain
 * integers, gauges as integers too (every figure here is a count of bytes or
 * buffers).  The text goes through the library's one writer (lib/base/text.h),
 * so a short buffer gets KVP_ERANGE, the needed length and an empty string,
 * never partial text.
 */
#include "lib/bufcache/bufcache_stats.h"
#include "lib/base/text.h"

#include <kvpool/bufcache.h>

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

void kvpi_bc_stats_init(struct kvpi_bc_stats *st)
{
	for (int s = 0; s < KVPI_BC_SHARDS; s++)
		for (int c = 0; c < KVPI_BC_N_CTRS; c++)
			atomic_init(&st->s[s].v[c], 0);
}

void kvpi_bc_stats_sum(struct kvpi_bc_stats *st, uint64_t out[KVPI_BC_N_CTRS])
{
	for (int c = 0; c < KVPI_BC_N_CTRS; c++)
		out[c] = 0;
	for (int s = 0; s < KVPI_BC_SHARDS; s++)
		for (int c = 0; c < KVPI_BC_N_CTRS; c++)
			/* relaxed: counters order nothing (bufcache_stats.h). */
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

/* Every family into @t, in the table's order. */
static void render(const kvp_bufcache_stats *s, const char *prefix, struct kvpi_text *t)
{
	for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++) {
		const struct family *f = &families[i];
		uint64_t v;

		memcpy(&v, (const char *)s + f->off, sizeof(v));
		kvpi_prom_u64(t, prefix, f->name, f->type, f->help, v);
	}
}

int kvp_bufcache_stats_to_prometheus(const kvp_bufcache_stats *s, const char *prefix, char *buf,
                                     size_t cap, size_t *len)
{
	if (!s || !len)
		return KVP_EINVAL;
	if (!prefix)
		prefix = "kvpool_bufcache";
	if (!kvpi_prom_valid_name(prefix) || (!buf && cap))
		return KVP_EINVAL;
	struct kvpi_text t = {buf, cap, 0};
	render(s, prefix, &t);
	return kvpi_text_finish(&t, len);
}
