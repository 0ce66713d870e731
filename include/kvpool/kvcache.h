/*
 * kvpool/kvcache.h - a request's paged KV cache over pool blocks.
 *
 * One kvcache holds the K and V rows of one request for every layer of a
 * model.  All its blocks belong to one pool owner, cfg->owner (as with
 * build_pooled_caches in python/kvpool).  K blocks come from stream KVP_K
 * and V blocks from KVP_V.  When the pool has no separate_kv, both come
 * from the one KVP_KV list.  Their rows live in two storages, k_store and
 * v_store, which may be the same storage.  A token's row is its
 * n_kv_heads * head_dim elements, and the storages' row_dim must equal
 * that.
 *
 * Block tables.  Per layer a block table lists the layer's blocks in token
 * order.  Token t of the layer is row t % block_size of block
 * t / block_size.  An append checks out blocks only when the last one is
 * full, never per token.  It makes one kvp_allocate per stream for all the
 * blocks it needs.  The table itself grows geometrically;
 * kvp_kvcache_reserve makes room up front.  Attend and gather read rows in
 * place from the storages' buffers.  They go through pointers the table
 * caches when a block is first written.
 *
 * Owner.  Create registers cfg->owner with the pool (kvp_register_owner).
 * So two kvcaches can never share an owner: the second create is
 * KVP_EOWNER.  The owner stays registered until destroy, except for a
 * moment in release.
 *
 * Blocks lost to another party.  The kvcache assumes nobody else frees or
 * writes its blocks.  Three calls by another party break it:
 * kvp_free_all(owner), kvp_free of its refs, and kvp_allocate for the same
 * owner.  It never reads a block it lost that way.  Before reading, attend
 * and gather check every block of the layer: its generation, owner and
 * format.  Append checks likewise before writing.  On a lost block they
 * return KVP_ENOENT; release or destroy the kvcache then.  Freeing its
 * blocks from another thread while attend or gather runs is outside that
 * check, and outside the table below.
 *
 * Release and the registration.  Release and destroy call
 * kvp_free_all(owner), so every block of every layer goes back in one pool
 * call.  Release then registers the owner again.  Another party may
 * register it in that moment, or hold it when a later release tries.  The
 * owner is then theirs, and the kvcache holds no registration.  Append then
 * returns KVP_EOWNER.  Release and destroy then free nothing, never another
 * party's blocks.  This lasts until a release finds the owner free and
 * takes it back.
 *
 * Synchronization:
 *
 *   function                           may run concurrently with
 *   ---------------------------------  -----------------------------------------
 *   kvp_kvcache_create                 everything
 *   kvp_kvcache_append / trim /        nothing else on the same kvcache;
 *   reserve / release / destroy /      anything on other kvcaches, the pool and
 *   adopt_prefix / publish             the storages (including kvp_shrink),
 *                                      also kvcaches sharing its blocks
 *   kvp_kvcache_attend / gather /      each other on the same kvcache (read-only);
 *   len / blocks_held                  not append, trim, release, destroy
 *
 * A kvcache is one request's.  Drive it from one thread at a time, and hand
 * it between threads with the usual synchronization.  Many requests on many
 * threads, each with its own kvcache, share one pool and one storage per
 * stream.  They share no lock but the pool's owner shard mutex, taken when
 * blocks are checked out or returned.  No call allocates per token.
 * Attend and gather allocate nothing and take no lock.
 *
 * Formats.  cfg->format is any format with a codec: fp32, fp16, bf16, int8
 * or int4 (see storage.h).  Attend and gather decode rows on the fly.  The
 * int8 and int4 formats refuse inf/NaN: append returns KVP_EINVAL and
 * appends nothing.
 */
#ifndef KVPOOL_KVCACHE_H
#define KVPOOL_KVCACHE_H

#include <stddef.h>
#include <stdint.h>

#include <kvpool/pool.h>
#include <kvpool/prefix.h>
#include <kvpool/storage.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvp_kvcache kvp_kvcache;

typedef struct kvp_kvcache_config {
	uint32_t n_layers, n_kv_heads, head_dim;
	kvp_format format; /* how K and V are stored */
	kvp_owner owner;   /* one owner for every layer of the request */
} kvp_kvcache_config;

/* Blocks per layer the block tables hold from create on (they grow past it). */
#define KVP_KVCACHE_INITIAL_BLOCKS 64u

/**
 * kvp_kvcache_create - make an empty kvcache
 * @pool:    the pool blocks come from
 * @k_store: storage for K rows, made on @pool
 * @v_store: likewise for V rows (may be @k_store)
 * @cfg:     layers, heads, head size, format and owner
 * @out:     the new kvcache
 *
 * Both storages must have row_dim n_kv_heads * head_dim.
 *
 * Returns:
 *   - KVP_OK;
 *   - KVP_EINVAL (NULL args, a zero count, a format without codec, a
 *     storage of another pool or with another row_dim, or
 *     n_kv_heads * head_dim above 2^30);
 *   - KVP_EOWNER (cfg->owner is active in the pool);
 *   - KVP_ENOMEM.
 *
 * Thread-safe.
 */
int kvp_kvcache_create(kvp_pool *pool, kvp_storage *k_store, kvp_storage *v_store,
                       const kvp_kvcache_config *cfg, kvp_kvcache **out);

/**
 * kvp_kvcache_destroy - release the blocks of @c, unregister its owner, free it
 *
 * The kvcache may no longer hold the owner's registration (lost in
 * release).  The owner and its blocks then belong to another party and are
 * left alone.  NULL is a no-op.  Nothing else may run on @c (see the
 * table).
 */
void kvp_kvcache_destroy(kvp_kvcache *c);

/**
 * kvp_kvcache_append - add tokens to one layer
 * @c:        the kvcache
 * @layer:    0 .. n_layers - 1
 * @k:        (n_tokens, n_kv_heads, head_dim) K rows, row-major
 * @v:        likewise V rows
 * @n_tokens: tokens to add, at least 1
 *
 * Fills the layer's last block first.  It then checks out just the blocks
 * the rest needs, ceil(rest / block_size) per stream, in one kvp_allocate
 * per stream.  All or nothing: on failure the layer is as it was.  Every
 * block checked out by the call has then gone back to the pool.
 *
 * Returns:
 *   - KVP_OK;
 *   - KVP_EINVAL (bad args; inf/NaN in an int8/int4 cache);
 *   - KVP_ERANGE (the layer would pass 2^32 - 1 tokens);
 *   - KVP_EOWNER (the kvcache lost its owner's registration in
 *     kvp_kvcache_release, see the top of this file; nothing changed);
 *   - KVP_ENOENT (one of the layer's blocks was freed behind the kvcache's
 *     back; nothing changed);
 *   - KVP_EEXHAUSTED and KVP_ENOMEM, as kvp_allocate and kvp_storage_write
 *     return them.
 */
int kvp_kvcache_append(kvp_kvcache *c, uint32_t layer, const float *k, const float *v,
                       uint32_t n_tokens);

/** kvp_kvcache_len - tokens in @layer (0 for NULL or a layer out of range) */
uint32_t kvp_kvcache_len(const kvp_kvcache *c, uint32_t layer);

/**
 * kvp_kvcache_gather - copy one layer out in attention-kernel layout
 * @c:     the kvcache
 * @layer: the layer
 * @k_out: receives (n_kv_heads, len, head_dim) floats of K; NULL to skip
 * @v_out: likewise V; NULL to skip
 *
 * Rows stored as fp32 come out bit for bit; other formats are decoded.
 *
 * Returns KVP_OK; KVP_EINVAL (NULL @c, bad layer, both outputs NULL);
 * KVP_ENOENT (the kvcache lost one of the layer's blocks, freed behind its
 * back: see the top of this file; nothing read, nothing written).
 */
int kvp_kvcache_gather(const kvp_kvcache *c, uint32_t layer, float *k_out, float *v_out);

/**
 * kvp_kvcache_trim - drop the last min(@n_tokens, len) tokens of every layer
 *
 * Blocks left empty go back to the pool: by kvp_free, or kvp_free_owned
 * for a block shared with other holders.  The new last block's n_used is
 * lowered to what it still holds (kvp_block_set_used).  Trimming 0 tokens
 * does nothing.
 *
 * Returns:
 *   - KVP_OK;
 *   - KVP_EINVAL: NULL @c, or the cut falls inside a shared block (then
 *     nothing changed).  A shared block is published under a prefix key or
 *     held by two or more owners, and its rows are fixed.
 *   - the first error the pool reported.  That happens only when someone
 *     else freed this kvcache's blocks behind its back.
 */
int kvp_kvcache_trim(kvp_kvcache *c, uint32_t n_tokens);

/**
 * kvp_kvcache_attend - one decode step of scaled dot-product attention
 * @c:       the kvcache
 * @layer:   the layer, holding at least one token
 * @q:       (n_heads, head_dim) query of the new token
 * @n_heads: query heads, a multiple of n_kv_heads
 * @scale:   score multiplier (usually 1 / sqrt(head_dim))
 * @out:     receives (n_heads, head_dim); must not overlap @q
 *
 * Computes out_h = sum_t softmax_t(scale * q_h . k_t) v_t over the layer's
 * tokens.  It works in fp32 with an online softmax.  It reads the blocks
 * in place: no gather, no allocation.  Query head h uses KV head
 * h / (n_heads / n_kv_heads): contiguous groups, as in Llama.
 *
 * Range.  Each score is computed as (@scale * q_h) . k_t.  So it is +inf
 * only when the scaled score itself overflows fp32, not when q_h . k_t
 * alone does.  Tokens scoring +inf share the weight equally, and every
 * other token weighs 0.  Tokens scoring -inf weigh 0.  When every token of
 * a head scores -inf, that head's output is NaN.
 *
 * Returns KVP_OK; KVP_EINVAL (NULL args, bad layer, empty layer, n_heads 0
 * or not a multiple of n_kv_heads); KVP_ENOENT (the kvcache lost one of
 * the layer's blocks, as for gather; @out untouched).
 */
int kvp_kvcache_attend(const kvp_kvcache *c, uint32_t layer, const float *q, uint32_t n_heads,
                       float scale, float *out);

/** kvp_kvcache_blocks_held - K blocks + V blocks held over all layers (0 for NULL) */
size_t kvp_kvcache_blocks_held(const kvp_kvcache *c);

/**
 * kvp_kvcache_release - give every block of every layer back to the pool
 *
 * Makes one kvp_free_all(owner) call, which also releases the owner.  It
 * then calls kvp_register_owner to take the owner back.  The kvcache is
 * then empty and usable again.
 *
 * Another party may register the owner between the two calls, or the
 * registration may fail for lack of memory.  The kvcache then holds no
 * registration.  Appends return KVP_EOWNER, and this call and destroy free
 * nothing.  This lasts until a later release finds the owner free and
 * registers it.  A kvcache without the registration frees nothing here; it
 * only retries the registration.  NULL is a no-op.
 */
void kvp_kvcache_release(kvp_kvcache *c);

/* --- further calls ------------------------------------------------------- */

/**
 * kvp_kvcache_reserve - make every layer's block table hold @n_tokens tokens
 *
 * Afterwards appends up to @n_tokens per layer never grow a table.
 *
 * Returns KVP_OK, KVP_EINVAL (NULL @c) or KVP_ENOMEM (nothing changed).
 */
int kvp_kvcache_reserve(kvp_kvcache *c, uint32_t n_tokens);

/*
 * Prefix cache (kvpool/prefix.h; the pool needs prefix_cache on).  A
 * request can start from blocks an earlier request published for the same
 * prompt prefix.  A decode loop then runs on those shared blocks exactly as
 * on its own.  Attend and gather read a shared block's rows in place.
 *
 * Keys.  The caller passes *sequence keys*.  Key keys[b] is the key of the
 * prompt's tokens [b * block_size, (b + 1) * block_size).  The keys are
 * chained as kvp_prefix_hash(b ? &keys[b - 1] : NULL, salt, token bytes).
 * Use a salt per model and tenant: the derived keys below do not separate
 * models.  The kvcache derives the key of layer l's K or V block b as
 *
 *   kvp_prefix_hash(&keys[b], 0, bytes, 8), bytes = l as 4 bytes
 *   little-endian, then 0 (K) or 1 (V) as 4 bytes little-endian
 *
 * So every layer and stream has its own keys.  That holds also without
 * separate_kv, where K and V share one stream.  A block only matches a
 * kvcache of the same format, since the pool matches format.
 *
 * Storage.  A matched block's rows are read from the kvcache's own k_store
 * and v_store.  So requests that share blocks must share storages.
 *
 * A shared block is fixed.  Appends never write it: adopted blocks are
 * full, so appends go to new blocks.  Trim refuses to cut inside one.
 * Release, destroy and a trim of whole blocks drop this kvcache's holds
 * only.  Other holders keep the block.
 */

/**
 * kvp_kvcache_adopt_prefix - start an empty kvcache from published blocks
 * @c:        the kvcache; every layer empty
 * @keys:     sequence keys of the prompt's full blocks, in order (see above)
 * @n_keys:   how many
 * @n_tokens: out: tokens adopted per layer (a multiple of block_size)
 *
 * Matches the derived K and V keys of every layer (kvp_prefix_match for
 * cfg->owner).  It keeps the longest prefix m that every layer and stream
 * matched.  Each layer then holds those m blocks per stream and has length
 * m * block_size.  Holds on blocks matched past m are dropped again by
 * kvp_free_owned; those blocks stay cached.  The caller appends the rest of
 * the prompt after the adopted part.  When m = 0 (nothing published, or no
 * keys) the call is KVP_OK with *@n_tokens = 0 and the kvcache unchanged.
 *
 * Returns:
 *   - KVP_OK;
 *   - KVP_EINVAL (NULL @c or @n_tokens, NULL @keys with @n_keys > 0, a
 *     layer not empty, the pool's prefix cache off);
 *   - KVP_EOWNER (the kvcache lost its owner's registration, see the top of
 *     this file);
 *   - KVP_ENOENT (a matched block has no rows of this format in this
 *     kvcache's storages);
 *   - KVP_ENOMEM.
 *
 * On failure the kvcache is unchanged and holds nothing it matched.  Same
 * threading as append.
 */
int kvp_kvcache_adopt_prefix(kvp_kvcache *c, const kvp_hash *keys, size_t n_keys,
                             uint32_t *n_tokens);

/**
 * kvp_kvcache_publish - publish the kvcache's full blocks
 * @c:           the kvcache
 * @keys:        sequence keys of its blocks, in order (see above)
 * @n_keys:      how many keys
 * @n_published: out: blocks (K and V, all layers) this call published
 *
 * Publishes block b of every layer and stream under its derived key, so
 * that later requests can adopt it.  Blocks past min(@n_keys, a layer's
 * full blocks) are left alone.  Blocks already published (adopted, or
 * published by an earlier call) are skipped.  Another block may already
 * have a block's key: kvp_prefix_publish then returns KVP_EEXIST, because
 * another request computed the same prefix at the same time.  That block
 * stays unpublished, and this is not an error.  Call publish after the
 * last append to those blocks.  Their rows are fixed from then on:
 * kvp_storage_write refuses them.
 *
 * Returns:
 *   - KVP_OK;
 *   - KVP_EINVAL (NULL @c or @n_published, NULL @keys with @n_keys > 0,
 *     the pool's prefix cache off while a block was to be published);
 *   - KVP_ENOENT (a block was freed behind the kvcache's back);
 *   - KVP_ENOMEM.
 *
 * On an error the blocks published before it stay published, counted in
 * *@n_published.  Calling again publishes the rest.  Same threading as
 * append.
 */
int kvp_kvcache_publish(kvp_kvcache *c, const kvp_hash *keys, size_t n_keys, size_t *n_published);

#ifdef __cplusplus
}
#endif
#endif /* KVPOOL_KVCACHE_H */
