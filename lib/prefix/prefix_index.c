/*
 * lib/prefix/prefix_index.c - the key index of the prefix cache: liburcu's cds_lfht.
 *
 * Keys are (stream tag, 128-bit content key).  Lookups run in a read-side
 * section and take no lock; add and delete run with the node's block
 * locked (its state word's lock bit) or owned by an evictor, so for one
 * block at most one node is ever live, and a node's fields never change
 * while it is in the table.  A deleted node may still be read by lookups
 * that found it before the delete, so it goes back to its block's spare
 * stack only after a grace period (call_rcu); publishing takes a spare node
 * before it allocates one, so a warm server allocates no nodes.  The spare
 * stack is a Treiber stack with one popper at a time (the publisher, which
 * holds the block's lock) and any number of pushers (callbacks): a pop
 * cannot meet ABA, because only a pop removes nodes.
 *
 * liburcu's code is not instrumented for ThreadSanitizer: a publisher
 * releases on the node's address after filling it, and the match function
 * acquires on it before reading it (the cds_lfht add/lookup pair provides
 * that ordering on the hardware).  Reuse is ordered by the grace period
 * (lib/base/rcu.c) and the spare stack's CAS.
 */
#include <time.h>
#include <urcu/urcu-bp.h>

#include <urcu/rculfhash.h>

#include "lib/prefix/prefix_internal.h"
#include "lib/base/sysmem.h"
#include "lib/base/tsan.h"

_Static_assert(sizeof(struct cds_lfht_node) == sizeof(((struct kvp_pnode *)0)->node),
               "index node room must fit a cds_lfht_node");
_Static_assert(_Alignof(struct cds_lfht_node) <= _Alignof(struct kvp_pnode),
               "index node alignment");

#ifdef KVP_TSAN
/*
 * liburcu-cds runs the table's resizes on a worker thread of its own and
 * orders its hand-offs with futexes and inline assembly that TSan cannot
 * see, so TSan reports the library's own malloc/free of its work items as
 * races.  Only allocator calls made from inside liburcu-cds are ignored;
 * every access of kvpool's own code stays checked.
 */
const char *__tsan_default_suppressions(void);
const char *__tsan_default_suppressions(void)
{
	return "called_from_lib:liburcu-cds.so\n";
}
#endif

struct lookup_key {
	const kvp_hash *key;
	uint32_t stream;
};

static unsigned long key_hash(const kvp_hash *k, uint32_t stream)
{
	/* The key is a cryptographic hash already: fold it, and set the
	 * streams apart. */
	uint64_t h = k->lo ^ (k->hi * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)stream << 61);
	return (unsigned long)(h ^ (h >> 29));
}

static struct cds_lfht_node *as_lfht(struct kvp_pnode *n)
{
	return (struct cds_lfht_node *)(void *)&n->node;
}

static struct kvp_pnode *as_pnode(struct cds_lfht_node *n)
{
	return (struct kvp_pnode *)(void *)n;
}

static int node_match(struct cds_lfht_node *node, const void *arg)
{
	const struct lookup_key *k = arg;
	struct kvp_pnode *n = as_pnode(node);
	KVP_TSAN_ACQUIRE(n);
	return n->stream == k->stream && n->key.lo == k->key->lo && n->key.hi == k->key->hi;
}

int kvpi_pfx_index_init(struct kvp_prefix *pf, uint32_t n_blocks)
{
	/* At least two buckets per block the pool starts with (and never
	 * fewer, so the table does not shrink back while the cache warms):
	 * a lookup walks the bucket's chain, one cache miss per node, and at
	 * this load most chains hold the one node sought. */
	unsigned long size = 1024;
	while (size < 2ul * n_blocks && size < (1ul << 24))
		size *= 2;
	pf->ht = cds_lfht_new_flavor(size, size, 0, CDS_LFHT_AUTO_RESIZE | CDS_LFHT_ACCOUNTING,
	                             &urcu_bp_flavor, NULL);
	return pf->ht ? 0 : -1;
}

void kvpi_pfx_index_destroy(struct kvp_prefix *pf)
{
	if (!pf->ht)
		return;
	/* Callbacks still queued hand nodes back to spare lists: wait until
	 * the last has run (acquire: pairs with its release decrement).  Not
	 * urcu_bp_barrier: its own work items are invisible to TSan. */
	while (atomic_load_explicit(&pf->deferred, memory_order_acquire) != 0) {
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
	struct kvp_pnode *chain = NULL;
	struct cds_lfht_iter it;
	struct cds_lfht_node *node;
	kvpi_rcu_read_lock();
	cds_lfht_first(pf->ht, &it);
	while ((node = cds_lfht_iter_get_node(&it)) != NULL) {
		cds_lfht_next(pf->ht, &it);
		cds_lfht_del(pf->ht, node);
		struct kvp_pnode *n = as_pnode(node);
		n->spare = chain;
		chain = n;
	}
	kvpi_rcu_read_unlock();
	/* Waits for resizes in flight, which may still walk the nodes. */
	cds_lfht_destroy(pf->ht, NULL);
	pf->ht = NULL;
	while (chain) {
		struct kvp_pnode *next = chain->spare;
		kvpi_sys_free(chain);
		chain = next;
	}
}

struct kvp_pnode *kvpi_pfx_index_lookup(struct kvp_prefix *pf, uint32_t stream, const kvp_hash *key)
{
	struct lookup_key k = {key, stream};
	struct cds_lfht_iter it;
	cds_lfht_lookup(pf->ht, key_hash(key, stream), node_match, &k, &it);
	struct cds_lfht_node *node = cds_lfht_iter_get_node(&it);
	return node ? as_pnode(node) : NULL;
}

struct kvp_pnode *kvpi_pfx_index_add(struct kvp_prefix *pf, struct kvp_pnode *n)
{
	struct lookup_key k = {&n->key, n->stream};
	KVP_TSAN_RELEASE(n);
	struct cds_lfht_node *got =
	    cds_lfht_add_unique(pf->ht, key_hash(&n->key, n->stream), node_match, &k, as_lfht(n));
	return got == as_lfht(n) ? NULL : as_pnode(got);
}

/* After a grace period: no lookup still holds @n; give it back to its block. */
static void node_back(struct kvp_rcu_cb *cb)
{
	struct kvp_pnode *n =
	    (struct kvp_pnode *)(void *)((char *)cb - __builtin_offsetof(struct kvp_pnode, rcu));
	struct kvp_prefix *pf = n->pf;
	kvpi_pfx_node_put(kvpi_pfx_side(pf, n->id), n);
	/* release: the last touch of the pool's memory by this callback;
	 * kvpi_pfx_index_destroy (acquire) waits for 0 or for a barrier. */
	atomic_fetch_sub_explicit(&pf->deferred, 1, memory_order_release);
}

void kvpi_pfx_index_del(struct kvp_prefix *pf, struct kvp_pnode *n)
{
	cds_lfht_del(pf->ht, as_lfht(n));
	/* relaxed: the count only needs to reach the callback, which the
	 * call_rcu queue orders after us. */
	atomic_fetch_add_explicit(&pf->deferred, 1, memory_order_relaxed);
	kvpi_rcu_call(&n->rcu, node_back);
}

void kvpi_pfx_node_put(struct kvp_pside *e, struct kvp_pnode *n)
{
	/* relaxed load: the CAS below checks it. */
	struct kvp_pnode *top = atomic_load_explicit(&e->spare, memory_order_relaxed);
	do
		n->spare = top;
	/* release: the popper (acquire) sees n->spare and the node. */
	while (!atomic_compare_exchange_weak_explicit(&e->spare, &top, n, memory_order_release,
	                                              memory_order_relaxed));
}

struct kvp_pnode *kvpi_pfx_node_get(struct kvp_prefix *pf, struct kvp_pside *e)
{
	/* acquire: see the pusher's n->spare. */
	struct kvp_pnode *n = atomic_load_explicit(&e->spare, memory_order_acquire);
	/* acquire on failure: as above.  We are the only popper (block lock). */
	while (n && !atomic_compare_exchange_weak_explicit(
	                &e->spare, &n, n->spare, memory_order_acquire, memory_order_acquire))
		;
	if (n)
		return n;
	n = kvpi_sys_alloc(sizeof(*n), 64);
	if (n)
		n->pf = pf;
	return n;
}

void kvpi_pfx_forget(struct kvp_prefix *pf, struct kvp_pside *e)
{
	if (!e->pub)
		return;
	kvpi_pfx_index_del(pf, e->pub);
	e->pub = NULL;
}

void kvpi_pfx_index_each(struct kvp_prefix *pf, void (*fn)(struct kvp_pnode *n, void *arg),
                         void *arg)
{
	struct cds_lfht_iter it;
	struct cds_lfht_node *node;
	cds_lfht_first(pf->ht, &it);
	while ((node = cds_lfht_iter_get_node(&it)) != NULL) {
		cds_lfht_next(pf->ht, &it);
		KVP_TSAN_ACQUIRE(node); /* as in node_match */
		fn(as_pnode(node), arg);
	}
}
