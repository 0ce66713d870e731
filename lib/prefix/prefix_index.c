/*
 * lib/prefix/prefix_index.c - the key index of the prefix cache: sharded open addressing.
 *
 * Keys are (stream tag, 128-bit content key); a key names one index node,
 * which names one block.  The index is KVPI_PIDX_SHARDS shards, picked by
 * the top bits of the key's 64-bit hash.  Each shard is one table of slots
 * with linear probing, a mutex for writers and nothing for readers.
 *
 * Why not liburcu's cds_lfht, which this file used before.  A split-ordered
 * list visits a bucket node and then a chain of nodes, each its own cache
 * miss, for every lookup, add and delete; and its delete walks the bucket
 * again to unlink.  On the serving loop (bench/lifecycle, prefix mode, one
 * thread) perf put 51% of a request's samples in cds_lfht_del under
 * eviction, and most of the rest of the index's time in the add of
 * publish: about 80% of the loop.  Here a lookup reads one slot line and
 * the node it names; an add or a delete reads the same under a shard mutex
 * no other thread is likely to hold (docs/DESIGN.md has the figures).
 *
 * A slot is (hash, node).  node is 0 for an empty slot, KVPI_PIDX_TOMB for
 * a deleted one, else the node's address.  Readers take no lock, so slots
 * never move inside a table:
 *   - an add fills the first tombstone or empty slot of its probe run;
 *   - a delete leaves a tombstone, or an empty slot when the next slot is
 *     empty (then no probe run passes through it), and so for tombstones
 *     just before it;
 *   - when tombstones and keys fill three quarters of a table, the writer
 *     copies the keys to a fresh table, publishes it with one release
 *     store and retires the old one to a grace period.
 * A key present for the whole of a lookup keeps its slot, and every slot
 * of its probe run before it stays non-empty, so the lookup finds it.  A
 * lookup that runs beside an add or a delete of its key may miss it or
 * find a node being deleted; match holds a block only after checking,
 * under the block's lock, that the block is still published under that
 * node (lib/prefix/prefix.c), as it did with cds_lfht.
 *
 * A lookup reads the fields of the node a slot names.  Nodes are reused
 * only after a grace period (lib/prefix/prefix_nodes.c), and so are
 * tables, so every caller is in a read-side section.  A retired table comes
 * back as its shard's spare after the grace period: a warm shard allocates
 * nothing when it rebuilds.
 */
#include <string.h>

#include "lib/base/sysmem.h"
#include "lib/prefix/prefix_internal.h"

#define TOMB        ((uintptr_t)1)
#define SHARD_SHIFT (64 - 6) /* KVPI_PIDX_SHARDS == 64 */
#define MIN_SLOTS   64u
#define MAX_SLOTS   (1u << 30)
_Static_assert(KVPI_PIDX_SHARDS == 64, "SHARD_SHIFT assumes 64 shards");

struct kvpi_pslot {
	_Atomic uint64_t h;
	_Atomic uintptr_t node;
};

struct kvpi_ptab {
	struct kvpi_rcu_cb rcu; /* retirement to a grace period */
	struct kvpi_pshard *sh; /* for the callback */
	struct kvpi_prefix *pf;
	uint32_t mask; /* slots - 1 */
	struct kvpi_pslot slot[];
};

static struct kvpi_pshard *shard_of(struct kvpi_prefix *pf, uint64_t h)
{
	return &pf->idx[h >> SHARD_SHIFT];
}

static bool node_is(const struct kvpi_pnode *n, uint32_t stream, const kvp_hash *key)
{
	return n->stream == stream && n->key.lo == key->lo && n->key.hi == key->hi;
}

static struct kvpi_ptab *tab_new(struct kvpi_prefix *pf, struct kvpi_pshard *sh, uint32_t slots)
{
	struct kvpi_ptab *t =
	    kvpi_sys_calloc(1, sizeof(*t) + (size_t)slots * sizeof(struct kvpi_pslot), 64);
	if (!t)
		return NULL;
	t->sh = sh;
	t->pf = pf;
	t->mask = slots - 1;
	return t;
}

/* After a grace period: no lookup still reads the table; it becomes its
 * shard's spare (an older spare is freed). */
static void tab_back(struct kvpi_rcu_cb *cb)
{
	struct kvpi_ptab *t =
	    (struct kvpi_ptab *)(void *)((char *)cb - __builtin_offsetof(struct kvpi_ptab, rcu));
	struct kvpi_prefix *pf = t->pf;
	/* acq_rel: the writer that takes the spare (acquire exchange) sees
	 * it as retired; we see the spare we free as the last one left it. */
	struct kvpi_ptab *old = atomic_exchange_explicit(&t->sh->spare, t, memory_order_acq_rel);
	kvpi_sys_free(old);
	/* release: the last touch of the pool's memory by this callback;
	 * kvpi_pfx_nodes_destroy (acquire) waits for 0. */
	atomic_fetch_sub_explicit(&pf->deferred, 1, memory_order_release);
}

int kvpi_pfx_index_init(struct kvpi_prefix *pf, uint32_t n_blocks)
{
	/* Two slots per block the pool starts with (a table is rebuilt at
	 * three quarters full, keys and tombstones counted): most lookups
	 * find their key in its home slot. */
	uint64_t want = 2ull * n_blocks / KVPI_PIDX_SHARDS;
	uint32_t slots = MIN_SLOTS;
	while (slots < want && slots < (1u << 24))
		slots *= 2;
	for (uint32_t i = 0; i < KVPI_PIDX_SHARDS; i++) {
		struct kvpi_pshard *sh = &pf->idx[i];
		if (pthread_mutex_init(&sh->lock, NULL) != 0)
			return -1;
		sh->inited = true;
		sh->min_slots = slots;
		struct kvpi_ptab *t = tab_new(pf, sh, slots);
		if (!t)
			return -1;
		atomic_init(&sh->tab, t);
	}
	return 0;
}

void kvpi_pfx_index_destroy(struct kvpi_prefix *pf)
{
	/* Called after kvpi_pfx_nodes_destroy, which waited for every
	 * retired table's callback (pf->deferred). */
	for (uint32_t i = 0; i < KVPI_PIDX_SHARDS; i++) {
		struct kvpi_pshard *sh = &pf->idx[i];
		kvpi_sys_free(atomic_load_explicit(&sh->tab, memory_order_relaxed));
		kvpi_sys_free(atomic_load_explicit(&sh->spare, memory_order_relaxed));
		atomic_store_explicit(&sh->tab, NULL, memory_order_relaxed);
		atomic_store_explicit(&sh->spare, NULL, memory_order_relaxed);
		if (sh->inited)
			pthread_mutex_destroy(&sh->lock);
		sh->inited = false;
	}
}

struct kvpi_pnode *kvpi_pfx_index_lookup(struct kvpi_prefix *pf, uint32_t stream,
                                         const kvp_hash *key)
{
	uint64_t h = kvpi_pfx_index_hash(key, stream);
	/* acquire: pairs with the release store that published the table,
	 * so its slots as copied are seen. */
	struct kvpi_ptab *t = atomic_load_explicit(&shard_of(pf, h)->tab, memory_order_acquire);
	for (uint32_t i = (uint32_t)h & t->mask, k = 0; k <= t->mask; i = (i + 1) & t->mask, k++) {
		/* acquire: pairs with the add's release store, so the node's
		 * fields as filled before it are seen. */
		uintptr_t v = atomic_load_explicit(&t->slot[i].node, memory_order_acquire);
		if (v == 0)
			return NULL;
		/* relaxed: a filter only; node_is decides. */
		if (v == TOMB || atomic_load_explicit(&t->slot[i].h, memory_order_relaxed) != h)
			continue;
		struct kvpi_pnode *n = (struct kvpi_pnode *)v;
		if (node_is(n, stream, key))
			return n;
	}
	return NULL;
}

/* Put (@h, @v) into @t, which has no tombstones and room (a rebuild). */
static void put_fresh(struct kvpi_ptab *t, uint64_t h, uintptr_t v)
{
	uint32_t i = (uint32_t)h & t->mask;
	/* relaxed (all): the table is not published yet. */
	while (atomic_load_explicit(&t->slot[i].node, memory_order_relaxed))
		i = (i + 1) & t->mask;
	atomic_store_explicit(&t->slot[i].h, h, memory_order_relaxed);
	atomic_store_explicit(&t->slot[i].node, v, memory_order_relaxed);
}

/*
 * Copy @sh's keys to a table with room for twice as many (at least the
 * shard's first size), publish it and retire the old one.  Shard mutex
 * held.  Returns the new table, or NULL (out of memory) with nothing done.
 */
static struct kvpi_ptab *rebuild(struct kvpi_prefix *pf, struct kvpi_pshard *sh,
                                 struct kvpi_ptab *old)
{
	uint32_t slots = sh->min_slots;
	while (slots < 2u * (sh->live + 1) && slots < MAX_SLOTS)
		slots *= 2;
	/* acquire: the spare as its callback left it (past its grace). */
	struct kvpi_ptab *t = atomic_exchange_explicit(&sh->spare, NULL, memory_order_acquire);
	if (t && t->mask + 1 == slots) {
		memset(t->slot, 0, (size_t)slots * sizeof(struct kvpi_pslot));
	} else {
		kvpi_sys_free(t);
		t = tab_new(pf, sh, slots);
		if (!t)
			return NULL;
	}
	for (uint32_t i = 0; i <= old->mask; i++) {
		/* relaxed: we are the only writer (shard mutex). */
		uintptr_t v = atomic_load_explicit(&old->slot[i].node, memory_order_relaxed);
		if (v > TOMB)
			put_fresh(t, atomic_load_explicit(&old->slot[i].h, memory_order_relaxed),
			          v);
	}
	sh->used = sh->live;
	/* release: a lookup that loads the table (acquire) sees its slots. */
	atomic_store_explicit(&sh->tab, t, memory_order_release);
	/* relaxed: the count reaches the callback through call_rcu's queue. */
	atomic_fetch_add_explicit(&pf->deferred, 1, memory_order_relaxed);
	kvpi_rcu_call(&old->rcu, tab_back);
	return t;
}

void kvpi_pfx_index_prefetch(struct kvpi_prefix *pf, uint64_t h)
{
	/* acquire: as in kvpi_pfx_index_lookup (the table's mask is read). */
	struct kvpi_ptab *t = atomic_load_explicit(&shard_of(pf, h)->tab, memory_order_acquire);
	__builtin_prefetch(&t->slot[(uint32_t)h & t->mask]);
}

int kvpi_pfx_index_add(struct kvpi_prefix *pf, struct kvpi_pnode *n, uint64_t h,
                       struct kvpi_pnode **had)
{
	struct kvpi_pshard *sh = shard_of(pf, h);
	int rc = KVP_OK;
	pthread_mutex_lock(&sh->lock);
	/* relaxed: only writers store it, under this mutex. */
	struct kvpi_ptab *t = atomic_load_explicit(&sh->tab, memory_order_relaxed);
	if (4ull * (sh->used + 1) > 3ull * (t->mask + 1)) {
		struct kvpi_ptab *nt = rebuild(pf, sh, t);
		if (nt)
			t = nt;
		else if (sh->used + 2 > t->mask + 1) /* keep one empty slot */
			rc = KVP_ENOMEM;
	}
	uint32_t i = (uint32_t)h & t->mask, put = UINT32_MAX;
	for (; rc == KVP_OK; i = (i + 1) & t->mask) {
		/* relaxed: we are the only writer. */
		uintptr_t v = atomic_load_explicit(&t->slot[i].node, memory_order_relaxed);
		if (v == 0)
			break;
		if (v == TOMB) {
			if (put == UINT32_MAX)
				put = i;
		} else if (atomic_load_explicit(&t->slot[i].h, memory_order_relaxed) == h &&
		           node_is((struct kvpi_pnode *)v, n->stream, &n->key)) {
			*had = (struct kvpi_pnode *)v;
			rc = KVP_EEXIST;
		}
	}
	if (rc == KVP_OK) {
		if (put == UINT32_MAX) {
			put = i;
			sh->used++;
		}
		sh->live++;
		/* relaxed: the node store below publishes it. */
		atomic_store_explicit(&t->slot[put].h, h, memory_order_relaxed);
		/* release: a lookup that loads the slot (acquire) sees the
		 * node's fields as the publisher filled them. */
		atomic_store_explicit(&t->slot[put].node, (uintptr_t)n, memory_order_release);
	}
	pthread_mutex_unlock(&sh->lock);
	return rc;
}

void kvpi_pfx_index_del(struct kvpi_prefix *pf, struct kvpi_tslot *s, struct kvpi_pnode *n,
                        uint64_t h)
{
	struct kvpi_pshard *sh = shard_of(pf, h);
	pthread_mutex_lock(&sh->lock);
	/* relaxed (all loads): we are the only writer. */
	struct kvpi_ptab *t = atomic_load_explicit(&sh->tab, memory_order_relaxed);
	for (uint32_t i = (uint32_t)h & t->mask, k = 0; k <= t->mask; i = (i + 1) & t->mask, k++) {
		uintptr_t v = atomic_load_explicit(&t->slot[i].node, memory_order_relaxed);
		if (v == 0)
			break; /* not in the index: nothing to undo */
		if (v != (uintptr_t)n)
			continue;
		sh->live--;
		/* An empty slot ends every probe run through it: only when
		 * the next slot is empty may this one, and the tombstones
		 * just before it, become empty.  release (all stores): they
		 * are what lookups load with acquire. */
		if (atomic_load_explicit(&t->slot[(i + 1) & t->mask].node, memory_order_relaxed)) {
			atomic_store_explicit(&t->slot[i].node, TOMB, memory_order_release);
			break;
		}
		for (;;) {
			atomic_store_explicit(&t->slot[i].node, 0, memory_order_release);
			sh->used--;
			i = (i - 1) & t->mask;
			if (atomic_load_explicit(&t->slot[i].node, memory_order_relaxed) != TOMB)
				break;
		}
		break;
	}
	pthread_mutex_unlock(&sh->lock);
	kvpi_pfx_node_retire(pf, s, n);
}

void kvpi_pfx_forget(struct kvpi_prefix *pf, struct kvpi_tslot *s, struct kvpi_pside *e)
{
	if (!e->pub)
		return;
	kvpi_pfx_index_del(pf, s, e->pub, e->pub_h);
	e->pub = NULL;
}

void kvpi_pfx_index_each(struct kvpi_prefix *pf, void (*fn)(struct kvpi_pnode *n, void *arg),
                         void *arg)
{
	/* Slots never move inside a table, so a key present throughout is
	 * met once, whatever @fn deletes; a rebuild meanwhile leaves this
	 * table as it was (only the new one changes). */
	for (uint32_t s = 0; s < KVPI_PIDX_SHARDS; s++) {
		/* acquire (both): as in kvpi_pfx_index_lookup. */
		struct kvpi_ptab *t = atomic_load_explicit(&pf->idx[s].tab, memory_order_acquire);
		for (uint32_t i = 0; i <= t->mask; i++) {
			uintptr_t v = atomic_load_explicit(&t->slot[i].node, memory_order_acquire);
			if (v > TOMB)
				fn((struct kvpi_pnode *)v, arg);
		}
	}
}
