/*
 * bench/suite/bufcache.c - benchmark 5: the buffer cache, summarised.
 *
 * The buffer-cache benchmark (bench/bufcache_bench.c) belongs to the
 * buffer-cache part; this runs its binary's quick mode (--smoke: its own
 * smoke mode) as a separate process and passes its tables through.  When
 * the binary is not built the section says so and reports no figure.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "bench/suite/harness.h"
#include "bench/suite/suite.h"

#define BENCH "bufcache"

int kvb_bench_bufcache(void)
{
	char exe[1024], cmd[1200], line[1024];
	FILE *f;
	int rc, lines = 0;

	kvb_heading("5. buffer cache (bench/bufcache_bench, its own quick mode)");
	if (kvb_find_sibling("bufcache_bench", exe, sizeof(exe)) != 0) {
		printf("not built (bench/bufcache_bench is not in this build)\n");
		kvb_note(BENCH, "not built");
		return 0;
	}
	snprintf(cmd, sizeof(cmd), "'%s' %s 2>&1", exe, kvb_opt.smoke ? "--smoke" : "--quick");
	f = popen(cmd, "r");
	if (!f) {
		printf("could not start %s\n", exe);
		return 1;
	}
	while (fgets(line, sizeof(line), f)) {
		fputs(line, stdout);
		line[strcspn(line, "\n")] = 0;
		if (line[0])
			kvb_note(BENCH, "%s", line);
		lines++;
	}
	rc = pclose(f);
	fflush(stdout);
	if (rc != 0) {
		printf("bufcache_bench exited with status %d\n", rc);
		kvb_note(BENCH, "bufcache_bench exited with status %d", rc);
	}
	kvb_fig(BENCH, "bufcache_bench", "", "output_lines", lines, NULL, 0);
	return 0;
}
