/*
 * stress/replay_main.c - kvpool_replay: replay an LLM serving trace (or the
 * built-in workload) through one shared kvpool pool, then the same request
 * stream through a naive malloc-per-token path, and print both side by side.
 *
 * See docs/REPLAY.md for the model, the flags and how to read the table.
 * Exit status: 0 all checks passed, 1 a check failed or a call failed,
 * 2 bad usage or unreadable input.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <kvpool/kvpool.h>

#include "stress/cli.h"
#include "stress/jsonout.h"
#include "stress/metrics_http.h"
#include "stress/replay.h"
#include "stress/trace.h"
#include "stress/util.h"
#include "stress/workload.h"

typedef struct opts {
	const char *trace_path, *json_path, *workload;
	const char *remote_url; /* --remote-cache */
	trace_format format;
	bool skip_bad, storage, naive, progress, prefix;
	uint64_t limit, requests, seed, blocks, block_size, threads, batch, head_dim;
	uint64_t latency_every, linger_s, thread_cache;
	int metrics_port; /* -1: off */
	double speed, step_ms, rate;
} opts;

typedef struct app {
	opts o;
	kvp_remote *remote[2]; /* --remote-cache: the K and V tiers */
	kvp_pool *pool;
	kvp_bufcache *cache;
	rp_live live;
} app;

static volatile sig_atomic_t got_signal;

static void on_signal(int sig)
{
	got_signal = sig;
}

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: kvpool_replay [options]\n"
	    "  --trace FILE        replay FILE (Azure CSV, Mooncake JSONL or Vidur CSV; -: the\n"
	    "                      standard input); without it, the built-in workload\n"
	    "  --format F          auto (default), azure, mooncake, vidur\n"
	    "  --on-error stop|skip  malformed trace rows: stop (default) or skip and count\n"
	    "  --limit N           replay only the first N (>= 1) requests of the trace\n"
	    "  --workload NAME     built-in workload: %s (default azure-conv)\n"
	    "  --requests N        built-in workload size (default 20000)\n"
	    "  --rate R            built-in arrival rate, requests/s, up to 1e9 (default: the\n"
	    "                      trace's)\n"
	    "  --seed X            built-in workload seed (default 1)\n"
	    "  --threads T         worker threads (default: online CPUs)\n"
	    "  --batch B           active requests per worker (default 64)\n"
	    "  --blocks N          pool blocks, K and V together (default 16384)\n"
	    "  --block-size S      tokens per block (default 16)\n"
	    "  --thread-cache N    the pool's per-thread cache, blocks per stream, 0..%u\n"
	    "                      (default %u: kvpool's)\n"
	    "  --speed X           X times real time, 1e-6..1e6; 0 = as fast as possible\n"
	    "                      (default 0)\n"
	    "  --step-ms D         trace-time length of a decode step when --speed > 0,\n"
	    "                      0..3.6e6 (default 20)\n"
	    "  --storage           write real fp16 K/V rows through kvp_storage\n"
	    "  --prefix-cache      share prompt blocks by content (Mooncake hash_ids):\n"
	    "                      match at admission, publish after prefill\n"
	    "  --remote-cache URL  with --prefix-cache --storage: a remote prefix tier on Redis\n"
	    "                      (redis://[user:password@]host:port[/db] or unix:///path):\n"
	    "                      publishes go to it too, matches that stop short fetch from it\n"
	    "  --head-dim D        elements per K (and V) row (default 64)\n"
	    "  --no-naive          skip the naive malloc-per-token baseline\n"
	    "  --latency-every N   time one allocation call in N (default 1: all)\n"
	    "  --json FILE         write the results as JSON\n"
	    "  --metrics-port P    serve /metrics on 127.0.0.1:P while running (0: any port)\n"
	    "  --linger S          keep serving /metrics S seconds after the run\n"
	    "  --no-progress       no live progress line (it is shown only on a terminal)\n"
	    "  -h, --help          this text\n"
	    "  -V, --version       the kvpool version\n"
	    "Options take their value as --opt VALUE or --opt=VALUE.\n",
	    wl_names(), KVP_MAX_THREAD_CACHE, KVP_DEFAULT_THREAD_CACHE);
}

static const struct option longopts[] = {
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, 'V'},
    {"storage", no_argument, NULL, 0},
    {"prefix-cache", no_argument, NULL, 0},
    {"no-naive", no_argument, NULL, 0},
    {"no-progress", no_argument, NULL, 0},
    {"trace", required_argument, NULL, 0},
    {"json", required_argument, NULL, 0},
    {"workload", required_argument, NULL, 0},
    {"format", required_argument, NULL, 0},
    {"on-error", required_argument, NULL, 0},
    {"speed", required_argument, NULL, 0},
    {"step-ms", required_argument, NULL, 0},
    {"rate", required_argument, NULL, 0},
    {"metrics-port", required_argument, NULL, 0},
    {"remote-cache", required_argument, NULL, 0},
    {"limit", required_argument, NULL, 0},
    {"requests", required_argument, NULL, 0},
    {"seed", required_argument, NULL, 0},
    {"threads", required_argument, NULL, 0},
    {"batch", required_argument, NULL, 0},
    {"blocks", required_argument, NULL, 0},
    {"block-size", required_argument, NULL, 0},
    {"thread-cache", required_argument, NULL, 0},
    {"head-dim", required_argument, NULL, 0},
    {"latency-every", required_argument, NULL, 0},
    {"linger", required_argument, NULL, 0},
    {NULL, 0, NULL, 0},
};

static void opts_defaults(opts *o)
{
	*o = (opts){.workload = "azure-conv",
	            .naive = true,
	            .progress = true,
	            .requests = 20000,
	            .seed = 1,
	            .blocks = 16384,
	            .block_size = 16,
	            .batch = 64,
	            .head_dim = 64,
	            .latency_every = 1,
	            .thread_cache = KVP_DEFAULT_THREAD_CACHE,
	            .metrics_port = -1,
	            .step_ms = 20};
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	o->threads = cpus < 1 ? 1 : cpus > 64 ? 64 : (uint64_t)cpus;
}

/* A flag without a value: true when @a is one (and it is applied). */
static bool parse_switch(opts *o, const char *a)
{
	if (strcmp(a, "--storage") == 0)
		o->storage = true;
	else if (strcmp(a, "--prefix-cache") == 0)
		o->prefix = true;
	else if (strcmp(a, "--no-naive") == 0)
		o->naive = false;
	else if (strcmp(a, "--no-progress") == 0)
		o->progress = false;
	else
		return false;
	return true;
}

/*
 * A flag whose value is a name, a path or a fraction: 1 applied, -1 a bad
 * value, 0 not one of them (a plain number: see parse_number).
 */
static int parse_text(opts *o, const char *a, const char *v)
{
	uint64_t u;
	if (strcmp(a, "--trace") == 0)
		o->trace_path = v;
	else if (strcmp(a, "--json") == 0)
		o->json_path = v;
	else if (strcmp(a, "--workload") == 0) {
		if (wl_find(v) == NULL)
			return -1;
		o->workload = v;
	} else if (strcmp(a, "--format") == 0) {
		if (!trace_format_parse(v, &o->format))
			return -1;
	} else if (strcmp(a, "--on-error") == 0) {
		if (strcmp(v, "stop") != 0 && strcmp(v, "skip") != 0)
			return -1;
		o->skip_bad = strcmp(v, "skip") == 0;
	} else if (strcmp(a, "--speed") == 0) {
		/* 0, or 1e-6 .. 1e6: trace time scaled by it fits in 64 bits */
		if (!su_parse_double(v, &o->speed) ||
		    !(o->speed == 0 || (o->speed >= 1e-6 && o->speed <= 1e6)))
			return -1;
	} else if (strcmp(a, "--step-ms") == 0) {
		if (!su_parse_double(v, &o->step_ms) || !(o->step_ms >= 0 && o->step_ms <= 3600e3))
			return -1;
	} else if (strcmp(a, "--rate") == 0) {
		if (!su_parse_double(v, &o->rate) || !(o->rate > 0 && o->rate <= 1e9))
			return -1;
	} else if (strcmp(a, "--remote-cache") == 0) {
		o->remote_url = v;
	} else if (strcmp(a, "--metrics-port") == 0) {
		if (!su_parse_u64(v, &u) || u > 65535)
			return -1;
		o->metrics_port = (int)u;
	} else
		return 0;
	return 1;
}

/* The flags whose value is a plain number, with their ranges. */
static int parse_number(opts *o, const su_cli *c)
{
	const su_num_flag nums[] = {
	    {"--limit", &o->limit, 1, UINT64_MAX}, /* 0 is not "no limit": leave the flag out */
	    {"--requests", &o->requests, 1, 100000000},
	    {"--seed", &o->seed, 0, UINT64_MAX},
	    {"--threads", &o->threads, 1, 1024},
	    {"--batch", &o->batch, 1, 65536},
	    {"--blocks", &o->blocks, 2, KVP_MAX_BLOCKS},
	    {"--block-size", &o->block_size, 1, KVP_MAX_BLOCK_SIZE},
	    {"--thread-cache", &o->thread_cache, 0, KVP_MAX_THREAD_CACHE},
	    {"--head-dim", &o->head_dim, 1, 65536},
	    {"--latency-every", &o->latency_every, 1, 1000000},
	    {"--linger", &o->linger_s, 0, 86400},
	};
	return su_cli_number(c, nums, sizeof nums / sizeof nums[0]) < 0 ? -1 : 0;
}

static int parse_args(int argc, char **argv, opts *o)
{
	su_cli c = {.prog = "kvpool_replay",
	            .argc = argc,
	            .argv = argv,
	            .longopts = longopts,
	            .usage = usage};
	int rc;
	opts_defaults(o);
	while ((rc = su_cli_next(&c)) == 1) {
		if (parse_switch(o, c.name))
			continue;
		int r = parse_text(o, c.name, c.value);
		if (r < 0)
			return su_cli_bad_value(&c);
		if (r == 0 && parse_number(o, &c) != 0)
			return -1;
	}
	return rc;
}

/* --remote-cache: the K and V tiers' counters, summed (false without tiers). */
static bool remote_sum(const app *A, kvp_remote_stats *out)
{
	memset(out, 0, sizeof *out);
	for (int i = 0; i < 2 && A->remote[i] != NULL; i++) {
		kvp_remote_stats r;
		kvp_remote_get_stats(A->remote[i], &r);
		uint64_t *d = (uint64_t *)out;
		const uint64_t *src = (const uint64_t *)&r;
		for (size_t j = 0; j < sizeof r / sizeof(uint64_t); j++)
			d[j] += src[j];
	}
	return A->remote[0] != NULL;
}

static uint64_t ld(_Atomic uint64_t *a)
{
	return atomic_load_explicit(a, memory_order_relaxed);
}

/* /metrics: pool stats, buffer-cache stats, and the replay's own progress. */
static void fill_metrics(void *arg, mtext *t)
{
	app *a = arg;
	kvp_bufcache_stats bs;
	mtext_pool_live(t, a->pool, "replay");
	if (kvp_bufcache_get_stats(a->cache, &bs) == KVP_OK)
		mtext_bufcache(t, &bs);
	rp_live *l = &a->live;
	mtext_promhist(t, "kvpool_replay_allocate_duration_seconds",
	               "Duration of the kvp_allocate calls the replay timed (--latency-every).",
	               &l->alloc_lat);
	mtext_metric(t, "kvpool_replay_requests_completed_total", "counter",
	             "Requests the replay has completed.", (double)ld(&l->done));
	mtext_metric(t, "kvpool_replay_requests_rejected_total", "counter",
	             "Requests larger than the whole pool, rejected.", (double)ld(&l->rejected));
	mtext_metric(t, "kvpool_replay_requests_in_flight", "gauge",
	             "Requests admitted and not finished.", (double)ld(&l->in_flight));
	mtext_metric(t, "kvpool_replay_requests_queued", "gauge",
	             "Requests arrived and waiting for admission.", (double)ld(&l->queued));
	mtext_metric(t, "kvpool_replay_exhaustion_waits_total", "counter",
	             "Requests that waited at the queue head for blocks.", (double)ld(&l->waits));
	mtext_metric(t, "kvpool_replay_tokens_held", "gauge",
	             "Tokens whose K and V rows the replay holds now.", (double)ld(&l->tokens));
	mtext_metric(t, "kvpool_replay_running", "gauge", "1 while the replay runs.",
	             atomic_load_explicit(&l->running, memory_order_relaxed) ? 1.0 : 0.0);
	kvp_remote_stats rs;
	char rtext[8192];
	size_t rlen;
	if (remote_sum(a, &rs) &&
	    kvp_remote_stats_to_prometheus(&rs, NULL, rtext, sizeof rtext, &rlen) == KVP_OK)
		mtext_printf(t, "%s", rtext); /* both tiers, K + V */
}

/* --- prefix cache: keys and the ideal hit rate ------------------------------------------ */

typedef struct prefix_plan {
	kvp_hash *keys; /* every request's keys, back to back (rp_prefix_keys) */
	size_t *off;
	uint32_t *n;
	uint64_t full_blocks;  /* full prompt blocks of the requests that fit */
	uint64_t ideal_hits;   /* of them, found by an unbounded cache */
	double ideal_hit_rate; /* ideal_hits / full_blocks */
	double build_s;        /* time to hash the keys */
} prefix_plan;

static void plan_free(prefix_plan *P)
{
	free(P->keys);
	free(P->off);
	free(P->n);
}

static int cmp_hash(const void *a, const void *b)
{
	const kvp_hash *x = a, *y = b;
	if (x->lo != y->lo)
		return x->lo < y->lo ? -1 : 1;
	return x->hi < y->hi ? -1 : x->hi > y->hi;
}

/*
 * The keys of every request's full prompt blocks, and the hit rate an
 * unbounded cache would reach on the requests that fit the pool: with
 * chained keys a block is found iff an earlier request had the same key,
 * so the hits are the keys minus the distinct keys, whatever the order.
 */
struct plan_job {
	const trace *t;
	prefix_plan *P;
	uint32_t bs;
	size_t from, to;
	int rc;
};

static void *plan_hash(void *arg)
{
	struct plan_job *j = arg;
	for (size_t i = j->from; i < j->to && j->rc == 0; i++) {
		long k = rp_prefix_keys(&j->t->req[i], j->t->hash_ids, j->bs,
		                        j->P->keys + j->P->off[i], j->P->n[i]);
		if (k != (long)j->P->n[i])
			j->rc = -1;
	}
	return NULL;
}

static int plan_build(const trace *t, uint32_t bs, uint64_t capacity, unsigned threads,
                      prefix_plan *P)
{
	uint64_t t0 = su_now_ns(), keyed = 0, distinct = 0;
	size_t at = 0;
	memset(P, 0, sizeof *P);
	P->off = calloc(t->n, sizeof *P->off);
	P->n = calloc(t->n, sizeof *P->n);
	if (!P->off || !P->n)
		return -1;
	for (size_t i = 0; i < t->n; i++) { /* rp_prefix_keys' count, without hashing */
		uint64_t full = t->req[i].prompt / bs;
		uint64_t covered = (uint64_t)t->req[i].n_hash * TRACE_HASH_CHUNK / bs;
		P->off[i] = at;
		/* A request larger than the pool is rejected and never runs: no
		 * keys (a hostile trace's huge rows cost nothing to hash or hold). */
		if (rp_rejected(&t->req[i], bs, capacity))
			continue;
		P->n[i] = (uint32_t)(full < covered ? full : covered);
		at += P->n[i];
	}
	P->keys = malloc((at ? at : 1) * sizeof *P->keys);
	if (!P->keys)
		return -1;
	/* hash on every worker thread: ~1 us a key, millions of keys */
	struct plan_job jobs[64];
	pthread_t tid[64];
	unsigned nt = threads < 1 ? 1 : threads > 64 ? 64 : threads, started = 0;
	for (unsigned k = 0; k < nt; k++)
		jobs[k] = (struct plan_job){t, P, bs, t->n * k / nt, t->n * (k + 1) / nt, 0};
	for (; started < nt; started++)
		if (pthread_create(&tid[started], NULL, plan_hash, &jobs[started]) != 0)
			break;
	for (unsigned k = started; k < nt; k++)
		plan_hash(&jobs[k]);
	for (unsigned k = 0; k < started; k++)
		pthread_join(tid[k], NULL);
	for (unsigned k = 0; k < nt; k++)
		if (jobs[k].rc != 0)
			return -1;
	kvp_hash *sorted = malloc((at ? at : 1) * sizeof *sorted);
	if (!sorted)
		return -1;
	size_t ns = 0;
	for (size_t i = 0; i < t->n; i++) {
		if (rp_rejected(&t->req[i], bs, capacity))
			continue; /* rejected: never runs */
		P->full_blocks += t->req[i].prompt / bs;
		keyed += P->n[i];
		memcpy(sorted + ns, P->keys + P->off[i], P->n[i] * sizeof *sorted);
		ns += P->n[i];
	}
	qsort(sorted, ns, sizeof *sorted, cmp_hash);
	for (size_t i = 0; i < ns; i++)
		if (i == 0 || cmp_hash(&sorted[i - 1], &sorted[i]) != 0)
			distinct++;
	free(sorted);
	P->ideal_hits = keyed - distinct;
	P->ideal_hit_rate = P->full_blocks ? (double)P->ideal_hits / (double)P->full_blocks : 0.0;
	P->build_s = (double)(su_now_ns() - t0) / 1e9;
	return 0;
}

/* --- the summary table --------------------------------------------------------------- */

static const char *human(double v, char *buf, size_t cap)
{
	if (v >= 1e9)
		snprintf(buf, cap, "%.2fG", v / 1e9);
	else if (v >= 1e6)
		snprintf(buf, cap, "%.2fM", v / 1e6);
	else if (v >= 1e4)
		snprintf(buf, cap, "%.1fk", v / 1e3);
	else if (v == (double)(uint64_t)v)
		snprintf(buf, cap, "%" PRIu64, (uint64_t)v);
	else
		snprintf(buf, cap, "%.3g", v);
	return buf;
}

static const char *mib(double bytes, char *buf, size_t cap)
{
	snprintf(buf, cap, "%.1f MiB", bytes / 1048576.0);
	return buf;
}

static void row(const char *label, const char *pool, const char *naive, const char *ratio)
{
	printf("  %-36s %-22s %-22s %s\n", label, pool, naive ? naive : "", ratio ? ratio : "");
}

/*
 * "how many times better kvpool is": @worse / @better (a cost of naive over
 * kvpool's, or a rate of kvpool over naive's).  Every ratio is shown, below
 * 1x too (kvpool worse); "n/a" when either side is 0.
 */
static const char *ratio(double worse, double better, char *buf, size_t cap)
{
	if (worse <= 0 || better <= 0)
		return "n/a";
	double x = worse / better;
	snprintf(buf, cap, x >= 0.1 ? "%.2fx" : "%.3fx", x);
	return buf;
}

typedef struct summary {
	const rp_result *p, *n;    /* n NULL without the baseline */
	const prefix_plan *prefix; /* NULL without --prefix-cache */
	kvp_stats st;
	uint64_t n_req, block_bytes;
	bool remote;         /* --remote-cache */
	kvp_remote_stats rs; /* both tiers' counters, summed */
} summary;

static double secs(uint64_t ns)
{
	return (double)ns / 1e9;
}

static double per_s(uint64_t count, uint64_t ns)
{
	return ns ? (double)count / secs(ns) : 0;
}

static double prefix_rate(const rp_result *p)
{
	return p->prefix_blocks ? (double)p->prefix_matched / (double)p->prefix_blocks : 0.0;
}

static double remote_rate(const rp_result *p)
{
	return p->prefix_blocks ? (double)p->remote_hits / (double)p->prefix_blocks : 0.0;
}

/* The remote tier's lines of the prefix section. */
static void print_remote(const summary *S)
{
	const rp_result *p = S->p;
	const kvp_remote_stats *r = &S->rs;
	char a[64], b[96], m1[32];
	snprintf(a, sizeof a, "%.4f", remote_rate(p));
	snprintf(b, sizeof b, "(%s blocks per stream from Redis)",
	         human((double)p->remote_hits, m1, sizeof m1));
	row("  of it from the remote tier", a, b, NULL);
	row("remote bytes read", human((double)r->bytes_read, a, sizeof a), NULL, NULL);
	row("remote bytes written", human((double)r->bytes_written, a, sizeof a), NULL, NULL);
	snprintf(b, sizeof b, "(dropped %llu, failed %llu, skipped %llu)",
	         (unsigned long long)r->writes_dropped, (unsigned long long)r->writes_failed,
	         (unsigned long long)r->writes_skipped);
	row("remote writes (K + V)", human((double)r->writes_done, a, sizeof a), b, NULL);
	snprintf(b, sizeof b, "(corrupt values %llu, reconnects %llu)",
	         (unsigned long long)r->corrupt, (unsigned long long)r->reconnects);
	row("remote errors", human((double)r->errors, a, sizeof a), b, NULL);
	snprintf(a, sizeof a, "%.1f", (double)p->remote_fetch_max_ns / 1e6);
	row("longest fetch call (ms)", a, NULL, NULL);
}

static void print_prefix(const summary *S, const opts *o)
{
	const rp_result *p = S->p;
	const prefix_plan *P = S->prefix;
	char a[64], b[96], m1[32], m2[32];
	printf("\n  prefix cache (--prefix-cache, %" PRIu64
	       "-token blocks, 512 tokens per hash id)\n",
	       o->block_size);
	snprintf(a, sizeof a, "%.4f", prefix_rate(p));
	snprintf(b, sizeof b, "(%s of %s full prompt blocks)",
	         human((double)p->prefix_matched, m1, sizeof m1),
	         human((double)p->prefix_blocks, m2, sizeof m2));
	row("prefix hit rate", a, b, NULL);
	snprintf(a, sizeof a, "%.4f", P->ideal_hit_rate);
	row("ideal hit rate (unbounded cache)", a, "(the same trace rows, computed from the trace)",
	    NULL);
	snprintf(a, sizeof a, "%.1f%%",
	         P->ideal_hit_rate > 0 ? 100.0 * prefix_rate(p) / P->ideal_hit_rate : 0.0);
	row("  kept of the ideal", a, NULL, NULL);
	row("prefill tokens saved",
	    human((double)p->prefix_matched * (double)o->block_size, a, sizeof a), NULL, NULL);
	row("blocks published (K + V)", human((double)p->prefix_published, a, sizeof a), NULL,
	    NULL);
	row("  refused, computed twice at once", human((double)p->prefix_dup, a, sizeof a), NULL,
	    NULL);
	row("cached blocks evicted", human((double)S->st.n_evictions, a, sizeof a), NULL, NULL);
	row("blocks cached at the end", human((double)S->st.n_cached, a, sizeof a), NULL, NULL);
	snprintf(a, sizeof a, "%.2f", P->build_s);
	row("keys hashed (s)", a, NULL, NULL);
	if (S->remote)
		print_remote(S);
	if (p->row_checks > 0) {
		snprintf(b, sizeof b, "(%s failed)",
		         human((double)p->row_check_failed, m1, sizeof m1));
		row("matched blocks' rows checked", human((double)p->row_checks, a, sizeof a), b,
		    NULL);
	}
}

/* Requests, tokens, time and calls: kvpool beside naive, with the ratio. */
static void table_calls(const summary *S)
{
	const rp_result *p = S->p, *n = S->n;
	char a[64], b[64], r[32];
	uint64_t ptok = p->prompt_tokens + p->output_tokens;
	uint64_t ntok = n ? n->prompt_tokens + n->output_tokens : 0;
	snprintf(a, sizeof a, "%" PRIu64, p->requests_done);
	snprintf(b, sizeof b, "%" PRIu64, n ? n->requests_done : 0);
	row("requests completed", a, n ? b : NULL, NULL);
	snprintf(a, sizeof a, "%" PRIu64, p->rejected);
	snprintf(b, sizeof b, "%" PRIu64, n ? n->rejected : 0);
	row("requests rejected (too large)", a, n ? b : NULL, NULL);
	row("tokens stored (prompt + output)", human((double)ptok, a, sizeof a),
	    n ? human((double)ntok, b, sizeof b) : NULL, NULL);
	snprintf(a, sizeof a, "%.3f", secs(p->wall_ns));
	if (n)
		snprintf(b, sizeof b, "%.3f", secs(n->wall_ns));
	row("wall time (s)", a, n ? b : NULL,
	    n ? ratio((double)n->wall_ns, (double)p->wall_ns, r, sizeof r) : NULL);
	row("tokens per second", human(per_s(ptok, p->wall_ns), a, sizeof a),
	    n ? human(per_s(ntok, n->wall_ns), b, sizeof b) : NULL,
	    n ? ratio(per_s(ptok, p->wall_ns), per_s(ntok, n->wall_ns), r, sizeof r) : NULL);
	row("allocate calls", human((double)p->alloc_calls, a, sizeof a),
	    n ? human((double)n->alloc_calls, b, sizeof b) : NULL,
	    n ? ratio((double)n->alloc_calls, (double)p->alloc_calls, r, sizeof r) : NULL);
	row("  (kvp_allocate | malloc)", "", NULL, NULL);
	/* A kvp_allocate call hands out several blocks; a malloc makes one token row. */
	row("blocks allocated", human((double)p->blocks_allocated, a, sizeof a),
	    n ? human((double)n->alloc_calls, b, sizeof b) : NULL,
	    n ? ratio((double)n->alloc_calls, (double)p->blocks_allocated, r, sizeof r) : NULL);
	row("  (pool blocks | malloc'd rows)", "", NULL, NULL);
	row("free calls (kvp_free_all | free)", human((double)p->free_calls, a, sizeof a),
	    n ? human((double)n->free_calls, b, sizeof b) : NULL,
	    n ? ratio((double)n->free_calls, (double)p->free_calls, r, sizeof r) : NULL);
	double pcs = per_s(p->alloc_calls + p->free_calls, p->wall_ns);
	double ncs = n ? per_s(n->alloc_calls + n->free_calls, n->wall_ns) : 0;
	/* Below 1x here is not worse: kvpool makes fewer calls, each doing more
	 * (docs/REPLAY.md); wall time and tokens per second are the comparison. */
	row("allocate+free calls per second", human(pcs, a, sizeof a),
	    n ? human(ncs, b, sizeof b) : NULL, n ? ratio(pcs, ncs, r, sizeof r) : NULL);
	row("kvp_block_set_used calls", human((double)p->set_used_calls, a, sizeof a),
	    n ? "-" : NULL, NULL);
}

/* Allocation latency, memory held, reuse and fragmentation. */
static void table_memory(const summary *S, const opts *o)
{
	const rp_result *p = S->p, *n = S->n;
	char a[64], b[64], r[32];
	const double qs[] = {0.5, 0.99, 0.999};
	const char *ql[] = {"allocate latency p50 (ns)", "allocate latency p99 (ns)",
	                    "allocate latency p99.9 (ns)"};
	for (int i = 0; i < 3; i++) {
		uint64_t pv = hist_percentile(&p->alloc_lat, qs[i]);
		uint64_t nv = n ? hist_percentile(&n->alloc_lat, qs[i]) : 0;
		snprintf(a, sizeof a, "%" PRIu64, pv);
		snprintf(b, sizeof b, "%" PRIu64, nv);
		row(ql[i], a, n ? b : NULL, n ? ratio((double)nv, (double)pv, r, sizeof r) : NULL);
	}
	snprintf(a, sizeof a, "%" PRIu64 " of %" PRIu64, S->st.peak_blocks_in_use, o->blocks);
	row("peak blocks in use (pool stats)", a, n ? "-" : NULL, NULL);
	double pbytes = (double)S->st.peak_blocks_in_use * (double)S->block_bytes;
	row("peak KV bytes held", mib(pbytes, a, sizeof a),
	    n ? mib((double)n->peak_bytes, b, sizeof b) : NULL,
	    n ? ratio((double)n->peak_bytes, pbytes, r, sizeof r) : NULL);
	snprintf(a, sizeof a, "%.4f",
	         S->st.n_allocations ? (double)S->st.n_reused / (double)S->st.n_allocations : 0.0);
	row("reuse fraction (reused/allocations)", a, n ? "-" : NULL, NULL);
	snprintf(a, sizeof a, "%.4f / %.4f", p->frag_mean, p->frag_max);
	row("fragmentation mean / max", a, n ? "-" : NULL, NULL);
	double waste = p->peak_blocks ? 1.0 - (2.0 * (double)p->peak_tokens) /
	                                          ((double)p->peak_blocks * (double)o->block_size)
	                              : 0.0;
	snprintf(a, sizeof a, "%.2f%%", 100.0 * waste);
	row("empty slots in held blocks at peak", a, n ? "-" : NULL, NULL);
}

/* Waits for blocks at the queue head and the queue delay. */
static void table_waits(const summary *S)
{
	const rp_result *p = S->p, *n = S->n;
	char a[64], b[64], r[32];
	snprintf(a, sizeof a, "%" PRIu64, p->waits);
	if (n)
		snprintf(b, sizeof b, "%" PRIu64, n->waits);
	row("exhaustion waits (queue head)", a, n ? b : NULL,
	    n ? ratio((double)n->waits, (double)p->waits, r, sizeof r) : NULL);
	snprintf(a, sizeof a, "%.2f / %.2f",
	         p->waits ? (double)p->wait_ns_total / 1e6 / (double)p->waits : 0.0,
	         (double)p->wait_ns_max / 1e6);
	if (n)
		snprintf(b, sizeof b, "%.2f / %.2f",
		         n->waits ? (double)n->wait_ns_total / 1e6 / (double)n->waits : 0.0,
		         (double)n->wait_ns_max / 1e6);
	row("  wait ms mean / max", a, n ? b : NULL,
	    n ? ratio((double)n->wait_ns_max, (double)p->wait_ns_max, r, sizeof r) : NULL);
	snprintf(a, sizeof a, "%.2f / %.2f", (double)hist_percentile(&p->queue_delay, 0.5) / 1e6,
	         (double)hist_percentile(&p->queue_delay, 0.99) / 1e6);
	if (n)
		snprintf(b, sizeof b, "%.2f / %.2f",
		         (double)hist_percentile(&n->queue_delay, 0.5) / 1e6,
		         (double)hist_percentile(&n->queue_delay, 0.99) / 1e6);
	row("queue delay ms p50 / p99", a, n ? b : NULL,
	    n ? ratio((double)hist_percentile(&n->queue_delay, 0.99),
	              (double)hist_percentile(&p->queue_delay, 0.99), r, sizeof r)
	      : NULL);
}

static void print_table(const summary *S, const opts *o)
{
	const rp_result *n = S->n;
	printf("\n");
	row("", "kvpool", n ? "naive malloc/token" : "(naive: --no-naive)",
	    n ? "kvpool vs naive" : "");
	if (n)
		row("", "", "", "(>1x: kvpool better; calls/s: fewer, larger calls)");
	table_calls(S);
	table_memory(S, o);
	table_waits(S);
	if (S->prefix)
		print_prefix(S, o);
	char line[256];
	printf("\n  pool: %s\n", kvp_stats_format(&S->st, line, sizeof line) > 0 ? line : "?");
}

/* --- checks ----------------------------------------------------------------------------- */

typedef struct checks {
	int run, failed;
} checks;

static void check(checks *k, bool ok, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void check(checks *k, bool ok, const char *fmt, ...)
{
	va_list ap;
	k->run++;
	if (!ok)
		k->failed++;
	printf("  [%s] ", ok ? "ok" : "FAIL");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
}

/* kvpool: every request accounted for, every block back, the counts agree. */
static void check_blocks(checks *k, const app *A, const summary *S, uint64_t expect_rejected)
{
	const rp_result *p = S->p;
	kvp_stats st = S->st;
	size_t free_k = kvp_n_free(A->pool, KVP_K), free_v = kvp_n_free(A->pool, KVP_V);
	check(k, p->requests_done + p->rejected == S->n_req && p->rejected == expect_rejected,
	      "kvpool: every request completed (%" PRIu64 " done + %" PRIu64
	      " rejected as larger than the pool = %" PRIu64 ")",
	      p->requests_done, p->rejected, S->n_req);
	check(k, kvp_stats_blocks_in_use(&st) == 0 && free_k + free_v == st.n_blocks,
	      "kvpool: all blocks back (in use %" PRIu64 ", free K %zu + V %zu = %" PRIu64
	      " managed)",
	      kvp_stats_blocks_in_use(&st), free_k, free_v, st.n_blocks);
	if (S->prefix == NULL)
		check(k,
		      st.n_allocations == p->blocks_allocated &&
		          p->blocks_allocated == p->expected_blocks &&
		          st.n_frees == st.n_allocations,
		      "kvpool: block counts agree (pool allocations %" PRIu64 " = replay %" PRIu64
		      " = 2 x sum ceil(tokens/%u) %" PRIu64 "; frees %" PRIu64 ")",
		      st.n_allocations, p->blocks_allocated,
		      A->o.block_size > 0 ? (unsigned)A->o.block_size : 0, p->expected_blocks,
		      st.n_frees);
	else /* a match of a cached block counts as a pool allocation too */
		check(k,
		      p->blocks_allocated + 2 * p->prefix_matched == p->expected_blocks &&
		          st.n_allocations >= p->blocks_allocated && st.n_frees == st.n_allocations,
		      "kvpool: block counts agree (allocated %" PRIu64 " + 2 x matched %" PRIu64
		      " = 2 x sum ceil(tokens/%u) %" PRIu64 "; pool allocations %" PRIu64
		      " = frees %" PRIu64 ")",
		      p->blocks_allocated, p->prefix_matched,
		      A->o.block_size > 0 ? (unsigned)A->o.block_size : 0, p->expected_blocks,
		      st.n_allocations, st.n_frees);
}

/* kvpool: the tokens stored, no surprise exhaustion, the peak within bounds, no error. */
static void check_usage(checks *k, const summary *S, uint64_t expect_tokens)
{
	const rp_result *p = S->p;
	kvp_stats st = S->st;
	check(k, p->prompt_tokens + p->output_tokens == expect_tokens,
	      "kvpool: tokens stored %" PRIu64 " = trace tokens of admitted requests %" PRIu64,
	      p->prompt_tokens + p->output_tokens, expect_tokens);
	check(k, p->unexpected_exhausted == 0 && st.n_exhausted == 0,
	      "kvpool: no exhaustion the admission arithmetic did not predict (%" PRIu64 ")",
	      p->unexpected_exhausted + st.n_exhausted);
	if (S->prefix) /* matched blocks are reserved by nobody: no 2x bound */
		check(k, st.peak_blocks_in_use <= st.n_blocks,
		      "kvpool: peak blocks in use %" PRIu64 " <= %" PRIu64 " managed",
		      st.peak_blocks_in_use, st.n_blocks);
	else
		check(k,
		      st.peak_blocks_in_use <= st.n_blocks &&
		          st.peak_blocks_in_use <= 2 * p->peak_reserved,
		      "kvpool: peak blocks in use %" PRIu64 " <= %" PRIu64 " (2 x the %" PRIu64
		      " blocks per stream reserved at peak)",
		      st.peak_blocks_in_use, 2 * p->peak_reserved, p->peak_reserved);
	check(k, p->errors == 0, "kvpool: no call failed%s%s", p->errors ? ": " : "",
	      p->first_error);
}

/* The prefix cache's counts agree with the pool's; naive did the same work. */
static void check_prefix_naive(checks *k, const summary *S, uint64_t expect_tokens)
{
	const rp_result *p = S->p, *n = S->n;
	kvp_stats st = S->st;
	if (S->prefix) {
		/* a remote tier matches too: its writer's short holds, its fetches' look-ups */
		check(k,
		      S->remote ? st.n_prefix_hits >= p->prefix_returned
		                : st.n_prefix_hits == p->prefix_returned,
		      "prefix: pool prefix hits %" PRIu64
		      " %s blocks the replay's matches returned %" PRIu64,
		      st.n_prefix_hits, S->remote ? ">=" : "=", p->prefix_returned);
		/* blocks an earlier run left in Redis are beyond this run's ideal */
		check(k,
		      p->prefix_blocks == S->prefix->full_blocks &&
		          p->prefix_matched - p->remote_hits <= S->prefix->ideal_hits,
		      "prefix: full prompt blocks %" PRIu64 " = the trace's %" PRIu64
		      ", matched locally %" PRIu64 " <= ideal %" PRIu64,
		      p->prefix_blocks, S->prefix->full_blocks, p->prefix_matched - p->remote_hits,
		      S->prefix->ideal_hits);
		if (p->row_checks > 0 || S->remote)
			check(k, p->row_check_failed == 0 && p->row_checks > 0,
			      "content: every matched block (local or remote) holds its key's rows "
			      "(%" PRIu64 " blocks checked, %" PRIu64 " failed)",
			      p->row_checks, p->row_check_failed);
	}
	if (n != NULL) {
		uint64_t ntok = n->prompt_tokens + n->output_tokens;
		check(k, n->requests_done == p->requests_done && ntok == expect_tokens,
		      "naive: same requests (%" PRIu64 ") and tokens (%" PRIu64 ")",
		      n->requests_done, ntok);
		check(k, n->alloc_calls == 2 * ntok && n->free_calls == n->alloc_calls,
		      "naive: one malloc and one free per token per stream (%" PRIu64 ", %" PRIu64
		      ")",
		      n->alloc_calls, n->free_calls);
		check(k, n->errors == 0, "naive: no call failed%s%s", n->errors ? ": " : "",
		      n->first_error);
	}
}

static void run_checks(checks *k, const app *A, const summary *S, uint64_t expect_rejected,
                       uint64_t expect_tokens)
{
	printf("\nchecks:\n");
	check_blocks(k, A, S, expect_rejected);
	check_usage(k, S, expect_tokens);
	check_prefix_naive(k, S, expect_tokens);
}

/* --- JSON ------------------------------------------------------------------------------- */

/*
 * One run's results.  peak_bytes_sampled is the KV bytes held at the sampled
 * peak: the naive baseline counts its bytes as it goes; the pool's are its
 * sampled peak blocks times the bytes of a block (the pool itself counts
 * blocks, not bytes), as the table's "peak KV bytes held" row.
 */
static json_t *json_result(const rp_result *r, uint64_t block_bytes, bool pool)
{
	uint64_t tok = r->prompt_tokens + r->output_tokens;
	json_t *o = json_object(), *lat = json_object();
	jo_u64(o, "requests_completed", r->requests_done);
	jo_u64(o, "requests_rejected", r->rejected);
	jo_u64(o, "prompt_tokens", r->prompt_tokens);
	jo_u64(o, "output_tokens", r->output_tokens);
	jo_f64(o, "wall_s", secs(r->wall_ns));
	jo_f64(o, "tokens_per_s", per_s(tok, r->wall_ns));
	jo_u64(o, "alloc_calls", r->alloc_calls);
	jo_u64(o, "free_calls", r->free_calls);
	jo_f64(o, "alloc_free_calls_per_s", per_s(r->alloc_calls + r->free_calls, r->wall_ns));
	jo_u64(o, "set_used_calls", r->set_used_calls);
	jo_u64(o, "row_writes", r->row_writes);
	jo_u64(lat, "samples", r->alloc_lat.count);
	jo_u64(lat, "p50", hist_percentile(&r->alloc_lat, 0.5));
	jo_u64(lat, "p99", hist_percentile(&r->alloc_lat, 0.99));
	jo_u64(lat, "p999", hist_percentile(&r->alloc_lat, 0.999));
	jo_u64(lat, "max", r->alloc_lat.max);
	jo_f64(lat, "mean", hist_mean(&r->alloc_lat));
	json_object_set_new(o, "alloc_latency_ns", lat);
	jo_u64(o, "blocks_allocated", r->blocks_allocated);
	jo_u64(o, "peak_blocks_sampled", r->peak_blocks);
	jo_u64(o, "peak_bytes_sampled", pool ? r->peak_blocks * block_bytes : r->peak_bytes);
	jo_u64(o, "exhaustion_waits", r->waits);
	jo_f64(o, "wait_ms_total", (double)r->wait_ns_total / 1e6);
	jo_f64(o, "wait_ms_max", (double)r->wait_ns_max / 1e6);
	jo_u64(o, "slot_waits", r->slot_waits);
	jo_f64(o, "queue_delay_ms_p50", (double)hist_percentile(&r->queue_delay, 0.5) / 1e6);
	jo_f64(o, "queue_delay_ms_p99", (double)hist_percentile(&r->queue_delay, 0.99) / 1e6);
	jo_f64(o, "fragmentation_mean", r->frag_mean);
	jo_f64(o, "fragmentation_max", r->frag_max);
	jo_u64(o, "unexpected_exhausted", r->unexpected_exhausted);
	jo_u64(o, "errors", r->errors);
	return o;
}

static json_t *json_config(const opts *o, const summary *S)
{
	json_t *c = json_object();
	jo_u64(c, "requests", S->n_req);
	jo_u64(c, "threads", o->threads);
	jo_u64(c, "batch", o->batch);
	jo_u64(c, "blocks", o->blocks);
	jo_u64(c, "block_size", o->block_size);
	jo_u64(c, "thread_cache", o->thread_cache);
	jo_f64(c, "speed", o->speed);
	jo_f64(c, "step_ms", o->step_ms);
	json_object_set_new(c, "storage", json_boolean(o->storage));
	jo_u64(c, "head_dim", o->head_dim);
	jo_u64(c, "latency_every", o->latency_every);
	json_object_set_new(c, "prefix_cache", json_boolean(o->prefix));
	return c;
}

static json_t *json_pool_stats(const summary *S)
{
	const kvp_stats *st = &S->st;
	json_t *p = json_object();
	jo_u64(p, "n_blocks", st->n_blocks);
	jo_u64(p, "n_allocations", st->n_allocations);
	jo_u64(p, "n_frees", st->n_frees);
	jo_u64(p, "n_reused", st->n_reused);
	jo_u64(p, "n_exhausted", st->n_exhausted);
	jo_u64(p, "peak_blocks_in_use", st->peak_blocks_in_use);
	jo_u64(p, "blocks_in_use", kvp_stats_blocks_in_use(st));
	jo_f64(p, "reuse_fraction",
	       st->n_allocations ? (double)st->n_reused / (double)st->n_allocations : 0.0);
	jo_u64(p, "peak_kv_bytes", st->peak_blocks_in_use * S->block_bytes);
	return p;
}

static json_t *json_prefix(const opts *o, const summary *S)
{
	const rp_result *r = S->p;
	const kvp_stats *st = &S->st;
	json_t *p = json_object();
	jo_f64(p, "prefix_hit_rate", prefix_rate(r));
	jo_f64(p, "prefix_ideal_hit_rate", S->prefix->ideal_hit_rate);
	jo_u64(p, "full_prompt_blocks", r->prefix_blocks);
	jo_u64(p, "matched_blocks", r->prefix_matched);
	jo_u64(p, "ideal_matched_blocks", S->prefix->ideal_hits);
	jo_u64(p, "prefill_tokens_saved", r->prefix_matched * o->block_size);
	jo_u64(p, "published", r->prefix_published);
	jo_u64(p, "publish_refused", r->prefix_dup);
	jo_u64(p, "evictions", st->n_evictions);
	jo_u64(p, "cached_blocks_end", st->n_cached);
	jo_u64(p, "prefix_queries", st->n_prefix_queries);
	jo_u64(p, "prefix_hits", st->n_prefix_hits);
	jo_f64(p, "remote_hit_rate", remote_rate(r));
	jo_u64(p, "remote_hits", r->remote_hits);
	jo_u64(p, "remote_bytes_read", S->rs.bytes_read);
	jo_u64(p, "remote_errors", S->rs.errors);
	jo_u64(p, "remote_writes", S->rs.writes_done);
	jo_u64(p, "remote_reconnects", S->rs.reconnects);
	jo_f64(p, "remote_fetch_max_ms", (double)r->remote_fetch_max_ns / 1e6);
	jo_u64(p, "row_checks", r->row_checks);
	jo_u64(p, "row_checks_failed", r->row_check_failed);
	return p;
}

/* The --json file (docs/REPLAY.md): every figure of the summary, through jansson. */
static int write_json(const char *path, const app *A, const summary *S, const char *source,
                      const checks *k)
{
	json_t *root = json_object(), *chk = json_object();
	json_object_set_new(root, "program", json_string("kvpool_replay"));
	json_object_set_new(root, "version", json_string(kvp_version()));
	json_object_set_new(root, "source", jo_text(source));
	json_object_set_new(root, "config", json_config(&A->o, S));
	json_object_set_new(root, "pool_stats", json_pool_stats(S));
	if (S->prefix)
		json_object_set_new(root, "prefix", json_prefix(&A->o, S));
	json_object_set_new(chk, "run", json_integer(k->run));
	json_object_set_new(chk, "failed", json_integer(k->failed));
	json_object_set_new(root, "checks", chk);
	json_object_set_new(root, "kvpool", json_result(S->p, S->block_bytes, true));
	if (S->n != NULL)
		json_object_set_new(root, "naive", json_result(S->n, S->block_bytes, false));
	int rc = jo_write(root, path, "kvpool_replay");
	json_decref(root);
	return rc;
}

/* --- main ------------------------------------------------------------------------------- */

static int load_requests(const opts *o, trace *t, char *source, size_t cap)
{
	if (o->trace_path != NULL) {
		char *path = su_resolve_path(o->trace_path);
		char err[512];
		trace_opts to = {.format = o->format,
		                 .skip_bad = o->skip_bad,
		                 .max_rows = o->limit,
		                 .log = stderr};
		/* "-" is the standard input */
		bool std_in = strcmp(o->trace_path, "-") == 0;
		uint64_t t0 = su_now_ns();
		if (path == NULL ||
		    (std_in ? trace_load_stream(stdin, "stdin", &to, t, err, sizeof err)
		            : trace_load(path, &to, t, err, sizeof err)) != 0) {
			fprintf(stderr, "kvpool_replay: %s\n", path ? err : "out of memory");
			free(path);
			trace_free(t);
			return -1;
		}
		double read_ms = (double)(su_now_ns() - t0) / 1e6;
		snprintf(source, cap, "%s trace %s (%zu requests%s, read in %.1f ms)",
		         trace_format_name(t->format), std_in ? "stdin" : path, t->n,
		         t->n_skipped ? ", malformed rows skipped" : "", read_ms);
		if (t->n_skipped)
			fprintf(stderr, "kvpool_replay: %zu malformed rows skipped\n",
			        t->n_skipped);
		free(path);
		return 0;
	}
	const wl_preset *w = wl_find(o->workload);
	if (wl_generate(w, o->rate, o->requests, o->seed, t) != 0) {
		fprintf(stderr, "kvpool_replay: out of memory\n");
		return -1;
	}
	snprintf(source, cap,
	         "built-in workload %s (%" PRIu64 " requests, seed %" PRIu64
	         ", %.3g req/s) fitted to %s",
	         w->name, o->requests, o->seed, o->rate > 0 ? o->rate : w->rate, w->source);
	return 0;
}

/* --prefix-cache needs block hashes: 0, or -1 after saying why @t has none. */
static int check_prefix_input(const opts *o, const trace *t)
{
	if (!o->prefix || (t->format == TRACE_MOONCAKE && t->n_hash_ids > 0))
		return 0;
	fprintf(stderr,
	        "kvpool_replay: --prefix-cache needs a Mooncake trace with hash_ids; %s "
	        "carries no block hashes\n",
	        o->trace_path == NULL         ? "the built-in workload"
	        : t->format == TRACE_MOONCAKE ? "this Mooncake trace"
	        : t->format == TRACE_AZURE    ? "an Azure trace"
	                                      : "a Vidur trace");
	return -1;
}

/* The pool, the buffer cache and, with --storage, the K and V storages. */
static int setup_pool(app *A, kvp_storage *store[2])
{
	const opts *o = &A->o;
	kvp_pool_config pc;
	kvp_pool_config_init(&pc);
	pc.n_blocks = (uint32_t)o->blocks;
	pc.block_size = (uint32_t)o->block_size;
	pc.thread_cache = (uint32_t)o->thread_cache;
	pc.prefix_cache = o->prefix;
	int rc = kvp_pool_create(&pc, &A->pool);
	if (rc == KVP_OK)
		rc = kvp_bufcache_create(256u << 20, &A->cache);
	for (int i = 0; rc == KVP_OK && o->storage && i < 2; i++)
		rc = kvp_storage_create(A->pool, (uint32_t)o->head_dim, A->cache, &store[i]);
	if (rc != KVP_OK) {
		fprintf(stderr, "kvpool_replay: cannot set up the pool: %s\n", kvp_strerror(rc));
		return -1;
	}
	return 0;
}

/* The requests larger than the pool (rejected) and the tokens of the others. */
static void expect_counts(const trace *t, uint32_t bs, uint64_t capacity, uint64_t *rejected,
                          uint64_t *tokens)
{
	*rejected = *tokens = 0;
	for (size_t i = 0; i < t->n; i++) {
		if (rp_rejected(&t->req[i], bs, capacity))
			(*rejected)++;
		else
			*tokens += (uint64_t)t->req[i].prompt + t->req[i].output;
	}
}

static int start_metrics(app *A, mhttp **srv)
{
	char err[256];
	if (A->o.metrics_port < 0)
		return 0;
	if (mhttp_start((uint16_t)A->o.metrics_port, fill_metrics, A, srv, err, sizeof err) != 0) {
		fprintf(stderr, "kvpool_replay: %s\n", err);
		return -1;
	}
	fprintf(stderr, "metrics: http://127.0.0.1:%u/metrics\n", mhttp_port(*srv));
	return 0;
}

static void print_banner(const opts *o, const char *source, uint64_t capacity)
{
	printf("kvpool_replay: %s\n", source);
	printf("  %" PRIu64 " worker threads x batch %" PRIu64 "; pool %" PRIu64
	       " blocks x %" PRIu64 " tokens (%" PRIu64 " per stream); %s; rows %s\n",
	       o->threads, o->batch, o->blocks, o->block_size, capacity,
	       o->speed > 0 ? "paced" : "speed 0 (as fast as possible)",
	       o->storage ? "written through kvp_storage (fp16)" : "not written");
	if (o->speed > 0)
		printf("  speed %gx, decode step %g ms of trace time\n", o->speed, o->step_ms);
	fflush(stdout);
}

/* --remote-cache: send what is queued (the next run reads it), sum both tiers' figures. */
static void remote_done(app *A, summary *S)
{
	if (A->remote[0] == NULL)
		return;
	S->remote = true;
	for (int i = 0; i < 2; i++)
		if (kvp_remote_flush(A->remote[i], 10000) != KVP_OK)
			fprintf(stderr,
			        "kvpool_replay: the remote tier did not take every write\n");
	remote_sum(A, &S->rs);
}

/*
 * The trace through the pool, then (unless --no-naive) through naive
 * malloc-per-token; fills @S with both results and the pool's stats.
 */
static void replay_both(app *A, const trace *t, kvp_storage *store[2], uint64_t capacity,
                        const prefix_plan *plan, summary *S)
{
	const opts *o = &A->o;
	rp_config c = {.req = t->req,
	               .n = t->n,
	               .kind = RP_POOL,
	               .threads = (unsigned)o->threads,
	               .batch = (unsigned)o->batch,
	               .speed = o->speed,
	               .step_ms = o->step_ms,
	               .block_size = (uint32_t)o->block_size,
	               .capacity = capacity,
	               .row_dim = (uint32_t)o->head_dim,
	               .latency_every = (unsigned)o->latency_every,
	               .pool = A->pool,
	               .storage = {store[0], store[1]},
	               .write_rows = o->storage,
	               .progress = o->progress,
	               .label = "kvpool",
	               .prefix = o->prefix,
	               .keys = plan->keys,
	               .key_off = plan->off,
	               .n_keys = plan->n,
	               .remote = {A->remote[0], A->remote[1]},
	               .check_rows = o->prefix && o->storage};
	static rp_result pres, nres;
	rp_run(&c, &pres, &A->live);
	*S = (summary){.p = &pres,
	               .prefix = o->prefix ? plan : NULL,
	               .n_req = t->n,
	               .block_bytes = o->block_size * 2 * o->head_dim};
	remote_done(A, S); /* first: the pool's figures then include no write in flight */
	kvp_pool_stats(A->pool, &S->st);
	if (!o->naive)
		return;
	c.kind = RP_NAIVE;
	c.label = "naive";
	/* Naive has no prefix cache: no remote tier, no content checks of
	 * matched blocks (rp_run refuses either without a prefix cache). */
	c.prefix = false;
	c.remote[0] = c.remote[1] = NULL;
	c.check_rows = false;
	rp_run(&c, &nres, NULL);
	S->n = &nres;
}

/* --remote-cache URL: one tier per storage (0), or -1 after saying why not. */
static int setup_remote(app *A, kvp_storage *store[2])
{
	const opts *o = &A->o;
	if (o->remote_url == NULL)
		return 0;
	if (!o->prefix || !o->storage) {
		fprintf(stderr,
		        "kvpool_replay: --remote-cache needs --prefix-cache and --storage\n");
		return -1;
	}
	kvp_remote_config rc;
	kvp_remote_config_init(&rc);
	rc.url = o->remote_url;
	rc.key_namespace = "kvpool-replay";
	/* speed 0 churns a small pool in microseconds: the writer would find
	 * most blocks evicted, so the publisher copies the rows */
	rc.copy_rows = true;
	/* a queue of 256 MiB: a replay at speed 0 publishes faster than one writer sends */
	uint64_t cell = KVP_REMOTE_HEADER_BYTES + o->block_size * o->head_dim * 4;
	rc.queue_cap = (uint32_t)((256u << 20) / cell > 4096 ? (256u << 20) / cell : 4096);
	for (int i = 0; i < 2; i++) {
		int rv = kvp_remote_create(store[i], &rc, &A->remote[i]);
		if (rv != KVP_OK) {
			fprintf(stderr, "kvpool_replay: --remote-cache %s: %s\n", o->remote_url,
			        kvp_strerror(rv));
			return -1;
		}
	}
	return 0;
}

/* --linger: keep serving /metrics until then or SIGTERM/SIGINT; then stop. */
static void stop_metrics(const opts *o, mhttp *srv)
{
	if (srv == NULL)
		return;
	if (o->linger_s > 0) {
		signal(SIGTERM, on_signal);
		signal(SIGINT, on_signal);
		fprintf(stderr, "metrics: serving for %" PRIu64 " more seconds (SIGTERM ends)\n",
		        o->linger_s);
		uint64_t end = su_now_ns() + o->linger_s * 1000000000ull;
		while (!got_signal && su_now_ns() < end)
			su_sleep_ns(50000000);
	}
	fprintf(stderr, "metrics: %" PRIu64 " scrapes served\n", mhttp_scrapes(srv));
	mhttp_stop(srv);
}

static void teardown(app *A, kvp_storage *store[2], trace *t, prefix_plan *plan)
{
	for (int i = 0; i < 2; i++)
		kvp_remote_destroy(A->remote[i]);
	for (int i = 0; i < 2; i++)
		kvp_storage_destroy(store[i]);
	kvp_pool_destroy(A->pool);
	kvp_bufcache_destroy(A->cache);
	trace_free(t);
	plan_free(plan);
}

/* The checks, their count and --json; the exit status. */
static int finish(const app *A, const summary *S, const char *source, uint64_t expect_rejected,
                  uint64_t expect_tokens)
{
	checks k = {0};
	run_checks(&k, A, S, expect_rejected, expect_tokens);
	printf("%d checks, %d failed\n", k.run, k.failed);
	fflush(stdout);
	int status = k.failed ? 1 : 0;
	if (A->o.json_path != NULL) {
		char *path = su_resolve_path(A->o.json_path);
		if (path == NULL || write_json(path, A, S, source, &k) != 0)
			status = status ? status : 2;
		free(path);
	}
	return status;
}

int main(int argc, char **argv)
{
	app A;
	memset(&A, 0, sizeof A);
	if (parse_args(argc, argv, &A.o) != 0)
		return 2; /* parse_args printed one line saying why */
	opts *o = &A.o;
	trace t;
	char source[1024];
	if (o->json_path != NULL &&
	    su_cli_json_writable("kvpool_replay", o->json_path, o->trace_path) != 0)
		return 2;
	if (load_requests(o, &t, source, sizeof source) != 0)
		return 2;
	if (check_prefix_input(o, &t) != 0) {
		trace_free(&t);
		return 2;
	}
	static prefix_plan plan;
	kvp_storage *store[2] = {NULL, NULL};
	mhttp *srv = NULL;
	uint64_t capacity = 0, expect_rejected, expect_tokens;
	if (setup_pool(&A, store) != 0 || setup_remote(&A, store) != 0)
		goto setup_failed;
	capacity = kvp_n_free(A.pool, KVP_V); /* V has the smaller half */
	expect_counts(&t, (uint32_t)o->block_size, capacity, &expect_rejected, &expect_tokens);
	if (o->prefix &&
	    plan_build(&t, (uint32_t)o->block_size, capacity, (unsigned)o->threads, &plan) != 0) {
		fprintf(stderr, "kvpool_replay: out of memory hashing the prefix keys\n");
		goto setup_failed;
	}
	if (start_metrics(&A, &srv) != 0)
		goto setup_failed;
	print_banner(o, source, capacity);
	summary S;
	replay_both(&A, &t, store, capacity, &plan, &S);
	print_table(&S, o);
	int status = finish(&A, &S, source, expect_rejected, expect_tokens);
	stop_metrics(o, srv);
	teardown(&A, store, &t, &plan);
	return status;

setup_failed:
	teardown(&A, store, &t, &plan);
	return 2;
}
