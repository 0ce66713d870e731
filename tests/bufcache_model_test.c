/*
 * tests/bufcache_model_test.c - kvpool's cache against the reference algorithm, op by op.
 *
 * One thread drives kvpool's cache and the reference algorithm
 * (bench/ref_bufcache.c: 256 slots, linear best-fit scan) with the same
 * random sequence of allocs and frees, and now and then makes the system
 * allocator fail the same number of times for both.  Buffers get an id
 * when a miss creates them; after every call both sides must agree on hit
 * or miss, on WHICH buffer (by id) a hit returned, on its capacity, and on
 * every counter: hits, misses, evictions, OOM retries, system allocations
 * and frees, cached bytes.  That is "the same single-thread semantics as
 * the reference algorithm in every observable way", checked on 10000
 * operations.  The lockstep and its checks are tests/bufcache_twin.c,
 * shared with the fuzz target tests/fuzz/bufcache_fuzz.c.
 */
#include <kvpool/bufcache.h>

#include "tests/bufcache_twin.h"
#include "tests/testutil.h"

#include <stdlib.h>

#define MAX_BUFS 12000

static struct twin_buf bufs[MAX_BUFS];

static void die(void)
{
	exit(1);
}

static size_t pick(uint64_t *rng)
{
	uint64_t r = tu_rand(rng);

	switch (r & 3) {
	case 0:
		return (size_t)(r >> 8) % 600; /* the 256/512 boundary */
	case 1:
		return (size_t)(r >> 8) % 8192;
	case 2:
		return 1024 * (1 + (size_t)(r >> 8) % 8); /* repeated sizes: ties */
	default:
		return (size_t)(r >> 8) % 20000; /* some above the budget */
	}
}

static void do_alloc(struct bufcache_twin *t, uint64_t *rng)
{
	size_t req = pick(rng);
	long fail = (tu_rand(rng) % 16 == 0) ? (long)(1 + tu_rand(rng) % 4) : 0;

	twin_alloc(t, req, fail);
}

static void do_free(struct bufcache_twin *t, uint64_t *rng)
{
	twin_free(t, (int)(tu_rand(rng) % (uint64_t)t->n_out));
}

static void same_as_reference(void)
{
	/* 48 KiB: fewer than the reference algorithm's 256 slots can ever be cached. */
	const size_t budget = 48 * 1024;
	struct bufcache_twin t;
	uint64_t rng = 7;

	CHECK_EQ(twin_create(&t, budget, bufs, MAX_BUFS, die), 0);
	for (int op = 0; op < 10000; op++) {
		int alloc = t.n_out == 0 || (t.n_out < TWIN_MAX_OUT && (tu_rand(&rng) % 100) < 52);
		if (twin_full(&t))
			break;
		if (alloc)
			do_alloc(&t, &rng);
		else
			do_free(&t, &rng);
	}
	while (t.n_out)
		do_free(&t, &rng);
	{
		kvp_bufcache_stats st;
		CHECK_EQ(kvp_bufcache_get_stats(t.kv, &st), KVP_OK);
		printf("hits %llu misses %llu evictions %llu oom_retries %llu buffers %d\n",
		       (unsigned long long)st.hits, (unsigned long long)st.misses,
		       (unsigned long long)st.evictions, (unsigned long long)st.oom_retries,
		       t.n_bufs);
		/* The sequence exercised every rule, not just one. */
		CHECK(st.hits > 1000 && st.misses > 1000 && st.evictions > 100 &&
		      st.oom_retries > 10);
	}
	twin_destroy(&t);
}

int main(void)
{
	RUN(same_as_reference);
	return 0;
}
