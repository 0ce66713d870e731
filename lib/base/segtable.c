/*
 * lib/base/segtable.c - installing and freeing the segments of a segmented id table.
 *
 * Segments are only ever added, each at most once, by compare-and-swap from
 * NULL; none is replaced or freed before the table is destroyed.  So a
 * reader needs no read-side section: the segment it found stays.  Making a
 * segment (allocating and initialising it) is the caller's, as tables
 * differ in what a fresh entry holds and in when they make one.
 */
#include "lib/base/segtable.h"

#include "lib/base/sysmem.h"

void kvpi_segtab_init(struct kvpi_segtab *t)
{
	for (int k = 0; k < KVPI_SEGTAB_MAX; k++)
		atomic_init(&t->seg[k], NULL);
}

void *kvpi_segtab_install(struct kvpi_segtab *t, uint32_t k, void *fresh)
{
	void *cur = NULL;

	/* release on success: publishes the segment's contents to every
	 * kvpi_segtab_get (acquire) that finds it; acquire on failure: we
	 * return the winner's segment, whose contents we must see too. */
	if (atomic_compare_exchange_strong_explicit(&t->seg[k], &cur, fresh, memory_order_acq_rel,
	                                            memory_order_acquire))
		return fresh;
	return cur;
}

void kvpi_segtab_destroy(struct kvpi_segtab *t)
{
	for (int k = 0; k < KVPI_SEGTAB_MAX; k++) {
		/* relaxed: single-threaded, after every user is gone. */
		kvpi_sys_free(atomic_load_explicit(&t->seg[k], memory_order_relaxed));
		atomic_store_explicit(&t->seg[k], NULL, memory_order_relaxed);
	}
}
