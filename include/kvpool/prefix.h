/*
 * kvpool/prefix.h - prefix caching: full blocks shared by content across requests.
 *
 * Serving engines reuse the K/V an earlier request computed for the same
 * prompt prefix instead of recomputing it.  A pool created with
 * kvp_pool_config.prefix_cache set supports it: a full block can be
 * *published* under a 128-bit content key, found again by later requests
 * with kvp_prefix_match, *held* by several owners at once, and kept after
 * its last holder lets go (it is then *cached*: free, but still findable)
 * until its space is needed.
 *
 * With prefix_cache false every kvp_prefix_* call returns KVP_EINVAL and the
 * pool behaves exactly as described in kvpool/pool.h.
 *
 * Holds.  A block is in use while at least one owner holds it; an owner
 * holds a block at most once.  kvp_allocate gives a new block one holder,
 * and such a block behaves exactly as in kvpool/pool.h.  kvp_free on a block
 * with two or more holders is KVP_EINVAL and frees nothing in that call (the
 * ref does not say whose hold to drop): use kvp_free_owned.  kvp_free_all
 * drops every hold of the owner.
 *
 * Cached blocks.  When the last holder of a published block lets go, the
 * block becomes cached: it is free (kvp_n_free and n_frees count it) and
 * kvp_prefix_match still finds it until it is evicted.  A match that takes a
 * cached block counts as an allocation and a reuse.  A block's generation
 * changes whenever it goes from free (cached or not) to in use, so every ref
 * from before it was cached is stale.
 *
 * Eviction.  kvp_allocate takes free blocks that are not cached first
 * (last-freed-first); only when those run out does it evict cached blocks,
 * least recently cached first.  Growth happens only when free and cached
 * blocks together cannot cover a request.  When kvp_free_all (or
 * kvp_free_owned with several refs) lets go of an owner's published blocks,
 * they become cached last block first, so eviction takes the end of a
 * sequence before its beginning.  kvp_shrink retires uncached free blocks
 * before cached ones.  Eviction forgets the key.  The implementation states
 * below (see kvp_prefix_match) exactly which eviction order holds when
 * several threads cache and evict at once.
 *
 * Storage.  Rows follow the holder, not the block's history.  A block
 * publishes what its holder wrote since it was handed out afresh (by
 * kvp_allocate, kvp_alloc_block, growth or an eviction), with zeros for
 * rows not written since; never an earlier owner's rows.  A published
 * block, and a block with two or more holders (also once kvp_prefix_reset
 * unpublished it), is fixed: kvp_block_set_used and kvp_storage_write on
 * it are KVP_EINVAL.  A cached block keeps its storage buffer and rows; a
 * match that takes it again shares exactly those rows.  kvp_prefix_reset,
 * evictions of other blocks, kvp_shrink and growth never change what a
 * holder reads (docs/PREFIX.md, "Rows follow the holder").
 *
 * Eviction order with several threads: exact least recently cached first
 * within a shard, approximate across shards.  Cached blocks sit on
 * per-stream LRU lists split into 16 shards.  Each thread that calls the
 * pool has a home shard, that of its per-thread slot: slots are made one
 * per thread, the 17th on the 1st one's shard, and a thread that exits
 * gives its slot up to the next new thread, which so takes over its home
 * shard with the blocks still cached there (threads that get no slot of
 * their own, when memory runs out, share one fallback slot, on the shard
 * of the 16th).  A block becomes cached on the home shard of the thread whose
 * release cached it (the one that let go of its last hold).  A block is put at the tail of that
 * list when it becomes cached and is on no list.  A match that takes a cached block leaves it on
 * its list; when that block is cached again it stays in its old place until an eviction reaches it,
 * which moves it to the tail of the same list.  Call the moment a block was put on its list, or
 * moved to the tail, its caching time.  An eviction takes the oldest block of the evicting thread's
 * home shard, except that it takes the stream's oldest (the oldest of the shard whose oldest is
 * oldest) when the home shard has nothing to give, and on every 8th eviction a thread makes if that
 * block was cached more than 50 ms before the home shard's oldest. What holds:
 *   - within a shard, blocks are evicted strictly in order of caching time,
 *     except that an eviction passes over a block a match holds locked at
 *     that moment (a match whose lookup found a key the block has since
 *     lost locks it only to see that, and leaves it cached), and over one
 *     that an allocation has taken for eviction at that moment and then
 *     gives back, in its old place, because the allocation fails; so the blocks
 *     one thread cached, if no match took them, are evicted in the order
 *     that thread cached them, whichever threads evict (with those
 *     exceptions);
 *   - with one thread (or one thread caching), blocks no match took are
 *     evicted exactly least recently cached first, and a block a match
 *     took and let go again goes after every block cached before the
 *     eviction that moved it;
 *   - a thread whose home shard holds no cached block (it has cached
 *     nothing, and its slot's earlier threads left nothing there) evicts
 *     least recently cached first across the stream (among blocks no
 *     match took, and as long as no other thread caches a block, or gives
 *     one back from an allocation that failed, during the eviction);
 *   - blocks cached by threads that stopped evicting still age out: once
 *     the oldest of them is 50 ms older than an evicting thread's oldest,
 *     at least one in 8 of that thread's evictions takes them;
 *   - across shards, a block cached while an eviction runs may be ordered
 *     either way against the block that eviction takes, and caching times
 *     come from the system's coarse monotonic clock (a tick of a few
 *     milliseconds), so blocks cached within one tick on different shards
 *     may be evicted in either order.
 *
 * Per-thread caches.  A pool with the prefix cache keeps no per-thread
 * magazines (thread_cache is ignored): every uncached free block is on its
 * stream's global stack, so "uncached first" is exact across threads and an
 * allocation that must evict never waits for other threads' caches.
 *
 * Holders and kvp_block_get.  kvp_block_info.owner is the holder when
 * n_holders is 1; with several holders it is one of the owners that held
 * the block since it was handed out (use kvp_blocks_for per owner).  A raw
 * block (kvp_alloc_block) has no owner to hold it: publishing it is
 * KVP_EINVAL.
 *
 * kvp_free racing a match: kvp_free checks every ref first (two or more
 * holders: KVP_EINVAL, nothing freed), then drops the hold of the one
 * holder each block had when checked; a hold that a concurrent match adds
 * in between is kept.
 *
 * Synchronization (prefix mode; the table in kvpool/pool.h for the rest).
 * Each block has a lock bit in its state word, taken with one CAS; the
 * CAS an eviction makes to take a cached block races that same CAS.
 *
 *   function            concurrent with   locks taken
 *   ------------------  ----------------  ------------------------------------
 *   kvp_prefix_match    everything        the owner's shard mutex for the call;
 *                                         per key a lock-free index lookup and
 *                                         the block's lock bit (one CAS)
 *   kvp_prefix_publish  everything        the block's lock bit
 *   kvp_free_owned,
 *   kvp_free,
 *   kvp_free_all        everything        owner shard mutex, then per block
 *                                         its lock bit (and an LRU shard
 *                                         mutex when it becomes cached and
 *                                         is on no list)
 *   kvp_allocate        everything        as in kvpool/pool.h; eviction takes
 *                                         LRU shard mutexes one at a time and
 *                                         never waits for a block's lock bit
 *   kvp_prefix_reset    everything        LRU shard mutexes and lock bits, one
 *                                         at a time
 *   kvp_block_get       everything        lock-free (seqlock retry)
 *
 * No call takes a global lock except growth (the pool's grow mutex, as in
 * kvpool/pool.h).  Orders: whatever a thread wrote into a block's storage
 * before publishing it happens-before a match that takes the block (the
 * lock bit's release and acquire); the last holder's writes happen-before
 * the next owner of an evicted block (the state-word CAS).
 */
#ifndef KVPOOL_PREFIX_H
#define KVPOOL_PREFIX_H

#include <stddef.h>
#include <stdint.h>

#include <kvpool/pool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A 128-bit content key. */
typedef struct kvp_hash {
	uint64_t lo, hi;
} kvp_hash;

/**
 * kvp_prefix_hash - the content key of one block
 * @parent:  the key of the block before it in its sequence, or NULL for the
 *           first block of a sequence
 * @salt:    tenants with different salts never share blocks
 * @tokens:  the block's token bytes (any encoding the caller fixes, e.g.
 *           little-endian int32 token ids); may be NULL when @n_bytes is 0
 * @n_bytes: length of @tokens in bytes
 * @out:     the key
 *
 * The key is SHA-256, truncated to 128 bits, so nobody can craft a prompt
 * whose key collides with another's, and the same inputs give the same key
 * in every process and language.  The exact byte layout hashed, and how the
 * 32-byte digest maps to lo and hi, is given where the function is defined
 * and in docs/PREFIX.md.
 *
 * Returns KVP_OK, or KVP_EINVAL (@out NULL, or @tokens NULL with @n_bytes
 * nonzero), KVP_ENOMEM if the hash library could not allocate.
 * Thread-safe; needs no pool.
 */
int kvp_prefix_hash(const kvp_hash *parent, uint64_t salt, const void *tokens, size_t n_bytes,
                    kvp_hash *out);

/**
 * kvp_prefix_match - take holds on the published blocks of a key sequence
 * @pool:      a pool with prefix_cache on
 * @stream:    the stream to look in (KVP_KV without separate_kv)
 * @format:    only blocks of this format match
 * @keys:      the keys, in sequence order
 * @n_keys:    how many keys
 * @owner:     takes a hold on each block found; registered as kvp_allocate
 *             would
 * @refs:      out: the matched blocks' current refs, in order
 * @refs_cap:  capacity of @refs; below @n_keys it is KVP_ERANGE with
 *             *@n_matched = @n_keys and nothing done
 * @n_matched: out: how many keys matched (a prefix of @keys)
 *
 * Looks the keys up in order and stops at the first key not found.  A block
 * the owner already holds is returned again without a second hold.  A
 * matched block is full (n_used == block_size), also when it was cached.
 * The matched blocks follow the owner's earlier blocks in kvp_blocks_for.
 * No match is KVP_OK with *@n_matched = 0.
 *
 * Returns KVP_OK, KVP_EINVAL (prefix cache off, NULL pointers, bad stream
 * or format), KVP_ERANGE, KVP_ENOMEM.  Thread-safe: a match and an eviction
 * racing for the same cached block settle on the block's state word; the
 * match either gets the block with its published contents or does not see
 * it, never a block that is being handed out for other contents.  The
 * eviction order that holds with several threads is stated at the top of
 * this header.  n_prefix_queries counts @n_keys of every call that looked
 * keys up, n_prefix_hits the blocks it returned.
 */
int kvp_prefix_match(kvp_pool *pool, kvp_stream stream, kvp_format format, const kvp_hash *keys,
                     size_t n_keys, kvp_owner owner, kvp_ref *refs, size_t refs_cap,
                     size_t *n_matched);

/**
 * kvp_prefix_publish - make a full block findable under @key
 * @pool: a pool with prefix_cache on
 * @ref:  a current ref of a block in use, full and not yet published
 * @key:  its content key (kvp_prefix_hash)
 *
 * Returns KVP_OK; KVP_ENOENT (stale or never created ref); KVP_EINVAL
 * (prefix cache off, block not in use, not full, or already published);
 * KVP_EEXIST (another block of the same stream is published under @key: this
 * block stays unpublished); KVP_ENOMEM.  Thread-safe.
 */
int kvp_prefix_publish(kvp_pool *pool, kvp_ref ref, kvp_hash key);

/**
 * kvp_free_owned - drop @owner's hold on each block of @refs
 * @pool:  a pool with prefix_cache on
 * @owner: whose holds to drop
 * @refs:  the blocks
 * @n:     how many
 *
 * A block whose last hold goes is freed (cached if published).  Refs that are
 * stale, free or not held by @owner are skipped and counted as stale frees.
 * An id never created is KVP_ENOENT, and then nothing in the call is freed.
 * Published blocks let go of in one call become cached last ref first.
 * The owner is released once it holds nothing and was not registered.
 *
 * Returns KVP_OK, KVP_EINVAL (prefix cache off, NULL pool, NULL @refs with
 * @n > 0), KVP_ENOENT.  Thread-safe.
 */
int kvp_free_owned(kvp_pool *pool, kvp_owner owner, const kvp_ref *refs, size_t n);

/**
 * kvp_prefix_reset - forget every key
 * @pool: a pool with prefix_cache on
 *
 * Evicts every cached block and unpublishes held ones (they stay held, and
 * are ordinary free blocks once released).  Returns the number of keys
 * dropped; 0 when @pool is NULL or has the prefix cache off.  Thread-safe;
 * blocks published or cached while it runs may keep their keys.
 */
size_t kvp_prefix_reset(kvp_pool *pool);

#ifdef __cplusplus
}
#endif
#endif /* KVPOOL_PREFIX_H */
