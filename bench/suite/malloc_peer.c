/*
 * bench/suite/malloc_peer.c - malloc/free of one block per op, in whatever
 * allocator the process was started with.
 *
 * glibc, jemalloc, mimalloc and tcmalloc all replace malloc process-wide,
 * so the suite runs this binary once per allocator with LD_PRELOAD set to
 * the allocator's library (glibc: none).  It prints which library its
 * malloc symbol resolved to, so the parent can check the preload took, and
 * one line per thread count:
 *
 *   allocator /usr/lib/x86_64-linux-gnu/libjemalloc.so.2
 *   threads 4 <median ops/s> <rep1> <rep2> ...
 *
 * Arguments: the harness's (--seconds --warmup --reps --threads, --help,
 * --version) plus --bytes N, the block size in bytes (default 4096).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/suite/harness.h"

typedef struct mctx {
	size_t bytes;
} mctx;

static uint64_t malloc_run(void *ctx, void *tls, int tid, const atomic_int *stop)
{
	size_t bytes = ((mctx *)ctx)->bytes;
	uint64_t ops = 0;

	(void)tls, (void)tid;
	KVB_LOOP(stop, ops, {
		void *p = malloc(bytes);
		if (!p) {
			kvb_fail("malloc", 0);
			return ops;
		}
		/* Escaped, so the compiler cannot drop the malloc/free pair. */
		KVB_ESCAPE(p);
		free(p);
	});
	return ops;
}

int main(int argc, char **argv)
{
	char *args[64];
	int n = 0;
	mctx ctx = {.bytes = 4096};
	kvb_case c = {.run = malloc_run, .ctx = &ctx};
	Dl_info info;
	void *sym;

	/* Take --bytes out, hand the rest to the harness. */
	for (int i = 0; i < argc && n < 63; i++) {
		if (!strcmp(argv[i], "--bytes") && i + 1 < argc)
			ctx.bytes = (size_t)strtoull(argv[++i], NULL, 10);
		else if (!strncmp(argv[i], "--bytes=", 8))
			ctx.bytes = (size_t)strtoull(argv[i] + 8, NULL, 10);
		else
			args[n++] = argv[i];
	}
	args[n] = NULL;
	if (kvb_parse_args(n, args) != 0 || ctx.bytes == 0)
		return 2;
	sym = dlsym(RTLD_DEFAULT, "malloc");
	printf("allocator %s\n",
	       sym && dladdr(sym, &info) && info.dli_fname ? info.dli_fname : "unknown");
	for (int t = 0; t < kvb_opt.n_threads; t++) {
		double reps[KVB_MAX_REPS];
		double med = kvb_measure(&c, kvb_opt.threads[t], reps);
		if (kvb_take_failures())
			med = -1;
		printf("threads %d %.6g", kvb_opt.threads[t], med);
		for (int r = 0; r < kvb_opt.reps; r++)
			printf(" %.6g", reps[r]);
		printf("\n");
		fflush(stdout);
	}
	return 0;
}
