/*
 * stress/trace.h - LLM serving trace readers for kvpool_replay.
 *
 * Formats (chosen by --format, or detected from the first non-blank line):
 *   azure     Azure LLM inference trace CSV, header
 *             "TIMESTAMP,ContextTokens,GeneratedTokens", timestamps
 *             "YYYY-MM-DD HH:MM:SS[.fraction]" (wall clock, up to 9 digits).
 *   mooncake  Mooncake JSONL: one object per line with "timestamp" (ms),
 *             "input_length", "output_length" and optional "hash_ids"
 *             (array of non-negative integers below 2^63, each naming the
 *             content of one 512-token chunk of the prompt, kept in
 *             trace.hash_ids for --prefix-cache); other keys are ignored.
 *             Each line is parsed by jansson (RFC 8259: UTF-8 checked,
 *             duplicate keys refused, integers within 64-bit signed).
 *   vidur     Vidur length table, header starting
 *             "num_prefill_tokens,num_decode_tokens"; no arrival times
 *             (every request arrives at time 0).
 *
 * A malformed row gives one message "FILE:LINE: what was wrong"; with
 * skip_bad the row is dropped (and counted) and reading goes on, without it
 * reading stops at the first one.  A file with no valid request is an error,
 * and so are a read error (told from the end of the file, also when memory
 * runs out) and a line longer than TRACE_MAX_LINE.
 * Arrival times are made relative to the earliest request and the requests
 * are sorted by arrival (stable), so a trace out of order still replays.
 *
 * Not thread-safe per trace object; independent objects are independent.
 */
#ifndef KVPOOL_STRESS_TRACE_H
#define KVPOOL_STRESS_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum { TRACE_AUTO = 0, TRACE_AZURE, TRACE_MOONCAKE, TRACE_VIDUR } trace_format;

/* Longest line accepted, in bytes (a longer one is an error: not a trace). */
#define TRACE_MAX_LINE (1u << 20)

/* Largest token count accepted in one field (prompt + output must fit in 32 bits). */
#define TRACE_MAX_TOKENS 0x3fffffffu

typedef struct trace_request {
	uint64_t arrival_ns; /* since the first request */
	uint32_t prompt;     /* prompt tokens, >= 1 */
	uint32_t output;     /* output tokens to decode, >= 0 */
	uint32_t n_hash;     /* Mooncake hash_ids of the row (0: none) */
	uint32_t hash_off;   /* they are trace.hash_ids[hash_off .. + n_hash) */
} trace_request;

/* Tokens each Mooncake hash id stands for. */
#define TRACE_HASH_CHUNK 512u

typedef struct trace {
	trace_request *req;
	size_t n; /* requests kept */
	size_t cap;
	size_t n_skipped; /* malformed rows dropped (skip_bad) */
	size_t n_lines;   /* lines read */
	trace_format format;
	uint64_t *hash_ids; /* every kept row's hash_ids, back to back */
	size_t n_hash_ids, hash_cap;
} trace;

typedef struct trace_opts {
	trace_format format; /* TRACE_AUTO: detect */
	bool skip_bad;       /* drop malformed rows instead of stopping */
	size_t max_rows;     /* stop after this many requests; 0 = all */
	FILE *log;           /* where skipped rows are reported (NULL: nowhere) */
	size_t max_logged;   /* report at most this many skipped rows; 0 = 20 */
} trace_opts;

/** trace_format_name - "auto" "azure" "mooncake" "vidur" */
const char *trace_format_name(trace_format f);

/** trace_format_parse - inverse of trace_format_name; false if unknown */
bool trace_format_parse(const char *name, trace_format *out);

/**
 * trace_load - read a trace file
 * @path: the file
 * @opts: options (NULL: detect format, stop at the first bad row)
 * @out:  the trace (free with trace_free, also after a failure)
 * @err:  on failure, one line "PATH:LINE: what was wrong" (or "PATH: ...")
 * @errcap: capacity of @err
 *
 * Returns 0 or -1.
 */
int trace_load(const char *path, const trace_opts *opts, trace *out, char *err, size_t errcap);

/** trace_load_stream - as trace_load, from an open stream named @name in messages */
int trace_load_stream(FILE *f, const char *name, const trace_opts *opts, trace *out, char *err,
                      size_t errcap);

/** trace_free - release the requests (the struct itself is the caller's) */
void trace_free(trace *t);

/**
 * trace_parse_azure_row - parse one Azure data row (no header)
 * @line: the row, without its line ending
 * @ts_ns: wall-clock time of the row, ns since 1970-01-01 (UTC, no zone)
 * @r:    prompt and output (arrival_ns left alone)
 * @why:  on failure, what was wrong
 *
 * Returns 0 or -1.
 */
int trace_parse_azure_row(const char *line, int64_t *ts_ns, trace_request *r, char *why,
                          size_t whycap);

/** trace_parse_mooncake_row - parse one JSONL object; *ts_ns from "timestamp" (ms) */
int trace_parse_mooncake_row(const char *line, int64_t *ts_ns, trace_request *r, char *why,
                             size_t whycap);

/** trace_parse_vidur_row - parse one Vidur row (prefill, decode, ...); *ts_ns = 0 */
int trace_parse_vidur_row(const char *line, int64_t *ts_ns, trace_request *r, char *why,
                          size_t whycap);

#endif /* KVPOOL_STRESS_TRACE_H */
