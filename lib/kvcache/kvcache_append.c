/*
 * lib/kvcache/kvcache_append.c - adding tokens to a kvcache and trimming them.
 *
 * Owns: kvp_kvcache_append and kvp_kvcache_trim, the two calls that move a
 * layer's length.  Append checks out new blocks and writes rows into them.
 * Trim gives back the blocks past the new length and sets the last one's
 * n_used.
 *
 * May call: the pool (kvp_allocate, kvp_free, kvp_free_owned,
 * kvp_block_set_used, kvp_block_get), the storage's writes, and the block
 * tables of kvcache.c.  It takes no lock.
 *
 * append is all or nothing: new blocks are checked out for both streams
 * first, rows written after; a failing write gives the new blocks back and
 * restores the old last block's n_used.
 *
 * Trim checks every layer before it changes any: it refuses to leave a
 * shared block partly used.  A shared block may have other holders, so the
 * kvcache gives blocks back with drop(): kvp_free, and kvp_free_owned for a
 * block kvp_free refuses because it is shared.
 */
#include "lib/kvcache/kvcache_internal.h"

/* Write tokens [t0, t0 + n) of @rows (the layer's tokens len0 + t0 ...) into the layer's blocks. */
static int write_rows(kvp_kvcache *c, kvp_storage *st, const kvp_ref *refs, uint32_t len0,
                      const float *rows, uint32_t n)
{
	uint32_t t = 0, bs = c->block_size;
	int rc;

	while (t < n) {
		uint32_t pos = len0 + t, off = pos % bs, cnt = bs - off < n - t ? bs - off : n - t;
		rc = kvp_storage_write(st, refs[pos / bs], off, rows + (size_t)t * c->row_dim, cnt);
		if (rc != KVP_OK)
			return rc;
		t += cnt;
	}
	return KVP_OK;
}

int kvp_kvcache_append(kvp_kvcache *c, uint32_t layer, const float *k, const float *v,
                       uint32_t n_tokens)
{
	struct kvpi_kvc_layer *L;
	uint32_t bs, room, nb0, add = 0, old_used = 0;
	size_t got;
	int rc;

	if (!c || layer >= c->cfg.n_layers || !k || !v || n_tokens == 0)
		return KVP_EINVAL;
	if (!c->registered)
		return KVP_EOWNER; /* lost in release: blocks would go to another party */
	L = &c->layers[layer];
	bs = c->block_size;
	if (n_tokens > UINT32_MAX - L->len)
		return KVP_ERANGE;
	nb0 = L->n_blocks;
	/* a layer that lost a block is not added to (see kvpi_kvc_layer_check) */
	if (kvpi_kvc_layer_check(c, L) != KVP_OK)
		return KVP_ENOENT;
	room = (uint32_t)((uint64_t)nb0 * bs - L->len);
	if (room && L->len)
		old_used = L->len - (nb0 - 1) * bs;
	if (n_tokens > room) {
		uint32_t rest = n_tokens - room;
		add = kvpi_kvc_blocks_for(rest, bs);
		rc = kvpi_kvc_table_grow(L, nb0 + add);
		if (rc != KVP_OK)
			return rc;
		rc = kvp_allocate(c->pool, c->kstream, rest, c->cfg.owner, c->cfg.format,
		                  L->kref + nb0, L->cap - nb0, &got);
		if (rc != KVP_OK)
			return rc;
		rc = kvp_allocate(c->pool, c->vstream, rest, c->cfg.owner, c->cfg.format,
		                  L->vref + nb0, L->cap - nb0, &got);
		if (rc != KVP_OK) {
			kvp_free(c->pool, L->kref + nb0, add);
			return rc;
		}
	}
	rc = write_rows(c, c->ks, L->kref, L->len, k, n_tokens);
	if (rc == KVP_OK)
		rc = write_rows(c, c->vs, L->vref, L->len, v, n_tokens);
	if (rc == KVP_OK)
		rc = kvpi_kvc_cache_rows(c->ks, L->kref, L->kdata, nb0, nb0 + add);
	if (rc == KVP_OK)
		rc = kvpi_kvc_cache_rows(c->vs, L->vref, L->vdata, nb0, nb0 + add);
	if (rc != KVP_OK) {
		if (add) {
			kvp_free(c->pool, L->kref + nb0, add);
			kvp_free(c->pool, L->vref + nb0, add);
		}
		if (old_used) { /* the rows past it are garbage nobody reads */
			kvp_block_set_used(c->pool, L->kref[nb0 - 1], old_used);
			kvp_block_set_used(c->pool, L->vref[nb0 - 1], old_used);
		}
		return rc;
	}
	L->n_blocks = nb0 + add;
	L->len += n_tokens;
	c->blocks_held += 2 * (size_t)add;
	return KVP_OK;
}

/* Give back the kvcache's hold on @n blocks: kvp_free, or kvp_free_owned
 * when kvp_free refuses because a block is shared (it then freed nothing). */
static int drop(kvp_kvcache *c, const kvp_ref *refs, size_t n)
{
	int rc = kvp_free(c->pool, refs, n);

	if (rc == KVP_EINVAL)
		rc = kvp_free_owned(c->pool, c->cfg.owner, refs, n);
	return rc;
}

/* Would trimming @n_tokens leave a shared block (published, or held by two
 * or more owners) partly used (its n_used cannot change)?  Checked for
 * every layer before anything changes. */
static bool trim_cuts_published(const kvp_kvcache *c, uint32_t n_tokens)
{
	uint32_t i, bs = c->block_size;

	for (i = 0; i < c->cfg.n_layers; i++) {
		const struct kvpi_kvc_layer *L = &c->layers[i];
		uint32_t cut = n_tokens < L->len ? n_tokens : L->len, len = L->len - cut;
		kvp_block_info info;
		if (!cut || !(len % bs))
			continue;
		if (kvp_block_get(c->pool, L->kref[len / bs], &info) == KVP_OK &&
		    (info.published || info.n_holders >= 2))
			return true;
		if (kvp_block_get(c->pool, L->vref[len / bs], &info) == KVP_OK &&
		    (info.published || info.n_holders >= 2))
			return true;
	}
	return false;
}

int kvp_kvcache_trim(kvp_kvcache *c, uint32_t n_tokens)
{
	uint32_t i, bs;
	int first = KVP_OK;

	if (!c)
		return KVP_EINVAL;
	if (trim_cuts_published(c, n_tokens))
		return KVP_EINVAL;
	bs = c->block_size;
	for (i = 0; i < c->cfg.n_layers; i++) {
		struct kvpi_kvc_layer *L = &c->layers[i];
		uint32_t cut = n_tokens < L->len ? n_tokens : L->len;
		uint32_t len = L->len - cut, keep = kvpi_kvc_blocks_for(len, bs),
		         n_drop = L->n_blocks - keep;
		int rc = KVP_OK;
		if (!cut)
			continue;
		if (n_drop) {
			rc = drop(c, L->kref + keep, n_drop);
			if (rc == KVP_OK)
				rc = drop(c, L->vref + keep, n_drop);
		}
		if (rc == KVP_OK && keep && len % bs) {
			rc = kvp_block_set_used(c->pool, L->kref[keep - 1], len % bs);
			if (rc == KVP_OK)
				rc = kvp_block_set_used(c->pool, L->vref[keep - 1], len % bs);
		}
		if (rc != KVP_OK && first == KVP_OK)
			first = rc;
		L->len = len;
		L->n_blocks = keep;
		c->blocks_held -= 2 * (size_t)n_drop;
	}
	return first;
}
