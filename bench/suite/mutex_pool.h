/*
 * bench/suite/mutex_pool.h - the baseline: the one-mutex block pool design kvpool replaces.
 *
 * One mutex around everything, an owner dictionary (owner id -> its blocks
 * in allocation order), a LIFO free list, per-block generation so stale
 * refs are skipped.  Same calls and meanings as kvpool's kvp_allocate /
 * kvp_free / kvp_free_all (refs are id | generation << 32), so the
 * benchmarks drive both with the same loop.  It is written to be a fair
 * baseline: O(1) per block for every call (owner lists are doubly linked
 * through the block table, the dictionary is an open-addressing hash).
 *
 * Synchronization:
 *
 *   function              concurrent with   locks
 *   --------------------  ----------------  --------------------------
 *   mpool_create/destroy  nothing           -
 *   every other call      everything        the pool's one mutex
 */
#ifndef KVPOOL_BENCH_MUTEX_POOL_H
#define KVPOOL_BENCH_MUTEX_POOL_H

#include <stddef.h>
#include <stdint.h>

typedef struct mpool mpool;

/* mpool_create - a pool of @n_blocks blocks of @block_size tokens; 0 or -1 (ENOMEM/EINVAL) */
int mpool_create(uint32_t block_size, uint32_t n_blocks, mpool **out);
void mpool_destroy(mpool *p);

/*
 * mpool_allocate - ceil(@n_tokens / block_size) blocks to @owner, all or nothing
 * Returns 0, -1 bad argument / refs too small, -2 exhausted, -3 out of memory.
 */
int mpool_allocate(mpool *p, uint32_t n_tokens, uint64_t owner, uint64_t *refs, size_t cap,
                   size_t *n_refs);
/* mpool_free - free blocks; stale or already-free refs are skipped; -1 bad id */
int mpool_free(mpool *p, const uint64_t *refs, size_t n);
/* mpool_free_all - free every block of @owner and release it; -1 unknown owner */
int mpool_free_all(mpool *p, uint64_t owner);
/* mpool_register_owner - make @owner active with no blocks; -1 if already active */
int mpool_register_owner(mpool *p, uint64_t owner);
/* mpool_release_owner - undo a registration (owner stays while it holds blocks) */
int mpool_release_owner(mpool *p, uint64_t owner);
size_t mpool_n_free(mpool *p);

#endif /* KVPOOL_BENCH_MUTEX_POOL_H */
