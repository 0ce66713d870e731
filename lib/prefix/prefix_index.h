/*
 * lib/prefix/prefix_index.h - the key index of the prefix cache (prefix_index.c).
 *
 * Maps (stream tag, 128-bit key) to the id of the block published under it:
 * open addressing in KVPI_PIDX_SHARDS shards, each one table of slots.
 * lib/prefix/prefix_index.c has the design; lib/prefix/prefix_internal.h
 * the lock order and the synchronization table of the whole prefix cache.
 *
 *   function                    who may call                  lock held
 *   --------------------------  ----------------------------  -------------------
 *   kvpi_pfx_index_init         kvp_pool_create               none
 *   kvpi_pfx_index_destroy      kvp_pool_destroy              none (waits for the
 *                                                             tables' callbacks)
 *   kvpi_pfx_index_lookup,      any thread, in a read-side    none (a hint: check
 *   _each                       section                       the block's key)
 *   kvpi_pfx_index_add_many     a publisher, blocks locked    takes the shards'
 *   kvpi_pfx_forget_many        the blocks' locker, or their  mutexes (innermost:
 *                               evictor (EVICTING)            takes no other lock)
 *   kvpi_pfx_index_recache      an evictor undoing its claim  maybe the owner shard
 *                               (EVICTING), no block lock or  mutex; takes the index
 *                               LRU mutex held                shard's (innermost)
 */
#ifndef KVPOOL_LIB_PREFIX_INDEX_H
#define KVPOOL_LIB_PREFIX_INDEX_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <kvpool/prefix.h>

struct kvpi_prefix;
struct kvpi_pside;

/* The key index (lib/prefix/prefix_index.c): one shard of it; and the most
 * keys one batch adds or deletes (each shard's mutex held once).  With 64
 * shards a batch of 64 keys took about 40 mutexes, and the lifecycle
 * benchmark's prefix loop 128-137 CPU ns a block at one thread; with 16
 * shards, 112-118 (four alternating runs each); with batches of 256,
 * 105-110 against 110-114 for 64 (three runs each).  With 4 shards instead
 * of 16 (medians of five alternating runs, two before/after runs): 71.1 to
 * 68.9 at one thread, 92.0 to 86.0 and 89.8 to 86.9 at two, 93.9 to 89.3
 * at eight, 89.4 to 85.8 at sixteen; fewer shard lines move between the
 * cores per batch (an eviction batch of 64 keys took about 16 mutexes). */
#define KVPI_PIDX_SHARDS 4u
#define KVPI_PIDX_BATCH  256u
struct kvpi_ptab;
struct kvpi_pshard {
	/* Lookups read this line; writers write it only when they rebuild. */
	_Atomic(struct kvpi_ptab *) tab; /* stored under lock (release); read by lookups */
	uint32_t min_slots;              /* tab's first size */
	bool inited;                     /* lock initialised */
	/* Writers' line. */
	pthread_mutex_t lock __attribute__((aligned(64))); /* add, delete, rebuild */
	_Atomic(struct kvpi_ptab *) spare; /* a retired table past its grace period */
	uint32_t live;                     /* keys in tab (lock) */
	uint32_t used;                     /* keys and tombstones in tab (lock) */
} __attribute__((aligned(64)));

/* lib/prefix/prefix_index.c: the key index.  All but init and destroy in a
 * read-side section. */
int kvpi_pfx_index_init(struct kvpi_prefix *pf, uint32_t n_blocks);
/* Waits for retired tables' grace periods, then frees the index. */
void kvpi_pfx_index_destroy(struct kvpi_prefix *pf);
/* The index hash of (@stream, @key): a pure function. */
static inline uint64_t kvpi_pfx_index_hash(const kvp_hash *key, uint32_t stream)
{
	/* Fold the key and set the streams apart, then mix with one odd
	 * multiply (a bijection), whose top half depends on every bit: the
	 * index compares only the top 32 bits, and keys a caller builds from
	 * counters rather than a cryptographic hash folded, with a shift and
	 * XOR alone, to values whose top halves met (the publish tests' keys
	 * did; their later keys were then not found).  The top half folded
	 * into the bottom picks the slot. */
	uint64_t h = key->lo ^ (key->hi * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)stream << 61);
	h *= 0xff51afd7ed558ccdull;
	return h ^ (h >> 32);
}
/* The id of a block the index holds under a key of @key's tag (its hash's
 * top 32 bits), or KVPI_NO_ID.  A hint: the caller checks the block's key
 * under its lock. */
uint32_t kvpi_pfx_index_lookup(struct kvpi_prefix *pf, uint32_t stream, const kvp_hash *key);
/* Bring the home slot of @key into the cache (a hint; in a read-side section). */
void kvpi_pfx_index_prefetch_key(struct kvpi_prefix *pf, uint32_t stream, const kvp_hash *key);
/* Add @n (at most KVPI_PIDX_BATCH) blocks @ids, each locked with its key in
 * its side entry (pub_key, pub_stream) hashing to @h[i].  @rc[i] is block
 * @ids[i]'s result: KVP_OK (also when the key's block was being evicted:
 * the new block takes the key over); KVP_EEXIST (another block has the
 * key); or KVP_ENOMEM (the shard is full and could not grow).  Keys of one
 * shard are added in their order here (the first of two equal keys wins),
 * under one hold of the shard's mutex. */
void kvpi_pfx_index_add_many(struct kvpi_prefix *pf, const uint32_t *ids, const uint64_t *h,
                             uint32_t n, int *rc);
/* Make block @id, claimed (EVICTING, ours) and published, CACHED again if
 * its key still names it, under the key's shard mutex, where a publish
 * takes a key over (only from an EVICTING block).  Returns false, with
 * nothing changed, when the key went to another block (kvpi_pfx_unclaim). */
bool kvpi_pfx_index_recache(struct kvpi_prefix *pf, uint32_t id);
/* Call @fn on every block in the index (read-side section; @fn may delete it). */
void kvpi_pfx_index_each(struct kvpi_prefix *pf, void (*fn)(uint32_t id, void *arg), void *arg);
/* Forget the keys of blocks @ids[0..@n): each locked by the caller, or
 * EVICTING (ours); one not published is passed over. */
void kvpi_pfx_forget_many(struct kvpi_prefix *pf, const uint32_t *ids, uint32_t n);

#endif /* KVPOOL_LIB_PREFIX_INDEX_H */
