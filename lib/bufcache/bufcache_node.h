/*
 * lib/bufcache/bufcache_node.h - type-stable slab of buffer-cache nodes, with free lists.
 *
 * A node describes one cached buffer (pointer and capacity) and carries the
 * links of whatever structure holds it: the lock-free queue of an exact
 * class (bufcache_queue.h) or the sorted list of a large class
 * (bufcache_large.h).  Nodes never live inside the buffers: a cached buffer
 * can be handed out or given back to the system at any moment while another
 * thread still reads the node that described it, so nodes live in segments
 * that are freed only by bc_nodes_destroy ("type-stable memory").  Stale reads
 * of a recycled node are therefore harmless and are caught by the 32-bit tags
 * of the compare-and-swap words that index nodes.
 *
 * Nodes are named by a 32-bit index (BC_NIL = none) and live in the
 * library's segmented id table (lib/base/segtable.h): segment k holds
 * 256 << k nodes, so BC_NODE_SEGS segments cover the whole index space and
 * the directory is a fixed array: no pointer ever moves.
 *
 * Synchronization:
 *
 *   operation        may run concurrently with   progress     notes
 *   ---------------  --------------------------  -----------  -------------------------
 *   bc_node          everything                  wait-free    acquire load of a segment
 *   bc_nodes_pop     everything                  lock-free    Treiber pop, tagged head
 *   bc_nodes_push    everything                  lock-free    Treiber push, release
 *   bc_nodes_grow    everything but destroy      grow lock    miss path only
 *   init / destroy   nothing
 *
 * The free list is split in BC_SHARDS stacks so that threads do not all
 * hammer one cache line; a thread pushes to its own shard and pops from its
 * own first, then from the others, so no free node is ever out of reach.
 */
#ifndef KVPOOL_LIB_BUFCACHE_NODE_H
#define KVPOOL_LIB_BUFCACHE_NODE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/base/segtable.h"
#include "lib/base/tagged.h"

#define BC_NIL        UINT32_MAX
#define BC_SEG0_SHIFT 8  /* segment 0 holds 256 nodes */
#define BC_NODE_SEGS  24 /* 256 * (2^24 - 1) nodes: more than a 1 TiB budget of 256-byte buffers */
#define BC_SHARDS     16

struct bc_node {
	_Atomic uint64_t next;      /* exact-class queue link (tagged), see bufcache_queue.h */
	_Atomic uintptr_t ptr;      /* the buffer (atomic: read racily by queue dequeuers) */
	_Atomic uint64_t cap;       /* its capacity in bytes (same) */
	_Atomic uint32_t free_next; /* free-list link while the node is free */
	uint32_t lprev, lnext;      /* large-class list links, only under that class's lock */
};

struct bc_shard_head {
	_Alignas(64) _Atomic uint64_t head; /* tagged index of the top free node */
};

struct bc_nodes {
	struct kvpi_segtab segs; /* segments 0 .. nsegs-1 of struct bc_node */
	_Atomic uint64_t total;  /* nodes in published segments */
	unsigned nsegs;          /* under grow_lock */
	pthread_mutex_t grow_lock;
	struct bc_shard_head shard[BC_SHARDS];
};

int bc_nodes_init(struct bc_nodes *n);
void bc_nodes_destroy(struct bc_nodes *n);

/* bc_node - the node with index @idx (which must have been handed out by this slab) */
static inline struct bc_node *bc_node(struct bc_nodes *n, uint32_t idx)
{
	/* acquire (in kvpi_segtab_get): pairs with the install that published the segment. */
	struct bc_node *s = kvpi_segtab_get(&n->segs, kvpi_seg_of(idx, BC_SEG0_SHIFT));
	return &s[kvpi_seg_off(idx, BC_SEG0_SHIFT)];
}

extern _Thread_local unsigned bc_shard_plus1 __attribute__((visibility("hidden")));
unsigned bc_thread_shard_assign(void);

/* bc_thread_shard - this thread's shard (0 .. BC_SHARDS-1), fixed for its life */
static inline unsigned bc_thread_shard(void)
{
	unsigned s = bc_shard_plus1;
	return s ? s - 1 : bc_thread_shard_assign();
}

/* bc_nodes_pop - a free node's index, or BC_NIL when every shard looked empty */
uint32_t bc_nodes_pop(struct bc_nodes *n);

/* bc_nodes_push - give node @idx back to this thread's free shard */
void bc_nodes_push(struct bc_nodes *n, uint32_t idx);

/*
 * bc_nodes_grow - add segments until at least @want nodes exist
 * Returns 0, or -1 when the system allocator failed (nodes added so far stay).
 */
int bc_nodes_grow(struct bc_nodes *n, uint64_t want);

/* bc_nodes_total - nodes that exist (relaxed: a sizing hint) */
static inline uint64_t bc_nodes_total(struct bc_nodes *n)
{
	return atomic_load_explicit(&n->total, memory_order_relaxed);
}

#endif /* KVPOOL_LIB_BUFCACHE_NODE_H */
