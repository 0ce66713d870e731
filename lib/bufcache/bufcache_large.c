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

int bc_large_init(struct bc_large *lg)
{
	atomic_init(&lg->nonempty, 0);
	atomic_init(&lg->count, 0);
	for (int i = 0; i < BC_LARGE_CLASSES; i++) {
		if (pthread_mutex_init(&lg->cls[i].lock, NULL)) {
			while (i--)
				pthread_mutex_destroy(&lg->cls[i].lock);
			return -1;
		}
		lg->cls[i].head = lg->cls[i].tail = BC_NIL;
	}
	return 0;
}

void bc_large_destroy(struct bc_large *lg)
{
	for (int i = 0; i < BC_LARGE_CLASSES; i++)
		pthread_mutex_destroy(&lg->cls[i].lock);
}

static unsigned class_of(size_t units)
{
	return bc_floor_log2(units) - BC_EXACT_BITS;
}

static inline size_t cap_of(struct bc_nodes *n, uint32_t idx)
{
	return (size_t)atomic_load_explicit(&bc_node(n, idx)->cap, memory_order_relaxed);
}

void bc_large_put(struct bc_large *lg, struct bc_nodes *n, uint32_t idx)
{
	struct bc_node *x = bc_node(n, idx);
	size_t cap = (size_t)atomic_load_explicit(&x->cap, memory_order_relaxed);
	unsigned k = class_of(cap >> BC_UNIT_SHIFT);
	struct bc_large_class *lc = &lg->cls[k];
	uint32_t after;

	pthread_mutex_lock(&lc->lock);
	after = lc->tail;
	while (after != BC_NIL && cap_of(n, after) > cap)
		after = bc_node(n, after)->lprev;
	x->lprev = after;
	x->lnext = after == BC_NIL ? lc->head : bc_node(n, after)->lnext;
	if (x->lnext == BC_NIL)
		lc->tail = idx;
	else
		bc_node(n, x->lnext)->lprev = idx;
	if (after == BC_NIL)
		lc->head = idx;
	else
		bc_node(n, after)->lnext = idx;
	/* Relaxed: the bit is a hint; the list itself is ordered by the mutex. */
	atomic_fetch_or_explicit(&lg->nonempty, (uint64_t)1 << k, memory_order_relaxed);
	atomic_fetch_add_explicit(&lg->count, 1, memory_order_relaxed);
	pthread_mutex_unlock(&lc->lock);
}

static void unlink_node(struct bc_large *lg, struct bc_nodes *n, unsigned k, uint32_t idx)
{
	struct bc_large_class *lc = &lg->cls[k];
	struct bc_node *x = bc_node(n, idx);

	if (x->lprev == BC_NIL)
		lc->head = x->lnext;
	else
		bc_node(n, x->lprev)->lnext = x->lnext;
	if (x->lnext == BC_NIL)
		lc->tail = x->lprev;
	else
		bc_node(n, x->lnext)->lprev = x->lprev;
	x->lprev = x->lnext = BC_NIL;
	atomic_fetch_sub_explicit(&lg->count, 1, memory_order_relaxed);
	if (lc->head == BC_NIL)
		atomic_fetch_and_explicit(&lg->nonempty, ~((uint64_t)1 << k), memory_order_relaxed);
}

int bc_large_take(struct bc_large *lg, struct bc_nodes *n, size_t need_units, void **ptr,
                  size_t *cap)
{
	size_t need = need_units << BC_UNIT_SHIFT;
	unsigned k0 = need_units > BC_EXACT_UNITS ? class_of(need_units) : 0;
	uint64_t m =
	    atomic_load_explicit(&lg->nonempty, memory_order_relaxed) & (~(uint64_t)0 << k0);

	for (; m; m &= m - 1) {
		unsigned k = (unsigned)__builtin_ctzll(m);
		struct bc_large_class *lc = &lg->cls[k];
		uint32_t idx;

		pthread_mutex_lock(&lc->lock);
		for (idx = lc->head; idx != BC_NIL; idx = bc_node(n, idx)->lnext) {
			if (cap_of(n, idx) >= need)
				break;
		}
		if (idx != BC_NIL) {
			struct bc_node *x = bc_node(n, idx);
			*ptr = (void *)atomic_load_explicit(&x->ptr, memory_order_relaxed);
			*cap = cap_of(n, idx);
			unlink_node(lg, n, k, idx);
			pthread_mutex_unlock(&lc->lock);
			bc_nodes_push(n, idx);
			return 1;
		}
		pthread_mutex_unlock(&lc->lock);
	}
	return 0;
}
