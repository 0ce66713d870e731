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
 * allocations and frees, cached bytes).  The lockstep and its checks are
 * tests/bufcache_twin.c, shared with tests/bufcache_model_test.c.
 */
#include <kvpool/bufcache.h>

#include <stdlib.h>

#include "tests/bufcache_twin.h"
#include "tests/fuzz/fuzz_util.h"

#define MAX_BUFS 2048

static struct twin_buf bufs[MAX_BUFS];

static void die(void)
{
	abort(); /* libFuzzer saves the input as a crash-* file */
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

static void do_alloc(struct bufcache_twin *t, struct fz *f)
{
	size_t req = pick(f);
	uint8_t fb = fz_byte(f);
	long fail = fb % 8 == 0 ? 1 + fb / 64 : 0;

	twin_alloc(t, req, fail);
}

static void do_free(struct bufcache_twin *t, struct fz *f)
{
	twin_free(t, fz_byte(f) % t->n_out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz f = {data, size};
	size_t budget = (size_t)fz_u32(&f, 0) * 4; /* 0 .. 256 KiB */
	struct bufcache_twin t;

	if (twin_create(&t, budget, bufs, MAX_BUFS, die) != 0)
		return 0;
	while (f.n && !twin_full(&t)) {
		uint8_t op = fz_byte(&f);
		if (t.n_out == 0 || (t.n_out < TWIN_MAX_OUT && op < 140))
			do_alloc(&t, &f);
		else
			do_free(&t, &f);
	}
	while (t.n_out)
		do_free(&t, &f);
	twin_destroy(&t);
	return 0;
}
