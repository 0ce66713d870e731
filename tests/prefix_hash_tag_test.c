/*
 * tests/prefix_hash_tag_test.c - the key index's hash spreads keys built
 * from counters over its top half.
 *
 * The index stores only the top 32 bits of a key's hash in a slot (the
 * tag) and a lookup compares tags: two live keys with one tag on a probe
 * run make the one further along unfindable.  Content keys should be
 * cryptographic hashes, but callers (and tests) build them from counters
 * too.  Here 40,000 such keys of each of four shapes, in each stream tag,
 * must give 40,000 tags less at most a few (a random function gives about
 * 0.2 pairs among 40,000), and the whole hash must tell every key apart.
 */
#include <stdlib.h>

#include "lib/testing/prefix_peek.h"
#include "tests/prefix_testutil.h"
#include "tests/testutil.h"

#define N 40000u

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Distinct values among @n sorted in place. */
static size_t distinct(uint64_t *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp_u64);
	size_t d = n ? 1 : 0;
	for (size_t i = 1; i < n; i++)
		d += v[i] != v[i - 1];
	return d;
}

static kvp_hash shape(int s, uint64_t i)
{
	kvp_hash k = {0, 0};
	switch (s) {
	case 0: /* the prefix tests' own */
		return tpx_key(0, 0, (uint32_t)i);
	case 1:
		k.lo = i * 0x9e3779b97f4a7c15ull + 1;
		k.hi = i ^ 0x5555;
		return k;
	case 2:
		k.lo = i;
		return k;
	default:
		k.hi = i;
		return k;
	}
}

static void test_counter_keys(void)
{
	uint64_t *tag = malloc(N * sizeof(*tag)), *whole = malloc(N * sizeof(*whole));
	CHECK(tag && whole);
	for (int s = 0; s < 4; s++) {
		for (uint32_t stream = 0; stream < 4; stream++) {
			for (uint64_t i = 0; i < N; i++) {
				kvp_hash k = shape(s, i);
				whole[i] = kvpi_pfx_index_hash(&k, stream);
				tag[i] = whole[i] >> 32;
			}
			CHECK_EQ(distinct(whole, N), (size_t)N);
			CHECK(distinct(tag, N) >= (size_t)N - 3);
		}
	}
	free(tag);
	free(whole);
}

/* The stream tag sets a key apart: one key in two streams, two hashes. */
static void test_streams_apart(void)
{
	for (uint64_t i = 0; i < 1000; i++) {
		kvp_hash k = shape((int)(i % 4), i);
		for (uint32_t a = 0; a < 4; a++)
			for (uint32_t b = a + 1; b < 4; b++)
				CHECK(kvpi_pfx_index_hash(&k, a) != kvpi_pfx_index_hash(&k, b));
	}
}

int main(void)
{
	RUN(test_counter_keys);
	RUN(test_streams_apart);
	return 0;
}
