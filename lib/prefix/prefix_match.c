/*
 * lib/prefix/prefix_match.c - kvp_prefix_match.
 *
 * Matching: each key is looked up in the index with no lock; the block it
 * names is then locked (one CAS on its state word, from a state that is
 * published, in use or cached, and of the right format) and checked (still
 * published under that very key).  An in-use block gains a hold; a cached
 * one becomes in use with a new generation, left on its LRU list (marked
 * stale).  An evictor's CAS CACHED -> EVICTING may beat the lock's CAS
 * (then the key is a miss).  A section of the call holds the owner's shard
 * mutex, so the owner's hold array takes the matched blocks in order.
 *
 * A published block still private to its publisher (its only holder:
 * lib/prefix/prefix_internal.h, "Private blocks") is made ordinary before
 * it is locked: PRIVATE cleared with one store under the publisher's shard
 * mutex, once its key, read under that mutex, is the one looked up (the
 * index compares tags of hashes; another key of the same tag is a miss and
 * leaves the block private).  That mutex is the matcher's own when the
 * publisher is in its shard; else it is tried, never waited for, since the
 * matcher holds its own.  If it is busy the section ends there; the match
 * waits for that mutex with no lock held and outside any read-side section,
 * makes the block ordinary, and goes on in a new section from that key (or,
 * when the block turns out to hold another key, ends there: a miss).  So
 * a call is one section but for such waits, and the holds of each section
 * are taken under its own mutex hold: a kvp_free_all of the same owner
 * racing the call may end those of the sections before it
 * (kvpool/prefix.h).
 */
#include "lib/prefix/prefix_internal.h"

/* Keys a match looks up before it takes their holds. */
#define MATCH_CHUNK 16u

/* A state a match may lock: published, in use or cached (not being
 * evicted), not private, of format *@arg. */
static bool match_ok(uint64_t st, const void *arg)
{
	return (st & KVPI_ST_PUBLISHED) && (st & (KVPI_ST_IN_USE | KVPI_ST_CACHED)) &&
	       !(st & (KVPI_ST_EVICTING | KVPI_ST_PRIVATE)) &&
	       kvpi_st_format(st) == *(const uint32_t *)arg;
}

/* A published block its publisher still holds alone, private: its word is
 * written only under that owner's shard mutex (no CAS). */
static bool private_published(uint64_t st)
{
	const uint64_t m = KVPI_ST_PRIVATE | KVPI_ST_PUBLISHED | KVPI_ST_IN_USE;
	return (st & m) == m;
}

/* Whether @e is published under (@tag, @key): under the block's lock, or
 * the owner's shard mutex of a private block. */
static bool same_key(const struct kvpi_pside *e, uint32_t tag, const kvp_hash *key)
{
	return e->pub && e->pub_stream == tag && e->pub_key.lo == key->lo &&
	       e->pub_key.hi == key->hi;
}

/* What unprivate_try did. */
enum unpriv {
	UP_AGAIN, /* cleared PRIVATE, or the state moved: read it again */
	UP_MISS,  /* the block is its owner's, published under another key: left private */
	UP_BUSY   /* the owner's shard mutex is busy: nothing changed */
};

/*
 * Make block @b (side entry @e), seen private and published in state
 * @seen, an ordinary published block (PRIVATE clear), so that a match for
 * (@tag, @key) can lock it.  Every writer of a private word, and of a
 * private block's key, holds its owner's shard mutex; so do we, here:
 * @held (the matcher's own, held) when the owner is in that shard, else
 * the owner's shard's mutex if it is free at once.  With it held, the same
 * state and owner read again are that owner's hand-out, and its key is
 * checked before anything changes: the index compares only a tag of each
 * key's hash, and a block published under another key of the same tag
 * stays private (UP_MISS).  Else one release store clears the bit (it
 * never comes back in a generation): UP_AGAIN, as when the state moved.
 * UP_BUSY, with nothing changed, when the owner's shard mutex is busy:
 * the match must not wait for it while it holds its own (two owner
 * mutexes are never waited for together).
 */
static enum unpriv unprivate_try(struct kvp_pool *p, struct kvpi_oshard *held, struct kvpi_block *b,
                                 const struct kvpi_pside *e, uint32_t tag, const kvp_hash *key,
                                 uint64_t seen)
{
	/* acquire: as in pub_private (lib/prefix/prefix_publish.c). */
	kvp_owner o = atomic_load_explicit(&b->owner, memory_order_acquire);
	struct kvpi_oshard *sh = kvpi_owners_shard(&p->owners, o);
	if (sh != held && pthread_mutex_trylock(&sh->lock) != 0)
		return UP_BUSY;
	enum unpriv u = UP_AGAIN;
	/* acquire: the state as its last writer (under this mutex) left it. */
	uint64_t st = atomic_load_explicit(&b->state, memory_order_acquire);
	/* relaxed: after the acquire load of the state. */
	if (st == seen && atomic_load_explicit(&b->owner, memory_order_relaxed) == o) {
		if (!same_key(e, tag, key))
			u = UP_MISS;
		else
			/* release: the lock path's CAS (acquire) and whoever
			 * holds this mutex next see the publisher's writes. */
			atomic_store_explicit(&b->state, st & ~KVPI_ST_PRIVATE,
			                      memory_order_release);
	}
	if (sh != held)
		pthread_mutex_unlock(&sh->lock);
	return u;
}

/*
 * unprivate_try for a match that holds no lock and is outside any
 * read-side section: it waits for the owner's shard mutex.  Returns false
 * once block @id is no longer private and published; true when it is so
 * under another key than (@tag, @key), which is then a miss (the caller
 * ends the match there rather than meet the block again).
 */
static bool unprivate_wait(struct kvp_pool *p, uint32_t id, uint32_t tag, const kvp_hash *key)
{
	struct kvpi_block *b = kvpi_bt_block(&p->bt, id);
	const struct kvpi_pside *e = kvpi_pfx_side(p->prefix, id);
	for (;;) {
		/* acquire: as in unprivate_try. */
		uint64_t st = atomic_load_explicit(&b->state, memory_order_acquire);
		if (!private_published(st))
			return false;
		kvp_owner o = atomic_load_explicit(&b->owner, memory_order_acquire);
		struct kvpi_oshard *sh = kvpi_owners_shard(&p->owners, o);
		pthread_mutex_lock(&sh->lock);
		enum unpriv u = unprivate_try(p, sh, b, e, tag, key, st);
		pthread_mutex_unlock(&sh->lock);
		if (u == UP_MISS)
			return true;
	}
}

enum hold { H_MISS, H_TAKEN, H_BUSY };

/* Whether block @b, seen private in state @seen, is @owner's hand-out.
 * The caller holds @owner's shard mutex, which every writer of the word
 * of @owner's private block holds: read after the state, an owner word of
 * @owner, with the state unchanged, is that hand-out (as in pub_private,
 * lib/prefix/prefix_publish.c). */
static bool own_private(struct kvpi_block *b, kvp_owner owner, uint64_t seen)
{
	/* acquire: the re-read of the state must not be satisfied before it. */
	if (atomic_load_explicit(&b->owner, memory_order_acquire) != owner)
		return false;
	/* relaxed: after the acquire load above. */
	return atomic_load_explicit(&b->state, memory_order_relaxed) == seen;
}

/*
 * Take @owner's hold on block @id, which the index gave for (@tag, @key),
 * if it is still published under that key in @format.  H_MISS for a miss;
 * H_BUSY when the block is private to another owner whose shard mutex is
 * busy (the caller ends its section, waits: unprivate_wait, and goes on).
 * Owner shard mutex @sh held.
 */
static enum hold take_hold(struct kvp_pool *p, struct kvpi_oshard *sh, struct kvpi_orec *r,
                           uint32_t id, uint32_t tag, const kvp_hash *key, uint32_t format,
                           kvp_owner owner, kvp_ref *out, int64_t *revived)
{
	struct kvpi_prefix *pf = p->prefix;
	struct kvpi_block *b = kvpi_bt_block(&p->bt, id);
	struct kvpi_pside *e = kvpi_pfx_side(pf, id);
	uint64_t seen, st;

	/* The one CAS that settles a race with an evictor or a release.  A
	 * private block is made ordinary first (its publisher's releases
	 * then lock it too), unless it is @owner's own. */
	while (!(st = kvpi_pfx_lock(b, match_ok, &format, &seen))) {
		if (!private_published(seen) || kvpi_st_format(seen) != format)
			return H_MISS;
		if (own_private(b, owner, seen)) {
			/* Held already: no second hold, and it stays private.
			 * Its key fields change only under our mutex. */
			if (!same_key(e, tag, key))
				return H_MISS;
			*out = KVP_MAKE_REF(id, kvpi_st_gen(seen));
			return H_TAKEN;
		}
		enum unpriv u = unprivate_try(p, sh, b, e, tag, key, seen);
		if (u != UP_AGAIN)
			return u == UP_BUSY ? H_BUSY : H_MISS;
	}
	/* Evicted and published again meanwhile, or another key of the
	 * same index tag: a miss. */
	if (!same_key(e, tag, key)) {
		kvpi_pfx_unlock(b, st);
		return H_MISS;
	}
	if (st & KVPI_ST_IN_USE) {
		/* relaxed (holders, owner_xor, owner): under the lock. */
		uint32_t h = atomic_load_explicit(&e->holders, memory_order_relaxed);
		bool mine = h == 1 ? atomic_load_explicit(&b->owner, memory_order_relaxed) == owner
		                   : kvpi_pfx_ofind_pos(pf, r, id) >= 0;
		if (!mine) {
			kvpi_pfx_bump(e);
			atomic_store_explicit(&e->holders, h + 1, memory_order_relaxed);
			atomic_store_explicit(
			    &e->owner_xor,
			    atomic_load_explicit(&e->owner_xor, memory_order_relaxed) ^ owner,
			    memory_order_relaxed);
			kvpi_pfx_oappend(pf, r, id);
		}
		kvpi_pfx_unlock(b, st);
		*out = KVP_MAKE_REF(id, kvpi_st_gen(st));
		return H_TAKEN;
	}
	/* Cached: revive it with a new generation, left where it is on its
	 * LRU list (an evictor that meets it moves or drops it). */
	uint32_t gen = kvpi_st_gen(st) + 1;
	if (gen == 0)
		gen = 1;
	kvpi_pfx_bump(e);
	/* relaxed: under the lock. */
	atomic_store_explicit(&e->holders, 1, memory_order_relaxed);
	atomic_store_explicit(&e->owner_xor, owner, memory_order_relaxed);
	atomic_store_explicit(&b->owner, owner, memory_order_relaxed);
	int si = kvpi_pfx_si(p, st);
	if (kvpi_pfx_flag(&e->listed))
		kvpi_pfx_set_flag(&e->stale, true);
	revived[si]++;
	kvpi_pfx_oappend(pf, r, id);
	kvpi_pfx_unlock(b, kvpi_st_make(gen, p->block_size,
	                                KVPI_ST_IN_USE | KVPI_ST_EVER | KVPI_ST_PUBLISHED,
	                                kvpi_st_stream(st), format));
	/* The cached count drops by *@revived when the call ends, after the
	 * blocks stopped being available: the count never runs low. */
	*out = KVP_MAKE_REF(id, gen);
	return H_TAKEN;
}

/* What one kvp_prefix_match call is doing. */
struct match_call {
	kvp_owner owner;
	uint32_t tag, format;
	const kvp_hash *keys;
	size_t n_keys;
	kvp_ref *refs;
	size_t i;      /* keys matched so far */
	uint32_t busy; /* a busy private block a section ended on (key i), or KVPI_NO_ID */
};

/*
 * One section of a match: from key c->i on, under @sh's mutex and in a
 * read-side section, until a miss, the last key, or a private block whose
 * owner's shard mutex is busy (c->busy).  KVP_OK or KVP_ENOMEM.
 */
static int match_section(struct kvp_pool *p, struct kvpi_tslot *s, struct kvpi_oshard *sh,
                         struct match_call *c)
{
	struct kvpi_prefix *pf = p->prefix;
	int64_t revived[2] = {0, 0};
	int rc = KVP_OK;
	kvpi_rcu_read_lock();
	pthread_mutex_lock(&sh->lock);
	bool made;
	struct kvpi_orec *r = kvpi_pfx_oget(p, s, sh, c->owner, &made);
	if (!r || kvpi_pfx_oreserve(p, s, r, (uint32_t)(c->n_keys - c->i)) != 0) {
		rc = KVP_ENOMEM;
		goto out;
	}
	/* In chunks: the chunk's home slots are prefetched, then its
	 * lookups run (the blocks' lines are fetched meanwhile), then the
	 * holds in order, up to the first miss.  The prefetch pass puts
	 * the chunk's slot misses in flight together: with it, the
	 * lifecycle benchmark's prefix loop at one thread spent 8.0-9.2 ms
	 * of a run in kvp_prefix_match against 10.0-12.5 without (three
	 * alternating runs each, the benchmark built with a timer around
	 * each call of its loop). */
	while (c->i < c->n_keys) {
		uint32_t ids[MATCH_CHUNK];
		size_t i = c->i, n = c->n_keys - i < MATCH_CHUNK ? c->n_keys - i : MATCH_CHUNK;
		size_t found = 0, j = 0;
		enum hold h = H_TAKEN;
		for (size_t k = 0; k < n; k++)
			kvpi_pfx_index_prefetch_key(pf, c->tag, &c->keys[i + k]);
		for (; found < n; found++) {
			ids[found] = kvpi_pfx_index_lookup(pf, c->tag, &c->keys[i + found]);
			if (ids[found] == KVPI_NO_ID)
				break;
			kvpi_pfx_prefetch(p, ids[found]);
		}
		while (j < found &&
		       (h = take_hold(p, sh, r, ids[j], c->tag, &c->keys[i + j], c->format,
		                      c->owner, &c->refs[i + j], revived)) == H_TAKEN)
			j++;
		c->i = i + j;
		if (h == H_BUSY)
			c->busy = ids[j];
		if (j < n)
			break;
	}
out:
	if (r && kvpi_orec_count(r) == 0 && made)
		kvpi_pfx_oremove(p, s, sh, r);
	pthread_mutex_unlock(&sh->lock);
	/* One change of the shared cached count a section, not one a revived
	 * block: with several threads matching, a per-block atomic add moved
	 * the counter's line between the cores for every hit.  Meanwhile the
	 * count is above the blocks cached and unheld, which the exhaustion
	 * decision allows (an allocation that counts them looks again). */
	kvpi_pfx_count_one(pf, 0, -revived[0]);
	kvpi_pfx_count_one(pf, 1, -revived[1]);
	uint64_t nrev = (uint64_t)(revived[0] + revived[1]);
	kvpi_ctr_add(s, KVPI_C_ALLOCS, nrev);
	kvpi_ctr_add(s, KVPI_C_REUSED, nrev);
	if (nrev)
		kvpi_account_in_use(p, s, (int64_t)nrev);
	kvpi_rcu_read_unlock();
	return rc;
}

int kvp_prefix_match(kvp_pool *p, kvp_stream stream, kvp_format format, const kvp_hash *keys,
                     size_t n_keys, kvp_owner owner, kvp_ref *refs, size_t refs_cap,
                     size_t *n_matched)
{
	if (!n_matched)
		return KVP_EINVAL;
	*n_matched = 0;
	if (!p || !p->prefix || (!keys && n_keys) || (!refs && refs_cap) ||
	    (unsigned)format >= KVP_N_FORMATS)
		return KVP_EINVAL;
	int si = kvpi_stream_index(p, stream);
	if (si < 0)
		return KVP_EINVAL;
	if (refs_cap < n_keys) {
		*n_matched = n_keys;
		return KVP_ERANGE;
	}
	if (n_keys == 0)
		return KVP_OK;
	if (n_keys > UINT32_MAX)
		return KVP_ENOMEM;

	struct kvpi_tslot *s = kvpi_tslot_get(p);
	struct kvpi_oshard *sh = kvpi_owners_shard(&p->owners, owner);
	struct match_call c = {.owner = owner,
	                       .tag = kvpi_stream_tag(p, si),
	                       .format = (uint32_t)format,
	                       .keys = keys,
	                       .n_keys = n_keys,
	                       .refs = refs,
	                       .busy = KVPI_NO_ID};
	int rc;
	/* Usually one section.  One that ended on a busy private block is
	 * followed by a wait for that block's owner (no lock held), then
	 * another section from where it stopped; or, when the block holds
	 * another key of the same tag, the match ends there (a miss: a new
	 * section would meet the same block and might have to wait again,
	 * with no bound). */
	while ((rc = match_section(p, s, sh, &c)) == KVP_OK && c.busy != KVPI_NO_ID) {
		bool miss = unprivate_wait(p, c.busy, c.tag, &c.keys[c.i]);
		c.busy = KVPI_NO_ID;
		if (miss)
			break;
	}
	/* Out of memory in a later section: the holds taken stand, and the
	 * match stops short (kvpool/prefix.h). */
	if (rc == KVP_ENOMEM && c.i)
		rc = KVP_OK;
	kvpi_ctr_add(s, KVPI_C_PQUERIES, n_keys);
	kvpi_ctr_add(s, KVPI_C_PHITS, c.i);
	if (c.i)
		kvpi_history_tick(p, s);
	kvpi_tslot_put(p, s);
	*n_matched = c.i;
	return rc;
}
