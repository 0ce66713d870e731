/*
 * lib/prefix/prefix_index.c - the key index of the prefix cache: sharded open addressing.
 *
 * Keys are (stream tag, 128-bit content key); a key names the one block
 * published under it.  The index is KVPI_PIDX_SHARDS shards, picked by the
 * top bits of the key's 64-bit hash.  Each shard is one table of slots with
 * linear probing, a mutex for writers and nothing for readers.
 *
 * Why not liburcu's cds_lfht, which this file used before.  A split-ordered
 * list visits a bucket node and then a chain of nodes, each its own cache
 * miss, for every lookup, add and delete; and its delete walks the bucket
 * again to unlink.  On the serving loop (bench/lifecycle, prefix mode, one
 * thread) perf put 51% of a request's samples in cds_lfht_del under
 * eviction, and most of the rest of the index's time in the add of
 * publish: about 80% of the loop.  The table needed a node per key, with
 * its own grace period before reuse, and every node was a further miss.
 * Here a lookup reads one slot line; an add or a delete reads the same
 * under a shard mutex no other thread is likely to hold (docs/DESIGN.md
 * has the figures).
 *
 * A slot is one 64-bit word: 0 for an empty slot, TOMB for a deleted one,
 * else the high 32 bits of the key's hash (the tag) above the block id + 2.
 * Eight slots share a line.  (Slots of a 64-bit hash and a 64-bit value
 * were twice the memory, four a line: an add or delete whose neighbour slot
 * was on the next line, one in four, paid a second miss.)  A lookup
 * compares tags only.  The key itself lives in the block's side entry, and
 * a match compares it there under the block's lock (lib/prefix/prefix.c),
 * so a lookup is a hint.  A rebuild, which needs each key's whole hash to
 * place it, reads it from the side entry too: a block named by a slot keeps
 * its key until its delete, under the shard's mutex.  Readers
 * take no lock, so slots never move inside a table:
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
 * find a block being evicted; match holds a block only after checking,
 * under the block's lock, that it is still published under that key.  Two
 * live keys with one tag on one probe run make the one further along a miss
 * (one chance in 2^30 a slot passed, the shard's two bits of the hash
 * being the same), never a wrong hit.
 *
 * Taking over.  An allocation that evicts claims a cached block (its state
 * EVICTING) and only then deletes its key.  A match that meets the block
 * meanwhile misses, and its caller may publish a fresh block under the
 * same key before the delete.  Refusing it (KVP_EEXIST) would leave the
 * key to a block on its way out and the fresh copy unpublished: the next
 * request with that prompt would miss too.  On the lifecycle benchmark
 * with four threads every refused publish was of this kind (1,320 in one
 * run).  So an add that finds its key held by an EVICTING block puts the
 * new block in that slot.  The evictor's delete is by block id and then
 * finds nothing; an evictor that gives its claim back
 * (kvpi_pfx_unclaim) makes its block CACHED only under this shard's mutex
 * and while the slot still names it (kvpi_pfx_index_recache), and else
 * evicts it.
 *
 * A replaced table is freed only after a grace period, so every lookup
 * runs in a read-side section.  A retired table comes back as its shard's
 * spare after the grace period: a warm shard allocates nothing when it
 * rebuilds.
 */
#include <string.h>
#include <time.h>

#include "lib/base/sysmem.h"
#include "lib/prefix/prefix_internal.h"

#define TOMB          ((uint64_t)1)
#define TAG(h)        ((uint32_t)((h) >> 32))
#define W_OF(h, id)   ((uint64_t)TAG(h) << 32 | ((uint64_t)(id) + 2))
#define ID_OF(w)      ((uint32_t)(w)-2)
#define HAS_ID(w, id) ((uint32_t)(w) == (uint32_t)(id) + 2) /* false for 0 and TOMB */
#define HAS_TAG(w, h) ((uint32_t)((w) >> 32) == TAG(h))     /* a key slot: w > TOMB */
_Static_assert(KVP_MAX_BLOCKS <= UINT32_MAX - 2, "an id + 2 fits a slot's low half");
#define SHARD_SHIFT   (64 - __builtin_ctz(KVPI_PIDX_SHARDS)) /* the hash's top bits */
#define MIN_SLOTS     64u
#define REBUILD_AHEAD 16u /* slots ahead whose block's side entry a rebuild prefetches */
#define MAX_SLOTS     (1u << 30)
_Static_assert((KVPI_PIDX_SHARDS & (KVPI_PIDX_SHARDS - 1)) == 0 && KVPI_PIDX_SHARDS <= 256,
               "a power of two; shard numbers fit a byte (forget_chunk)");

struct kvpi_pslot {
	_Atomic uint64_t w; /* 0 empty, TOMB, or tag << 32 | block id + 2 */
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

/* Whether block @a's key (published, in the index) is the key of @eb. */
static bool same_key(struct kvpi_prefix *pf, uint32_t a, const struct kvpi_pside *eb)
{
	const struct kvpi_pside *ea = kvpi_pfx_side(pf, a);
	return ea->pub_stream == eb->pub_stream && ea->pub_key.lo == eb->pub_key.lo &&
	       ea->pub_key.hi == eb->pub_key.hi;
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
	 * kvpi_pfx_index_destroy (acquire) waits for 0. */
	atomic_fetch_sub_explicit(&pf->deferred, 1, memory_order_release);
}

int kvpi_pfx_index_init(struct kvpi_prefix *pf, uint32_t n_blocks)
{
	/* Four slots per block the pool starts with (a table is rebuilt at
	 * three quarters full, keys and tombstones counted): most lookups
	 * find their key in its home slot, and deletes leave tombstones
	 * seldom, so rebuilds are rare (docs/DESIGN.md, "Key index",
	 * has the measurement against two slots a block).  The price: 32
	 * bytes of index a block, not 16. */
	uint64_t want = 4ull * n_blocks / KVPI_PIDX_SHARDS;
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
	/* Retired tables' callbacks still queued write to their shards: wait
	 * until the last has run (acquire: pairs with its release
	 * decrement).  Not urcu_bp_barrier: its own work items are invisible
	 * to TSan. */
	while (atomic_load_explicit(&pf->deferred, memory_order_acquire) != 0) {
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
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

uint32_t kvpi_pfx_index_lookup(struct kvpi_prefix *pf, uint32_t stream, const kvp_hash *key)
{
	uint64_t h = kvpi_pfx_index_hash(key, stream);
	/* acquire: pairs with the release store that published the table,
	 * so its slots as copied are seen. */
	struct kvpi_ptab *t = atomic_load_explicit(&shard_of(pf, h)->tab, memory_order_acquire);
	for (uint32_t i = (uint32_t)h & t->mask, k = 0; k <= t->mask; i = (i + 1) & t->mask, k++) {
		/* relaxed: the id is a hint, checked under the block's lock,
		 * which orders everything the match reads. */
		uint64_t w = atomic_load_explicit(&t->slot[i].w, memory_order_relaxed);
		if (w == 0)
			return KVPI_NO_ID;
		if (w != TOMB && HAS_TAG(w, h))
			return ID_OF(w);
	}
	return KVPI_NO_ID;
}

/* Put slot word @w, of a key hashed @h, into @t, which has no tombstones
 * and room (a rebuild). */
static void put_fresh(struct kvpi_ptab *t, uint64_t h, uint64_t w)
{
	uint32_t i = (uint32_t)h & t->mask;
	/* relaxed (all): the table is not published yet. */
	while (atomic_load_explicit(&t->slot[i].w, memory_order_relaxed))
		i = (i + 1) & t->mask;
	atomic_store_explicit(&t->slot[i].w, w, memory_order_relaxed);
}

/*
 * Copy @sh's keys to a table with four slots a key (at least the
 * shard's first size), publish it and retire the old one.  Shard mutex
 * held.  Returns the new table, or NULL (out of memory) with nothing done.
 */
static struct kvpi_ptab *rebuild(struct kvpi_prefix *pf, struct kvpi_pshard *sh,
                                 struct kvpi_ptab *old)
{
	uint32_t slots = sh->min_slots;
	while (slots < 4u * (sh->live + 1) && slots < MAX_SLOTS)
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
		/* relaxed (both): we are the only writer (shard mutex). */
		uint64_t ahead = atomic_load_explicit(&old->slot[(i + REBUILD_AHEAD) & old->mask].w,
		                                      memory_order_relaxed);
		if (ahead > TOMB) /* its side entry a few slots from now */
			__builtin_prefetch(kvpi_pfx_side(pf, ID_OF(ahead)));
		uint64_t w = atomic_load_explicit(&old->slot[i].w, memory_order_relaxed);
		if (w > TOMB) /* the key's hash from its block (top of file) */
			put_fresh(t, kvpi_pfx_pub_hash(kvpi_pfx_side(pf, ID_OF(w))), w);
	}
	sh->used = sh->live;
	/* release: a lookup that loads the table (acquire) sees its slots. */
	atomic_store_explicit(&sh->tab, t, memory_order_release);
	/* relaxed: the count reaches the callback through call_rcu's queue. */
	atomic_fetch_add_explicit(&pf->deferred, 1, memory_order_relaxed);
	kvpi_rcu_call(&old->rcu, tab_back);
	return t;
}

/*
 * Bring the home slot of hash @h into the cache (a hint; no effect else);
 * for a @writer also the slots on either side of it, which an add (probing
 * on) and a delete (the next slot, then the tombstones before) read.  Eight
 * slots share a line, so each neighbour is on another line one time in
 * eight.  (With four a line, one in four, those unprefetched loads were
 * half of kvpi_pfx_forget_many's samples on the lifecycle loop.)  A
 * neighbour on the home line costs a prefetch that hits.
 */
static void index_prefetch(struct kvpi_prefix *pf, uint64_t h, bool writer)
{
	/* acquire: as in kvpi_pfx_index_lookup (the table's mask is read). */
	struct kvpi_ptab *t = atomic_load_explicit(&shard_of(pf, h)->tab, memory_order_acquire);
	uint32_t i = (uint32_t)h & t->mask;
	if (!writer) {
		__builtin_prefetch(&t->slot[i]);
		return;
	}
	__builtin_prefetch(&t->slot[i], 1);
	__builtin_prefetch(&t->slot[(i + 1) & t->mask], 1);
	__builtin_prefetch(&t->slot[(i - 1) & t->mask], 1);
}

void kvpi_pfx_index_prefetch_key(struct kvpi_prefix *pf, uint32_t stream, const kvp_hash *key)
{
	index_prefetch(pf, kvpi_pfx_index_hash(key, stream), false);
}

/* Add block @id under hash @h to shard @sh (mutex held): KVP_OK, KVP_EEXIST
 * (another block has the key) or KVP_ENOMEM (the shard is full and could
 * not grow). */
static int add_locked(struct kvpi_prefix *pf, struct kvpi_pshard *sh, uint32_t id, uint64_t h)
{
	const struct kvpi_pside *e = kvpi_pfx_side(pf, id);
	/* relaxed: only writers store it, under this mutex. */
	struct kvpi_ptab *t = atomic_load_explicit(&sh->tab, memory_order_relaxed);
	bool full = false; /* no room for a new slot: only a takeover can be done */
	if (4ull * (sh->used + 1) > 3ull * (t->mask + 1)) {
		struct kvpi_ptab *nt = rebuild(pf, sh, t);
		if (nt)
			t = nt;
		else if (sh->used + 2 > t->mask + 1) /* keep one empty slot */
			full = true;
	}
	uint32_t i = (uint32_t)h & t->mask, put = UINT32_MAX;
	for (;; i = (i + 1) & t->mask) {
		/* relaxed: we are the only writer.  A block in a slot keeps its
		 * key until its delete, which needs this mutex: reading it
		 * here races with nothing. */
		uint64_t w = atomic_load_explicit(&t->slot[i].w, memory_order_relaxed);
		if (w == 0)
			break;
		if (w == TOMB) {
			if (put == UINT32_MAX)
				put = i;
		} else if (HAS_TAG(w, h) && same_key(pf, ID_OF(w), e)) {
			/* relaxed: the claim's CAS is not ours to order with;
			 * its undo (kvpi_pfx_unclaim) stores under this mutex,
			 * which orders that store before this load. */
			uint64_t st = atomic_load_explicit(&kvpi_bt_block(pf->bt, ID_OF(w))->state,
			                                   memory_order_relaxed);
			if (!(st & KVPI_ST_EVICTING))
				return KVP_EEXIST;
			/* Taking over (above); relaxed as the store below. */
			atomic_store_explicit(&t->slot[i].w, W_OF(h, id), memory_order_relaxed);
			return KVP_OK;
		}
	}
	if (full)
		return KVP_ENOMEM;
	if (put == UINT32_MAX) {
		put = i;
		sh->used++;
	}
	sh->live++;
	/* relaxed: a lookup's result is a hint, and the match that follows
	 * it reads the key under the block's lock. */
	atomic_store_explicit(&t->slot[put].w, W_OF(h, id), memory_order_relaxed);
	return KVP_OK;
}

/*
 * Order the @n (at most KVPI_PIDX_BATCH) hashes @h by shard, a counting
 * sort: order[start[k] .. start[k + 1]) are the positions of shard k's, in
 * their order in @h.
 */
static void by_shard(const uint64_t *h, uint32_t n, uint32_t *order, uint32_t *start)
{
	uint32_t fill[KVPI_PIDX_SHARDS];
	memset(start, 0, (KVPI_PIDX_SHARDS + 1) * sizeof(*start));
	for (uint32_t i = 0; i < n; i++)
		start[(h[i] >> SHARD_SHIFT) + 1]++;
	for (uint32_t k = 0; k < KVPI_PIDX_SHARDS; k++)
		start[k + 1] += start[k];
	memcpy(fill, start, sizeof(fill));
	for (uint32_t i = 0; i < n; i++)
		order[fill[h[i] >> SHARD_SHIFT]++] = i;
}

/*
 * Call @fn(@pf, shard, x, @arg) for every x below @n (at most
 * KVPI_PIDX_BATCH), shard by shard, x's shard picked by @h[x], each shard's
 * mutex held once; within a shard in the order of @h.  Inlined into its two
 * callers, @fn with it.
 */
static inline __attribute__((always_inline)) void
per_shard(struct kvpi_prefix *pf, const uint64_t *h, uint32_t n,
          void (*fn)(struct kvpi_prefix *pf, struct kvpi_pshard *sh, uint32_t x, void *arg),
          void *arg)
{
	uint32_t order[KVPI_PIDX_BATCH], start[KVPI_PIDX_SHARDS + 1];
	by_shard(h, n, order, start);
	for (uint32_t k = 0; k < KVPI_PIDX_SHARDS; k++) {
		if (start[k] == start[k + 1])
			continue;
		struct kvpi_pshard *sh = &pf->idx[k];
		/* Spin first: a holder keeps it for one batch's keys of this
		 * shard, a microsecond or so, and threads publishing or
		 * evicting at once meet on shards often, and sleeping at once
		 * costs a futex sleep and wake-up (bench/lifecycle, prefix:
		 * 126-128 against 120-121 CPU ns a block at two threads,
		 * 136-139 against 123-129 at eight). */
		kvpi_mutex_lock_spin(&sh->lock);
		for (uint32_t j = start[k]; j < start[k + 1]; j++)
			fn(pf, sh, order[j], arg);
		pthread_mutex_unlock(&sh->lock);
	}
}

struct add_arg {
	const uint32_t *ids;
	const uint64_t *h;
	int *rc;
};

static inline __attribute__((always_inline)) void
add_one(struct kvpi_prefix *pf, struct kvpi_pshard *sh, uint32_t x, void *arg)
{
	struct add_arg *a = arg;
	a->rc[x] = add_locked(pf, sh, a->ids[x], a->h[x]);
}

void kvpi_pfx_index_add_many(struct kvpi_prefix *pf, const uint32_t *ids, const uint64_t *h,
                             uint32_t n, int *rc)
{
	struct add_arg a = {ids, h, rc};
	for (uint32_t i = 0; i < n; i++)
		index_prefetch(pf, h[i], true);
	per_shard(pf, h, n, add_one, &a);
}

/* The slot of @t that holds block @id, added under hash @h, or -1 (not in
 * the index).  Shard mutex held. */
static int64_t slot_of_id(const struct kvpi_ptab *t, uint32_t id, uint64_t h)
{
	/* relaxed (all): slots change only under the mutex we hold. */
	for (uint32_t i = (uint32_t)h & t->mask, k = 0; k <= t->mask; i = (i + 1) & t->mask, k++) {
		uint64_t w = atomic_load_explicit(&t->slot[i].w, memory_order_relaxed);
		if (w == 0)
			return -1;
		if (HAS_ID(w, id))
			return i;
	}
	return -1;
}

bool kvpi_pfx_index_recache(struct kvpi_prefix *pf, uint32_t id)
{
	uint64_t h = kvpi_pfx_pub_hash(kvpi_pfx_side(pf, id));
	struct kvpi_pshard *sh = shard_of(pf, h);
	pthread_mutex_lock(&sh->lock);
	/* relaxed: only writers store it, under this mutex. */
	bool kept = slot_of_id(atomic_load_explicit(&sh->tab, memory_order_relaxed), id, h) >= 0;
	if (kept) {
		struct kvpi_block *b = kvpi_bt_block(pf->bt, id);
		/* relaxed load: ours (EVICTING).  release store: a matcher
		 * that locks it (acquire) sees the list fields and the
		 * contents as before. */
		uint64_t st = atomic_load_explicit(&b->state, memory_order_relaxed);
		atomic_store_explicit(&b->state, (st & ~KVPI_ST_EVICTING) | KVPI_ST_CACHED,
		                      memory_order_release);
	}
	pthread_mutex_unlock(&sh->lock);
	return kept;
}

/* Delete block @id, added under hash @h, from @t, @sh's table.  Shard mutex
 * held. */
static void del_locked(struct kvpi_pshard *sh, struct kvpi_ptab *t, uint32_t id, uint64_t h)
{
	int64_t at = slot_of_id(t, id, h);
	if (at < 0)
		return; /* not in the index: nothing to undo */
	uint32_t i = (uint32_t)at;
	sh->live--;
	/* relaxed (all): we are the only writer, and lookups' results are
	 * hints (add_locked).  An empty slot ends every probe run through it:
	 * only when the next slot is empty may this one, and the tombstones
	 * just before it, become empty. */
	if (atomic_load_explicit(&t->slot[(i + 1) & t->mask].w, memory_order_relaxed)) {
		atomic_store_explicit(&t->slot[i].w, TOMB, memory_order_relaxed);
		return;
	}
	for (;;) {
		atomic_store_explicit(&t->slot[i].w, 0, memory_order_relaxed);
		sh->used--;
		i = (i - 1) & t->mask;
		if (atomic_load_explicit(&t->slot[i].w, memory_order_relaxed) != TOMB)
			return;
	}
}

#define FORGET_AHEAD 8u

/*
 * Forget the keys of a chunk of at most KVPI_PIDX_BATCH blocks: sorted by
 * shard, each shard's deleted under one hold of its mutex.  An eviction of
 * a prompt's worth of blocks takes each shard's mutex once, not once a
 * block.
 */
struct forget_arg {
	const uint32_t *ids;
	const uint64_t *h;
};

static inline __attribute__((always_inline)) void
forget_one(struct kvpi_prefix *pf, struct kvpi_pshard *sh, uint32_t x, void *arg)
{
	struct forget_arg *a = arg;
	/* relaxed: only writers store it, under this mutex. */
	del_locked(sh, atomic_load_explicit(&sh->tab, memory_order_relaxed), a->ids[x], a->h[x]);
	kvpi_pfx_side(pf, a->ids[x])->pub = false;
}

static void forget_chunk(struct kvpi_prefix *pf, const uint32_t *ids, uint32_t n)
{
	uint32_t pub[KVPI_PIDX_BATCH];
	uint64_t h[KVPI_PIDX_BATCH];
	uint32_t m = 0;
	for (uint32_t i = 0; i < n; i++) {
		if (i + FORGET_AHEAD < n)
			__builtin_prefetch(kvpi_pfx_side(pf, ids[i + FORGET_AHEAD]));
		const struct kvpi_pside *e = kvpi_pfx_side(pf, ids[i]);
		if (!e->pub)
			continue;
		pub[m] = ids[i];
		h[m] = kvpi_pfx_pub_hash(e);
		index_prefetch(pf, h[m], true);
		m++;
	}
	struct forget_arg a = {pub, h};
	per_shard(pf, h, m, forget_one, &a);
}

void kvpi_pfx_forget_many(struct kvpi_prefix *pf, const uint32_t *ids, uint32_t n)
{
	for (uint32_t i = 0; i < n; i += KVPI_PIDX_BATCH)
		forget_chunk(pf, ids + i, n - i < KVPI_PIDX_BATCH ? n - i : KVPI_PIDX_BATCH);
}

void kvpi_pfx_index_each(struct kvpi_prefix *pf, void (*fn)(uint32_t id, void *arg), void *arg)
{
	/* Slots never move inside a table, so a key present throughout is
	 * met once, whatever @fn deletes; a rebuild meanwhile leaves this
	 * table as it was (only the new one changes). */
	for (uint32_t s = 0; s < KVPI_PIDX_SHARDS; s++) {
		/* acquire: as in kvpi_pfx_index_lookup. */
		struct kvpi_ptab *t = atomic_load_explicit(&pf->idx[s].tab, memory_order_acquire);
		for (uint32_t i = 0; i <= t->mask; i++) {
			/* relaxed: @fn checks the block under its lock. */
			uint64_t w = atomic_load_explicit(&t->slot[i].w, memory_order_relaxed);
			if (w > TOMB)
				fn(ID_OF(w), arg);
		}
	}
}
