/*
 * lib/pool/pool_report.c - a live pool's figures for people and monitoring:
 * per-stream counts, the Prometheus exposition of a pool, kvp_pool_dump and
 * the KVPOOL_SHOW_STATS report at kvp_pool_destroy and at exit.
 *
 * Everything here reads what kvp_pool_stats and kvp_n_free read, plus the
 * per-stream managed counters (relaxed loads: each is a statistic exact at
 * some instant, nothing is ordered by it).  No lock, no allocation.
 */
#include <kvpool/report.h>
#include <kvpool/version.h>

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "lib/base/text.h"
#include "lib/pool/pool_internal.h"
#include "lib/pool/pool_report.h"

size_t kvp_pool_n_managed(kvp_pool *p, kvp_stream stream)
{
	if (!p)
		return 0;
	int si = kvpi_stream_index(p, stream);
	if (si < 0)
		return 0;
	/* relaxed: a statistic; written under grow_lock, read without it. */
	return (size_t)atomic_load_explicit(&p->managed_stream[si], memory_order_relaxed);
}

size_t kvpi_stream_figs(kvp_pool *p, struct kvpi_stream_fig out[2])
{
	static const kvp_stream sep[2] = {KVP_K, KVP_V};
	size_t n = p->separate_kv ? 2 : 1; /* the field: no call back into pool.c */
	for (size_t i = 0; i < n; i++) {
		kvp_stream st = n == 2 ? sep[i] : KVP_KV;
		out[i].name = n == 2 ? (i == 0 ? "k" : "v") : "kv";
		out[i].managed = kvp_pool_n_managed(p, st);
		out[i].free = kvp_n_free(p, st);
		/* Read at different instants: clamp, never report a negative count. */
		out[i].in_use = out[i].managed > out[i].free ? out[i].managed - out[i].free : 0;
	}
	return n;
}

int kvp_pool_to_prometheus(kvp_pool *p, const char *prefix, char *buf, size_t cap, size_t *len)
{
	if (!p || !len || (!buf && cap))
		return KVP_EINVAL;
	if (!prefix)
		prefix = "kvpool_block_pool";
	kvp_stats s;
	int rc = kvp_pool_stats(p, &s);
	if (rc != KVP_OK)
		return rc;
	size_t n = 0;
	rc = kvp_stats_to_prometheus(&s, prefix, buf, cap, &n);
	if (rc != KVP_OK && rc != KVP_ERANGE)
		return rc; /* an invalid prefix */
	struct kvpi_text t = {buf, cap, n};
	struct kvpi_stream_fig f[2];
	size_t ns = kvpi_stream_figs(p, f);
	kvpi_text_printf(
	    &t,
	    "# HELP %s_stream_blocks_in_use Blocks of a stream handed out and not yet freed.\n"
	    "# TYPE %s_stream_blocks_in_use gauge\n",
	    prefix, prefix);
	for (size_t i = 0; i < ns; i++)
		kvpi_text_printf(&t, "%s_stream_blocks_in_use{stream=\"%s\"} %zu\n", prefix,
		                 f[i].name, f[i].in_use);
	kvpi_text_printf(
	    &t,
	    "# HELP %s_stream_blocks_free Free blocks of a stream, thread caches included.\n"
	    "# TYPE %s_stream_blocks_free gauge\n",
	    prefix, prefix);
	for (size_t i = 0; i < ns; i++)
		kvpi_text_printf(&t, "%s_stream_blocks_free{stream=\"%s\"} %zu\n", prefix,
		                 f[i].name, f[i].free);
	char max_blocks[16] = "unbounded";
	if (p->max_blocks < KVP_MAX_BLOCKS)
		snprintf(max_blocks, sizeof max_blocks, "%u", p->max_blocks);
	kvpi_text_printf(&t,
	                 "# HELP %s_config_info A pool's configuration in labels (max_blocks: the "
	                 "growth cap, or unbounded); value 1.\n# TYPE %s_config_info gauge\n"
	                 "%s_config_info{block_size=\"%u\",n_blocks=\"%u\",max_blocks=\"%s\","
	                 "prefix_cache=\"%s\"} 1\n",
	                 prefix, prefix, prefix, p->block_size, p->n_blocks_initial, max_blocks,
	                 p->mode ? "true" : "false");
	kvpi_text_printf(&t,
	                 "# HELP %s_build_info The kvpool library serving these figures.\n"
	                 "# TYPE %s_build_info gauge\n%s_build_info{version=\"%s\"} 1\n",
	                 prefix, prefix, prefix, kvp_version());
	return kvpi_text_finish(&t, len);
}

static double ratio(uint64_t a, uint64_t b)
{
	return b ? (double)a / (double)b : 0.0;
}

static void dump_text(struct kvpi_text *t, kvp_pool *p, const kvp_stats *s,
                      const struct kvpi_stream_fig *f, size_t ns)
{
	uint64_t in_use = kvp_stats_blocks_in_use(s);
	kvpi_text_printf(t, "kvpool %s pool report\n", kvp_version());
	kvpi_text_printf(
	    t, "  layout            %s, block_size %u, thread_cache %u, prefix cache %s\n",
	    ns == 2 ? "separate K/V streams" : "one K+V stream", p->block_size, p->thread_cache,
	    p->mode ? "on" : "off");
	/* grow_cfg: in prefix mode p->grow is off and that layer grows. */
	kvpi_text_printf(t, "  growth            %s, max_blocks ", p->grow_cfg ? "on" : "off");
	if (p->max_blocks >= KVP_MAX_BLOCKS) /* max_blocks 0 in the config: no cap */
		kvpi_text_printf(t, "unbounded\n");
	else
		kvpi_text_printf(t, "%u\n", p->max_blocks);
	kvpi_text_printf(t, "  blocks managed    %llu", (unsigned long long)s->n_blocks);
	for (size_t i = 0; i < ns; i++)
		kvpi_text_printf(t, "%s%s %zu", i ? ", " : " (", f[i].name, f[i].managed);
	kvpi_text_printf(t, ")\n  blocks in use     %llu", (unsigned long long)in_use);
	for (size_t i = 0; i < ns; i++)
		kvpi_text_printf(t, "%s%s %zu", i ? ", " : " (", f[i].name, f[i].in_use);
	kvpi_text_printf(t, "), peak %llu\n  blocks free      ",
	                 (unsigned long long)s->peak_blocks_in_use);
	for (size_t i = 0; i < ns; i++)
		kvpi_text_printf(t, "%s%s %zu", i ? ", " : " ", f[i].name, f[i].free);
	kvpi_text_printf(t, "\n  usage ratio       %.3f (in use / managed)\n",
	                 ratio(in_use, s->n_blocks));
	kvpi_text_printf(t, "  fragmentation     %.3f (in use and not full / managed)\n",
	                 kvp_stats_fragmentation(s));
	kvpi_text_printf(t, "  blocks allocated  %llu (cumulative), reused %llu\n",
	                 (unsigned long long)s->n_allocations, (unsigned long long)s->n_reused);
	kvpi_text_printf(t, "  blocks freed      %llu (cumulative), stale frees skipped %llu\n",
	                 (unsigned long long)s->n_frees, (unsigned long long)s->n_stale_frees);
	kvpi_text_printf(t,
	                 "  exhausted calls   %llu (allocate calls refused for want of blocks)\n",
	                 (unsigned long long)s->n_exhausted);
	kvpi_text_printf(t, "  grown / retired   %llu / %llu blocks\n",
	                 (unsigned long long)s->n_grown, (unsigned long long)s->n_retired);
}

static void dump_json(struct kvpi_text *t, kvp_pool *p, const kvp_stats *s,
                      const struct kvpi_stream_fig *f, size_t ns)
{
	uint64_t in_use = kvp_stats_blocks_in_use(s);
	char max_blocks[16] = "null"; /* null: no cap (max_blocks 0 in the config) */
	if (p->max_blocks < KVP_MAX_BLOCKS)
		snprintf(max_blocks, sizeof max_blocks, "%u", p->max_blocks);
	kvpi_text_printf(
	    t,
	    "{\"version\":\"%s\",\"block_size\":%u,\"separate_kv\":%s,\"prefix_cache\":%s,"
	    "\"thread_cache\":%u,\"grow_on_exhaustion\":%s,\"max_blocks\":%s,"
	    "\"blocks_managed\":%llu,\"blocks_in_use\":%llu,\"peak_blocks_in_use\":%llu,"
	    "\"usage_ratio\":%.6f,\"fragmentation\":%.6f,\"allocations\":%llu,"
	    "\"frees\":%llu,\"reused\":%llu,\"exhausted\":%llu,\"grown\":%llu,"
	    "\"retired\":%llu,\"stale_frees\":%llu,\"streams\":{",
	    kvp_version(), p->block_size, ns == 2 ? "true" : "false", p->mode ? "true" : "false",
	    p->thread_cache, p->grow_cfg ? "true" : "false", max_blocks,
	    (unsigned long long)s->n_blocks, (unsigned long long)in_use,
	    (unsigned long long)s->peak_blocks_in_use, ratio(in_use, s->n_blocks),
	    kvp_stats_fragmentation(s), (unsigned long long)s->n_allocations,
	    (unsigned long long)s->n_frees, (unsigned long long)s->n_reused,
	    (unsigned long long)s->n_exhausted, (unsigned long long)s->n_grown,
	    (unsigned long long)s->n_retired, (unsigned long long)s->n_stale_frees);
	for (size_t i = 0; i < ns; i++)
		kvpi_text_printf(t, "%s\"%s\":{\"managed\":%zu,\"in_use\":%zu,\"free\":%zu}",
		                 i ? "," : "", f[i].name, f[i].managed, f[i].in_use, f[i].free);
	kvpi_text_printf(t, "}}\n");
}

int kvp_pool_dump(kvp_pool *p, FILE *f, unsigned flags)
{
	if (!p || !f || (flags & ~KVP_DUMP_JSON))
		return KVP_EINVAL;
	kvp_stats s;
	int rc = kvp_pool_stats(p, &s);
	if (rc != KVP_OK)
		return rc;
	struct kvpi_stream_fig fig[2];
	size_t ns = kvpi_stream_figs(p, fig);
	char buf[2048]; /* either report of the largest figures is under 1 KiB */
	struct kvpi_text t = {buf, sizeof buf, 0};
	if (flags & KVP_DUMP_JSON)
		dump_json(&t, p, &s, fig, ns);
	else
		dump_text(&t, p, &s, fig, ns);
	if (t.len >= sizeof buf)
		return KVP_ENOMEM; /* cannot happen with 64-bit figures; never a partial report */
	if (fwrite(buf, 1, t.len, f) != t.len || fflush(f) != 0)
		return KVP_ERANGE;
	return KVP_OK;
}

/*
 * KVPOOL_SHOW_STATS: the report of each pool at kvp_pool_destroy, and at
 * exit of each pool still alive then (a program that never destroys its
 * pools, as mimalloc's MIMALLOC_SHOW_STATS prints at exit).  Pools made
 * while the variable is set go on a list (show_lock); the first one
 * registers the exit handler.  Without the variable nothing is listed.
 */
static pthread_mutex_t show_lock = PTHREAD_MUTEX_INITIALIZER;
static struct kvp_pool *show_head; /* show_lock */
static bool show_registered;       /* show_lock */

static int show_flags(void)
{
	const char *v = getenv("KVPOOL_SHOW_STATS");
	if (!v || !*v || strcmp(v, "0") == 0)
		return -1;
	return strcmp(v, "json") == 0 ? (int)KVP_DUMP_JSON : 0;
}

static void show_at_exit(void)
{
	int flags = show_flags();
	pthread_mutex_lock(&show_lock);
	for (struct kvp_pool *p = show_head; p && flags >= 0; p = p->show_next)
		(void)kvp_pool_dump(p, stderr, (unsigned)flags);
	show_head = NULL; /* printed once: a later destroy prints its own report only */
	pthread_mutex_unlock(&show_lock);
}

void kvpi_pool_report_at_create(kvp_pool *p)
{
	if (show_flags() < 0)
		return;
	pthread_mutex_lock(&show_lock);
	if (!show_registered)
		show_registered = atexit(show_at_exit) == 0;
	p->show_next = show_head;
	show_head = p;
	pthread_mutex_unlock(&show_lock);
}

void kvpi_pool_report_at_destroy(kvp_pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&show_lock);
	struct kvp_pool **pp = &show_head;
	while (*pp && *pp != p)
		pp = &(*pp)->show_next;
	if (*pp)
		*pp = p->show_next;
	pthread_mutex_unlock(&show_lock);
	int flags = show_flags();
	if (flags >= 0)
		(void)kvp_pool_dump(p, stderr, (unsigned)flags);
}
