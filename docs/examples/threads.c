#include <kvpool/kvpool.h>
#include <pthread.h>
#include <stdio.h>

static kvp_pool *pool;

static void *serve(void *arg) /* each thread runs 10,000 requests, an owner each */
{
	kvp_ref refs[8];
	size_t n;
	kvp_owner req;
	(void)arg;
	for (int i = 0; i < 10000; i++)
		if (kvp_owner_new(pool, &req) == KVP_OK && /* an id homed at this thread */
		    kvp_allocate(pool, KVP_K, 100, req, KVP_FP16, refs, 8, &n) == KVP_OK)
			kvp_free_all(pool, req); /* 7 blocks of 16 tokens, back at once */
	return NULL;
}

int main(void)
{
	pthread_t t[8];
	kvp_stats s;
	char line[256];
	if (kvp_pool_create(NULL, &pool) != KVP_OK) /* defaults: 1024 blocks of 16 tokens */
		return 1;
	for (uintptr_t i = 0; i < 8; i++)
		pthread_create(&t[i], NULL, serve, (void *)i);
	for (int i = 0; i < 8; i++)
		pthread_join(t[i], NULL);
	kvp_pool_stats(pool, &s);
	kvp_stats_format(&s, line, sizeof(line));
	puts(line); /* in_use=0/1024, allocations=560000, frees=560000, ... */
	kvp_pool_destroy(pool);
	return s.n_allocations == 560000 && kvp_stats_blocks_in_use(&s) == 0 ? 0 : 1;
}
