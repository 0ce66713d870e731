/*
 * bench/suite/mutex_blockpool.h - the serving-loop baseline: a one-mutex block pool
 * shaped like vLLM v1's BlockPool, with its prefix cache.
 *
 * What it keeps, all O(1) per block and reused once warm (no malloc per
 * request after the first requests of each size):
 *   - a LIFO array of free block ids that are not cached;
 *   - per block a hold count, its key if published, and LRU links;
 *   - an LRU list of cached blocks (published, no holder), oldest first;
 *   - an open-addressing key -> block map (linear probing, deletion by
 *     backward shift, so no tombstones pile up);
 *   - an open-addressing owner -> record map; a record keeps the owner's
 *     block ids in an array that is kept when the record is reused.
 *
 * Semantics, as far as the lifecycle benchmark uses them (the same as
 * kvpool's): an allocation is all or nothing, takes uncached free blocks
 * first (last freed first) and then evicts the least recently cached block
 * (its key is forgotten); a match holds the blocks of the longest run of
 * keys found, taking cached ones off the LRU list; a publish maps a key to
 * a held block unless another block has the key; mbp_free_all drops every
 * hold of the owner, last block first, so a published block whose last
 * hold goes is cached (LRU tail) and any other block goes back on the
 * free array.  A request never holds one block twice (the benchmark's
 * keys within a request are distinct).
 *
 * Synchronization:
 *
 *   function                concurrent with   locks
 *   ----------------------  ----------------  ------------------------
 *   mbp_create/mbp_destroy  nothing           -
 *   every other call        everything        the pool's one mutex,
 *                                             once per call
 */
#ifndef KVPOOL_BENCH_MUTEX_BLOCKPOOL_H
#define KVPOOL_BENCH_MUTEX_BLOCKPOOL_H

#include <stddef.h>
#include <stdint.h>

#include <kvpool/prefix.h>

typedef struct mbp mbp;

/* A 128-bit content key: kvpool's, so both pools take the same key arrays. */
typedef kvp_hash mbp_key;

/* mbp_create - a pool of @n_blocks blocks (1 .. 2^31); 0, or -1 (bad size, no memory) */
int mbp_create(uint32_t n_blocks, mbp **out);
/* mbp_destroy - free the pool (NULL is a no-op); nothing may run on it */
void mbp_destroy(mbp *p);

/*
 * mbp_allocate - @n blocks (1 or more) to @owner, all or nothing
 * @ids: receives the ids, in allocation order
 * The owner is made if unknown, extended if active.
 * Returns 0, -1 bad argument, -2 exhausted, -3 out of memory (nothing done).
 */
int mbp_allocate(mbp *p, uint64_t owner, uint32_t n, uint32_t *ids);

/*
 * mbp_match - hold the blocks published under the longest run of @keys
 * @ids:       receives the matched ids, in key order
 * @n_matched: how many keys matched (a prefix of @keys)
 * The owner is made if unknown and a key matched.
 * Returns 0, -1 bad argument, -3 out of memory (nothing done).
 */
int mbp_match(mbp *p, uint64_t owner, const mbp_key *keys, uint32_t n, uint32_t *ids,
              uint32_t *n_matched);

/*
 * mbp_publish - map @keys[i] to block @ids[i], for @n blocks held by the caller
 * A key already mapped (to another block) is skipped.  Returns how many
 * keys were mapped.
 */
uint32_t mbp_publish(mbp *p, const uint32_t *ids, const mbp_key *keys, uint32_t n);

/* mbp_free_all - drop every hold of @owner (last block first) and forget it; 0 or -1 unknown */
int mbp_free_all(mbp *p, uint64_t owner);

/* Free blocks (uncached + cached), cached blocks, mapped keys, active owners. */
uint32_t mbp_n_free(mbp *p);
uint32_t mbp_n_cached(mbp *p);
uint32_t mbp_n_keys(mbp *p);
uint32_t mbp_n_owners(mbp *p);

#endif /* KVPOOL_BENCH_MUTEX_BLOCKPOOL_H */
