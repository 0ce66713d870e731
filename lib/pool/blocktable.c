/*
 * lib/pool/blocktable.c - segment 0 plus geometric growth segments.
 *
 * Growth never moves a block and never replaces anything a reader may be
 * looking at: it only fills the next empty pointer of the table's inline
 * segment array.  So the table needs no read-side section, no RCU and no
 * deferred freeing; segments are freed by kvpi_bt_destroy alone.
 *
 * Segments are allocated without clearing: the pool initialises every
 * block it creates (initial, growth), so a large growth segment costs only the
 * pages of the blocks actually created.
 */
#include "lib/pool/blocktable.h"

#include <string.h>

#include "lib/base/sysmem.h"

#define KVPI_CACHELINE 64

int kvpi_bt_init(struct kvpi_blocktable *bt, uint32_t n0)
{
	memset(bt, 0, sizeof(*bt));
	bt->seg0 =
	    kvpi_sys_alloc((size_t)(n0 ? n0 : 1) * sizeof(struct kvpi_block), KVPI_CACHELINE);
	if (!bt->seg0)
		return -1;
	bt->n0 = n0;
	bt->cap = n0;
	return 0;
}

int kvpi_bt_extend(struct kvpi_blocktable *bt, uint32_t n_ids)
{
	while (bt->cap < n_ids) {
		uint32_t k = 0;
		/* relaxed: only the grow-mutex holder stores segment pointers. */
		while (k < KVPI_BT_MAX_SEGS &&
		       atomic_load_explicit(&bt->seg[k], memory_order_relaxed))
			k++;
		if (k >= KVPI_BT_MAX_SEGS - KVPI_BT_BASE_SHIFT)
			return -1; /* past 2^32 ids: cannot happen below KVP_MAX_BLOCKS */
		size_t n = (size_t)KVPI_BT_BASE << k;
		struct kvpi_block *s =
		    kvpi_sys_alloc(n * sizeof(struct kvpi_block), KVPI_CACHELINE);
		if (!s)
			return -1;
		/* relaxed: published by the later release of the new ids. */
		atomic_store_explicit(&bt->seg[k], s, memory_order_relaxed);
		uint64_t cap = (uint64_t)bt->cap + n;
		bt->cap = cap > UINT32_MAX ? UINT32_MAX : (uint32_t)cap;
	}
	return 0;
}

void kvpi_bt_destroy(struct kvpi_blocktable *bt)
{
	kvpi_sys_free(bt->seg0);
	bt->seg0 = NULL;
	for (int k = 0; k < KVPI_BT_MAX_SEGS; k++) {
		kvpi_sys_free(atomic_load_explicit(&bt->seg[k], memory_order_relaxed));
		atomic_store_explicit(&bt->seg[k], NULL, memory_order_relaxed);
	}
	bt->n0 = bt->cap = 0;
}

uint64_t kvpi_bt_bytes(const struct kvpi_blocktable *bt)
{
	return (uint64_t)bt->cap * sizeof(struct kvpi_block) + sizeof(*bt);
}

__attribute__((noinline)) struct kvpi_block *kvpi_bt_block_slow(struct kvpi_blocktable *bt,
                                                                uint32_t id)
{
	return kvpi_bt_block(bt, id);
}
