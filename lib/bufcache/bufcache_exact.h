/*
 * lib/bufcache/bufcache_exact.h - the exact tier: one lock-free FIFO per capacity up to 64 MiB.
 *
 * Class c (0 <= c < KVPI_BC_EXACT_UNITS) holds buffers of capacity (c + 1) * 256.
 * Classes come in groups of 64, one bitmap word each.  A group's 64 queues
 * are allocated on the miss path, the first time a buffer of one of its
 * capacities comes from the system.  They are kept until the cache is
 * destroyed.
 * A buffer can only be cached in a class whose group exists.
 *
 * Synchronization:
 *
 *   operation                  may run concurrently with     progress
 *   -------------------------  ----------------------------  ---------------------
 *   kvpi_bc_exact_take         take, put, ensure_group       lock-free
 *   kvpi_bc_exact_put          take, put, ensure_group       lock-free
 *   kvpi_bc_exact_ready        everything                    wait-free (acquire load)
 *   kvpi_bc_exact_ensure_group everything but destroy        group lock (miss path)
 *   init / destroy             nothing
 *
 * Each queue keeps a count of its buffers.  The thread that moves the count
 * from 0 to 1 sets the class's bitmap bit.  The one that moves it from 1 to
 * 0 clears the bit and re-checks (bufcache_class.h).  The count is raised before the
 * enqueue and lowered after the dequeue, so it never under-counts.
 *
 * Best fit: kvpi_bc_exact_take(from) dequeues from the first non-empty class >=
 * from, i.e. the smallest cached capacity that fits; among buffers of that
 * capacity, the least recently cached.  If that queue turns out empty (a
 * racing thread took its last buffer) the search goes on above it.
 */
#ifndef KVPOOL_LIB_BUFCACHE_EXACT_H
#define KVPOOL_LIB_BUFCACHE_EXACT_H

#include "lib/bufcache/bufcache_class.h"
#include "lib/bufcache/bufcache_queue.h"

struct kvpi_bc_group {
	struct kvpi_bc_queue q[KVPI_BC_GROUP_SIZE];
};

struct kvpi_bc_exact {
	struct kvpi_bc_bitmap bm;
	_Atomic(struct kvpi_bc_group *) *dir; /* KVPI_BC_N_GROUPS entries, NULL until created */
	_Atomic uint64_t n_groups;
	pthread_mutex_t group_lock;
};

int kvpi_bc_exact_init(struct kvpi_bc_exact *ex);
void kvpi_bc_exact_destroy(struct kvpi_bc_exact *ex);

/* kvpi_bc_exact_ready - whether class @cls can hold buffers (its group exists) */
static inline int kvpi_bc_exact_ready(struct kvpi_bc_exact *ex, size_t cls)
{
	/* Acquire: pairs with the release that published the initialised group. */
	return atomic_load_explicit(&ex->dir[cls >> KVPI_BC_GROUP_BITS], memory_order_acquire) !=
	       NULL;
}

/* kvpi_bc_exact_ensure_group - create @cls's group if needed; 0, or -1 on system failure */
int kvpi_bc_exact_ensure_group(struct kvpi_bc_exact *ex, struct kvpi_bc_nodes *n, size_t cls);

/* kvpi_bc_exact_groups - groups created so far (each holds KVPI_BC_GROUP_SIZE dummy nodes) */
static inline uint64_t kvpi_bc_exact_groups(struct kvpi_bc_exact *ex)
{
	/* relaxed: a sizing hint; orders nothing. */
	return atomic_load_explicit(&ex->n_groups, memory_order_relaxed);
}

/* kvpi_bc_exact_put - cache node @idx (ptr and cap set, cap == (cls + 1) * 256) in class @cls */
void kvpi_bc_exact_put(struct kvpi_bc_exact *ex, struct kvpi_bc_nodes *n, size_t cls, uint32_t idx);

/* kvpi_bc_exact_count - buffers in the tier (sum of the class counts; exact at quiescence) */
uint64_t kvpi_bc_exact_count(struct kvpi_bc_exact *ex);

/* kvpi_bc_exact_take - take the best fit from classes >= @from; 1 on success, 0 when none */
int kvpi_bc_exact_take(struct kvpi_bc_exact *ex, struct kvpi_bc_nodes *n, size_t from, void **ptr,
                       size_t *cap);

#endif /* KVPOOL_LIB_BUFCACHE_EXACT_H */
