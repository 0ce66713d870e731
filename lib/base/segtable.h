/*
 * lib/base/segtable.h - ids in geometric segments that never move.
 *
 * Some tables are indexed by a dense 32-bit id and must grow while readers
 * look entries up.  They must never move an entry: then a pointer to an
 * entry stays good for the table's life, and readers need no protection.
 * Such a table keeps its entries in segments of doubling size.  With
 * B = 1 << shift, segment k holds B << k entries and covers the ids from
 * B * (2^k - 1) up.  An id finds its entry with one clz and no loop:
 *
 *     v = id + B,  m = floor(log2 v),  segment k = m - shift,  offset = v - 2^m
 *
 * so at most 32 - shift segments cover every 32-bit id and the directory is
 * a fixed array of pointers, filled once per segment, never replaced.
 *
 * Three tables use it:
 *   - storage's slot table (lib/storage/storage.c): segments made on first
 *     write, installed by CAS;
 *   - the buffer cache's node slab (lib/bufcache/bufcache_node.c):
 *     segments made under its grow lock;
 *   - the pool's block table, for its growth segments
 *     (lib/pool/blocktable.h).  It uses the geometry only; see
 *     docs/DESIGN.md, "One segmented id table".
 *
 * Synchronization:
 *
 *   function             may run concurrently with    progress / ordering
 *   -------------------  ---------------------------  --------------------------
 *   kvpi_seg_of,         anything (pure)              -
 *   kvpi_seg_off, kvpi_seg_len,
 *   kvpi_seg_first
 *   kvpi_segtab_get      everything but destroy       wait-free; acquire, pairs
 *                                                     with the install's release
 *   kvpi_segtab_install  everything but destroy       lock-free; one CAS
 *   kvpi_segtab_destroy  nothing                      -
 */
#ifndef KVPOOL_LIB_BASE_SEGTABLE_H
#define KVPOOL_LIB_BASE_SEGTABLE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* Directory size: enough for every 32-bit id whatever the shift. */
#define KVPI_SEGTAB_MAX 32

/* floor(log2(@i + (1 << @shift))): the top bit of the id shifted past segment 0 */
static inline uint32_t kvpi_seg_msb(uint32_t i, unsigned shift)
{
	return 31u - (uint32_t)__builtin_clz(i + (1u << shift));
}

/**
 * kvpi_seg_of - the segment of id @i in a table whose segment 0 holds 1 << @shift
 * @i: the id, below 2^32 - (1 << @shift)
 * @shift: log2 of segment 0's length
 */
static inline uint32_t kvpi_seg_of(uint32_t i, unsigned shift)
{
	return kvpi_seg_msb(i, shift) - shift;
}

/**
 * kvpi_seg_off - the offset of id @i in its segment (kvpi_seg_of)
 *
 * Separate from kvpi_seg_of so that a lookup reads the segment pointer
 * first and computes the offset while that load is in flight (the compiler
 * shares the one clz).
 */
static inline uint32_t kvpi_seg_off(uint32_t i, unsigned shift)
{
	return i + (1u << shift) - (1u << kvpi_seg_msb(i, shift));
}

/** kvpi_seg_len - how many entries segment @k holds */
static inline size_t kvpi_seg_len(unsigned shift, uint32_t k)
{
	return (size_t)1 << (shift + k);
}

/** kvpi_seg_first - the first id of segment @k (ids below it: segments 0 .. k-1) */
static inline size_t kvpi_seg_first(unsigned shift, uint32_t k)
{
	return kvpi_seg_len(shift, k) - ((size_t)1 << shift);
}

/* The directory: segment k's address once it exists, NULL before. */
struct kvpi_segtab {
	_Atomic(void *) seg[KVPI_SEGTAB_MAX];
};

/** kvpi_segtab_init - an empty directory */
void kvpi_segtab_init(struct kvpi_segtab *t);

/**
 * kvpi_segtab_get - segment @k, or NULL when it was not installed yet
 *
 * acquire: pairs with the release of kvpi_segtab_install, so whatever was
 * written into the segment before it was installed is visible to the caller.
 */
static inline void *kvpi_segtab_get(struct kvpi_segtab *t, uint32_t k)
{
	return atomic_load_explicit(&t->seg[k], memory_order_acquire);
}

/**
 * kvpi_segtab_install - make @fresh segment @k unless another is there already
 *
 * Returns the segment installed now: @fresh, or the one another thread
 * installed first (the caller then frees @fresh: nobody saw it).  Lock-free:
 * one CAS, so racing makers of one segment need no lock.
 */
void *kvpi_segtab_install(struct kvpi_segtab *t, uint32_t k, void *fresh);

/** kvpi_segtab_destroy - free every installed segment (kvpi_sys_free); single-threaded */
void kvpi_segtab_destroy(struct kvpi_segtab *t);

#endif /* KVPOOL_LIB_BASE_SEGTABLE_H */
