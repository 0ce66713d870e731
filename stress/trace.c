/*
 * stress/trace.c - trace readers (see trace.h).
 *
 * Rationale: traces come from outside and are read line by line with a
 * bounded reader (read_line), so a NUL byte, a missing final newline or a
 * file cut in the middle of a row are all handled, a line longer than
 * TRACE_MAX_LINE (a file that is no trace: /dev/zero, a binary) is an
 * error rather than an allocation of all memory, and a read error (EIO,
 * ENOMEM) is told from the end of the file.  Each row parser is a
 * strict, non-recursive-descent check of exactly the grammar of its format
 * (the JSON reader recurses only to skip values of keys it does not use,
 * with a depth limit), and every rejection names the field and shows the
 * offending text, so that a user can fix the file from the message alone.
 */
#include "stress/trace.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define AZURE_HEADER   "TIMESTAMP,ContextTokens,GeneratedTokens"
#define VIDUR_HEADER   "num_prefill_tokens,num_decode_tokens"
#define JSON_MAX_DEPTH 64

static const char *const format_names[] = {"auto", "azure", "mooncake", "vidur"};

const char *trace_format_name(trace_format f)
{
	return (unsigned)f < 4 ? format_names[f] : "?";
}

bool trace_format_parse(const char *name, trace_format *out)
{
	for (int i = 0; i < 4; i++) {
		if (strcmp(name, format_names[i]) == 0) {
			*out = (trace_format)i;
			return true;
		}
	}
	return false;
}

static void say(char *buf, size_t cap, const char *fmt, ...)
{
	va_list ap;
	if (cap == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, cap, fmt, ap);
	va_end(ap);
}

/* Quote at most 40 bytes of @s (length @n) for a message, escaping non-printables. */
static const char *quote(const char *s, size_t n, char *buf, size_t cap)
{
	size_t o = 0;
	for (size_t i = 0; i < n && o + 8 < cap; i++) {
		unsigned char c = (unsigned char)s[i];
		if (i == 40) {
			memcpy(buf + o, "...", 3);
			o += 3;
			break;
		}
		if (c >= 0x20 && c < 0x7f) {
			buf[o++] = (char)c;
		} else {
			o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
		}
	}
	buf[o] = '\0';
	return buf;
}

/*
 * Parse a token count in s[0..n): optional spaces around a run of digits.
 * min is the smallest value allowed.
 */
static int parse_tokens(const char *s, size_t n, const char *field, uint32_t min, uint32_t *out,
                        char *why, size_t whycap)
{
	char q[64];
	while (n > 0 && (*s == ' ' || *s == '\t')) {
		s++;
		n--;
	}
	while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'))
		n--;
	if (n == 0) {
		say(why, whycap, "%s: empty field", field);
		return -1;
	}
	size_t i = 0;
	if (s[0] == '-') {
		bool digits = n > 1;
		for (size_t k = 1; k < n; k++)
			digits = digits && s[k] >= '0' && s[k] <= '9';
		if (digits) {
			say(why, whycap, "%s: negative token count '%s'", field,
			    quote(s, n, q, sizeof q));
			return -1;
		}
	}
	if (s[0] == '+')
		i = 1;
	uint64_t v = 0;
	if (i == n) {
		say(why, whycap, "%s: not a whole number: '%s'", field, quote(s, n, q, sizeof q));
		return -1;
	}
	for (; i < n; i++) {
		if (s[i] < '0' || s[i] > '9') {
			say(why, whycap, "%s: not a whole number: '%s'", field,
			    quote(s, n, q, sizeof q));
			return -1;
		}
		v = v * 10 + (uint64_t)(s[i] - '0');
		if (v > TRACE_MAX_TOKENS) {
			say(why, whycap, "%s: too large (more than %u tokens): '%s'", field,
			    TRACE_MAX_TOKENS, quote(s, n, q, sizeof q));
			return -1;
		}
	}
	if (v < min) {
		say(why, whycap, "%s: must be at least %u, got %llu", field, min,
		    (unsigned long long)v);
		return -1;
	}
	*out = (uint32_t)v;
	return 0;
}

/* Split a CSV line on commas into at most @max fields; returns the count found. */
static size_t split_csv(const char *line, const char **f, size_t *len, size_t max)
{
	size_t n = 0;
	const char *p = line;
	for (;;) {
		const char *c = strchr(p, ',');
		size_t l = c ? (size_t)(c - p) : strlen(p);
		if (n < max) {
			f[n] = p;
			len[n] = l;
		}
		n++;
		if (c == NULL)
			break;
		p = c + 1;
	}
	return n;
}

/* Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm). */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
	y -= m <= 2;
	int64_t era = (y >= 0 ? y : y - 399) / 400;
	unsigned yoe = (unsigned)(y - era * 400);
	unsigned doy = (153 * (m + (m > 2 ? (unsigned)-3 : 9)) + 2) / 5 + d - 1;
	unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + (int64_t)doe - 719468;
}

static bool digits_at(const char *s, size_t n, size_t at, size_t count, unsigned *out)
{
	unsigned v = 0;
	if (at + count > n)
		return false;
	for (size_t i = at; i < at + count; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		v = v * 10 + (unsigned)(s[i] - '0');
	}
	*out = v;
	return true;
}

/* "YYYY-MM-DD HH:MM:SS[.fraction]" -> ns since the epoch. */
static int parse_timestamp(const char *s, size_t n, int64_t *ns, char *why, size_t whycap)
{
	static const unsigned mdays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	unsigned y, mo, d, h, mi, se;
	char q[64];
	bool ok = n >= 19 && digits_at(s, n, 0, 4, &y) && s[4] == '-' &&
	          digits_at(s, n, 5, 2, &mo) && s[7] == '-' && digits_at(s, n, 8, 2, &d) &&
	          s[10] == ' ' && digits_at(s, n, 11, 2, &h) && s[13] == ':' &&
	          digits_at(s, n, 14, 2, &mi) && s[16] == ':' && digits_at(s, n, 17, 2, &se);
	uint64_t frac = 0;
	if (ok && n > 19) {
		ok = s[19] == '.' && n > 20;
		unsigned scale = 0;
		for (size_t i = 20; ok && i < n; i++) {
			ok = s[i] >= '0' && s[i] <= '9';
			if (ok && scale < 9) {
				frac = frac * 10 + (uint64_t)(s[i] - '0');
				scale++;
			}
		}
		for (; ok && scale < 9; scale++)
			frac *= 10;
	}
	if (!ok) {
		say(why, whycap, "TIMESTAMP: expected 'YYYY-MM-DD HH:MM:SS[.fraction]', got '%s'",
		    quote(s, n, q, sizeof q));
		return -1;
	}
	if (y < 1900 || y > 2200) { /* keeps ns since 1970 within int64 */
		say(why, whycap, "TIMESTAMP: year %u out of range 1900..2200", y);
		return -1;
	}
	bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
	if (mo < 1 || mo > 12 || d < 1 || d > mdays[mo - 1] || (mo == 2 && d == 29 && !leap) ||
	    h > 23 || mi > 59 || se > 60) {
		say(why, whycap, "TIMESTAMP: no such date or time: '%s'", quote(s, n, q, sizeof q));
		return -1;
	}
	int64_t secs = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + se;
	*ns = secs * 1000000000ll + (int64_t)frac;
	return 0;
}

int trace_parse_azure_row(const char *line, int64_t *ts_ns, trace_request *r, char *why,
                          size_t whycap)
{
	const char *f[3];
	size_t len[3];
	size_t n = split_csv(line, f, len, 3);
	if (n != 3) {
		say(why, whycap,
		    "expected 3 comma-separated fields (TIMESTAMP,ContextTokens,GeneratedTokens), "
		    "found %zu%s",
		    n, n < 3 ? " (truncated line?)" : "");
		return -1;
	}
	if (parse_timestamp(f[0], len[0], ts_ns, why, whycap) != 0)
		return -1;
	if (parse_tokens(f[1], len[1], "ContextTokens", 1, &r->prompt, why, whycap) != 0)
		return -1;
	return parse_tokens(f[2], len[2], "GeneratedTokens", 0, &r->output, why, whycap);
}

int trace_parse_vidur_row(const char *line, int64_t *ts_ns, trace_request *r, char *why,
                          size_t whycap)
{
	const char *f[2];
	size_t len[2];
	size_t n = split_csv(line, f, len, 2);
	if (n < 2) {
		say(why, whycap,
		    "expected at least 2 comma-separated fields (num_prefill_tokens,"
		    "num_decode_tokens,...), found %zu (truncated line?)",
		    n);
		return -1;
	}
	*ts_ns = 0;
	if (parse_tokens(f[0], len[0], "num_prefill_tokens", 1, &r->prompt, why, whycap) != 0)
		return -1;
	return parse_tokens(f[1], len[1], "num_decode_tokens", 0, &r->output, why, whycap);
}

/* --- a strict JSON reader for one line ---------------------------------------- */

typedef struct jp {
	const char *p;
	char *why;
	size_t whycap;
} jp;

enum jkind { J_NUMBER, J_STRING, J_ARRAY, J_OBJECT, J_LITERAL };
static const char *const jkind_name[] = {"a number", "a string", "an array", "an object",
                                         "true/false/null"};

static void jws(jp *j)
{
	while (*j->p == ' ' || *j->p == '\t' || *j->p == '\r' || *j->p == '\n')
		j->p++;
}

static int jend(jp *j)
{
	say(j->why, j->whycap, "truncated JSON: the line ends inside the object");
	return -1;
}

static int jbad(jp *j, const char *expected)
{
	char q[64];
	if (*j->p == '\0')
		return jend(j);
	say(j->why, j->whycap, "malformed JSON: expected %s at '%s'", expected,
	    quote(j->p, strlen(j->p), q, sizeof q));
	return -1;
}

/* A string starting at '"'; sets [*s, *n) to its raw (unescaped) contents. */
static int jstring(jp *j, const char **s, size_t *n)
{
	if (*j->p != '"')
		return jbad(j, "'\"'");
	const char *start = ++j->p;
	for (;;) {
		char c = *j->p;
		if (c == '\0')
			return jend(j);
		if (c == '"')
			break;
		if ((unsigned char)c < 0x20)
			return jbad(j, "no control character in a string");
		if (c == '\\') {
			j->p++;
			if (*j->p == '\0')
				return jend(j);
			if (*j->p == 'u') {
				for (int k = 1; k <= 4; k++) {
					char h = j->p[k];
					if (h == '\0')
						return jend(j);
					if (!((h >= '0' && h <= '9') || (h >= 'a' && h <= 'f') ||
					      (h >= 'A' && h <= 'F')))
						return jbad(j, "4 hex digits after \\u");
				}
				j->p += 4;
			} else if (strchr("\"\\/bfnrt", *j->p) == NULL) {
				return jbad(j, "a valid escape");
			}
		}
		j->p++;
	}
	*s = start;
	*n = (size_t)(j->p - start);
	j->p++;
	return 0;
}

/* A JSON number; [*s, *n) is its text, *integral whether it has no fraction/exponent. */
static int jnumber(jp *j, const char **s, size_t *n, bool *integral)
{
	const char *start = j->p;
	*integral = true;
	if (*j->p == '-')
		j->p++;
	if (*j->p == '0') {
		j->p++;
	} else if (*j->p >= '1' && *j->p <= '9') {
		while (*j->p >= '0' && *j->p <= '9')
			j->p++;
	} else {
		return jbad(j, "a digit");
	}
	if (*j->p == '.') {
		*integral = false;
		j->p++;
		if (!(*j->p >= '0' && *j->p <= '9'))
			return jbad(j, "a digit after '.'");
		while (*j->p >= '0' && *j->p <= '9')
			j->p++;
	}
	if (*j->p == 'e' || *j->p == 'E') {
		*integral = false;
		j->p++;
		if (*j->p == '+' || *j->p == '-')
			j->p++;
		if (!(*j->p >= '0' && *j->p <= '9'))
			return jbad(j, "a digit in the exponent");
		while (*j->p >= '0' && *j->p <= '9')
			j->p++;
	}
	*s = start;
	*n = (size_t)(j->p - start);
	return 0;
}

static enum jkind jpeek(jp *j)
{
	switch (*j->p) {
	case '"':
		return J_STRING;
	case '[':
		return J_ARRAY;
	case '{':
		return J_OBJECT;
	case 't':
	case 'f':
	case 'n':
		return J_LITERAL;
	default:
		return J_NUMBER;
	}
}

static int jskip(jp *j, int depth);

/* '[' or '{' ... matching close; calls jskip on members. */
static int jskip_container(jp *j, int depth, bool object)
{
	char close = object ? '}' : ']';
	if (depth > JSON_MAX_DEPTH) {
		say(j->why, j->whycap, "malformed JSON: nested deeper than %d", JSON_MAX_DEPTH);
		return -1;
	}
	j->p++;
	jws(j);
	if (*j->p == close) {
		j->p++;
		return 0;
	}
	for (;;) {
		jws(j);
		if (object) {
			const char *s;
			size_t n;
			if (jstring(j, &s, &n) != 0)
				return -1;
			jws(j);
			if (*j->p != ':')
				return jbad(j, "':'");
			j->p++;
			jws(j);
		}
		if (jskip(j, depth + 1) != 0)
			return -1;
		jws(j);
		if (*j->p == ',') {
			j->p++;
			continue;
		}
		if (*j->p == close) {
			j->p++;
			return 0;
		}
		return jbad(j, object ? "',' or '}'" : "',' or ']'");
	}
}

static int jskip(jp *j, int depth)
{
	const char *s;
	size_t n;
	bool integral;
	switch (jpeek(j)) {
	case J_STRING:
		return jstring(j, &s, &n);
	case J_ARRAY:
		return jskip_container(j, depth, false);
	case J_OBJECT:
		return jskip_container(j, depth, true);
	case J_LITERAL:
		for (const char *lit = *j->p == 't'   ? "true"
		                       : *j->p == 'f' ? "false"
		                                      : "null";
		     *lit; lit++, j->p++) {
			if (*j->p != *lit)
				return jbad(j, "true, false or null");
		}
		return 0;
	default:
		return jnumber(j, &s, &n, &integral);
	}
}

/* A key's value that must be a number; *neg and *integral describe it. */
static int jwant_number(jp *j, const char *key, const char **s, size_t *n, bool *integral)
{
	enum jkind k = jpeek(j);
	if (*j->p == '\0')
		return jend(j);
	if (k != J_NUMBER) {
		say(j->why, j->whycap, "%s: expected a number, got %s", key, jkind_name[k]);
		return -1;
	}
	return jnumber(j, s, n, integral);
}

static int jtokens(jp *j, const char *key, uint32_t min, uint32_t *out)
{
	const char *s;
	size_t n;
	bool integral;
	char q[64];
	if (jwant_number(j, key, &s, &n, &integral) != 0)
		return -1;
	if (s[0] == '-') {
		say(j->why, j->whycap, "%s: negative token count %s", key,
		    quote(s, n, q, sizeof q));
		return -1;
	}
	if (!integral) {
		say(j->why, j->whycap, "%s: not a whole number: %s", key, quote(s, n, q, sizeof q));
		return -1;
	}
	return parse_tokens(s, n, key, min, out, j->why, j->whycap);
}

/* Append one hash id to @t's array. */
static int push_hash(trace *t, uint64_t v)
{
	if (t->n_hash_ids >= UINT32_MAX) /* trace_request.hash_off is 32 bits */
		return -1;
	if (t->n_hash_ids == t->hash_cap) {
		size_t nc = t->hash_cap ? t->hash_cap * 2 : 4096;
		uint64_t *nh = realloc(t->hash_ids, nc * sizeof *nh);
		if (nh == NULL)
			return -1;
		t->hash_ids = nh;
		t->hash_cap = nc;
	}
	t->hash_ids[t->n_hash_ids++] = v;
	return 0;
}

/* The array of "hash_ids" at '['; each element a non-negative integer below
 * 2^64, appended to @t (when not NULL) and counted in r->n_hash. */
static int jhash_ids(jp *j, trace *t, trace_request *r)
{
	char q[64], tmp[32];
	j->p++; /* '[' */
	jws(j);
	if (*j->p == ']') {
		j->p++;
		return 0;
	}
	for (;;) {
		const char *s;
		size_t n;
		bool integral;
		jws(j);
		if (jnumber(j, &s, &n, &integral) != 0)
			return -1;
		if (!integral || s[0] == '-' || n >= sizeof tmp) {
			say(j->why, j->whycap,
			    "hash_ids: element %u is not a non-negative integer below 2^64: %s",
			    r->n_hash, quote(s, n, q, sizeof q));
			return -1;
		}
		memcpy(tmp, s, n);
		tmp[n] = '\0';
		errno = 0;
		unsigned long long v = strtoull(tmp, NULL, 10);
		if (errno == ERANGE) {
			say(j->why, j->whycap, "hash_ids: element %u is 2^64 or more: %s",
			    r->n_hash, quote(s, n, q, sizeof q));
			return -1;
		}
		if (t != NULL && push_hash(t, v) != 0) {
			say(j->why, j->whycap, "hash_ids: out of memory (or 2^32 ids)");
			return -1;
		}
		r->n_hash++;
		jws(j);
		if (*j->p == ',') {
			j->p++;
			continue;
		}
		if (*j->p == ']') {
			j->p++;
			return 0;
		}
		return jbad(j, "',' or ']'");
	}
}

/* The keys of a Mooncake row that carry something, and which were seen. */
typedef struct mc_seen {
	bool ts, in, out, hash;
} mc_seen;

/* "timestamp": milliseconds, 0 .. 9e12 (~285 years: keeps ns in int64). */
static int jtimestamp(jp *j, int64_t *ts_ns)
{
	const char *s;
	size_t n;
	bool integral;
	char q[64], tmp[64];
	if (jwant_number(j, "timestamp", &s, &n, &integral) != 0)
		return -1;
	if (s[0] == '-' || n >= sizeof tmp) {
		say(j->why, j->whycap, "timestamp: %s milliseconds: %s",
		    s[0] == '-' ? "negative" : "too many digits in", quote(s, n, q, sizeof q));
		return -1;
	}
	memcpy(tmp, s, n);
	tmp[n] = '\0';
	double ms = strtod(tmp, NULL);
	if (!(ms <= 9.0e12)) {
		say(j->why, j->whycap, "timestamp: too large: %s", quote(s, n, q, sizeof q));
		return -1;
	}
	*ts_ns = (int64_t)(ms * 1e6 + 0.5);
	return 0;
}

/* "hash_ids": an array of ids, appended to @t when @t is not NULL. */
static int jhash_field(jp *j, trace *t, trace_request *r)
{
	enum jkind k = jpeek(j);
	if (*j->p == '\0')
		return jend(j);
	if (k != J_ARRAY) {
		say(j->why, j->whycap, "hash_ids: expected an array, got %s", jkind_name[k]);
		return -1;
	}
	r->hash_off = t != NULL ? (uint32_t)t->n_hash_ids : 0;
	return jhash_ids(j, t, r);
}

/* One "key": value member of a Mooncake row; other keys' values are skipped. */
static int mooncake_member(jp *j, mc_seen *seen, int64_t *ts_ns, trace_request *r, trace *t)
{
	const char *key, *name = NULL;
	size_t kn;
	bool *flag = NULL;
	jws(j);
	if (jstring(j, &key, &kn) != 0)
		return -1;
	jws(j);
	if (*j->p != ':')
		return jbad(j, "':'");
	j->p++;
	jws(j);
	if (kn == 9 && memcmp(key, "timestamp", 9) == 0)
		flag = &seen->ts, name = "timestamp";
	else if (kn == 12 && memcmp(key, "input_length", 12) == 0)
		flag = &seen->in, name = "input_length";
	else if (kn == 13 && memcmp(key, "output_length", 13) == 0)
		flag = &seen->out, name = "output_length";
	else if (kn == 8 && memcmp(key, "hash_ids", 8) == 0)
		flag = &seen->hash, name = "hash_ids";
	if (flag == NULL)
		return jskip(j, 1);
	if (*flag) {
		say(j->why, j->whycap, "duplicate key \"%s\"", name);
		return -1;
	}
	int rc = flag == &seen->ts    ? jtimestamp(j, ts_ns)
	         : flag == &seen->in  ? jtokens(j, name, 1, &r->prompt)
	         : flag == &seen->out ? jtokens(j, name, 0, &r->output)
	                              : jhash_field(j, t, r);
	if (rc != 0)
		return -1;
	*flag = true;
	return 0;
}

/* One Mooncake row; its hash ids go to @t when @t is not NULL (the caller
 * drops them again if the row fails). */
static int mooncake_row(const char *line, int64_t *ts_ns, trace_request *r, trace *t, char *why,
                        size_t whycap)
{
	jp j = {.p = line, .why = why, .whycap = whycap};
	mc_seen seen = {0};
	char q[64];
	jws(&j);
	if (*j.p != '{')
		return jbad(&j, "a JSON object '{'");
	j.p++;
	jws(&j);
	if (*j.p == '}')
		j.p++;
	else
		for (;;) {
			if (mooncake_member(&j, &seen, ts_ns, r, t) != 0)
				return -1;
			jws(&j);
			if (*j.p == ',') {
				j.p++;
				continue;
			}
			if (*j.p == '}') {
				j.p++;
				break;
			}
			return jbad(&j, "',' or '}'");
		}
	jws(&j);
	if (*j.p != '\0') {
		say(why, whycap, "trailing characters after the JSON object: '%s'",
		    quote(j.p, strlen(j.p), q, sizeof q));
		return -1;
	}
	const char *missing = !seen.ts    ? "timestamp"
	                      : !seen.in  ? "input_length"
	                      : !seen.out ? "output_length"
	                                  : NULL;
	if (missing != NULL) {
		say(why, whycap, "missing key \"%s\"", missing);
		return -1;
	}
	return 0;
}

int trace_parse_mooncake_row(const char *line, int64_t *ts_ns, trace_request *r, char *why,
                             size_t whycap)
{
	return mooncake_row(line, ts_ns, r, NULL, why, whycap);
}

/* --- file reading --------------------------------------------------------------- */

static bool blank(const char *s)
{
	for (; *s; s++) {
		if (*s != ' ' && *s != '\t' && *s != '\r' && *s != '\n')
			return false;
	}
	return true;
}

static bool starts_with(const char *s, const char *prefix)
{
	return strncmp(s, prefix, strlen(prefix)) == 0;
}

typedef struct stamped {
	int64_t ts;
	size_t idx;
} stamped;

static int cmp_stamped(const void *a, const void *b)
{
	const stamped *x = a, *y = b;
	if (x->ts != y->ts)
		return x->ts < y->ts ? -1 : 1;
	return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* Make arrivals relative to the earliest and order by arrival (stable). */
static int finish(trace *t, int64_t *ts)
{
	int64_t t0 = ts[0];
	bool sorted = true;
	for (size_t i = 0; i < t->n; i++) {
		if (ts[i] < t0)
			t0 = ts[i];
		if (i > 0 && ts[i] < ts[i - 1])
			sorted = false;
	}
	if (!sorted) {
		stamped *s = malloc(t->n * sizeof *s);
		trace_request *copy = malloc(t->n * sizeof *copy);
		if (s == NULL || copy == NULL) {
			free(s);
			free(copy);
			return -1;
		}
		for (size_t i = 0; i < t->n; i++)
			s[i] = (stamped){ts[i], i};
		qsort(s, t->n, sizeof *s, cmp_stamped);
		for (size_t i = 0; i < t->n; i++) {
			copy[i] = t->req[s[i].idx];
			ts[i] = s[i].ts;
		}
		memcpy(t->req, copy, t->n * sizeof *copy);
		free(copy);
		free(s);
	}
	/* in uint64: ts spans up to 1900..2200, more than int64 can subtract;
	 * the difference itself (< 2^64) is exact modulo 2^64 */
	for (size_t i = 0; i < t->n; i++)
		t->req[i].arrival_ns = (uint64_t)ts[i] - (uint64_t)t0;
	return 0;
}

/*
 * read_line - one line of @f into *@buf (NUL-terminated, '\n' kept), at most
 * TRACE_MAX_LINE bytes.  Returns its length (>= 1), 0 at the end of the
 * file, -1 on a read error or when memory ran out (errno says which), -2
 * when the line is longer than TRACE_MAX_LINE.
 */
static ssize_t read_line(FILE *f, char **buf, size_t *cap)
{
	size_t n = 0;
	int c;

	errno = 0;
	for (;;) {
		c = getc(f);
		if (c == EOF)
			break;
		if (n + 2 > *cap) {
			size_t nc = *cap ? *cap * 2 : 256;
			if (nc > TRACE_MAX_LINE + 2)
				nc = TRACE_MAX_LINE + 2;
			if (n + 2 > nc)
				return -2;
			char *nb = realloc(*buf, nc);
			if (nb == NULL) {
				errno = ENOMEM;
				return -1;
			}
			*buf = nb;
			*cap = nc;
		}
		(*buf)[n++] = (char)c;
		if (c == '\n')
			break;
	}
	if (c == EOF && ferror(f)) {
		if (errno == 0)
			errno = EIO;
		return -1;
	}
	if (n == 0)
		return 0;
	(*buf)[n] = '\0';
	return (ssize_t)n;
}

/* A trace being read, line by line. */
typedef struct loader {
	const char *name; /* for messages: the file's name */
	trace_opts o;
	trace *out;
	char *err;
	size_t errcap;
	size_t lineno, tscap, n_logged;
	int64_t *ts; /* each request's timestamp, ns, for finish() */
	bool header_seen;
} loader;

/* Drop the line end ('\n', a CRLF file's '\r') and, on line 1, a UTF-8 byte order mark. */
static size_t trim_line(char *line, size_t len, size_t lineno)
{
	if (len > 0 && line[len - 1] == '\n')
		line[--len] = '\0';
	if (len > 0 && line[len - 1] == '\r') /* CRLF files */
		line[--len] = '\0';
	if (lineno == 1 && len >= 3 && memcmp(line, "\xef\xbb\xbf", 3) == 0) {
		memmove(line, line + 3, len - 2); /* UTF-8 byte order mark */
		len -= 3;
	}
	return len;
}

/* --format auto: the format from the first line that is not blank; 0, or -1 (err said). */
static int detect_format(loader *L, const char *line, size_t len)
{
	char q[64];
	if (line[strspn(line, " \t")] == '{')
		L->out->format = TRACE_MOONCAKE;
	else if (starts_with(line, "TIMESTAMP,"))
		L->out->format = TRACE_AZURE;
	else if (starts_with(line, "num_prefill_tokens,"))
		L->out->format = TRACE_VIDUR;
	else {
		say(L->err, L->errcap,
		    "%s:%zu: cannot tell the trace format from '%s': expected an "
		    "Azure CSV header (" AZURE_HEADER "), a Vidur header (" VIDUR_HEADER
		    ",...) or a Mooncake JSON object; use --format",
		    L->name, L->lineno, quote(line, len, q, sizeof q));
		return -1;
	}
	return 0;
}

/* The CSV formats' header line; 0, or -1 (err said). */
static int check_header(loader *L, const char *line)
{
	char q[64];
	trace_format fmt = L->out->format;
	const char *want = fmt == TRACE_AZURE ? AZURE_HEADER : VIDUR_HEADER;
	bool ok = fmt == TRACE_AZURE ? strcmp(line, want) == 0 : starts_with(line, want);
	if (!ok) {
		say(L->err, L->errcap, "%s:%zu: expected the header '%s%s', got '%s'", L->name,
		    L->lineno, want, fmt == TRACE_VIDUR ? ",..." : "",
		    quote(line, strlen(line), q, sizeof q));
		return -1;
	}
	L->header_seen = true;
	return 0;
}

/* Append request @r that arrives at @t ns; 0, or -1 (err said: out of memory). */
static int add_request(loader *L, const trace_request *r, int64_t t)
{
	trace *out = L->out;
	if (out->n == out->cap) {
		size_t nc = out->cap ? out->cap * 2 : 1024;
		trace_request *nr = realloc(out->req, nc * sizeof *nr);
		if (nr == NULL)
			goto oom;
		out->req = nr;
		out->cap = nc;
	}
	if (out->n == L->tscap) {
		size_t nc = L->tscap ? L->tscap * 2 : 1024;
		int64_t *nt = realloc(L->ts, nc * sizeof *nt);
		if (nt == NULL)
			goto oom;
		L->ts = nt;
		L->tscap = nc;
	}
	out->req[out->n] = *r;
	L->ts[out->n] = t;
	out->n++;
	return 0;
oom:
	say(L->err, L->errcap, "%s: out of memory after %zu requests", L->name, out->n);
	return -1;
}

/* A malformed row (@why): -1 (err said) unless --on-error skip, then 0 (counted, logged). */
static int bad_row(loader *L, const char *why)
{
	if (!L->o.skip_bad) {
		say(L->err, L->errcap, "%s:%zu: %s", L->name, L->lineno, why);
		return -1;
	}
	L->out->n_skipped++;
	if (L->o.log != NULL && L->n_logged < L->o.max_logged) {
		fprintf(L->o.log, "%s:%zu: %s (row skipped)\n", L->name, L->lineno, why);
		if (++L->n_logged == L->o.max_logged)
			fprintf(L->o.log, "%s: further skipped rows are not shown\n", L->name);
	}
	return 0;
}

/* One line (@len bytes, line end dropped): 0 go on, 1 --limit reached, -1 fail (err said). */
static int load_line(loader *L, char *line, size_t len)
{
	trace *out = L->out;
	char why[256];
	if (strlen(line) != len) {
		say(why, sizeof why, "NUL byte inside the line");
		return bad_row(L, why);
	}
	if (blank(line))
		return 0;
	if (out->format == TRACE_AUTO && detect_format(L, line, len) != 0)
		return -1;
	if (!L->header_seen && out->format != TRACE_MOONCAKE)
		return check_header(L, line);
	trace_request r = {0};
	int64_t t = 0;
	size_t hash_mark = out->n_hash_ids;
	int prc = out->format == TRACE_AZURE ? trace_parse_azure_row(line, &t, &r, why, sizeof why)
	          : out->format == TRACE_MOONCAKE
	              ? mooncake_row(line, &t, &r, out, why, sizeof why)
	              : trace_parse_vidur_row(line, &t, &r, why, sizeof why);
	if (prc != 0) {
		out->n_hash_ids = hash_mark; /* drop the bad row's ids */
		return bad_row(L, why);
	}
	if (add_request(L, &r, t) != 0)
		return -1;
	return L->o.max_rows != 0 && out->n >= L->o.max_rows ? 1 : 0;
}

/* After the last line (@len: read_line's last answer): 0, or -1 (err said). */
static int check_end(loader *L, ssize_t len)
{
	const char *name = L->name;
	if (len == -2) {
		say(L->err, L->errcap, "%s:%zu: line longer than %u bytes (not a trace file?)",
		    name, L->lineno + 1, (unsigned)TRACE_MAX_LINE);
		return -1;
	}
	if (len == -1) {
		say(L->err, L->errcap, "%s: read error after line %zu: %s", name, L->lineno,
		    strerror(errno ? errno : EIO));
		return -1;
	}
	if (L->out->n > 0)
		return 0;
	if (L->lineno == 0 || (!L->header_seen && L->out->format == TRACE_AUTO))
		say(L->err, L->errcap, "%s: empty file: no requests", name);
	else if (L->out->n_skipped > 0)
		say(L->err, L->errcap, "%s: no valid requests (%zu malformed rows skipped)", name,
		    L->out->n_skipped);
	else
		say(L->err, L->errcap, "%s: no requests (%s)", name,
		    L->header_seen ? "only a header" : "only blank lines");
	return -1;
}

int trace_load_stream(FILE *f, const char *name, const trace_opts *opts, trace *out, char *err,
                      size_t errcap)
{
	loader L = {.name = name, .out = out, .err = err, .errcap = errcap};
	char *line = NULL;
	size_t linecap = 0;
	int rc = -1, step = 0;
	ssize_t len;

	if (opts != NULL)
		L.o = *opts;
	if (L.o.max_logged == 0)
		L.o.max_logged = 20;
	memset(out, 0, sizeof *out);
	out->format = L.o.format;
	errno = 0;
	while ((len = read_line(f, &line, &linecap)) > 0) {
		L.lineno++;
		out->n_lines = L.lineno;
		step = load_line(&L, line, trim_line(line, (size_t)len, L.lineno));
		if (step != 0)
			break;
	}
	if (step >= 0 && check_end(&L, len) == 0) {
		if (finish(out, L.ts) != 0)
			say(err, errcap, "%s: out of memory while sorting", name);
		else
			rc = 0;
	}
	free(line);
	free(L.ts);
	return rc;
}

int trace_load(const char *path, const trace_opts *opts, trace *out, char *err, size_t errcap)
{
	memset(out, 0, sizeof *out);
	FILE *f = fopen(path, "r");
	if (f == NULL) {
		say(err, errcap, "%s: cannot open: %s", path, strerror(errno));
		return -1;
	}
	int rc = trace_load_stream(f, path, opts, out, err, errcap);
	fclose(f);
	return rc;
}

void trace_free(trace *t)
{
	if (t == NULL)
		return;
	free(t->req);
	free(t->hash_ids);
	t->req = NULL;
	t->hash_ids = NULL;
	t->n = t->cap = 0;
	t->n_hash_ids = t->hash_cap = 0;
}
