/*
 * lib/pool/block_state.h - a block's state word: how allocate and free change it.
 *
 * A block's life:
 *
 *   1. Free: on a global stack or in a thread's magazine.
 *   2. Popped by exactly one thread.  That thread stamps a new generation,
 *      the owner and the fill into the state word.  It adds the block to
 *      the owner's id array under the owner's exclusion: an owner op of the
 *      thread the record is biased to, or else the shard lock.
 *   3. Freed by whoever holds a current ref, then pushed back.
 *
 * Who writes an in-use block's state word:
 *
 *   - An owned block's writers (kvp_free, kvp_free_all, kvp_block_set_used)
 *     all hold the owner's exclusion.  So a free checks the generation and
 *     in_use, then clears them with a plain release store.  Of several
 *     racing frees, exactly one sees the block in use; the rest are stale.
 *   - A raw block (KVPI_ST_RAW) has no owner.  Its free and set_used are
 *     CASes on the whole word.  A raw ref's CAS never succeeds on an owned
 *     hand-out, because the word it expects carries KVPI_ST_RAW.
 *   - The exception: in the asymmetric mode, the thread that allocated a
 *     raw block frees it with the plain store while its raw bias stands.
 *     Any other thread revokes that bias before it changes the block
 *     (lib/pool/bias.c).
 *
 * So a stale ref never changes a block that was handed out again.
 * docs/DESIGN.md, "Giving blocks back", has the argument.
 */
#ifndef KVPOOL_LIB_POOL_BLOCK_STATE_H
#define KVPOOL_LIB_POOL_BLOCK_STATE_H

#include "lib/pool/pool_internal.h"

/* Stream index of a block whose state word is @st. */
static inline int kvpi_stream_of_state(const struct kvp_pool *p, uint64_t st)
{
	return p->separate_kv ? (int)kvpi_st_stream(st) : 0;
}

/* The state word of a freed block that had state @st: not in use, not raw,
 * not private, no fill; generation, stream, format and "ever handed out"
 * kept. */
static inline uint64_t kvpi_freed_state(uint64_t st)
{
	return st & ~(KVPI_ST_IN_USE | KVPI_ST_RAW | KVPI_ST_PRIVATE | KVPI_ST_USED_MASK);
}

/* The generation a block whose state word is @old takes when it is handed
 * out again: one more, skipping 0 ("never handed out"). */
static inline uint32_t kvpi_next_gen(uint64_t old)
{
	uint32_t gen = kvpi_st_gen(old) + 1;
	if (gen == 0)
		gen = 1;
	return gen;
}

/*
 * kvpi_stamp_publish - the last two stores of a hand-out: the owner, then
 * the new state word @st.  The caller holds the block exclusively.
 */
static inline __attribute__((always_inline)) void kvpi_stamp_publish(struct kvpi_block *b,
                                                                     kvp_owner owner, uint64_t st)
{
	/* release: a kvp_block_get that reads this owner (then fences) cannot
	 * read a state word from before the free that preceded this hand-out;
	 * free on x86. */
	atomic_store_explicit(&b->owner, owner, memory_order_release);
	/* release: kvp_block_get's acquire load of the state then sees the
	 * owner written above, and whatever the caller wrote before. */
	atomic_store_explicit(&b->state, st, memory_order_release);
}

/* Stamp a popped block as handed out; returns its new generation.  Sets
 * *reused when the block had been handed out before. */
static inline __attribute__((always_inline)) uint32_t
kvpi_stamp_block(struct kvpi_block *b, uint32_t used, uint64_t flags, kvp_owner owner,
                 kvp_format format, bool *reused)
{
	/* relaxed: we hold the block exclusively since the acquire pop. */
	uint64_t old = atomic_load_explicit(&b->state, memory_order_relaxed);
	uint32_t gen = kvpi_st_gen(old) + 1;
	if (gen == 0)
		gen = 1; /* generation 0 means "never handed out" */
	*reused = (old & KVPI_ST_EVER) != 0;
	/* release (both): as in kvpi_stamp_publish, written out here: the
	 * one-block fast paths' code is laid out around these two stores. */
	atomic_store_explicit(&b->owner, owner, memory_order_release);
	atomic_store_explicit(&b->state,
	                      kvpi_st_make(gen, used, KVPI_ST_IN_USE | KVPI_ST_EVER | flags,
	                                   kvpi_st_stream(old), (uint32_t)format),
	                      memory_order_release);
	return gen;
}

/*
 * Free a block whose state word is still at @gen and in use; the caller
 * holds the block's exclusion, so no other thread writes the word: for an
 * owned block the owner's (every writer of an owned in-use block holds it:
 * the header above), for a raw block a raw op of the slot it is biased to.
 * Returns the state it had, or 0 when it was stale.
 */
static inline uint64_t kvpi_release_owned(struct kvpi_block *b, uint32_t gen)
{
	/* acquire: orders the last holder's writes (storage, a set_used of
	 * another thread under the same exclusion) before our push. */
	uint64_t st = atomic_load_explicit(&b->state, memory_order_acquire);
	if (kvpi_st_gen(st) != gen || !(st & KVPI_ST_IN_USE))
		return 0;
	/* release: a kvp_block_get or stale free that reads the freed word
	 * also sees what we did before (a plain store on x86). */
	atomic_store_explicit(&b->state, kvpi_freed_state(st), memory_order_release);
	return st;
}

/* The owner word of a raw block handed out by slot @s: the slot while its
 * raw bias stands, else 0 (lib/pool/bias.c has the protocol). */
static inline uint64_t kvpi_raw_owner_word(struct kvpi_tslot *s)
{
	/* relaxed: only this slot's thread acts on its own slot's value; a
	 * revocation racing with the stamp leaves a word naming a revoked
	 * slot, which every path treats as "use the CAS". */
	return atomic_load_explicit(&s->raw_bias, memory_order_relaxed) == KVPI_RAW_BIASED
	           ? (uint64_t)(uintptr_t)s
	           : 0;
}

#endif /* KVPOOL_LIB_POOL_BLOCK_STATE_H */
