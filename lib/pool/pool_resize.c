/*
 * lib/pool/pool_resize.c - growth and shrink: the pool's only mutex-serialized work.
 *
 * Both run under grow_lock, so 'managed' and the id counter have a single
 * writer.  Growth appends ids: new metadata is initialised, then n_ids is
 * published with a release store (and the new blocks reach other threads
 * only through release pushes), so no reader sees a half-made block.
 *
 * Shrink retires free blocks.  It first drains every magazine of the stream
 * (as a starving allocator would), then reserves exactly the surplus over
 * target_free from the global count and pops it, so a concurrent allocator
 * never finds fewer free blocks than target_free because of the shrink.
 * Retired blocks are marked in their state word (kvp_block_get and kvp_free
 * then treat their refs as gone), chained through free_next, and handed to
 * the retire hooks.  No grace period is needed (docs/DESIGN.md, "Shrink and
 * the retire hooks"): a retired block was free, so no pool call can hold it
 * as live; calls racing with the retirement only read its metadata, which
 * is never freed, or CAS its state word on the condition that it is in use,
 * which fails; storage guards its buffers with hazard pointers.  After the hooks
 * the ids wait on a list for growth, which reuses them (with a new
 * generation) before it makes new ids, so a pool that grows and shrinks
 * forever keeps its metadata bounded by its largest size.
 */
#include <string.h>

#include "lib/pool/pool_internal.h"
#include "lib/base/rcu.h"

/* Take a retired id back into stream @si as a free block with a new generation. */
static uint32_t revive_retired(struct kvp_pool *p, int si)
{
	uint32_t id = p->retired_head;
	struct kvpi_block *b = kvpi_bt_block(&p->bt, id);
	/* relaxed: the retired list is private to the grow_lock holder. */
	p->retired_head = atomic_load_explicit(&b->free_next, memory_order_relaxed);
	uint64_t st = atomic_load_explicit(&b->state, memory_order_relaxed);
	uint32_t gen = kvpi_st_gen(st) + 1;
	if (gen == 0)
		gen = 1;
	/* A new generation: refs from before the retirement stay stale.
	 * release: a racing kvp_block_get (acquire) sees a whole word. */
	atomic_store_explicit(&b->state,
	                      kvpi_st_make(gen, 0, st & KVPI_ST_EVER, kvpi_stream_tag(p, si), 0),
	                      memory_order_release);
	atomic_store_explicit(&b->free_next, KVPI_NO_ID, memory_order_relaxed);
	return id;
}

int kvpi_grow_locked(struct kvp_pool *p, int si, uint32_t n, kvpi_u32_alias *ids)
{
	/* relaxed: n_ids and n_retired_ids have one writer, the grow_lock holder (us). */
	uint32_t first = atomic_load_explicit(&p->n_ids, memory_order_relaxed);
	uint32_t reuse = atomic_load_explicit(&p->n_retired_ids, memory_order_relaxed);
	if (reuse > n)
		reuse = n;
	uint32_t fresh = n - reuse;

	/* Everything that can fail comes first, so a failure leaves no trace. */
	if ((uint64_t)first + fresh > KVP_MAX_BLOCKS)
		return KVP_EEXHAUSTED;
	if (fresh && kvpi_bt_extend(&p->bt, first + fresh) != 0)
		return KVP_ENOMEM;
	if (fresh && p->mode && p->mode->extend(p, first + fresh) != 0)
		return KVP_ENOMEM;
	/* Retired ids first: growth after a shrink makes no new metadata. */
	for (uint32_t i = 0; i < reuse; i++)
		ids[i] = revive_retired(p, si);
	atomic_store_explicit(&p->n_retired_ids,
	                      atomic_load_explicit(&p->n_retired_ids, memory_order_relaxed) - reuse,
	                      memory_order_relaxed);
	uint32_t tag = kvpi_stream_tag(p, si);
	for (uint32_t i = 0; i < fresh; i++) {
		struct kvpi_block *b = kvpi_bt_block(&p->bt, first + i);
		/* relaxed: published by the release store of n_ids below and
		 * by the caller's later release operations. */
		atomic_store_explicit(&b->state, kvpi_st_make(0, 0, 0, tag, 0),
		                      memory_order_relaxed);
		atomic_store_explicit(&b->owner, 0, memory_order_relaxed);
		atomic_store_explicit(&b->free_next, KVPI_NO_ID, memory_order_relaxed);
		b->own_pos = KVPI_NO_ID;
		b->lru_ahead = b->pad = 0;
		ids[reuse + i] = first + i;
	}
	/* release: readers that see the new n_ids (acquire) see the metadata. */
	if (fresh)
		atomic_store_explicit(&p->n_ids, first + fresh, memory_order_release);
	/* relaxed: statistics-grade counters, single writer under grow_lock. */
	atomic_fetch_add_explicit(&p->managed_stream[si], n, memory_order_relaxed);
	atomic_fetch_add_explicit(&p->managed, n, memory_order_relaxed);
	return KVP_OK;
}

/* Reserve the surplus over @target of the stream's free count. */
static uint32_t reserve_surplus(struct kvpi_freestack *fs, uint32_t target)
{
	/* acquire: as in kvpi_fs_reserve. */
	int64_t a = atomic_load_explicit(&fs->avail, memory_order_acquire);
	for (;;) {
		if (a <= (int64_t)target)
			return 0;
		int64_t k = a - target;
		if (k > UINT32_MAX)
			k = UINT32_MAX;
		if (atomic_compare_exchange_weak_explicit(
		        &fs->avail, &a, a - k, memory_order_acquire, memory_order_acquire))
			return (uint32_t)k;
	}
}

int kvp_shrink(kvp_pool *p, kvp_stream stream, uint32_t target_free, uint32_t *n_retired)
{
	if (!p)
		return KVP_EINVAL;
	int si = kvpi_stream_index(p, stream);
	if (si < 0)
		return KVP_EINVAL;
	if (p->mode) {
		/* The prefix layer waits for RCU grace periods of its own index:
		 * inside a caller's liburcu-bp read-side section that would wait
		 * for ourselves. */
		if (kvpi_rcu_read_ongoing())
			return KVP_EINVAL;
		return p->mode->shrink(p, si, target_free, n_retired);
	}
	return kvpi_shrink_stream(p, si, target_free, n_retired);
}

int kvpi_shrink_stream(struct kvp_pool *p, int si, uint32_t target_free, uint32_t *n_retired)
{
	struct kvpi_tslot *s = kvpi_tslot_get(p);
	struct kvpi_freestack *fs = &p->fs[si];
	uint32_t k, first = KVPI_NO_ID;

	pthread_mutex_lock(&p->grow_lock);
	/* seq_cst: the store half of the magazine Dekker pair. */
	atomic_fetch_add_explicit(&p->starving[si], 1, memory_order_seq_cst);
	kvpi_drain_magazines(p, si, 0);
	k = reserve_surplus(fs, target_free);
	for (uint32_t i = 0; i < k; i++) {
		uint32_t id;
		kvpi_fs_pop_reserved(fs, &p->bt, &p->n_ids, &id, 1);
		struct kvpi_block *b = kvpi_bt_block(&p->bt, id);
		/* relaxed load: we hold the block exclusively (popped), and
		 * nobody changes a free block's state word.
		 * release store: kvp_block_get (acquire) then sees it retired. */
		uint64_t st = atomic_load_explicit(&b->state, memory_order_relaxed);
		atomic_store_explicit(&b->state, st | KVPI_ST_RETIRED, memory_order_release);
		atomic_store_explicit(&b->free_next, first, memory_order_relaxed);
		first = id;
	}
	/* release: lifts the bypass; publishes nothing. */
	atomic_fetch_sub_explicit(&p->starving[si], 1, memory_order_release);
	if (k) {
		atomic_fetch_sub_explicit(&p->managed_stream[si], k, memory_order_relaxed);
		atomic_fetch_sub_explicit(&p->managed, k, memory_order_relaxed);
		kvpi_ctr_add(s, KVPI_C_RETIRED, k);
	}
	pthread_mutex_unlock(&p->grow_lock);
	kvpi_tslot_put(p, s);

	if (k) {
		pthread_mutex_lock(&p->grow_lock);
		/* Hooks run under grow_lock (kvp_pool_remove_retire_hook waits
		 * for them); the chain is ours alone until it joins the retired
		 * list below. */
		uint32_t last = first;
		for (uint32_t id = first; id != KVPI_NO_ID;) {
			uint32_t next = atomic_load_explicit(&kvpi_bt_block(&p->bt, id)->free_next,
			                                     memory_order_relaxed);
			for (int h = 0; h < KVP_MAX_RETIRE_HOOKS; h++)
				if (p->hooks[h].fn)
					p->hooks[h].fn(p->hooks[h].arg, id);
			last = id;
			id = next;
		}
		/* The ids wait for a later growth to reuse them (hooks have run). */
		atomic_store_explicit(&kvpi_bt_block(&p->bt, last)->free_next, p->retired_head,
		                      memory_order_relaxed);
		p->retired_head = first;
		atomic_store_explicit(
		    &p->n_retired_ids,
		    atomic_load_explicit(&p->n_retired_ids, memory_order_relaxed) + k,
		    memory_order_relaxed);
		pthread_mutex_unlock(&p->grow_lock);
	}
	kvpi_history_record(p);
	if (n_retired)
		*n_retired = k;
	return KVP_OK;
}
