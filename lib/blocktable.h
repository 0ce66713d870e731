/*
 * lib/blocktable.h - the pool's segmented block table.
 *
 * Block metadata lives in fixed-size segments of KVP_SEG_BLOCKS entries.
 * A directory (array of segment pointers) maps an id to its segment; growth
 * adds segments and, when the directory is full, publishes a larger copy of
 * it with RCU.  Blocks never move, so a block pointer obtained inside an
 * RCU read-side section stays valid for the pool's life (segments are freed
 * only by kvp_pool_destroy); the directory itself is what RCU protects.
 *
 * Synchronization:
 *
 *   operation            who                          ordering
 *   -------------------  ---------------------------  -----------------------
 *   kvp_bt_block         any thread, in an RCU        acquire load of the
 *                        read-side section             directory pointer
 *   kvp_bt_extend        grow mutex held              release store of the
 *                                                      directory pointer; the
 *                                                      old one freed after a
 *                                                      grace period (call_rcu)
 *   kvp_bt_destroy       single-threaded              -
 *
 * One block's metadata is 32 bytes:
 *
 *   state      64-bit word changed only by CAS or by the block's exclusive
 *              holder: generation (32) | n_used (16) | in_use | ever_allocated
 *              | retired | raw (no owner) | stream (2) | format (4); in prefix
 *              mode also published, cached, evicting
 *   owner      the owner id while in use (relaxed; validated by the state)
 *   free_next  link of the free stack (atomic: read by racing poppers)
 *   own_prev/own_next  links of the owner's list, under the owner's shard lock
 */
#ifndef KVPOOL_LIB_BLOCKTABLE_H
#define KVPOOL_LIB_BLOCKTABLE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "lib/rcu.h"

#define KVP_SEG_SHIFT  10
#define KVP_SEG_BLOCKS (1u << KVP_SEG_SHIFT)
#define KVP_SEG_MASK   (KVP_SEG_BLOCKS - 1)
#define KVP_NO_ID      UINT32_MAX

struct kvp_block {
	_Atomic uint64_t state;
	_Atomic uint64_t owner;
	_Atomic uint32_t free_next;
	uint32_t own_prev;
	uint32_t own_next;
	uint32_t pad;
};

_Static_assert(sizeof(struct kvp_block) == 32, "block metadata must stay 32 bytes");

/* State word layout. */
#define KVP_ST_USED_SHIFT   32
#define KVP_ST_USED_MASK    (0xffffull << KVP_ST_USED_SHIFT)
#define KVP_ST_IN_USE       (1ull << 48)
#define KVP_ST_EVER         (1ull << 49)
#define KVP_ST_RETIRED      (1ull << 50)
#define KVP_ST_RAW          (1ull << 51)
#define KVP_ST_STREAM_SHIFT 52
/* Prefix cache only (lib/prefix_internal.h): findable by key, cached (free
 * and on an LRU list), taken off the LRU by an evictor. */
#define KVP_ST_PUBLISHED    (1ull << 54)
#define KVP_ST_CACHED       (1ull << 55)
#define KVP_ST_EVICTING     (1ull << 60)
#define KVP_ST_FORMAT_SHIFT 56

static inline uint32_t kvp_st_gen(uint64_t st)
{
	return (uint32_t)st;
}

static inline uint32_t kvp_st_used(uint64_t st)
{
	return (uint32_t)((st & KVP_ST_USED_MASK) >> KVP_ST_USED_SHIFT);
}

static inline uint32_t kvp_st_stream(uint64_t st)
{
	return (uint32_t)(st >> KVP_ST_STREAM_SHIFT) & 3u;
}

static inline uint32_t kvp_st_format(uint64_t st)
{
	return (uint32_t)(st >> KVP_ST_FORMAT_SHIFT) & 15u;
}

static inline uint64_t kvp_st_with_used(uint64_t st, uint32_t used)
{
	return (st & ~KVP_ST_USED_MASK) | ((uint64_t)used << KVP_ST_USED_SHIFT);
}

static inline uint64_t kvp_st_make(uint32_t gen, uint32_t used, uint64_t flags, uint32_t stream,
                                   uint32_t format)
{
	return (uint64_t)gen | ((uint64_t)used << KVP_ST_USED_SHIFT) | flags |
	       ((uint64_t)stream << KVP_ST_STREAM_SHIFT) |
	       ((uint64_t)format << KVP_ST_FORMAT_SHIFT);
}

struct kvp_dir {
	char rcu_head[KVP_RCU_HEAD_BYTES]; /* for deferred freeing (lib/rcu.h) */
	uint32_t cap;                      /* segment slots */
	struct kvp_block *seg[];
};

struct kvp_blocktable {
	_Atomic(struct kvp_dir *) dir;
	uint32_t n_segs; /* segments allocated; grow mutex */
};

/**
 * kvp_bt_block - the metadata of block @id
 *
 * Caller is inside an RCU read-side section and knows @id was created
 * (below kvp_pool_n_ids, or obtained from a free stack).
 */
static inline struct kvp_block *kvp_bt_block(struct kvp_blocktable *bt, uint32_t id)
{
	/* acquire: pairs with the release in kvp_bt_extend, so the segment
	 * pointers and the metadata written before publication are seen. */
	struct kvp_dir *d = atomic_load_explicit(&bt->dir, memory_order_acquire);
	return &d->seg[id >> KVP_SEG_SHIFT][id & KVP_SEG_MASK];
}

/** kvp_bt_init - an empty table; returns 0 or -1 (no memory) */
int kvp_bt_init(struct kvp_blocktable *bt);

/**
 * kvp_bt_extend - make room for ids below @n_ids (zeroed metadata)
 *
 * Grow mutex held (or single-threaded).  A replaced directory is freed
 * after an RCU grace period by liburcu's call_rcu thread, so this never
 * waits and may run inside a read-side section.  Returns 0, or -1 when
 * memory ran out (the table is unchanged for the ids it could not cover;
 * earlier segments stay).
 */
int kvp_bt_extend(struct kvp_blocktable *bt, uint32_t n_ids);

/** kvp_bt_destroy - free every segment and the directory (single-threaded) */
void kvp_bt_destroy(struct kvp_blocktable *bt);

/** kvp_bt_bytes - bytes of metadata the table holds (grow mutex or quiescent) */
uint64_t kvp_bt_bytes(const struct kvp_blocktable *bt);

#endif /* KVPOOL_LIB_BLOCKTABLE_H */
