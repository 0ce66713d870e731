/*
 * lib/prefix/prefix_index.c - the key index of the prefix cache: liburcu's cds_lfht.
 *
 * Keys are (stream tag, 128-bit content key).  Lookups run in a read-side
 * section and take no lock; add and delete run with the node's block
 * locked (its state word's lock bit) or owned by an evictor, so for one
 * block at most one node is ever live, and a node's fields never change
 * while it is in the table.  A deleted node may still be read by lookups
 * that found it before the delete, so it is reused only after a grace
 * period (lib/prefix/prefix_nodes.c); a warm server allocates no nodes.
 *
 * liburcu's code is not instrumented for ThreadSanitizer: a publisher
 * releases on the node's address after filling it, and the match function
 * acquires on it before reading it (the cds_lfht add/lookup pair provides
 * that ordering on the hardware).  Reuse is ordered by the grace period
 * (lib/base/rcu.c) and the ready stack's CAS and exchange.
 */
#include <urcu/urcu-bp.h>

#include <urcu/rculfhash.h>

#include "lib/prefix/prefix_internal.h"
#include "lib/base/sysmem.h"
#include "lib/base/tsan.h"

_Static_assert(sizeof(struct cds_lfht_node) == sizeof(((struct kvpi_pnode *)0)->node),
               "index node room must fit a cds_lfht_node");
_Static_assert(_Alignof(struct cds_lfht_node) <= _Alignof(struct kvpi_pnode),
               "index node alignment");

#ifdef KVPI_TSAN
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

static struct cds_lfht_node *as_lfht(struct kvpi_pnode *n)
{
	return (struct cds_lfht_node *)(void *)&n->node;
}

static struct kvpi_pnode *as_pnode(struct cds_lfht_node *n)
{
	return (struct kvpi_pnode *)(void *)n;
}

static int node_match(struct cds_lfht_node *node, const void *arg)
{
	const struct lookup_key *k = arg;
	struct kvpi_pnode *n = as_pnode(node);
	KVPI_TSAN_ACQUIRE(n);
	return n->stream == k->stream && n->key.lo == k->key->lo && n->key.hi == k->key->hi;
}

int kvpi_pfx_index_init(struct kvpi_prefix *pf, uint32_t n_blocks)
{
	/* At least two buckets per block the pool starts with (and never
	 * fewer, so the table does not shrink back while the cache warms):
	 * a lookup walks the bucket's chain, one cache miss per node, and at
	 * this load most chains hold the one node sought. */
	unsigned long size = 1024;
	while (size < 2ul * n_blocks && size < (1ul << 24))
		size *= 2;
	/*
	 * CDS_LFHT_ACCOUNTING stays, though its per-CPU node counts cost a
	 * publish 10 to 40 ns (bench/prefix_loop, one thread): without it,
	 * deleting the 490k keys of tests/replay_prefix_test.sh's first run
	 * at kvp_pool_destroy had not finished after a minute, with liburcu's
	 * resize workers busy.
	 */
	pf->ht = cds_lfht_new_flavor(size, size, 0, CDS_LFHT_AUTO_RESIZE | CDS_LFHT_ACCOUNTING,
	                             &urcu_bp_flavor, NULL);
	return pf->ht ? 0 : -1;
}

void kvpi_pfx_index_destroy(struct kvpi_prefix *pf)
{
	if (!pf->ht)
		return;
	struct cds_lfht_iter it;
	struct cds_lfht_node *node;
	kvpi_rcu_read_lock();
	cds_lfht_first(pf->ht, &it);
	while ((node = cds_lfht_iter_get_node(&it)) != NULL) {
		cds_lfht_next(pf->ht, &it);
		cds_lfht_del(pf->ht, node);
	}
	kvpi_rcu_read_unlock();
	/* Waits for resizes in flight, which may still walk the nodes; the
	 * nodes themselves are freed with their slabs (kvpi_pfx_nodes_destroy). */
	cds_lfht_destroy(pf->ht, NULL);
	pf->ht = NULL;
}

struct kvpi_pnode *kvpi_pfx_index_lookup(struct kvpi_prefix *pf, uint32_t stream,
                                         const kvp_hash *key)
{
	struct lookup_key k = {key, stream};
	struct cds_lfht_iter it;
	cds_lfht_lookup(pf->ht, key_hash(key, stream), node_match, &k, &it);
	struct cds_lfht_node *node = cds_lfht_iter_get_node(&it);
	return node ? as_pnode(node) : NULL;
}

struct kvpi_pnode *kvpi_pfx_index_add(struct kvpi_prefix *pf, struct kvpi_pnode *n)
{
	struct lookup_key k = {&n->key, n->stream};
	KVPI_TSAN_RELEASE(n);
	struct cds_lfht_node *got =
	    cds_lfht_add_unique(pf->ht, key_hash(&n->key, n->stream), node_match, &k, as_lfht(n));
	return got == as_lfht(n) ? NULL : as_pnode(got);
}

void kvpi_pfx_index_del(struct kvpi_prefix *pf, struct kvpi_tslot *s, struct kvpi_pnode *n)
{
	cds_lfht_del(pf->ht, as_lfht(n));
	kvpi_pfx_node_retire(pf, s, n);
}

void kvpi_pfx_forget(struct kvpi_prefix *pf, struct kvpi_tslot *s, struct kvpi_pside *e)
{
	if (!e->pub)
		return;
	kvpi_pfx_index_del(pf, s, e->pub);
	e->pub = NULL;
}

void kvpi_pfx_index_each(struct kvpi_prefix *pf, void (*fn)(struct kvpi_pnode *n, void *arg),
                         void *arg)
{
	struct cds_lfht_iter it;
	struct cds_lfht_node *node;
	cds_lfht_first(pf->ht, &it);
	while ((node = cds_lfht_iter_get_node(&it)) != NULL) {
		cds_lfht_next(pf->ht, &it);
		KVPI_TSAN_ACQUIRE(node); /* as in node_match */
		fn(as_pnode(node), arg);
	}
}
