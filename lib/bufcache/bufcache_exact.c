/*
 * lib/bufcache/bufcache_exact.c - exact size classes: bitmap-indexed Michael-Scott queues.
 *
 * Why one class per capacity instead of TLSF's logarithmic classes: the
 * reference contract is exact best fit (the smallest cached capacity >= the
 * request).  A class that mixes capacities would have to be kept sorted,
 * which no single-CAS structure does; one capacity per class makes "first
 * non-empty class at or above the request" the exact answer, found in O(1)
 * through the three-level bitmap.  The cost is memory for the class heads,
 * which is why groups of 64 classes (4 KiB) are created only for capacities
 * that have actually been allocated.
 */
#include "lib/bufcache/bufcache_exact.h"
#include "lib/base/sysmem.h"

int kvpi_bc_exact_init(struct kvpi_bc_exact *ex)
{
	atomic_init(&ex->n_groups, 0);
	if (kvpi_bc_bitmap_init(&ex->bm))
		return -1;
	/* Zeroed memory is a valid array of NULL atomic pointers on this ABI. */
	ex->dir = kvpi_sys_calloc(KVPI_BC_N_GROUPS, sizeof(*ex->dir), 64);
	if (!ex->dir || pthread_mutex_init(&ex->group_lock, NULL)) {
		kvpi_sys_free((void *)ex->dir);
		kvpi_bc_bitmap_destroy(&ex->bm);
		return -1;
	}
	return 0;
}

void kvpi_bc_exact_destroy(struct kvpi_bc_exact *ex)
{
	for (size_t g = 0; g < KVPI_BC_N_GROUPS; g++)
		/* relaxed: single-threaded, after every user is gone. */
		kvpi_sys_free(atomic_load_explicit(&ex->dir[g], memory_order_relaxed));
	kvpi_sys_free((void *)ex->dir);
	kvpi_bc_bitmap_destroy(&ex->bm);
	pthread_mutex_destroy(&ex->group_lock);
}

/* Take @cnt free nodes into @out, growing the slab if needed; 0 or -1 (then none taken). */
static int take_nodes(struct kvpi_bc_nodes *n, uint32_t *out, unsigned cnt)
{
	for (unsigned i = 0; i < cnt; i++) {
		out[i] = kvpi_bc_nodes_pop(n);
		if (out[i] == KVPI_BC_NIL && (kvpi_bc_nodes_grow(n, kvpi_bc_nodes_total(n) + cnt) ||
		                              (out[i] = kvpi_bc_nodes_pop(n)) == KVPI_BC_NIL)) {
			while (i--)
				kvpi_bc_nodes_push(n, out[i]);
			return -1;
		}
	}
	return 0;
}

/* Make and publish group @g unless it exists; group_lock held.  0, or -1 on system failure. */
static int make_group_locked(struct kvpi_bc_exact *ex, struct kvpi_bc_nodes *n, size_t g)
{
	/* relaxed: only group_lock holders store directory entries. */
	if (atomic_load_explicit(&ex->dir[g], memory_order_relaxed))
		return 0;
	struct kvpi_bc_group *grp = kvpi_sys_alloc(sizeof(*grp), 64);
	if (!grp)
		return -1;
	uint32_t dummies[KVPI_BC_GROUP_SIZE];
	if (take_nodes(n, dummies, KVPI_BC_GROUP_SIZE)) {
		kvpi_sys_free(grp);
		return -1;
	}
	for (unsigned i = 0; i < KVPI_BC_GROUP_SIZE; i++)
		kvpi_bc_queue_init(n, &grp->q[i], dummies[i]);
	/* Release: the queues' initial state is visible to whoever finds the group. */
	atomic_store_explicit(&ex->dir[g], grp, memory_order_release);
	/* relaxed: a sizing hint for the node slab (kvpi_bc_exact_groups); orders nothing. */
	atomic_fetch_add_explicit(&ex->n_groups, 1, memory_order_relaxed);
	return 0;
}

int kvpi_bc_exact_ensure_group(struct kvpi_bc_exact *ex, struct kvpi_bc_nodes *n, size_t cls)
{
	if (kvpi_bc_exact_ready(ex, cls))
		return 0;
	pthread_mutex_lock(&ex->group_lock);
	int rc = make_group_locked(ex, n, cls >> KVPI_BC_GROUP_BITS);
	pthread_mutex_unlock(&ex->group_lock);
	return rc;
}

uint64_t kvpi_bc_exact_count(struct kvpi_bc_exact *ex)
{
	int64_t sum = 0;

	for (size_t g = 0; g < KVPI_BC_N_GROUPS; g++) {
		/* acquire: pairs with the release that published the group's queues. */
		struct kvpi_bc_group *grp = atomic_load_explicit(&ex->dir[g], memory_order_acquire);
		for (unsigned i = 0; grp && i < KVPI_BC_GROUP_SIZE; i++)
			/* relaxed: a statistic, exact once the cache is quiescent. */
			sum += atomic_load_explicit(&grp->q[i].count, memory_order_relaxed);
	}
	return sum > 0 ? (uint64_t)sum : 0;
}

static inline struct kvpi_bc_queue *queue_of(struct kvpi_bc_exact *ex, size_t cls)
{
	/* acquire: pairs with the release that published the group's queues. */
	struct kvpi_bc_group *grp =
	    atomic_load_explicit(&ex->dir[cls >> KVPI_BC_GROUP_BITS], memory_order_acquire);
	return &grp->q[cls & (KVPI_BC_GROUP_SIZE - 1)];
}

void kvpi_bc_exact_put(struct kvpi_bc_exact *ex, struct kvpi_bc_nodes *n, size_t cls, uint32_t idx)
{
	struct kvpi_bc_queue *q = queue_of(ex, cls);

	/* seq_cst: part of the count/bitmap protocol (see bufcache_class.h). */
	if (atomic_fetch_add_explicit(&q->count, 1, memory_order_seq_cst) == 0)
		kvpi_bc_bitmap_set(&ex->bm, cls);
	kvpi_bc_queue_enqueue(n, q, idx);
}

int kvpi_bc_exact_take(struct kvpi_bc_exact *ex, struct kvpi_bc_nodes *n, size_t from, void **ptr,
                       size_t *cap)
{
	for (;;) {
		long cls = kvpi_bc_bitmap_find(&ex->bm, from);
		if (cls < 0)
			return 0;
		struct kvpi_bc_queue *q = queue_of(ex, (size_t)cls);
		uint32_t spare;
		if (kvpi_bc_queue_dequeue(n, q, ptr, cap, &spare)) {
			kvpi_bc_nodes_push(n, spare);
			/* seq_cst: the count/bitmap protocol (bufcache_class.h): who takes
			 * the count to 0 clears the bit, then re-checks the count. */
			if (atomic_fetch_sub_explicit(&q->count, 1, memory_order_seq_cst) == 1) {
				kvpi_bc_bitmap_clear(&ex->bm, (size_t)cls);
				if (atomic_load_explicit(&q->count, memory_order_seq_cst) > 0)
					kvpi_bc_bitmap_set(&ex->bm, (size_t)cls);
			}
			return 1;
		}
		from = (size_t)cls + 1;
	}
}
