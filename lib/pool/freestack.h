/*
 * lib/pool/freestack.h - a stream's global free list: Treiber stack + exact count.
 *
 * The head is one tagged word (lib/base/tagged.h), {ABA tag, top id},
 * changed only by compare-and-swap; every successful change bumps the tag,
 * so a CAS that succeeds proves nothing moved since its load.  The links live in
 * the block table (kvpi_block.free_next).
 *
 * Beside the stack, 'avail' counts the blocks that may be reserved.  It is
 * the basis of all-or-nothing allocation: a taker first reserves k blocks
 * by lowering avail (never below 0), then pops exactly k; a giver pushes
 * first, then raises avail.  Hence at every instant
 *     blocks on the stack >= avail + reserved-but-not-yet-popped,
 * and a pop that holds a reservation always finds a block.
 *
 * Synchronization: every function may be called by any thread at any time
 * (block metadata is read through the table, whose blocks never move).
 * Pushes are lock-free; pops are lock-free; reservation is a CAS loop.
 */
#ifndef KVPOOL_LIB_FREESTACK_H
#define KVPOOL_LIB_FREESTACK_H

#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>

#include "lib/base/spin.h"
#include "lib/base/tagged.h"
#include "lib/pool/blocktable.h"

/*
 * Block ids as the block layer writes them out.  kvp_allocate has them
 * written into the caller's kvp_ref (uint64_t) array before it widens them
 * to refs.  So every function that stores ids takes a may_alias pointer:
 * kvpi_get_blocks and what it calls, and kvpi_fs_pop_reserved.  C's
 * aliasing rules then allow those stores whatever gets inlined where (LTO
 * included).
 */
typedef uint32_t __attribute__((may_alias)) kvpi_u32_alias;

struct kvpi_freestack {
	_Atomic uint64_t head; /* {tag:32, id:32}; id KVPI_NO_ID when empty */
	char pad0[56];
	_Atomic int64_t avail; /* reservable blocks */
	char pad1[56];
};

/* kvpi_fs_pack - a head word {@tag, @id}: the tagged word of lib/base/tagged.h */
static inline uint64_t kvpi_fs_pack(uint32_t tag, uint32_t id)
{
	return kvpi_tagged_pack(tag, id);
}

static inline void kvpi_fs_init(struct kvpi_freestack *fs)
{
	atomic_init(&fs->head, kvpi_tagged_pack(0, KVPI_NO_ID));
	atomic_init(&fs->avail, 0);
}

/**
 * kvpi_fs_push_chain - push a chain first -> ... -> last, already linked by
 * free_next, then make its @n blocks reservable.  @first ends on top.
 */
static inline void kvpi_fs_push_chain(struct kvpi_freestack *fs, struct kvpi_blocktable *bt,
                                      uint32_t first, uint32_t last, uint32_t n)
{
	struct kvpi_block *lb = kvpi_bt_block(bt, last);
	/* relaxed: the CAS below (release) publishes the link. */
	uint64_t h = atomic_load_explicit(&fs->head, memory_order_relaxed);
	do {
		atomic_store_explicit(&lb->free_next, kvpi_tagged_index(h), memory_order_relaxed);
		/* release on success: a popper that acquires this head sees
		 * the link and everything the freeing thread wrote to the
		 * blocks (and their storage) before freeing them. */
	} while (!atomic_compare_exchange_weak_explicit(
	    &fs->head, &h, kvpi_tagged_next(h, first), memory_order_release, memory_order_relaxed));
	/* release: a reserver that sees the count (acquire) also sees the push. */
	atomic_fetch_add_explicit(&fs->avail, n, memory_order_release);
}

/**
 * kvpi_fs_push_ids - link @ids[0..n) so that ids[n-1] ends on top (the last
 * one given is the first reused), then push them.
 */
static inline void kvpi_fs_push_ids(struct kvpi_freestack *fs, struct kvpi_blocktable *bt,
                                    const uint32_t *ids, uint32_t n)
{
	if (n == 0)
		return;
	for (uint32_t i = n - 1; i > 0; i--)
		/* relaxed: published by the push CAS (release). */
		atomic_store_explicit(&kvpi_bt_block(bt, ids[i])->free_next, ids[i - 1],
		                      memory_order_relaxed);
	kvpi_fs_push_chain(fs, bt, ids[n - 1], ids[0], n);
}

/**
 * kvpi_fs_reserve - reserve between @min and @max blocks (0 < min <= max)
 *
 * Returns how many were reserved: 0 when fewer than @min are available,
 * else min(avail, @max).  All or nothing for @min.
 */
static inline uint32_t kvpi_fs_reserve(struct kvpi_freestack *fs, uint32_t min, uint32_t max)
{
	/* acquire: pairs with the release increments, so the pushes behind
	 * the blocks we reserve are visible to our pops. */
	int64_t a = atomic_load_explicit(&fs->avail, memory_order_acquire);
	for (;;) {
		if (a < (int64_t)min)
			return 0;
		uint32_t take = a < (int64_t)max ? (uint32_t)a : max;
		if (atomic_compare_exchange_weak_explicit(
		        &fs->avail, &a, a - take, memory_order_acquire, memory_order_acquire))
			return take;
	}
}

/** kvpi_fs_unreserve - give back @n reserved but unpopped blocks */
static inline void kvpi_fs_unreserve(struct kvpi_freestack *fs, uint32_t n)
{
	/* release: as for a push. */
	atomic_fetch_add_explicit(&fs->avail, n, memory_order_release);
}

/**
 * kvpi_fs_pop_reserved - pop @n blocks the caller has reserved into @ids,
 * top first (most recently freed first).
 *
 * Pops up to 8 at a time with one CAS: the walk reads links that may be
 * rewritten concurrently, but the tagged CAS fails unless nothing changed
 * since the head was loaded, in which case the walk was consistent.
 */
static inline void kvpi_fs_pop_reserved(struct kvpi_freestack *fs, struct kvpi_blocktable *bt,
                                        _Atomic uint32_t *n_ids, kvpi_u32_alias *ids, uint32_t n)
{
	uint32_t got = 0;
	struct kvpi_spin spin = {0};

	while (got < n) {
		/* acquire: see the links and block writes of the pushers. */
		uint64_t h = atomic_load_explicit(&fs->head, memory_order_acquire);
		uint32_t want = n - got < 8 ? n - got : 8, k = 0;
		uint32_t id = kvpi_tagged_index(h), next = id;
		while (k < want && next != KVPI_NO_ID) {
			/* Past the top, a link may have been written after our
			 * head load (the CAS will then fail): only follow ids
			 * whose segment we are sure to see (n_ids, acquire). */
			if (k > 0 && next >= atomic_load_explicit(n_ids, memory_order_acquire))
				break;
			ids[got + k++] = next;
			/* relaxed: validated by the tagged CAS below. */
			next = atomic_load_explicit(&kvpi_bt_block(bt, next)->free_next,
			                            memory_order_relaxed);
		}
		if (id == KVPI_NO_ID || k == 0) {
			/* Our reserved blocks are being pushed right now. */
			kvpi_spin_wait(&spin);
			continue;
		}
		/* acquire on success: pairs with the release push of every
		 * block we take (release sequence of RMWs on head). */
		if (atomic_compare_exchange_weak_explicit(&fs->head, &h, kvpi_tagged_next(h, next),
		                                          memory_order_acquire,
		                                          memory_order_relaxed))
			got += k;
	}
}

#endif /* KVPOOL_LIB_FREESTACK_H */
