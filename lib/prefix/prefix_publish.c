/*
 * lib/prefix/prefix_publish.c - kvp_prefix_publish and kvp_prefix_publish_many.
 *
 * Owns: publishing held full blocks under keys.  A block is locked (one CAS
 * on its state word, from a full, unpublished, non-raw state of the ref's
 * generation), its key written into its side entry, and the block added
 * to the key index; then it is unlocked, PUBLISHED if the key was new.
 *
 * Blocks are published in batches of KVPI_PIDX_BATCH: each is locked and
 * given its key, then the batch is added to the index shard by shard, each
 * shard's mutex taken once (kvpi_pfx_index_add_many), then every block is
 * unlocked.  One mutex hold per key made the shards' lines move between
 * cores on every publish (docs/PREFIX.md).  So a batch holds many block
 * locks at once.  It never waits for a block lock while it holds one: it
 * tries the next block's lock, and when another thread holds it, the batch
 * is finished first.  While it holds block locks it waits only for index
 * shard mutexes, whose holders wait for nothing.  A matcher that found a
 * block of the batch in the index waits for its lock, holding its owner's
 * shard mutex.  A batch may hold an owner shard mutex too (a private
 * block's, below), but it waits for one only with no block lock held.  So
 * no wait closes a cycle.
 *
 * A private block (lib/prefix/prefix_internal.h, "Private blocks") is not
 * locked: the call holds its owner's shard mutex instead, which every other
 * writer of the block's word holds too.  Its key is written, the batch adds
 * it to the index, and then one release store makes it published, and
 * private still: its owner is its only holder until another owner's match
 * makes it ordinary (lib/prefix/prefix.c), so the owner's release caches
 * it with no CAS (lib/prefix/prefix_free.c).  The call keeps the mutex of
 * the last private block's owner until it ends or meets a private block of
 * an owner in another shard; before it waits for a mutex it finishes the
 * batch and leaves its read-side section.  On the
 * serving loop every block of a request has one owner, so a call takes
 * one mutex and no block lock.  A block given twice in one call is judged
 * the second time after the batch holding the first is flushed, as one by
 * one (pub_pending in the side entry marks a private block in the batch).
 * The price: owners of that shard wait for a publish's batch (up to 256
 * index adds, a table rebuild among them), as they wait for an
 * allocation's eviction.
 *
 * May call: the key index (lib/prefix/prefix_index.c) and the block lock
 * helpers (lib/prefix/prefix_internal.h).
 */
#include "lib/prefix/prefix_internal.h"

/* Blocks published in one read-side section: a long batch lets grace
 * periods (and so retired index tables) through between sections. */
#define PUBLISH_SECTION 256u
_Static_assert(PUBLISH_SECTION % KVPI_PIDX_BATCH == 0, "a section ends a batch");
/* How far ahead a batch publish brings blocks into the cache (the index
 * slots are fetched when the batch is added: kvpi_pfx_index_add_many). */
#define PUBLISH_AHEAD 8u

struct pub_arg {
	uint32_t gen, block_size;
};

/* A state publish may lock: the ref's hand-out, in use, full, not raw, not
 * published yet. */
static bool publish_ok(uint64_t st, const void *arg)
{
	const struct pub_arg *a = arg;
	return kvpi_st_gen(st) == a->gen && !(st & KVPI_ST_RETIRED) && (st & KVPI_ST_IN_USE) &&
	       !(st & (KVPI_ST_RAW | KVPI_ST_PUBLISHED)) && kvpi_st_used(st) == a->block_size;
}

/* A state the lock path may lock: publish_ok, and not private (a private
 * block is published under its owner's shard mutex, never locked; a ref
 * of a private hand-out always finds it private, so this refuses only
 * stale refs). */
static bool publish_lock_ok(uint64_t st, const void *arg)
{
	return !(st & KVPI_ST_PRIVATE) && publish_ok(st, arg);
}

/* Locked blocks waiting for their index adds. */
struct pub_batch {
	uint32_t n;
	size_t at[KVPI_PIDX_BATCH]; /* the block's position in the call */
	uint32_t id[KVPI_PIDX_BATCH];
	uint64_t st[KVPI_PIDX_BATCH]; /* the state locked, or the private state */
	uint64_t h[KVPI_PIDX_BATCH];
	int rc[KVPI_PIDX_BATCH];
	bool priv[KVPI_PIDX_BATCH]; /* private: not locked, ours under held */
};

/* What one call has done so far. */
struct pub_call {
	int *status;
	size_t done;
	int rc;
	struct kvpi_oshard *held; /* the owner shard mutex held, or NULL */
	kvp_owner held_owner;     /* an owner of that shard (when held) */
};

/* Add the batch's blocks to the index, then unlock each, published when
 * its key was new; record each block's result. */
static void pub_flush(struct kvp_pool *p, struct pub_batch *pb, struct pub_call *c)
{
	struct kvpi_prefix *pf = p->prefix;
	if (pb->n == 0)
		return;
	kvpi_pfx_index_add_many(pf, pb->id, pb->h, pb->n, pb->rc);
	for (uint32_t i = 0; i < pb->n; i++) {
		uint64_t st = pb->st[i];
		bool ok = pb->rc[i] == KVP_OK;
		if (ok) {
			kvpi_pfx_side(pf, pb->id[i])->pub = true;
			/* A private block stays private (its publisher is its
			 * one holder); a locked one had PRIVATE clear. */
			st |= KVPI_ST_PUBLISHED;
			c->done++;
		} else if (pb->rc[i] == KVP_ENOMEM) {
			c->rc = KVP_ENOMEM;
		}
		if (pb->priv[i])
			kvpi_pfx_side(pf, pb->id[i])->pub_pending = false;
		/* A private block refused stays as it was: nothing to store.
		 * One added becomes published with this store, as a locked
		 * one does with its unlock.  Until then a matcher that finds
		 * it in the index sees it unpublished and refuses it without
		 * a CAS, so the plain store races with no writer. */
		if (ok || !pb->priv[i])
			kvpi_pfx_unlock(kvpi_bt_block(&p->bt, pb->id[i]), st);
		if (c->status)
			c->status[pb->at[i]] = pb->rc[i];
	}
	pb->n = 0;
}

/*
 * Whether block @b is private (lib/prefix/prefix_internal.h, "Private
 * blocks"), with its owner's shard mutex now held in @c; *@st gets its
 * state, which no other thread changes while we hold that mutex.  A
 * private block's owner is the one stamped with it, and every writer of
 * its word holds that owner's shard mutex; so once we hold the mutex of
 * the owner read after the state, and the state and owner read again are
 * the same, the block stays as read.  Switching mutexes finishes the
 * batch first (no block lock is held while an owner mutex is waited for)
 * and leaves the read-side section (an owner mutex holder may wait for a
 * grace period).  Returns false, with nothing changed, when the block is
 * not private: the caller locks it.
 */
static bool pub_private(struct kvp_pool *p, struct pub_batch *pb, struct pub_call *c,
                        struct kvpi_block *b, uint32_t id, uint64_t *st)
{
	/* acquire: the state as its last writer (the stamp, or the owner
	 * under its mutex) left it, and the owner word the stamp wrote. */
	uint64_t s0 = atomic_load_explicit(&b->state, memory_order_acquire);
	while (s0 & KVPI_ST_PRIVATE) {
		/* acquire: checked again below under the owner's mutex; and
		 * the re-read of the state below must not be satisfied before
		 * it (an owner word from a later hand-out then comes with that
		 * hand-out's state, as in set_used_exclusive). */
		kvp_owner o = atomic_load_explicit(&b->owner, memory_order_acquire);
		/* The same owner as the last block's, as on the serving
		 * loop: the same shard, no hash. */
		struct kvpi_oshard *sh =
		    c->held && o == c->held_owner ? c->held : kvpi_owners_shard(&p->owners, o);
		c->held_owner = o;
		if (sh != c->held) {
			pub_flush(p, pb, c);
			kvpi_rcu_read_unlock();
			if (c->held)
				pthread_mutex_unlock(&c->held->lock);
			pthread_mutex_lock(&sh->lock);
			c->held = sh;
			kvpi_rcu_read_lock();
		}
		/* acquire: as above; under the mutex now. */
		uint64_t s1 = atomic_load_explicit(&b->state, memory_order_acquire);
		/* relaxed: after the acquire load of the state above. */
		if (s1 == s0 && atomic_load_explicit(&b->owner, memory_order_relaxed) == o) {
			struct kvpi_pside *e = kvpi_pfx_side(p->prefix, id);
			if (!e->pub_pending) {
				*st = s1;
				return true;
			}
			/* The same block twice in one batch: flush the batch, so
			 * the second finds it published (or refused) and is
			 * judged as kvp_prefix_publish would judge it. */
			pub_flush(p, pb, c);
			s1 = atomic_load_explicit(&b->state, memory_order_acquire);
		}
		s0 = s1;
	}
	return false;
}

/*
 * Lock @ref's block and give it @key, into the batch (its result comes
 * with the batch's flush); or record why it cannot be published.  In a
 * read-side section.  @n_ids is kvp_pool_n_ids read at the call's start:
 * ids only ever come into being, so one below it stays made.
 */
static void pub_take(struct kvp_pool *p, struct pub_batch *pb, struct pub_call *c, size_t at,
                     kvp_ref ref, const kvp_hash *key, uint32_t n_ids)
{
	uint32_t id = KVP_REF_ID(ref);
	int rc = KVP_ENOENT;
	if (id < n_ids) {
		struct kvpi_block *b = kvpi_bt_block(&p->bt, id);
		struct pub_arg arg = {KVP_REF_GEN(ref), p->block_size};
		uint64_t seen = 0, st;
		bool priv = pub_private(p, pb, c, b, id, &st);
		if (priv) {
			if (!publish_ok(st, &arg)) {
				seen = st;
				st = 0;
			}
		} else {
			/* Never wait for a lock while holding the batch's. */
			st = pb->n ? kvpi_pfx_trylock(b, publish_lock_ok, &arg, &seen)
			           : kvpi_pfx_lock(b, publish_lock_ok, &arg, &seen);
			if (st == KVPI_PFX_BUSY) {
				pub_flush(p, pb, c);
				st = kvpi_pfx_lock(b, publish_lock_ok, &arg, &seen);
			}
		}
		if (st) {
			/* The key first: the index's uniqueness check reads
			 * it from here.  Matchers that find the id wait for
			 * our lock (or see a private block unpublished),
			 * then check pub. */
			struct kvpi_pside *e = kvpi_pfx_side(p->prefix, id);
			e->pub_key = *key;
			e->pub_stream = (uint8_t)kvpi_st_stream(st);
			uint32_t k = pb->n++;
			pb->at[k] = at;
			pb->id[k] = id;
			pb->st[k] = st;
			pb->priv[k] = priv;
			if (priv)
				e->pub_pending = true; /* under the owner's mutex */
			pb->h[k] = kvpi_pfx_pub_hash(e);
			if (pb->n == KVPI_PIDX_BATCH)
				pub_flush(p, pb, c);
			return;
		}
		rc = kvpi_st_gen(seen) != arg.gen || (seen & KVPI_ST_RETIRED) ? KVP_ENOENT
		                                                              : KVP_EINVAL;
	}
	if (c->status)
		c->status[at] = rc;
}

int kvp_prefix_publish(kvp_pool *p, kvp_ref ref, kvp_hash key)
{
	int status = KVP_EINVAL;
	if (!p || !p->prefix)
		return KVP_EINVAL;
	int rc = kvp_prefix_publish_many(p, &ref, &key, 1, &status, NULL);
	return rc == KVP_OK ? status : rc;
}

int kvp_prefix_publish_many(kvp_pool *p, const kvp_ref *refs, const kvp_hash *keys, size_t n,
                            int *status, size_t *n_published)
{
	if (n_published)
		*n_published = 0;
	if (!p || !p->prefix || (n && (!refs || !keys)))
		return KVP_EINVAL;
	struct kvpi_tslot *s = kvpi_tslot_get(p);
	uint32_t n_ids = kvp_pool_n_ids(p);
	struct pub_batch pb;
	struct pub_call c = {status, 0, KVP_OK, NULL, 0};
	pb.n = 0;
	for (size_t i = 0; i < n; i++) {
		if (i % PUBLISH_SECTION == 0) {
			if (i) {
				pub_flush(p, &pb, &c);
				kvpi_rcu_read_unlock();
			}
			kvpi_rcu_read_lock();
		}
		if (i + PUBLISH_AHEAD < n && KVP_REF_ID(refs[i + PUBLISH_AHEAD]) < n_ids)
			kvpi_pfx_prefetch(p, KVP_REF_ID(refs[i + PUBLISH_AHEAD]));
		pub_take(p, &pb, &c, i, refs[i], &keys[i], n_ids);
	}
	if (n) {
		pub_flush(p, &pb, &c);
		kvpi_rcu_read_unlock();
	}
	if (c.held)
		pthread_mutex_unlock(&c.held->lock);
	kvpi_tslot_put(p, s);
	if (n_published)
		*n_published = c.done;
	return c.rc;
}
