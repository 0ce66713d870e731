/*
 * stress/stress_main.c - kvpool_stress: N threads run random mixes of every
 * pool operation in phases of fresh threads; after each phase the pool is
 * checked against the harness's model (stress/stress.c).  Some phases make
 * the system allocator fail on demand (kvpi_fault_inject).
 *
 *   kvpool_stress --threads N --seconds S --seed X [--ops N] ...
 *
 * Exit status: 0 no violation, 1 a violation (the first is printed, with
 * the random seed to replay the run), 2 bad usage.  See docs/STRESS.md.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <kvpool/kvpool.h>

#include "lib/testing/fault.h"
#include "stress/cli.h"
#include "stress/jsonout.h"
#include "stress/metrics_http.h"
#include "stress/progress.h"
#include "stress/stress.h"
#include "stress/util.h"

typedef struct opts {
	uint64_t threads, ops, seed, blocks, max_blocks, block_size, thread_cache, phase_ms;
	double seconds;
	bool seed_given, faults, progress;
	int metrics_port;
	const char *json_path;
} opts;

typedef struct live {
	_Alignas(64) _Atomic uint64_t ops;
} live;

typedef struct run {
	opts o;
	kvp_pool *pool;
	st_world w;
	live *lv;                    /* per slot: operations done, for progress and /metrics */
	_Atomic uint64_t ops_before; /* operations of finished phases */
	_Atomic uint64_t ops_budget; /* left of --ops (UINT64_MAX: none) */
	_Atomic uint64_t phase, threads_done;
	uint64_t deadline;
	promhist alloc_lat; /* kvp_allocate durations, timed only with --metrics-port */
	pthread_t *tid;     /* a phase's threads, one per slot */
	struct worker *wk;
	mhttp *srv; /* NULL without --metrics-port */
} run;

/* What the phases did, for the summary. */
typedef struct tally {
	uint64_t t0, phases, fault_phases;
	double secs;
} tally;

typedef struct worker {
	run *r;
	st_slot *s;
	live *lv;
} worker;

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: kvpool_stress [options]\n"
	        "  --threads N        worker threads per phase (default 4)\n"
	        "  --seconds S        run this long (default 10; 0 = until --ops)\n"
	        "  --ops N            stop after N operations in all (default: no limit)\n"
	        "  --seed X           PRNG seed (default: from the clock; always printed)\n"
	        "  --phase-ms M       length of a phase of fresh threads (default 200)\n"
	        "  --blocks N         initial pool blocks (default 1024)\n"
	        "  --max-blocks N     growth cap (default 2 x --blocks)\n"
	        "  --block-size S     tokens per block (default 16)\n"
	        "  --thread-cache N   per-thread cached blocks per stream (default: the pool's)\n"
	        "  --no-faults        no allocator fault injection (default: every 3rd phase)\n"
	        "  --json FILE        write the results as JSON\n"
	        "  --metrics-port P   serve /metrics on 127.0.0.1:P while running (0: any)\n"
	        "  --no-progress      no live progress line (shown only on a terminal)\n"
	        "  -h, --help         this text\n"
	        "  -V, --version      the kvpool version\n"
	        "Options take their value as --opt VALUE or --opt=VALUE.\n");
}

static const struct option longopts[] = {
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, 'V'},
    {"no-faults", no_argument, NULL, 0},
    {"no-progress", no_argument, NULL, 0},
    {"seconds", required_argument, NULL, 0},
    {"json", required_argument, NULL, 0},
    {"metrics-port", required_argument, NULL, 0},
    {"threads", required_argument, NULL, 0},
    {"ops", required_argument, NULL, 0},
    {"seed", required_argument, NULL, 0},
    {"phase-ms", required_argument, NULL, 0},
    {"blocks", required_argument, NULL, 0},
    {"max-blocks", required_argument, NULL, 0},
    {"block-size", required_argument, NULL, 0},
    {"thread-cache", required_argument, NULL, 0},
    {NULL, 0, NULL, 0},
};

/* One option of the command line: 0 applied, -1 after printing why not. */
static int parse_option(opts *o, const su_cli *c)
{
	const char *a = c->name, *v = c->value;
	uint64_t u;
	if (strcmp(a, "--no-faults") == 0) {
		o->faults = false;
	} else if (strcmp(a, "--no-progress") == 0) {
		o->progress = false;
	} else if (strcmp(a, "--seconds") == 0) { /* finite, 0..1e7: seconds * 1e9 fits */
		if (!su_parse_double(v, &o->seconds) || o->seconds < 0 || o->seconds > 1e7)
			return su_cli_bad_value(c);
	} else if (strcmp(a, "--json") == 0) {
		o->json_path = v;
	} else if (strcmp(a, "--metrics-port") == 0) {
		if (!su_parse_u64(v, &u) || u > 65535)
			return su_cli_bad_value(c);
		o->metrics_port = (int)u;
	} else {
		const su_num_flag nums[] = {
		    {"--threads", &o->threads, 1, 256},
		    {"--ops", &o->ops, 1, UINT64_MAX},
		    {"--seed", &o->seed, 0, UINT64_MAX},
		    {"--phase-ms", &o->phase_ms, 1, 3600000},
		    {"--blocks", &o->blocks, 2, 1u << 24},
		    {"--max-blocks", &o->max_blocks, 2, 1u << 26},
		    {"--block-size", &o->block_size, 1, 4096},
		    {"--thread-cache", &o->thread_cache, 0, KVP_MAX_THREAD_CACHE},
		};
		int k = su_cli_number(c, nums, sizeof nums / sizeof nums[0]);
		if (k < 0)
			return -1;
		if (nums[k].dst == &o->seed)
			o->seed_given = true;
	}
	return 0;
}

static int parse_args(int argc, char **argv, opts *o)
{
	su_cli c = {.prog = "kvpool_stress",
	            .argc = argc,
	            .argv = argv,
	            .longopts = longopts,
	            .usage = usage};
	int rc;
	*o = (opts){.threads = 4,
	            .seconds = 10,
	            .phase_ms = 200,
	            .blocks = 1024,
	            .block_size = 16,
	            .thread_cache = KVP_DEFAULT_THREAD_CACHE,
	            .faults = true,
	            .progress = true,
	            .metrics_port = -1};
	while ((rc = su_cli_next(&c)) == 1)
		if (parse_option(o, &c) != 0)
			return -1;
	if (rc != 0)
		return -1;
	if (o->max_blocks == 0)
		o->max_blocks = 2 * o->blocks;
	if (o->max_blocks < o->blocks) {
		fprintf(stderr, "kvpool_stress: --max-blocks is below --blocks\n");
		return -1;
	}
	if (o->seconds <= 0 && o->ops == 0) {
		fprintf(stderr, "kvpool_stress: give --seconds > 0 or --ops\n");
		return -1;
	}
	return 0;
}

static uint64_t ld(_Atomic uint64_t *a)
{
	return atomic_load_explicit(a, memory_order_relaxed);
}

static uint64_t ops_now(run *r)
{
	uint64_t n = ld(&r->ops_before);
	for (uint64_t i = 0; i < r->o.threads; i++)
		n += ld(&r->lv[i].ops);
	return n;
}

/* Take up to @want operations from the --ops budget; returns how many were granted. */
static uint64_t take_budget(run *r, uint64_t want)
{
	uint64_t left = ld(&r->ops_budget);
	while (left != UINT64_MAX) {
		uint64_t got = left < want ? left : want;
		if (got == 0)
			return 0;
		/* Relaxed: the budget orders nothing but itself. */
		if (atomic_compare_exchange_weak_explicit(&r->ops_budget, &left, left - got,
		                                          memory_order_relaxed,
		                                          memory_order_relaxed))
			return got;
	}
	return want;
}

static void *worker_main(void *arg)
{
	worker *k = arg;
	run *r = k->r;
	for (;;) {
		if (r->deadline && su_now_ns() >= r->deadline)
			break;
		uint64_t n = take_budget(r, 64);
		if (n == 0)
			break;
		for (uint64_t i = 0; i < n; i++)
			st_step(&r->w, k->s);
		/* Only this thread writes its counter; relaxed, read by the monitor. */
		atomic_store_explicit(&k->lv->ops, ld(&k->lv->ops) + n, memory_order_relaxed);
	}
	atomic_fetch_add_explicit(&r->threads_done, 1, memory_order_relaxed);
	return NULL;
}

static void fill_metrics(void *arg, mtext *t)
{
	run *r = arg;
	mtext_pool_live(t, r->pool, "stress");
	mtext_promhist(t, "kvpool_stress_allocate_duration_seconds",
	               "Duration of the stress harness's kvp_allocate calls.", &r->alloc_lat);
	mtext_metric(t, "kvpool_stress_operations_total", "counter",
	             "Pool operations the stress harness has run.", (double)ops_now(r));
	mtext_metric(t, "kvpool_stress_phase", "gauge", "Current phase of fresh threads.",
	             (double)ld(&r->phase));
}

static void print_counts(const st_counts *c, double secs, const st_world *w)
{
	uint64_t total = 0;
	for (int k = 0; k < OP_N; k++)
		total += c->ops[k];
	printf("\noperations: %" PRIu64 " in %.2f s = %.0f ops/s\n", total, secs,
	       secs > 0 ? (double)total / secs : 0.0);
	for (int k = 0; k < OP_N; k++)
		printf("  %-28s %12" PRIu64 "\n", st_op_names[k], c->ops[k]);
	printf("  blocks allocated %" PRIu64 ", freed %" PRIu64 ", stale frees %" PRIu64
	       ", exhausted %" PRIu64 ", retired %" PRIu64 ", ENOMEM under injection %" PRIu64 "\n",
	       c->allocated, c->freed, c->stale_frees, c->exhausted, c->retired, c->enomem);
	printf("\ninvariant checks: %" PRIu64 " run, %" PRIu64 " failed\n", w->checks_run,
	       w->checks_failed);
	for (int k = 0; k < ST_CHECK_KINDS; k++)
		printf("  %-48s %6" PRIu64 "\n", st_check_names[k], w->check_kinds[k]);
}

/* The --json file (docs/STRESS.md), through jansson. */
static int write_json(const char *path, const run *r, const st_counts *c, double secs,
                      uint64_t phases, uint64_t fault_phases, uint64_t violations)
{
	uint64_t total = 0;
	for (int k = 0; k < OP_N; k++)
		total += c->ops[k];
	json_t *o = json_object(), *ops = json_object();
	json_object_set_new(o, "program", json_string("kvpool_stress"));
	json_object_set_new(o, "version", json_string(kvp_version()));
	jo_u64(o, "seed", r->o.seed);
	jo_u64(o, "threads", r->o.threads);
	jo_f64(o, "seconds", secs);
	jo_u64(o, "phases", phases);
	jo_u64(o, "fault_phases", fault_phases);
	jo_u64(o, "faults_injected", kvpi_fault_injected());
	jo_u64(o, "operations", total);
	jo_f64(o, "ops_per_s", secs > 0 ? (double)total / secs : 0.0);
	for (int k = 0; k < OP_N; k++)
		jo_u64(ops, st_op_names[k], c->ops[k]);
	json_object_set_new(o, "ops", ops);
	jo_u64(o, "blocks_allocated", c->allocated);
	jo_u64(o, "blocks_freed", c->freed);
	jo_u64(o, "stale_frees", c->stale_frees);
	jo_u64(o, "exhausted", c->exhausted);
	jo_u64(o, "retired", c->retired);
	jo_u64(o, "enomem", c->enomem);
	jo_u64(o, "checks_run", r->w.checks_run);
	jo_u64(o, "checks_failed", r->w.checks_failed);
	jo_u64(o, "violations", violations);
	int rc = jo_write(o, path, "kvpool_stress");
	json_decref(o);
	return rc;
}

/* A seed from the clock and the pid, below 1e9 so that it is easy to retype. */
static uint64_t clock_seed(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	uint64_t h = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)getpid();
	return su_rand(&h) % 1000000000ull;
}

static void print_header(const opts *o)
{
	printf("kvpool_stress: seed %" PRIu64 " (replay with --seed %" PRIu64 ")\n", o->seed,
	       o->seed);
	printf("  %" PRIu64 " threads, phases of %" PRIu64 " ms, %s%s; pool %" PRIu64
	       " blocks growing to %" PRIu64 ", %" PRIu64 " tokens each, thread cache %" PRIu64
	       "; fault injection %s\n",
	       o->threads, o->phase_ms, o->seconds > 0 ? "" : "no time limit",
	       o->seconds > 0 ? "time-bounded" : "", o->blocks, o->max_blocks, o->block_size,
	       o->thread_cache, o->faults ? "every 3rd phase" : "off");
	fflush(stdout);
}

static void teardown(run *r)
{
	mhttp_stop(r->srv);
	st_world_free(&r->w);
	kvp_pool_destroy(r->pool);
	free(r->lv);
	free(r->tid);
	free(r->wk);
}

/* The pool, the model, the per-thread state and /metrics; 0 or -1 (printed). */
static int setup(run *r)
{
	const opts *o = &r->o;
	kvp_pool_config pc;
	kvp_pool_config_init(&pc);
	pc.n_blocks = (uint32_t)o->blocks;
	pc.block_size = (uint32_t)o->block_size;
	pc.grow_on_exhaustion = true;
	pc.max_blocks = (uint32_t)o->max_blocks;
	pc.thread_cache = (uint32_t)o->thread_cache;
	int rc = kvp_pool_create(&pc, &r->pool);
	if (rc != KVP_OK) {
		fprintf(stderr, "kvpool_stress: kvp_pool_create: %s\n", kvp_strerror(rc));
		return -1;
	}
	/* live is cache-line aligned: calloc promises only 16 bytes (UBSan) */
	void *lvmem = NULL;
	if (posix_memalign(&lvmem, 64, o->threads * sizeof *r->lv) == 0)
		r->lv = memset(lvmem, 0, o->threads * sizeof *r->lv);
	r->tid = calloc(o->threads, sizeof *r->tid);
	r->wk = calloc(o->threads, sizeof *r->wk);
	if (r->lv == NULL || r->tid == NULL || r->wk == NULL ||
	    st_world_init(&r->w, r->pool, (unsigned)o->threads, o->seed, stderr) != 0) {
		fprintf(stderr, "kvpool_stress: out of memory\n");
		return -1;
	}
	/* Growth reuses retired ids; this bound is a safety net a correct pool never reaches. */
	uint64_t max_ids = 512 * o->max_blocks;
	r->w.max_ids = (uint32_t)(max_ids > (1u << 22) ? (1u << 22) : max_ids);
	r->w.max_blocks = (uint32_t)o->max_blocks;
	if (o->metrics_port >= 0)
		r->w.alloc_lat = &r->alloc_lat;
	atomic_init(&r->ops_budget, o->ops ? o->ops : UINT64_MAX);
	if (o->metrics_port < 0)
		return 0;
	char err[256];
	if (mhttp_start((uint16_t)o->metrics_port, fill_metrics, r, &r->srv, err, sizeof err) !=
	    0) {
		fprintf(stderr, "kvpool_stress: %s\n", err);
		teardown(r);
		return -1;
	}
	fprintf(stderr, "metrics: http://127.0.0.1:%u/metrics\n", mhttp_port(r->srv));
	return 0;
}

static void show_progress(run *r, prog *pg, const tally *t, bool faults)
{
	char line[200];
	double secs = (double)(su_now_ns() - t->t0) / 1e9;
	kvp_stats s;
	kvp_pool_stats(r->pool, &s);
	uint64_t ops = ops_now(r);
	snprintf(line, sizeof line,
	         "stress: %" PRIu64 " ops  %.1f s  phase %" PRIu64 "%s  blocks in use %" PRIu64
	         "/%" PRIu64 "  %.0f ops/s",
	         ops, secs, t->phases, faults ? " (faults)" : "", kvp_stats_blocks_in_use(&s),
	         s.n_blocks, secs > 0 ? (double)ops / secs : 0.0);
	prog_update(pg, line);
}

/*
 * One phase of fresh threads, until @deadline or the --ops budget; every
 * third with allocator faults injected (unless --no-faults).  Then the
 * pool is checked against the model.  Returns true when the run must stop.
 */
static bool run_phase(run *r, prog *pg, tally *t, uint64_t *rng)
{
	const opts *o = &r->o;
	bool faults = o->faults && t->phases % 3 == 2, stop = false;
	r->w.faults_on = faults;
	if (faults) {
		long skip = (long)su_rand_below(rng, 4);
		long fail = su_rand_below(rng, 3) == 0 ? -1 : 1 + (long)su_rand_below(rng, 8);
		kvpi_fault_inject(skip, fail);
		t->fault_phases++;
	}
	atomic_store_explicit(&r->phase, t->phases, memory_order_relaxed);
	atomic_store_explicit(&r->threads_done, 0, memory_order_relaxed);
	uint64_t started = 0;
	for (; started < o->threads; started++) {
		st_seed_slot(&r->w.slots[started], o->seed, t->phases + 1);
		r->wk[started] = (worker){r, &r->w.slots[started], &r->lv[started]};
		if (pthread_create(&r->tid[started], NULL, worker_main, &r->wk[started]) != 0)
			break;
	}
	while (ld(&r->threads_done) < started) {
		if (prog_due(pg))
			show_progress(r, pg, t, faults);
		su_sleep_ns(10000000);
	}
	for (uint64_t i = 0; i < started; i++)
		pthread_join(r->tid[i], NULL);
	if (faults)
		kvpi_fault_inject(0, 0);
	r->w.faults_on = false;
	if (started < o->threads) {
		fprintf(stderr, "kvpool_stress: cannot start thread %" PRIu64 "\n", started);
		stop = true;
	}
	t->phases++;
	if (st_check(&r->w) != 0 || (t->phases % 4 == 0 && st_drain_check(&r->w) != 0) ||
	    (faults && st_fault_probe(&r->w) != 0) || st_violations(&r->w) != 0)
		stop = true; /* report the first failing phase */
	return stop;
}

/* Phases until --seconds, --ops or the first failing phase; then a last drain. */
static void run_phases(run *r, tally *t)
{
	const opts *o = &r->o;
	prog pg;
	prog_init(&pg, o->progress);
	t->t0 = su_now_ns();
	uint64_t end = o->seconds > 0 ? t->t0 + (uint64_t)(o->seconds * 1e9) : 0;
	uint64_t rng = o->seed ^ 0xfa17;
	for (;;) {
		uint64_t now = su_now_ns();
		if ((end && now >= end) || ld(&r->ops_budget) == 0)
			break;
		uint64_t phase_end = now + o->phase_ms * 1000000ull;
		r->deadline = end && end < phase_end ? end : phase_end;
		if (run_phase(r, &pg, t, &rng))
			break;
	}
	t->secs = (double)(su_now_ns() - t->t0) / 1e9;
	st_drain_check(&r->w);
	st_release_all(&r->w);
	prog_done(&pg);
}

/* The counts, the pool and the verdict on stdout; returns the violations. */
static uint64_t report(run *r, const tally *t, st_counts *c)
{
	const opts *o = &r->o;
	st_total(&r->w, c);
	print_counts(c, t->secs, &r->w);
	printf("  phases: %" PRIu64 " (%" PRIu64 " with allocator fault injection: %lu failures "
	       "injected, %" PRIu64 " ENOMEM answers in operations, %" PRIu64
	       " in growth probes)\n",
	       t->phases, t->fault_phases, kvpi_fault_injected(), c->enomem, r->w.probe_enomem);
	kvp_stats s;
	char line[256];
	kvp_pool_stats(r->pool, &s);
	if (kvp_stats_format(&s, line, sizeof line) > 0)
		printf("\npool: %s\n", line);
	printf("  block ids created: %u, retired ids waiting for reuse: %u (growth reuses them)\n",
	       kvp_pool_n_ids(r->pool), kvp_pool_n_retired_ids(r->pool));
	uint64_t v = st_violations(&r->w);
	if (v == 0)
		printf("\nPASS: no violation (seed %" PRIu64 ")\n", o->seed);
	else
		printf("\nFAIL: %" PRIu64 " violations; first: %s\n  replay with --seed %" PRIu64
		       " --threads %" PRIu64 "\n",
		       v, st_first_violation(&r->w), o->seed, o->threads);
	fflush(stdout);
	return v;
}

int main(int argc, char **argv)
{
	static run R;
	run *r = &R;
	if (parse_args(argc, argv, &r->o) != 0)
		return 2; /* parse_args printed one line saying why */
	opts *o = &r->o;
	/* fail now, with the reason, not after the run */
	if (o->json_path != NULL && su_cli_json_writable("kvpool_stress", o->json_path, NULL) != 0)
		return 2;
	if (!o->seed_given)
		o->seed = clock_seed();
	print_header(o);
	if (setup(r) != 0)
		return 2;
	tally t = {0};
	st_counts c;
	run_phases(r, &t);
	uint64_t v = report(r, &t, &c);
	int status = v ? 1 : 0;
	if (o->json_path != NULL) {
		char *path = su_resolve_path(o->json_path);
		if (path == NULL)
			fprintf(stderr, "kvpool_stress: cannot write %s: out of memory\n",
			        o->json_path);
		if (path == NULL ||
		    write_json(path, r, &c, t.secs, t.phases, t.fault_phases, v) != 0)
			status = status ? status : 2; /* jo_write said why */
		free(path);
	}
	teardown(r);
	return status;
}
