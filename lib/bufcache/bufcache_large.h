/*
 * lib/bufcache/bufcache_large.h - the large tier: buffers above 64 MiB, one sorted list per power
 * of two.
 *
 * Capacities above KVPI_BC_EXACT_UNITS * 256 (64 MiB) are too many to give
 * each its own class.  So they are grouped by floor(log2(units)).  Each
 * group keeps its buffers in a doubly-linked list sorted by capacity, least
 * recently cached first among equal capacities.  A list is guarded by its
 * own mutex (one shard of the large tier); nothing else in the cache is.
 *
 * Why a lock is acceptable here: every buffer in this tier is > 64 MiB.  So
 * a list holds at most max_cached_bytes / 64 MiB entries, 16 per GiB of
 * budget, and the walk under the lock is that short.  And the caller is
 * about to use at least 64 MiB of memory.  The hit path of the exact tier
 * (every capacity up to 64 MiB) takes no lock.
 *
 * Synchronization:
 *
 *   operation             may run concurrently with   progress
 *   --------------------  --------------------------  ---------------------------
 *   kvpi_bc_large_put     put, take                   one class mutex, O(list)
 *   kvpi_bc_large_take    put, take                   class mutexes, one at a time
 *   init / destroy        nothing
 *
 * nonempty has bit k set while class k's list is non-empty; it changes only
 * under class k's mutex, so once no thread is inside the tier it is exact.
 * A reader that loads it while another thread puts may miss the new buffer
 * (best fit is then approximate); it never takes a buffer that is not there.
 */
#ifndef KVPOOL_LIB_BUFCACHE_LARGE_H
#define KVPOOL_LIB_BUFCACHE_LARGE_H

#include "lib/bufcache/bufcache_class.h"
#include "lib/bufcache/bufcache_node.h"

#define KVPI_BC_LARGE_CLASSES (64 - KVPI_BC_EXACT_BITS)

struct kvpi_bc_large_class {
	pthread_mutex_t lock __attribute__((aligned(64)));
	uint32_t head, tail; /* node indices, smallest (then oldest) first */
};

struct kvpi_bc_large {
	_Atomic uint64_t nonempty;
	_Atomic uint64_t count; /* buffers in the tier (changed under class locks) */
	struct kvpi_bc_large_class cls[KVPI_BC_LARGE_CLASSES];
};

int kvpi_bc_large_init(struct kvpi_bc_large *lg);
void kvpi_bc_large_destroy(struct kvpi_bc_large *lg);

/* kvpi_bc_large_put - cache node @idx (ptr and cap set, cap > 64 MiB) */
void kvpi_bc_large_put(struct kvpi_bc_large *lg, struct kvpi_bc_nodes *n, uint32_t idx);

/* kvpi_bc_large_count - buffers in the tier */
static inline uint64_t kvpi_bc_large_count(struct kvpi_bc_large *lg)
{
	/* relaxed: a statistic, exact once the tier is quiescent. */
	return atomic_load_explicit(&lg->count, memory_order_relaxed);
}

/*
 * kvpi_bc_large_take - take the smallest buffer whose capacity >= @need_units * 256
 * (least recently cached among equals); 1 on success, 0 when none.
 */
int kvpi_bc_large_take(struct kvpi_bc_large *lg, struct kvpi_bc_nodes *n, size_t need_units,
                       void **ptr, size_t *cap);

#endif /* KVPOOL_LIB_BUFCACHE_LARGE_H */
