/*
 * lib/bufcache/bufcache_large.c - sorted per-power-of-two lists for buffers above 64 MiB.
 *
 * Insertion walks back from the tail past every strictly larger capacity, so
 * equal capacities stay in caching order; a lookup walks from the head to
 * the first capacity that fits.  Both walks are bounded by the list length,
 * itself bounded by the budget (see the header).  The node freed by a take
 * goes back to the slab only after it is unlinked.
 */
#include "lib/bufcache/bufcache_large.h"

int kvpi_bc_large_init(struct kvpi_bc_large *lg)
{
	atomic_init(&lg->nonempty, 0);
	atomic_init(&lg->count, 0);
	for (int i = 0; i < KVPI_BC_LARGE_CLASSES; i++) {
		if (pthread_mutex_init(&lg->cls[i].lock, NULL)) {
			while (i--)
				pthread_mutex_destroy(&lg->cls[i].lock);
			return -1;
		}
		lg->cls[i].head = lg->cls[i].tail = KVPI_BC_NIL;
	}
	return 0;
}

void kvpi_bc_large_destroy(struct kvpi_bc_large *lg)
{
	for (int i = 0; i < KVPI_BC_LARGE_CLASSES; i++)
		pthread_mutex_destroy(&lg->cls[i].lock);
}

static unsigned class_of(size_t units)
{
	return kvpi_bc_floor_log2(units) - KVPI_BC_EXACT_BITS;
}

/* A listed node's capacity; class mutex held. */
static inline size_t cap_of(struct kvpi_bc_nodes *n, uint32_t idx)
{
	/* relaxed: the class mutex orders it (written before the node was listed). */
	return (size_t)atomic_load_explicit(&kvpi_bc_node(n, idx)->cap, memory_order_relaxed);
}

void kvpi_bc_large_put(struct kvpi_bc_large *lg, struct kvpi_bc_nodes *n, uint32_t idx)
{
	struct kvpi_bc_node *x = kvpi_bc_node(n, idx);
	/* relaxed: the caller set it, in this thread. */
	size_t cap = (size_t)atomic_load_explicit(&x->cap, memory_order_relaxed);
	unsigned k = class_of(cap >> KVPI_BC_UNIT_SHIFT);
	struct kvpi_bc_large_class *lc = &lg->cls[k];

	pthread_mutex_lock(&lc->lock);
	uint32_t after = lc->tail;
	while (after != KVPI_BC_NIL && cap_of(n, after) > cap)
		after = kvpi_bc_node(n, after)->lprev;
	x->lprev = after;
	x->lnext = after == KVPI_BC_NIL ? lc->head : kvpi_bc_node(n, after)->lnext;
	if (x->lnext == KVPI_BC_NIL)
		lc->tail = idx;
	else
		kvpi_bc_node(n, x->lnext)->lprev = idx;
	if (after == KVPI_BC_NIL)
		lc->head = idx;
	else
		kvpi_bc_node(n, after)->lnext = idx;
	/* Relaxed: the bit is a hint; the list itself is ordered by the mutex. */
	atomic_fetch_or_explicit(&lg->nonempty, (uint64_t)1 << k, memory_order_relaxed);
	/* Relaxed: a statistic, exact once the tier is quiescent. */
	atomic_fetch_add_explicit(&lg->count, 1, memory_order_relaxed);
	pthread_mutex_unlock(&lc->lock);
}

static void unlink_node(struct kvpi_bc_large *lg, struct kvpi_bc_nodes *n, unsigned k, uint32_t idx)
{
	struct kvpi_bc_large_class *lc = &lg->cls[k];
	struct kvpi_bc_node *x = kvpi_bc_node(n, idx);

	if (x->lprev == KVPI_BC_NIL)
		lc->head = x->lnext;
	else
		kvpi_bc_node(n, x->lprev)->lnext = x->lnext;
	if (x->lnext == KVPI_BC_NIL)
		lc->tail = x->lprev;
	else
		kvpi_bc_node(n, x->lnext)->lprev = x->lprev;
	x->lprev = x->lnext = KVPI_BC_NIL;
	/* Relaxed, both: a statistic and a hint, as in kvpi_bc_large_put. */
	atomic_fetch_sub_explicit(&lg->count, 1, memory_order_relaxed);
	if (lc->head == KVPI_BC_NIL)
		atomic_fetch_and_explicit(&lg->nonempty, ~((uint64_t)1 << k), memory_order_relaxed);
}

int kvpi_bc_large_take(struct kvpi_bc_large *lg, struct kvpi_bc_nodes *n, size_t need_units,
                       void **ptr, size_t *cap)
{
	size_t need = need_units << KVPI_BC_UNIT_SHIFT;
	unsigned k0 = need_units > KVPI_BC_EXACT_UNITS ? class_of(need_units) : 0;
	/* relaxed: a hint (see the header); each list is read under its mutex. */
	uint64_t m =
	    atomic_load_explicit(&lg->nonempty, memory_order_relaxed) & (~(uint64_t)0 << k0);

	for (; m; m &= m - 1) {
		unsigned k = (unsigned)__builtin_ctzll(m);
		struct kvpi_bc_large_class *lc = &lg->cls[k];

		pthread_mutex_lock(&lc->lock);
		uint32_t idx;
		for (idx = lc->head; idx != KVPI_BC_NIL; idx = kvpi_bc_node(n, idx)->lnext) {
			if (cap_of(n, idx) >= need)
				break;
		}
		if (idx != KVPI_BC_NIL) {
			struct kvpi_bc_node *x = kvpi_bc_node(n, idx);
			/* relaxed: the class mutex orders it, as cap_of. */
			*ptr = (void *)atomic_load_explicit(&x->ptr, memory_order_relaxed);
			*cap = cap_of(n, idx);
			unlink_node(lg, n, k, idx);
			pthread_mutex_unlock(&lc->lock);
			kvpi_bc_nodes_push(n, idx);
			return 1;
		}
		pthread_mutex_unlock(&lc->lock);
	}
	return 0;
}
