/*
 * stress/trace.c - trace readers (see trace.h).
 *
 * Rationale: traces come from outside and are read line by line with a
 * bounded reader (read_line), so a NUL byte, a missing final newline or a
 * file cut in the middle of a row are all handled, a line longer than
 * TRACE_MAX_LINE (a file that is no trace: /dev/zero, a binary) is an
 * error rather than an allocation of all memory, and a read error (EIO,
 * ENOMEM) is told from the end of the file.  The CSV rows are checked
 * against exactly the grammar of their format here; a Mooncake row is
 * parsed by jansson (strict RFC 8259, UTF-8 checked, duplicate keys
 * refused, nesting limited) and its fields checked here.  Every rejection
 * names the field and shows the offending value, or gives jansson's own
 * message with its column, so that a user can fix the file from the
 * message alone.
 */
#include "stress/trace.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#define AZURE_HEADER "TIMESTAMP,ContextTokens,GeneratedTokens"
#define VIDUR_HEADER "num_prefill_tokens,num_decode_tokens"

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

/* Quote at most @max bytes of @s (length @n) for a message, escaping non-printables. */
static const char *quote_max(const char *s, size_t n, size_t max, char *buf, size_t cap)
{
	size_t o = 0;
	for (size_t i = 0; i < n && o + 8 < cap; i++) {
		unsigned char c = (unsigned char)s[i];
		if (i == max) {
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

/* Quote at most 40 bytes of @s (length @n) for a message. */
static const char *quote(const char *s, size_t n, char *buf, size_t cap)
{
	return quote_max(s, n, 40, buf, cap);
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

/* --- Mooncake rows (jansson) ------------------------------------------------- */

/* What a JSON value is, for "expected X, got Y" messages. */
static const char *mc_kind(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT:
		return "an object";
	case JSON_ARRAY:
		return "an array";
	case JSON_STRING:
		return "a string";
	case JSON_INTEGER:
		return "an integer";
	case JSON_REAL:
		return "a real number";
	case JSON_TRUE:
	case JSON_FALSE:
		return "a boolean";
	default:
		return "null";
	}
}

/* @v written back as compact JSON, quoted (at most 40 bytes) into @buf for a message. */
static const char *show(const json_t *v, char *buf, size_t cap)
{
	char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
	if (s == NULL)
		return "(out of memory)";
	quote(s, strlen(s), buf, cap);
	free(s);
	return buf;
}

/* A token count: a JSON integer, min .. TRACE_MAX_TOKENS. */
static int mc_tokens(const json_t *v, const char *key, uint32_t min, uint32_t *out, char *why,
                     size_t whycap)
{
	char q[64];
	if (!json_is_number(v)) {
		say(why, whycap, "%s: expected a number, got %s: %s", key, mc_kind(v),
		    show(v, q, sizeof q));
		return -1;
	}
	if (json_number_value(v) < 0) {
		say(why, whycap, "%s: negative token count %s", key, show(v, q, sizeof q));
		return -1;
	}
	if (!json_is_integer(v)) {
		say(why, whycap, "%s: not a whole number: %s", key, show(v, q, sizeof q));
		return -1;
	}
	json_int_t n = json_integer_value(v);
	if (n > TRACE_MAX_TOKENS) {
		say(why, whycap, "%s: too large (more than %u tokens): %lld", key, TRACE_MAX_TOKENS,
		    (long long)n);
		return -1;
	}
	if (n < min) {
		say(why, whycap, "%s: must be at least %u, got %lld", key, min, (long long)n);
		return -1;
	}
	*out = (uint32_t)n;
	return 0;
}

/* "timestamp": milliseconds, integer or real, 0 .. 9e12 (~285 years: keeps ns in int64). */
static int mc_timestamp(const json_t *v, int64_t *ts_ns, char *why, size_t whycap)
{
	char q[64];
	if (!json_is_number(v)) {
		say(why, whycap, "timestamp: expected a number, got %s: %s", mc_kind(v),
		    show(v, q, sizeof q));
		return -1;
	}
	double ms = json_number_value(v);
	if (ms < 0) {
		say(why, whycap, "timestamp: negative milliseconds: %s", show(v, q, sizeof q));
		return -1;
	}
	if (!(ms <= 9.0e12)) {
		say(why, whycap, "timestamp: too large: %s", show(v, q, sizeof q));
		return -1;
	}
	*ts_ns = (int64_t)(ms * 1e6 + 0.5);
	return 0;
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

/*
 * "hash_ids": an array of non-negative integers (below 2^63: jansson's
 * json_int_t), appended to @t when @t is not NULL and counted in r->n_hash.
 */
static int mc_hash_ids(const json_t *v, trace *t, trace_request *r, char *why, size_t whycap)
{
	char q[64];
	size_t i;
	const json_t *e;
	if (!json_is_array(v)) {
		say(why, whycap, "hash_ids: expected an array, got %s: %s", mc_kind(v),
		    show(v, q, sizeof q));
		return -1;
	}
	r->hash_off = t != NULL ? (uint32_t)t->n_hash_ids : 0;
	json_array_foreach(v, i, e)
	{
		if (!json_is_integer(e) || json_integer_value(e) < 0) {
			say(why, whycap,
			    "hash_ids: element %zu is not a non-negative integer below 2^63: %s", i,
			    show(e, q, sizeof q));
			return -1;
		}
		if (t != NULL && push_hash(t, (uint64_t)json_integer_value(e)) != 0) {
			say(why, whycap, "hash_ids: out of memory (or 2^32 ids)");
			return -1;
		}
		r->n_hash++;
	}
	return 0;
}

/* jansson's rejection of @line as one line: what it says and at which column. */
static void mc_syntax_error(const json_error_t *e, char *why, size_t whycap)
{
	char q[200]; /* jansson's text, non-printables escaped */
	const char *text = quote_max(e->text, strlen(e->text), 120, q, sizeof q);
	switch (json_error_code(e)) {
	case json_error_premature_end_of_input:
		say(why, whycap, "truncated JSON: the line ends inside the object (column %d: %s)",
		    e->column, text);
		break;
	case json_error_end_of_input_expected:
		say(why, whycap, "trailing characters after the JSON object (column %d: %s)",
		    e->column, text);
		break;
	case json_error_numeric_overflow:
		say(why, whycap,
		    "malformed JSON at column %d: %s (integers must be below 2^63, reals fit a "
		    "double)",
		    e->column, text);
		break;
	default:
		say(why, whycap, "malformed JSON at column %d: %s", e->column, text);
	}
}

/* The fields of one parsed row @o; 0, or -1 (@why says). */
static int mooncake_fields(const json_t *o, int64_t *ts_ns, trace_request *r, trace *t, char *why,
                           size_t whycap)
{
	static const char *const required[] = {"timestamp", "input_length", "output_length"};
	for (int i = 0; i < 3; i++) {
		if (json_object_get(o, required[i]) == NULL) {
			say(why, whycap, "missing key \"%s\"", required[i]);
			return -1;
		}
	}
	if (mc_timestamp(json_object_get(o, "timestamp"), ts_ns, why, whycap) != 0 ||
	    mc_tokens(json_object_get(o, "input_length"), "input_length", 1, &r->prompt, why,
	              whycap) != 0 ||
	    mc_tokens(json_object_get(o, "output_length"), "output_length", 0, &r->output, why,
	              whycap) != 0)
		return -1;
	const json_t *h = json_object_get(o, "hash_ids");
	return h != NULL ? mc_hash_ids(h, t, r, why, whycap) : 0;
}

/* One Mooncake row (@len bytes); its hash ids go to @t when @t is not NULL (the
 * caller drops them again if the row fails). */
static int mooncake_row(const char *line, size_t len, int64_t *ts_ns, trace_request *r, trace *t,
                        char *why, size_t whycap)
{
	json_error_t e;
	char q[64];
	json_t *o = json_loadb(line, len, JSON_REJECT_DUPLICATES, &e);
	if (o == NULL) {
		mc_syntax_error(&e, why, whycap);
		return -1;
	}
	int rc = -1;
	if (!json_is_object(o))
		say(why, whycap, "expected a JSON object, got %s: %s", mc_kind(o),
		    show(o, q, sizeof q));
	else
		rc = mooncake_fields(o, ts_ns, r, t, why, whycap);
	json_decref(o);
	return rc;
}

int trace_parse_mooncake_row(const char *line, int64_t *ts_ns, trace_request *r, char *why,
                             size_t whycap)
{
	return mooncake_row(line, strlen(line), ts_ns, r, NULL, why, whycap);
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
	/* The limit is on the line without its '\n': a last line with no
	 * newline gets no extra byte. */
	if (n - ((*buf)[n - 1] == '\n') > TRACE_MAX_LINE)
		return -2;
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
	              ? mooncake_row(line, len, &t, &r, out, why, sizeof why)
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
