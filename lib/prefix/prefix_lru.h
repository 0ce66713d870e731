/*
 * lib/prefix/prefix_lru.h - the LRU lists of cached blocks and eviction
 * (prefix_lru.c): listing a block as it is cached, claiming the least
 * recently cached for an allocation, and committing or undoing the claim.
 *
 * Included by lib/prefix/prefix_internal.h after the structures it names;
 * prefix_lru.c has the design and what it promises, prefix_internal.h the
 * lock order and the synchronization table of the whole prefix cache.
 */
#ifndef KVPOOL_LIB_PREFIX_LRU_H
#define KVPOOL_LIB_PREFIX_LRU_H

void kvpi_pfx_lru_init(struct kvpi_prefix *pf);
void kvpi_pfx_lru_destroy(struct kvpi_prefix *pf);
/* Put @id at the tail of the calling thread's list (block locked); one on another's stays. */
void kvpi_pfx_lru_insert(struct kvpi_prefix *pf, const struct kvpi_tslot *s, int si, uint32_t id);
/* kvpi_pfx_lru_insert for @n blocks (each locked), in order, under one
 * take of the shard mutex. */
void kvpi_pfx_lru_insert_many(struct kvpi_prefix *pf, const struct kvpi_tslot *s, int si,
                              const uint32_t *ids, uint32_t n);
/* Take @id off its list if it is on one (block locked). */
void kvpi_pfx_lru_unlink(struct kvpi_prefix *pf, int si, uint32_t id);
uint64_t kvpi_pfx_n_cached(struct kvpi_prefix *pf, int si);
/*
 * Evict cached blocks of stream @si in two steps, for a request that may
 * still fail.  Each block is the least recently cached of the calling
 * thread's shard or of the stream (kvpool/prefix.h).  Call in a read-side
 * section.
 *
 *   1. Claim up to @n blocks: EVICTING, off their lists, keys kept.  A
 *      match that finds one meanwhile misses; a publish of its key takes
 *      the key over.
 *   2. Either commit them, or give them back.  Commit forgets the keys and
 *      leaves the state words plain free, held by the caller on no list.
 *      Giving back (unclaim) leaves them as they were: same list, same
 *      caching time, findable again; a block whose key was taken over is
 *      evicted instead.
 */
uint32_t kvpi_pfx_claim(struct kvp_pool *p, struct kvpi_tslot *s, int si, uint32_t *ids,
                        uint32_t n);
void kvpi_pfx_commit(struct kvp_pool *p, struct kvpi_tslot *s, int si, const uint32_t *ids,
                     uint32_t n);
/* Commit without the cached count: the caller takes @n off it
 * (kvpi_pfx_count_one) once the blocks are pushed on the free stack. */
void kvpi_pfx_commit_uncounted(struct kvp_pool *p, struct kvpi_tslot *s, const uint32_t *ids,
                               uint32_t n);
/* Evict up to @n cached blocks: onto the free stack (reset, shrink), or
 * with @own into the calling thread's magazine when it has room (evicting
 * ahead; kvpi_put_blocks).  Put there before the cached count drops.
 * Returns how many. */
uint32_t kvpi_pfx_evict_free(struct kvp_pool *p, struct kvpi_tslot *s, int si, uint32_t *ids,
                             uint32_t n, bool own);
/*
 * Unclaim: @resets0 is prefix.resets as read (acquire) before the claim.
 * A reset may have run or begun since then.  It may then have passed the
 * claimed blocks over, since they were on no list.  So they are evicted
 * instead, as the reset would have: keys forgotten, counted, pushed on the
 * free stack.  A block whose key a publish took over while it was claimed
 * (lib/prefix/prefix_index.c, "Taking over") is evicted so too; the rest
 * become CACHED again, each under its index shard's mutex, so no publish
 * takes a key over from a block that is cached again.
 */
void kvpi_pfx_unclaim(struct kvp_pool *p, struct kvpi_tslot *s, int si, uint32_t *ids, uint32_t n,
                      uint64_t resets0);

#endif /* KVPOOL_LIB_PREFIX_LRU_H */
