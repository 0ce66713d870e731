/*
 * lib/pool/owner.h - the pool's owner table: sharded hash of request owners.
 *
 * An owner record holds the owner's block ids in an array in allocation
 * order (lib/pool/idarray.h); each block keeps its position in it (own_pos
 * in the block table), so appending and dropping a block are O(1), and
 * kvp_free_all reads the ids with independent loads.  Records live in
 * KVPI_OWNER_SHARDS shards: 256 chosen by a hash of the owner id, and 256
 * minted shards named by the id itself (below).  Each shard's exclusion
 * (its mutex, or a shard op of the thread it is biased to: "Biased shards"
 * below) guards its buckets, its records, their id arrays, and the
 * position (own_pos) of every block its owners hold.
 *
 * Why a lock per shard and not a lock-free table: every operation on one
 * owner (extend, free, free_all, blocks_for) must see and change that
 * owner's ids atomically.  kvp_register_owner must detect a collision
 * exactly.  So a per-owner critical section is needed anyway.  Sharding
 * makes two threads contend only when their owners hash to the same shard
 * (1 in 256).  A thread holds a shard lock for O(blocks in
 * the call).  Under it, it may take the leaf spare_lock, enter its own
 * magazines (waiting for nothing inside), revoke a bias, and allocate or
 * free an id array; it never waits for another shard lock.
 *
 * Synchronization:
 *
 *   function              caller holds                progress
 *   --------------------  --------------------------  ----------------------
 *   kvpi_owners_shard      nothing                     wait-free (hash)
 *   kvpi_oshard_find       the shard's exclusion       O(chain)
 *   kvpi_oshard_insert     the shard's exclusion       the spare lock (leaf) once
 *                                                     per KVPI_REC_BATCH; may
 *                                                     allocate (records, bucket
 *                                                     array growth)
 *   kvpi_oshard_remove     the shard's exclusion       O(chain); the spare lock
 *                                                     once per KVPI_REC_BATCH
 *   kvpi_orec_append_b/unlink_b  the owner's exclusion O(1); room for an
 *                                                     append is made first by
 *                                                     kvpi_orec_reserve (may
 *                                                     allocate)
 *
 * Biased records.  A record is biased to the slot of the thread that first
 * allocates for it: 'bias' = the slot.  kvp_register_owner makes it
 * unbiased.  While it stays biased, that thread alone changes the record's
 * ids.  It does so without the shard lock, inside an owner op
 * (lib/pool/bias.h, kvpi_bias_enter/leave).  An owner op is a
 * plain store of the slot's in_owner_op word and a load of 'bias'.  In asym
 * mode it takes no locked instruction.
 *
 * Revocation.  Another thread may need to touch the record: a free of its
 * blocks from elsewhere, free_all, blocks_for, release, or an allocate from
 * another thread.  That thread takes the shard lock and revokes the bias
 * first, in three steps:
 *   1. 'bias' = 0 (seq_cst);
 *   2. the heavy barrier (membarrier, 0.13-0.8 us; nothing in the seq_cst
 *      fallback);
 *   3. a wait while the biased slot's in_owner_op names the record.  That
 *      is a few dozen instructions, unless that thread is preempted inside
 *      its op.
 * From then on the record is shard-locked as any other.
 *
 * Re-biasing.  An allocate under the shard lock may find the record
 * unbiased.  It then biases the record to its own thread, at most
 * KVPI_BIAS_MAX_REVOKES times per record life.  So two threads sharing one
 * owner settle on the lock instead of ping-ponging.  A record made again
 * (the owner released and allocated anew) is biased to the thread whose
 * allocate made it.  A thread touching an unbiased record, or one biased to
 * itself, revokes nothing.
 *
 * A thread's owner cache validates three fields: 'bias' (written under the
 * shard's exclusion only), 'key' and 'epoch'.  'epoch' grows each time the
 * record is (re)inserted.  So a cache entry made for an earlier life of a
 * recycled record never matches.
 *
 * Biased shards.  The shard's exclusion is its lock, or, for a shard biased
 * to a slot, a shard op of that slot's thread: the same protocol one level
 * up.  Only the minted shards of a plain pool are ever biased (a prefix
 * pool's calls all hold the mutex).  A thread that makes and ends owners
 * with ids it minted (kvp_owner_new) finds, adds and drops their records in
 * its own minted shard, and the shard is biased to its slot once it has
 * locked it KVPI_SHARD_REBIAS times in a row with no other slot in between.
 * A shard op is a plain store of the slot's in_owner_op word (the shard's
 * address) and a load of the shard's 'bias' (kvpi_oshard_enter,
 * lib/pool/bias.h); inside it the thread may do anything the lock
 * allows.  Any other thread takes the lock and revokes the shard's bias
 * (kvpi_oshard_lock): 'bias' = 0 (seq_cst), the heavy barrier, a wait while
 * the biased slot's in_owner_op names the shard.  The count needed to bias
 * the shard again doubles with each revocation (up to 2^10 times), so
 * another thread touching a thread's minted owners now and then costs a
 * barrier only once in that many of its calls.  Records inside keep their
 * own bias: a shard op revokes a record biased to another slot as the lock
 * holder would.
 */
#ifndef KVPOOL_LIB_OWNER_H
#define KVPOOL_LIB_OWNER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <kvpool/pool.h>

#include "lib/pool/blocktable.h"
#include "lib/pool/idarray.h"

/* Shards: 256 for ids placed by their hash, then 256 minted shards (below). */
#define KVPI_OWNER_SHARD_BITS 9u
#define KVPI_OWNER_SHARDS     (1u << KVPI_OWNER_SHARD_BITS)
#define KVPI_MINTED_SHARD0    (KVPI_OWNER_SHARDS / 2)

/* Locked calls in a row by one slot before a minted shard is biased to it
 * (doubled per revocation, at most KVPI_SHARD_REBIAS_MAXSHIFT times). */
#define KVPI_SHARD_REBIAS          16u
#define KVPI_SHARD_REBIAS_MAXSHIFT 10u

#define KVPI_BIAS_MAX_REVOKES 2u

struct kvpi_orec {
	struct kvpi_orec *next; /* bucket chain or shard free list */
	kvp_owner key;
	uint64_t hash;          /* kvpi_owner_hash(key), set at insertion */
	struct kvpi_idarr ids;  /* the blocks held, in allocation order */
	_Atomic uintptr_t bias; /* the slot it is biased to, or 0 */
	uint32_t epoch;         /* bumped at each insertion */
	uint8_t revokes;        /* revocations in this life */
	bool registered;        /* by kvp_register_owner, not yet released */
	/* Plain pools: how many of the blocks held have a fill below the
	 * block size (the owner's exclusion), so kvp_free_all takes them off
	 * the pool's not-full count at once, reading no fill.  Unused (and
	 * left 0) in a prefix pool, whose calls keep their own count. */
	uint32_t not_full;
};

struct kvpi_oshard {
	pthread_mutex_t lock;
	struct kvpi_orec **buckets;
	uint32_t nbuckets; /* power of two */
	uint32_t n;        /* records in the table */
	/* The slot whose thread may change the shard in a shard op, or 0
	 * (always 0 but for a plain pool's minted shards); written under
	 * the lock only. */
	_Atomic uintptr_t bias;
	/* Under the lock: the slot of the latest locked calls, how many in a
	 * row, and how many times the bias was revoked. */
	const void *streak_slot;
	uint32_t streak;
	uint32_t revokes;
} __attribute__((aligned(64)));

/*
 * Unused owner records.  Each thread keeps a few (struct kvpi_rec_cache in
 * its slot) and trades them with the pool's shared list in batches, under
 * a leaf mutex taken once per KVPI_REC_BATCH owner creations or removals.
 * Records are freed only by kvp_pool_destroy, so the pool never holds more
 * than its peak of live owners plus the threads' caches, and a server that
 * makes an owner per request allocates nothing once it has seen its peak.
 * A dropped record keeps a small id array (lib/pool/idarray.h,
 * KVPI_IDARR_ATTACHED); a bigger one goes to the dropping thread's stash
 * beside its records, where any record's growth finds it.
 */
#define KVPI_REC_BATCH 8u

struct kvpi_rec_cache {
	struct kvpi_orec *head;
	uint32_t n;
	struct kvpi_idstash ids; /* spare id arrays (lib/pool/idarray.h) */
};

struct kvpi_owners {
	struct kvpi_oshard shard[KVPI_OWNER_SHARDS];
	pthread_mutex_t spare_lock; /* leaf: guards spare and spare_ids */
	struct kvpi_orec *spare;
	struct kvpi_idstash spare_ids; /* id arrays the threads' stashes pass on */
};

/* kvpi_owners_idsrc - where @rc's thread takes and gives id arrays */
static inline struct kvpi_idsrc kvpi_owners_idsrc(struct kvpi_owners *o, struct kvpi_rec_cache *rc)
{
	struct kvpi_idsrc src = {&rc->ids, &o->spare_ids, &o->spare_lock};
	return src;
}

/** kvpi_owners_init - empty table; 0 or -1 (no memory) */
int kvpi_owners_init(struct kvpi_owners *o);

/** kvpi_owners_destroy - free every record (single-threaded) */
void kvpi_owners_destroy(struct kvpi_owners *o);

/*
 * Minted owner ids (kvp_owner_new).  An id whose top byte is KVPI_MINT_TAG
 * names its shard in its next byte: the minted shard KVPI_MINTED_SHARD0 +
 * that byte, the home shard of the thread slot that minted it.  Below
 * that, the slot's index above its low byte (8 bits) and the slot's own
 * count of ids made (40 bits):
 *
 *   63      56 55      48 47       40 39                       0
 *   | 0xC5    | idx & ff | idx >> 8  |  the slot's sequence     |
 *
 * So ids minted by different slots differ, and the owners a thread mints
 * live in a shard whose lock, buckets and records that thread alone
 * touches in the common case (slots 256 apart share a shard): making and
 * ending them moves no cache line between cores, and once the shard is
 * biased to the slot ("Biased shards" above) takes no lock.  The bucket is
 * the sequence's low bits, so the owners a thread has alive at once sit in
 * distinct buckets.  Every other id is placed by its hash in the first 256
 * shards.  An id with the tag that no slot minted is a valid id like any
 * other; it only has a fixed shard.
 */
#define KVPI_MINT_TAG       0xC5ull
#define KVPI_MINT_SEQ_BITS  40u
#define KVPI_MINT_MAX_SLOTS (1u << 16)

/** kvpi_owner_minted - whether @key carries the minted tag */
static inline bool kvpi_owner_minted(kvp_owner key)
{
	return key >> 56 == KVPI_MINT_TAG;
}

/**
 * kvpi_owner_hash - the shard in the top KVPI_OWNER_SHARD_BITS bits, the
 * bucket in the low bits: for a minted id its shard byte under a set top
 * bit, and its own low bits (the sequence); for any other id splitmix64's
 * finalizer with the top bit cleared (every bit of the id reaches both)
 */
static inline uint64_t kvpi_owner_hash(kvp_owner key)
{
	_Static_assert(KVPI_OWNER_SHARD_BITS == 9, "one bit for minted, a byte for the shard");
	if (kvpi_owner_minted(key))
		return 1ull << 63 | (key >> 48 & 0xff) << 55 | (key & ((1ull << 48) - 1));
	uint64_t z = key + 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return z >> 1;
}

/** kvpi_owners_shard_h - the shard of the owner whose hash is @h */
static inline struct kvpi_oshard *kvpi_owners_shard_h(struct kvpi_owners *o, uint64_t h)
{
	return &o->shard[h >> (64 - KVPI_OWNER_SHARD_BITS)];
}

/** kvpi_owners_shard - the shard of @key */
struct kvpi_oshard *kvpi_owners_shard(struct kvpi_owners *o, kvp_owner key);

/** kvpi_oshard_find - the record of @key, or NULL */
struct kvpi_orec *kvpi_oshard_find(struct kvpi_oshard *sh, kvp_owner key);

/** kvpi_oshard_find_h - kvpi_oshard_find with the key's hash @h already known */
static inline struct kvpi_orec *kvpi_oshard_find_h(struct kvpi_oshard *sh, kvp_owner key,
                                                   uint64_t h)
{
	for (struct kvpi_orec *r = sh->buckets[h & (sh->nbuckets - 1)]; r; r = r->next)
		if (r->key == key)
			return r;
	return NULL;
}

/* The out-of-line halves of the calls below (lib/pool/owner.c): a record
 * from @o when @rc is empty (or new), a batch given back to @o when @rc
 * holds too many, the bucket array doubled. */
struct kvpi_orec *kvpi_rec_get_slow(struct kvpi_owners *o, struct kvpi_rec_cache *rc);
void kvpi_rec_put_slow(struct kvpi_owners *o, struct kvpi_rec_cache *rc);
void kvpi_oshard_rehash(struct kvpi_oshard *sh);

/**
 * kvpi_oshard_insert_h - a new empty, unbiased record for @key (not
 * present), whose hash is @h
 * @rc: the calling thread's record cache, refilled from @o when empty
 * Returns the record (its epoch bumped), or NULL when no memory could be had.
 */
static inline struct kvpi_orec *kvpi_oshard_insert_h(struct kvpi_owners *o, struct kvpi_oshard *sh,
                                                     struct kvpi_rec_cache *rc, kvp_owner key,
                                                     uint64_t h)
{
	struct kvpi_orec *r = rc->head;
	if (__builtin_expect(r != NULL, 1)) {
		rc->head = r->next;
		rc->n--;
	} else if (!(r = kvpi_rec_get_slow(o, rc))) {
		return NULL;
	}
	r->key = key; /* its id array is empty: cleared when it was dropped */
	r->hash = h;
	r->registered = false;
	r->revokes = 0;
	r->not_full = 0;
	r->epoch++;
	/* relaxed: bias is written under the shard's exclusion only, which we
	 * hold; a thread whose stale cache entry names this record reads it
	 * racily and acts only on its own slot's value. */
	atomic_store_explicit(&r->bias, 0, memory_order_relaxed);
	if (__builtin_expect(sh->n >= sh->nbuckets, 0))
		kvpi_oshard_rehash(sh);
	struct kvpi_orec **b = &sh->buckets[h & (sh->nbuckets - 1)];
	r->next = *b;
	*b = r;
	sh->n++;
	return r;
}

/** kvpi_oshard_insert - kvpi_oshard_insert_h, the hash computed */
static inline struct kvpi_orec *kvpi_oshard_insert(struct kvpi_owners *o, struct kvpi_oshard *sh,
                                                   struct kvpi_rec_cache *rc, kvp_owner key)
{
	return kvpi_oshard_insert_h(o, sh, rc, key, kvpi_owner_hash(key));
}

/** kvpi_oshard_remove - take @r (not biased to another thread) out of the
 * table, clear its bias, and keep it in @rc (or @o), its id array in @rc's stash */
static inline void kvpi_oshard_remove(struct kvpi_owners *o, struct kvpi_oshard *sh,
                                      struct kvpi_rec_cache *rc, struct kvpi_orec *r)
{
	struct kvpi_orec **pp = &sh->buckets[r->hash & (sh->nbuckets - 1)];
	while (*pp != r)
		pp = &(*pp)->next;
	*pp = r->next;
	sh->n--;
	/* relaxed: as in kvpi_oshard_insert_h. */
	atomic_store_explicit(&r->bias, 0, memory_order_relaxed);
	struct kvpi_idsrc src = kvpi_owners_idsrc(o, rc);
	kvpi_idarr_release(&r->ids, &src);
	r->next = rc->head;
	rc->head = r;
	if (__builtin_expect(++rc->n > 2 * KVPI_REC_BATCH, 0))
		kvpi_rec_put_slow(o, rc);
}

/**
 * kvpi_rec_cache_reserve - make sure @rc holds a record, so that the next
 * kvpi_oshard_insert with @rc cannot fail; 0, or -1 when no memory could be
 * had.  Caller: @rc's thread (or the fallback slot's lock holder).
 */
static inline int kvpi_rec_cache_reserve(struct kvpi_owners *o, struct kvpi_rec_cache *rc)
{
	if (__builtin_expect(rc->head != NULL, 1))
		return 0;
	struct kvpi_orec *r = kvpi_rec_get_slow(o, rc);
	if (!r)
		return -1;
	r->next = rc->head;
	rc->head = r;
	rc->n++;
	return 0;
}

/** kvpi_rec_cache_drain - give every record in @rc back to @o (thread exit) */
void kvpi_rec_cache_drain(struct kvpi_owners *o, struct kvpi_rec_cache *rc);

/** kvpi_rec_cache_free - free the records and arrays in @rc (pool destroy) */
void kvpi_rec_cache_free(struct kvpi_rec_cache *rc);

/* kvpi_orec_moved - compaction's callback: block @id now sits at @pos */
void kvpi_orec_moved(void *bt, uint32_t id, uint32_t pos);

/**
 * kvpi_orec_reserve - room in @r for @extra more blocks (the owner's
 * exclusion held, or @r private to the caller), an array taken from the
 * stashes of @rc's thread and @o if it must grow; 0, or -1 when no memory
 * could be had.  May allocate.
 */
static inline int kvpi_orec_reserve(struct kvpi_owners *o, struct kvpi_orec *r,
                                    struct kvpi_blocktable *bt, struct kvpi_rec_cache *rc,
                                    uint32_t extra)
{
	if ((uint64_t)r->ids.len + extra <= r->ids.cap)
		return 0;
	struct kvpi_idsrc src = kvpi_owners_idsrc(o, rc);
	return kvpi_idarr_reserve_slow(&r->ids, extra, kvpi_orec_moved, bt, &src);
}

/** kvpi_orec_count - blocks @r holds (the owner's exclusion held) */
static inline uint32_t kvpi_orec_count(const struct kvpi_orec *r)
{
	return r->ids.count;
}

/** kvpi_orec_append_b - add block @id, whose metadata is @b, at the end of
 * @r's array (room reserved) */
static inline __attribute__((always_inline)) void
kvpi_orec_append_b(struct kvpi_orec *r, uint32_t id, struct kvpi_block *b)
{
	b->own_pos = kvpi_idarr_push(&r->ids, id);
}

/** kvpi_orec_unlink_b - take block @b (held by @r) out of @r's array;
 * @not_full: whether its fill was below the block size (@r's count) */
static inline __attribute__((always_inline)) void
kvpi_orec_unlink_b(struct kvpi_orec *r, struct kvpi_block *b, bool not_full)
{
	kvpi_idarr_remove_at(&r->ids, b->own_pos);
	r->not_full -= not_full;
}

/** kvpi_ocache_index - slot of @key in a thread's owner cache of 2^@bits entries
 * (one multiply: the cache needs spread, not the shard hash's mixing) */
static inline uint32_t kvpi_ocache_index(kvp_owner key, unsigned bits)
{
	return (uint32_t)((key * 0x9e3779b97f4a7c15ull) >> (64 - bits));
}

#endif /* KVPOOL_LIB_OWNER_H */
