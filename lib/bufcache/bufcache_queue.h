/*
 * lib/bufcache/bufcache_queue.h - lock-free FIFO of cached buffers for one exact size class.
 *
 * A Michael-Scott queue (PODC 1996) over bufcache_node.h's type-stable
 * nodes, with counted links.  Head, tail and every node's next are 64-bit
 * words {32-bit tag, 32-bit index}.  A single CAS changes each, and each
 * success bumps the tag.  The queue always holds one dummy node.  A dequeue
 * returns the first real node's buffer and makes that node the new dummy.
 * It hands the old dummy back to the caller to free.
 *
 * FIFO is what the cache needs: within one capacity, both a hit and an
 * eviction take the least recently cached buffer, and the linearisation
 * order of enqueues is exactly "order of caching".
 *
 * Synchronization:
 *
 *   operation               may run concurrently with   progress
 *   ----------------------  --------------------------  ---------
 *   kvpi_bc_queue_enqueue   enqueue, dequeue            lock-free
 *   kvpi_bc_queue_dequeue   enqueue, dequeue            lock-free
 *   kvpi_bc_queue_init      nothing (before publication)
 *
 * Memory order.  The link CAS in enqueue is release, and dequeue's loads of
 * links are acquire.  So the enqueuer's writes to the node (ptr, cap)
 * happen before the dequeuer hands the buffer out.  So do the user's writes
 * to the buffer itself, through the free() that cached the buffer.  The
 * head CAS is acq_rel.  So each dequeuer synchronises with the one before
 * it, and never follows a stale link of a node that was recycled and
 * enqueued again.
 */
#ifndef KVPOOL_LIB_BUFCACHE_QUEUE_H
#define KVPOOL_LIB_BUFCACHE_QUEUE_H

#include "lib/bufcache/bufcache_node.h"

struct kvpi_bc_queue {
	_Atomic uint64_t head __attribute__((aligned(64))); /* tagged index of the dummy */
	_Atomic uint64_t tail; /* tagged index of the last node (may lag by one) */
	_Atomic int64_t count; /* buffers in the queue (+ enqueues in flight) */
};

/* kvpi_bc_queue_init - empty queue whose dummy is node @dummy */
void kvpi_bc_queue_init(struct kvpi_bc_nodes *n, struct kvpi_bc_queue *q, uint32_t dummy);

/* kvpi_bc_queue_enqueue - append node @idx, whose ptr and cap the caller has set */
void kvpi_bc_queue_enqueue(struct kvpi_bc_nodes *n, struct kvpi_bc_queue *q, uint32_t idx);

/*
 * kvpi_bc_queue_dequeue - take the oldest buffer
 * On success stores its pointer and capacity, stores in *@spare the index of a
 * node the caller must free (kvpi_bc_nodes_push), and returns 1.  Returns 0 when
 * the queue is empty.
 */
int kvpi_bc_queue_dequeue(struct kvpi_bc_nodes *n, struct kvpi_bc_queue *q, void **ptr, size_t *cap,
                          uint32_t *spare);

/* kvpi_bc_queue_dummy - the current dummy (only when no other thread uses the queue) */
static inline uint32_t kvpi_bc_queue_dummy(struct kvpi_bc_queue *q)
{
	/* relaxed: no other thread uses the queue (the caller's precondition). */
	return kvpi_tagged_index(atomic_load_explicit(&q->head, memory_order_relaxed));
}

#endif /* KVPOOL_LIB_BUFCACHE_QUEUE_H */
