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
 * -gdwarf-4 for valgrind), after a warm-up of 1000 operations:
 *
 *   prefix_loop match|publish N
 *   perf record -e cpu-clock bazel-bin/bench/prefix_loop match 2000000
 */
#include <kvpool/kvpool.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { SEQS = 1024, L = 8, BS = 16, N_BLOCKS = 2 * SEQS * L };

static kvp_hash keys[SEQS][L];
static int publish;

static double cpu_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The measured loop; returns nonzero if any call failed or missed. */
__attribute__((noinline)) int op_loop(kvp_pool *p, long n)
{
	static uint64_t rng = 88172645463325252ull, fresh;
	kvp_ref refs[L];
	int bad = 0;

	for (long i = 0; i < n; i++) {
		size_t m;
		if (!publish) {
			rng ^= rng << 13;
			rng ^= rng >> 7;
			rng ^= rng << 17;
			bad |= kvp_prefix_match(p, KVP_KV, KVP_FP16, keys[rng % SEQS], L, 1000,
			                        refs, L, &m);
			bad |= m != L;
			bad |= kvp_free_owned(p, 1000, refs, m);
		} else {
			kvp_hash k = {++fresh, 0xfeedull};
			bad |= kvp_allocate(p, KVP_KV, BS, 1000, KVP_FP16, refs, 1, &m);
			bad |= kvp_prefix_publish(p, refs[0], k);
			bad |= kvp_free(p, refs, 1);
		}
	}
	return bad;
}

int main(int argc, char **argv)
{
	kvp_pool_config c;
	kvp_pool *p;
	kvp_ref refs[L];
	size_t m;

	if (argc != 3 || (strcmp(argv[1], "match") && strcmp(argv[1], "publish"))) {
		fprintf(stderr, "usage: prefix_loop match|publish N\n");
		return 2;
	}
	publish = !strcmp(argv[1], "publish");
	long n = atol(argv[2]);
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
	if (kvp_register_owner(p, 1000) != KVP_OK)
		return 1;
	int bad = op_loop(p, 1000);
	double t = cpu_now();
	bad |= op_loop(p, n);
	t = cpu_now() - t;
	printf("%s: %.1f ns of CPU per operation%s\n", argv[1], t * 1e9 / (double)n,
	       bad ? " (A CALL FAILED)" : "");
	kvp_pool_destroy(p);
	return bad ? 1 : 0;
}
