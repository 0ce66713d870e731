/*
 * lib/kvcache/kvcache_internal.h - the kvcache object, shared by the kvcache's files.
 *
 * kvcache.c makes, releases and destroys it, and owns the block tables and
 * the check that a layer's blocks are still held.  kvcache_append.c adds and
 * trims tokens; kvcache_read.c gathers and attends; kvcache_prefix.c adopts
 * and publishes prefixes.
 *
 * A layer is four parallel arrays indexed by block number.  K and V advance
 * in lockstep: block b of a layer holds tokens
 * [b * block_size, (b + 1) * block_size) in both streams, so one count
 * (n_blocks) and one length describe both.
 *
 * Not thread-safe: the table at the top of kvpool/kvcache.h says which
 * calls may overlap.
 */
#ifndef KVPOOL_LIB_KVCACHE_INTERNAL_H
#define KVPOOL_LIB_KVCACHE_INTERNAL_H

#include <kvpool/kvcache.h>

struct kvpi_kvc_layer {
	uint32_t len;      /* tokens */
	uint32_t n_blocks; /* K blocks = V blocks */
	uint32_t cap;      /* table capacity in blocks */
	kvp_ref *kref, *vref;
	const uint8_t **kdata, **vdata;
};

struct kvp_kvcache {
	kvp_pool *pool;
	kvp_storage *ks, *vs;
	kvp_kvcache_config cfg;
	uint32_t block_size, row_dim;
	size_t row_bytes;
	kvp_stream kstream, vstream;
	bool registered;
	size_t blocks_held;
	struct kvpi_kvc_layer *layers;
};

/* kvpi_kvc_blocks_for - the blocks of @bs tokens each that hold @tokens tokens */
static inline uint32_t kvpi_kvc_blocks_for(uint64_t tokens, uint32_t bs)
{
	return (uint32_t)((tokens + bs - 1) / bs);
}

/*
 * kvpi_kvc_table_grow - give @L room for @want blocks
 *
 * Moves the layer's entries to one new allocation (capacity doubled until
 * it fits).  Returns KVP_OK (also when it already had room) or KVP_ENOMEM,
 * which leaves the layer as it was.
 */
int kvpi_kvc_table_grow(struct kvpi_kvc_layer *L, uint32_t want);

/*
 * kvpi_kvc_layer_check - whether the kvcache still holds every block of @L
 *
 * Returns KVP_OK, or KVP_ENOENT when a block was freed behind the kvcache's
 * back: its cached row addresses must then not be read.  One lock-free
 * kvp_block_get per block.
 */
int kvpi_kvc_layer_check(const kvp_kvcache *c, const struct kvpi_kvc_layer *L);

/*
 * kvpi_kvc_cache_rows - cache the row addresses of blocks [@from, @to) after their first write
 *
 * Reads each block's rows from @st into @data.  Returns KVP_OK, an error
 * of kvp_storage_read, or KVP_ENOENT when a block holds no rows in this
 * storage (someone else wrote it in another format).
 */
int kvpi_kvc_cache_rows(kvp_storage *st, const kvp_ref *refs, const uint8_t **data, uint32_t from,
                        uint32_t to);

#endif /* KVPOOL_LIB_KVCACHE_INTERNAL_H */
