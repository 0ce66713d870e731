/*
 * tests/fuzz/trace_fuzz.c - libFuzzer: the trace readers (stress/trace.h).
 *
 * The first byte picks the format (auto, azure, mooncake, vidur), skip_bad
 * and a row limit; the rest is the file, read through trace_load_stream
 * from memory, and also handed line by line to each row parser.  Checked:
 * no crash, leak or undefined behaviour (ASan, UBSan); a load either fails
 * with a non-empty message or gives requests with prompt >= 1, both counts
 * within TRACE_MAX_TOKENS, arrivals sorted and starting at 0; the row
 * parsers return 0 or -1, with a message on -1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stress/trace.h"
#include "tests/fuzz/fuzz_util.h"

static void parse_lines(const uint8_t *d, size_t n)
{
	char *s = malloc(n + 1), *line, *save = NULL;
	char why[128];

	if (!s)
		return;
	memcpy(s, d, n);
	s[n] = '\0';
	for (line = strtok_r(s, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		int (*parse[3])(const char *, int64_t *, trace_request *, char *, size_t) = {
		    trace_parse_azure_row, trace_parse_mooncake_row, trace_parse_vidur_row};
		for (int k = 0; k < 3; k++) {
			trace_request r = {0};
			int64_t ts = 0;
			why[0] = '\0';
			int rc = parse[k](line, &ts, &r, why, sizeof why);
			FZ_CHECK(rc == 0 || rc == -1);
			if (rc == 0)
				FZ_CHECK(r.prompt >= 1 && r.prompt <= TRACE_MAX_TOKENS &&
				         r.output <= TRACE_MAX_TOKENS);
			else
				FZ_CHECK(why[0] != '\0');
		}
	}
	free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	trace_opts o = {0};
	trace t;
	char err[256];
	FILE *f;

	if (size < 2)
		return 0;
	o.format = (trace_format)(data[0] % 4);
	o.skip_bad = (data[0] >> 2) & 1;
	o.max_rows = (data[0] >> 3) & 3;
	f = fmemopen((void *)(data + 1), size - 1, "r");
	if (!f)
		return 0;
	err[0] = '\0';
	int rc = trace_load_stream(f, "fuzz", &o, &t, err, sizeof err);
	fclose(f);
	FZ_CHECK(rc == 0 || rc == -1);
	if (rc == 0) {
		FZ_CHECK(t.n > 0);
		FZ_CHECK(o.max_rows == 0 || t.n <= o.max_rows);
		FZ_CHECK(t.req[0].arrival_ns == 0 || t.n > 0);
		uint64_t lo = UINT64_MAX;
		for (size_t i = 0; i < t.n; i++) {
			FZ_CHECK(t.req[i].prompt >= 1 && t.req[i].prompt <= TRACE_MAX_TOKENS);
			FZ_CHECK(t.req[i].output <= TRACE_MAX_TOKENS);
			FZ_CHECK(i == 0 || t.req[i].arrival_ns >= t.req[i - 1].arrival_ns);
			if (t.req[i].arrival_ns < lo)
				lo = t.req[i].arrival_ns;
		}
		FZ_EQ(lo, 0);
	} else {
		FZ_CHECK(err[0] != '\0' && memchr(err, '\0', sizeof err));
	}
	trace_free(&t);
	parse_lines(data + 1, size - 1);
	return 0;
}
