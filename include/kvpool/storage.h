/*
 * kvpool/storage.h - K/V row storage for pool blocks, one buffer per block id.
 *
 * (Header comment and synchronization table: owned by the storage
 * implementation; the prototypes below are the API.md contract.)
 */
#ifndef KVPOOL_STORAGE_H
#define KVPOOL_STORAGE_H

#include <stddef.h>
#include <stdint.h>

#include <kvpool/bufcache.h>
#include <kvpool/pool.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvp_storage kvp_storage;

int kvp_storage_create(kvp_pool *pool, uint32_t row_dim, kvp_bufcache *cache, kvp_storage **out);
void kvp_storage_destroy(kvp_storage *s);
int kvp_storage_write(kvp_storage *s, kvp_ref ref, uint32_t offset, const float *rows,
		      uint32_t n_rows);
int kvp_storage_read(kvp_storage *s, kvp_ref ref, const void **data, uint32_t *n_rows);
int kvp_storage_read_f32(kvp_storage *s, kvp_ref ref, float *rows, uint32_t cap_rows,
			 uint32_t *n_rows);
size_t kvp_storage_resident_bytes(kvp_storage *s);
int kvp_storage_release(kvp_storage *s, kvp_ref ref);

#ifdef __cplusplus
}
#endif
#endif /* KVPOOL_STORAGE_H */
