/*
 * bench/suite/main.c - the suite's entry point: runs the selected benchmarks in
 * order, then writes --json.  Every bench target is this file plus an
 * --only argument (see bench/BUILD).  Exit status: 0, 1 when a measured
 * call failed or a pool leaked (smoke tests rely on it), 2 on bad usage.
 */
#include <stdio.h>

#include "bench/suite/dpdk_peer.h"
#include "bench/suite/harness.h"
#include "bench/suite/suite.h"

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*fn)(void);
	} benches[] = {
	    {"getput", kvb_bench_getput},       {"batch", kvb_bench_batch},
	    {"synthetic", kvb_bench_synthetic}, {"scaling", kvb_bench_scaling},
	    {"bufcache", kvb_bench_bufcache},   {"stats", kvb_bench_stats},
	    {"lifecycle", kvb_bench_lifecycle},
	};
	int bad = 0;
	double t0;

	if (kvb_parse_args(argc, argv) != 0)
		return 2;
	t0 = kvb_now();
	printf("kvpool benchmark suite: %s, median of %d x %.3gs after %.3gs warm-up%s\n",
	       kvb_opt.smoke   ? "smoke"
	       : kvb_opt.quick ? "quick"
	                       : "full",
	       kvb_opt.reps, kvb_opt.seconds, kvb_opt.warmup,
	       KVB_SANITIZED ? " (sanitizer build)" : "");
	/* The EAL must start before any other thread exists. */
	if (kvb_selected("getput") || kvb_selected("batch")) {
		const char *why;
		if (kvb_dpdk_init(&why) != 0)
			printf("DPDK unavailable: %s\n", why);
	}
	for (size_t i = 0; i < sizeof(benches) / sizeof(benches[0]); i++) {
		double ts;
		int rc;

		if (!kvb_selected(benches[i].name))
			continue;
		ts = kvb_now();
		rc = benches[i].fn();
		printf("[%s: %.1f s]\n", benches[i].name, kvb_now() - ts);
		kvb_fig(benches[i].name, "suite", "", "section_seconds", kvb_now() - ts, NULL, 0);
		if (rc != 0) {
			printf("!! %s: a measured call failed or blocks leaked\n", benches[i].name);
			bad = 1;
		}
	}
	kvb_dpdk_cleanup();
	printf("\nsuite finished in %.1f s\n", kvb_now() - t0);
	if (kvb_write_json() != 0)
		bad = 1;
	return bad;
}
