/*
 * bench/suite/mutex_blockpool_test.c - the lifecycle benchmark's baseline checked:
 * all-or-nothing allocation, uncached-first then least-recently-cached
 * eviction, match and publish, and a random run against a simple model
 * (linear scans) that must agree on every call.
 */
#include "bench/suite/mutex_blockpool.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond);   \
			failures++;                                                                \
		}                                                                                  \
	} while (0)

static mbp_key key(uint64_t k)
{
	return (mbp_key){.lo = k * 0x9e3779b97f4a7c15ull, .hi = k};
}

static void test_all_or_nothing(void)
{
	mbp *p;
	uint32_t ids[8];

	CHECK(mbp_create(0, &p) == -1);
	CHECK(mbp_create(8, &p) == 0);
	CHECK(mbp_allocate(p, 1, 5, ids) == 0);
	CHECK(ids[0] == 0 && ids[4] == 4); /* lowest id first */
	CHECK(mbp_allocate(p, 2, 4, ids) == -2);
	CHECK(mbp_n_free(p) == 3 && mbp_n_owners(p) == 1);
	CHECK(mbp_free_all(p, 2) == -1);
	CHECK(mbp_free_all(p, 1) == 0);
	CHECK(mbp_n_free(p) == 8 && mbp_n_owners(p) == 0);
	/* Freed last block first, so the first block is on top again. */
	CHECK(mbp_allocate(p, 3, 1, ids) == 0 && ids[0] == 0);
	CHECK(mbp_free_all(p, 3) == 0);
	mbp_destroy(p);
}

static void test_evict_order(void)
{
	mbp *p;
	uint32_t a[2], b[3], m[2], n;
	mbp_key k[2] = {key(1), key(2)};

	CHECK(mbp_create(4, &p) == 0);
	CHECK(mbp_allocate(p, 1, 2, a) == 0);
	CHECK(mbp_publish(p, a, k, 2) == 2);
	CHECK(mbp_publish(p, a, k, 2) == 0); /* already published */
	CHECK(mbp_free_all(p, 1) == 0);
	/* Cached last block first: a[1] is the oldest. */
	CHECK(mbp_n_cached(p) == 2 && mbp_n_free(p) == 4 && mbp_n_keys(p) == 2);
	CHECK(mbp_allocate(p, 2, 3, b) == 0); /* two uncached, then evicts a[1] */
	CHECK(b[2] == a[1]);
	CHECK(mbp_n_keys(p) == 1 && mbp_n_cached(p) == 1);
	CHECK(mbp_match(p, 3, k, 2, m, &n) == 0 && n == 1 && m[0] == a[0]);
	CHECK(mbp_n_cached(p) == 0 && mbp_n_free(p) == 0);
	CHECK(mbp_match(p, 4, k, 2, m, &n) == 0 && n == 1); /* a second holder */
	CHECK(mbp_allocate(p, 5, 1, b) == -2);
	CHECK(mbp_free_all(p, 3) == 0 && mbp_n_cached(p) == 0); /* still held by 4 */
	CHECK(mbp_free_all(p, 4) == 0 && mbp_n_cached(p) == 1);
	CHECK(mbp_free_all(p, 2) == 0 && mbp_n_free(p) == 4 && mbp_n_owners(p) == 0);
	/* A publish of a key mapped to another block is refused. */
	CHECK(mbp_allocate(p, 6, 1, b) == 0 && mbp_publish(p, b, k, 1) == 0);
	CHECK(mbp_free_all(p, 6) == 0);
	mbp_destroy(p);
}

/*
 * The model: per block holds, key, cached stamp; free uncached ids as a
 * LIFO array; eviction picks the smallest stamp by scanning.
 */
#define NB 64
#define NO 6

typedef struct model {
	uint32_t holds[NB];
	bool pub[NB];
	uint64_t keyv[NB];
	uint64_t stamp[NB]; /* caching time, while cached */
	uint64_t clock;
	uint32_t free_ids[NB], n_free;
	uint32_t own[NO][NB], n_own[NO];
	bool active[NO];
} model;

static bool cached(const model *m, uint32_t id)
{
	return m->pub[id] && m->holds[id] == 0;
}

static uint32_t n_cached(const model *m)
{
	uint32_t c = 0;
	for (uint32_t i = 0; i < NB; i++)
		c += cached(m, i);
	return c;
}

static int find_key(const model *m, uint64_t k)
{
	for (uint32_t i = 0; i < NB; i++)
		if (m->pub[i] && m->keyv[i] == k)
			return (int)i;
	return -1;
}

static void test_random(void)
{
	static model M;
	mbp *p;
	uint64_t s = 12345;
	uint32_t ids[NB], exp[NB];

	memset(&M, 0, sizeof(M));
	for (uint32_t i = 0; i < NB; i++)
		M.free_ids[i] = NB - 1 - i;
	M.n_free = NB;
	CHECK(mbp_create(NB, &p) == 0);
	for (int step = 0; step < 200000 && !failures; step++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		uint32_t r = (uint32_t)(s >> 33), o = r % NO, op = (r >> 4) % 4;
		uint32_t n = 1 + (r >> 8) % 12;
		mbp_key ks[12];
		uint64_t base = (r >> 12) % 8; /* a sequence of keys base*100 + i */
		for (uint32_t i = 0; i < n; i++)
			ks[i] = key(base * 100 + i);
		if (op == 0 || (op == 1 && M.active[o] == false)) {
			/* allocate n */
			uint32_t avail = M.n_free + n_cached(&M);
			int rc = mbp_allocate(p, o, n, ids);
			CHECK(rc == (avail < n ? -2 : 0));
			if (rc)
				continue;
			for (uint32_t i = 0; i < n; i++) {
				uint32_t id;
				if (M.n_free) {
					id = M.free_ids[--M.n_free];
				} else {
					uint64_t best = UINT64_MAX;
					id = 0;
					for (uint32_t b = 0; b < NB; b++)
						if (cached(&M, b) && M.stamp[b] < best)
							best = M.stamp[b], id = b;
					M.pub[id] = false;
				}
				CHECK(ids[i] == id);
				M.holds[id] = 1;
				M.own[o][M.n_own[o]++] = id;
			}
			M.active[o] = true;
		} else if (op == 1) {
			/* match, then publish the owner's unpublished blocks under the next keys */
			uint32_t got, e = 0;
			while (e < n && find_key(&M, ks[e].hi) >= 0 &&
			       M.keyv[find_key(&M, ks[e].hi)] == ks[e].hi) {
				exp[e] = (uint32_t)find_key(&M, ks[e].hi);
				e++;
			}
			/* An owner holds a block at most once: skip when it would repeat. */
			bool dup = false;
			for (uint32_t i = 0; i < e; i++)
				for (uint32_t j = 0; j < M.n_own[o]; j++)
					dup |= M.own[o][j] == exp[i];
			if (dup)
				continue;
			CHECK(mbp_match(p, o, ks, n, ids, &got) == 0 && got == e);
			for (uint32_t i = 0; i < e && i < got; i++) {
				CHECK(ids[i] == exp[i]);
				M.holds[exp[i]]++;
				M.own[o][M.n_own[o]++] = exp[i];
			}
			uint32_t cand[NB], nc = 0;
			mbp_key ck[NB];
			for (uint32_t j = 0; j < M.n_own[o] && e < n; j++) {
				uint32_t id = M.own[o][j];
				if (M.pub[id])
					continue;
				cand[nc] = id;
				ck[nc++] = ks[e++];
			}
			uint32_t want = 0;
			for (uint32_t i = 0; i < nc; i++)
				if (find_key(&M, ck[i].hi) < 0) {
					M.pub[cand[i]] = true;
					M.keyv[cand[i]] = ck[i].hi;
					want++;
				}
			CHECK(mbp_publish(p, cand, ck, nc) == want);
		} else {
			/* free_all */
			int rc = mbp_free_all(p, o);
			CHECK(rc == (M.active[o] ? 0 : -1));
			if (rc)
				continue;
			for (uint32_t j = M.n_own[o]; j-- > 0;) {
				uint32_t id = M.own[o][j];
				if (--M.holds[id])
					continue;
				if (M.pub[id])
					M.stamp[id] = ++M.clock;
				else
					M.free_ids[M.n_free++] = id;
			}
			M.n_own[o] = 0;
			M.active[o] = false;
		}
		CHECK(mbp_n_cached(p) == n_cached(&M));
		CHECK(mbp_n_free(p) == M.n_free + n_cached(&M));
		uint32_t keys = 0, owners = 0;
		for (uint32_t b = 0; b < NB; b++)
			keys += M.pub[b];
		for (uint32_t i = 0; i < NO; i++)
			owners += M.active[i];
		CHECK(mbp_n_keys(p) == keys && mbp_n_owners(p) == owners);
	}
	mbp_destroy(p);
}

int main(void)
{
	test_all_or_nothing();
	test_evict_order();
	test_random();
	if (failures) {
		fprintf(stderr, "%d checks failed\n", failures);
		return 1;
	}
	printf("mutex_blockpool_test: ok\n");
	return 0;
}
