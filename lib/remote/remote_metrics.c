/*
 * lib/remote/remote_metrics.c - the tier's counters as Prometheus text.
 *
 * A pure function of a stats snapshot, like kvp_stats_to_prometheus, so a
 * program with several tiers (one per storage: K and V) can sum their
 * snapshots and export one set of families.  It needs no hiredis and is
 * built in every configuration.  The fetch-latency histogram's buckets
 * live here; remote_fetch.c counts into them.
 */
#include "lib/base/text.h"
#include "lib/remote/remote_internal.h"

#include <string.h>

static const uint32_t lat_bounds_us[KVP_REMOTE_LAT_BUCKETS] = {100,  250,   500,   1000,  2500,
                                                               5000, 10000, 25000, 50000, 100000};

uint32_t kvpi_remote_lat_bound_us(unsigned b)
{
	return b < KVP_REMOTE_LAT_BUCKETS ? lat_bounds_us[b] : 0;
}

int kvp_remote_stats_to_prometheus(const kvp_remote_stats *sp, const char *prefix, char *buf,
                                   size_t cap, size_t *len)
{
	if (sp == NULL || len == NULL || (buf == NULL && cap > 0))
		return KVP_EINVAL;
	const kvp_remote_stats s = *sp;
	if (prefix == NULL)
		prefix = "kvpool_remote";
	if (!kvpi_prom_valid_name(prefix))
		return KVP_EINVAL;
	struct kvpi_text t = {.buf = buf, .cap = cap, .len = 0};
	static const struct {
		const char *name, *help;
		size_t off;
	} ctr[] = {
	    {"hits_total", "Blocks the remote tier returned.", offsetof(kvp_remote_stats, hits)},
	    {"misses_total", "Fetches that stopped at a key the server did not have.",
	     offsetof(kvp_remote_stats, misses)},
	    {"corrupt_total", "Values refused: short, bad checksum, other key, format or size.",
	     offsetof(kvp_remote_stats, corrupt)},
	    {"errors_total", "Fetches that failed: timeout, connection error or back-off.",
	     offsetof(kvp_remote_stats, errors)},
	    {"fetches_total", "Fetches that asked the server.",
	     offsetof(kvp_remote_stats, fetches)},
	    {"read_bytes_total", "Value bytes of the blocks fetched.",
	     offsetof(kvp_remote_stats, bytes_read)},
	    {"written_bytes_total", "Value bytes the server acknowledged.",
	     offsetof(kvp_remote_stats, bytes_written)},
	    {"writes_queued_total", "Blocks queued for writing.",
	     offsetof(kvp_remote_stats, writes_queued)},
	    {"writes_dropped_total", "Blocks not queued: the write queue was full.",
	     offsetof(kvp_remote_stats, writes_dropped)},
	    {"writes_failed_total", "Blocks not written: server error, timeout or back-off.",
	     offsetof(kvp_remote_stats, writes_failed)},
	    {"writes_skipped_total", "Published blocks with no rows stored: nothing sent.",
	     offsetof(kvp_remote_stats, writes_skipped)},
	    {"writes_total", "Blocks the server acknowledged.",
	     offsetof(kvp_remote_stats, writes_done)},
	    {"reconnects_total", "Connections made again after a failure.",
	     offsetof(kvp_remote_stats, reconnects)},
	};
	for (size_t i = 0; i < sizeof ctr / sizeof ctr[0]; i++) {
		uint64_t v;
		memcpy(&v, (const char *)&s + ctr[i].off, sizeof v);
		kvpi_prom_u64(&t, prefix, ctr[i].name, "counter", ctr[i].help, v);
	}
	kvpi_prom_u64(&t, prefix, "queue_depth", "gauge", "Blocks on the write queue now.",
	              s.queue_depth);
	kvpi_text_printf(&t,
	                 "# HELP %s_fetch_seconds Latency of fetches that asked the server.\n"
	                 "# TYPE %s_fetch_seconds histogram\n",
	                 prefix, prefix);
	uint64_t cum = 0;
	for (unsigned b = 0; b < KVP_REMOTE_LAT_BUCKETS; b++) {
		cum += s.lat_count[b];
		kvpi_text_printf(&t, "%s_fetch_seconds_bucket{le=\"%g\"} %llu\n", prefix,
		                 lat_bounds_us[b] / 1e6, (unsigned long long)cum);
	}
	cum += s.lat_count[KVP_REMOTE_LAT_BUCKETS];
	kvpi_text_printf(&t, "%s_fetch_seconds_bucket{le=\"+Inf\"} %llu\n", prefix,
	                 (unsigned long long)cum);
	kvpi_text_printf(&t, "%s_fetch_seconds_sum %.6f\n%s_fetch_seconds_count %llu\n", prefix,
	                 (double)s.lat_sum_us / 1e6, prefix, (unsigned long long)cum);
	return kvpi_text_finish(&t, len);
}
