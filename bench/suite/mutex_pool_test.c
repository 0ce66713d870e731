/*
 * bench/suite/mutex_pool_test.c - the mutex-pool baseline against a plain model.
 *
 * Random allocate / free / free_all / register / release over 3000 owner
 * ids (so the owner dictionary grows several times and backward-shift
 * deletion runs across wrapped probe chains), checking after every call
 * that the pool agrees with a model of who holds what: the free count,
 * all-or-nothing exhaustion, free_all freeing exactly the owner's blocks,
 * stale and double frees skipped, and unknown owners refused.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/suite/mutex_pool.h"

#define N_BLOCKS 4096u
#define N_OWNERS 3000u
#define BS       16u

static int failures;
#define CHECK(c)                                                                                   \
	do {                                                                                       \
		if (!(c)) {                                                                        \
			fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #c);      \
			if (++failures > 10)                                                       \
				exit(1);                                                           \
		}                                                                                  \
	} while (0)

static uint64_t rng = 12345;
static uint32_t rnd(uint32_t n)
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	return (uint32_t)(rng % n);
}

/* Model: the refs each owner holds, and whether it is registered. */
static uint64_t held[N_OWNERS][N_BLOCKS / 8];
static uint32_t n_held[N_OWNERS];
static int registered[N_OWNERS];
static uint64_t stale[64];
static uint32_t n_stale;

static uint64_t key(uint32_t o)
{
	/* Spread ids so some collide modulo the table size. */
	return (uint64_t)o * 0x10000u + (o % 7);
}

static int active(uint32_t o)
{
	return registered[o] || n_held[o] > 0;
}

static uint32_t total_held;

/*
 * Allocate 1..40 blocks for owner @o: granted iff they fit.  False when the
 * model could not take them (given back, or refused): no free-count check.
 */
static bool step_allocate(mpool *p, uint32_t o)
{
	uint64_t refs[64];
	size_t n;
	uint32_t k = 1 + rnd(40), tokens = k * BS - rnd(BS);
	int rc = mpool_allocate(p, tokens, key(o), refs, 64, &n);
	if (k > N_BLOCKS - total_held || n_held[o] + k > N_BLOCKS / 8) {
		if (rc == 0) /* model array full: give them back */
			CHECK(mpool_free(p, refs, n) == 0);
		else
			CHECK(rc == -2);
		return false;
	}
	CHECK(rc == 0 && n == k);
	for (size_t i = 0; i < n; i++)
		held[o][n_held[o]++] = refs[i];
	total_held += k;
	return true;
}

/* Free one of @o's refs, keep a stale copy. */
static void step_free_one(mpool *p, uint32_t o)
{
	uint32_t i = rnd(n_held[o]);
	uint64_t r = held[o][i];
	CHECK(mpool_free(p, &r, 1) == 0);
	held[o][i] = held[o][--n_held[o]];
	total_held--;
	stale[n_stale++ % 64] = r;
}

/* free_all: frees exactly @o's blocks and releases it; refused when inactive. */
static void step_free_all(mpool *p, uint32_t o)
{
	int rc = mpool_free_all(p, key(o));
	CHECK(rc == (active(o) ? 0 : -1));
	total_held -= n_held[o];
	for (uint32_t i = 0; i < n_held[o]; i++)
		stale[n_stale++ % 64] = held[o][i];
	n_held[o] = 0;
	registered[o] = 0;
}

/* A stale or double free is skipped: nothing changes. */
static void step_stale(mpool *p)
{
	uint64_t r = stale[rnd(n_stale < 64 ? n_stale : 64)];
	size_t before = mpool_n_free(p);
	CHECK(mpool_free(p, &r, 1) == 0);
	CHECK(mpool_n_free(p) == before);
}

/* One random call, checked against the model. */
static void step(mpool *p)
{
	uint32_t o = rnd(N_OWNERS), op = rnd(10);
	if (op < 4) {
		if (!step_allocate(p, o))
			return;
	} else if (op < 6 && n_held[o]) {
		step_free_one(p, o);
	} else if (op < 7) {
		step_free_all(p, o);
	} else if (op < 8) { /* register */
		int rc = mpool_register_owner(p, key(o));
		CHECK(rc == (active(o) ? -1 : 0));
		if (rc == 0)
			registered[o] = 1;
	} else if (op < 9) { /* release */
		int rc = mpool_release_owner(p, key(o));
		CHECK(rc == (active(o) ? 0 : -1));
		registered[o] = 0;
	} else if (n_stale) {
		step_stale(p);
	}
	CHECK(mpool_n_free(p) == N_BLOCKS - total_held);
}

int main(void)
{
	mpool *p;

	{
		mpool *q = NULL;
		CHECK(mpool_create(0, 1, &q) == -1 && q == NULL);
		CHECK(mpool_create(BS, 0, &q) == -1 && q == NULL);
	}
	CHECK(mpool_create(BS, N_BLOCKS, &p) == 0);
	for (int i = 0; i < 400000; i++)
		step(p);
	/* A block id that was never created is refused, and nothing is freed. */
	{
		uint64_t bad[2] = {N_BLOCKS, 0};
		size_t before = mpool_n_free(p);
		CHECK(mpool_free(p, bad, 2) == -1);
		CHECK(mpool_n_free(p) == before);
	}
	for (uint32_t o = 0; o < N_OWNERS; o++)
		if (active(o))
			CHECK(mpool_free_all(p, key(o)) == 0);
	CHECK(mpool_n_free(p) == N_BLOCKS);
	mpool_destroy(p);
	if (failures)
		return 1;
	printf("mutex_pool_test: ok\n");
	return 0;
}
