/*
 * lib/bufcache/bufcache_stats.h - the buffer cache's event counters, striped per thread shard.
 *
 * Only events are counted here, and only one of them (hits) on the hit and
 * free paths; levels (cached buffers, bytes in use) are derived when read
 * from state the cache keeps anyway (bufcache.c), so they cost nothing.
 *
 * Every counter is kept in BC_SHARDS cache-line-aligned stripes; a thread adds
 * to its own shard's stripe (bc_thread_shard) with a relaxed fetch-add, and a
 * reader sums the stripes.  With at most BC_SHARDS threads no two threads
 * share a stripe, so counting costs an uncontended RMW and never a shared
 * cache line.  Relaxed order: the counters order nothing; a sum taken while
 * threads run is exact for each counter at some instant of the read, and
 * exact outright once the cache is quiescent.
 *
 * Synchronization:
 *
 *   operation       may run concurrently with   progress
 *   --------------  --------------------------  ---------
 *   bc_count        everything                  wait-free
 *   bc_stats_sum    everything                  wait-free
 */
#ifndef KVPOOL_LIB_BUFCACHE_STATS_H
#define KVPOOL_LIB_BUFCACHE_STATS_H

#include "lib/bufcache/bufcache_node.h"

enum bc_ctr {
	BC_HITS,
	BC_MISSES,
	BC_EVICTIONS,
	BC_OOM_RETRIES,
	BC_SYS_ALLOCS,
	BC_SYS_FREES,
	BC_N_CTRS
};

struct bc_stripe {
	_Alignas(128) _Atomic uint64_t v[BC_N_CTRS];
};

struct bc_stats {
	struct bc_stripe s[BC_SHARDS];
};

void bc_stats_init(struct bc_stats *st);

static inline void bc_count(struct bc_stats *st, enum bc_ctr c, uint64_t d)
{
	atomic_fetch_add_explicit(&st->s[bc_thread_shard()].v[c], d, memory_order_relaxed);
}

/* bc_stats_sum - @out[c] = sum over stripes of counter c */
void bc_stats_sum(struct bc_stats *st, uint64_t out[BC_N_CTRS]);

#endif /* KVPOOL_LIB_BUFCACHE_STATS_H */
