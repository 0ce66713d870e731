/*
 * lib/bufcache/bufcache_node.c - node slab and sharded Treiber free lists.
 *
 * Free lists are Treiber stacks whose head is one 64-bit word {tag, index}:
 * every successful CAS bumps the tag, so a pop that read a head, slept while
 * the node was popped and pushed back, and then tries its CAS fails instead
 * of installing a stale successor (ABA).  The successor is read from a node
 * that another thread may be reusing at that moment; the read is atomic
 * (relaxed) and its value is only used if the tagged CAS proves nothing
 * changed.  Push uses release and pop acquire, so whatever a thread wrote
 * into a node before pushing it is visible to the thread that pops it.
 *
 * Growth happens only on the miss path (the caller is about to go to the
 * system allocator anyway), under a mutex that guards nothing but growth:
 * hits and frees never take it.
 */
#include "lib/bufcache/bufcache_node.h"
#include "lib/base/sysmem.h"

#include <string.h>

int kvpi_bc_nodes_init(struct kvpi_bc_nodes *n)
{
	memset(n, 0, sizeof(*n));
	kvpi_segtab_init(&n->segs);
	atomic_init(&n->total, 0);
	for (int i = 0; i < KVPI_BC_SHARDS; i++)
		atomic_init(&n->shard[i].head, kvpi_tagged_pack(0, KVPI_BC_NIL));
	return pthread_mutex_init(&n->grow_lock, NULL) ? -1 : 0;
}

void kvpi_bc_nodes_destroy(struct kvpi_bc_nodes *n)
{
	kvpi_segtab_destroy(&n->segs);
	pthread_mutex_destroy(&n->grow_lock);
}

_Thread_local unsigned kvpi_bc_shard_plus1;

unsigned kvpi_bc_thread_shard_assign(void)
{
	/* Round-robin assignment at a thread's first call; relaxed: any value works. */
	static _Atomic unsigned next_shard;

	kvpi_bc_shard_plus1 =
	    1 + atomic_fetch_add_explicit(&next_shard, 1, memory_order_relaxed) % KVPI_BC_SHARDS;
	return kvpi_bc_shard_plus1 - 1;
}

/* Push the chain @first..@last (already linked through free_next) onto shard @s. */
static void push_chain(struct kvpi_bc_nodes *n, unsigned s, uint32_t first, uint32_t last)
{
	_Atomic uint64_t *head = &n->shard[s].head;
	/* relaxed: the release CAS below publishes; a stale value only fails it. */
	uint64_t old = atomic_load_explicit(head, memory_order_relaxed);
	struct kvpi_bc_node *l = kvpi_bc_node(n, last);
	do {
		/* relaxed: published by the release CAS. */
		atomic_store_explicit(&l->free_next, kvpi_tagged_index(old), memory_order_relaxed);
		/* Release: publishes free_next and everything written to the nodes before. */
	} while (!atomic_compare_exchange_weak_explicit(
	    head, &old, kvpi_tagged_next(old, first), memory_order_release, memory_order_relaxed));
}

void kvpi_bc_nodes_push(struct kvpi_bc_nodes *n, uint32_t idx)
{
	push_chain(n, kvpi_bc_thread_shard(), idx, idx);
}

static uint32_t pop_shard(struct kvpi_bc_nodes *n, unsigned s)
{
	_Atomic uint64_t *head = &n->shard[s].head;
	/* Acquire: pairs with push's release so the node's fields are visible. */
	uint64_t old = atomic_load_explicit(head, memory_order_acquire);
	while (kvpi_tagged_index(old) != KVPI_BC_NIL) {
		/* relaxed: the node may be reused meanwhile; the tagged CAS below
		 * fails unless nothing changed since @old was read. */
		uint32_t nx = atomic_load_explicit(
		    &kvpi_bc_node(n, kvpi_tagged_index(old))->free_next, memory_order_relaxed);
		/* acquire on success: pairs with push's release (the node's fields);
		 * acquire on failure: the new head's node is read next, as above. */
		if (atomic_compare_exchange_weak_explicit(head, &old, kvpi_tagged_next(old, nx),
		                                          memory_order_acquire,
		                                          memory_order_acquire))
			return kvpi_tagged_index(old);
	}
	return KVPI_BC_NIL;
}

uint32_t kvpi_bc_nodes_pop(struct kvpi_bc_nodes *n)
{
	unsigned s = kvpi_bc_thread_shard();
	for (unsigned i = 0; i < KVPI_BC_SHARDS; i++) {
		uint32_t idx = pop_shard(n, (s + i) % KVPI_BC_SHARDS);
		if (idx != KVPI_BC_NIL)
			return idx;
	}
	return KVPI_BC_NIL;
}

/* Add segment nsegs and push its nodes onto this thread's shard; grow_lock held.
 * 0, or -1 when every segment exists or the system allocator failed. */
static int add_segment_locked(struct kvpi_bc_nodes *n)
{
	unsigned k = n->nsegs;
	if (k >= KVPI_BC_NODE_SEGS)
		return -1;
	size_t cnt = kvpi_seg_len(KVPI_BC_SEG0_SHIFT, k);
	size_t base = kvpi_seg_first(KVPI_BC_SEG0_SHIFT, k);
	struct kvpi_bc_node *s = kvpi_sys_calloc(cnt, sizeof(*s), 64);
	if (!s)
		return -1;
	for (size_t i = 0; i < cnt; i++) {
		atomic_init(&s[i].next, kvpi_tagged_pack(0, KVPI_BC_NIL));
		atomic_init(&s[i].free_next, (uint32_t)(base + i + 1));
		s[i].lprev = s[i].lnext = KVPI_BC_NIL;
	}
	/* Installed with release (under grow_lock, so the CAS always wins): the
	 * initialised segment is visible to every kvpi_bc_node() that finds it. */
	kvpi_segtab_install(&n->segs, k, s);
	n->nsegs = k + 1;
	/* relaxed: a sizing hint for readers outside the lock; the nodes are
	 * published by the install above and the push below. */
	atomic_store_explicit(&n->total, base + cnt, memory_order_relaxed);
	push_chain(n, kvpi_bc_thread_shard(), (uint32_t)base, (uint32_t)(base + cnt - 1));
	return 0;
}

int kvpi_bc_nodes_grow(struct kvpi_bc_nodes *n, uint64_t want)
{
	int rc = 0;

	pthread_mutex_lock(&n->grow_lock);
	/* relaxed: total is written only under grow_lock, which we hold. */
	while (rc == 0 && atomic_load_explicit(&n->total, memory_order_relaxed) < want)
		rc = add_segment_locked(n);
	pthread_mutex_unlock(&n->grow_lock);
	return rc;
}
