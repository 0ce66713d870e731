/*
 * lib/pool/blocktable.h - the pool's block table: segments that never move.
 *
 * Block metadata lives in segments whose addresses are fixed once made.
 * Segment 0 holds the n0 blocks the pool was created with; growth segment
 * k (k = 0 .. KVPI_BT_MAX_SEGS-1) holds KVPI_BT_BASE << k blocks and covers
 * the ids from n0 + KVPI_BT_BASE * (2^k - 1) up.
 *
 * An id finds its block in two loads and no read-side section.  For
 * id >= n0:
 *   v = id - n0 + KVPI_BT_BASE
 *   k = floor(log2 v) - log2 KVPI_BT_BASE   (one clz)
 *   offset = v - 2^floor(log2 v)
 *
 * This is the geometry of lib/base/segtable.h, shared with storage and the
 * buffer cache.  docs/DESIGN.md says why this table keeps its own
 * directory.  Every segment pointer sits in the table itself, in an inline
 * array.  So nothing is ever replaced or freed before the pool is
 * destroyed, and a block pointer stays valid for the pool's life.
 *
 * Synchronization:
 *
 *   operation            who                          ordering
 *   -------------------  ---------------------------  -----------------------
 *   kvpi_bt_block         any thread, for an id it     relaxed load of the
 *                        knows was created            segment pointer: the id
 *                                                     reached the caller
 *                                                     through a release/acquire
 *                                                     chain from the grower
 *                                                     (n_ids, a free-stack
 *                                                     push/pop), which orders
 *                                                     the segment store first
 *   kvpi_bt_extend        grow mutex held              relaxed store of the
 *                        (or single-threaded)         pointer; published as
 *                                                     above
 *   kvpi_bt_destroy       single-threaded              -
 *
 * One block's metadata is 32 bytes:
 *
 *   state      64-bit word: generation (32) | n_used (16) | in_use |
 *              ever_allocated | retired | raw (no owner) | stream (2) |
 *              format (4); in prefix mode also published, cached,
 *              evicting, locked, private.  Changed only by CAS, or under the
 *              block's exclusion: its exclusive holder after a pop, its
 *              owner's exclusion, or a raw op (lib/pool/block_state.h).
 *   owner      the owner id while in use; for a raw block the thread slot
 *              it is biased to, or 0 (relaxed; validated by the state)
 *   free_next  link of the free stack (atomic: read by racing poppers)
 *   own_pos    in a plain pool, the block's position in its owner's id
 *              array (lib/pool/idarray.h), under the owner's exclusion (its
 *              shard lock, or the thread it is biased to)
 *   lru_ahead  in a prefix pool, while the block is cached: the id of the
 *              block two after it on its LRU list, a prefetch hint for the
 *              eviction walk (lib/prefix/prefix_lru_ahead.h), under the
 *              list's mutex; unused by the block layer
 *   pad        unused
 */
#ifndef KVPOOL_LIB_BLOCKTABLE_H
#define KVPOOL_LIB_BLOCKTABLE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "lib/base/segtable.h"

#define KVPI_BT_BASE_SHIFT 10
#define KVPI_BT_BASE       (1u << KVPI_BT_BASE_SHIFT)
#define KVPI_BT_MAX_SEGS   32
#define KVPI_NO_ID         UINT32_MAX
/* Segment size of side tables indexed by block id (lib/prefix/prefix.c); the block
 * table itself is laid out by KVPI_BT_BASE. */
#define KVPI_SEG_SHIFT  10
#define KVPI_SEG_BLOCKS (1u << KVPI_SEG_SHIFT)
#define KVPI_SEG_MASK   (KVPI_SEG_BLOCKS - 1)

struct kvpi_block {
	_Atomic uint64_t state;
	_Atomic uint64_t owner;
	_Atomic uint32_t free_next;
	uint32_t own_pos;
	/* In a prefix pool, the eviction walk's look-ahead hint of a cached
	 * block, under its list's mutex (lib/prefix/prefix_lru_ahead.h). */
	uint32_t lru_ahead;
	uint32_t pad;
};

_Static_assert(sizeof(struct kvpi_block) == 32, "block metadata must stay 32 bytes");

/* State word layout. */
#define KVPI_ST_USED_SHIFT   32
#define KVPI_ST_USED_MASK    (0xffffull << KVPI_ST_USED_SHIFT)
#define KVPI_ST_IN_USE       (1ull << 48)
#define KVPI_ST_EVER         (1ull << 49)
#define KVPI_ST_RETIRED      (1ull << 50)
#define KVPI_ST_RAW          (1ull << 51)
#define KVPI_ST_STREAM_SHIFT 52
/* Prefix cache only (lib/prefix/prefix_internal.h): findable by key, cached (free
 * and findable), taken by an evictor, and the block's lock bit (its prefix
 * fields are being changed: other writers of the word wait until it clears). */
#define KVPI_ST_PUBLISHED (1ull << 54)
#define KVPI_ST_CACHED    (1ull << 55)
#define KVPI_ST_EVICTING  (1ull << 60)
#define KVPI_ST_LOCKED    (1ull << 61)
/* Prefix cache only: a fresh hand-out to one owner, not published since.
 * While it is set the block has that one holder, is on no LRU list and in
 * no index slot, so no matcher, evictor or reset touches the word: every
 * writer holds the owner's shard mutex, and writes it with plain stores
 * (lib/prefix/prefix_internal.h, "Private blocks"). */
#define KVPI_ST_PRIVATE      (1ull << 62)
#define KVPI_ST_FORMAT_SHIFT 56

static inline uint32_t kvpi_st_gen(uint64_t st)
{
	return (uint32_t)st;
}

static inline uint32_t kvpi_st_used(uint64_t st)
{
	return (uint32_t)((st & KVPI_ST_USED_MASK) >> KVPI_ST_USED_SHIFT);
}

static inline uint32_t kvpi_st_stream(uint64_t st)
{
	return (uint32_t)(st >> KVPI_ST_STREAM_SHIFT) & 3u;
}

static inline uint32_t kvpi_st_format(uint64_t st)
{
	return (uint32_t)(st >> KVPI_ST_FORMAT_SHIFT) & 15u;
}

static inline uint64_t kvpi_st_with_used(uint64_t st, uint32_t used)
{
	return (st & ~KVPI_ST_USED_MASK) | ((uint64_t)used << KVPI_ST_USED_SHIFT);
}

static inline uint64_t kvpi_st_make(uint32_t gen, uint32_t used, uint64_t flags, uint32_t stream,
                                    uint32_t format)
{
	return (uint64_t)gen | ((uint64_t)used << KVPI_ST_USED_SHIFT) | flags |
	       ((uint64_t)stream << KVPI_ST_STREAM_SHIFT) |
	       ((uint64_t)format << KVPI_ST_FORMAT_SHIFT);
}

struct kvpi_blocktable {
	struct kvpi_block *seg0; /* ids [0, n0); set before the pool is shared */
	uint32_t n0;
	uint32_t cap; /* ids covered by allocated segments; grow mutex */
	_Atomic(struct kvpi_block *) seg[KVPI_BT_MAX_SEGS];
};

/**
 * kvpi_bt_block - the metadata of block @id
 *
 * The caller knows @id was created (below kvp_pool_n_ids read with acquire,
 * or obtained from a free stack or a ref).  Two loads, no fence.
 */
static inline struct kvpi_block *kvpi_bt_block(struct kvpi_blocktable *bt, uint32_t id)
{
	if (__builtin_expect(id < bt->n0, 1))
		return &bt->seg0[id];
	uint32_t i = id - bt->n0;
	/* relaxed: see the table above (the id's publication orders it). */
	struct kvpi_block *s = atomic_load_explicit(&bt->seg[kvpi_seg_of(i, KVPI_BT_BASE_SHIFT)],
	                                            memory_order_relaxed);
	return &s[kvpi_seg_off(i, KVPI_BT_BASE_SHIFT)];
}

/* kvpi_bt_block_slow - kvpi_bt_block out of line (lib/pool/blocktable.c).
 * Loops that walk many blocks call it for ids past the first segment, so
 * they keep their registers for the common case. */
struct kvpi_block *kvpi_bt_block_slow(struct kvpi_blocktable *bt, uint32_t id);

/*
 * kvpi_bt_block_at - kvpi_bt_block, given the first segment @seg0 of @n0
 * blocks.  A loop reads those two once: its atomic accesses would make the
 * compiler reload them for every block.
 */
static inline __attribute__((always_inline)) struct kvpi_block *
kvpi_bt_block_at(struct kvpi_blocktable *bt, struct kvpi_block *seg0, uint32_t n0, uint32_t id)
{
	return __builtin_expect(id < n0, 1) ? &seg0[id] : kvpi_bt_block_slow(bt, id);
}

/**
 * kvpi_bt_init - a table with segment 0 of @n0 blocks (contents undefined:
 * the caller initialises every block it creates).  Returns 0 or -1 (no memory).
 */
int kvpi_bt_init(struct kvpi_blocktable *bt, uint32_t n0);

/**
 * kvpi_bt_extend - make room for ids below @n_ids
 *
 * Grow mutex held (or single-threaded).  Adds growth segments; never moves
 * or frees one, so it never waits for readers.  Returns 0, or -1 when memory
 * ran out (segments already added stay; ids they do not cover stay absent).
 */
int kvpi_bt_extend(struct kvpi_blocktable *bt, uint32_t n_ids);

/** kvpi_bt_destroy - free every segment (single-threaded) */
void kvpi_bt_destroy(struct kvpi_blocktable *bt);

/** kvpi_bt_bytes - bytes of metadata the table holds (grow mutex or quiescent) */
uint64_t kvpi_bt_bytes(const struct kvpi_blocktable *bt);

#endif /* KVPOOL_LIB_BLOCKTABLE_H */
