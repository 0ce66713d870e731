/*
 * bench/suite/suite.h - the benchmarks of the suite; main.c runs those selected.
 *
 * Each kvb_bench_* prints its tables (with ratios against the peers
 * measured in the same run), records every figure with kvb_fig() and
 * returns 0, or nonzero when a call it measured failed or a pool leaked
 * blocks (the smoke tests fail then).  Run from the main thread only.
 */
#ifndef KVPOOL_BENCH_SUITE_H
#define KVPOOL_BENCH_SUITE_H

int kvb_bench_getput(void);    /* 1. one block per op, thread sweep, every peer */
int kvb_bench_batch(void);     /* 2. 1, 16, 256 blocks per call */
int kvb_bench_synthetic(void); /* 3. synthetic generation workload vs per-token malloc */
int kvb_bench_scaling(void);   /* 4. 1e3..1e7 blocks; growth; shrink */
int kvb_bench_bufcache(void);  /* 5. the buffer-cache bench's quick mode, if built */
int kvb_bench_stats(void);     /* 6. stats reads every 1 ms vs none */
int kvb_bench_lifecycle(void); /* 7. the serving loop vs a vLLM-shaped one-mutex pool */

#endif /* KVPOOL_BENCH_SUITE_H */
