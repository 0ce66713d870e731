/*
 * tests/install_app.c - a "server built with plain make" for install_test.sh:
 * compiled outside Bazel with `cc app.c $(pkg-config --cflags --libs kvpool)`
 * against what tools/install.sh installed.
 *
 * NOTE (build helper -> lead): written before lib/pool.c landed, so it only
 * calls kvp_strerror/kvp_format_name.  Once the pool exists, switch it to the
 * seed example - a 64-block pool of 16-token blocks, kvp_allocate 40 tokens of
 * KVP_K for owner 1, kvp_stats_format, print the line, kvp_free_all,
 * kvp_pool_destroy - and set EXPECTED in install_test.sh to API.md's line
 * "AllocationStats(in_use=3/64, allocations=3, ...)".
 */
#include <kvpool/kvpool.h>

#include <stdio.h>

int main(void)
{
	printf("kvpool %s: %s, %s\n", KVPOOL_VERSION, kvp_strerror(KVP_EEXHAUSTED),
	       kvp_format_name(KVP_BF16));
	return 0;
}
