/*
 * lib/kvcache/kvcache_read.c - reading a kvcache: attend, gather and its sizes.
 *
 * Owns: kvp_kvcache_attend, kvp_kvcache_gather, kvp_kvcache_len and
 * kvp_kvcache_blocks_held.  Attend and gather read rows through the cached
 * row addresses, with no call into the pool or the storage.  Each first
 * checks that the layer's blocks are still held (kvpi_kvc_layer_check).
 * Nothing here writes the kvcache.
 *
 * May call: the block tables' check (kvcache.c), the attention kernel
 * (lib/kvcache/kvcache_attend.h) and the codecs (lib/storage/codec.h).  It
 * takes no lock.
 */
#include "lib/kvcache/kvcache_internal.h"

#include "lib/kvcache/kvcache_attend.h"
#include "lib/storage/codec.h"

uint32_t kvp_kvcache_len(const kvp_kvcache *c, uint32_t layer)
{
	return c && layer < c->cfg.n_layers ? c->layers[layer].len : 0;
}

size_t kvp_kvcache_blocks_held(const kvp_kvcache *c)
{
	return c ? c->blocks_held : 0;
}

/* Copy a layer's rows of one stream into (n_kv_heads, len, head_dim). */
static void gather_stream(const kvp_kvcache *c, const struct kvpi_kvc_layer *L,
                          const uint8_t **data, float *out)
{
	uint32_t hd = c->cfg.head_dim, t, h;

	for (t = 0; t < L->len; t++) {
		const uint8_t *row =
		    data[t / c->block_size] + (size_t)(t % c->block_size) * c->row_bytes;
		for (h = 0; h < c->cfg.n_kv_heads; h++)
			kvpi_codec_decode_range(c->cfg.format, out + ((size_t)h * L->len + t) * hd,
			                        row, h * hd, hd);
	}
}

int kvp_kvcache_gather(const kvp_kvcache *c, uint32_t layer, float *k_out, float *v_out)
{
	if (!c || layer >= c->cfg.n_layers || (!k_out && !v_out))
		return KVP_EINVAL;
	if (kvpi_kvc_layer_check(c, &c->layers[layer]) != KVP_OK)
		return KVP_ENOENT;
	if (k_out)
		gather_stream(c, &c->layers[layer], c->layers[layer].kdata, k_out);
	if (v_out)
		gather_stream(c, &c->layers[layer], c->layers[layer].vdata, v_out);
	return KVP_OK;
}

int kvp_kvcache_attend(const kvp_kvcache *c, uint32_t layer, const float *q, uint32_t n_heads,
                       float scale, float *out)
{
	const struct kvpi_kvc_layer *L;
	struct kvpi_attend_src src;

	if (!c || layer >= c->cfg.n_layers || !q || !out || n_heads == 0 ||
	    n_heads % c->cfg.n_kv_heads)
		return KVP_EINVAL;
	L = &c->layers[layer];
	if (L->len == 0)
		return KVP_EINVAL;
	if (kvpi_kvc_layer_check(c, L) != KVP_OK)
		return KVP_ENOENT;
	src.k_blocks = L->kdata;
	src.v_blocks = L->vdata;
	src.block_rows = c->block_size;
	src.len = L->len;
	src.row_bytes = c->row_bytes;
	src.format = c->cfg.format;
	src.n_kv_heads = c->cfg.n_kv_heads;
	src.head_dim = c->cfg.head_dim;
	kvpi_attend_rows(&src, q, n_heads, scale, out);
	return KVP_OK;
}
