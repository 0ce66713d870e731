/*
 * stress/cli.c - the command line kvpool_replay and kvpool_stress share
 * (stress/cli.h).
 */
#include "stress/cli.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <kvpool/kvpool.h>

#include "stress/util.h"

int su_cli_next(su_cli *c)
{
	int ch, idx = 0;
	if (!c->started) {
		c->started = 1;
		opterr = 0; /* one line of our own below */
		optind = 1;
	}
	ch = getopt_long(c->argc, c->argv, ":hV", c->longopts, &idx);
	if (ch == -1) {
		if (optind >= c->argc)
			return 0;
		fprintf(stderr, "%s: unexpected argument '%s' (see --help)\n", c->prog,
		        c->argv[optind]);
		return -1;
	}
	if (ch == 'h') {
		c->usage(stdout);
		exit(0);
	}
	if (ch == 'V') {
		printf("%s (kvpool) %s\n", c->prog, kvp_version());
		exit(0);
	}
	if (ch == ':') {
		fprintf(stderr, "%s: option %s needs a value (see --help)\n", c->prog,
		        c->argv[optind - 1]);
		return -1;
	}
	if (ch != 0) {
		/* getopt_long reports "--flag=VALUE" of a flag without a value as
		 * unknown: say what is wrong with it. */
		const char *arg = c->argv[optind - 1], *eq = strchr(arg, '=');
		for (size_t i = 0; eq && strncmp(arg, "--", 2) == 0 && c->longopts[i].name; i++)
			if (c->longopts[i].has_arg == no_argument &&
			    strlen(c->longopts[i].name) == (size_t)(eq - arg - 2) &&
			    strncmp(c->longopts[i].name, arg + 2, (size_t)(eq - arg - 2)) == 0) {
				fprintf(stderr, "%s: option --%s takes no value (see --help)\n",
				        c->prog, c->longopts[i].name);
				return -1;
			}
		fprintf(stderr, "%s: unknown option '%s' (see --help)\n", c->prog, arg);
		return -1;
	}
	snprintf(c->name, sizeof c->name, "--%s", c->longopts[idx].name);
	c->value = optarg;
	return 1;
}

int su_cli_bad_value(const su_cli *c)
{
	fprintf(stderr, "%s: bad value for %s: '%s'\n", c->prog, c->name,
	        c->value ? c->value : "(missing)");
	return -1;
}

int su_cli_number(const su_cli *c, const su_num_flag *nums, size_t n)
{
	uint64_t u;
	size_t k = 0;
	while (k < n && strcmp(c->name, nums[k].flag) != 0)
		k++;
	if (k == n) {
		fprintf(stderr, "%s: unknown option: %s\n", c->prog, c->name);
		return -1;
	}
	if (!su_parse_u64(c->value, &u) || u < nums[k].min || u > nums[k].max) {
		/* Say what is accepted: "bad value" alone leaves the user guessing. */
		fprintf(stderr,
		        "%s: bad value for %s: '%s' (an integer in [%" PRIu64 ", %" PRIu64 "])\n",
		        c->prog, c->name, c->value ? c->value : "(missing)", nums[k].min,
		        nums[k].max);
		return -1;
	}
	*nums[k].dst = u;
	return (int)k;
}

int su_cli_json_writable(const char *prog, const char *json_path, const char *input_path)
{
	bool has_in = input_path && strcmp(input_path, "-") != 0; /* "-": stdin */
	char *path = su_resolve_path(json_path);
	char *in = has_in ? su_resolve_path(input_path) : NULL;
	struct stat js, is;
	int rc = 0;
	if (path == NULL || (has_in && in == NULL)) {
		fprintf(stderr, "%s: --json %s: out of memory\n", prog, json_path);
		rc = -1;
	} else if (in && stat(path, &js) == 0 && stat(in, &is) == 0 && js.st_dev == is.st_dev &&
	           js.st_ino == is.st_ino) {
		fprintf(stderr, "%s: --json %s: is the input file; the results would replace it\n",
		        prog, json_path);
		rc = -1;
	} else {
		/* Nothing is truncated here: an existing file is opened to append
		 * (and left as it is until the results replace it), a new one is
		 * made and removed again. */
		int fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
		bool made = false;
		if (fd < 0 && errno == ENOENT) {
			fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
			made = fd >= 0;
		}
		if (fd < 0) {
			fprintf(stderr, "%s: --json %s: cannot write: %s\n", prog, json_path,
			        strerror(errno));
			rc = -1;
		} else {
			close(fd);
			if (made)
				unlink(path);
		}
	}
	free(in);
	free(path);
	return rc;
}
