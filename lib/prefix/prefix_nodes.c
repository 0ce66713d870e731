/*
 * lib/prefix/prefix_nodes.c - index nodes: slabs, per-thread caches, batched grace periods.
 *
 * Every publish needs an index node and every eviction retires one, and a
 * retired node may still be read by lookups that found it, so it is reused
 * only after a grace period.  Handing each node to call_rcu on its own
 * costs an enqueue on liburcu's shared callback queue per eviction, and the
 * callback that gives the node back runs on liburcu's worker thread, on
 * another core: with two threads publishing on two cores that was a third
 * of the time of a publish (docs/PREFIX.md).  So nodes move in batches:
 *
 *   - each thread slot keeps a cache of free nodes and a batch of retired
 *     ones (owner only, no atomics);
 *   - a full batch of KVPI_PFX_NODE_BATCH retired nodes goes to call_rcu as
 *     one callback, which pushes the whole batch on the prefix's ready
 *     stack (one CAS);
 *   - a thread whose cache is empty takes the whole ready stack with one
 *     exchange (a pop that cannot meet ABA) into its cache; only when
 *     nothing is ready does it allocate a slab of KVPI_PFX_NODE_BATCH nodes.
 *
 * Slabs are pushed on a list of their own and freed only by
 * kvpi_pfx_nodes_destroy, so a node is never freed while anyone could hold
 * it.  A batch retired by a thread that then stops evicting waits in its
 * slot until the slot's next owner fills it; that is at most
 * KVPI_PFX_NODE_BATCH - 1 nodes per slot.
 *
 * A batch is a chain of nodes through ->next; its first node carries the
 * link to the next batch on the ready stack (batch_next) and the call_rcu
 * head.  Nodes are never freed one by one, so how many exist is bounded by
 * the blocks published, plus per thread slot a batch being retired and
 * what it took from the ready stack, plus the batches within a grace
 * period.
 */
#include <time.h>

#include "lib/base/sysmem.h"
#include "lib/prefix/prefix_internal.h"

/* Push batch @b on the ready stack.  A Treiber push, safe against ABA: it
 * relies only on the top it links to still being the top. */
static void ready_push(struct kvpi_prefix *pf, struct kvpi_pnode *b)
{
	/* relaxed load: the CAS checks it. */
	struct kvpi_pnode *top = atomic_load_explicit(&pf->ready, memory_order_relaxed);
	do
		b->batch_next = top;
	/* release: the taker (acquire exchange) sees the batch's links and
	 * nodes as written before the push. */
	while (!atomic_compare_exchange_weak_explicit(&pf->ready, &top, b, memory_order_release,
	                                              memory_order_relaxed));
}

/* After a grace period: no lookup still holds a node of the batch. */
static void batch_back(struct kvpi_rcu_cb *cb)
{
	struct kvpi_pnode *n =
	    (struct kvpi_pnode *)(void *)((char *)cb - __builtin_offsetof(struct kvpi_pnode, rcu));
	struct kvpi_prefix *pf = n->pf;
	ready_push(pf, n);
	/* release: the last touch of the pool's memory by this callback;
	 * kvpi_pfx_nodes_destroy (acquire) waits for 0. */
	atomic_fetch_sub_explicit(&pf->deferred, 1, memory_order_release);
}

void kvpi_pfx_node_retire(struct kvpi_prefix *pf, struct kvpi_tslot *s, struct kvpi_pnode *n)
{
	n->next = s->pfx_retired;
	s->pfx_retired = n;
	if (++s->pfx_n_retired < KVPI_PFX_NODE_BATCH)
		return;
	s->pfx_retired = NULL;
	s->pfx_n_retired = 0;
	/* relaxed: the count only needs to reach the callback, which the
	 * call_rcu queue orders after us. */
	atomic_fetch_add_explicit(&pf->deferred, 1, memory_order_relaxed);
	kvpi_rcu_call(&n->rcu, batch_back);
}

/* A new slab (@s's cache empty): one node returned, the rest become the
 * cache.  NULL when memory runs out. */
static struct kvpi_pnode *slab_new(struct kvpi_prefix *pf, struct kvpi_tslot *s)
{
	struct kvpi_pslab *sl = kvpi_sys_alloc(sizeof(*sl), 64);
	if (!sl)
		return NULL;
	for (uint32_t i = 0; i < KVPI_PFX_NODE_BATCH; i++) {
		sl->nodes[i].pf = pf;
		sl->nodes[i].next = i + 1 < KVPI_PFX_NODE_BATCH ? &sl->nodes[i + 1] : NULL;
	}
	sl->nodes[1].batch_next = NULL;
	/* relaxed load: the CAS checks it.  release: destroy (acquire, after
	 * every thread is done) sees the links.  A push-only stack: no ABA. */
	struct kvpi_pslab *top = atomic_load_explicit(&pf->slabs, memory_order_relaxed);
	do
		sl->next = top;
	while (!atomic_compare_exchange_weak_explicit(&pf->slabs, &top, sl, memory_order_release,
	                                              memory_order_relaxed));
	s->pfx_nodes = &sl->nodes[1];
	return &sl->nodes[0];
}

/*
 * A thread's cache is a chain of batches: nodes through ->next, and the
 * cache's first node carries the link to the next batch (batch_next), which
 * a pop hands on to the node after it.  So taking every ready batch at once
 * (one exchange: a pop that cannot meet ABA) costs nothing per batch.
 */
struct kvpi_pnode *kvpi_pfx_node_get(struct kvpi_prefix *pf, struct kvpi_tslot *s)
{
	struct kvpi_pnode *n = s->pfx_nodes;
	/* relaxed: skip the exchange (a write to a shared line) when empty. */
	if (!n && atomic_load_explicit(&pf->ready, memory_order_relaxed))
		/* acquire: see the batches and their nodes as pushed (release). */
		n = atomic_exchange_explicit(&pf->ready, NULL, memory_order_acquire);
	if (!n)
		return slab_new(pf, s);
	struct kvpi_pnode *m = n->next;
	if (m) {
		m->batch_next = n->batch_next;
		s->pfx_nodes = m;
	} else {
		s->pfx_nodes = n->batch_next;
	}
	/* The next publish fills the next node: bring its line in now. */
	__builtin_prefetch(s->pfx_nodes, 1);
	return n;
}

void kvpi_pfx_node_put(struct kvpi_tslot *s, struct kvpi_pnode *n)
{
	struct kvpi_pnode *head = s->pfx_nodes;
	n->next = head;
	n->batch_next = head ? head->batch_next : NULL;
	s->pfx_nodes = n;
}

void kvpi_pfx_nodes_destroy(struct kvpi_prefix *pf)
{
	/* Callbacks still queued push batches on the ready stack: wait until
	 * the last has run (acquire: pairs with its release decrement).  Not
	 * urcu_bp_barrier: its own work items are invisible to TSan. */
	while (atomic_load_explicit(&pf->deferred, memory_order_acquire) != 0) {
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
	/* acquire: see the slabs' links. */
	struct kvpi_pslab *sl = atomic_load_explicit(&pf->slabs, memory_order_acquire);
	while (sl) {
		struct kvpi_pslab *next = sl->next;
		kvpi_sys_free(sl);
		sl = next;
	}
	atomic_store_explicit(&pf->slabs, NULL, memory_order_relaxed);
}
