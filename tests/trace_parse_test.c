/*
 * tests/trace_parse_test.c - the trace readers of kvpool_replay (stress/trace.c):
 * valid files of each format, and every kind of malformed input giving a
 * clear error (file:line and what was wrong), in stop and skip modes.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stress/trace.h"
#include "tests/testutil.h"

static char err[512];

/* Load @text as a trace named "t"; returns trace_load_stream's result. */
static int load(const char *text, trace_opts *o, trace *t)
{
	/* fmemopen of a zero-length buffer is not portable: use a temp file. */
	FILE *f = tmpfile();
	CHECK(f != NULL);
	fwrite(text, 1, strlen(text), f);
	rewind(f);
	err[0] = '\0';
	int rc = trace_load_stream(f, "t", o, t, err, sizeof err);
	fclose(f);
	return rc;
}

static void expect_error(const char *text, const char *want)
{
	trace t;
	CHECK_EQ(load(text, NULL, &t), -1);
	if (strstr(err, want) == NULL) {
		fprintf(stderr, "error '%s' does not contain '%s'\n", err, want);
		CHECK(0);
	}
	trace_free(&t);
}

static void test_azure_valid(void)
{
	trace t;
	CHECK_EQ(load("TIMESTAMP,ContextTokens,GeneratedTokens\n"
	              "2023-11-16 18:15:46.6805900,374,44\n"
	              "2023-11-16 18:15:50.9951690,396,109\r\n"
	              "\n"
	              "2023-11-17 00:00:00,1,0", /* next day, no fraction, no final newline */
	              NULL, &t),
	         0);
	CHECK_EQ(t.format, TRACE_AZURE);
	CHECK_EQ(t.n, 3);
	CHECK_EQ(t.req[0].arrival_ns, 0);
	CHECK_EQ(t.req[0].prompt, 374);
	CHECK_EQ(t.req[0].output, 44);
	CHECK_EQ(t.req[1].arrival_ns, 4314579000ull);
	CHECK_EQ(t.req[1].output, 109);
	/* 18:15:46.68059 -> 00:00:00 next day = 20653.31941 s */
	CHECK_EQ(t.req[2].arrival_ns, 20653319410000ull);
	CHECK_EQ(t.req[2].prompt, 1);
	CHECK_EQ(t.req[2].output, 0);
	trace_free(&t);
}

static void test_mooncake_valid(void)
{
	trace t;
	CHECK_EQ(load("{\"timestamp\": 0, \"input_length\": 6758, \"output_length\": 500, "
	              "\"hash_ids\": [0, 1, 2]}\n"
	              "{\"output_length\": 3, \"extra\": {\"a\": [1, \"x\\\"y\", null]}, "
	              "\"input_length\": 10, \"timestamp\": 3000.5}\n",
	              NULL, &t),
	         0);
	CHECK_EQ(t.format, TRACE_MOONCAKE);
	CHECK_EQ(t.n, 2);
	CHECK_EQ(t.req[0].prompt, 6758);
	CHECK_EQ(t.req[0].output, 500);
	CHECK_EQ(t.req[1].arrival_ns, 3000500000ull);
	CHECK_EQ(t.req[1].prompt, 10);
	CHECK_EQ(t.req[1].output, 3);
	trace_free(&t);
}

/* hash_ids are kept per row (out of order rows keep theirs), bad elements refused. */
static void test_mooncake_hash_ids(void)
{
	trace t;
	trace_opts o = {.skip_bad = true};
	CHECK_EQ(load("{\"timestamp\": 5, \"input_length\": 600, \"output_length\": 1, "
	              "\"hash_ids\": [7, 9223372036854775807]}\n"
	              "{\"timestamp\": 1, \"input_length\": 2, \"output_length\": 1, "
	              "\"hash_ids\": [3, 1.5]}\n" /* skipped: its ids must not stay */
	              "{\"timestamp\": 2, \"input_length\": 2, \"output_length\": 1, "
	              "\"hash_ids\": [ ]}\n"
	              "{\"timestamp\": 3, \"input_length\": 9, \"output_length\": 1, "
	              "\"hash_ids\": [0]}\n"
	              "{\"timestamp\": 4, \"input_length\": 9, \"output_length\": 1}\n",
	              &o, &t),
	         0);
	CHECK_EQ(t.n, 4);
	CHECK_EQ(t.n_skipped, 1);
	CHECK_EQ(t.n_hash_ids, 3);
	CHECK_EQ(t.req[0].n_hash, 0); /* timestamp 2: empty array */
	CHECK_EQ(t.req[1].n_hash, 1);
	CHECK_EQ(t.hash_ids[t.req[1].hash_off], 0);
	CHECK_EQ(t.req[2].n_hash, 0); /* no hash_ids */
	CHECK_EQ(t.req[3].n_hash, 2); /* sorted last, its ids still its own */
	CHECK(t.hash_ids[t.req[3].hash_off] == 7);
	CHECK(t.hash_ids[t.req[3].hash_off + 1] == INT64_MAX); /* jansson's json_int_t */
	trace_free(&t);
	expect_error("{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, "
	             "\"hash_ids\": [1, -2]}\n",
	             "t:1: hash_ids: element 1 is not a non-negative integer below 2^63: -2");
	expect_error("{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, "
	             "\"hash_ids\": [9223372036854775808]}\n",
	             "t:1: malformed JSON at column 88: too big integer near '9223372036854775808' "
	             "(integers must be below 2^63");
	expect_error("{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, "
	             "\"hash_ids\": [\"a\"]}\n",
	             "t:1: hash_ids: element 0 is not a non-negative integer below 2^63: \"a\"");
	expect_error("{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, "
	             "\"hash_ids\": [1 2]}\n",
	             "t:1: malformed JSON at column 72: ']' expected near '2'");
}

static void test_vidur_valid(void)
{
	trace t;
	CHECK_EQ(load("num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n"
	              "3772,54,3826,69.85185185185185\n2015,156,2171,12.9\n",
	              NULL, &t),
	         0);
	CHECK_EQ(t.format, TRACE_VIDUR);
	CHECK_EQ(t.n, 2);
	CHECK_EQ(t.req[1].prompt, 2015);
	CHECK_EQ(t.req[1].arrival_ns, 0);
	trace_free(&t);
}

static void test_out_of_order_is_sorted(void)
{
	trace t;
	CHECK_EQ(load("{\"timestamp\": 5, \"input_length\": 1, \"output_length\": 1}\n"
	              "{\"timestamp\": 2, \"input_length\": 2, \"output_length\": 1}\n"
	              "{\"timestamp\": 5, \"input_length\": 3, \"output_length\": 1}\n",
	              NULL, &t),
	         0);
	CHECK_EQ(t.req[0].prompt, 2);
	CHECK_EQ(t.req[1].prompt, 1); /* stable among equal times */
	CHECK_EQ(t.req[2].prompt, 3);
	CHECK_EQ(t.req[2].arrival_ns, 3000000);
	trace_free(&t);
}

static void test_truncated_lines(void)
{
	expect_error("TIMESTAMP,ContextTokens,GeneratedTokens\n"
	             "2023-11-16 18:15:46.6805900,374,44\n"
	             "2023-11-16 18:15:50.99516",
	             "t:3: expected 3 comma-separated fields");
	expect_error("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,\n",
	             "t:2: GeneratedTokens: empty field");
	expect_error("{\"timestamp\": 0, \"input_length\": 6758, \"output_length\": 500}\n"
	             "{\"timestamp\": 0, \"input_length\": 67",
	             "t:2: truncated JSON");
	expect_error("{\"timestamp\": 0, \"input_length\": 6758, \"hash_ids\": [0, 1\n",
	             "t:1: truncated JSON");
	expect_error("num_prefill_tokens,num_decode_tokens\n3772\n", "t:2: expected at least 2");
}

static void test_negative_tokens(void)
{
	expect_error("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,-5,44\n",
	             "t:2: ContextTokens: negative token count '-5'");
	expect_error("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,5,-1\n",
	             "t:2: GeneratedTokens: negative token count '-1'");
	expect_error("{\"timestamp\": 0, \"input_length\": -3, \"output_length\": 5}\n",
	             "t:1: input_length: negative token count -3");
	expect_error("{\"timestamp\": -1, \"input_length\": 3, \"output_length\": 5}\n",
	             "t:1: timestamp: negative");
}

static void test_non_numeric_tokens(void)
{
	expect_error("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,abc,44\n",
	             "t:2: ContextTokens: not a whole number: 'abc'");
	expect_error("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,12.5,44\n",
	             "t:2: ContextTokens: not a whole number: '12.5'");
	expect_error("{\"timestamp\": 0, \"input_length\": \"12\", \"output_length\": 5}\n",
	             "t:1: input_length: expected a number, got a string");
	expect_error("{\"timestamp\": 0, \"input_length\": 12, \"output_length\": 2.5}\n",
	             "t:1: output_length: not a whole number: 2.5");
	expect_error("{\"timestamp\": 0, \"input_length\": 1e3, \"output_length\": 2}\n",
	             "t:1: input_length: not a whole number: 1000.0");
	expect_error(
	    "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,99999999999,4\n",
	    "t:2: ContextTokens: too large");
	expect_error("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,4\n",
	             "t:2: TIMESTAMP: expected 'YYYY-MM-DD HH:MM:SS[.fraction]', got 'yesterday'");
	expect_error("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-02-29 00:00:00,1,4\n",
	             "t:2: TIMESTAMP: no such date");
	expect_error("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,0,4\n",
	             "t:2: ContextTokens: must be at least 1, got 0");
}

static void test_empty_and_headers(void)
{
	expect_error("", "t: empty file: no requests");
	expect_error("\n\n  \n", "t: empty file: no requests");
	expect_error("TIMESTAMP,ContextTokens,GeneratedTokens\n", "t: no requests (only a header)");
	expect_error("hello,world\n1,2\n", "t:1: cannot tell the trace format");
	trace_opts o = {.format = TRACE_AZURE};
	trace t;
	CHECK_EQ(load("TIMESTAMP,Context,Generated\n", &o, &t), -1);
	CHECK(strstr(err, "t:1: expected the header 'TIMESTAMP,ContextTokens,GeneratedTokens'") !=
	      NULL);
	trace_free(&t);
}

static void test_json_structure_errors(void)
{
	expect_error("{\"timestamp\": 0, \"output_length\": 5}\n",
	             "t:1: missing key \"input_length\"");
	expect_error(
	    "{\"timestamp\": 0, \"timestamp\": 1, \"input_length\": 1, \"output_length\": 5}\n",
	    "t:1: malformed JSON at column 28: duplicate object key near '\"timestamp\"'");
	expect_error("{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 5} x\n",
	             "t:1: trailing characters");
	expect_error("{\"timestamp\": 0 \"input_length\": 1}\n",
	             "t:1: malformed JSON at column 30: '}' expected near '\"input_length\"'");
	expect_error(
	    "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": 7}\n",
	    "t:1: hash_ids: expected an array, got an integer: 7");
	expect_error("{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1}\n[1]\n",
	             "t:2: expected a JSON object, got an array: [1]");
	/* Deep nesting is refused, not a stack overflow. */
	char deep[2200];
	size_t o = (size_t)snprintf(deep, sizeof deep, "{\"x\": ");
	for (int i = 0; i < 2100; i++) /* jansson's limit: 2048 */
		deep[o++] = '[';
	deep[o++] = '\n';
	deep[o] = '\0';
	expect_error(deep, "t:1: malformed JSON at column 2054: maximum parsing depth reached");
}

static void test_nul_byte(void)
{
	static const char text[] =
	    "{\"timestamp\": 0, \"input_length\": 1,\0 \"output_length\": 1}\n";
	FILE *f = tmpfile();
	CHECK(f != NULL);
	fwrite(text, 1, sizeof text - 1, f);
	rewind(f);
	trace t;
	CHECK_EQ(trace_load_stream(f, "t", NULL, &t, err, sizeof err), -1);
	CHECK(strstr(err, "t:1: NUL byte") != NULL);
	fclose(f);
	trace_free(&t);
}

/* The line limit counts the line without its newline, so a last line with
 * no newline has the same limit: TRACE_MAX_LINE bytes pass (then fail as a
 * row), one more is too long, with or without the newline. */
static void test_line_limit(void)
{
	size_t n = TRACE_MAX_LINE + 2;
	char *text = malloc(n + 1);
	CHECK(text != NULL);
	for (int extra = 0; extra <= 1; extra++) {
		for (int nl = 0; nl <= 1; nl++) {
			size_t len = TRACE_MAX_LINE + (size_t)extra;
			memset(text, ' ', len);
			text[0] = '{';
			if (nl)
				text[len++] = '\n';
			text[len] = '\0';
			trace t;
			CHECK_EQ(load(text, NULL, &t), -1);
			bool too_long = strstr(err, "line longer than") != NULL;
			if (too_long != (extra == 1)) {
				fprintf(stderr, "%zu bytes%s: '%s'\n",
				        TRACE_MAX_LINE + (size_t)extra,
				        nl ? " and a newline" : ", no newline", err);
				CHECK(0);
			}
			trace_free(&t);
		}
	}
	free(text);
}

static void test_skip_mode(void)
{
	FILE *log = tmpfile();
	CHECK(log != NULL);
	trace_opts o = {.skip_bad = true, .log = log};
	trace t;
	CHECK_EQ(load("TIMESTAMP,ContextTokens,GeneratedTokens\n"
	              "2023-11-16 18:15:46.68,10,1\n"
	              "2023-11-16 18:15:47.68,x,1\n"
	              "2023-11-16 18:15:48.68,30,3\n"
	              "2023-11-16 18:15:49\n",
	              &o, &t),
	         0);
	CHECK_EQ(t.n, 2);
	CHECK_EQ(t.n_skipped, 2);
	CHECK_EQ(t.req[1].prompt, 30);
	char buf[1024];
	rewind(log);
	size_t n = fread(buf, 1, sizeof buf - 1, log);
	buf[n] = '\0';
	CHECK(strstr(buf, "t:3: ContextTokens: not a whole number: 'x' (row skipped)") != NULL);
	CHECK(strstr(buf, "t:5: expected 3 comma-separated fields") != NULL);
	fclose(log);
	trace_free(&t);

	/* Every row bad: an error even in skip mode. */
	o.log = NULL;
	CHECK_EQ(load("{\"timestamp\": 0}\n{\n", &o, &t), -1);
	CHECK(strstr(err, "t: no valid requests (2 malformed rows skipped)") != NULL);
	trace_free(&t);
}

static void test_max_rows(void)
{
	trace_opts o = {.max_rows = 2};
	trace t;
	CHECK_EQ(load("{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1}\n"
	              "{\"timestamp\": 1, \"input_length\": 2, \"output_length\": 1}\n"
	              "this line is never read\n",
	              &o, &t),
	         0);
	CHECK_EQ(t.n, 2);
	trace_free(&t);
}

/* Random mutations of valid rows: every parser returns 0 or -1 with a message, never crashes. */
static void test_fuzz_rows(void)
{
	static const char *const seeds[] = {
	    "2023-11-16 18:15:46.6805900,374,44",
	    "{\"timestamp\": 0, \"input_length\": 67, \"output_length\": 5, \"hash_ids\": [0]}",
	    "3772,54,3826,69.85185185185185",
	};
	static const char alphabet[] = "0123456789-+.,:{}[]\" eE\\utfn\t\x01\xff";
	uint64_t rng = 12345;
	char line[160], why[256];
	for (int it = 0; it < 30000; it++) {
		const char *s = seeds[it % 3];
		size_t n = strlen(s);
		memcpy(line, s, n + 1);
		int muts = 1 + (int)(tu_rand(&rng) % 4);
		for (int m = 0; m < muts; m++) {
			size_t at = tu_rand(&rng) % (n + 1);
			switch (tu_rand(&rng) % 3) {
			case 0: /* replace */
				if (at < n)
					line[at] = alphabet[tu_rand(&rng) % (sizeof alphabet - 1)];
				break;
			case 1: /* truncate */
				line[at] = '\0';
				n = at;
				break;
			default: /* insert */
				if (n + 2 < sizeof line) {
					memmove(line + at + 1, line + at, n - at + 1);
					line[at] = alphabet[tu_rand(&rng) % (sizeof alphabet - 1)];
					n++;
				}
			}
		}
		trace_request r;
		int64_t ts;
		why[0] = '\0';
		int rc = it % 3 == 0   ? trace_parse_azure_row(line, &ts, &r, why, sizeof why)
		         : it % 3 == 1 ? trace_parse_mooncake_row(line, &ts, &r, why, sizeof why)
		                       : trace_parse_vidur_row(line, &ts, &r, why, sizeof why);
		CHECK(rc == 0 || rc == -1);
		if (rc == -1)
			CHECK(why[0] != '\0');
		else
			CHECK(r.prompt >= 1 && r.prompt <= TRACE_MAX_TOKENS);
	}
}

int main(void)
{
	RUN(test_azure_valid);
	RUN(test_mooncake_valid);
	RUN(test_mooncake_hash_ids);
	RUN(test_vidur_valid);
	RUN(test_out_of_order_is_sorted);
	RUN(test_truncated_lines);
	RUN(test_negative_tokens);
	RUN(test_non_numeric_tokens);
	RUN(test_empty_and_headers);
	RUN(test_json_structure_errors);
	RUN(test_nul_byte);
	RUN(test_line_limit);
	RUN(test_skip_mode);
	RUN(test_max_rows);
	RUN(test_fuzz_rows);
	return 0;
}
