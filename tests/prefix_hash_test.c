/*
 * tests/prefix_hash_test.c - kvp_prefix_hash: the documented byte layout.
 *
 * The expected keys were computed outside kvpool, from the layout in
 * docs/PREFIX.md, with Python's hashlib:
 *
 *   def key(parent, salt, tok):
 *       plo, phi = parent or (0, 0)
 *       d = hashlib.sha256(bytes([1, 1 if parent else 0])
 *                          + struct.pack("<QQQ", plo, phi, salt) + tok).digest()
 *       return struct.unpack_from("<QQ", d)
 *
 * and the first one also with the OpenSSL command line:
 *
 *   { printf '\x01\x00'; head -c 24 /dev/zero; } | openssl dgst -sha256 -binary |
 *       od -An -tx8 -N16 --endian=little
 *
 * python/tests/test_prefix.py recomputes keys with hashlib at run time.
 */
#include <pthread.h>
#include <string.h>

#include <kvpool/kvpool.h>

#include "tests/testutil.h"

static void check_key(kvp_hash k, uint64_t lo, uint64_t hi)
{
	if (k.lo != lo || k.hi != hi) {
		fprintf(stderr, "key %016llx %016llx, expected %016llx %016llx\n",
		        (unsigned long long)k.lo, (unsigned long long)k.hi, (unsigned long long)lo,
		        (unsigned long long)hi);
		exit(1);
	}
}

static void le32s(uint8_t *out, const int32_t *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		for (int b = 0; b < 4; b++)
			out[4 * i + b] = (uint8_t)((uint32_t)v[i] >> (8 * b));
}

static void test_vectors(void)
{
	static const int32_t t1[4] = {1, 2, 3, 4}, t2[4] = {5, 6, 7, 8};
	uint8_t b1[16], b2[16], big[768];
	kvp_hash k, first, zero = {0, 0}, p = {0x0123456789abcdefull, 0xfedcba9876543210ull};

	le32s(b1, t1, 4);
	le32s(b2, t2, 4);
	for (size_t i = 0; i < sizeof big; i++)
		big[i] = (uint8_t)i;
	CHECK_EQ(kvp_prefix_hash(NULL, 0, NULL, 0, &k), KVP_OK);
	check_key(k, 0xc3b7d8146f95eab9ull, 0x28142429433752d9ull);
	CHECK_EQ(kvp_prefix_hash(NULL, 0, b1, sizeof b1, &first), KVP_OK);
	check_key(first, 0xc6d366aac39d8418ull, 0x55e9c19f744982c3ull);
	CHECK_EQ(kvp_prefix_hash(&first, 0, b2, sizeof b2, &k), KVP_OK);
	check_key(k, 0x4d2411e8d146cb13ull, 0x884f2a945b4bc325ull);
	CHECK_EQ(kvp_prefix_hash(NULL, 7, b1, sizeof b1, &k), KVP_OK);
	check_key(k, 0x2b679f374428c575ull, 0xc636f866c027e4cfull);
	/* a zero parent is not "no parent": has_parent is hashed */
	CHECK_EQ(kvp_prefix_hash(&zero, 0, NULL, 0, &k), KVP_OK);
	check_key(k, 0x4fe9982739778871ull, 0xf889a67c5c5c0b1dull);
	CHECK_EQ(kvp_prefix_hash(&p, 0xdeadbeefcafef00dull, big, sizeof big, &k), KVP_OK);
	check_key(k, 0x175be2fe712581cdull, 0x34e2ace0aef1b73eull);
}

static void test_args(void)
{
	kvp_hash k = {42, 43}, e;
	uint8_t x = 0;

	CHECK_EQ(kvp_prefix_hash(NULL, 0, &x, 1, NULL), KVP_EINVAL);
	CHECK_EQ(kvp_prefix_hash(NULL, 0, NULL, 1, &k), KVP_EINVAL);
	CHECK(k.lo == 42 && k.hi == 43); /* nothing written on failure */
	/* tokens may be NULL when empty, and non-NULL empty is the same key */
	CHECK_EQ(kvp_prefix_hash(NULL, 0, NULL, 0, &k), KVP_OK);
	CHECK_EQ(kvp_prefix_hash(NULL, 0, &x, 0, &e), KVP_OK);
	CHECK(k.lo == e.lo && k.hi == e.hi);
	/* @out may alias @parent */
	CHECK_EQ(kvp_prefix_hash(NULL, 0, NULL, 0, &k), KVP_OK);
	CHECK_EQ(kvp_prefix_hash(&k, 0, &x, 1, &e), KVP_OK);
	CHECK_EQ(kvp_prefix_hash(&k, 0, &x, 1, &k), KVP_OK);
	CHECK(k.lo == e.lo && k.hi == e.hi);
}

/* Every input changes the key: one bit of tokens, salt or parent. */
static void test_sensitivity(void)
{
	uint8_t tok[64];
	kvp_hash base, k, par = {1, 2};
	uint64_t rng = 7;

	for (size_t i = 0; i < sizeof tok; i++)
		tok[i] = (uint8_t)tu_rand(&rng);
	CHECK_EQ(kvp_prefix_hash(&par, 5, tok, sizeof tok, &base), KVP_OK);
	for (size_t bit = 0; bit < 8 * sizeof tok; bit++) {
		tok[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		CHECK_EQ(kvp_prefix_hash(&par, 5, tok, sizeof tok, &k), KVP_OK);
		CHECK(k.lo != base.lo || k.hi != base.hi);
		tok[bit / 8] ^= (uint8_t)(1u << (bit % 8));
	}
	CHECK_EQ(kvp_prefix_hash(&par, 4, tok, sizeof tok, &k), KVP_OK);
	CHECK(k.lo != base.lo || k.hi != base.hi);
	par.hi ^= 1ull << 63;
	CHECK_EQ(kvp_prefix_hash(&par, 5, tok, sizeof tok, &k), KVP_OK);
	CHECK(k.lo != base.lo || k.hi != base.hi);
	CHECK_EQ(kvp_prefix_hash(NULL, 5, tok, sizeof tok, &k), KVP_OK);
	CHECK(k.lo != base.lo || k.hi != base.hi);
	CHECK_EQ(kvp_prefix_hash(&par, 5, tok, sizeof tok - 1, &k), KVP_OK);
	CHECK(k.lo != base.lo || k.hi != base.hi);
}

/* Many threads hash chains at once and all get the single-thread keys. */
#define N_THREADS 8
#define CHAIN     200

static kvp_hash expected[CHAIN];

static void chain(kvp_hash *out)
{
	kvp_hash prev;
	for (uint32_t i = 0; i < CHAIN; i++) {
		uint32_t tok[16];
		for (int j = 0; j < 16; j++)
			tok[j] = i * 16 + (uint32_t)j;
		CHECK_EQ(kvp_prefix_hash(i ? &prev : NULL, 9, tok, sizeof tok, &out[i]), KVP_OK);
		prev = out[i];
	}
}

static void *chain_thread(void *arg)
{
	kvp_hash got[CHAIN];
	(void)arg;
	for (int rep = 0; rep < 5; rep++) {
		chain(got);
		CHECK(memcmp(got, expected, sizeof got) == 0);
	}
	return NULL;
}

static void test_threads(void)
{
	pthread_t t[N_THREADS];

	chain(expected);
	for (int i = 0; i < N_THREADS; i++)
		CHECK_EQ(pthread_create(&t[i], NULL, chain_thread, NULL), 0);
	for (int i = 0; i < N_THREADS; i++)
		pthread_join(t[i], NULL);
}

int main(void)
{
	RUN(test_vectors);
	RUN(test_args);
	RUN(test_sensitivity);
	RUN(test_threads);
	return 0;
}
