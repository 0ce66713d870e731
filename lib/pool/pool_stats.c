/*
 * lib/pool/pool_stats.c - summing the per-thread counters, and the history ring.
 *
 * Counters live in the threads' slots (lib/pool/tslot.h) and are summed here;
 * nothing on the allocate/free path writes shared memory for statistics
 * except the in-use count, published when a thread's unpublished allocations
 * pass its room below the peak (kvpi_account_in_use_slow).
 * The history ring is the only statistics structure under a lock, and the
 * allocate/free path reaches it only on the rare events the header lists.
 */
#include <string.h>

#include "lib/pool/pool_internal.h"

static void sum_slot(const struct kvpi_tslot *s, uint64_t *acc, bool allocs)
{
	for (int c = 0; c < KVPI_N_CTR; c++)
		if ((c == KVPI_C_ALLOCS) == allocs)
			/* acquire: each counter has one writer (lib/pool/tslot.h); acquire
			 * keeps the second pass's loads after the first pass's. */
			acc[c] += atomic_load_explicit(&((struct kvpi_tslot *)s)->ctr[c],
			                               memory_order_acquire);
}

void kvpi_stats_sum(struct kvp_pool *p, kvp_stats *out)
{
	uint64_t acc[KVPI_N_CTR] = {0};

	/*
	 * Two passes: every slot's allocation count first, then the frees and
	 * the rest.  A block freed by one thread and handed out by another
	 * while we read is then never counted as allocated twice: its second
	 * allocation is counted only if it happened before the first pass read
	 * that slot, and then the free before it (counted before the block went
	 * back, lib/pool/pool_free.c) is seen by the second pass: the free's count
	 * store, the push (release), the other thread's pop (acquire) and its
	 * release store of ALLOCS (kvpi_ctr_add) chain into our acquire load.  So
	 * allocations - frees never exceeds what was in use during the read.
	 */
	for (int pass = 0; pass < 2; pass++) {
		for (struct kvpi_tslot *s = atomic_load_explicit(&p->slots, memory_order_acquire);
		     s; s = s->next)
			sum_slot(s, acc, pass == 0);
		sum_slot(p->fallback, acc, pass == 0);
	}
	memset(out, 0, sizeof(*out));
	out->n_blocks = atomic_load_explicit(&p->managed, memory_order_relaxed);
	out->n_allocations = acc[KVPI_C_ALLOCS];
	out->n_frees = acc[KVPI_C_FREES];
	out->n_reused = acc[KVPI_C_REUSED];
	out->n_exhausted = acc[KVPI_C_EXHAUSTED];
	out->n_grown = acc[KVPI_C_GROWN];
	out->n_retired = acc[KVPI_C_RETIRED];
	out->n_stale_frees = acc[KVPI_C_STALE];
	out->n_prefix_queries = acc[KVPI_C_PQUERIES];
	out->n_prefix_hits = acc[KVPI_C_PHITS];
	out->n_evictions = acc[KVPI_C_EVICTIONS];
	if (p->mode)
		for (uint32_t si = 0; si < p->n_streams; si++)
			out->n_cached += p->mode->n_cached(p, (int)si);
	/* Summed mid-flight the signed counter can dip below zero for a moment. */
	out->n_not_full = (int64_t)acc[KVPI_C_NOT_FULL] < 0 ? 0 : acc[KVPI_C_NOT_FULL];
	/* The two passes make allocations - frees a count that happened during
	 * the read, clamped to what the pool manages (read apart from the
	 * counters: a shrink racing the read could leave it behind).  So it may
	 * raise the stored peak, and a later call never reports a lower one.
	 * Quiescent, every figure is exact. */
	uint64_t in_use =
	    out->n_allocations >= out->n_frees ? out->n_allocations - out->n_frees : 0;
	if (in_use > out->n_blocks)
		in_use = out->n_blocks;
	out->peak_blocks_in_use = kvpi_peak_raise(p, (int64_t)in_use);
}

int kvp_pool_stats(kvp_pool *p, kvp_stats *out)
{
	if (!p || !out)
		return KVP_EINVAL;
	kvpi_stats_sum(p, out);
	return KVP_OK;
}

void kvpi_history_record(struct kvp_pool *p)
{
	if (!p->history_len)
		return;
	/* The snapshot is taken under the lock, so the ring is in order. */
	pthread_mutex_lock(&p->hist_lock);
	kvpi_stats_sum(p, &p->hist[(p->hist_head + p->hist_n) % p->history_len]);
	if (p->hist_n < p->history_len)
		p->hist_n++;
	else
		p->hist_head = (p->hist_head + 1) % p->history_len;
	pthread_mutex_unlock(&p->hist_lock);
}

void kvpi_history_tick_slow(struct kvp_pool *p, uint32_t calls)
{
	/* relaxed: a once-flag; the record itself is under hist_lock. */
	if (!atomic_load_explicit(&p->hist_started, memory_order_relaxed) &&
	    !atomic_exchange_explicit(&p->hist_started, 1, memory_order_relaxed)) {
		kvpi_history_record(p); /* the pool's first mutating call */
		return;
	}
	if (calls != 0)
		kvpi_history_record(p); /* this thread's KVP_HISTORY_EVERY-th call */
}

uint64_t kvpi_peak_raise(struct kvp_pool *p, int64_t v)
{
	/* relaxed (all): a statistic; it orders nothing else. */
	uint64_t peak = atomic_load_explicit(&p->peak, memory_order_relaxed);
	while (v > 0 && (uint64_t)v > peak) {
		if (atomic_compare_exchange_weak_explicit(
		        &p->peak, &peak, (uint64_t)v, memory_order_relaxed, memory_order_relaxed))
			return (uint64_t)v;
	}
	return peak;
}

/*
 * The most a thread may keep unpublished after a visit here that saw the
 * pool's published count @in_use and its @peak: KVP_PEAK_BATCH - 1 or less
 * when that fills the room below the peak, else the thread's share of that
 * room (the room over the @n threads that have used the pool), which may be
 * more.  Never more than the room itself once the room is below
 * KVP_PEAK_BATCH, so with one thread the peak stays exact.
 */
static int64_t unpublished_room(uint64_t peak, int64_t in_use, uint32_t n)
{
	int64_t room = (int64_t)peak - in_use;
	if (room <= 0)
		return 0;
	int64_t share = room / (int64_t)(n ? n : 1);
	int64_t batch = room < (int64_t)KVP_PEAK_BATCH - 1 ? room : (int64_t)KVP_PEAK_BATCH - 1;
	return share > batch ? share : batch;
}

void kvpi_account_in_use_slow(struct kvp_pool *p, struct kvpi_tslot *s, int64_t d)
{
	/*
	 * A thread keeps newly allocated blocks to itself, unpublished, up to
	 * its room, but publishes any net free at once, so every unpublished
	 * delta is >= 0.  Then the estimate below (published count + our own
	 * delta) never exceeds the true number in use, so the peak never
	 * records one that did not happen.
	 *
	 * The room (unpublished_room) is KVP_PEAK_BATCH - 1 near the peak and
	 * the thread's share of the distance to the peak further below it.  A
	 * server's threads then run request after request below the peak
	 * without touching the shared count: a request's allocation stays
	 * unpublished, and its kvp_free_all only takes the delta back towards
	 * zero.  (Publishing both, once a request, moved the count's line
	 * between the CPUs twice a request, about a tenth of a two-thread
	 * serving loop's time.)
	 *
	 * With one thread those two words change only here and the room never
	 * passes the distance to the peak, so every allocation that would raise
	 * the peak comes here and the peak is exact.  With several threads the
	 * published count may have grown since; at the instant of the true
	 * maximum M the published count P was last raised by a publish that
	 * raised the peak to at least P, and M - P is the sum of the
	 * unpublished deltas: the peak misses at most each other thread's room
	 * as it last left here.
	 */
	bool fb = kvpi_tslot_is_fallback(p, s);
	/* relaxed: the slot count only sizes the share; statistics below. */
	uint32_t n = atomic_load_explicit(&p->n_slots, memory_order_relaxed);
	s->delta_in_use += d;
	/* relaxed: statistics; they order nothing else. */
	int64_t in_use = atomic_load_explicit(&p->in_use, memory_order_relaxed);
	uint64_t peak = atomic_load_explicit(&p->peak, memory_order_relaxed);
	if (s->delta_in_use < 0 || fb ||
	    (s->delta_in_use >= (int64_t)KVP_PEAK_BATCH &&
	     s->delta_in_use > unpublished_room(peak, in_use, n))) {
		/* relaxed: a statistic; orders nothing else. */
		in_use =
		    atomic_fetch_add_explicit(&p->in_use, s->delta_in_use, memory_order_relaxed) +
		    s->delta_in_use;
		s->delta_in_use = 0;
	}
	if (d > 0)
		peak = kvpi_peak_raise(p, in_use + s->delta_in_use);
	s->in_use_room = fb ? -1 : unpublished_room(peak, in_use, n);
}

int kvpi_fast_end_slow(struct kvp_pool *p, struct kvpi_tslot *s, int64_t d)
{
	kvpi_account_in_use(p, s, d);
	kvpi_history_tick(p, s);
	return KVP_OK;
}

size_t kvp_pool_history(kvp_pool *p, kvp_stats *out, size_t cap)
{
	if (!p || (!out && cap))
		return 0;
	pthread_mutex_lock(&p->hist_lock);
	size_t n = p->hist_n < cap ? p->hist_n : cap;
	/* The newest n, oldest first. */
	size_t skip = p->hist_n - n;
	for (size_t i = 0; i < n; i++)
		out[i] = p->hist[(p->hist_head + skip + i) % p->history_len];
	pthread_mutex_unlock(&p->hist_lock);
	return n;
}
