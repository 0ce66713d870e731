/*
 * bench/prefix_bench.c - prefix-cache match and publish throughput, kvpool
 * vs one mutex, at 1..16 threads.
 *
 * Both sides run the same operations on the same number of blocks:
 *   match    a thread picks one of S published sequences of L keys at
 *            random, matches all L (holds them) and releases them again
 *            (kvp_prefix_match + kvp_free_owned; mx_match + mx_release).
 *            Every block stays published, so every match is a full hit.
 *   publish  a thread allocates one full block (no uncached block is free:
 *            each allocation evicts the least recently cached one),
 *            publishes it under a key never used before and releases it,
 *            so it is cached (kvp_allocate + kvp_prefix_publish + kvp_free;
 *            mx_allocate + mx_publish + mx_release).
 * The baseline (bench/prefix_mutex.c) is a hash map, hold counts, a free
 * list and an LRU list behind one pthread mutex: the least a prefix cache
 * does (no owners, generations, streams, formats or statistics).  A third
 * side, "serial", runs kvpool's own calls with every call behind one
 * global pthread mutex: the same semantics, serialized, which is what
 * putting kvpool behind one lock would give; kvpool / serial is what its
 * lock-free paths buy, and "scaling" is kvpool's throughput at N threads
 * over its throughput at 1 thread in the same table.
 *
 * Figures: operations per second of wall time over all threads (a match
 * operation counts its L keys), and thread CPU nanoseconds per operation
 * (a match operation: L keys and their release), each the median of R
 * runs, the two sides alternating run by run so that load on a shared
 * machine hits both; ratios = kvpool / mutex for throughput, mutex /
 * kvpool for CPU cost (above 1: kvpool better either way).  Every run checks its results (every
 * match a full hit, every publish accepted, every block back at the end) and the program exits 1 if
 * one does not hold.
 *
 *   prefix_bench [--quick]   (--quick: 1, 2, 4 threads, short runs: the smoke run)
 */
#include <kvpool/kvpool.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/prefix_mutex.h"

#include "bench/clock.h"

enum { SEQS = 1024, L = 8, BS = 16, N_BLOCKS = 2 * SEQS * L, MAX_T = 16, MAX_R = 7 };

static double secs = 0.3;
static int reps = 5;
static kvp_hash seq_keys[SEQS][L];
static _Atomic int failures;
static _Atomic uint64_t run_id; /* in every fresh key: keys never repeat across runs */

static uint64_t xs(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545f4914f6cdd1dull;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static void bad(const char *what)
{
	if (atomic_fetch_add(&failures, 1) == 0)
		fprintf(stderr, "prefix_bench: %s\n", what);
}

/* --- the two sides --------------------------------------------------------------- */

struct side {
	kvp_pool *pool; /* kvpool side (and the serial side: the same pool) */
	mx_cache *mx;   /* mutex side */
};

enum { SIDE_KVPOOL, SIDE_MUTEX, SIDE_SERIAL, N_SIDES };

/* The serial side's one lock around every kvpool call. */
static pthread_mutex_t serial_mu = PTHREAD_MUTEX_INITIALIZER;

struct job {
	struct side *s;
	int op; /* 0 match, 1 publish */
	unsigned tid;
	_Atomic int *go;
	bool serial; /* kvpool's calls behind serial_mu */
	double stop;
	uint64_t ops;
	uint64_t salt; /* hi half of this job's fresh keys */
	double cpu;    /* thread CPU seconds spent in the timed loop */
};

/* One kvpool call, behind the serial side's lock when @serial. */
#define CALL(serial, expr)                                                                         \
	((serial) ? (pthread_mutex_lock(&serial_mu), _call_rc = (expr),                            \
	             pthread_mutex_unlock(&serial_mu), _call_rc)                                   \
	          : (expr))

static void *run_kvpool(void *arg)
{
	int _call_rc;
	struct job *j = arg;
	uint64_t rng = 0x1234567ull + j->tid, uniq = 0;
	kvp_owner owner = 1000 + j->tid;
	kvp_ref refs[L];

	/* registered, as a request's kvcache is: holds come and go, the owner stays */
	if (kvp_register_owner(j->s->pool, owner) != KVP_OK)
		bad("kvpool: kvp_register_owner failed");

	while (!atomic_load(j->go))
		;
	j->cpu = kvb_cpu_seconds();
	while (kvb_wall_seconds() < j->stop) {
		for (int k = 0; k < 64; k++, j->ops++) {
			size_t n = 0;
			if (j->op == 0) {
				const kvp_hash *keys = seq_keys[xs(&rng) % SEQS];
				if (CALL(j->serial,
				         kvp_prefix_match(j->s->pool, KVP_KV, KVP_FP16, keys, L,
				                          owner, refs, L, &n)) != KVP_OK ||
				    n != L)
					bad("kvpool: a match missed");
				if (CALL(j->serial, kvp_free_owned(j->s->pool, owner, refs, n)) !=
				    KVP_OK)
					bad("kvpool: kvp_free_owned failed");
			} else {
				kvp_hash key = {++uniq, j->salt};
				if (CALL(j->serial, kvp_allocate(j->s->pool, KVP_KV, BS, owner,
				                                 KVP_FP16, refs, 1, &n)) !=
				        KVP_OK ||
				    CALL(j->serial, kvp_prefix_publish(j->s->pool, refs[0], key)) !=
				        KVP_OK)
					bad("kvpool: allocate or publish failed");
				if (CALL(j->serial, kvp_free(j->s->pool, refs, 1)) != KVP_OK)
					bad("kvpool: kvp_free failed");
			}
		}
	}
	j->cpu = kvb_cpu_seconds() - j->cpu;
	kvp_release_owner(j->s->pool, owner);
	return NULL;
}

static void *run_mutex(void *arg)
{
	struct job *j = arg;
	uint64_t rng = 0x1234567ull + j->tid, uniq = 0;
	uint32_t blocks[L];

	while (!atomic_load(j->go))
		;
	j->cpu = kvb_cpu_seconds();
	while (kvb_wall_seconds() < j->stop) {
		for (int k = 0; k < 64; k++, j->ops++) {
			if (j->op == 0) {
				size_t n = mx_match(j->s->mx, seq_keys[xs(&rng) % SEQS], L, blocks);
				if (n != L)
					bad("mutex: a match missed");
				mx_release(j->s->mx, blocks, n);
			} else {
				kvp_hash key = {++uniq, j->salt};
				int64_t b = mx_allocate(j->s->mx);
				if (b < 0 || mx_publish(j->s->mx, (uint32_t)b, key) != 0)
					bad("mutex: allocate or publish failed");
				blocks[0] = (uint32_t)b;
				mx_release(j->s->mx, blocks, 1);
			}
		}
	}
	j->cpu = kvb_cpu_seconds() - j->cpu;
	return NULL;
}

/* Both sides start with the SEQS x L sequences published and cached. */
static int setup(struct side *s)
{
	kvp_pool_config c;
	kvp_ref refs[L];
	uint32_t blocks[L];
	size_t n;

	kvp_pool_config_init(&c);
	c.block_size = BS;
	c.n_blocks = N_BLOCKS;
	c.separate_kv = false;
	c.prefix_cache = true;
	if (kvp_pool_create(&c, &s->pool) != KVP_OK || !(s->mx = mx_create(N_BLOCKS)))
		return -1;
	for (int q = 0; q < SEQS; q++) {
		if (kvp_allocate(s->pool, KVP_KV, L * BS, 1, KVP_FP16, refs, L, &n) != KVP_OK)
			return -1;
		for (int k = 0; k < L; k++) {
			int64_t b = mx_allocate(s->mx);
			if (kvp_prefix_publish(s->pool, refs[k], seq_keys[q][k]) != KVP_OK ||
			    b < 0 || mx_publish(s->mx, (uint32_t)b, seq_keys[q][k]) != 0)
				return -1;
			blocks[k] = (uint32_t)b;
		}
		if (kvp_free_all(s->pool, 1) != KVP_OK)
			return -1;
		mx_release(s->mx, blocks, L);
	}
	return 0;
}

/* Operations per second of one run of @threads threads of one side;
 * *@cpu_ns: thread CPU time per operation. */
static double measure(struct side *s, int side, int op, unsigned threads, double *cpu_ns)
{
	pthread_t tid[MAX_T];
	struct job jobs[MAX_T];
	_Atomic int go = 0;
	uint64_t ops = 0;
	double t0, t1, cpu = 0;

	for (unsigned i = 0; i < threads; i++) {
		jobs[i] = (struct job){
		    .s = s, .op = op, .tid = i, .go = &go, .serial = side == SIDE_SERIAL};
		jobs[i].salt = (atomic_fetch_add(&run_id, 1) + 1) << 16 | 0xfeed;
		if (pthread_create(&tid[i], NULL, side == SIDE_MUTEX ? run_mutex : run_kvpool,
		                   &jobs[i]) != 0) {
			bad("pthread_create failed");
			threads = i;
			break;
		}
	}
	t0 = kvb_wall_seconds();
	for (unsigned i = 0; i < threads; i++)
		jobs[i].stop = t0 + secs;
	atomic_store(&go, 1);
	for (unsigned i = 0; i < threads; i++)
		pthread_join(tid[i], NULL);
	t1 = kvb_wall_seconds();
	for (unsigned i = 0; i < threads; i++) {
		ops += jobs[i].ops;
		cpu += jobs[i].cpu;
	}
	*cpu_ns = ops ? cpu * 1e9 / (double)ops : 0;
	return (double)ops / (t1 - t0);
}

/* Median of the @reps figures in @v (sorts it). */
static double median(double *v)
{
	qsort(v, (size_t)reps, sizeof *v, cmp_double);
	return v[reps / 2];
}

static void table(struct side *s, int op, const unsigned *threads, int n_threads)
{
	double base = 0; /* kvpool's throughput at 1 thread (the first row) */

	printf("\n%s: %s per second (median of %d runs of %.2f s), kvpool vs one mutex\n",
	       op ? "publish (allocate with eviction + publish + free)"
	          : "match (8 keys, all hits) + release",
	       op ? "publishes" : "keys matched", reps, secs);
	printf("  and CPU ns per operation (thread CPU time: what load on the machine does not "
	       "inflate);\n  serial: kvpool's calls behind one global mutex; scaling: kvpool/s "
	       "over kvpool/s at %u thread%s\n",
	       threads[0], threads[0] == 1 ? "" : "s");
	printf("  %-8s %14s %14s %8s %12s %12s %8s %14s %8s %8s\n", "threads", "kvpool/s",
	       "mutex/s", "ratio", "kvpool ns", "mutex ns", "ratio", "serial/s", "k/serial",
	       "scaling");
	for (int t = 0; t < n_threads; t++) {
		double v[N_SIDES][MAX_R], c[N_SIDES][MAX_R], med[N_SIDES], cmed[N_SIDES];
		for (int r = 0; r < reps; r++) /* alternate: load hits every side */
			for (int side = 0; side < N_SIDES; side++)
				v[side][r] =
				    measure(s, side, op, threads[t], &c[side][r]) * (op ? 1 : L);
		for (int side = 0; side < N_SIDES; side++) {
			med[side] = median(v[side]);
			cmed[side] = median(c[side]);
		}
		if (t == 0)
			base = med[SIDE_KVPOOL];
		printf("  %-8u %14.0f %14.0f %7.2fx %12.0f %12.0f %7.2fx %14.0f %7.2fx %7.2fx\n",
		       threads[t], med[SIDE_KVPOOL], med[SIDE_MUTEX],
		       med[SIDE_KVPOOL] / med[SIDE_MUTEX], cmed[SIDE_KVPOOL], cmed[SIDE_MUTEX],
		       cmed[SIDE_MUTEX] / cmed[SIDE_KVPOOL], med[SIDE_SERIAL],
		       med[SIDE_KVPOOL] / med[SIDE_SERIAL], med[SIDE_KVPOOL] / base);
		fflush(stdout);
	}
}

int main(int argc, char **argv)
{
	static const unsigned full_t[] = {1, 2, 4, 8, 16}, quick_t[] = {1, 2, 4};
	const unsigned *threads = full_t;
	int n_threads = 5;
	struct side s = {0};
	kvp_stats st;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick") || !strcmp(argv[i], "--smoke")) {
			threads = quick_t;
			n_threads = 3;
			secs = 0.05;
			reps = 3;
		} else {
			fprintf(stderr, "usage: prefix_bench [--quick]\n");
			return 2;
		}
	}
	for (int q = 0; q < SEQS; q++)
		for (int k = 0; k < L; k++) {
			uint32_t tok[BS];
			for (int x = 0; x < BS; x++)
				tok[x] = (uint32_t)(q * 7919 + k * BS + x);
			if (kvp_prefix_hash(k ? &seq_keys[q][k - 1] : NULL, 0, tok, sizeof tok,
			                    &seq_keys[q][k]) != KVP_OK)
				return 1;
		}
	if (setup(&s) != 0) {
		fprintf(stderr, "prefix_bench: setup failed\n");
		return 1;
	}
	printf("prefix_bench: %d blocks of %d tokens, %d published sequences of %d blocks\n",
	       N_BLOCKS, BS, SEQS, L);
	table(&s, 0, threads, n_threads);
	table(&s, 1, threads, n_threads);
	if (kvp_pool_stats(s.pool, &st) != KVP_OK || kvp_stats_blocks_in_use(&st) != 0)
		bad("kvpool: blocks left in use");
	printf("\nkvpool: %llu cached, %llu evictions, %llu prefix hits\n",
	       (unsigned long long)st.n_cached, (unsigned long long)st.n_evictions,
	       (unsigned long long)st.n_prefix_hits);
	kvp_pool_destroy(s.pool);
	mx_destroy(s.mx);
	return atomic_load(&failures) ? 1 : 0;
}
