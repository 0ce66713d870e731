/*
 * stress/cli.h - the command line of kvpool_replay and kvpool_stress: one
 * getopt_long loop with the tools' shared handling of -h/--help,
 * -V/--version, a missing value, an unknown option and a stray argument,
 * a table of numeric flags with their ranges, and the early check that
 * --json can be written.
 *
 * Every message is one line on stderr starting with the program's name.
 * Not reentrant: getopt_long's state (optind, optarg) is global.
 */
#ifndef KVPOOL_STRESS_CLI_H
#define KVPOOL_STRESS_CLI_H

#include <getopt.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* One program's command line, walked by su_cli_next. */
typedef struct su_cli {
	const char *prog; /* "kvpool_replay": messages and --version */
	int argc;
	char **argv;
	const struct option *longopts; /* every option long, flag 0 (-h, -V: 'h', 'V') */
	void (*usage)(FILE *);         /* prints the --help text */
	int started;
	char name[32];     /* set by su_cli_next: "--NAME" */
	const char *value; /* set by su_cli_next: its value or NULL */
} su_cli;

/* A numeric flag: --NAME's value is a decimal in [min, max], stored in *dst. */
typedef struct su_num_flag {
	const char *flag;
	uint64_t *dst, min, max;
} su_num_flag;

/**
 * su_cli_next - the next option of @c's command line
 * @c: the command line; prog, argc, argv, longopts and usage set, the rest 0
 *
 * Return: 1 with @c->name and @c->value set; 0 at the end, all of the
 * command line read; -1 after printing why it is wrong (a missing value, an
 * unknown option, an argument that is not an option).  -h/--help prints the
 * usage on stdout and -V/--version the version; both then exit(0).
 */
int su_cli_next(su_cli *c);

/**
 * su_cli_bad_value - print "PROG: bad value for --NAME: 'VALUE'"
 * Return: -1, for `return su_cli_bad_value(c);`
 */
int su_cli_bad_value(const su_cli *c);

/**
 * su_cli_number - parse @c's option as one of @nums
 * @c:    the command line, after su_cli_next returned 1
 * @nums: the numeric flags; @n of them
 *
 * Return: the index in @nums of the flag, its value stored; -1 after
 * printing why not (not in @nums, or not a decimal in its range: the
 * message names the range).
 */
int su_cli_number(const su_cli *c, const su_num_flag *nums, size_t n);

/**
 * su_cli_json_writable - fail before a run, not after it, when --json
 * cannot be written
 * @prog:       the program's name, for the message
 * @json_path:  the --json path (relative to where `bazel run` was started)
 * @input_path: the file the run reads (--trace), or NULL; "-" is stdin
 *
 * Changes no file: an existing @json_path is opened to append and closed, a
 * missing one is created and removed again.  Refuses a @json_path that is
 * @input_path (the same file under any name).
 * Return: 0, or -1 after printing "PROG: --json PATH: WHY".
 */
int su_cli_json_writable(const char *prog, const char *json_path, const char *input_path);

#endif /* KVPOOL_STRESS_CLI_H */
