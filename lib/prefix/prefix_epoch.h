/*
 * lib/prefix/prefix_epoch.h - which hand-out a block's stored rows belong to.
 *
 * Storage (lib/storage/storage.c) keys its written-rows mark by a block's
 * epoch: the generation of the block's latest fresh hand-out.  In a plain
 * pool every hand-out is fresh, so the epoch is the ref's generation.  In
 * a prefix pool a match that revives a cached block gives it a new
 * generation but the same epoch: its rows are the ones its publisher
 * wrote.  A reset, an eviction of other blocks, a shrink or a growth never
 * changes a held block's epoch, so nothing but its holder changes its rows.
 */
#ifndef KVPOOL_LIB_PREFIX_EPOCH_H
#define KVPOOL_LIB_PREFIX_EPOCH_H

#include <stdint.h>

#include <kvpool/pool.h>

/*
 * kvpi_block_get_epoch - kvp_block_get, and the epoch of @ref's hand-out
 *
 * Returns what kvp_block_get returns; on KVP_OK with the block in use,
 * *@epoch is the epoch of that hand-out (the block was in use under @ref's
 * generation when it was read).  KVP_ENOENT when the block left that
 * hand-out meanwhile.  Lock-free; any thread.
 */
int kvpi_block_get_epoch(kvp_pool *p, kvp_ref ref, kvp_block_info *out, uint32_t *epoch);

#endif /* KVPOOL_LIB_PREFIX_EPOCH_H */
