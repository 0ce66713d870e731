/*
 * lib/kvcache/kvcache_prefix.c - a kvcache's side of the prefix cache.
 *
 * Owns: kvp_kvcache_adopt_prefix and kvp_kvcache_publish, and the per-layer
 * keys both derive from the caller's sequence keys (layer_key).  Adopt
 * fills an empty kvcache's tables with matched blocks.  Publish offers the
 * full blocks under the same keys.
 *
 * May call: the prefix cache (kvpool/prefix.h), the pool (kvp_free_owned,
 * kvp_block_get), the block tables of kvcache.c (kvp_kvcache_reserve,
 * kvpi_kvc_cache_rows) and the system door.  It takes no lock.
 *
 * Design: adopt_prefix matches every layer's K and V keys (derived
 * from the caller's sequence keys, see kvcache.h) straight into the block
 * tables, keeps the shortest match of all layers and streams and drops
 * the extra holds; publish publishes the full blocks under the same
 * derived keys.
 */
#include "lib/kvcache/kvcache_internal.h"

#include <kvpool/prefix.h>

#include "lib/base/sysmem.h"

/* The key of one layer's K (@v false) or V block from the sequence key
 * @seq: kvp_prefix_hash(seq, 0, layer as u32 LE | 0 for K, 1 for V as u32 LE). */
static int layer_key(const kvp_hash *seq, uint32_t layer, bool v, kvp_hash *out)
{
	uint8_t t[8];

	for (int i = 0; i < 4; i++) {
		t[i] = (uint8_t)(layer >> (8 * i));
		t[4 + i] = 0;
	}
	t[4] = v ? 1 : 0;
	return kvp_prefix_hash(seq, 0, t, sizeof t, out);
}

static int layer_keys(const kvp_hash *seq, size_t n, uint32_t layer, bool v, kvp_hash *out)
{
	for (size_t i = 0; i < n; i++) {
		int rc = layer_key(&seq[i], layer, v, &out[i]);
		if (rc != KVP_OK)
			return rc;
	}
	return KVP_OK;
}

/* Drop the holds adopt_prefix took: blocks [from, got) of each stream of
 * the first @n_layers layers (the matched counts are in n_blocks/len). */
static void adopt_undo(kvp_kvcache *c, uint32_t n_layers, const uint32_t *got_k,
                       const uint32_t *got_v, uint32_t from)
{
	for (uint32_t i = 0; i < n_layers; i++) {
		struct kvpi_kvc_layer *L = &c->layers[i];
		if (got_k[i] > from)
			kvp_free_owned(c->pool, c->cfg.owner, L->kref + from, got_k[i] - from);
		if (got_v[i] > from)
			kvp_free_owned(c->pool, c->cfg.owner, L->vref + from, got_v[i] - from);
	}
}

/* Match layer @i's K then V blocks for the first *@m keys; lowers *@m to
 * the shorter match.  On failure the layer holds nothing it matched. */
static int adopt_layer(kvp_kvcache *c, uint32_t i, const kvp_hash *keys, kvp_hash *dk, uint32_t *m,
                       uint32_t *got_k, uint32_t *got_v)
{
	struct kvpi_kvc_layer *L = &c->layers[i];
	size_t n = 0;
	int rc;

	*got_k = *got_v = 0;
	rc = layer_keys(keys, *m, i, false, dk);
	if (rc == KVP_OK)
		rc = kvp_prefix_match(c->pool, c->kstream, c->cfg.format, dk, *m, c->cfg.owner,
		                      L->kref, L->cap, &n);
	if (rc != KVP_OK)
		return rc;
	*got_k = (uint32_t)n;
	*m = *got_k < *m ? *got_k : *m;
	if (!*m)
		return KVP_OK;
	rc = layer_keys(keys, *m, i, true, dk);
	if (rc == KVP_OK)
		rc = kvp_prefix_match(c->pool, c->vstream, c->cfg.format, dk, *m, c->cfg.owner,
		                      L->vref, L->cap, &n);
	if (rc != KVP_OK) {
		kvp_free_owned(c->pool, c->cfg.owner, L->kref, *got_k);
		*got_k = 0;
		return rc;
	}
	*got_v = (uint32_t)n;
	*m = *got_v < *m ? *got_v : *m;
	return KVP_OK;
}

int kvp_kvcache_adopt_prefix(kvp_kvcache *c, const kvp_hash *keys, size_t n_keys,
                             uint32_t *n_tokens)
{
	kvp_hash *dk = NULL;
	uint32_t *got = NULL, *got_k, *got_v, i, m, done = 0;
	int rc = KVP_OK;

	if (!c || (!keys && n_keys) || !n_tokens)
		return KVP_EINVAL;
	if (!c->registered)
		return KVP_EOWNER;
	for (i = 0; i < c->cfg.n_layers; i++)
		if (c->layers[i].len)
			return KVP_EINVAL;
	*n_tokens = 0;
	if (n_keys > UINT32_MAX / c->block_size)
		n_keys = UINT32_MAX / c->block_size; /* a layer holds at most 2^32 - 1 tokens */
	if (n_keys == 0)
		return KVP_OK;
	if (kvp_kvcache_reserve(c, (uint32_t)n_keys * c->block_size) != KVP_OK)
		return KVP_ENOMEM;
	dk = kvpi_sys_alloc(n_keys * sizeof *dk, 64);
	got = kvpi_sys_calloc(2 * (size_t)c->cfg.n_layers, sizeof *got, 64);
	if (!dk || !got) {
		kvpi_sys_free(dk);
		kvpi_sys_free(got);
		return KVP_ENOMEM;
	}
	got_k = got;
	got_v = got + c->cfg.n_layers;
	m = (uint32_t)n_keys; /* the shortest match so far: later layers ask no more */
	for (i = 0; i < c->cfg.n_layers && m; i++) {
		rc = adopt_layer(c, i, keys, dk, &m, &got_k[i], &got_v[i]);
		done = i + 1;
		if (rc != KVP_OK) {
			adopt_undo(c, done, got_k, got_v, 0);
			goto out;
		}
	}
	adopt_undo(c, done, got_k, got_v, m); /* holds past the shortest match */
	for (i = 0; i < c->cfg.n_layers && m; i++) {
		struct kvpi_kvc_layer *L = &c->layers[i];
		rc = kvpi_kvc_cache_rows(c->ks, L->kref, L->kdata, 0, m);
		if (rc == KVP_OK)
			rc = kvpi_kvc_cache_rows(c->vs, L->vref, L->vdata, 0, m);
		if (rc != KVP_OK) /* published in another storage: not ours to read */
			break;
	}
	if (rc != KVP_OK) {
		for (i = 0; i < c->cfg.n_layers; i++)
			got_k[i] = got_v[i] = m;
		adopt_undo(c, c->cfg.n_layers, got_k, got_v, 0);
		goto out;
	}
	for (i = 0; i < c->cfg.n_layers && m; i++) {
		c->layers[i].n_blocks = m;
		c->layers[i].len = m * c->block_size;
	}
	c->blocks_held += 2 * (size_t)m * c->cfg.n_layers;
	*n_tokens = m * c->block_size;
out:
	kvpi_sys_free(dk);
	kvpi_sys_free(got);
	return rc;
}

int kvp_kvcache_publish(kvp_kvcache *c, const kvp_hash *keys, size_t n_keys, size_t *n_published)
{
	kvp_hash *dk;
	size_t count = 0;
	int rc = KVP_OK;

	if (!c || (!keys && n_keys) || !n_published)
		return KVP_EINVAL;
	*n_published = 0;
	dk = n_keys ? kvpi_sys_alloc(n_keys * sizeof *dk, 64) : NULL;
	if (n_keys && !dk)
		return KVP_ENOMEM;
	for (uint32_t i = 0; i < c->cfg.n_layers && rc == KVP_OK; i++) {
		struct kvpi_kvc_layer *L = &c->layers[i];
		size_t full = L->len / c->block_size, n = n_keys < full ? n_keys : full;
		for (int v = 0; v < 2 && rc == KVP_OK; v++) {
			const kvp_ref *refs = v ? L->vref : L->kref;
			rc = layer_keys(keys, n, i, v, dk);
			for (size_t b = 0; b < n && rc == KVP_OK; b++) {
				kvp_block_info info;
				rc = kvp_block_get(c->pool, refs[b], &info);
				if (rc != KVP_OK || info.published)
					continue; /* adopted, or published before */
				rc = kvp_prefix_publish(c->pool, refs[b], dk[b]);
				if (rc == KVP_OK)
					count++;
				else if (rc == KVP_EEXIST) /* another block has that content */
					rc = KVP_OK;
			}
		}
	}
	kvpi_sys_free(dk);
	*n_published = count;
	return rc;
}
