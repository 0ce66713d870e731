/*
 * kvpool/kvcache.h - a request's paged KV cache over pool blocks.
 *
 * (Header comment and synchronization table: owned by the kvcache
 * implementation; the prototypes below are the API.md contract.)
 */
#ifndef KVPOOL_KVCACHE_H
#define KVPOOL_KVCACHE_H

#include <stddef.h>
#include <stdint.h>

#include <kvpool/pool.h>
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

int kvp_kvcache_create(kvp_pool *pool, kvp_storage *k_store, kvp_storage *v_store,
		       const kvp_kvcache_config *cfg, kvp_kvcache **out);
void kvp_kvcache_destroy(kvp_kvcache *c);
int kvp_kvcache_append(kvp_kvcache *c, uint32_t layer, const float *k, const float *v,
		       uint32_t n_tokens);
uint32_t kvp_kvcache_len(const kvp_kvcache *c, uint32_t layer);
int kvp_kvcache_gather(const kvp_kvcache *c, uint32_t layer, float *k_out, float *v_out);
int kvp_kvcache_trim(kvp_kvcache *c, uint32_t n_tokens);
int kvp_kvcache_attend(const kvp_kvcache *c, uint32_t layer, const float *q, uint32_t n_heads,
		       float scale, float *out);
size_t kvp_kvcache_blocks_held(const kvp_kvcache *c);
void kvp_kvcache_release(kvp_kvcache *c);

#ifdef __cplusplus
}
#endif
#endif /* KVPOOL_KVCACHE_H */
