/*
 * lib/bufcache/bufcache_stats.h - the buffer cache's event counters, striped per thread shard.
 *
 * Only events are counted here, and only one of them (hits) on the hit and
 * free paths; levels (cached buffers, bytes in use) are derived when read
 * from state the cache keeps anyway (bufcache_snapshot.c), so they cost nothing.
 *
 * Every counter is kept in KVPI_BC_SHARDS cache-line-aligned stripes; a thread adds
 * to its own shard's stripe (kvpi_bc_thread_shard) with a relaxed fetch-add, and a
 * reader sums the stripes.  With at most KVPI_BC_SHARDS threads no two threads
 * share a stripe, so counting costs an uncontended RMW and never a shared
 * cache line.  Relaxed order: the counters order nothing; a sum taken while
 * threads run is exact for each counter at some instant of the read, and
 * exact outright once the cache is quiescent.
 *
 * Synchronization:
 *
 *   operation            may run concurrently with   progress
 *   -------------------  --------------------------  ---------
 *   kvpi_bc_count        everything                  wait-free
 *   kvpi_bc_stats_sum    everything                  wait-free
 */
#ifndef KVPOOL_LIB_BUFCACHE_STATS_H
#define KVPOOL_LIB_BUFCACHE_STATS_H

#include "lib/bufcache/bufcache_node.h"

enum kvpi_bc_ctr {
	KVPI_BC_HITS,
	KVPI_BC_MISSES,
	KVPI_BC_EVICTIONS,
	KVPI_BC_OOM_RETRIES,
	KVPI_BC_SYS_ALLOCS,
	KVPI_BC_SYS_FREES,
	KVPI_BC_N_CTRS
};

struct kvpi_bc_stripe {
	_Atomic uint64_t v[KVPI_BC_N_CTRS] __attribute__((aligned(128)));
};

struct kvpi_bc_stats {
	struct kvpi_bc_stripe s[KVPI_BC_SHARDS];
};

void kvpi_bc_stats_init(struct kvpi_bc_stats *st);

static inline void kvpi_bc_count(struct kvpi_bc_stats *st, enum kvpi_bc_ctr c, uint64_t d)
{
	/* relaxed: counters order nothing (see above). */
	atomic_fetch_add_explicit(&st->s[kvpi_bc_thread_shard()].v[c], d, memory_order_relaxed);
}

/* kvpi_bc_stats_sum - @out[c] = sum over stripes of counter c */
void kvpi_bc_stats_sum(struct kvpi_bc_stats *st, uint64_t out[KVPI_BC_N_CTRS]);

#endif /* KVPOOL_LIB_BUFCACHE_STATS_H */
