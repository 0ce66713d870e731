/*
 * lib/prefix/prefix_lru_ahead.h - the eviction walk's look-ahead hints
 * (lib/prefix/prefix_lru.c, its only user).
 *
 *   function        who may call                  lock held
 *   --------------  ----------------------------  -------------------------
 *   kvpi_ahead_*    the LRU list code             the list's shard mutex
 */
#ifndef KVPOOL_LIB_PREFIX_LRU_AHEAD_H
#define KVPOOL_LIB_PREFIX_LRU_AHEAD_H

#include "lib/prefix/prefix_internal.h"

/*
 * Look-ahead.  An eviction walks its list from the head, and each block's
 * side entry names the next: one cache miss after another, none of which
 * a prefetch one step ahead can overlap (the next id comes with the miss).
 * So each listed block also keeps the id of the block KVPI_LRU_AHEAD after it,
 * in its block table entry's spare word (lib/pool/blocktable.h, lru_ahead),
 * which the walk reads with the state word it loads anyway: it prefetches
 * that block's lines while it claims this one, so KVPI_LRU_AHEAD misses are in
 * flight at once.  Every link sets the hints it changes (below); an unlink
 * sets none, so a block that leaves from the middle of a list leaves its
 * predecessors' hints stale: a wasted prefetch, never a wrong result (the
 * walk only prefetches the hint, and only an id below kvp_pool_n_ids).
 * Written and read under the list's mutex.
 *
 * Two, not four: on the lifecycle benchmark's prefix loop (whole trace, one
 * thread, four alternated --phases runs) four ahead made the allocation no
 * cheaper than two and kvp_free_all dearer (10.99-14.46 against 8.85-13.24
 * wall ns a block): each append writes the hint of a block further back.
 */
#define KVPI_LRU_AHEAD 2u

static inline void kvpi_ahead_set(struct kvpi_prefix *pf, uint32_t id, uint32_t ahead)
{
	kvpi_bt_block(pf->bt, id)->lru_ahead = ahead;
}

/* Shard mutex held; @id just linked on its list: the look-ahead hints of
 * @id and of the KVPI_LRU_AHEAD blocks before it. */
static inline void kvpi_ahead_linked(struct kvpi_prefix *pf, uint32_t id)
{
	uint32_t after[KVPI_LRU_AHEAD + 1]; /* after[j]: j blocks after @id, or none */
	after[0] = id;
	for (uint32_t j = 1; j <= KVPI_LRU_AHEAD; j++)
		after[j] = after[j - 1] == KVPI_NO_ID ? KVPI_NO_ID
		                                      : kvpi_pfx_side(pf, after[j - 1])->lru_next;
	kvpi_ahead_set(pf, id, after[KVPI_LRU_AHEAD]);
	uint32_t x = kvpi_pfx_side(pf, id)->lru_prev;
	for (uint32_t j = 1; j <= KVPI_LRU_AHEAD && x != KVPI_NO_ID; j++) {
		kvpi_ahead_set(pf, x, after[KVPI_LRU_AHEAD - j]);
		x = kvpi_pfx_side(pf, x)->lru_prev;
	}
}

/* Shard mutex held: @back[j] gets the block j before the next append's
 * place (back[0] the tail), or none. */
static inline void kvpi_ahead_tail_back(struct kvpi_prefix *pf, const struct kvpi_plru *l,
                                        uint32_t *back)
{
	back[0] = l->tail;
	for (uint32_t j = 1; j < KVPI_LRU_AHEAD; j++)
		back[j] = back[j - 1] == KVPI_NO_ID ? KVPI_NO_ID
		                                    : kvpi_pfx_side(pf, back[j - 1])->lru_prev;
}

/* Shard mutex held; @id just appended at the tail, @back as
 * kvpi_ahead_tail_back left it before the append: the hints an append
 * changes (@id's none, and the block KVPI_LRU_AHEAD before it @id), and
 * @back moved on by one.  kvpi_ahead_linked for the append of a batch,
 * with the block table's first segment (@seg0, @n0) read once. */
static inline void kvpi_ahead_append(struct kvpi_blocktable *bt, struct kvpi_block *seg0,
                                     uint32_t n0, uint32_t *back, uint32_t id)
{
	kvpi_bt_block_at(bt, seg0, n0, id)->lru_ahead = KVPI_NO_ID;
	if (back[KVPI_LRU_AHEAD - 1] != KVPI_NO_ID)
		kvpi_bt_block_at(bt, seg0, n0, back[KVPI_LRU_AHEAD - 1])->lru_ahead = id;
	for (uint32_t j = KVPI_LRU_AHEAD - 1; j > 0; j--)
		back[j] = back[j - 1];
	back[0] = id;
}

#endif /* KVPOOL_LIB_PREFIX_LRU_AHEAD_H */
