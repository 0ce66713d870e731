/*
 * tests/fuzz/bufcache_fuzz.c - libFuzzer: the buffer cache against its
 * single-thread model, op by op.
 *
 * The model is bench/ref_bufcache.c: 256 slots; a hit is the cached
 * buffer with the smallest capacity that fits (least recently cached among
 * equals); a free caches the buffer after evicting the smallest buffers
 * (least recently cached first) until it fits the byte budget.  The input
 * picks the budget, then a sequence of allocs (sizes around the class
 * boundaries, repeated sizes for ties, sizes over the budget), frees of
 * buffers handed out, and injected system-allocation failures (the same
 * count on both sides).  After every call both must
 * agree on hit or miss, on WHICH buffer a hit returned, on its capacity and
 * on every counter (hits, misses, evictions, OOM retries, system
 * allocations and frees, cached bytes).
 */
#include <kvpool/bufcache.h>

#include <string.h>

#include "bench/ref_bufcache.h"
#include "lib/testing/fault.h"
#include "tests/fuzz/fuzz_util.h"

#define MAX_BUFS 2048
#define MAX_OUT  48

struct buf {
	void *kv, *seed;
	size_t cap;
	int out;
};

static struct buf bufs[MAX_BUFS];
static int nbufs;

static int find(void *p, int seed)
{
	for (int i = nbufs - 1; i >= 0; i--)
		if ((seed ? bufs[i].seed : bufs[i].kv) == p)
			return i;
	return -1;
}

static void same_stats(kvp_bufcache *c, ref_bufcache *s)
{
	kvp_bufcache_stats a;
	struct seed_stats b;

	FZ_EQ(kvp_bufcache_get_stats(c, &a), KVP_OK);
	seed_get_stats(s, &b);
	FZ_EQ(a.hits, b.hits);
	FZ_EQ(a.misses, b.misses);
	FZ_EQ(a.evictions, b.evictions);
	FZ_EQ(a.oom_retries, b.oom_retries);
	FZ_EQ(a.system_allocs, b.system_allocs);
	FZ_EQ(a.system_frees, b.system_frees);
	FZ_EQ(a.cached_bytes, b.cached_bytes);
	FZ_EQ(kvp_bufcache_cached_bytes(c), b.cached_bytes);
}

static size_t pick(struct fz *f)
{
	uint8_t k = fz_byte(f);
	uint32_t r = fz_u32(f, 0);

	switch (k & 3) {
	case 0:
		return r % 600;
	case 1:
		return r % 8192;
	case 2:
		return 1024 * (1 + r % 8);
	default:
		return r % 20000;
	}
}

static void do_alloc(kvp_bufcache *c, ref_bufcache *s, struct fz *f, int *outs, int *nout)
{
	size_t req = pick(f), ak = 1, as = 1;
	uint8_t fb = fz_byte(f);
	long fail = fb % 8 == 0 ? 1 + fb / 64 : 0;
	kvp_bufcache_stats before, after;
	void *pk, *ps;
	int i;

	FZ_EQ(kvp_bufcache_get_stats(c, &before), KVP_OK);
	kvpi_fault_inject(0, fail);
	pk = kvp_bufcache_alloc(c, req, &ak);
	kvpi_fault_inject(0, fail);
	ps = seed_alloc(s, req, &as);
	kvpi_fault_inject(0, 0);
	FZ_EQ(ak, as);
	FZ_EQ(pk == NULL, ps == NULL);
	same_stats(c, s);
	if (!pk)
		return;
	FZ_CHECK(ak >= req);
	FZ_EQ((uintptr_t)pk % 256, 0);
	FZ_EQ(kvp_bufcache_get_stats(c, &after), KVP_OK);
	if (after.hits > before.hits) {
		i = find(pk, 0);
		FZ_CHECK(i >= 0);
		FZ_EQ(find(ps, 1), i);
		FZ_CHECK(!bufs[i].out);
		FZ_EQ(bufs[i].cap, ak);
	} else {
		int old;
		FZ_CHECK(nbufs < MAX_BUFS);
		if ((old = find(pk, 0)) >= 0)
			bufs[old].kv = NULL;
		if ((old = find(ps, 1)) >= 0)
			bufs[old].seed = NULL;
		i = nbufs++;
		bufs[i] = (struct buf){pk, ps, ak, 0};
	}
	memset(pk, 0xA5, ak); /* the whole capacity is ours */
	bufs[i].out = 1;
	outs[(*nout)++] = i;
}

static void do_free(kvp_bufcache *c, ref_bufcache *s, struct fz *f, int *outs, int *nout)
{
	int k = fz_byte(f) % *nout, i = outs[k];

	outs[k] = outs[--*nout];
	bufs[i].out = 0;
	kvp_bufcache_free(c, bufs[i].kv, bufs[i].cap);
	seed_free(s, bufs[i].seed, bufs[i].cap);
	same_stats(c, s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz f = {data, size};
	size_t budget = (size_t)fz_u32(&f, 0) * 4; /* 0 .. 256 KiB */
	int outs[MAX_OUT], nout = 0;
	kvp_bufcache *c;
	ref_bufcache *s;

	nbufs = 0;
	if (kvp_bufcache_create(budget, &c) != KVP_OK)
		return 0;
	s = seed_create(budget, 0);
	FZ_CHECK(s != NULL);
	while (f.n && nbufs < MAX_BUFS - 1) {
		uint8_t op = fz_byte(&f);
		if (nout == 0 || (nout < MAX_OUT && op < 140))
			do_alloc(c, s, &f, outs, &nout);
		else
			do_free(c, s, &f, outs, &nout);
	}
	while (nout)
		do_free(c, s, &f, outs, &nout);
	kvp_bufcache_destroy(c);
	seed_destroy(s);
	return 0;
}
