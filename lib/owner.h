/*
 * lib/owner.h - the pool's owner table: sharded hash of request owners.
 *
 * An owner record holds the owner's blocks as a doubly linked list through
 * the block table (own_prev/own_next), in allocation order, so appending and
 * unlinking a block are O(1) and allocate nothing.  Records live in
 * KVP_OWNER_SHARDS shards chosen by a hash of the owner id; each shard has
 * its own mutex that guards its buckets, its records, and the list links of
 * every block its owners hold.
 *
 * Why a lock per shard and not a lock-free table: every operation on one
 * owner (extend, free, free_all, blocks_for) must see and change that
 * owner's list atomically, and kvp_register_owner must detect a collision
 * exactly; a per-owner critical section is needed anyway.  Sharding makes
 * two threads contend only when their owners hash to the same shard (1 in
 * KVP_OWNER_SHARDS), and a thread holds a shard lock for O(blocks in the
 * call), never across a system call or another lock.
 *
 * Synchronization:
 *
 *   function              caller holds                progress
 *   --------------------  --------------------------  ----------------------
 *   kvp_owners_shard      nothing                     wait-free (hash)
 *   kvp_oshard_find       the shard's lock            O(chain)
 *   kvp_oshard_insert     the shard's lock            may allocate (records,
 *                                                     bucket array growth)
 *   kvp_oshard_remove     the shard's lock            O(chain), recycles
 *   kvp_orec_append/unlink  the shard's lock, and an  O(1)
 *                         RCU read-side section
 */
#ifndef KVPOOL_LIB_OWNER_H
#define KVPOOL_LIB_OWNER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <kvpool/pool.h>

#include "lib/blocktable.h"

#define KVP_OWNER_SHARD_BITS 8u
#define KVP_OWNER_SHARDS     (1u << KVP_OWNER_SHARD_BITS)

struct kvp_orec {
	struct kvp_orec *next; /* bucket chain or shard free list */
	kvp_owner key;
	uint32_t head, tail; /* block ids, KVP_NO_ID when empty */
	uint64_t count;      /* blocks held */
	bool registered;     /* by kvp_register_owner, not yet released */
};

struct kvp_oshard {
	pthread_mutex_t lock;
	struct kvp_orec **buckets;
	uint32_t nbuckets; /* power of two */
	uint32_t n;        /* records in the table */
	struct kvp_orec *spare;
	uint32_t n_spare;
} __attribute__((aligned(64)));

struct kvp_owners {
	struct kvp_oshard shard[KVP_OWNER_SHARDS];
};

/** kvp_owners_init - empty table; 0 or -1 (no memory) */
int kvp_owners_init(struct kvp_owners *o);

/** kvp_owners_destroy - free every record (single-threaded) */
void kvp_owners_destroy(struct kvp_owners *o);

/** kvp_owners_shard - the shard of @key */
struct kvp_oshard *kvp_owners_shard(struct kvp_owners *o, kvp_owner key);

/** kvp_oshard_find - the record of @key, or NULL */
struct kvp_orec *kvp_oshard_find(struct kvp_oshard *sh, kvp_owner key);

/** kvp_oshard_insert - a new empty record for @key (not present); NULL on no memory */
struct kvp_orec *kvp_oshard_insert(struct kvp_oshard *sh, kvp_owner key);

/** kvp_oshard_remove - take @r out of the table and keep it for reuse */
void kvp_oshard_remove(struct kvp_oshard *sh, struct kvp_orec *r);

/** kvp_orec_append - link block @id at the tail of @r's list */
void kvp_orec_append(struct kvp_orec *r, struct kvp_blocktable *bt, uint32_t id);

/** kvp_orec_unlink - take block @id (on @r's list) off it */
void kvp_orec_unlink(struct kvp_orec *r, struct kvp_blocktable *bt, uint32_t id);

#endif /* KVPOOL_LIB_OWNER_H */
