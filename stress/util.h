/*
 * stress/util.h - small helpers shared by kvpool_replay and kvpool_stress:
 * a monotonic clock, paths relative to where `bazel run` was started,
 * strict number parsing for flags, a seedable PRNG.
 *
 * Everything here is reentrant; nothing allocates except su_resolve_path.
 */
#ifndef KVPOOL_STRESS_UTIL_H
#define KVPOOL_STRESS_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/** su_now_ns - CLOCK_MONOTONIC in nanoseconds */
static inline uint64_t su_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/** su_sleep_ns - sleep @ns nanoseconds (restarts after signals) */
void su_sleep_ns(uint64_t ns);

/** su_sleep_until_ns - sleep until su_now_ns() >= @deadline */
void su_sleep_until_ns(uint64_t deadline);

/**
 * su_resolve_path - resolve a user-given path
 * @path: as given on the command line
 *
 * Programs run under `bazel run` start in the runfiles tree; Bazel sets
 * BUILD_WORKING_DIRECTORY to the directory the user ran bazel from.  A
 * relative @path is taken relative to that directory when it is set, else
 * as is.  Returns a malloc'd string (caller frees) or NULL on ENOMEM.
 */
char *su_resolve_path(const char *path);

/**
 * su_parse_u64 - strict decimal parse: digits only, no sign, no overflow
 * Returns true and sets *@out on success.
 */
bool su_parse_u64(const char *s, uint64_t *out);

/** su_parse_double - strict parse of a finite, non-negative double */
bool su_parse_double(const char *s, double *out);

/* splitmix64: a seedable PRNG; also a good hash to derive per-thread seeds. */
static inline uint64_t su_rand(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/** su_rand_below - uniform in [0, n) (n > 0; tiny modulo bias is fine here) */
static inline uint64_t su_rand_below(uint64_t *state, uint64_t n)
{
	return su_rand(state) % n;
}

/** su_rand_unit - uniform double in [0, 1) */
static inline double su_rand_unit(uint64_t *state)
{
	return (double)(su_rand(state) >> 11) * (1.0 / 9007199254740992.0);
}

/** su_is_tty - whether stderr is a terminal (progress lines go there) */
bool su_is_tty(void);

#endif /* KVPOOL_STRESS_UTIL_H */
