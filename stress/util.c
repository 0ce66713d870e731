/*
 * stress/util.c - see util.h.
 *
 * Path resolution exists because `bazel run` changes the working directory
 * to the runfiles tree: users type paths relative to where they ran bazel.
 */
#include "stress/util.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void su_sleep_ns(uint64_t ns)
{
	struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull),
	                      .tv_nsec = (long)(ns % 1000000000ull)};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
	}
}

void su_sleep_until_ns(uint64_t deadline)
{
	uint64_t now = su_now_ns();
	if (deadline > now)
		su_sleep_ns(deadline - now);
}

char *su_resolve_path(const char *path)
{
	const char *base = getenv("BUILD_WORKING_DIRECTORY");
	if (path[0] == '/' || base == NULL || base[0] == '\0')
		return strdup(path);
	size_t lb = strlen(base), lp = strlen(path);
	char *out = malloc(lb + 1 + lp + 1);
	if (out == NULL)
		return NULL;
	memcpy(out, base, lb);
	out[lb] = '/';
	memcpy(out + lb + 1, path, lp + 1);
	return out;
}

bool su_parse_u64(const char *s, uint64_t *out)
{
	uint64_t v = 0;
	if (s == NULL || *s == '\0')
		return false;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return false;
		unsigned d = (unsigned)(*s - '0');
		if (v > (UINT64_MAX - d) / 10)
			return false;
		v = v * 10 + d;
	}
	*out = v;
	return true;
}

bool su_parse_double(const char *s, double *out)
{
	char *end;
	/* Plain decimal only: strtod alone would also take leading spaces,
	 * hexadecimal ("0x10") and "inf"/"nan". */
	if (s == NULL || !((*s >= '0' && *s <= '9') || *s == '.') ||
	    s[strspn(s, "0123456789.eE+-")] != '\0')
		return false;
	errno = 0;
	double v = strtod(s, &end);
	if (errno != 0 || *end != '\0' || !isfinite(v) || v < 0)
		return false;
	*out = v;
	return true;
}

bool su_is_tty(void)
{
	return isatty(STDERR_FILENO) == 1;
}
