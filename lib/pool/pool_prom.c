/*
 * lib/pool/pool_prom.c - kvp_pools_to_prometheus: the Prometheus exposition
 * of the live pools of a process, one set of family names (kvpool_*) with a
 * label pool="..." telling the pools apart.
 *
 * Why one function for many pools: the text format wants each family's
 * # HELP and # TYPE once, with all its samples after them.  Two pools'
 * texts written one after the other would repeat every family (promtool
 * rejects it), so the caller hands every pool at once and each family is
 * written once with a sample per pool.  Each pool's figures are read once,
 * first (kvp_pool_stats, the per-stream counts, the latency buckets), so
 * every family of a pool shows the same snapshot.
 *
 * The snapshots go into one allocation through the system-call door (a
 * scrape is not a hot path); nothing else is allocated and no lock is taken.
 */
#include <kvpool/report.h>
#include <kvpool/version.h>

#include <stdio.h>
#include <string.h>

#include "lib/base/sysmem.h"
#include "lib/base/text.h"
#include "lib/pool/pool_internal.h"
#include "lib/pool/pool_latency.h"
#include "lib/pool/pool_report.h"

struct snap {
	const char *name;
	char idx[24]; /* the name when none is given: the pool's index */
	kvp_stats s;
	struct kvpi_stream_fig f[2];
	size_t ns;
	uint64_t lat[KVPI_LAT_N + 1], lat_sum_ns;
	uint32_t block_size, n_blocks, max_blocks;
	bool prefix_cache;
};

/* A label value with \, " and newline escaped, as the text format wants. */
static void put_label(struct kvpi_text *t, const char *v)
{
	for (const char *c = v; *c; c++) {
		if (*c == '\\' || *c == '"')
			kvpi_text_printf(t, "\\%c", *c);
		else if (*c == '\n')
			kvpi_text_printf(t, "\\n");
		else
			kvpi_text_printf(t, "%c", *c);
	}
}

static void head(struct kvpi_text *t, const char *name, const char *type, const char *help)
{
	kvpi_text_printf(t, "# HELP kvpool_%s %s\n# TYPE kvpool_%s %s\n", name, help, name, type);
}

static void open_sample(struct kvpi_text *t, const char *name, const struct snap *s)
{
	kvpi_text_printf(t, "kvpool_%s{pool=\"", name);
	put_label(t, s->name);
	kvpi_text_printf(t, "\"");
}

/* One family with one integer sample per pool: the value at byte @off of kvp_stats. */
static void fam_stat(struct kvpi_text *t, const struct snap *sn, size_t n, const char *name,
                     const char *type, const char *help, size_t off)
{
	head(t, name, type, help);
	for (size_t i = 0; i < n; i++) {
		uint64_t v;
		memcpy(&v, (const char *)&sn[i].s + off, sizeof v);
		open_sample(t, name, &sn[i]);
		kvpi_text_printf(t, "} %llu\n", (unsigned long long)v);
	}
}

static double in_use_of(const struct snap *s)
{
	return (double)kvp_stats_blocks_in_use(&s->s);
}

static void fam_gauges(struct kvpi_text *t, const struct snap *sn, size_t n)
{
	head(t, "blocks_in_use", "gauge", "Blocks handed out and not yet freed.");
	for (size_t i = 0; i < n; i++) {
		open_sample(t, "blocks_in_use", &sn[i]);
		kvpi_text_printf(t, "} %.0f\n", in_use_of(&sn[i]));
	}
	fam_stat(t, sn, n, "blocks_managed", "gauge", "Blocks the pool manages now.",
	         offsetof(kvp_stats, n_blocks));
	head(t, "usage_ratio", "gauge", "Blocks in use / blocks managed (0 when none managed).");
	for (size_t i = 0; i < n; i++) {
		open_sample(t, "usage_ratio", &sn[i]);
		kvpi_text_printf(t, "} %.6f\n",
		                 sn[i].s.n_blocks ? in_use_of(&sn[i]) / (double)sn[i].s.n_blocks
		                                  : 0.0);
	}
	head(t, "fragmentation", "gauge", "Fraction of managed blocks in use and not full.");
	for (size_t i = 0; i < n; i++) {
		open_sample(t, "fragmentation", &sn[i]);
		kvpi_text_printf(t, "} %.6f\n", kvp_stats_fragmentation(&sn[i].s));
	}
	fam_stat(t, sn, n, "peak_blocks_in_use", "gauge", "High-water mark of blocks in use.",
	         offsetof(kvp_stats, peak_blocks_in_use));
	fam_stat(t, sn, n, "cached_blocks", "gauge",
	         "Published blocks nobody holds, free but still findable by key.",
	         offsetof(kvp_stats, n_cached));
}

static void fam_counters(struct kvpi_text *t, const struct snap *sn, size_t n)
{
	static const struct {
		const char *name, *help;
		size_t off;
	} c[] = {
	    {"allocations_total", "Blocks handed out.", offsetof(kvp_stats, n_allocations)},
	    {"frees_total", "Blocks returned.", offsetof(kvp_stats, n_frees)},
	    {"reused_total", "Allocations served by a block freed before.",
	     offsetof(kvp_stats, n_reused)},
	    {"exhausted_total", "Allocate calls that failed for want of blocks.",
	     offsetof(kvp_stats, n_exhausted)},
	    {"grown_total", "Blocks added by growth.", offsetof(kvp_stats, n_grown)},
	    {"retired_total", "Blocks removed by shrink.", offsetof(kvp_stats, n_retired)},
	    {"stale_frees_total", "Frees skipped: block already free or stale generation.",
	     offsetof(kvp_stats, n_stale_frees)},
	    {"prefix_queries_total", "Keys asked for by prefix matches.",
	     offsetof(kvp_stats, n_prefix_queries)},
	    {"prefix_hits_total", "Blocks handed out by prefix matches.",
	     offsetof(kvp_stats, n_prefix_hits)},
	    {"evictions_total", "Cached blocks evicted.", offsetof(kvp_stats, n_evictions)},
	};
	for (size_t k = 0; k < sizeof c / sizeof c[0]; k++)
		fam_stat(t, sn, n, c[k].name, "counter", c[k].help, c[k].off);
}

static void fam_streams(struct kvpi_text *t, const struct snap *sn, size_t n, bool free)
{
	const char *name = free ? "stream_blocks_free" : "stream_blocks_in_use";
	head(t, name, "gauge",
	     free ? "Free blocks of a stream, thread caches included."
	          : "Blocks of a stream handed out and not yet freed.");
	for (size_t i = 0; i < n; i++)
		for (size_t k = 0; k < sn[i].ns; k++) {
			open_sample(t, name, &sn[i]);
			kvpi_text_printf(t, ",stream=\"%s\"} %zu\n", sn[i].f[k].name,
			                 free ? sn[i].f[k].free : sn[i].f[k].in_use);
		}
}

static void fam_config(struct kvpi_text *t, const struct snap *sn, size_t n)
{
	head(t, "config_info", "gauge",
	     "A pool's configuration in labels (max_blocks: the growth cap, or unbounded); "
	     "value 1.");
	for (size_t i = 0; i < n; i++) {
		open_sample(t, "config_info", &sn[i]);
		kvpi_text_printf(t, ",block_size=\"%u\",n_blocks=\"%u\",max_blocks=\"",
		                 sn[i].block_size, sn[i].n_blocks);
		if (sn[i].max_blocks >= KVP_MAX_BLOCKS)
			kvpi_text_printf(t, "unbounded");
		else
			kvpi_text_printf(t, "%u", sn[i].max_blocks);
		kvpi_text_printf(t, "\",prefix_cache=\"%s\"} 1\n",
		                 sn[i].prefix_cache ? "true" : "false");
	}
}

static void fam_latency(struct kvpi_text *t, const struct snap *sn, size_t n)
{
	const char *name = "allocate_duration_seconds";
	head(t, name, "histogram",
	     "kvp_allocate call duration, one call in 1024 per thread sampled.");
	for (size_t i = 0; i < n; i++) {
		for (unsigned b = 0; b <= KVPI_LAT_N; b++) {
			open_sample(t, "allocate_duration_seconds_bucket", &sn[i]);
			if (b < KVPI_LAT_N)
				kvpi_text_printf(t, ",le=\"%g\"} %llu\n",
				                 (double)kvpi_lat_bound_ns[b] / 1e9,
				                 (unsigned long long)sn[i].lat[b]);
			else
				kvpi_text_printf(t, ",le=\"+Inf\"} %llu\n",
				                 (unsigned long long)sn[i].lat[b]);
		}
		open_sample(t, "allocate_duration_seconds_sum", &sn[i]);
		kvpi_text_printf(t, "} %.9f\n", (double)sn[i].lat_sum_ns / 1e9);
		open_sample(t, "allocate_duration_seconds_count", &sn[i]);
		kvpi_text_printf(t, "} %llu\n", (unsigned long long)sn[i].lat[KVPI_LAT_N]);
	}
}

/* Arguments valid: pools non-NULL, names (when given) non-NULL and distinct. */
static bool args_ok(kvp_pool *const *pools, const char *const *names, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (!pools[i] || (names && !names[i]))
			return false;
		for (size_t j = 0; names && j < i; j++)
			if (strcmp(names[i], names[j]) == 0)
				return false; /* two series with the same labels */
	}
	return true;
}

static int take(kvp_pool *p, const char *name, size_t i, struct snap *s)
{
	int rc = kvp_pool_stats(p, &s->s);
	if (rc != KVP_OK)
		return rc;
	snprintf(s->idx, sizeof s->idx, "%zu", i);
	s->name = name ? name : s->idx;
	s->ns = kvpi_stream_figs(p, s->f);
	kvpi_lat_read(&p->alloc_lat, s->lat, &s->lat_sum_ns);
	s->block_size = p->block_size;
	s->n_blocks = p->n_blocks_initial;
	s->max_blocks = p->max_blocks;
	s->prefix_cache = p->mode != NULL;
	return KVP_OK;
}

int kvp_pools_to_prometheus(kvp_pool *const *pools, const char *const *names, size_t n, char *buf,
                            size_t cap, size_t *len)
{
	if (!pools || !len || n == 0 || (!buf && cap) || !args_ok(pools, names, n))
		return KVP_EINVAL;
	struct snap *sn = kvpi_sys_calloc(n, sizeof *sn, 64);
	if (!sn)
		return KVP_ENOMEM;
	for (size_t i = 0; i < n; i++) {
		int rc = take(pools[i], names ? names[i] : NULL, i, &sn[i]);
		if (rc != KVP_OK) {
			kvpi_sys_free(sn);
			return rc;
		}
	}
	struct kvpi_text t = {buf, cap, 0};
	fam_gauges(&t, sn, n);
	fam_counters(&t, sn, n);
	fam_streams(&t, sn, n, false);
	fam_streams(&t, sn, n, true);
	fam_config(&t, sn, n);
	fam_latency(&t, sn, n);
	kvpi_text_printf(&t,
	                 "# HELP kvpool_build_info The kvpool library serving these figures.\n"
	                 "# TYPE kvpool_build_info gauge\nkvpool_build_info{version=\"%s\"} 1\n",
	                 kvp_version());
	kvpi_sys_free(sn);
	return kvpi_text_finish(&t, len);
}
