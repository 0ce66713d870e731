/*
 * lib/bufcache/bufcache_class.h - buffer-cache size classes and the bitmap index over them.
 *
 * Capacities are multiples of KVP_BUF_ALIGN (256).  A capacity of u units
 * (u * 256 bytes) belongs to one of two tiers:
 *
 *   exact tier   1 <= u <= KVPI_BC_EXACT_UNITS (capacities up to 64 MiB).
 *                One size class per capacity, class index u - 1.  Best fit
 *                is "the first non-empty class at or above the request".
 *                A three-level bitmap (64 x 64 x 64 bits) finds it in three
 *                word loads.
 *   large tier   u > KVPI_BC_EXACT_UNITS.  One class per power of two of u
 *                (see bufcache_large.h).
 *
 * Synchronization (kvpi_bc_bitmap):
 *
 *   operation             may run concurrently with   progress    memory order
 *   --------------------  --------------------------  ----------  ------------
 *   kvpi_bc_bitmap_set    everything                  wait-free   seq_cst RMW
 *   kvpi_bc_bitmap_clear  everything                  wait-free   seq_cst RMW + load
 *   kvpi_bc_bitmap_find   everything                  lock-free   seq_cst loads
 *   init / destroy        nothing
 *
 * The bitmap is a hint that converges.  Whoever takes a class's buffer
 * count from 0 to 1 sets the class's bit.  Whoever takes it from 1 to 0
 * clears the bit.  That thread then re-reads the count, and sets the bit
 * again if a buffer came in meanwhile.  The same "clear, then re-check the
 * child word" protocol runs at each upper level.
 *
 * All of it is seq_cst, so that of two racing threads (one clearing, one
 * setting) at least one sees the other's write.  So once the cache is
 * quiescent, a bit is set exactly when its class holds a buffer.  While
 * threads race, a bit may be briefly wrong in two ways:
 *   - set for an empty class: a reader then finds the queue empty and
 *     moves on;
 *   - clear for a class that just received a buffer: a reader misses it,
 *     which only approximates best fit.
 * On x86 seq_cst RMWs cost the same as any lock-prefixed RMW, and seq_cst
 * loads are plain loads.
 */
#ifndef KVPOOL_LIB_BUFCACHE_CLASS_H
#define KVPOOL_LIB_BUFCACHE_CLASS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <kvpool/bufcache.h>

#define KVPI_BC_UNIT_SHIFT  8 /* log2(KVP_BUF_ALIGN) */
#define KVPI_BC_EXACT_BITS  18
#define KVPI_BC_EXACT_UNITS ((size_t)1 << KVPI_BC_EXACT_BITS) /* 262144 units = 64 MiB */
#define KVPI_BC_GROUP_BITS  6 /* 64 classes per group / bitmap word */
#define KVPI_BC_GROUP_SIZE  (1u << KVPI_BC_GROUP_BITS)
#define KVPI_BC_N_GROUPS    (KVPI_BC_EXACT_UNITS >> KVPI_BC_GROUP_BITS) /* 4096 */

_Static_assert((KVPI_BC_EXACT_UNITS << KVPI_BC_UNIT_SHIFT) == KVP_BUF_LOCKFREE_MAX,
               "tier boundary");

/* kvpi_bc_units_for_request - smallest unit count whose capacity is >= @requested (>= 1) */
static inline size_t kvpi_bc_units_for_request(size_t requested)
{
	size_t u = (requested >> KVPI_BC_UNIT_SHIFT) + ((requested & 255) != 0);
	return u ? u : 1;
}

/* kvpi_bc_floor_log2 - floor(log2(@v)) for @v > 0 */
static inline unsigned kvpi_bc_floor_log2(uint64_t v)
{
	return 63u - (unsigned)__builtin_clzll(v);
}

struct kvpi_bc_bitmap {
	_Atomic uint64_t l0;                        /* bit i: l1[i] != 0 */
	_Atomic uint64_t l1[KVPI_BC_N_GROUPS >> 6]; /* bit j of l1[i]: l2[i*64+j] != 0 */
	_Atomic uint64_t *l2;                       /* KVPI_BC_N_GROUPS words, one per group */
};

/* kvpi_bc_bitmap_init - all bits clear; returns 0 or -1 when the system allocator fails */
int kvpi_bc_bitmap_init(struct kvpi_bc_bitmap *b);
void kvpi_bc_bitmap_destroy(struct kvpi_bc_bitmap *b);

/* kvpi_bc_bitmap_set - mark class @cls (< KVPI_BC_EXACT_UNITS) non-empty */
void kvpi_bc_bitmap_set(struct kvpi_bc_bitmap *b, size_t cls);

/* kvpi_bc_bitmap_clear - mark class @cls empty (the caller re-checks its count afterwards) */
void kvpi_bc_bitmap_clear(struct kvpi_bc_bitmap *b, size_t cls);

/* kvpi_bc_bitmap_find - first class >= @from whose bit is set, or -1 */
long kvpi_bc_bitmap_find(struct kvpi_bc_bitmap *b, size_t from);

#endif /* KVPOOL_LIB_BUFCACHE_CLASS_H */
