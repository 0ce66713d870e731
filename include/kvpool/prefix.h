/*
 * kvpool/prefix.h - prefix caching: full blocks shared by content across requests.
 *
 * Serving engines reuse the K/V an earlier request computed for the same
 * prompt prefix instead of recomputing it.  A pool created with
 * kvp_pool_config.prefix_cache set supports this.  A full block can be
 * *published* under a 128-bit content key.  Later requests find it again
 * with kvp_prefix_match.  Several owners can *hold* it at once.  After its
 * last holder lets go it is kept as *cached* (free, but still findable)
 * until its space is needed.
 *
 * With prefix_cache false every kvp_prefix_* call returns KVP_EINVAL.  The
 * pool then behaves exactly as described in kvpool/pool.h.
 *
 * Holds.  A block is in use while at least one owner holds it.  An owner
 * holds a block at most once.  A new block from kvp_allocate has one
 * holder, and such a block behaves exactly as in kvpool/pool.h.  A kvp_free
 * on a block with two or more holders is KVP_EINVAL and frees nothing in
 * that call.  The reason: the ref does not say whose hold to drop.  Use
 * kvp_free_owned instead.  The call kvp_free_all drops every hold of the
 * owner.
 *
 * Cached blocks.  When the last holder of a published block lets go, the
 * block becomes cached.  It is then free: kvp_n_free and n_frees count it.
 * kvp_prefix_match still finds it until it is evicted.  A match that takes
 * a cached block counts as an allocation and a reuse.  A block's generation
 * changes whenever it goes from free (cached or not) to in use.  So every
 * ref from before it was cached is stale.
 *
 * Eviction.  kvp_allocate takes free blocks that are not cached first
 * (last-freed-first; other threads' per-thread caches aside, see
 * "Per-thread caches" below).  Only when those run out does it evict cached blocks,
 * least recently cached first.  Growth happens only when free and cached
 * blocks together cannot cover a request (but for a race: an allocation
 * that meets a kvp_shrink, a kvp_prefix_reset or an eviction ahead moving
 * cached blocks to the free stack or a thread's cache may miss those
 * blocks in its count and grow by up to that many; docs/PREFIX.md,
 * "Exhaustion").
 *
 * An allocation of n < 64 blocks (a decode step's, as a rule) that finds
 * too few free blocks in its thread's cache and on the stream's global
 * stack, and after which that stack is empty and more than 4096 of the
 * stream's blocks are cached, evicts 64 - n more, the least recently
 * cached, into the calling thread's cache (onto the global stack when the
 * pool has no per-thread caches, or they are being drained, or the blocks
 * do not fit).  That thread's next small allocations take them from there
 * without an eviction each, and without touching a line another thread
 * writes.  In a cache that large a block may thus be evicted up to 63
 * allocations early (per evicting thread).  Until then it is an uncached
 * free block in that thread's cache (see "Per-thread caches"): other
 * threads evict rather than wait for it, and with grow_on_exhaustion may
 * grow past it, until that thread allocates again or an evicting
 * allocation drains the caches of threads outside a call (at most once a
 * millisecond).  Up to 63 blocks per thread and stream may stand aside
 * that way.  A smaller cache, and any larger allocation, evicts exactly
 * what it needs.  n_evictions counts every block evicted.
 *
 * kvp_free_all (or kvp_free_owned with several refs) may let go of an
 * owner's published blocks.  They then
 * become cached last block first, so eviction takes the end of a sequence
 * before its beginning.  kvp_shrink retires uncached free blocks before
 * cached ones.  Eviction forgets the key.  "Eviction order with several
 * threads" below states exactly which order holds when several threads
 * cache and evict at once.
 *
 * Storage.  Rows follow the holder, not the block's history.  A block
 * publishes what its holder wrote since it was handed out afresh (by
 * kvp_allocate, kvp_alloc_block, growth or an eviction).  Rows not written
 * since then read as zeros; an earlier owner's rows never show.  Some
 * blocks are fixed: a published block, and a block with two or more
 * holders (also once kvp_prefix_reset unpublished it).  On a fixed block
 * kvp_block_set_used and kvp_storage_write are KVP_EINVAL.  A cached block
 * keeps its storage buffer and rows.  A match that takes it again shares
 * exactly those rows.  kvp_prefix_reset, evictions of other blocks,
 * kvp_shrink and growth never change what a holder reads (docs/PREFIX.md,
 * "Rows follow the holder").
 *
 * Eviction order with several threads.  The order is exact least recently
 * cached first within a shard, and least recently cached first to within
 * 20 ms across shards.
 *
 * Shards.  Cached blocks sit on per-stream LRU lists split into 16 shards.
 * Each thread that calls the pool has a home shard: that of its per-thread
 * slot.  Slots are made one per thread, and the 17th lands on the 1st
 * one's shard.  A thread that exits gives its slot up to the next new
 * thread.  That thread so takes over its home shard, with the blocks still
 * cached there.  When memory runs out, threads that get no slot of their
 * own share one fallback slot, on the shard of the 16th.
 *
 * Caching time.  A block becomes cached on the home shard of the thread
 * whose release cached it (the one that let go of its last hold).  A block
 * that becomes cached while on no list is put at the tail of that list.  A
 * match that takes a cached block leaves it on its list.  When that block
 * is cached again by a thread of the same home shard, it moves to the tail
 * of that list then.  Cached again by a thread of another home shard, it
 * stays in its old place until an eviction reaches it, and that eviction
 * moves it to the tail of the same list.  A block's caching time is the
 * moment it was put on its list or moved to the tail.
 *
 * Whom an eviction takes.  An allocation evicts in batches, each from one
 * shard.  A batch takes the oldest blocks of the evicting thread's home
 * shard, those cached at most 20 ms after the oldest block of the other
 * shards.  When there is none, and when the home shard has nothing to
 * give, it takes the stream's oldest:
 * blocks of the shard whose oldest is oldest, oldest first, cached at most
 * 20 ms after the next shard's oldest.
 *
 * What holds:
 *   - Within a shard, blocks are evicted strictly in order of caching time,
 *     with two exceptions.  An eviction passes over a block that a match
 *     holds locked at that moment.  A match whose lookup found a key the
 *     block has since lost locks it only to see that, and leaves it
 *     cached.  An eviction also passes over a block that an allocation has
 *     taken for eviction at that moment.  If that allocation fails, it
 *     gives the block back in its old place.  So, with those exceptions,
 *     the blocks one thread cached are evicted in the order that thread
 *     cached them, whichever threads evict, if no match took them.
 *   - With one thread (or one thread caching), eviction is exactly least
 *     recently cached first, a block a match took counting as cached when
 *     it was let go.  Within a shard the same holds for the blocks its own
 *     threads cache again.  So when a request lets go of a prompt's blocks
 *     (kvp_free_all, last block first), no block of that prompt on its
 *     thread's shard outlives an earlier one it cached at the same time.
 *     A block a thread of another home shard took and let go again goes
 *     after every block of its list cached before the eviction that moved
 *     it.
 *   - Across the stream, among blocks no match took, an evicted block's
 *     caching time is at most 20 ms after that of the least recently cached
 *     block left (on the clock below).
 *     This holds as long as no other thread caches a block during the
 *     eviction, or gives one back from an allocation that failed.
 *   - So blocks cached by threads that stopped evicting age out as any
 *     others: once the oldest of them is 20 ms older than an evicting
 *     thread's oldest, that thread's evictions take them first.
 *   - Across shards, a block cached while an eviction runs may be ordered
 *     either way against the block that eviction takes.  Caching times come
 *     from the system's coarse monotonic clock (a tick of a few
 *     milliseconds).  So blocks cached within one tick on different shards
 *     may be evicted in either order.
 *
 * Per-thread caches.  Uncached free blocks sit in per-thread caches
 * (thread_cache, as in a plain pool) and on the stream's global stack.  An
 * allocation takes the uncached blocks of its own thread's cache and of
 * the global stack before it evicts any cached block.  Blocks in other
 * threads' caches may stay there meanwhile: up to thread_cache per thread
 * and stream.  Set thread_cache to 0 for "uncached first" across all
 * threads.  Exhaustion stays exact either way: before an allocation
 * reports KVP_EEXHAUSTED, it empties every thread's cache into the global
 * stack and tries again.  That emptying waits only for a thread inside an
 * allocate or free call of its own, and such a call waits for nothing.
 *
 * Holders and kvp_block_get.  kvp_block_info.owner is the holder when
 * n_holders is 1.  With several holders it is one of the owners that held
 * the block since it was handed out; use kvp_blocks_for per owner.  A raw
 * block (kvp_alloc_block) has no owner to hold it, so publishing it is
 * KVP_EINVAL.
 *
 * kvp_free racing a match.  kvp_free checks every ref first; two or more
 * holders is KVP_EINVAL, and nothing is freed.  It then drops the hold of
 * the one holder each block had when checked.  A hold that a concurrent
 * match adds in between is kept.
 *
 * Synchronization (prefix mode; the table in kvpool/pool.h for the rest).
 * Each block has a lock bit in its state word, taken with one CAS.  The CAS
 * an eviction makes to take a cached block races that same CAS.
 *
 *   function            concurrent with   locks taken
 *   ------------------  ----------------  ------------------------------------
 *   kvp_prefix_match    everything        the owner's shard mutex for the call;
 *                                         per key a lock-free index lookup and
 *                                         the block's lock bit (one CAS); a
 *                                         block another live owner published:
 *                                         that owner's shard mutex too, tried
 *                                         (if busy, waited for between two
 *                                         holds of the caller's mutex)
 *   kvp_prefix_publish  everything        the block's lock bit, or, for a
 *                                         block not yet published since its
 *                                         allocation, its owner's shard mutex
 *   kvp_prefix_publish_many  everything   as kvp_prefix_publish, per block;
 *                                         an owner's shard mutex is kept
 *                                         across that owner's blocks
 *   kvp_free_owned,
 *   kvp_free,
 *   kvp_free_all        everything        owner shard mutex, then per block
 *                                         its lock bit (none for a block the
 *                                         owner published and no other owner
 *                                         matched) and its thread's LRU
 *                                         shard mutex when it becomes cached
 *   kvp_allocate        everything        as in kvpool/pool.h; eviction takes
 *                                         LRU shard mutexes one at a time and
 *                                         never waits for a block's lock bit
 *   kvp_prefix_reset    everything        LRU shard mutexes and lock bits, one
 *                                         at a time; for a block its owner
 *                                         published and holds alone, that
 *                                         owner's shard mutex
 *   kvp_block_get       everything        lock-free (seqlock retry)
 *
 * No call takes a global lock except growth (the pool's grow mutex, as in
 * kvpool/pool.h).  Orders:
 *   - Whatever a thread wrote into a block's storage before publishing it
 *     happens-before a match that takes the block (the lock bit's release
 *     and acquire).
 *   - The last holder's writes happen-before the next owner of an evicted
 *     block (the state-word CAS).
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
 * @tokens:  the block's token bytes; may be NULL when @n_bytes is 0
 * @n_bytes: length of @tokens in bytes
 * @out:     the key
 *
 * The caller fixes the encoding of @tokens, e.g. little-endian int32 token
 * ids.  The key is SHA-256, truncated to 128 bits.  So nobody can craft a
 * prompt whose key collides with another's.  The same inputs give the same
 * key in every process and language.  The bytes hashed, in order:
 *
 *   offset  size  field
 *   0       1     version, 0x01
 *   1       1     0x01 with a parent, 0x00 without
 *   2       8     parent lo, little-endian (zeros without a parent)
 *   10      8     parent hi, little-endian (zeros without a parent)
 *   18      8     @salt, little-endian
 *   26      n     @tokens, as given (@n_bytes)
 *
 * Of the 32-byte digest d, lo is d[0..8) and hi is d[8..16), each read
 * little-endian; the rest is dropped.  Test vectors: docs/PREFIX.md.
 *
 * Returns KVP_OK; KVP_EINVAL (@out NULL, or @tokens NULL with @n_bytes
 * nonzero); KVP_ENOMEM if the hash library could not allocate.
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
 * @owner:     takes a hold on each block found
 * @refs:      out: the matched blocks' current refs, in order
 * @refs_cap:  how many refs @refs holds
 * @n_matched: out: how many keys matched (a prefix of @keys)
 *
 * Looks the keys up in order and stops at the first key not found.  An
 * unknown @owner is registered as kvp_allocate would.  A block the owner
 * already holds is returned again without a second hold.  A matched block
 * is full (n_used == block_size), also when it was cached.  The matched
 * blocks follow the owner's earlier blocks in kvp_blocks_for.  No match is
 * KVP_OK with *@n_matched = 0.
 *
 * Returns KVP_OK; KVP_EINVAL (prefix cache off, NULL pointers, bad stream
 * or format); KVP_ERANGE (@refs_cap below @n_keys: *@n_matched is set to
 * @n_keys and nothing is done); KVP_ENOMEM (nothing done).  Memory that
 * runs out after the call waited (below) ends the match there: KVP_OK,
 * the holds taken kept.
 *
 * A block that another live owner published and still holds alone takes
 * that owner's shard mutex to be shared (once per block).  When that mutex
 * is busy, the call lets go of its own owner's shard mutex, waits for it,
 * and goes on from that key: its holds are then taken in more than one
 * step, and a kvp_free_all of @owner racing the call may end the holds of
 * the earlier steps (their refs are then stale, as after any free).
 *
 * Thread-safe.  A match and an eviction racing for the same cached block
 * settle on the block's state word.  The match either gets the block with
 * its published contents or does not see it.  It never gets a block that
 * is being handed out for other contents.  The top of this header states
 * the eviction order that holds with several threads.  n_prefix_queries
 * counts @n_keys of every call that looked keys up.  n_prefix_hits counts
 * the blocks it returned.
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
 * KVP_EEXIST (another block of the same stream is published under @key;
 * this block stays unpublished); KVP_ENOMEM.  A block under @key that is
 * being evicted at that moment (by an allocation, a reset or a shrink; a
 * match would miss it) does not count: this block takes the key over and
 * the call returns KVP_OK.
 * Thread-safe.
 */
int kvp_prefix_publish(kvp_pool *pool, kvp_ref ref, kvp_hash key);

/**
 * kvp_prefix_publish_many - kvp_prefix_publish for many blocks in one call
 * @pool:        a pool made with prefix_cache
 * @refs:        @n refs, each as the @ref of kvp_prefix_publish
 * @keys:        @n keys: @keys[i] is the key of @refs[i]
 * @n:           how many blocks (0 is allowed)
 * @status:      NULL, or room for @n results: @status[i] is what
 *               kvp_prefix_publish(@pool, @refs[i], @keys[i]) returned
 * @n_published: NULL, or set to how many blocks this call published
 *
 * Each block is published or not on its own, in order, exactly as by
 * kvp_prefix_publish.  A failure of one block does not stop the others.
 * Two blocks of one batch with the same key: the first is published and
 * the second gets KVP_EEXIST.  The call is cheaper than @n calls: one slot
 * lookup, one read-side section per 64 blocks, and the next blocks'
 * metadata prefetched.
 *
 * Return: KVP_OK when every block was tried (see @status for each);
 * KVP_EINVAL, with no effect, for a NULL @pool, a pool without the prefix
 * cache, or NULL @refs or @keys with @n > 0; KVP_ENOMEM when memory ran out
 * for at least one block (the others were still tried).  Thread-safe, as
 * kvp_prefix_publish.
 */
int kvp_prefix_publish_many(kvp_pool *pool, const kvp_ref *refs, const kvp_hash *keys, size_t n,
                            int *status, size_t *n_published);

/**
 * kvp_free_owned - drop @owner's hold on each block @refs names
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
 * Evicts every cached block and unpublishes held ones.  Held blocks stay
 * held, and are ordinary free blocks once released.
 *
 * Returns the number of blocks it evicted or unpublished; 0 when @pool is
 * NULL or has the prefix cache off.  Thread-safe.  Blocks published or
 * cached while it runs may keep their keys; a key such a block took over
 * from one being evicted may be counted twice.
 */
size_t kvp_prefix_reset(kvp_pool *pool);

#ifdef __cplusplus
}
#endif
#endif /* KVPOOL_PREFIX_H */
