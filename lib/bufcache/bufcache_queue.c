/*
 * lib/bufcache/bufcache_queue.c - Michael-Scott queue with tagged 32-bit node indices.
 *
 * This is the algorithm of Michael & Scott's "Simple, Fast, and Practical
 * Non-Blocking and Blocking Concurrent Queue Algorithms", with their counted
 * pointers as {tag, index} words.  Nodes are never freed while the cache
 * lives, so reading a node that was dequeued and recycled meanwhile is safe;
 * the tags make every CAS that acted on such a stale read fail.  When a node
 * is enqueued again its next word keeps its tag and gets tag + 1, so an
 * enqueuer that still holds the node's old incarnation as "tail" cannot link
 * onto it.
 */
#include "lib/bufcache/bufcache_queue.h"

void kvpi_bc_queue_init(struct kvpi_bc_nodes *n, struct kvpi_bc_queue *q, uint32_t dummy)
{
	struct kvpi_bc_node *d = kvpi_bc_node(n, dummy);
	/* relaxed: the queue is not published yet (its group is, with release). */
	uint64_t nx = atomic_load_explicit(&d->next, memory_order_relaxed);
	atomic_store_explicit(&d->next, kvpi_tagged_next(nx, KVPI_BC_NIL), memory_order_relaxed);
	atomic_init(&q->head, kvpi_tagged_pack(0, dummy));
	atomic_init(&q->tail, kvpi_tagged_pack(0, dummy));
	atomic_init(&q->count, 0);
}

void kvpi_bc_queue_enqueue(struct kvpi_bc_nodes *n, struct kvpi_bc_queue *q, uint32_t idx)
{
	struct kvpi_bc_node *x = kvpi_bc_node(n, idx);
	/* relaxed: x is ours (popped from the free list, acquire); its next word
	 * keeps its tag across incarnations (see the top of this file). */
	uint64_t nx = atomic_load_explicit(&x->next, memory_order_relaxed);
	/* Relaxed: published by the release CAS that links x below. */
	atomic_store_explicit(&x->next, kvpi_tagged_next(nx, KVPI_BC_NIL), memory_order_relaxed);
	uint64_t tail;
	for (;;) {
		/* acquire: pairs with the release CAS that swung the tail here. */
		tail = atomic_load_explicit(&q->tail, memory_order_acquire);
		struct kvpi_bc_node *t = kvpi_bc_node(n, kvpi_tagged_index(tail));
		/* acquire: pairs with the release link CAS of t's successor, if any. */
		uint64_t next = atomic_load_explicit(&t->next, memory_order_acquire);
		/* acquire, as above: the re-read proves tail and next were read together. */
		if (tail != atomic_load_explicit(&q->tail, memory_order_acquire))
			continue;
		if (kvpi_tagged_index(next) == KVPI_BC_NIL) {
			/* Release: x's ptr/cap/next (and the buffer's contents) go with the link.
			 */
			if (atomic_compare_exchange_weak_explicit(
			        &t->next, &next, kvpi_tagged_next(next, idx), memory_order_release,
			        memory_order_relaxed))
				break;
		} else {
			/* Tail lags: help swing it (the link, not the tail, carries the data);
			 * release, relaxed on failure: as the swing below. */
			atomic_compare_exchange_weak_explicit(
			    &q->tail, &tail, kvpi_tagged_next(tail, kvpi_tagged_index(next)),
			    memory_order_release, memory_order_relaxed);
		}
	}
	/* Release: a thread that acquires the new tail sees x as we linked it.
	 * Relaxed on failure: another thread already swung the tail past x. */
	atomic_compare_exchange_strong_explicit(&q->tail, &tail, kvpi_tagged_next(tail, idx),
	                                        memory_order_release, memory_order_relaxed);
}

int kvpi_bc_queue_dequeue(struct kvpi_bc_nodes *n, struct kvpi_bc_queue *q, void **ptr, size_t *cap,
                          uint32_t *spare)
{
	for (;;) {
		/* acquire: pairs with the previous dequeuer's acq_rel head CAS (see below). */
		uint64_t head = atomic_load_explicit(&q->head, memory_order_acquire);
		/* acquire: pairs with the release CAS that swung the tail. */
		uint64_t tail = atomic_load_explicit(&q->tail, memory_order_acquire);
		/* acquire: pairs with the enqueuer's release link CAS: the successor's
		 * ptr and cap are visible. */
		uint64_t next = atomic_load_explicit(
		    &kvpi_bc_node(n, kvpi_tagged_index(head))->next, memory_order_acquire);
		/* acquire, as above: the re-read proves head, tail and next consistent. */
		if (head != atomic_load_explicit(&q->head, memory_order_acquire))
			continue;
		if (kvpi_tagged_index(head) == kvpi_tagged_index(tail)) {
			if (kvpi_tagged_index(next) == KVPI_BC_NIL)
				return 0;
			/* Help a lagging tail; release, relaxed on failure: as in enqueue. */
			atomic_compare_exchange_weak_explicit(
			    &q->tail, &tail, kvpi_tagged_next(tail, kvpi_tagged_index(next)),
			    memory_order_release, memory_order_relaxed);
			continue;
		}
		if (kvpi_tagged_index(next) == KVPI_BC_NIL)
			continue; /* inconsistent snapshot (head moved under us): retry */
		/* Read before the CAS: once head moves, x may be recycled by others.
		 * relaxed: ordered by the acquire load of next that named x, and
		 * used only if the tagged head CAS below proves x was not recycled. */
		struct kvpi_bc_node *x = kvpi_bc_node(n, kvpi_tagged_index(next));
		uintptr_t p = atomic_load_explicit(&x->ptr, memory_order_relaxed);
		uint64_t c = atomic_load_explicit(&x->cap, memory_order_relaxed);
		/* acq_rel on success.  Acquire: the buffer's history happens
		 * before our caller.  Release: the next dequeuer that reads this
		 * head synchronises with us, and through us with the enqueue
		 * that linked the node now at the head, so it cannot read a
		 * stale next field of a recycled node (free on x86).  Relaxed on
		 * failure: we retry from fresh acquire loads. */
		if (atomic_compare_exchange_weak_explicit(
		        &q->head, &head, kvpi_tagged_next(head, kvpi_tagged_index(next)),
		        memory_order_acq_rel, memory_order_relaxed)) {
			*ptr = (void *)p;
			*cap = (size_t)c;
			*spare = kvpi_tagged_index(head);
			return 1;
		}
	}
}
