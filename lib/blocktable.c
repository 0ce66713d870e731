/*
 * lib/blocktable.c - segments and an RCU-published directory.
 *
 * Growth never moves a block: new ids land in new segments.  Only the small
 * directory of segment pointers is ever replaced, by a copy twice as large,
 * published with a release store; the old copy is handed to call_rcu and
 * freed after an RCU grace period, when no reader can still hold it.  The
 * grower never waits, so growth can run inside any read-side section (the
 * pool's or an application's own liburcu-bp one).
 */
#include "lib/blocktable.h"

#include <string.h>

#include "lib/sysmem.h"

#define KVP_DIR_MIN   16u
#define KVP_CACHELINE 64

static struct kvp_dir *dir_alloc(uint32_t cap)
{
	struct kvp_dir *d =
	    kvp_sys_calloc(1, sizeof(*d) + (size_t)cap * sizeof(d->seg[0]), KVP_CACHELINE);
	if (d)
		d->cap = cap;
	return d;
}

int kvp_bt_init(struct kvp_blocktable *bt)
{
	struct kvp_dir *d = dir_alloc(KVP_DIR_MIN);
	if (!d)
		return -1;
	atomic_init(&bt->dir, d);
	bt->n_segs = 0;
	return 0;
}

int kvp_bt_extend(struct kvp_blocktable *bt, uint32_t n_ids)
{
	uint32_t need = (uint32_t)(((uint64_t)n_ids + KVP_SEG_BLOCKS - 1) >> KVP_SEG_SHIFT);
	/* relaxed: only the grow-mutex holder stores the directory. */
	struct kvp_dir *d = atomic_load_explicit(&bt->dir, memory_order_relaxed);
	struct kvp_dir *old = NULL;

	if (need <= bt->n_segs)
		return 0;
	if (need > d->cap) {
		uint32_t cap = d->cap;
		while (cap < need)
			cap *= 2;
		struct kvp_dir *nd = dir_alloc(cap);
		if (!nd)
			return -1;
		memcpy(nd->seg, d->seg, (size_t)bt->n_segs * sizeof(d->seg[0]));
		old = d;
		d = nd;
	}
	int rc = 0;
	while (bt->n_segs < need) {
		struct kvp_block *seg =
		    kvp_sys_calloc(KVP_SEG_BLOCKS, sizeof(struct kvp_block), KVP_CACHELINE);
		if (!seg) {
			rc = -1;
			break;
		}
		d->seg[bt->n_segs++] = seg;
	}
	if (old) {
		/* release: a reader that loads the new directory (acquire)
		 * sees the copied and the new segment pointers. */
		atomic_store_explicit(&bt->dir, d, memory_order_release);
		kvp_rcu_free_deferred(old);
	} else {
		/* The directory is the same object; new segment pointers are
		 * published to readers by the caller's later release of the
		 * ids (kvp_pool's n_ids, or a free-stack push). */
		atomic_thread_fence(memory_order_release);
	}
	return rc;
}

void kvp_bt_destroy(struct kvp_blocktable *bt)
{
	struct kvp_dir *d = atomic_load_explicit(&bt->dir, memory_order_relaxed);
	if (!d)
		return;
	for (uint32_t i = 0; i < bt->n_segs; i++)
		kvp_sys_free(d->seg[i]);
	kvp_sys_free(d);
	atomic_store_explicit(&bt->dir, NULL, memory_order_relaxed);
	bt->n_segs = 0;
}

uint64_t kvp_bt_bytes(const struct kvp_blocktable *bt)
{
	struct kvp_dir *d =
	    atomic_load_explicit(&((struct kvp_blocktable *)bt)->dir, memory_order_relaxed);
	return (uint64_t)bt->n_segs * KVP_SEG_BLOCKS * sizeof(struct kvp_block) + sizeof(*d) +
	       (uint64_t)d->cap * sizeof(d->seg[0]);
}
