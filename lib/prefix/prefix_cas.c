/*
 * lib/prefix/prefix_cas.c - the CAS on a block's state word (kvpi_pfx_cas).
 *
 * In a file of its own, which calls it nowhere: every caller (the lock of
 * a match, release, publish or reset, and the evictor's CAS to EVICTING and
 * its try-lock in lib/prefix/prefix_lru.c) reaches it through a call that
 * the linker can redirect, so tests/prefix_race_test.c and
 * tests/prefix_walk_test.c wrap all of them (-Wl,--wrap=kvpi_pfx_cas).  A
 * definition beside the evictor would be inlined there and never wrapped.
 */
#include "lib/prefix/prefix_internal.h"

bool kvpi_pfx_cas(struct kvpi_block *b, uint64_t st, uint64_t nst)
{
	/* acq_rel: the winner owns the block (evictor) or its lock from here
	 * on, ordered after the writes of its last holders and lockers (their
	 * release stores); release: nothing to publish for a lock, but the
	 * evictor's EVICTING orders its scan's reads. */
	return atomic_compare_exchange_strong_explicit(&b->state, &st, nst, memory_order_acq_rel,
	                                               memory_order_acquire);
}
