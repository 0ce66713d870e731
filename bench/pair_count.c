/*
 * bench/pair_count.c - a fixed number of one-block pairs, for instruction
 * counting under callgrind (perf cannot count instructions in this VM):
 *
 *   valgrind --tool=callgrind --toggle-collect=pair_loop \
 *       bazel-bin/bench/pair_count full 100000
 *
 * "full" = kvp_allocate(stream K, 16 tokens, a registered owner) + kvp_free
 * of its ref; "raw" = kvp_alloc_block + kvp_free_block; "newowner" =
 * kvp_allocate(16 tokens) for a new owner id each pair + kvp_free_all (the
 * serving loop's owner churn: the owner is made and dropped every pair);
 * "minted" = "newowner" with each id from kvp_owner_new.  Instructions per
 * pair = the Ir callgrind reports inside pair_loop / the count.  Same pool
 * as benchmark 1 (131072 blocks, block 16, default thread_cache); a warm-up
 * of 1000 pairs runs outside pair_loop.  It also prints the thread CPU time
 * per pair (CLOCK_THREAD_CPUTIME_ID: time the thread was descheduled does
 * not count, so a loaded machine distorts it less than wall time; still a
 * rough figure - the ratios in benchmark 1 are the measurement).
 */
#include <kvpool/kvpool.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int full, newowner, minted;
static kvp_owner next_owner = 1000;

static inline __attribute__((always_inline)) int loop(kvp_pool *p, long n)
{
	int bad = 0;
	for (long i = 0; i < n; i++) {
		kvp_ref r;
		size_t got;
		if (newowner) {
			kvp_owner o = next_owner++;
			if (minted)
				bad |= kvp_owner_new(p, &o);
			bad |= kvp_allocate(p, KVP_K, 16, o, KVP_FP16, &r, 1, &got);
			bad |= kvp_free_all(p, o);
		} else if (full) {
			bad |= kvp_allocate(p, KVP_K, 16, 7, KVP_FP16, &r, 1, &got);
			bad |= kvp_free(p, &r, 1);
		} else {
			bad |= kvp_alloc_block(p, KVP_K, KVP_FP16, &r);
			bad |= kvp_free_block(p, r);
		}
	}
	return bad;
}

/* The measured loop (callgrind --toggle-collect=pair_loop). */
__attribute__((noinline)) int pair_loop(kvp_pool *p, long n)
{
	return loop(p, n);
}

int main(int argc, char **argv)
{
	if (argc != 3 || (strcmp(argv[1], "full") && strcmp(argv[1], "raw") &&
	                  strcmp(argv[1], "newowner") && strcmp(argv[1], "minted"))) {
		fprintf(stderr, "usage: pair_count full|raw|newowner|minted N\n");
		return 2;
	}
	full = !strcmp(argv[1], "full");
	minted = !strcmp(argv[1], "minted");
	newowner = minted || !strcmp(argv[1], "newowner");
	long n = atol(argv[2]);
	kvp_pool_config c;
	kvp_pool *p;
	kvp_pool_config_init(&c);
	c.block_size = 16;
	c.n_blocks = 1u << 17;
	if (kvp_pool_create(&c, &p) != KVP_OK || kvp_register_owner(p, 7) != KVP_OK)
		return 1;
	int bad = loop(p, 1000); /* warm-up: thread slot, owner cache, magazine */
	struct timespec t0, t1;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
	bad |= pair_loop(p, n);
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
	double ns = (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
	printf("%s pairs %ld status %s, %.1f ns CPU per pair\n", argv[1], n, bad ? "FAILED" : "ok",
	       ns / (double)n);
	kvp_pool_destroy(p);
	return bad;
}
