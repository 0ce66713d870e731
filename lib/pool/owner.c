/*
 * lib/pool/owner.c - sharded owner hash table of records with id arrays.
 *
 * Each shard is a chained hash table under its own mutex.  The bucket array
 * doubles when the shard holds more records than buckets; if that
 * allocation fails the table just stays denser.  Removed records go to the
 * removing thread's small cache, and in batches to a list shared by the
 * pool (lib/pool/owner.h), so a steady stream of requests (an owner made per
 * request, released when it ends) allocates no memory once the pool has
 * seen its peak number of live owners.
 */
#include "lib/pool/owner.h"

#include <string.h>

#include "lib/base/sysmem.h"

#define KVPI_OWNER_BUCKETS0 8u

int kvpi_owners_init(struct kvpi_owners *o)
{
	memset(o, 0, sizeof(*o));
	if (pthread_mutex_init(&o->spare_lock, NULL) != 0)
		return -1;
	for (uint32_t i = 0; i < KVPI_OWNER_SHARDS; i++) {
		struct kvpi_oshard *sh = &o->shard[i];
		sh->buckets = kvpi_sys_calloc(KVPI_OWNER_BUCKETS0, sizeof(*sh->buckets), 64);
		if (!sh->buckets || pthread_mutex_init(&sh->lock, NULL) != 0) {
			kvpi_sys_free(sh->buckets);
			sh->buckets = NULL;
			for (uint32_t j = 0; j < i; j++) {
				pthread_mutex_destroy(&o->shard[j].lock);
				kvpi_sys_free(o->shard[j].buckets);
			}
			/* Leave every shard empty, so kvpi_owners_destroy is safe. */
			pthread_mutex_destroy(&o->spare_lock);
			memset(o, 0, sizeof(*o));
			pthread_mutex_init(&o->spare_lock, NULL);
			return -1;
		}
		sh->nbuckets = KVPI_OWNER_BUCKETS0;
	}
	return 0;
}

static void free_chain(struct kvpi_orec *r)
{
	while (r) {
		struct kvpi_orec *next = r->next;
		kvpi_idarr_free(&r->ids);
		kvpi_sys_free(r);
		r = next;
	}
}

void kvpi_owners_destroy(struct kvpi_owners *o)
{
	for (uint32_t i = 0; i < KVPI_OWNER_SHARDS; i++) {
		struct kvpi_oshard *sh = &o->shard[i];
		for (uint32_t b = 0; b < sh->nbuckets; b++)
			free_chain(sh->buckets[b]);
		kvpi_sys_free(sh->buckets);
		if (sh->nbuckets)
			pthread_mutex_destroy(&sh->lock);
		sh->buckets = NULL;
		sh->nbuckets = 0;
	}
	free_chain(o->spare);
	o->spare = NULL;
	kvpi_idstash_free(&o->spare_ids);
	pthread_mutex_destroy(&o->spare_lock);
}

void kvpi_orec_moved(void *bt, uint32_t id, uint32_t pos)
{
	kvpi_bt_block(bt, id)->own_pos = pos;
}

struct kvpi_oshard *kvpi_owners_shard(struct kvpi_owners *o, kvp_owner key)
{
	return kvpi_owners_shard_h(o, kvpi_owner_hash(key));
}

struct kvpi_orec *kvpi_oshard_find(struct kvpi_oshard *sh, kvp_owner key)
{
	return kvpi_oshard_find_h(sh, key, kvpi_owner_hash(key));
}

/* Double the bucket array; on no memory keep the old one. */
void kvpi_oshard_rehash(struct kvpi_oshard *sh)
{
	uint32_t nb = sh->nbuckets * 2;
	struct kvpi_orec **nbk = kvpi_sys_calloc(nb, sizeof(*nbk), 64);
	if (!nbk)
		return;
	for (uint32_t b = 0; b < sh->nbuckets; b++) {
		struct kvpi_orec *r = sh->buckets[b];
		while (r) {
			struct kvpi_orec *next = r->next;
			struct kvpi_orec **dst = &nbk[r->hash & (nb - 1)];
			r->next = *dst;
			*dst = r;
			r = next;
		}
	}
	kvpi_sys_free(sh->buckets);
	sh->buckets = nbk;
	sh->nbuckets = nb;
}

/* An unused record when the thread's cache is empty: the cache refilled
 * from the pool's shared list a batch at a time, else new from the system. */
struct kvpi_orec *kvpi_rec_get_slow(struct kvpi_owners *o, struct kvpi_rec_cache *rc)
{
	if (!rc->head) {
		pthread_mutex_lock(&o->spare_lock);
		for (uint32_t i = 0; i < KVPI_REC_BATCH && o->spare; i++) {
			struct kvpi_orec *r = o->spare;
			o->spare = r->next;
			r->next = rc->head;
			rc->head = r;
			rc->n++;
		}
		pthread_mutex_unlock(&o->spare_lock);
	}
	struct kvpi_orec *r = rc->head;
	if (r) {
		rc->head = r->next;
		rc->n--;
		return r;
	}
	/* A new record comes with an array of the smallest size, which stays
	 * with it (lib/pool/idarray.h): even a record reserved in a cache and
	 * first used long after the pool is warm needs no memory then. */
	r = kvpi_sys_calloc(1, sizeof(*r), 8);
	if (!r)
		return NULL;
	if (kvpi_idarr_init(&r->ids) != 0) {
		kvpi_sys_free(r);
		return NULL;
	}
	atomic_init(&r->bias, 0);
	return r;
}

/* The thread's cache holds more than two batches: give one batch back. */
void kvpi_rec_put_slow(struct kvpi_owners *o, struct kvpi_rec_cache *rc)
{
	struct kvpi_orec *first = rc->head, *last = first;
	for (uint32_t i = 1; i < KVPI_REC_BATCH; i++)
		last = last->next;
	rc->head = last->next;
	rc->n -= KVPI_REC_BATCH;
	pthread_mutex_lock(&o->spare_lock);
	last->next = o->spare;
	o->spare = first;
	pthread_mutex_unlock(&o->spare_lock);
}

void kvpi_rec_cache_drain(struct kvpi_owners *o, struct kvpi_rec_cache *rc)
{
	struct kvpi_idsrc src = kvpi_owners_idsrc(o, rc);
	kvpi_idstash_give(&src);
	if (!rc->head)
		return;
	struct kvpi_orec *last = rc->head;
	while (last->next)
		last = last->next;
	pthread_mutex_lock(&o->spare_lock);
	last->next = o->spare;
	o->spare = rc->head;
	pthread_mutex_unlock(&o->spare_lock);
	rc->head = NULL;
	rc->n = 0;
}

void kvpi_rec_cache_free(struct kvpi_rec_cache *rc)
{
	kvpi_idstash_free(&rc->ids);
	free_chain(rc->head);
	rc->head = NULL;
	rc->n = 0;
}
