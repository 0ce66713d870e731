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
 *
 * With a thread count T (default 1), T threads run the loop at once on the
 * one pool, each N pairs with its own owner and owner ids, and each prints
 * its own line: the case bench/shared_writes.sh looks at for lines the
 * threads share.
 *
 *   pair_count full|raw|newowner|minted N [T]
 */
#include <kvpool/kvpool.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int full, newowner, minted;
static _Thread_local kvp_owner next_owner, my_owner;

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
			bad |= kvp_allocate(p, KVP_K, 16, my_owner, KVP_FP16, &r, 1, &got);
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

struct worker {
	pthread_t th;
	kvp_pool *p;
	long n;
	int t, bad;
	double ns; /* CPU ns per pair */
};

/* One thread: its owner (7 + 1000 t), its ids (from 1000 + 2^32 t), the
 * warm-up, then the measured pairs. */
static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct timespec t0, t1;
	my_owner = 7 + 1000 * (kvp_owner)w->t;
	next_owner = 1000 + ((kvp_owner)w->t << 32);
	if (kvp_register_owner(w->p, my_owner) != KVP_OK) {
		w->bad = 1;
		return NULL;
	}
	w->bad = loop(w->p, 1000); /* warm-up: thread slot, owner cache, magazine */
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
	w->bad |= pair_loop(w->p, w->n);
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
	w->ns = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) /
	        (double)w->n;
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 3 || argc > 4 ||
	    (strcmp(argv[1], "full") && strcmp(argv[1], "raw") && strcmp(argv[1], "newowner") &&
	     strcmp(argv[1], "minted"))) {
		fprintf(stderr, "usage: pair_count full|raw|newowner|minted N [T]\n");
		return 2;
	}
	full = !strcmp(argv[1], "full");
	minted = !strcmp(argv[1], "minted");
	newowner = minted || !strcmp(argv[1], "newowner");
	long n = atol(argv[2]);
	int n_threads = argc == 4 ? atoi(argv[3]) : 1;
	if (n < 1 || n_threads < 1 || n_threads > 64) {
		fprintf(stderr, "pair_count: N >= 1, 1 <= T <= 64\n");
		return 2;
	}
	kvp_pool_config c;
	kvp_pool *p;
	kvp_pool_config_init(&c);
	c.block_size = 16;
	c.n_blocks = 1u << 17;
	if (kvp_pool_create(&c, &p) != KVP_OK)
		return 1;
	struct worker w[64];
	int bad = 0;
	for (int t = 0; t < n_threads; t++) {
		w[t] = (struct worker){.p = p, .n = n, .t = t};
		if (pthread_create(&w[t].th, NULL, worker_main, &w[t]) != 0)
			return 1;
	}
	for (int t = 0; t < n_threads; t++) {
		pthread_join(w[t].th, NULL);
		bad |= w[t].bad;
		printf("%s pairs %ld status %s, %.1f ns CPU per pair\n", argv[1], n,
		       w[t].bad ? "FAILED" : "ok", w[t].ns);
	}
	kvp_pool_destroy(p);
	return bad;
}
