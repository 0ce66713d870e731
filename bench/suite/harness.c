/*
 * bench/suite/harness.c - options, timing, threaded runs, figures and JSON.
 *
 * Throughput is measured over a fixed wall-clock window, not a fixed op
 * count: with 16 threads on 2 cores a fixed count would be finished by
 * whichever threads the scheduler favoured.  The window starts when every
 * thread has done its setup and is released from a barrier, and ends when
 * the last thread has seen the stop flag, so time a preempted thread spends
 * off-CPU (holding a lock or not) is inside the window.
 */
#define _GNU_SOURCE
#include "bench/suite/harness.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <kvpool/version.h>

kvb_opts kvb_opt;

static void usage(FILE *f, const char *argv0)
{
	fprintf(
	    f,
	    "usage: %s [--quick | --smoke] [--seconds S] [--warmup S] [--reps N]\n"
	    "          [--threads 1,2,4,8,16] [--max-pow10 N] [--only NAME,...] [--json FILE]\n"
	    "          [--trace FILE] [--modes plain,prefix] [--runs N] [--limit N]\n"
	    "          [--split session|rr] [--thread-cache N] [--phases]\n"
	    "  --quick         every benchmark, short windows (whole suite ~1.5 min on 2 cores):\n"
	    "                  0.2 s windows, 0.1 s warm-up, 3 reps, threads 1,2,4,8,16\n"
	    "  --smoke         about a second per binary (the tests run this): 0.01 s windows,\n"
	    "                  0.005 s warm-up, 3 reps, threads 1,4, sizes up to 10^4\n"
	    "  (neither)       full: 1 s windows, 0.3 s warm-up, 5 reps, threads 1,2,4,8,16\n"
	    "  --seconds S     measurement window, overrides the mode's\n"
	    "  --warmup S      warm-up before each window, overrides the mode's\n"
	    "  --reps N        repetitions per figure (median reported; at most %d)\n"
	    "  --threads LIST  thread counts, comma-separated (1..%d each)\n"
	    "  --max-pow10 N   largest pool size 10^N in the size sweep, 3..7 (default 7)\n"
	    "  --only NAMES    getput,batch,synthetic,scaling,bufcache,stats,lifecycle\n"
	    "                  (default: all)\n"
	    "  --json FILE     write every figure as JSON (default: none)\n"
	    "  lifecycle only:\n"
	    "  --trace FILE    a trace the replay reads: Mooncake JSONL (with hash ids),\n"
	    "                  Azure CSV or Vidur CSV (default: ../shared/traces/\n"
	    "                  conversation_trace.jsonl beside the workspace, else synthetic)\n"
	    "  --modes LIST    plain,prefix (default: both)\n"
	    "  --runs N        best of N runs per side (default 3; smoke 1)\n"
	    "  --limit N       the trace's first N requests (default all; quick 1500)\n"
	    "  --split HOW     session: a conversation's requests on one thread (default);\n"
	    "                  rr: thread t takes every N-th request from t\n"
	    "  --thread-cache N  kvpool's per-thread cache (default: kvpool's default)\n"
	    "  --phases        also time each step of a request (match, allocate, publish,\n"
	    "                  decode, free_all) on both sides: wall ns per block\n"
	    "  -h, --help      this text\n"
	    "  -V, --version   the kvpool version\n"
	    "Options take their value as --opt VALUE or --opt=VALUE.\n",
	    argv0, KVB_MAX_REPS, KVB_MAX_THREADS);
}

static int parse_threads(const char *s)
{
	int n = 0;
	char *end;

	while (*s && n < 8) {
		long v = strtol(s, &end, 10);
		if (end == s || v < 1 || v > KVB_MAX_THREADS)
			return -1;
		kvb_opt.threads[n++] = (int)v;
		s = *end == ',' ? end + 1 : end;
		if (*end && *end != ',')
			return -1;
	}
	kvb_opt.n_threads = n;
	return n > 0 ? 0 : -1;
}

/* What the command line sets over the mode's defaults (< 0, NULL: not given). */
typedef struct overrides {
	double seconds, warmup;
	int reps, pow10;
	const char *threads;
} overrides;

/* The getopt_long loop: 0, or -1 after one line saying why; exits after -h and -V. */
static int parse_flags(int argc, char **argv, overrides *ov)
{
	static const struct option longopts[] = {
	    {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},
	    {"quick", no_argument, NULL, 'q'},
	    {"smoke", no_argument, NULL, 's'},
	    {"seconds", required_argument, NULL, 'S'},
	    {"warmup", required_argument, NULL, 'W'},
	    {"reps", required_argument, NULL, 'R'},
	    {"max-pow10", required_argument, NULL, 'P'},
	    {"threads", required_argument, NULL, 'T'},
	    {"only", required_argument, NULL, 'O'},
	    {"json", required_argument, NULL, 'J'},
	    {"trace", required_argument, NULL, 't'},
	    {"modes", required_argument, NULL, 'M'},
	    {"runs", required_argument, NULL, 'r'},
	    {"limit", required_argument, NULL, 'L'},
	    {"split", required_argument, NULL, 'p'},
	    {"thread-cache", required_argument, NULL, 'C'},
	    {"phases", no_argument, NULL, 'X'},
	    {NULL, 0, NULL, 0},
	};
	int c;
	opterr = 0; /* one line of our own below */
	optind = 1;
	while ((c = getopt_long(argc, argv, ":hV", longopts, NULL)) != -1) {
		switch (c) {
		case 'h':
			usage(stdout, argv[0]);
			exit(0);
		case 'V':
			printf("%s (kvpool) %s\n", argv[0], kvp_version());
			exit(0);
		case 'q':
			kvb_opt.quick = true;
			break;
		case 's':
			kvb_opt.smoke = true;
			break;
		case 'S':
			ov->seconds = atof(optarg);
			break;
		case 'W':
			ov->warmup = atof(optarg);
			break;
		case 'R':
			ov->reps = atoi(optarg);
			break;
		case 'P':
			ov->pow10 = atoi(optarg);
			break;
		case 'T':
			ov->threads = optarg;
			break;
		case 'O':
			kvb_opt.only = optarg;
			break;
		case 'J':
			kvb_opt.json = optarg;
			break;
		case 't':
			kvb_opt.trace = optarg;
			break;
		case 'M':
			kvb_opt.modes = optarg;
			break;
		case 'r':
			kvb_opt.runs = atoi(optarg);
			if (kvb_opt.runs < 1 || kvb_opt.runs > KVB_MAX_REPS) {
				fprintf(stderr, "%s: bad --runs '%s' (1..%d)\n", argv[0], optarg,
				        KVB_MAX_REPS);
				return -1;
			}
			break;
		case 'X':
			kvb_opt.phases = true;
			break;
		case 'C':
			kvb_opt.thread_cache = atol(optarg);
			if (kvb_opt.thread_cache < 0) {
				fprintf(stderr, "%s: bad --thread-cache '%s'\n", argv[0], optarg);
				return -1;
			}
			break;
		case 'p':
			if (strcmp(optarg, "session") && strcmp(optarg, "rr")) {
				fprintf(stderr, "%s: bad --split '%s' (session or rr)\n", argv[0],
				        optarg);
				return -1;
			}
			kvb_opt.split = optarg;
			break;
		case 'L':
			kvb_opt.limit = atol(optarg);
			if (kvb_opt.limit < 1) {
				fprintf(stderr, "%s: bad --limit '%s'\n", argv[0], optarg);
				return -1;
			}
			break;
		case ':':
			fprintf(stderr, "%s: option %s needs a value (see --help)\n", argv[0],
			        argv[optind - 1]);
			return -1;
		default:
			fprintf(stderr, "%s: unknown option '%s' (see --help)\n", argv[0],
			        argv[optind - 1]);
			return -1;
		}
	}
	return 0;
}

/* The mode's windows, repetitions, sizes and thread counts. */
static void apply_mode(void)
{
	if (kvb_opt.smoke) {
		kvb_opt.seconds = 0.01, kvb_opt.warmup = 0.005, kvb_opt.reps = 3;
		kvb_opt.max_pow10 = 4;
		parse_threads("1,4");
	} else if (kvb_opt.quick) {
		kvb_opt.seconds = 0.2, kvb_opt.warmup = 0.1, kvb_opt.reps = 3;
		kvb_opt.max_pow10 = 7;
		parse_threads("1,2,4,8,16");
	} else {
		kvb_opt.seconds = 1.0, kvb_opt.warmup = 0.3, kvb_opt.reps = 5;
		kvb_opt.max_pow10 = 7;
		parse_threads("1,2,4,8,16");
	}
}

int kvb_parse_args(int argc, char **argv)
{
	overrides ov = {.seconds = -1, .warmup = -1, .reps = -1, .pow10 = -1};

	memset(&kvb_opt, 0, sizeof(kvb_opt));
	kvb_opt.thread_cache = -1;
	if (parse_flags(argc, argv, &ov) != 0)
		return -1;
	if (optind < argc) {
		fprintf(stderr, "%s: unexpected argument '%s' (see --help)\n", argv[0],
		        argv[optind]);
		return -1;
	}
	apply_mode();
	if (ov.seconds > 0)
		kvb_opt.seconds = ov.seconds;
	if (ov.warmup >= 0)
		kvb_opt.warmup = ov.warmup;
	if (ov.reps > 0)
		kvb_opt.reps = ov.reps > KVB_MAX_REPS ? KVB_MAX_REPS : ov.reps;
	if (ov.pow10 >= 3 && ov.pow10 <= 7)
		kvb_opt.max_pow10 = ov.pow10;
	if (ov.threads && parse_threads(ov.threads) != 0) {
		fprintf(stderr, "%s: bad --threads '%s' (see --help)\n", argv[0], ov.threads);
		return -1;
	}
	return 0;
}

bool kvb_selected(const char *name)
{
	const char *p = kvb_opt.only;
	size_t len = strlen(name);

	if (!p)
		return true;
	while (*p) {
		const char *e = strchr(p, ',');
		size_t l = e ? (size_t)(e - p) : strlen(p);
		if (l == len && !strncmp(p, name, len))
			return true;
		if (!e)
			break;
		p = e + 1;
	}
	return false;
}

double kvb_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

double kvb_median(const double *v, int n)
{
	double tmp[KVB_MAX_REPS];

	if (n <= 0)
		return 0;
	if (n > KVB_MAX_REPS)
		n = KVB_MAX_REPS;
	memcpy(tmp, v, (size_t)n * sizeof(double));
	qsort(tmp, (size_t)n, sizeof(double), cmp_double);
	return n % 2 ? tmp[n / 2] : (tmp[n / 2 - 1] + tmp[n / 2]) / 2;
}

double kvb_percentile(double *v, size_t n, double p)
{
	size_t k;

	if (n == 0)
		return 0;
	qsort(v, n, sizeof(double), cmp_double);
	k = (size_t)(p / 100.0 * (double)n + 0.5);
	if (k > 0)
		k--;
	if (k >= n)
		k = n - 1;
	return v[k];
}

size_t kvb_rss_bytes(void)
{
	char line[256];
	size_t kb = 0;
	FILE *f = fopen("/proc/self/status", "r");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %zu kB", &kb) == 1)
			break;
	fclose(f);
	return kb * 1024;
}

size_t kvb_heap_bytes(void)
{
	struct mallinfo2 mi = mallinfo2();
	return mi.uordblks + mi.hblkhd;
}

/* --- threaded runs ---------------------------------------------------------- */

typedef struct worker {
	pthread_t th;
	const kvb_case *c;
	int tid;
	pthread_barrier_t *ready;
	const atomic_int *stop;
	uint64_t ops;
	double t_end;
} worker;

static atomic_int failures;

void kvb_fail(const char *what, int code)
{
	if (atomic_fetch_add_explicit(&failures, 1, memory_order_relaxed) < 5)
		fprintf(stderr, "bench: %s failed (%d)\n", what, code);
}

int kvb_take_failures(void)
{
	return atomic_exchange_explicit(&failures, 0, memory_order_relaxed);
}

static void *worker_main(void *arg)
{
	worker *w = arg;
	void *tls = w->c->setup ? w->c->setup(w->c->ctx, w->tid) : NULL;

	pthread_barrier_wait(w->ready);
	w->ops = w->c->run(w->c->ctx, tls, w->tid, w->stop);
	w->t_end = kvb_now();
	if (w->c->teardown)
		w->c->teardown(w->c->ctx, tls, w->tid);
	return NULL;
}

void kvb_case_free(kvb_case *c)
{
	free(c->ctx);
	c->ctx = NULL;
}

void *kvb_ctx_alloc(size_t size)
{
	void *p = calloc(1, size);

	if (!p) {
		fprintf(stderr, "bench: out of memory\n");
		exit(2);
	}
	return p;
}

double kvb_run_threads(const kvb_case *c, int n, double seconds)
{
	worker w[KVB_MAX_THREADS];
	pthread_barrier_t ready;
	atomic_int stop = 0;
	struct timespec ts;
	double t0, t_end = 0;
	uint64_t ops = 0;
	int started = 0;

	if (n < 1 || n > KVB_MAX_THREADS)
		return -1;
	pthread_barrier_init(&ready, NULL, (unsigned)n + 1);
	for (int i = 0; i < n; i++) {
		w[i] = (worker){.c = c, .tid = i, .ready = &ready, .stop = &stop};
		if (pthread_create(&w[i].th, NULL, worker_main, &w[i]) != 0)
			break;
		started++;
	}
	if (started < n) {
		/* Cannot happen on a sane machine; leave the started threads parked. */
		fprintf(stderr, "bench: pthread_create failed\n");
		exit(2);
	}
	pthread_barrier_wait(&ready);
	t0 = kvb_now();
	ts.tv_sec = (time_t)seconds;
	ts.tv_nsec = (long)((seconds - (double)ts.tv_sec) * 1e9);
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
	atomic_store_explicit(&stop, 1, memory_order_relaxed);
	for (int i = 0; i < n; i++) {
		pthread_join(w[i].th, NULL);
		ops += w[i].ops;
		if (w[i].t_end > t_end)
			t_end = w[i].t_end;
	}
	pthread_barrier_destroy(&ready);
	return t_end > t0 ? (double)ops / (t_end - t0) : 0;
}

double kvb_measure(const kvb_case *c, int n, double *reps_out)
{
	double r[KVB_MAX_REPS];

	if (kvb_opt.warmup > 0)
		kvb_run_threads(c, n, kvb_opt.warmup);
	for (int i = 0; i < kvb_opt.reps; i++)
		r[i] = kvb_run_threads(c, n, kvb_opt.seconds);
	if (reps_out)
		memcpy(reps_out, r, (size_t)kvb_opt.reps * sizeof(double));
	return kvb_median(r, kvb_opt.reps);
}

/* --- figures and JSON ----------------------------------------------------- */

typedef struct fig {
	char bench[24], series[48], x[40], metric[40];
	double value;
	double reps[KVB_MAX_REPS];
	int n_reps;
} fig;

static fig *figs;
static size_t n_figs, cap_figs;
static char **notes;
static size_t n_notes, cap_notes;

static void copy(char *dst, size_t cap, const char *src)
{
	snprintf(dst, cap, "%s", src ? src : "");
}

void kvb_fig(const char *bench, const char *series, const char *x, const char *metric, double value,
             const double *reps, int n_reps)
{
	fig *f;

	if (n_figs == cap_figs) {
		size_t nc = cap_figs ? cap_figs * 2 : 256;
		fig *nf = realloc(figs, nc * sizeof(*nf));
		if (!nf)
			return;
		figs = nf, cap_figs = nc;
	}
	f = &figs[n_figs++];
	copy(f->bench, sizeof(f->bench), bench);
	copy(f->series, sizeof(f->series), series);
	copy(f->x, sizeof(f->x), x);
	copy(f->metric, sizeof(f->metric), metric);
	f->value = value;
	f->n_reps = reps ? (n_reps > KVB_MAX_REPS ? KVB_MAX_REPS : n_reps) : 0;
	if (f->n_reps)
		memcpy(f->reps, reps, (size_t)f->n_reps * sizeof(double));
}

void kvb_note(const char *bench, const char *fmt, ...)
{
	char buf[512];
	int len;
	va_list ap;

	len = snprintf(buf, sizeof(buf), "%s: ", bench);
	va_start(ap, fmt);
	vsnprintf(buf + len, sizeof(buf) - (size_t)len, fmt, ap);
	va_end(ap);
	if (n_notes == cap_notes) {
		size_t nc = cap_notes ? cap_notes * 2 : 32;
		char **nn = realloc(notes, nc * sizeof(*nn));
		if (!nn)
			return;
		notes = nn, cap_notes = nc;
	}
	notes[n_notes] = strdup(buf);
	if (notes[n_notes])
		n_notes++;
}

void kvb_target(const char *bench, const char *what, double value, bool met)
{
	if (kvb_opt.smoke || KVB_SANITIZED) {
		printf("  target %-62s not judged (%s run)\n", what,
		       KVB_SANITIZED ? "sanitizer" : "smoke");
	} else if (value != value) {
		printf("  target %-62s not measured\n", what);
		kvb_note(bench, "target %s: not measured", what);
	} else {
		printf("  target %-62s %s (%.4g)\n", what, met ? "MET" : "NOT MET", value);
		kvb_note(bench, "target %s: %s (%.4g)", what, met ? "met" : "not met", value);
	}
	fflush(stdout);
}

static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch < 0x20)
			fprintf(f, "\\u%04x", ch);
		else
			fputc(ch, f);
	}
	fputc('"', f);
}

static void json_num(FILE *f, double v)
{
	if (v != v || v > 1e300 || v < -1e300)
		fputs("null", f);
	else
		fprintf(f, "%.6g", v);
}

/* Resolve @path against the directory `bazel run` was called from. */
static void resolve_out(const char *path, char *out, size_t cap)
{
	const char *wd = getenv("BUILD_WORKING_DIRECTORY");

	if (path[0] != '/' && wd && *wd)
		snprintf(out, cap, "%s/%s", wd, path);
	else
		snprintf(out, cap, "%s", path);
}

/* One line of shell output (trailing newline dropped), or "" */
static void shell_line(const char *cmd, char *out, size_t cap)
{
	FILE *p = popen(cmd, "r");

	out[0] = 0;
	if (!p)
		return;
	if (fgets(out, (int)cap, p))
		out[strcspn(out, "\n")] = 0;
	pclose(p);
}

/* "meta": the machine, the commit measured, the mode. */
static void write_meta(FILE *f)
{
	char cpu[256], commit[128], dirty[64], cmd[PATH_MAX + 200];
	const char *ws = getenv("BUILD_WORKSPACE_DIRECTORY");

	shell_line("sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1", cpu,
	           sizeof(cpu));
	commit[0] = dirty[0] = 0;
	if (ws && *ws) {
		snprintf(cmd, sizeof(cmd), "git -C '%s' rev-parse --short HEAD 2>/dev/null", ws);
		shell_line(cmd, commit, sizeof(commit));
		snprintf(cmd, sizeof(cmd),
		         "git -C '%s' status --porcelain -- lib include bench 2>/dev/null | wc -l",
		         ws);
		shell_line(cmd, dirty, sizeof(dirty));
	}
	fputs("{\n  \"meta\": {", f);
	fprintf(f, "\"nproc\": %ld, \"cpu\": ", sysconf(_SC_NPROCESSORS_ONLN));
	json_str(f, cpu);
	fputs(", \"commit\": ", f);
	json_str(f, commit);
	fputs(", \"uncommitted_files_in_lib_include_bench\": ", f);
	json_str(f, dirty);
	fprintf(f,
	        ", \"quick\": %s, \"smoke\": %s, \"seconds\": %g, \"warmup\": %g, \"reps\": %d, "
	        "\"sanitized\": %s},\n",
	        kvb_opt.quick ? "true" : "false", kvb_opt.smoke ? "true" : "false", kvb_opt.seconds,
	        kvb_opt.warmup, kvb_opt.reps, KVB_SANITIZED ? "true" : "false");
}

/* "figures": every recorded figure with its repetitions; then "notes". */
static void write_figures(FILE *f)
{
	fputs("  \"figures\": [\n", f);
	for (size_t i = 0; i < n_figs; i++) {
		const fig *g = &figs[i];
		fputs("    {\"bench\": ", f);
		json_str(f, g->bench);
		fputs(", \"series\": ", f);
		json_str(f, g->series);
		fputs(", \"x\": ", f);
		json_str(f, g->x);
		fputs(", \"metric\": ", f);
		json_str(f, g->metric);
		fputs(", \"value\": ", f);
		json_num(f, g->value);
		if (g->n_reps) {
			fputs(", \"reps\": [", f);
			for (int r = 0; r < g->n_reps; r++) {
				if (r)
					fputs(", ", f);
				json_num(f, g->reps[r]);
			}
			fputc(']', f);
		}
		fputs(i + 1 < n_figs ? "},\n" : "}\n", f);
	}
	fputs("  ],\n  \"notes\": [\n", f);
	for (size_t i = 0; i < n_notes; i++) {
		fputs("    ", f);
		json_str(f, notes[i]);
		fputs(i + 1 < n_notes ? ",\n" : "\n", f);
	}
	fputs("  ]\n}\n", f);
}

int kvb_write_json(void)
{
	char path[PATH_MAX];
	FILE *f;

	if (!kvb_opt.json)
		return 0;
	resolve_out(kvb_opt.json, path, sizeof(path));
	f = fopen(path, "w");
	if (!f) {
		fprintf(stderr, "bench: cannot write %s\n", path);
		return -1;
	}
	write_meta(f);
	write_figures(f);
	if (fclose(f) != 0)
		return -1;
	fprintf(stderr, "bench: wrote %zu figures to %s\n", n_figs, path);
	return 0;
}

const char *kvb_si(double v, char *buf, size_t cap)
{
	static const char *unit[] = {"", "k", "M", "G", "T"};
	int u = 0;
	double a = v < 0 ? -v : v;

	while (a >= 1000 && u < 4)
		a /= 1000, v /= 1000, u++;
	snprintf(buf, cap, a >= 100 ? "%.0f%s" : a >= 10 ? "%.1f%s" : "%.2f%s", v, unit[u]);
	return buf;
}

void kvb_heading(const char *title)
{
	printf("\n== %s ==\n", title);
	fflush(stdout);
}

void kvb_row_head(const char *corner, const char *const *cols, int n)
{
	printf("%-34s", corner);
	for (int i = 0; i < n; i++)
		printf(" %11s", cols[i]);
	printf("\n");
}

void kvb_row(const char *name, const double *v, int n, char kind)
{
	char buf[32];

	printf("%-34s", name);
	for (int i = 0; i < n; i++) {
		if (v[i] != v[i])
			snprintf(buf, sizeof(buf), "-");
		else if (kind == 's')
			kvb_si(v[i], buf, sizeof(buf));
		else if (kind == 'x')
			snprintf(buf, sizeof(buf),
			         v[i] >= 100    ? "%.0fx"
			         : v[i] >= 10   ? "%.1fx"
			         : v[i] >= 0.1  ? "%.2fx"
			         : v[i] >= 0.01 ? "%.3fx"
			                        : "%.4fx",
			         v[i]);
		else if (kind == 'p')
			snprintf(buf, sizeof(buf), "%.2f%%", v[i] * 100);
		else
			snprintf(buf, sizeof(buf), "%.4g", v[i]);
		printf(" %11s", buf);
	}
	printf("\n");
	fflush(stdout);
}

const char *kvb_exe_dir(void)
{
	static char dir[PATH_MAX];
	ssize_t n;

	if (dir[0])
		return dir;
	n = readlink("/proc/self/exe", dir, sizeof(dir) - 1);
	if (n <= 0) {
		dir[0] = 0;
		return dir;
	}
	dir[n] = 0;
	char *slash = strrchr(dir, '/');
	if (slash)
		*slash = 0;
	return dir;
}

int kvb_find_sibling(const char *name, char *out, size_t cap)
{
	/* Next to this executable (bazel-bin/bench), then in the runfiles tree. */
	const char *cands[2] = {kvb_exe_dir(), "bench"};
	struct stat st;

	for (int i = 0; i < 2; i++) {
		snprintf(out, cap, "%s/%s", cands[i], name);
		if (stat(out, &st) == 0 && S_ISREG(st.st_mode) && access(out, X_OK) == 0)
			return 0;
	}
	out[0] = 0;
	return -1;
}
