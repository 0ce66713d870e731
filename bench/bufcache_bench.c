/*
 * bench/bufcache_bench.c - alloc+free pairs on the hit path: kvpool vs ref-scan vs mallocs.
 *
 * Workload, the same for every allocator: 32 request sizes, geometric from
 * 256 B to 64 KiB; 256 buffers (8 of each size) allocated and freed first,
 * so a cache holds 256 mixed-size buffers; then T threads (1, 2, 4, 8) each
 * run alloc(n) + free pairs with n drawn from a fixed random sequence of
 * those sizes.  With 8 buffers of each size cached and each thread holding
 * at most one, every kvpool and ref-scan allocation is a hit (the hit rate is
 * printed to prove it).
 *
 * Allocators: kvpool's cache; "ref-scan", the reference algorithm
 * (bench/ref_bufcache.c, 256-slot linear best-fit scan, one mutex around
 * each call); and
 * aligned_alloc(256, n) + free from glibc, jemalloc, mimalloc and tcmalloc.
 * Those four all replace malloc process-wide, so each allocator runs in its
 * own child process: the bench re-executes itself with LD_PRELOAD set to the
 * allocator's library, and the child checks that the aligned_alloc it calls
 * really is that library's (dlopen RTLD_NOLOAD + dlsym) before measuring.
 *
 * Figures: cpu = the threads' CPU time (CLOCK_THREAD_CPUTIME_ID) summed, per
 * pair: the cost of a pair including contention, independent of how the
 * threads share the cores; wall = elapsed time / pairs done by all threads:
 * throughput.  Ratios are other / kvpool (above 1: kvpool is faster).
 *
 * Under a sanitizer build the malloc peers cannot be preloaded (the
 * sanitizer owns malloc) and are reported as skipped.
 *
 *   bufcache_bench            ~0.25 s per measurement (about 8 s in all)
 *   bufcache_bench --quick    ~1 s in all (also --smoke)
 *   bufcache_bench --secs S   S seconds per measurement
 *   --allow-missing           a peer that cannot be loaded is skipped, not an error
 */
#define _GNU_SOURCE
#include <kvpool/bufcache.h>
#include <kvpool/version.h>

#include "bench/ref_bufcache.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

#define N_SIZES     32
#define COPIES      8
#define SEQ         4096
#define MAX_THREADS 8
#define LIBDIR      "/usr/lib/x86_64-linux-gnu/"

static const int thread_counts[] = {1, 2, 4, 8};
#define N_TC ((int)(sizeof(thread_counts) / sizeof(thread_counts[0])))

struct peer {
	const char *name;
	const char *lib; /* NULL: no preload */
	int kind;        /* 0 kvpool, 1 reference scan, 2 aligned_alloc */
};

static const struct peer peers[] = {
    {"kvpool", NULL, 0},
    {"ref-scan", NULL, 1},
    {"glibc", NULL, 2},
    {"jemalloc", LIBDIR "libjemalloc.so.2", 2},
    {"mimalloc", LIBDIR "libmimalloc.so.2", 2},
    {"tcmalloc", LIBDIR "libtcmalloc_minimal.so.4", 2},
};
#define N_PEERS ((int)(sizeof(peers) / sizeof(peers[0])))

static size_t sizes[N_SIZES];
static unsigned short seq[SEQ];

/* ---- the allocators behind one interface -------------------------------------------- */

static int kind;
static kvp_bufcache *kv;
static ref_bufcache *refc;

static inline void *do_alloc(size_t n, size_t *actual)
{
	switch (kind) {
	case 0:
		return kvp_bufcache_alloc(kv, n, actual);
	case 1:
		return ref_bufcache_alloc(refc, n, actual);
	default:
		*actual = (n + 255) & ~(size_t)255;
		return aligned_alloc(256, *actual);
	}
}

static inline void do_free(void *p, size_t actual)
{
	switch (kind) {
	case 0:
		kvp_bufcache_free(kv, p, actual);
		break;
	case 1:
		ref_bufcache_free(refc, p, actual);
		break;
	default:
		free(p);
	}
}

/* ---- child: measure one allocator -------------------------------------------------- */

struct thr {
	_Alignas(64) void *volatile sink; /* this thread's, so no two threads write it */
	pthread_t th;
	int id;
	uint64_t pairs, cpu_ns;
	int failed;
};

static pthread_barrier_t start_barrier;
static _Atomic int stop;

static uint64_t now_ns(clockid_t clk)
{
	struct timespec ts;
	clock_gettime(clk, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int pair(struct thr *t, unsigned i)
{
	size_t a;
	void *p = do_alloc(sizes[seq[i & (SEQ - 1)]], &a);

	if (!p)
		return -1;
	t->sink = p; /* the pointer escapes: no compiler may elide the pair */
	do_free(p, a);
	return 0;
}

static void *worker(void *arg)
{
	struct thr *t = arg;
	unsigned i = (unsigned)t->id * 977u;
	uint64_t c0;

	for (int k = 0; k < 2000; k++) /* warm up this thread's path */
		t->failed |= pair(t, i++);
	pthread_barrier_wait(&start_barrier);
	c0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
	/* At least one round even if the parent already said stop: on a loaded
	 * machine a thread may first run after the measurement window, and a
	 * run with no pairs would count as a failure. */
	do {
		for (int k = 0; k < 256; k++)
			t->failed |= pair(t, i++);
		t->pairs += 256;
	} while (!atomic_load_explicit(&stop, memory_order_relaxed));
	t->cpu_ns = now_ns(CLOCK_THREAD_CPUTIME_ID) - c0;
	return NULL;
}

static void setup_workload(void)
{
	uint64_t x = 0x9e3779b97f4a7c15ull;

	for (int i = 0; i < N_SIZES; i++) /* 256 * 256^(i/31): 256 B .. 64 KiB */
		sizes[i] = (size_t)(256.0 * __builtin_pow(256.0, i / (double)(N_SIZES - 1)));
	for (int i = 0; i < SEQ; i++) {
		x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
		seq[i] = (unsigned short)((x * 0x2545f4914f6cdd1dull) >> 59);
	}
}

/* Check that aligned_alloc resolves to @lib's; prints why not. */
static int preload_in_effect(const char *lib)
{
	void *h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD);

	if (!h) {
		fprintf(stderr, "%s is not loaded (LD_PRELOAD failed?)\n", lib);
		return 0;
	}
	if (dlsym(h, "aligned_alloc") != dlsym(RTLD_DEFAULT, "aligned_alloc")) {
		fprintf(stderr, "%s is loaded but its aligned_alloc is not the one called\n", lib);
		return 0;
	}
	return 1;
}

/* The cache's hit and miss counts so far (kvpool and the reference cache; else 0). */
static void cache_counts(uint64_t *hits, uint64_t *misses)
{
	kvp_bufcache_stats s;
	struct ref_bufcache_stats ss;

	if (kind == 0 && kvp_bufcache_get_stats(kv, &s) == KVP_OK)
		*hits = s.hits, *misses = s.misses;
	if (kind == 1)
		ref_bufcache_get_stats(refc, &ss), *hits = ss.hits, *misses = ss.misses;
}

/* @nt threads run pairs for @secs; prints the "R" line the parent reads.  0, or 1. */
static int measure_threads(const struct peer *pr, int nt, double secs)
{
	struct timespec d = {(time_t)secs, (long)((secs - (double)(time_t)secs) * 1e9)};
	struct thr t[MAX_THREADS];
	uint64_t pairs = 0, cpu = 0, w0, w1, h0 = 0, m0 = 0, h1 = 0, m1 = 0;
	int failed = 0;

	cache_counts(&h0, &m0);
	atomic_store(&stop, 0);
	pthread_barrier_init(&start_barrier, NULL, (unsigned)nt + 1);
	for (int i = 0; i < nt; i++) {
		t[i] = (struct thr){.id = i};
		if (pthread_create(&t[i].th, NULL, worker, &t[i]))
			return 1;
	}
	pthread_barrier_wait(&start_barrier);
	w0 = now_ns(CLOCK_MONOTONIC);
	while (nanosleep(&d, &d) && errno == EINTR)
		;
	atomic_store(&stop, 1);
	for (int i = 0; i < nt; i++) {
		pthread_join(t[i].th, NULL);
		pairs += t[i].pairs;
		cpu += t[i].cpu_ns;
		failed |= t[i].failed;
	}
	w1 = now_ns(CLOCK_MONOTONIC);
	pthread_barrier_destroy(&start_barrier);
	if (failed || !pairs)
		return 1;
	cache_counts(&h1, &m1);
	printf("R %s %d %llu %.2f %.2f %.2f\n", pr->name, nt, (unsigned long long)pairs,
	       (double)cpu / (double)pairs, (double)(w1 - w0) / (double)pairs,
	       kind < 2 ? 100.0 * (double)(h1 - h0) / (double)(h1 - h0 + m1 - m0) : -1.0);
	return 0;
}

static int child(const struct peer *pr, double secs)
{
	void *keep[N_SIZES * COPIES];
	size_t keep_a[N_SIZES * COPIES];

	kind = pr->kind;
	if (pr->lib && !preload_in_effect(pr->lib))
		return 2;
	if (kind == 0 && kvp_bufcache_create(64u << 20, &kv) != KVP_OK)
		return 1;
	if (kind == 1 && !(refc = ref_bufcache_create(64u << 20, 1)))
		return 1;
	/* 256 mixed-size buffers cached (or, for a malloc, freed once). */
	for (int i = 0; i < N_SIZES * COPIES; i++)
		if (!(keep[i] = do_alloc(sizes[i % N_SIZES], &keep_a[i])))
			return 1;
	for (int i = 0; i < N_SIZES * COPIES; i++)
		do_free(keep[i], keep_a[i]);
	for (int ti = 0; ti < N_TC; ti++)
		if (measure_threads(pr, thread_counts[ti], secs) != 0)
			return 1;
	if (kind == 0)
		kvp_bufcache_destroy(kv);
	if (kind == 1)
		ref_bufcache_destroy(refc);
	return 0;
}

/* ---- parent: run every allocator in its own process, print the table --------------- */

struct result {
	int ok;
	double cpu[N_TC], wall[N_TC], hit[N_TC];
};

static int run_child(const struct peer *pr, double secs, struct result *r)
{
	int fd[2], status;
	char secs_s[32], line[256];
	pid_t pid;
	FILE *f;

	memset(r, 0, sizeof(*r));
	if (pipe(fd))
		return -1;
	snprintf(secs_s, sizeof(secs_s), "%.3f", secs);
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		dup2(fd[1], 1);
		close(fd[0]);
		close(fd[1]);
		if (pr->lib)
			setenv("LD_PRELOAD", pr->lib, 1);
		else
			unsetenv("LD_PRELOAD");
		execl("/proc/self/exe", "bufcache_bench", "--child", pr->name, "--secs", secs_s,
		      (char *)NULL);
		_exit(127);
	}
	close(fd[1]);
	f = fdopen(fd[0], "r");
	while (f && fgets(line, sizeof(line), f)) {
		char name[32];
		int nt;
		unsigned long long pairs;
		double cpu, wall, hit;
		if (sscanf(line, "R %31s %d %llu %lf %lf %lf", name, &nt, &pairs, &cpu, &wall,
		           &hit) != 6)
			continue;
		for (int i = 0; i < N_TC; i++)
			if (thread_counts[i] == nt)
				r->cpu[i] = cpu, r->wall[i] = wall, r->hit[i] = hit;
		r->ok++;
	}
	if (f)
		fclose(f);
	if (waitpid(pid, &status, 0) != pid)
		return -1;
	if (!WIFEXITED(status))
		return -1;
	if (WEXITSTATUS(status) == 0 && r->ok == N_TC)
		return 0;
	return WEXITSTATUS(status) == 2 ? 2 : -1;
}

static const char *verdict(int met)
{
	return met ? "met" : "NOT met";
}

/* One target line: @label, the ratio, the bound and whether it is met. */
static void target(const char *label, double ratio, const char *cmp, double bound, int met)
{
	printf("  %-38s %7.2f  (%s %.2f: %s)\n", label, ratio, cmp, bound, verdict(met));
}

/* The hit-path targets, as ratios of CPU ns per pair from this run. */
static void print_targets(const struct result *res)
{
	const struct result *kv = &res[0], *sd = &res[1], *tc = &res[N_PEERS - 1];
	char label[64];

	if (!kv->ok)
		return;
	printf("\ntargets (cpu ns per pair, this run):\n");
	if (tc->ok)
		target("kvpool 1 thread / tcmalloc 1 thread", kv->cpu[0] / tc->cpu[0], "<=", 2.0,
		       kv->cpu[0] <= 2.0 * tc->cpu[0]);
	else
		printf("  %-38s     n/a  (tcmalloc not measured)\n",
		       "kvpool 1 thread / tcmalloc 1 thread");
	for (int i = 1; i < N_TC; i++) {
		snprintf(label, sizeof(label), "kvpool %d threads / kvpool 1 thread",
		         thread_counts[i]);
		target(label, kv->cpu[i] / kv->cpu[0], "<=", 1.5, kv->cpu[i] <= 1.5 * kv->cpu[0]);
	}
	for (int i = 0; sd->ok && i < N_TC; i++) {
		snprintf(label, sizeof(label), "ref-scan / kvpool at %d thread%s", thread_counts[i],
		         thread_counts[i] > 1 ? "s" : "");
		target(label, sd->cpu[i] / kv->cpu[i], ">=", 10.0, sd->cpu[i] >= 10.0 * kv->cpu[i]);
	}
}

/* The command line. */
typedef struct opts {
	double secs;
	int allow_missing;
	const char *child_name;
} opts;

static void usage(const char *argv0)
{
	printf("usage: %s [options]\n"
	       "  --quick, --smoke   0.025 s per measurement (default 0.25 s)\n"
	       "  --secs S           seconds per measurement\n"
	       "  --allow-missing    a peer allocator that is not installed is "
	       "skipped,\n"
	       "                     not an error (default: error)\n"
	       "  --child NAME       internal: run one peer in this process\n"
	       "  -h, --help         this text\n"
	       "  -V, --version      the kvpool version\n"
	       "Options take their value as --opt VALUE or --opt=VALUE.\n",
	       argv0);
}

/* -1 to go on, or the exit status (0 after --help and --version, 2 on bad usage). */
static int parse_args(int argc, char **argv, opts *o)
{
	static const struct option longopts[] = {
	    {"help", no_argument, NULL, 'h'},          {"version", no_argument, NULL, 'V'},
	    {"quick", no_argument, NULL, 'q'},         {"smoke", no_argument, NULL, 'q'},
	    {"secs", required_argument, NULL, 's'},    {"child", required_argument, NULL, 'c'},
	    {"allow-missing", no_argument, NULL, 'a'}, {NULL, 0, NULL, 0},
	};
	int c;
	opterr = 0; /* one line of our own below */
	while ((c = getopt_long(argc, argv, ":hV", longopts, NULL)) != -1) {
		switch (c) {
		case 'h':
			usage(argv[0]);
			return 0;
		case 'V':
			printf("bufcache_bench (kvpool) %s\n", kvp_version());
			return 0;
		case 'q':
			o->secs = 0.025;
			break;
		case 's':
			o->secs = atof(optarg);
			break;
		case 'c':
			o->child_name = optarg;
			break;
		case 'a':
			o->allow_missing = 1;
			break;
		case ':':
			fprintf(stderr, "%s: option %s needs a value (see --help)\n", argv[0],
			        argv[optind - 1]);
			return 2;
		default:
			fprintf(stderr, "%s: unknown option '%s' (see --help)\n", argv[0],
			        argv[optind - 1]);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "%s: unexpected argument '%s' (see --help)\n", argv[0],
		        argv[optind]);
		return 2;
	}
	return -1;
}

/* Peer @p in its own process and its rows; 0, or 1 when that is a failure. */
static int run_peer(int p, const opts *o, struct result *res)
{
	int rc;
	if (SANITIZED && peers[p].lib) {
		printf("%-10s skipped: a sanitizer build owns malloc, no preload\n", peers[p].name);
		return 0;
	}
	rc = run_child(&peers[p], o->secs, &res[p]);
	if (rc) {
		printf("%-10s %s\n", peers[p].name,
		       rc == 2 ? "not loadable (LD_PRELOAD had no effect)" : "FAILED");
		res[p].ok = 0;
		return !(rc == 2 && o->allow_missing);
	}
	for (int i = 0; i < N_TC; i++) {
		char hit[16] = "-";
		if (res[p].hit[i] >= 0)
			snprintf(hit, sizeof(hit), "%.1f", res[p].hit[i]);
		printf("%-10s %7d %9.1f %9.1f %9.2f %9.2f %6s\n", peers[p].name, thread_counts[i],
		       res[p].cpu[i], res[p].wall[i],
		       res[0].ok ? res[p].cpu[i] / res[0].cpu[i] : 0.0,
		       res[0].ok ? res[p].wall[i] / res[0].wall[i] : 0.0, hit);
	}
	return 0;
}

int main(int argc, char **argv)
{
	opts o = {.secs = 0.25};
	int bad = 0, rc;
	struct result res[N_PEERS];

	if ((rc = parse_args(argc, argv, &o)) >= 0)
		return rc;
	setup_workload();
	if (o.child_name) {
		for (int i = 0; i < N_PEERS; i++)
			if (!strcmp(peers[i].name, o.child_name))
				return child(&peers[i], o.secs);
		return 2;
	}
	printf("bufcache_bench: ns per alloc+free pair on the hit path, 256 buffers of %d sizes "
	       "(%zu B .. %zu KiB) cached; %.3f s per measurement; %ld cores online\n",
	       N_SIZES, sizes[0], sizes[N_SIZES - 1] >> 10, o.secs, sysconf(_SC_NPROCESSORS_ONLN));
	printf("cpu = summed thread CPU time / pairs; wall = elapsed / pairs (all threads); "
	       "ratio = allocator / kvpool\n\n");
	printf("%-10s %7s %9s %9s %9s %9s %6s\n", "allocator", "threads", "cpu_ns", "wall_ns",
	       "x_cpu", "x_wall", "hit%");
	for (int p = 0; p < N_PEERS; p++)
		bad |= run_peer(p, &o, res);
	print_targets(res);
	return bad;
}
