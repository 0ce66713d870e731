/*
 * tests/bufcache_model_test.c - kvpool's cache against the seed's algorithm, op by op.
 *
 * One thread drives kvpool's cache and the seed baseline (bench/ref_bufcache.c:
 * 256 slots, linear best-fit scan) with the same random sequence of allocs
 * and frees, and now and then makes the system allocator fail the same
 * number of times for both.  Buffers get an id when a miss creates them;
 * after every call both sides must agree on hit or miss, on WHICH buffer
 * (by id) a hit returned, on its capacity, and on every counter: hits,
 * misses, evictions, OOM retries, system allocations and frees, cached
 * bytes.  That is "the same single-thread semantics as the seed in every
 * observable way", checked on 10000 operations.
 */
#include <kvpool/bufcache.h>

#include "bench/ref_bufcache.h"
#include "lib/testing/fault.h"
#include "tests/testutil.h"

#include <string.h>

#define MAX_BUFS 12000
#define MAX_OUT  48

struct buf {
	void *kv, *seed; /* the buffer on each side (NULL once gone) */
	size_t cap;
	int out; /* handed out (else cached, or evicted without our knowing) */
};

static struct buf bufs[MAX_BUFS];
static int nbufs;

/* The live buffer with kvpool pointer @p, or -1 (evicted buffers' pointers may be reused). */
static int find_kv(void *p)
{
	for (int i = nbufs - 1; i >= 0; i--)
		if (bufs[i].kv == p)
			return i;
	return -1;
}

static int find_seed(void *p)
{
	for (int i = nbufs - 1; i >= 0; i--)
		if (bufs[i].seed == p)
			return i;
	return -1;
}

static void same_stats(kvp_bufcache *c, ref_bufcache *s)
{
	kvp_bufcache_stats a;
	struct seed_stats b;

	CHECK_EQ(kvp_bufcache_get_stats(c, &a), KVP_OK);
	seed_get_stats(s, &b);
	CHECK_EQ(a.hits, b.hits);
	CHECK_EQ(a.misses, b.misses);
	CHECK_EQ(a.evictions, b.evictions);
	CHECK_EQ(a.oom_retries, b.oom_retries);
	CHECK_EQ(a.system_allocs, b.system_allocs);
	CHECK_EQ(a.system_frees, b.system_frees);
	CHECK_EQ(a.cached_bytes, b.cached_bytes);
	CHECK_EQ(kvp_bufcache_cached_bytes(c), b.cached_bytes);
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

static void do_alloc(kvp_bufcache *c, ref_bufcache *s, uint64_t *rng, int *outs, int *nout)
{
	size_t req = pick(rng), ak = 1, as = 1;
	long fail = (tu_rand(rng) % 16 == 0) ? (long)(1 + tu_rand(rng) % 4) : 0;
	kvp_bufcache_stats before;
	void *pk, *ps;

	CHECK_EQ(kvp_bufcache_get_stats(c, &before), KVP_OK);
	kvpi_fault_inject(0, fail);
	pk = kvp_bufcache_alloc(c, req, &ak);
	kvpi_fault_inject(0, fail);
	ps = seed_alloc(s, req, &as);
	kvpi_fault_inject(0, 0);
	CHECK_EQ(ak, as);
	CHECK_EQ(pk == NULL, ps == NULL);
	same_stats(c, s);
	if (!pk)
		return;
	{
		kvp_bufcache_stats after;
		int i;
		CHECK_EQ(kvp_bufcache_get_stats(c, &after), KVP_OK);
		if (after.hits > before.hits) {
			i = find_kv(pk);
			CHECK(i >= 0);
			CHECK_EQ(find_seed(ps), i); /* the same buffer on both sides */
			CHECK(!bufs[i].out);
			CHECK_EQ(bufs[i].cap, ak);
		} else {
			int old;
			CHECK(nbufs < MAX_BUFS);
			/* A reused address belongs to a buffer evicted earlier: forget it. */
			if ((old = find_kv(pk)) >= 0)
				bufs[old].kv = NULL;
			if ((old = find_seed(ps)) >= 0)
				bufs[old].seed = NULL;
			i = nbufs++;
			bufs[i] = (struct buf){pk, ps, ak, 0};
		}
		bufs[i].out = 1;
		outs[(*nout)++] = i;
	}
}

static void do_free(kvp_bufcache *c, ref_bufcache *s, uint64_t *rng, int *outs, int *nout)
{
	int k = (int)(tu_rand(rng) % (uint64_t)*nout), i = outs[k];

	outs[k] = outs[--*nout];
	bufs[i].out = 0;
	kvp_bufcache_free(c, bufs[i].kv, bufs[i].cap);
	seed_free(s, bufs[i].seed, bufs[i].cap);
	same_stats(c, s);
}

static void same_as_seed(void)
{
	/* 48 KiB: fewer than the seed's 256 slots can ever be cached. */
	const size_t budget = 48 * 1024;
	kvp_bufcache *c;
	ref_bufcache *s;
	uint64_t rng = 7;
	int outs[MAX_OUT], nout = 0;

	CHECK_EQ(kvp_bufcache_create(budget, &c), KVP_OK);
	s = seed_create(budget, 0);
	CHECK(s != NULL);
	for (int op = 0; op < 10000; op++) {
		int alloc = nout == 0 || (nout < MAX_OUT && (tu_rand(&rng) % 100) < 52);
		if (nbufs >= MAX_BUFS - 1)
			break;
		if (alloc)
			do_alloc(c, s, &rng, outs, &nout);
		else
			do_free(c, s, &rng, outs, &nout);
	}
	while (nout)
		do_free(c, s, &rng, outs, &nout);
	{
		kvp_bufcache_stats st;
		CHECK_EQ(kvp_bufcache_get_stats(c, &st), KVP_OK);
		printf("hits %llu misses %llu evictions %llu oom_retries %llu buffers %d\n",
		       (unsigned long long)st.hits, (unsigned long long)st.misses,
		       (unsigned long long)st.evictions, (unsigned long long)st.oom_retries, nbufs);
		/* The sequence exercised every rule, not just one. */
		CHECK(st.hits > 1000 && st.misses > 1000 && st.evictions > 100 &&
		      st.oom_retries > 10);
	}
	kvp_bufcache_destroy(c);
	seed_destroy(s);
}

int main(void)
{
	RUN(same_as_seed);
	return 0;
}
