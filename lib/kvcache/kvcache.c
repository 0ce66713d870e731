/*
 * lib/kvcache/kvcache.c - a request's paged KV cache: the object and its block tables.
 *
 * Owns: kvp_kvcache_create, kvp_kvcache_reserve, kvp_kvcache_release and
 * kvp_kvcache_destroy.  Owns the per-layer block tables: their growth
 * (kvpi_kvc_table_grow) and their cached row addresses
 * (kvpi_kvc_cache_rows).  Owns the check that a layer's blocks are still
 * held (kvpi_kvc_layer_check), which append, gather and attend make first.
 * Owns the owner's registration (below).
 *
 * May call: the pool (owner registration, kvp_free_all, kvp_block_get), the
 * storage's reads, the codecs' row sizes (lib/storage/codec.h) and the
 * system door.  It takes no lock.
 *
 * Design: a layer is four parallel arrays indexed by block number.  Two
 * are the K and V refs, handed to the pool to free or resize blocks.  Two
 * are the K and V row addresses, read by attend and gather with no call
 * into the pool or the storage.  A row address is taken from
 * kvp_storage_read right after the block's first write.  It stays valid
 * while the block is held: storage replaces a buffer only on a format
 * change.  A held block's format is the one this kvcache gave it.  Tables
 * grow by doubling, one allocation per layer holding the four arrays.  So
 * appending one token at a time allocates nothing but the pool blocks
 * themselves, once per block_size tokens.
 *
 * Owner: `registered` says whether this kvcache holds the owner's
 * registration.  Release gives it up (kvp_free_all) and takes it again.  If
 * another party registered the owner in between, it is theirs.  Append then
 * refuses (KVP_EOWNER) rather than add blocks to their owner.  Release and
 * destroy never call kvp_free_all for it.  A kvcache holds blocks only while
 * registered: append needs it, and release drops the blocks before the
 * registration.  So it never has blocks of its own to free without it.
 */
#include "lib/kvcache/kvcache_internal.h"

#include <string.h>

#include "lib/storage/codec.h"
#include "lib/base/sysmem.h"

/* bytes of a table of @cap blocks: two ref arrays, then two pointer arrays */
static size_t table_bytes(uint32_t cap)
{
	return (size_t)cap * (2 * sizeof(kvp_ref) + 2 * sizeof(uint8_t *));
}

/* Give @L room for @want blocks, moving its entries to one new allocation. */
int kvpi_kvc_table_grow(struct kvpi_kvc_layer *L, uint32_t want)
{
	uint32_t cap = L->cap ? L->cap : 1;
	uint8_t *mem;
	kvp_ref *kref;

	if (want <= L->cap)
		return KVP_OK;
	while (cap < want)
		cap = cap > UINT32_MAX / 2 ? want : cap * 2;
	mem = kvpi_sys_alloc(table_bytes(cap), 64);
	if (!mem)
		return KVP_ENOMEM;
	kref = (kvp_ref *)mem;
	if (L->n_blocks) {
		memcpy(kref, L->kref, (size_t)L->n_blocks * sizeof(kvp_ref));
		memcpy(kref + cap, L->vref, (size_t)L->n_blocks * sizeof(kvp_ref));
		memcpy(mem + 2 * (size_t)cap * sizeof(kvp_ref), L->kdata,
		       (size_t)L->n_blocks * sizeof(uint8_t *));
		memcpy(mem + 2 * (size_t)cap * sizeof(kvp_ref) + (size_t)cap * sizeof(uint8_t *),
		       L->vdata, (size_t)L->n_blocks * sizeof(uint8_t *));
	}
	kvpi_sys_free(L->kref); /* the old allocation starts at kref (NULL at first) */
	L->kref = kref;
	L->vref = kref + cap;
	L->kdata = (const uint8_t **)(mem + 2 * (size_t)cap * sizeof(kvp_ref));
	L->vdata = L->kdata + cap;
	L->cap = cap;
	return KVP_OK;
}

/* Cache the row addresses of blocks [from, to) after their first write. */
int kvpi_kvc_cache_rows(kvp_storage *st, const kvp_ref *refs, const uint8_t **data, uint32_t from,
                        uint32_t to)
{
	const void *p;
	uint32_t b, n;

	for (b = from; b < to; b++) {
		int rc = kvp_storage_read(st, refs[b], &p, &n);
		if (rc != KVP_OK)
			return rc;
		if (!p)
			return KVP_ENOENT; /* someone else wrote the block in another format */
		data[b] = p;
	}
	return KVP_OK;
}

/*
 * Check that the kvcache still holds every block of @L: each ref current
 * (generation), in use, by this kvcache's owner (or published, see
 * block_ours), in its format.  A block
 * freed behind the kvcache's back (kvp_free_all of its owner, kvp_free of
 * its refs) may since have been handed to another request or retired, its
 * buffer released: the cached row addresses must then not be read.  One
 * lock-free kvp_block_get per block, against attend's len * row_dim work.
 * The check cannot stop a block being freed by another thread while the
 * caller reads it (the table at the top of kvcache.h rules that out).
 */
static bool block_ours(const kvp_kvcache *c, kvp_ref ref)
{
	kvp_block_info info;

	/* A shared block (published, or held by two or more owners, also once
	 * a reset unpublished it) may have several holders, and kvp_block_get
	 * names only one of them: for it, a current generation and in_use
	 * prove that someone still holds it, so its buffer is live and its
	 * rows are fixed (the published contents this kvcache adopted or
	 * wrote; kvpool/storage.h). */
	return kvp_block_get(c->pool, ref, &info) == KVP_OK && info.in_use &&
	       (info.owner == c->cfg.owner || info.published || info.n_holders >= 2) &&
	       info.format == c->cfg.format;
}

static int layer_check_block(const kvp_kvcache *c, const struct kvpi_kvc_layer *L, uint32_t b)
{
	return block_ours(c, L->kref[b]) && block_ours(c, L->vref[b]) ? KVP_OK : KVP_ENOENT;
}

int kvpi_kvc_layer_check(const kvp_kvcache *c, const struct kvpi_kvc_layer *L)
{
	uint32_t b;

	for (b = 0; b < L->n_blocks; b++)
		if (layer_check_block(c, L, b) != KVP_OK)
			return KVP_ENOENT;
	return KVP_OK;
}

int kvp_kvcache_reserve(kvp_kvcache *c, uint32_t n_tokens)
{
	uint32_t want, i;

	if (!c)
		return KVP_EINVAL;
	want = kvpi_kvc_blocks_for(n_tokens, c->block_size);
	for (i = 0; i < c->cfg.n_layers; i++)
		if (kvpi_kvc_table_grow(&c->layers[i], want) != KVP_OK)
			return KVP_ENOMEM; /* grown tables stay grown: only capacity changed */
	return KVP_OK;
}

int kvp_kvcache_create(kvp_pool *pool, kvp_storage *k_store, kvp_storage *v_store,
                       const kvp_kvcache_config *cfg, kvp_kvcache **out)
{
	kvp_kvcache *c;
	uint64_t row_dim;
	uint32_t i;
	int rc;

	if (!pool || !k_store || !v_store || !cfg || !out || !cfg->n_layers || !cfg->n_kv_heads ||
	    !cfg->head_dim || !kvpi_codec_supported(cfg->format))
		return KVP_EINVAL;
	row_dim = (uint64_t)cfg->n_kv_heads * cfg->head_dim;
	if (row_dim > (1u << 30) || kvp_storage_pool(k_store) != pool ||
	    kvp_storage_pool(v_store) != pool || kvp_storage_row_dim(k_store) != row_dim ||
	    kvp_storage_row_dim(v_store) != row_dim)
		return KVP_EINVAL;
	c = kvpi_sys_calloc(1, sizeof *c, 64);
	if (!c)
		return KVP_ENOMEM;
	c->layers = kvpi_sys_calloc(cfg->n_layers, sizeof *c->layers, 64);
	if (!c->layers) {
		kvpi_sys_free(c);
		return KVP_ENOMEM;
	}
	c->pool = pool;
	c->ks = k_store;
	c->vs = v_store;
	c->cfg = *cfg;
	c->block_size = kvp_pool_block_size(pool);
	c->row_dim = (uint32_t)row_dim;
	c->row_bytes = kvpi_codec_row_bytes(cfg->format, c->row_dim);
	c->kstream = kvp_pool_separate_kv(pool) ? KVP_K : KVP_KV;
	c->vstream = kvp_pool_separate_kv(pool) ? KVP_V : KVP_KV;
	rc = kvp_kvcache_reserve(c, KVP_KVCACHE_INITIAL_BLOCKS * c->block_size);
	if (rc == KVP_OK)
		rc = kvp_register_owner(pool, cfg->owner);
	if (rc != KVP_OK) {
		for (i = 0; i < cfg->n_layers; i++)
			kvpi_sys_free(c->layers[i].kref);
		kvpi_sys_free(c->layers);
		kvpi_sys_free(c);
		return rc;
	}
	c->registered = true;
	*out = c;
	return KVP_OK;
}

void kvp_kvcache_release(kvp_kvcache *c)
{
	uint32_t i;

	if (!c)
		return;
	/* only our own registration: the owner may be another party's now */
	if (c->registered)
		kvp_free_all(c->pool, c->cfg.owner); /* frees the blocks, releases the owner */
	for (i = 0; i < c->cfg.n_layers; i++)
		c->layers[i].len = c->layers[i].n_blocks = 0;
	c->blocks_held = 0;
	/* take the owner again: fails (and append then refuses) if another
	 * party registered it since, or still holds it */
	c->registered = kvp_register_owner(c->pool, c->cfg.owner) == KVP_OK;
}

void kvp_kvcache_destroy(kvp_kvcache *c)
{
	uint32_t i;

	if (!c)
		return;
	if (c->registered) /* else the owner, and its blocks, are someone else's */
		kvp_free_all(c->pool, c->cfg.owner);
	for (i = 0; i < c->cfg.n_layers; i++)
		kvpi_sys_free(c->layers[i].kref);
	kvpi_sys_free(c->layers);
	kvpi_sys_free(c);
}
