/*
 * lib/bufcache/bufcache_snapshot.c - reading a buffer cache's statistics.
 *
 * Owns: kvp_bufcache_cached_bytes and kvp_bufcache_get_stats.  Events are
 * the counter stripes plus every front's counters.  Levels are derived from
 * state the cache keeps anyway: the budget word, the fronts' reservations
 * and buffers, the shared tier's counts.  A snapshot taken while threads run
 * is a sum of reads at different instants; it is exact once the cache is
 * quiescent.
 *
 * May call: the counters (bufcache_stats.h), the fronts' list and levels
 * (bufcache_front.h) and the shared tier's counts.  It takes no lock and
 * writes nothing.
 */
#include "lib/bufcache/bufcache_internal.h"

/* a - b, or 0 when a racing snapshot has b > a */
static uint64_t sub0(uint64_t a, uint64_t b)
{
	return a > b ? a - b : 0;
}

/* Sum the fronts' counters into @v; their reservations and buffers into the rest. */
static void sum_fronts(kvp_bufcache *c, uint64_t v[KVPI_BC_N_CTRS], uint64_t *res, uint64_t *bufs)
{
	*res = *bufs = 0;
	/* Acquire: pairs with the release push of each front (it is initialised). */
	for (struct kvpi_bc_front *f = atomic_load_explicit(&c->fronts, memory_order_acquire); f;
	     f = f->next) {
		for (int k = 0; k < KVPI_BC_N_CTRS; k++)
			/* Relaxed: counters order nothing (bufcache_stats.h). */
			v[k] += atomic_load_explicit(&f->ctr[k], memory_order_relaxed);
		*res += kvpi_bc_front_get(&f->reserve);
		/* Relaxed: a level read for statistics, as kvpi_bc_front_get. */
		*bufs += atomic_load_explicit(&f->nbufs, memory_order_relaxed);
	}
}

size_t kvp_bufcache_cached_bytes(kvp_bufcache *c)
{
	uint64_t v[KVPI_BC_N_CTRS] = {0}, res, bufs;

	if (!c)
		return 0;
	sum_fronts(c, v, &res, &bufs);
	/* Relaxed: a statistic, exact once the cache is quiescent. */
	return sub0(atomic_load_explicit(&c->cached, memory_order_relaxed), res);
}

int kvp_bufcache_get_stats(kvp_bufcache *c, kvp_bufcache_stats *out)
{
	uint64_t v[KVPI_BC_N_CTRS], res, bufs;

	if (!c || !out)
		return KVP_EINVAL;
	kvpi_bc_stats_sum(&c->stats, v);
	sum_fronts(c, v, &res, &bufs);
	out->hits = v[KVPI_BC_HITS];
	out->misses = v[KVPI_BC_MISSES];
	out->evictions = v[KVPI_BC_EVICTIONS];
	out->oom_retries = v[KVPI_BC_OOM_RETRIES];
	out->system_allocs = v[KVPI_BC_SYS_ALLOCS];
	out->system_frees = v[KVPI_BC_SYS_FREES];
	/* Relaxed, the three loads below: statistics, exact once the cache is quiescent. */
	out->cached_bytes = sub0(atomic_load_explicit(&c->cached, memory_order_relaxed), res);
	out->peak_cached_bytes = atomic_load_explicit(&c->peak, memory_order_relaxed);
	out->cached_buffers =
	    kvpi_bc_exact_count(&c->exact) + kvpi_bc_large_count(&c->large) + bufs;
	out->bytes_in_use =
	    sub0(atomic_load_explicit(&c->live_bytes, memory_order_relaxed), out->cached_bytes);
	return KVP_OK;
}
