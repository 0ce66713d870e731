/*
 * lib/bufcache/bufcache_create.c - making and destroying a buffer cache.
 *
 * Owns: kvp_bufcache_create and kvp_bufcache_destroy.  Create sizes the
 * fronts' limits from the budget and sets up the shared tier and node slab.
 * It registers the cache and makes the creating thread's front.  Destroy
 * takes the cache out of the registry first, so no exiting thread touches
 * it after; then it frees the fronts, the buffers and the parts.
 *
 * May call: the shared tier and node slab's init and destroy, the front
 * registry (bufcache_front.h), kvpi_bc_take_fit (bufcache_budget.c), the
 * barrier policy (lib/base/barrier.h) and the system door.  The registry
 * lock is taken inside the registry calls only.
 */
#include "lib/bufcache/bufcache_internal.h"
#include "lib/base/barrier.h"
#include "lib/base/sysmem.h"

#include <string.h>

#define KVPI_BC_FRONT_MAXCAP ((size_t)8 << 20)
#define KVPI_BC_BATCH_MAX    ((size_t)1 << 20)

static _Atomic uint64_t next_uid = 1;

/* Set up @c's shared tier and node slab; on failure undo what was set up.  0 or -1. */
static int parts_init(kvp_bufcache *c)
{
	if (kvpi_bc_nodes_init(&c->nodes))
		return -1;
	if (kvpi_bc_exact_init(&c->exact))
		goto undo_nodes;
	if (kvpi_bc_large_init(&c->large))
		goto undo_exact;
	return 0;
undo_exact:
	kvpi_bc_exact_destroy(&c->exact);
undo_nodes:
	kvpi_bc_nodes_destroy(&c->nodes);
	return -1;
}

/* Undo parts_init (single-threaded). */
static void parts_destroy(kvp_bufcache *c)
{
	kvpi_bc_large_destroy(&c->large);
	kvpi_bc_exact_destroy(&c->exact);
	kvpi_bc_nodes_destroy(&c->nodes);
}

/* Free every front of @c and the buffers in them (single-threaded, out of the registry). */
static void fronts_free(kvp_bufcache *c)
{
	struct kvpi_bc_front *next;

	/* Acquire: pairs with the release push of each front (it is initialised). */
	for (struct kvpi_bc_front *f = atomic_load_explicit(&c->fronts, memory_order_acquire); f;
	     f = next) {
		next = f->next;
		while (f->l1)
			kvpi_sys_free(kvpi_bc_front_pop(f, (size_t)kvpi_bc_front_find(f, 0)));
		kvpi_sys_free(f);
	}
}

int kvp_bufcache_create(size_t max_cached_bytes, kvp_bufcache **out)
{
	if (!out)
		return KVP_EINVAL;
	*out = NULL;
	kvp_bufcache *c = kvpi_sys_alloc(sizeof(*c), 128);
	if (!c)
		return KVP_ENOMEM;
	memset(c, 0, sizeof(*c));
	c->budget = max_cached_bytes;
	c->asym = kvpi_barrier_asym_ok(); /* before any front exists (each copies it) */
	/* Relaxed: any distinct value will do. */
	c->uid = atomic_fetch_add_explicit(&next_uid, 1, memory_order_relaxed);
	c->front_max = max_cached_bytes / 8 < KVPI_BC_FRONT_MAXCAP ? max_cached_bytes / 8
	                                                           : KVPI_BC_FRONT_MAXCAP;
	c->batch = (max_cached_bytes / 256 < KVPI_BC_BATCH_MAX ? max_cached_bytes / 256
	                                                       : KVPI_BC_BATCH_MAX) &
	           ~(size_t)(KVP_BUF_ALIGN - 1);
	atomic_init(&c->fronts, NULL);
	atomic_init(&c->cached, 0);
	atomic_init(&c->peak, 0);
	atomic_init(&c->live, 0);
	atomic_init(&c->live_bytes, 0);
	atomic_init(&c->parked, 0);
	kvpi_bc_stats_init(&c->stats);
	if (parts_init(c)) {
		kvpi_sys_free(c);
		return KVP_ENOMEM;
	}
	if (kvpi_bc_front_registry_add(c)) {
		parts_destroy(c);
		kvpi_sys_free(c);
		return KVP_ENOMEM;
	}
	/* The creating thread's front now, so its first calls allocate nothing more. */
	if (!kvpi_bc_front_lookup(c)) {
		kvpi_bc_front_registry_remove(c);
		fronts_free(c);
		parts_destroy(c);
		kvpi_sys_free(c);
		return KVP_ENOMEM;
	}
	*out = c;
	return KVP_OK;
}

void kvp_bufcache_destroy(kvp_bufcache *c)
{
	if (!c)
		return;
	/* After this no exiting thread touches the cache (registry lock). */
	kvpi_bc_front_registry_remove(c);
	fronts_free(c);
	void *p;
	size_t cap;
	while (kvpi_bc_take_fit(c, 1, &p, &cap))
		kvpi_sys_free(p);
	parts_destroy(c);
	kvpi_sys_free(c);
}
