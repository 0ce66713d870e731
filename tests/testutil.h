/*
 * tests/testutil.h - plain-assert helpers shared by the C tests.
 *
 * CHECK(cond) and CHECK_EQ(a, b) print the failing expression with its file
 * and line and exit(1), in every build (NDEBUG does not turn them off).
 * Each test program prints "ok <name>" per test it runs.
 */
#ifndef KVPOOL_TESTS_TESTUTIL_H
#define KVPOOL_TESTS_TESTUTIL_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);   \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

#define CHECK_EQ(a, b)                                                                             \
	do {                                                                                       \
		long long check_a_ = (long long)(a), check_b_ = (long long)(b);                    \
		if (check_a_ != check_b_) {                                                        \
			fprintf(stderr, "%s:%d: CHECK_EQ failed: %s == %s (%lld vs %lld)\n",       \
			        __FILE__, __LINE__, #a, #b, check_a_, check_b_);                   \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

#define RUN(test)                                                                                  \
	do {                                                                                       \
		test();                                                                            \
		printf("ok %s\n", #test);                                                          \
		fflush(stdout);                                                                    \
	} while (0)

/* xorshift64*: a small, seedable PRNG for randomised tests. */
static inline uint64_t tu_rand(uint64_t *s)
{
	uint64_t x = *s ? *s : 0x9e3779b97f4a7c15ull;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545f4914f6cdd1dull;
}

#endif /* KVPOOL_TESTS_TESTUTIL_H */
