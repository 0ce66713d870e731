/*
 * bench/suite/harness.h - the benchmark suite's harness: options, clocks, threaded
 * throughput runs with warm-up and median of repetitions, figures (kept for
 * --json) and table printing.
 *
 * Every measured figure goes through kvb_fig(): it is printed in a table by
 * the benchmark that made it and written to the --json file at exit, so the
 * JSON holds every figure the tables show (ratios included).
 *
 * Synchronization: the harness is driven by the main thread.  Only
 * kvb_run_threads() starts threads; they share the run's stop flag (relaxed
 * atomic: it orders nothing, a worker only needs to see it eventually) and
 * write their op counts to their own slot, read after pthread_join (which
 * orders them).
 */
#ifndef KVPOOL_BENCH_HARNESS_H
#define KVPOOL_BENCH_HARNESS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Built with AddressSanitizer or ThreadSanitizer (clang or gcc spelling). */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define KVB_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define KVB_SANITIZED 1
#endif
#endif
#ifndef KVB_SANITIZED
#define KVB_SANITIZED 0
#endif

#define KVB_MAX_REPS    32
#define KVB_MAX_THREADS 64

typedef struct kvb_opts {
	bool quick;       /* --quick: the whole suite in about a minute and a half */
	bool smoke;       /* --smoke: about a second per benchmark binary (tests) */
	double seconds;   /* measured seconds per repetition */
	double warmup;    /* warm-up seconds before the repetitions of each case */
	int reps;         /* repetitions; the median is reported */
	const char *json; /* --json FILE, or NULL */
	const char *only; /* --only NAME[,NAME...], or NULL for every benchmark */
	int threads[8];   /* thread counts of the throughput sweeps */
	int n_threads;
	int max_pow10; /* scaling: largest pool size as a power of ten */
	/* The lifecycle benchmark's own options. */
	const char *trace; /* --trace FILE (Mooncake JSONL), or NULL: the default path */
	const char *modes; /* --modes plain,prefix, or NULL for both */
	int runs;          /* --runs N: best of N runs per side (0: the mode's default) */
	long limit;        /* --limit N: the trace's first N requests (0: the mode's default) */
	const char *split; /* --split session|rr: how requests go to threads (NULL: session) */
	long thread_cache; /* --thread-cache N: kvpool's thread_cache (-1: its default) */
	bool phases;       /* --phases: time each step of a request too */
} kvb_opts;

extern kvb_opts kvb_opt;

/* Parse argv into kvb_opt; returns 0, or prints usage and returns -1. */
int kvb_parse_args(int argc, char **argv);
/* True when benchmark @name is selected by --only (or no --only was given). */
bool kvb_selected(const char *name);

/* Monotonic wall clock, seconds. */
double kvb_now(void);
/* Median of @n values (n >= 1); does not change @v. */
double kvb_median(const double *v, int n);
/* Percentile @p (0..100) of @n values, nearest rank; sorts @v in place. */
double kvb_percentile(double *v, size_t n, double p);

/* Bytes resident (VmRSS) and bytes held by malloc (mallinfo2 uordblks + hblkhd). */
size_t kvb_rss_bytes(void);
size_t kvb_heap_bytes(void);

/* Tiny deterministic PRNG (splitmix64), for workloads that must repeat. */
static inline uint64_t kvb_rand(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Keep @p alive in the eyes of the compiler (no malloc/free pair elision). */
#define KVB_ESCAPE(p) __asm__ volatile("" : : "r"(p) : "memory")

/*
 * A threaded throughput case.  Each of @n threads calls setup (may be NULL),
 * then, once all are ready, run() until *stop becomes nonzero, then teardown
 * (may be NULL).  run() returns the operations it made; it must poll @stop
 * every few dozen operations (KVB_LOOP does).
 */
typedef struct kvb_case {
	void *(*setup)(void *ctx, int tid);
	uint64_t (*run)(void *ctx, void *tls, int tid, const atomic_int *stop);
	void (*teardown)(void *ctx, void *tls, int tid);
	void *ctx;
} kvb_case;

/* Poll the stop flag every 32 iterations of the body (the rest); count them in @ops. */
#define KVB_LOOP(stop, ops, ...)                                                                   \
	do {                                                                                       \
		while (!atomic_load_explicit((stop), memory_order_relaxed)) {                      \
			for (int kvb_i_ = 0; kvb_i_ < 32; kvb_i_++) {                              \
				__VA_ARGS__;                                                       \
			}                                                                          \
			(ops) += 32;                                                               \
		}                                                                                  \
	} while (0)

/* Free a case's context (every kvb_*_case_* constructor mallocs one). */
void kvb_case_free(kvb_case *c);
/* Allocate a case context of @size bytes, zeroed; exits on out of memory. */
void *kvb_ctx_alloc(size_t size);

/*
 * kvb_run_threads - one timed run: @n threads for @seconds
 * Returns aggregate operations per second (all threads' ops over the time
 * from the start signal to the last thread's stop).  A case reports an
 * unexpected error with kvb_fail(); the caller checks kvb_take_failures().
 */
double kvb_run_threads(const kvb_case *c, int n, double seconds);

/*
 * kvb_measure - warm-up run then kvb_opt.reps runs; fills @reps_out (may be
 * NULL) and returns the median ops/s.
 */
double kvb_measure(const kvb_case *c, int n, double *reps_out);

/* A worker reports a failure (an unexpected error status); the run's figure is void. */
void kvb_fail(const char *what, int code);
/* Failures since the last call (and resets the count). */
int kvb_take_failures(void);

/*
 * kvb_fig - record a figure for the JSON output
 * @bench:  benchmark ("getput", "batch", ...)
 * @series: the peer or variant ("kvpool_full", "dpdk", ...)
 * @x:      the sweep point ("threads=4", "blocks=1000000", ...)
 * @metric: what ("ops_per_s", "ratio_vs_mutex", "bytes_per_block", ...)
 * @value:  the median (or the single value)
 * @reps:   the repetitions (may be NULL), @n_reps of them
 */
void kvb_fig(const char *bench, const char *series, const char *x, const char *metric, double value,
             const double *reps, int n_reps);
/* Record a note (a skipped peer, a target verdict) for the JSON output. */
void kvb_note(const char *bench, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/*
 * kvb_target - print and record a target's verdict
 * @what:  the target, e.g. "8 threads: full API >= 10x mutex pool (full/mutex)"
 * @value: the measured figure (NaN: not measured)
 * @met:   whether it meets the target
 * Smoke and sanitizer runs say "not judged": their figures mean nothing.
 */
void kvb_target(const char *bench, const char *what, double value, bool met);
/* Write every figure and note to kvb_opt.json (no-op when NULL); 0 or -1. */
int kvb_write_json(void);

/* Print "1.23 M" style engineering figures. */
const char *kvb_si(double v, char *buf, size_t cap);
/* Print a benchmark heading. */
void kvb_heading(const char *title);
/*
 * Table printing: kvb_row_head prints the column heads, kvb_row one row of
 * @n values.  @kind: 's' engineering (1.23M), 'x' ratio (2.5x), 'f' plain
 * (%.4g), 'p' percent.  A NaN value prints as "-" (not measured).
 */
void kvb_row_head(const char *corner, const char *const *cols, int n);
void kvb_row(const char *name, const double *v, int n, char kind);
/* NaN, for "not measured". */
#define KVB_NA (__builtin_nan(""))

/* Directory holding this executable (for sibling binaries); "" if unknown. */
const char *kvb_exe_dir(void);
/* Path of sibling binary @name into @out: 0 if it exists and is executable, else -1. */
int kvb_find_sibling(const char *name, char *out, size_t cap);

#endif /* KVPOOL_BENCH_HARNESS_H */
