/*
 * lib/pool/magazine.c - draining the threads' magazines into the global stacks.
 *
 * A thread that cannot get its blocks from its magazine and the global
 * stack raises the stream's starving count and drains every thread's
 * magazine here before it grows the pool or reports exhaustion (the
 * protocol, and why no free block is missed: lib/pool/magazine.h).
 */
#include "lib/base/spin.h"
#include "lib/pool/pool_internal.h"

/* Drain one magazine into the global stack.  With @wait, wait out an owner
 * inside a call (or another drainer); without, skip such a magazine.
 * Returns false when it skipped one that held blocks.  The caller raised
 * starving and issued the heavy barrier after it. */
static bool drain_one(struct kvp_pool *p, int si, struct kvpi_mag *m, bool wait)
{
	struct kvpi_spin spin = {0};
	for (;;) {
		/* acquire (asym) / seq_cst (fallback): the load half of the
		 * drainer's Dekker pair; acquire sees what the owner left in
		 * the magazine when it stored 0 (release). */
		uintptr_t in = atomic_load_explicit(&m->in_call, p->asym ? memory_order_acquire
		                                                         : memory_order_seq_cst);
		if (in == 0) {
			/* The owner stays out until starving drops: only other
			 * drainers (or its exiting thread) can be here. */
			if (kvpi_mag_count(m) == 0)
				return true;
			uint32_t exp = 0;
			/* acquire: see the previous claimer's release. */
			if (atomic_compare_exchange_strong_explicit(
			        &m->claimed, &exp, 1, memory_order_acquire, memory_order_relaxed)) {
				kvpi_mag_flush_all(p, si, m);
				/* release: the next holder sees the emptied magazine. */
				atomic_store_explicit(&m->claimed, 0, memory_order_release);
				return true;
			}
		} else if (!wait) {
			return false;
		}
		/* in_call: its owner is inside a call; claimed: another drainer
		 * is emptying it.  Either ends within a few dozen instructions
		 * unless that thread was preempted: spin a little, then yield. */
		kvpi_spin_wait(&spin);
	}
}

void kvpi_drain_magazines(struct kvp_pool *p, int si, uint32_t want)
{
	/* Pass 0 takes the idle threads' magazines and stops as soon as @want
	 * blocks are reservable; pass 1 (the exact one) waits for every
	 * magazine whose owner is inside a call. */
	kvpi_heavy_barrier(p);
	for (int pass = 0; pass < 2; pass++) {
		bool skipped = false;
		/* seq_cst: after our seq_cst starving store, so a slot pushed by
		 * a thread whose first call missed the flag is on the list. */
		for (struct kvpi_tslot *s = atomic_load_explicit(&p->slots, memory_order_seq_cst);
		     s; s = s->next) {
			skipped |= !drain_one(p, si, &s->mag[si], pass == 1);
			/* relaxed: a hint; the caller's reservation decides. */
			if (want &&
			    atomic_load_explicit(&p->fs[si].avail, memory_order_relaxed) >= want)
				return;
		}
		if (!skipped)
			return;
	}
}

void kvpi_drain_idle_magazines(struct kvp_pool *p, int si)
{
	kvpi_heavy_barrier(p);
	/* seq_cst: as in kvpi_drain_magazines. */
	for (struct kvpi_tslot *s = atomic_load_explicit(&p->slots, memory_order_seq_cst); s;
	     s = s->next)
		drain_one(p, si, &s->mag[si], false);
}
