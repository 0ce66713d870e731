/*
 * bench/prefix_loop.c - one thread's match or publish loop, for profilers.
 *
 * The same work as bench/prefix_bench.c's two operations on the same pool
 * (16384 blocks of 16 tokens, 1024 published sequences of 8 keys), in one
 * thread and nothing else, so that a profiler sees only the prefix path:
 *
 *   match    kvp_prefix_match of a random sequence's 8 keys (all hits) and
 *            kvp_free_owned of the 8 refs;
 *   publish  kvp_allocate of one full block (it evicts a cached block),
 *            kvp_prefix_publish under a fresh key, kvp_free (it is cached).
 *
 * Prints the thread CPU time per operation.  The measured loop is the
 * function op_loop (callgrind --toggle-collect=op_loop; build with
 * -gdwarf-4 for valgrind), after a warm-up of 1000 operations.  With a
 * thread count T (default 1), T threads run the loop at once, each N
 * operations under its own owner (and its own fresh keys), and the wall
 * time and operations per second of all of them are printed too: the
 * profile of threads meeting on shared state.
 *
 *   prefix_loop match|publish N [T]
 *   perf record -e cpu-clock bazel-bin/bench/prefix_loop match 2000000
 *   perf record -e cpu-clock bazel-bin/bench/prefix_loop publish 2000000 2
 */
#include <kvpool/kvpool.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/clock.h"

enum { SEQS = 1024, L = 8, BS = 16, N_BLOCKS = 2 * SEQS * L };

static kvp_hash keys[SEQS][L];
static int publish;
static kvp_pool *pool;
static long n_ops;

/* The measured loop of thread @t; returns nonzero if any call failed or
 * missed. */
__attribute__((noinline)) int op_loop(kvp_pool *p, long n, unsigned t)
{
	static _Thread_local uint64_t rng = 88172645463325252ull, fresh;
	kvp_owner owner = 1000 + t;
	kvp_ref refs[L];
	int bad = 0;

	for (long i = 0; i < n; i++) {
		size_t m;
		if (!publish) {
			rng ^= rng << 13;
			rng ^= rng >> 7;
			rng ^= rng << 17;
			bad |= kvp_prefix_match(p, KVP_KV, KVP_FP16, keys[rng % SEQS], L, owner,
			                        refs, L, &m);
			bad |= m != L;
			bad |= kvp_free_owned(p, owner, refs, m);
		} else {
			kvp_hash k = {++fresh, 0xfeedull + t};
			bad |= kvp_allocate(p, KVP_KV, BS, owner, KVP_FP16, refs, 1, &m);
			bad |= kvp_prefix_publish(p, refs[0], k);
			bad |= kvp_free(p, refs, 1);
		}
	}
	return bad;
}

struct worker {
	pthread_t th;
	unsigned t;
	pthread_barrier_t *start;
	double cpu; /* thread CPU seconds of the measured loop */
	int bad;
};

/* One thread: its owner, a warm-up, then (after every thread is ready) the
 * measured loop. */
static void *worker_main(void *arg)
{
	struct worker *w = arg;

	w->bad = kvp_register_owner(pool, 1000 + w->t) != KVP_OK;
	w->bad |= op_loop(pool, 1000, w->t);
	pthread_barrier_wait(w->start);
	w->cpu = kvb_cpu_seconds();
	w->bad |= op_loop(pool, n_ops, w->t);
	w->cpu = kvb_cpu_seconds() - w->cpu;
	return NULL;
}

int main(int argc, char **argv)
{
	kvp_pool_config c;
	kvp_pool *p;
	kvp_ref refs[L];
	size_t m;

	if (argc < 3 || argc > 4 || (strcmp(argv[1], "match") && strcmp(argv[1], "publish"))) {
		fprintf(stderr, "usage: prefix_loop match|publish N [threads]\n");
		return 2;
	}
	publish = !strcmp(argv[1], "publish");
	long n = atol(argv[2]);
	int n_threads = argc == 4 ? atoi(argv[3]) : 1;
	if (n < 1 || n_threads < 1 || n_threads > 64) {
		fprintf(stderr, "prefix_loop: N >= 1, 1 <= threads <= 64\n");
		return 2;
	}
	kvp_pool_config_init(&c);
	c.block_size = BS;
	c.n_blocks = N_BLOCKS;
	c.separate_kv = false;
	c.prefix_cache = true;
	if (kvp_pool_create(&c, &p) != KVP_OK)
		return 1;
	for (int q = 0; q < SEQS; q++)
		for (int k = 0; k < L; k++) {
			uint32_t tok[BS];
			for (int x = 0; x < BS; x++)
				tok[x] = (uint32_t)(q * 7919 + k * BS + x);
			if (kvp_prefix_hash(k ? &keys[q][k - 1] : NULL, 0, tok, sizeof tok,
			                    &keys[q][k]) != KVP_OK)
				return 1;
		}
	for (int q = 0; q < SEQS; q++) {
		if (kvp_allocate(p, KVP_KV, L * BS, 1, KVP_FP16, refs, L, &m) != KVP_OK)
			return 1;
		for (int k = 0; k < L; k++)
			if (kvp_prefix_publish(p, refs[k], keys[q][k]) != KVP_OK)
				return 1;
		if (kvp_free_all(p, 1) != KVP_OK)
			return 1;
	}
	pool = p;
	n_ops = n;
	struct worker w[64];
	pthread_barrier_t start;
	pthread_barrier_init(&start, NULL, (unsigned)n_threads + 1);
	for (int i = 0; i < n_threads; i++) {
		w[i] = (struct worker){.t = (unsigned)i, .start = &start};
		if (pthread_create(&w[i].th, NULL, worker_main, &w[i]) != 0)
			return 1;
	}
	pthread_barrier_wait(&start);
	double wall = kvb_wall_seconds();
	int bad = 0;
	for (int i = 0; i < n_threads; i++) {
		pthread_join(w[i].th, NULL);
		bad |= w[i].bad;
	}
	wall = kvb_wall_seconds() - wall;
	pthread_barrier_destroy(&start);
	for (int i = 0; i < n_threads; i++)
		printf("%s: %.1f ns of CPU per operation%s\n", argv[1], w[i].cpu * 1e9 / (double)n,
		       w[i].bad ? " (A CALL FAILED)" : "");
	if (n_threads > 1)
		printf("%d threads: %.3f s of wall time, %.0f operations per second\n", n_threads,
		       wall, (double)n * n_threads / wall);
	kvp_pool_destroy(p);
	return bad ? 1 : 0;
}
