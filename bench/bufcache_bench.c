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

/* ---- kvpool child: thread history and several caches ------------------------------ */

/*
 * The "history" child measures kvpool's hit pair in the order a server
 * meets it: one thread fresh (the first after the cache was warmed), two
 * threads, then rounds of two threads and one thread again (each thread
 * new, the previous ones exited), the main thread (which made and warmed
 * the cache), and one new thread using one cache and then HIST_CACHES caches
 * in turn (pair i on cache i % HIST_CACHES), each warmed like the first.
 *
 * With --pairs N every segment runs exactly N pairs (after its warm-up)
 * instead of a time, and segment --phase K runs inside measured_pairs(),
 * so that `valgrind --tool=callgrind --toggle-collect=measured_pairs`
 * counts that segment's instructions alone (bench/callgrind_bufcache.sh).
 */
#define HIST_CACHES 4
#define HIST_ROUNDS 4

static kvp_bufcache *hc[HIST_CACHES];
static double hist_secs;
static uint64_t hist_pairs; /* 0: timed segments */
static int hist_phase = -1, hist_seg;

struct hseg {
	_Alignas(64) void *volatile sink;
	pthread_t th;
	unsigned seed;
	int ncaches, failed;
	uint64_t pairs, cpu_ns, hits, misses;
};

/* Hits and misses of every history cache so far. */
static void hist_counts(uint64_t *hits, uint64_t *misses)
{
	kvp_bufcache_stats s;

	*hits = *misses = 0;
	for (int k = 0; k < HIST_CACHES; k++)
		if (kvp_bufcache_get_stats(hc[k], &s) == KVP_OK)
			*hits += s.hits, *misses += s.misses;
}

static void run_pairs(struct hseg *g, unsigned *i, uint64_t n)
{
	for (uint64_t k = 0; k < n; k++, (*i)++) {
		kvp_bufcache *c = hc[*i % (unsigned)g->ncaches];
		size_t a;
		void *p = kvp_bufcache_alloc(c, sizes[seq[*i & (SEQ - 1)]], &a);
		if (!p) {
			g->failed = 1;
			return;
		}
		g->sink = p;
		kvp_bufcache_free(c, p, a);
	}
}

/* The segment callgrind counts (--phase): the same loop, under its own name. */
static __attribute__((noinline)) void measured_pairs(struct hseg *g, unsigned *i, uint64_t n)
{
	run_pairs(g, i, n);
	__asm__ volatile("" ::: "memory");
}

/* One segment on the calling thread: warm up, then pairs for hist_secs (or hist_pairs). */
static void hist_segment(struct hseg *g, int measured)
{
	unsigned i = g->seed;
	uint64_t h0, m0, h1, m1, c0, w_end;

	/* The thread's own working set first: 8 buffers of each size at once, per cache. */
	for (int k = 0; k < g->ncaches; k++) {
		void *keep[N_SIZES * COPIES];
		size_t keep_a[N_SIZES * COPIES];
		for (int j = 0; j < N_SIZES * COPIES; j++)
			if (!(keep[j] = kvp_bufcache_alloc(hc[k], sizes[j % N_SIZES], &keep_a[j])))
				g->failed = 1, keep_a[j] = 0;
		for (int j = 0; j < N_SIZES * COPIES; j++)
			if (keep_a[j])
				kvp_bufcache_free(hc[k], keep[j], keep_a[j]);
	}
	run_pairs(g, &i, 2000);
	hist_counts(&h0, &m0);
	c0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
	if (hist_pairs) {
		if (measured)
			measured_pairs(g, &i, hist_pairs);
		else
			run_pairs(g, &i, hist_pairs);
		g->pairs = hist_pairs;
	} else {
		w_end = now_ns(CLOCK_MONOTONIC) + (uint64_t)(hist_secs * 1e9);
		do {
			run_pairs(g, &i, 256);
			g->pairs += 256;
		} while (now_ns(CLOCK_MONOTONIC) < w_end);
	}
	g->cpu_ns = now_ns(CLOCK_THREAD_CPUTIME_ID) - c0;
	hist_counts(&h1, &m1);
	g->hits = h1 - h0, g->misses = m1 - m0;
}

static void *hist_thread(void *arg)
{
	struct hseg *g = arg;
	hist_segment(g, hist_seg == hist_phase);
	return NULL;
}

/* Print segment @key's line (summed over @nt threads' segments); 0, or 1 on failure. */
static int hist_report(const char *key, int nt, struct hseg *g)
{
	uint64_t pairs = 0, cpu = 0, hits = 0, misses = 0;
	int failed = 0;

	for (int k = 0; k < nt; k++) {
		pairs += g[k].pairs, cpu += g[k].cpu_ns, failed |= g[k].failed;
		hits += g[k].hits, misses += g[k].misses;
	}
	hist_seg++;
	if (failed || !pairs)
		return 1;
	/* Concurrent threads' stats deltas overlap: the hit rate is a lower bound there. */
	printf("H %s %d %llu %.2f %.1f\n", key, nt, (unsigned long long)pairs,
	       (double)cpu / (double)pairs,
	       100.0 * (double)hits / (double)(hits + misses ? hits + misses : 1));
	fflush(stdout);
	return 0;
}

/* @nt new threads each run one segment on @ncaches caches; 0, or 1 on failure. */
static int hist_threads(const char *key, int nt, int ncaches)
{
	struct hseg g[MAX_THREADS];

	for (int k = 0; k < nt; k++) {
		g[k] = (struct hseg){.seed = (unsigned)(hist_seg * 131 + k) * 977u,
		                     .ncaches = ncaches};
		if (pthread_create(&g[k].th, NULL, hist_thread, &g[k]))
			return 1;
	}
	for (int k = 0; k < nt; k++)
		pthread_join(g[k].th, NULL);
	return hist_report(key, nt, g);
}

struct hpair {
	struct hseg one, many;
};

/* One new thread: a segment on one cache, then one on HIST_CACHES caches in turn. */
static void *hist_multi_thread(void *arg)
{
	struct hpair *hp = arg;
	hist_segment(&hp->one, hist_seg == hist_phase);
	hist_segment(&hp->many, hist_seg + 1 == hist_phase);
	return NULL;
}

static int hist_child(void)
{
	char key[32];
	struct hseg mainseg = {.seed = 12345u, .ncaches = 1};
	struct hpair hp = {.one = {.seed = 777u, .ncaches = 1},
	                   .many = {.seed = 777u, .ncaches = HIST_CACHES}};
	pthread_t th;
	int bad = 0;

	/* Warmed last to first: the main thread's last-made front is cache 0's. */
	for (int k = HIST_CACHES - 1; k >= 0; k--) {
		void *keep[N_SIZES * COPIES];
		size_t keep_a[N_SIZES * COPIES];
		if (kvp_bufcache_create(64u << 20, &hc[k]) != KVP_OK)
			return 1;
		for (int i = 0; i < N_SIZES * COPIES; i++)
			if (!(keep[i] = kvp_bufcache_alloc(hc[k], sizes[i % N_SIZES], &keep_a[i])))
				return 1;
		for (int i = 0; i < N_SIZES * COPIES; i++)
			kvp_bufcache_free(hc[k], keep[i], keep_a[i]);
	}
	bad |= hist_threads("fresh", 1, 1);
	for (int r = 1; r <= HIST_ROUNDS && !bad; r++) {
		snprintf(key, sizeof(key), "two/%d", r);
		bad |= hist_threads(key, 2, 1);
		snprintf(key, sizeof(key), "again/%d", r);
		bad |= hist_threads(key, 1, 1);
	}
	hist_segment(&mainseg, hist_seg == hist_phase);
	bad |= hist_report("main", 1, &mainseg);
	if (pthread_create(&th, NULL, hist_multi_thread, &hp))
		return 1;
	pthread_join(th, NULL);
	bad |= hist_report("one-cache", 1, &hp.one);
	bad |= hist_report("four-caches", 1, &hp.many);
	for (int k = 0; k < HIST_CACHES; k++)
		kvp_bufcache_destroy(hc[k]);
	return bad;
}

/* ---- parent: run every allocator in its own process, print the table --------------- */

struct result {
	int ok;
	double cpu[N_TC], wall[N_TC], hit[N_TC];
};

/* Start this binary as a child running @name (LD_PRELOAD @lib, or none); its stdout, or NULL. */
static FILE *spawn_child(const char *name, const char *lib, double secs, const char *extra,
                         pid_t *pid)
{
	int fd[2];
	char secs_s[32];

	if (pipe(fd))
		return NULL;
	snprintf(secs_s, sizeof(secs_s), "%.3f", secs);
	*pid = fork();
	if (*pid < 0) {
		close(fd[0]);
		close(fd[1]);
		return NULL;
	}
	if (*pid == 0) {
		dup2(fd[1], 1);
		close(fd[0]);
		close(fd[1]);
		if (lib)
			setenv("LD_PRELOAD", lib, 1);
		else
			unsetenv("LD_PRELOAD");
		execl("/proc/self/exe", "bufcache_bench", "--child", name, "--secs", secs_s, extra,
		      (char *)NULL);
		_exit(127);
	}
	close(fd[1]);
	return fdopen(fd[0], "r");
}

/* Wait for the child; its exit status, or -1 when it did not exit normally. */
static int reap_child(pid_t pid)
{
	int status;

	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
		return -1;
	return WEXITSTATUS(status);
}

static int run_child(const struct peer *pr, double secs, struct result *r)
{
	char line[256];
	pid_t pid;
	FILE *f;
	int rc;

	memset(r, 0, sizeof(*r));
	f = spawn_child(pr->name, pr->lib, secs, NULL, &pid);
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
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
	fclose(f);
	rc = reap_child(pid);
	if (rc == 0 && r->ok == N_TC)
		return 0;
	return rc == 2 ? 2 : -1;
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

/* The history child's segments, as the parent reads them. */
struct hist_row {
	char key[32];
	int nt;
	double cpu, hit;
};

/* The largest cpu figure among rows whose key starts with @prefix (0: none). */
static double hist_worst(const struct hist_row *h, int n, const char *prefix)
{
	double w = 0;

	for (int i = 0; i < n; i++)
		if (!strncmp(h[i].key, prefix, strlen(prefix)) && h[i].cpu > w)
			w = h[i].cpu;
	return w;
}

/* A row's label in the table. */
static void hist_label(const char *key, char *out, size_t len)
{
	int r;

	if (!strcmp(key, "fresh"))
		snprintf(out, len, "1 thread, fresh");
	else if (sscanf(key, "two/%d", &r) == 1)
		snprintf(out, len, "2 threads, round %d", r);
	else if (sscanf(key, "again/%d", &r) == 1)
		snprintf(out, len, "1 thread again, round %d", r);
	else if (!strcmp(key, "main"))
		snprintf(out, len, "main thread (made the caches)");
	else if (!strcmp(key, "one-cache"))
		snprintf(out, len, "1 thread, 1 cache");
	else if (!strcmp(key, "four-caches"))
		snprintf(out, len, "same thread, %d caches in turn", HIST_CACHES);
	else
		snprintf(out, len, "%s", key);
}

/*
 * kvpool's history segments in their own process, the table and the
 * targets against @tc_cpu (tcmalloc's one-thread pair, this run; 0 when not
 * measured).  0, or 1 when the child failed.
 */
static int run_history(double secs, double tc_cpu)
{
	struct hist_row h[32];
	char line[256], label[64];
	int n = 0;
	pid_t pid;
	FILE *f = spawn_child("kvpool-history", NULL, secs, NULL, &pid);

	if (!f)
		return 1;
	printf("\nthread history (kvpool; each segment's threads are new unless named; "
	       "%d caches warmed alike):\n",
	       HIST_CACHES);
	printf("%-34s %7s %9s %6s\n", "segment", "threads", "cpu_ns", "hit%");
	while (fgets(line, sizeof(line), f) && n < 32) {
		struct hist_row *r = &h[n];
		unsigned long long pairs;
		if (sscanf(line, "H %31s %d %llu %lf %lf", r->key, &r->nt, &pairs, &r->cpu,
		           &r->hit) != 5)
			continue;
		hist_label(r->key, label, sizeof(label));
		printf("%-34s %7d %9.1f %6.1f\n", label, r->nt, r->cpu, r->hit);
		n++;
	}
	fclose(f);
	if (reap_child(pid) != 0) {
		printf("kvpool-history FAILED\n");
		return 1;
	}
	double fresh = hist_worst(h, n, "fresh"), two = hist_worst(h, n, "two/"),
	       again = hist_worst(h, n, "again/"), mainc = hist_worst(h, n, "main"),
	       one = hist_worst(h, n, "one-cache"), four = hist_worst(h, n, "four-caches");
	if (!fresh || !two || !again || !mainc || !one || !four) {
		printf("kvpool-history: segments missing\n");
		return 1;
	}
	printf("\nhistory targets (cpu ns per pair, this run; worst round):\n");
	if (tc_cpu > 0)
		target("1 thread fresh / tcmalloc 1 thread", fresh / tc_cpu, "<=", 2.0,
		       fresh <= 2.0 * tc_cpu);
	else
		printf("  %-38s     n/a  (tcmalloc not measured)\n",
		       "1 thread fresh / tcmalloc 1 thread");
	target("2 threads / 1 thread fresh", two / fresh, "<=", 1.5, two <= 1.5 * fresh);
	target("1 thread again / 1 thread fresh", again / fresh, "<=", 1.5, again <= 1.5 * fresh);
	target("main thread / 1 thread fresh", mainc / fresh, "<=", 1.5, mainc <= 1.5 * fresh);
	snprintf(label, sizeof(label), "%d caches in turn / 1 cache", HIST_CACHES);
	target(label, four / one, "<=", 1.5, four <= 1.5 * one);
	return 0;
}

/* The command line. */
typedef struct opts {
	double secs;
	int allow_missing;
	int history_only;
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
	       "  --history          only the thread-history table (and tcmalloc for its\n"
	       "                     first target)\n"
	       "  --child NAME       internal: run one peer in this process\n"
	       "                     (kvpool-history: the history segments)\n"
	       "  --pairs N          with --child kvpool-history: N pairs a segment, untimed\n"
	       "  --phase K          with --pairs: run segment K (0 = fresh) in\n"
	       "                     measured_pairs() for callgrind's --toggle-collect\n"
	       "  -h, --help         this text\n"
	       "  -V, --version      the kvpool version\n"
	       "Options take their value as --opt VALUE or --opt=VALUE.\n",
	       argv0);
}

/* -1 to go on, or the exit status (0 after --help and --version, 2 on bad usage). */
static int parse_args(int argc, char **argv, opts *o)
{
	static const struct option longopts[] = {
	    {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},
	    {"quick", no_argument, NULL, 'q'},
	    {"smoke", no_argument, NULL, 'q'},
	    {"secs", required_argument, NULL, 's'},
	    {"child", required_argument, NULL, 'c'},
	    {"allow-missing", no_argument, NULL, 'a'},
	    {"history", no_argument, NULL, 'H'},
	    {"pairs", required_argument, NULL, 'p'},
	    {"phase", required_argument, NULL, 'k'},
	    {NULL, 0, NULL, 0},
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
		case 'H':
			o->history_only = 1;
			break;
		case 'p':
			hist_pairs = strtoull(optarg, NULL, 10);
			break;
		case 'k':
			hist_phase = atoi(optarg);
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
		hist_secs = o.secs;
		if (!strcmp(o.child_name, "kvpool-history"))
			return hist_child();
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
	memset(res, 0, sizeof(res));
	for (int p = 0; p < N_PEERS; p++)
		if (!o.history_only || p == N_PEERS - 1)
			bad |= run_peer(p, &o, res);
	if (!o.history_only)
		print_targets(res);
	bad |= run_history(o.secs, res[N_PEERS - 1].ok ? res[N_PEERS - 1].cpu[0] : 0.0);
	return bad;
}
