/*
 * kvpool/bufcache.h - cache of 256-byte-aligned scratch buffers.
 *
 * (Header comment and synchronization table: owned by the buffer-cache
 * implementation; the prototypes below are the API.md contract.)
 */
#ifndef KVPOOL_BUFCACHE_H
#define KVPOOL_BUFCACHE_H

#include <stddef.h>
#include <stdint.h>

#include <kvpool/status.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KVP_BUF_ALIGN 256
#define KVP_BUF_MAX_REQUEST (((SIZE_MAX - KVP_BUF_ALIGN) / 9) * 8)

typedef struct kvp_bufcache kvp_bufcache;

size_t kvp_bufcache_round(size_t requested);

int kvp_bufcache_create(size_t max_cached_bytes, kvp_bufcache **out);
void kvp_bufcache_destroy(kvp_bufcache *c);
void *kvp_bufcache_alloc(kvp_bufcache *c, size_t requested, size_t *actual);
void kvp_bufcache_free(kvp_bufcache *c, void *ptr, size_t actual);
void kvp_bufcache_clear(kvp_bufcache *c);
size_t kvp_bufcache_cached_bytes(kvp_bufcache *c);

typedef struct kvp_bufcache_stats {
	uint64_t hits, misses, evictions, oom_retries;
	uint64_t system_allocs, system_frees;
	uint64_t cached_bytes, peak_cached_bytes, cached_buffers, bytes_in_use;
} kvp_bufcache_stats;

int kvp_bufcache_get_stats(kvp_bufcache *c, kvp_bufcache_stats *out);

/* Prometheus text, as kvp_stats_to_prometheus (prefix NULL: "kvpool_bufcache"). */
int kvp_bufcache_stats_to_prometheus(const kvp_bufcache_stats *s, const char *prefix, char *buf,
				     size_t cap, size_t *len);

#ifdef __cplusplus
}
#endif
#endif /* KVPOOL_BUFCACHE_H */
