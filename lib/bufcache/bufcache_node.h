/*
 * lib/bufcache/bufcache_node.h - type-stable slab of buffer-cache nodes, with free lists.
 *
 * A node describes one cached buffer (pointer and capacity) and carries the
 * links of whatever structure holds it: the lock-free queue of an exact
 * class (bufcache_queue.h) or the sorted list of a large class
 * (bufcache_large.h).
 *
 * Nodes never live inside the buffers.  A cached buffer can be handed out,
 * or given back to the system, at any moment while another thread still
 * reads the node that described it.  So nodes live in segments that are
 * freed only by kvpi_bc_nodes_destroy ("type-stable memory").  Stale reads
 * of a recycled node are therefore harmless.  The 32-bit tags of the
 * compare-and-swap words that index nodes catch them.
 *
 * Nodes are named by a 32-bit index (KVPI_BC_NIL = none).  They live in the
 * library's segmented id table (lib/base/segtable.h), where segment k holds
 * 256 << k nodes.  So KVPI_BC_NODE_SEGS segments cover the whole index
 * space, and the directory is a fixed array: no pointer ever moves.
 *
 * Synchronization:
 *
 *   operation             may run concurrently with   progress     notes
 *   --------------------  --------------------------  -----------  -------------------------
 *   kvpi_bc_node          everything                  wait-free    acquire load of a segment
 *   kvpi_bc_nodes_pop     everything                  lock-free    Treiber pop, tagged head
 *   kvpi_bc_nodes_push    everything                  lock-free    Treiber push, release
 *   kvpi_bc_nodes_grow    everything but destroy      grow lock    miss path only
 *   init / destroy        nothing
 *
 * The free list is split in KVPI_BC_SHARDS stacks, so that threads do not
 * all hammer one cache line.  A thread pushes to its own shard.  It pops
 * from its own first, then from the others.  So no free node is ever out of
 * reach.
 */
#ifndef KVPOOL_LIB_BUFCACHE_NODE_H
#define KVPOOL_LIB_BUFCACHE_NODE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/base/segtable.h"
#include "lib/base/tagged.h"

#define KVPI_BC_NIL        UINT32_MAX
#define KVPI_BC_SEG0_SHIFT 8 /* segment 0 holds 256 nodes */
#define KVPI_BC_NODE_SEGS                                                                          \
	24 /* 256 * (2^24 - 1) nodes: more than a 1 TiB budget of 256-byte buffers */
#define KVPI_BC_SHARDS 16

struct kvpi_bc_node {
	_Atomic uint64_t next;      /* exact-class queue link (tagged), see bufcache_queue.h */
	_Atomic uintptr_t ptr;      /* the buffer (atomic: read racily by queue dequeuers) */
	_Atomic uint64_t cap;       /* its capacity in bytes (same) */
	_Atomic uint32_t free_next; /* free-list link while the node is free */
	uint32_t lprev, lnext;      /* large-class list links, only under that class's lock */
};

struct kvpi_bc_shard_head {
	_Atomic uint64_t head __attribute__((aligned(64))); /* tagged index of the top free node */
};

struct kvpi_bc_nodes {
	struct kvpi_segtab segs; /* segments 0 .. nsegs-1 of struct kvpi_bc_node */
	_Atomic uint64_t total;  /* nodes in published segments */
	unsigned nsegs;          /* under grow_lock */
	pthread_mutex_t grow_lock;
	struct kvpi_bc_shard_head shard[KVPI_BC_SHARDS];
};

int kvpi_bc_nodes_init(struct kvpi_bc_nodes *n);
void kvpi_bc_nodes_destroy(struct kvpi_bc_nodes *n);

/* kvpi_bc_node - the node with index @idx (which must have been handed out by this slab) */
static inline struct kvpi_bc_node *kvpi_bc_node(struct kvpi_bc_nodes *n, uint32_t idx)
{
	/* acquire (in kvpi_segtab_get): pairs with the install that published the segment. */
	struct kvpi_bc_node *s = kvpi_segtab_get(&n->segs, kvpi_seg_of(idx, KVPI_BC_SEG0_SHIFT));
	return &s[kvpi_seg_off(idx, KVPI_BC_SEG0_SHIFT)];
}

extern _Thread_local unsigned kvpi_bc_shard_plus1 __attribute__((visibility("hidden")));
unsigned kvpi_bc_thread_shard_assign(void);

/* kvpi_bc_thread_shard - this thread's shard (0 .. KVPI_BC_SHARDS-1), fixed for its life */
static inline unsigned kvpi_bc_thread_shard(void)
{
	unsigned s = kvpi_bc_shard_plus1;
	return s ? s - 1 : kvpi_bc_thread_shard_assign();
}

/* kvpi_bc_nodes_pop - a free node's index, or KVPI_BC_NIL when every shard looked empty */
uint32_t kvpi_bc_nodes_pop(struct kvpi_bc_nodes *n);

/* kvpi_bc_nodes_push - give node @idx back to this thread's free shard */
void kvpi_bc_nodes_push(struct kvpi_bc_nodes *n, uint32_t idx);

/*
 * kvpi_bc_nodes_grow - add segments until at least @want nodes exist
 * Returns 0, or -1 when the system allocator failed (nodes added so far stay).
 */
int kvpi_bc_nodes_grow(struct kvpi_bc_nodes *n, uint64_t want);

/* kvpi_bc_nodes_total - nodes that exist (a sizing hint) */
static inline uint64_t kvpi_bc_nodes_total(struct kvpi_bc_nodes *n)
{
	/* relaxed: a sizing hint; the nodes are published by their free-list push. */
	return atomic_load_explicit(&n->total, memory_order_relaxed);
}

#endif /* KVPOOL_LIB_BUFCACHE_NODE_H */
