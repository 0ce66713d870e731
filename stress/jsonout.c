/*
 * stress/jsonout.c - JSON output through jansson (stress/jsonout.h).
 *
 * The programs used to print their JSON by hand; a trace path with a byte
 * that is not UTF-8 then made the file invalid.  jansson refuses such a
 * string (json_string returns NULL), so jo_text spells each invalid byte
 * as "\xNN" first: the file stays valid and the path stays readable.
 */
#include "stress/jsonout.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void jo_u64(json_t *o, const char *key, uint64_t v)
{
	json_object_set_new(o, key, json_integer((json_int_t)(v > INT64_MAX ? INT64_MAX : v)));
}

void jo_f64(json_t *o, const char *key, double v)
{
	json_object_set_new(o, key, isfinite(v) ? json_real(v) : json_null());
}

/* Length of the valid UTF-8 sequence at @s (1..4), or 0 when it is not one. */
static size_t utf8_len(const unsigned char *s)
{
	if (s[0] < 0x80)
		return 1;
	size_t n = (s[0] & 0xE0) == 0xC0   ? 2
	           : (s[0] & 0xF0) == 0xE0 ? 3
	           : (s[0] & 0xF8) == 0xF0 ? 4
	                                   : 0;
	if (n == 0 || (n == 2 && s[0] < 0xC2) || (n == 4 && s[0] > 0xF4))
		return 0;
	for (size_t i = 1; i < n; i++)
		if ((s[i] & 0xC0) != 0x80)
			return 0;
	/* Overlong three/four-byte forms, surrogates and code points past U+10FFFF. */
	if (n == 3 && ((s[0] == 0xE0 && s[1] < 0xA0) || (s[0] == 0xED && s[1] >= 0xA0)))
		return 0;
	if (n == 4 && ((s[0] == 0xF0 && s[1] < 0x90) || (s[0] == 0xF4 && s[1] >= 0x90)))
		return 0;
	return n;
}

json_t *jo_text(const char *s)
{
	json_t *j = json_string(s);
	if (j != NULL)
		return j;
	size_t len = strlen(s);
	char *out = malloc(4 * len + 1); /* each byte at most "\xNN" */
	if (out == NULL)
		return NULL;
	size_t o = 0;
	const unsigned char *u = (const unsigned char *)s;
	for (size_t i = 0; i < len;) {
		size_t n = utf8_len(u + i);
		if (n == 0) {
			o += (size_t)sprintf(out + o, "\\x%02X", u[i]);
			i++;
		} else {
			memcpy(out + o, u + i, n);
			o += n;
			i += n;
		}
	}
	out[o] = '\0';
	j = json_string(out);
	free(out);
	return j;
}

int jo_write(json_t *root, const char *path, const char *prog)
{
	if (root == NULL) {
		fprintf(stderr, "%s: cannot write %s: out of memory\n", prog, path);
		return -1;
	}
	errno = 0;
	if (json_dump_file(root, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0) {
		fprintf(stderr, "%s: cannot write %s: %s\n", prog, path,
		        errno ? strerror(errno) : "jansson could not encode it");
		return -1;
	}
	return 0;
}
