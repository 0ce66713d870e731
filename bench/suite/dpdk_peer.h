/*
 * bench/suite/dpdk_peer.h - DPDK rte_mempool as a benchmark peer.
 *
 * The EAL runs without hugepages or PCI (--no-huge --no-pci --no-shconf),
 * so it works as root in CI and in Bazel's sandbox.  Each benchmark thread
 * registers itself with rte_thread_register(), which gives it an lcore id
 * and therefore its own per-lcore mempool cache, and unregisters on exit.
 * The loops live in dpdk_peer.c so rte_mempool_get/put are inlined as a
 * DPDK application would have them.
 *
 * Synchronization: kvb_dpdk_init() must be called once, from the main
 * thread, before any other thread exists; the cases are then thread-safe
 * as rte_mempool is (multi-producer/multi-consumer ring behind the caches).
 */
#ifndef KVPOOL_BENCH_DPDK_PEER_H
#define KVPOOL_BENCH_DPDK_PEER_H

#include "bench/suite/harness.h"

/* Object size of the DPDK pools: get/put never touch object memory, so it
 * does not change their cost; it is kept small to fit the no-hugepage heap. */
#define KVB_DPDK_ELT_SIZE 64

/*
 * kvb_dpdk_init - start the EAL once; restores the caller's CPU affinity
 * afterwards (the EAL pins the main thread to lcore 0's CPU otherwise).
 * Returns 0, or -1 with *@why set to the reason DPDK cannot be used.
 */
int kvb_dpdk_init(const char **why);

/* kvb_dpdk_cleanup - rte_eal_cleanup if the EAL is up (at exit, all threads joined) */
void kvb_dpdk_cleanup(void);

/* A pool of @n objects with a per-lcore cache of @cache objects; NULL on failure. */
void *kvb_dpdk_pool(unsigned n, unsigned cache);
void kvb_dpdk_pool_free(void *pool);
/* Objects in the pool's ring plus every lcore cache (for leak checks). */
unsigned kvb_dpdk_avail(void *pool);

/* One object per op: rte_mempool_get + rte_mempool_put.  Free with kvb_case_free. */
void kvb_dpdk_case_getput(kvb_case *c, void *pool);
/* @k objects per op: rte_mempool_get_bulk + rte_mempool_put_bulk (k <= 1024). */
void kvb_dpdk_case_bulk(kvb_case *c, void *pool, unsigned k);

#endif /* KVPOOL_BENCH_DPDK_PEER_H */
