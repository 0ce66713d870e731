/*
 * bench/prefix_alloc.c - plain allocate/free pairs, for bench/prefix_offcost.sh.
 *
 * T threads each allocate one block (kvp_allocate, 16 tokens) and free it
 * (kvp_free) in a loop for S seconds, each with its own owner, on a pool of
 * 65536 blocks.  Prints one number: pairs per CPU-second of the threads
 * (thread CPU time, so other load on a shared machine does not count),
 * i.e. the inverse of the CPU cost of a pair.  Compiled by the script
 * against the current tree and against the tree before the prefix cache
 * existed (no -DHAVE_PREFIX), so it uses only calls both have.
 *
 *   prefix_alloc THREADS SECONDS [on]    (on: prefix_cache = true)
 */
#include <kvpool/kvpool.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/clock.h"

static kvp_pool *pool;
static double seconds;
static int failed;

struct job {
	kvp_owner owner;
	double ops, cpu;
};

static void *loop(void *arg)
{
	struct job *j = arg;
	double stop = kvb_wall_seconds() + seconds, c0 = kvb_cpu_seconds();
	kvp_ref ref;
	size_t n;
	unsigned long ops = 0;

	while (kvb_wall_seconds() < stop) {
		for (int k = 0; k < 256; k++, ops++) {
			if (kvp_allocate(pool, KVP_KV, 16, j->owner, KVP_FP16, &ref, 1, &n) !=
			        KVP_OK ||
			    kvp_free(pool, &ref, 1) != KVP_OK)
				failed = 1;
		}
	}
	j->cpu = kvb_cpu_seconds() - c0;
	j->ops = (double)ops;
	return NULL;
}

int main(int argc, char **argv)
{
	kvp_pool_config c;
	pthread_t tid[64];
	struct job jobs[64];
	double ops = 0, cpu = 0;
	int threads;

	if (argc < 3 || (threads = atoi(argv[1])) < 1 || threads > 64 ||
	    (seconds = atof(argv[2])) <= 0) {
		fprintf(stderr, "usage: prefix_alloc THREADS SECONDS [on]\n");
		return 2;
	}
	kvp_pool_config_init(&c);
	c.block_size = 16;
	c.n_blocks = 65536;
	c.separate_kv = false;
#ifdef HAVE_PREFIX
	c.prefix_cache = argc > 3 && strcmp(argv[3], "on") == 0;
#endif
	if (kvp_pool_create(&c, &pool) != KVP_OK)
		return 1;
	for (int i = 0; i < threads; i++) {
		jobs[i] = (struct job){.owner = 100 + (kvp_owner)i};
		if (pthread_create(&tid[i], NULL, loop, &jobs[i]) != 0)
			return 1;
	}
	for (int i = 0; i < threads; i++) {
		pthread_join(tid[i], NULL);
		ops += jobs[i].ops;
		cpu += jobs[i].cpu;
	}
	kvp_pool_destroy(pool);
	printf("%.0f\n", cpu > 0 ? ops / cpu : 0.0);
	return failed;
}
