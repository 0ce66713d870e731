/*
 * lib/kvcache/kvcache.c - a request's paged KV cache: per-layer block tables.
 *
 * Design: a layer is four parallel arrays indexed by block number - the K
 * and V refs (handed to the pool to free or resize blocks) and the K and V
 * row addresses (read by attend and gather with no call into the pool or
 * the storage).  A row address is taken from kvp_storage_read right after
 * the block's first write, and stays valid while the block is held: storage
 * replaces a buffer only on a format change, and a held block's format is
 * the one this kvcache gave it.  Tables grow by doubling (one allocation
 * per layer holding the four arrays), so appending one token at a time
 * allocates nothing but the pool blocks themselves, once per block_size
 * tokens.
 *
 * K and V advance in lockstep: block b of a layer holds tokens
 * [b * block_size, (b + 1) * block_size) in both streams, so one count
 * (n_blocks) and one length describe both.
 *
 * append is all or nothing: new blocks are checked out for both streams
 * first, rows written after; a failing write gives the new blocks back and
 * restores the old last block's n_used.
 *
 * Owner: `registered` says whether this kvcache holds the owner's
 * registration.  release gives it up (kvp_free_all) and takes it again; if
 * another party registered the owner in between, it is theirs: append
 * refuses (KVP_EOWNER) rather than add blocks to their owner, and release
 * and destroy never call kvp_free_all for it.  A kvcache holds blocks only
 * while registered (append needs it; release drops the blocks before the
 * registration), so it never has blocks of its own to free without it.
 *
 * Prefix cache: adopt_prefix matches every layer's K and V keys (derived
 * from the caller's sequence keys, see kvcache.h) straight into the block
 * tables, keeps the shortest match of all layers and streams and drops
 * the extra holds; publish publishes the full blocks under the same
 * derived keys.  A shared block may have other holders, so the kvcache
 * gives blocks back with drop(): kvp_free, and kvp_free_owned for a block
 * kvp_free refuses because it is shared.
 */
#include <kvpool/kvcache.h>
#include <kvpool/prefix.h>

#include <string.h>

#include "lib/storage/codec.h"
#include "lib/kvcache/kvcache_attend.h"
#include "lib/base/sysmem.h"

struct layer {
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
	struct layer *layers;
};

/* bytes of a table of @cap blocks: two ref arrays, then two pointer arrays */
static size_t table_bytes(uint32_t cap)
{
	return (size_t)cap * (2 * sizeof(kvp_ref) + 2 * sizeof(uint8_t *));
}

/* Give @L room for @want blocks, moving its entries to one new allocation. */
static int table_grow(struct layer *L, uint32_t want)
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

static uint32_t blocks_for(uint64_t tokens, uint32_t bs)
{
	return (uint32_t)((tokens + bs - 1) / bs);
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

static int layer_check_block(const kvp_kvcache *c, const struct layer *L, uint32_t b)
{
	return block_ours(c, L->kref[b]) && block_ours(c, L->vref[b]) ? KVP_OK : KVP_ENOENT;
}

static int layer_check(const kvp_kvcache *c, const struct layer *L)
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
	want = blocks_for(n_tokens, c->block_size);
	for (i = 0; i < c->cfg.n_layers; i++)
		if (table_grow(&c->layers[i], want) != KVP_OK)
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

/* Cache the row addresses of blocks [from, to) after their first write. */
static int cache_rows(kvp_storage *st, const kvp_ref *refs, const uint8_t **data, uint32_t from,
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

int kvp_kvcache_append(kvp_kvcache *c, uint32_t layer, const float *k, const float *v,
                       uint32_t n_tokens)
{
	struct layer *L;
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
	/* a layer that lost a block is not added to (see layer_check) */
	if (layer_check(c, L) != KVP_OK)
		return KVP_ENOENT;
	room = (uint32_t)((uint64_t)nb0 * bs - L->len);
	if (room && L->len)
		old_used = L->len - (nb0 - 1) * bs;
	if (n_tokens > room) {
		uint32_t rest = n_tokens - room;
		add = blocks_for(rest, bs);
		rc = table_grow(L, nb0 + add);
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
		rc = cache_rows(c->ks, L->kref, L->kdata, nb0, nb0 + add);
	if (rc == KVP_OK)
		rc = cache_rows(c->vs, L->vref, L->vdata, nb0, nb0 + add);
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

uint32_t kvp_kvcache_len(const kvp_kvcache *c, uint32_t layer)
{
	return c && layer < c->cfg.n_layers ? c->layers[layer].len : 0;
}

size_t kvp_kvcache_blocks_held(const kvp_kvcache *c)
{
	return c ? c->blocks_held : 0;
}

/* Copy a layer's rows of one stream into (n_kv_heads, len, head_dim). */
static void gather_stream(const kvp_kvcache *c, const struct layer *L, const uint8_t **data,
                          float *out)
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
	if (layer_check(c, &c->layers[layer]) != KVP_OK)
		return KVP_ENOENT;
	if (k_out)
		gather_stream(c, &c->layers[layer], c->layers[layer].kdata, k_out);
	if (v_out)
		gather_stream(c, &c->layers[layer], c->layers[layer].vdata, v_out);
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
		const struct layer *L = &c->layers[i];
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
		struct layer *L = &c->layers[i];
		uint32_t cut = n_tokens < L->len ? n_tokens : L->len;
		uint32_t len = L->len - cut, keep = blocks_for(len, bs),
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

int kvp_kvcache_attend(const kvp_kvcache *c, uint32_t layer, const float *q, uint32_t n_heads,
                       float scale, float *out)
{
	const struct layer *L;
	struct kvpi_attend_src src;

	if (!c || layer >= c->cfg.n_layers || !q || !out || n_heads == 0 ||
	    n_heads % c->cfg.n_kv_heads)
		return KVP_EINVAL;
	L = &c->layers[layer];
	if (L->len == 0)
		return KVP_EINVAL;
	if (layer_check(c, L) != KVP_OK)
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

/* --- prefix cache ---------------------------------------------------------------- */

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
		struct layer *L = &c->layers[i];
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
	struct layer *L = &c->layers[i];
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
		struct layer *L = &c->layers[i];
		rc = cache_rows(c->ks, L->kref, L->kdata, 0, m);
		if (rc == KVP_OK)
			rc = cache_rows(c->vs, L->vref, L->vdata, 0, m);
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
		struct layer *L = &c->layers[i];
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
