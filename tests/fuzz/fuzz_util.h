/*
 * tests/fuzz/fuzz_util.h - input reader and failure macro for the fuzz targets.
 *
 * A target reads its input as a stream of small choices (fz_byte, fz_u32);
 * a spent input reads as zeros, so every input is a valid program.  FZ_CHECK
 * prints the failed condition and aborts: libFuzzer then saves the input
 * as a crash-* file that replays the failure (run the target on it).
 */
#ifndef KVPOOL_TESTS_FUZZ_UTIL_H
#define KVPOOL_TESTS_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

struct fz {
	const uint8_t *p;
	size_t n;
};

static inline uint8_t fz_byte(struct fz *f)
{
	if (!f->n)
		return 0;
	f->n--;
	return *f->p++;
}

static inline uint32_t fz_u32(struct fz *f, uint32_t below)
{
	uint32_t v = fz_byte(f);

	v |= (uint32_t)fz_byte(f) << 8;
	return below ? v % below : v;
}

#define FZ_CHECK(cond)                                                                             \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "%s:%d: FUZZ CHECK failed: %s\n", __FILE__, __LINE__,      \
			        #cond);                                                            \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

#define FZ_EQ(a, b)                                                                                \
	do {                                                                                       \
		long long fz_a_ = (long long)(a), fz_b_ = (long long)(b);                          \
		if (fz_a_ != fz_b_) {                                                              \
			fprintf(stderr, "%s:%d: FUZZ CHECK failed: %s == %s (%lld vs %lld)\n",     \
			        __FILE__, __LINE__, #a, #b, fz_a_, fz_b_);                         \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

#endif /* KVPOOL_TESTS_FUZZ_UTIL_H */
