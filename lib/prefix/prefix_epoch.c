/*
 * lib/prefix/prefix_epoch.c - a block's epoch, read with no lock.
 *
 * The epoch (lib/prefix/prefix_epoch.h) lives in the block's side entry.
 * Only a fresh hand-out writes it, while it holds the block exclusively,
 * with a release store before the state word's release store that makes
 * the block in use under its new generation.  A block is in use under one
 * generation for one interval only: every hand-out and every revival
 * raises the generation.  So a reader that sees the state "in use under
 * generation G" before and after its load of the epoch read the epoch of
 * that interval's hand-out: had it read a later hand-out's store, the
 * acquire fence after that load would order the block's leaving G (which
 * happens-before the later hand-out) before the second state load, and
 * that load would not see "in use under G".
 */
#include "lib/prefix/prefix_epoch.h"

#include "lib/prefix/prefix_internal.h"

int kvpi_block_get_epoch(kvp_pool *p, kvp_ref ref, kvp_block_info *out, uint32_t *epoch)
{
	int rc = kvp_block_get(p, ref, out);
	if (rc != KVP_OK || !out->in_use) {
		*epoch = 0;
		return rc;
	}
	if (!p->prefix) {
		*epoch = KVP_REF_GEN(ref);
		return KVP_OK;
	}
	uint32_t id = KVP_REF_ID(ref), gen = KVP_REF_GEN(ref);
	struct kvpi_block *b = kvpi_bt_block(&p->bt, id);
	struct kvpi_pside *e = kvpi_pfx_side(p->prefix, id);
	/* acquire: pairs with the hand-out's (or revival's) release store. */
	uint64_t st = atomic_load_explicit(&b->state, memory_order_acquire);
	/* relaxed: validated by the re-read after the fence. */
	uint32_t ep = atomic_load_explicit(&e->epoch, memory_order_relaxed);
	/* acquire fence: keeps the epoch load before the re-read, and pairs
	 * with the hand-out's release store of the epoch (see above). */
	atomic_thread_fence(memory_order_acquire);
	uint64_t st2 = atomic_load_explicit(&b->state, memory_order_relaxed);
	if (kvpi_st_gen(st) != gen || !(st & KVPI_ST_IN_USE) || kvpi_st_gen(st2) != gen ||
	    !(st2 & KVPI_ST_IN_USE))
		return KVP_ENOENT; /* left this hand-out since kvp_block_get */
	*epoch = ep;
	return KVP_OK;
}
