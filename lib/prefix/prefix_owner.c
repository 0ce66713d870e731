/*
 * lib/prefix/prefix_owner.c - the owner table of a prefix-cache pool.
 *
 * In prefix mode a block may be held by several owners, so an owner's
 * blocks cannot be a list through the block: each owner record keeps the
 * ids it holds in an array, in hold order.  Dropping one hold leaves a
 * tombstone (KVPI_NO_ID); the array is compacted when tombstones outnumber
 * live entries, before it would grow.  The position of a block in its
 * latest holder's array is kept as a hint beside the block, so dropping a
 * hold is O(1) in the common case of one holder, and otherwise a scan of
 * the owner's array.  kvp_free_all walks the array once: O(blocks held).
 *
 * Shards (KVPI_PFX_OWNER_SHARDS, mutex each) are chosen by a hash of the
 * owner id; everything about an owner is under its shard's mutex.  Removed
 * records go to their shard's spare list with their arrays (up to
 * KVPI_PFX_SPARE_RECS per shard), so a server that makes an owner per
 * request allocates nothing once warm.
 */
#include <string.h>

#include "lib/prefix/prefix_internal.h"
#include "lib/base/sysmem.h"

#define BUCKETS0 8u
#define IDS0     16u

static uint64_t mix(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

int kvpi_pfx_owners_init(struct kvpi_prefix *pf)
{
	for (uint32_t i = 0; i < KVPI_PFX_OWNER_SHARDS; i++) {
		struct kvpi_poshard *sh = &pf->osh[i];
		sh->buckets = kvpi_sys_calloc(BUCKETS0, sizeof(*sh->buckets), 64);
		if (!sh->buckets)
			return -1;
		sh->nbuckets = BUCKETS0;
		pthread_mutex_init(&sh->lock, NULL);
	}
	return 0;
}

static void rec_free(struct kvpi_porec *r)
{
	kvpi_sys_free(r->ids);
	kvpi_sys_free(r);
}

void kvpi_pfx_owners_destroy(struct kvpi_prefix *pf)
{
	for (uint32_t i = 0; i < KVPI_PFX_OWNER_SHARDS; i++) {
		struct kvpi_poshard *sh = &pf->osh[i];
		if (!sh->buckets)
			continue;
		for (uint32_t b = 0; b < sh->nbuckets; b++)
			for (struct kvpi_porec *r = sh->buckets[b], *nx; r; r = nx) {
				nx = r->next;
				rec_free(r);
			}
		for (struct kvpi_porec *r = sh->spare, *nx; r; r = nx) {
			nx = r->next;
			rec_free(r);
		}
		kvpi_sys_free(sh->buckets);
		pthread_mutex_destroy(&sh->lock);
	}
}

struct kvpi_poshard *kvpi_pfx_oshard(struct kvpi_prefix *pf, kvp_owner key)
{
	return &pf->osh[mix(key) >> 56];
}

static struct kvpi_porec **bucket_of(struct kvpi_poshard *sh, kvp_owner key)
{
	return &sh->buckets[mix(key) & (sh->nbuckets - 1)];
}

struct kvpi_porec *kvpi_pfx_ofind(struct kvpi_poshard *sh, kvp_owner key)
{
	for (struct kvpi_porec *r = *bucket_of(sh, key); r; r = r->next)
		if (r->key == key)
			return r;
	return NULL;
}

static void rehash(struct kvpi_poshard *sh)
{
	uint32_t nb = sh->nbuckets * 2;
	struct kvpi_porec **nbk = kvpi_sys_calloc(nb, sizeof(*nbk), 64);
	if (!nbk)
		return; /* stays denser */
	for (uint32_t b = 0; b < sh->nbuckets; b++)
		for (struct kvpi_porec *r = sh->buckets[b], *nx; r; r = nx) {
			nx = r->next;
			struct kvpi_porec **dst = &nbk[mix(r->key) & (nb - 1)];
			r->next = *dst;
			*dst = r;
		}
	kvpi_sys_free(sh->buckets);
	sh->buckets = nbk;
	sh->nbuckets = nb;
}

struct kvpi_porec *kvpi_pfx_oinsert(struct kvpi_poshard *sh, kvp_owner key)
{
	struct kvpi_porec *r = sh->spare;
	if (r) {
		sh->spare = r->next;
		sh->n_spare--;
	} else {
		r = kvpi_sys_calloc(1, sizeof(*r), 64);
		if (!r)
			return NULL;
	}
	r->key = key;
	r->len = r->count = 0;
	r->registered = false;
	if (sh->n >= sh->nbuckets)
		rehash(sh);
	struct kvpi_porec **b = bucket_of(sh, key);
	r->next = *b;
	*b = r;
	sh->n++;
	return r;
}

void kvpi_pfx_oremove(struct kvpi_poshard *sh, struct kvpi_porec *r)
{
	struct kvpi_porec **pp = bucket_of(sh, r->key);
	while (*pp != r)
		pp = &(*pp)->next;
	*pp = r->next;
	sh->n--;
	if (sh->n_spare >= KVPI_PFX_SPARE_RECS) {
		rec_free(r);
		return;
	}
	r->next = sh->spare;
	sh->spare = r;
	sh->n_spare++;
}

/* Squeeze the tombstones out, keeping the order; position hints follow. */
static void compact(struct kvpi_prefix *pf, struct kvpi_porec *r)
{
	uint32_t j = 0;
	for (uint32_t i = 0; i < r->len; i++) {
		uint32_t id = r->ids[i];
		if (id == KVPI_NO_ID)
			continue;
		r->ids[j] = id;
		/* relaxed: a hint (see the header). */
		atomic_store_explicit(&kvpi_pfx_side(pf, id)->pos_hint, j, memory_order_relaxed);
		j++;
	}
	r->len = j;
}

int kvpi_pfx_oreserve(struct kvpi_prefix *pf, struct kvpi_porec *r, uint32_t extra)
{
	if (r->len + extra <= r->cap)
		return 0;
	if (r->len - r->count > r->count)
		compact(pf, r);
	if (r->len + extra <= r->cap)
		return 0;
	uint64_t need = (uint64_t)r->len + extra, cap = r->cap ? r->cap : IDS0;
	while (cap < need)
		cap *= 2;
	if (cap > UINT32_MAX)
		return -1;
	uint32_t *ids = kvpi_sys_alloc(cap * sizeof(uint32_t), 64);
	if (!ids)
		return -1;
	if (r->len)
		memcpy(ids, r->ids, (size_t)r->len * sizeof(uint32_t));
	kvpi_sys_free(r->ids);
	r->ids = ids;
	r->cap = (uint32_t)cap;
	return 0;
}

void kvpi_pfx_oappend(struct kvpi_prefix *pf, struct kvpi_porec *r, uint32_t id)
{
	/* relaxed: a hint. */
	atomic_store_explicit(&kvpi_pfx_side(pf, id)->pos_hint, r->len, memory_order_relaxed);
	r->ids[r->len++] = id;
	r->count++;
}

int64_t kvpi_pfx_ofind_pos(struct kvpi_prefix *pf, const struct kvpi_porec *r, uint32_t id)
{
	/* relaxed: a hint, checked against the array. */
	uint32_t h = atomic_load_explicit(&kvpi_pfx_side(pf, id)->pos_hint, memory_order_relaxed);
	if (h < r->len && r->ids[h] == id)
		return h;
	for (uint32_t i = r->len; i-- > 0;)
		if (r->ids[i] == id)
			return i;
	return -1;
}

void kvpi_pfx_oremove_at(struct kvpi_porec *r, uint32_t pos)
{
	r->ids[pos] = KVPI_NO_ID;
	r->count--;
	while (r->len && r->ids[r->len - 1] == KVPI_NO_ID)
		r->len--;
}

struct kvpi_porec *kvpi_pfx_oget(struct kvpi_poshard *sh, kvp_owner key, bool *made)
{
	struct kvpi_porec *r = kvpi_pfx_ofind(sh, key);
	*made = r == NULL;
	return r ? r : kvpi_pfx_oinsert(sh, key);
}
