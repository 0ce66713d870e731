/*
 * lib/pool/idarray.c - the slow half of an owner's id array: compaction,
 * growth, and the stashes of spare arrays (lib/pool/idarray.h has the
 * contract).
 */
#include "lib/pool/idarray.h"

#include <stdbool.h>
#include <string.h>

#include "lib/base/sysmem.h"

/* Past this many entries an array does not grow (positions stay below 2^31). */
#define MAX_IDS ((uint64_t)1 << 31)

/* Squeeze the holes out, keeping the order; @moved learns each new place. */
static void compact(struct kvpi_idarr *a, kvpi_idarr_moved_fn *moved, void *ctx)
{
	uint32_t j = 0;
	for (uint32_t i = 0; i < a->len; i++) {
		uint32_t id = a->ids[i];
		if (id == KVPI_NO_ID)
			continue;
		a->ids[j] = id;
		if (i != j)
			moved(ctx, id, j);
		j++;
	}
	a->len = j;
}

/* The size class of an array of @cap ids (a power of two from 64). */
static unsigned class_of(uint64_t cap)
{
	return (unsigned)(63 - __builtin_clzll(cap)) - KVPI_IDARR_MIN_SHIFT;
}

static uint64_t bytes_of(unsigned c)
{
	return ((uint64_t)1 << (c + KVPI_IDARR_MIN_SHIFT)) * sizeof(uint32_t);
}

/* Put array @ids of class @c in @st if it keeps at most @max bytes with it;
 * false when it would not. */
static bool stash_put(struct kvpi_idstash *st, void *ids, unsigned c, uint64_t max)
{
	if (st->bytes + bytes_of(c) > max)
		return false;
	*(void **)ids = st->head[c];
	st->head[c] = ids;
	st->bytes += bytes_of(c);
	return true;
}

/* An array of class @c to @c + KVPI_IDARR_TAKE_UP, the smallest, taken out
 * of @st; NULL when none.  *@c gets its class. */
static void *stash_take(struct kvpi_idstash *st, unsigned *c)
{
	for (unsigned k = *c; k < KVPI_IDARR_CLASSES && k <= *c + KVPI_IDARR_TAKE_UP; k++) {
		void *a = st->head[k];
		if (!a)
			continue;
		st->head[k] = *(void **)a;
		st->bytes -= bytes_of(k);
		*c = k;
		return a;
	}
	return NULL;
}

/* Give array @ids of @cap ids back: to the thread's stash, else the shared
 * one, else the system. */
static void give(const struct kvpi_idsrc *src, uint32_t *ids, uint32_t cap)
{
	if (!ids)
		return;
	unsigned c = class_of(cap);
	if (c < KVPI_IDARR_CLASSES) {
		if (stash_put(src->local, ids, c, KVPI_IDSTASH_BYTES))
			return;
		pthread_mutex_lock(src->lock);
		bool kept = stash_put(src->shared, ids, c, KVPI_IDPOOL_BYTES);
		pthread_mutex_unlock(src->lock);
		if (kept)
			return;
	}
	kvpi_sys_free(ids);
}

/* An array of class *@c or a little bigger: from the thread's stash, else
 * the shared one; NULL when neither has one. */
static void *take(const struct kvpi_idsrc *src, unsigned *c)
{
	void *a = stash_take(src->local, c);
	if (a)
		return a;
	pthread_mutex_lock(src->lock);
	a = stash_take(src->shared, c);
	pthread_mutex_unlock(src->lock);
	return a;
}

int kvpi_idarr_reserve_slow(struct kvpi_idarr *a, uint32_t extra, kvpi_idarr_moved_fn *moved,
                            void *ctx, const struct kvpi_idsrc *src)
{
	/* Holes first, when they outnumber live entries or stand between
	 * the array and the most it may hold. */
	if (a->len != a->count &&
	    (a->len - a->count > a->count || (uint64_t)a->len + extra > MAX_IDS))
		compact(a, moved, ctx);
	uint64_t need = (uint64_t)a->len + extra;
	if (need <= a->cap)
		return 0;
	if (need > MAX_IDS)
		return -1;
	uint64_t cap = KVPI_IDARR_ATTACHED;
	while (cap < need)
		cap *= 2;
	unsigned c = class_of(cap);
	uint32_t *ids = c < KVPI_IDARR_CLASSES ? take(src, &c) : NULL;
	if (ids) {
		cap = (uint64_t)1 << (c + KVPI_IDARR_MIN_SHIFT);
	} else {
		ids = kvpi_sys_alloc(cap * sizeof(uint32_t), 64);
		if (!ids)
			return -1;
	}
	if (a->len)
		memcpy(ids, a->ids, (size_t)a->len * sizeof(uint32_t));
	give(src, a->ids, a->cap);
	a->ids = ids;
	a->cap = (uint32_t)cap;
	return 0;
}

int kvpi_idarr_init(struct kvpi_idarr *a)
{
	a->len = a->count = a->cap = 0;
	a->ids = kvpi_sys_alloc(KVPI_IDARR_ATTACHED * sizeof(uint32_t), 64);
	if (!a->ids)
		return -1;
	a->cap = KVPI_IDARR_ATTACHED;
	return 0;
}

void kvpi_idarr_release_slow(struct kvpi_idarr *a, const struct kvpi_idsrc *src)
{
	give(src, a->ids, a->cap);
	/* A smallest array from the thread's own stash, if it has one: the
	 * record then needs no memory in its next life. */
	unsigned c = 0;
	a->ids = src->local->head[0] ? stash_take(src->local, &c) : NULL;
	a->cap = a->ids ? KVPI_IDARR_ATTACHED : 0;
}

void kvpi_idarr_free(struct kvpi_idarr *a)
{
	kvpi_sys_free(a->ids);
	a->ids = NULL;
	a->len = a->cap = a->count = 0;
}

void kvpi_idstash_give(const struct kvpi_idsrc *src)
{
	for (unsigned c = 0; c < KVPI_IDARR_CLASSES; c++)
		while (src->local->head[c]) {
			void *a = src->local->head[c];
			src->local->head[c] = *(void **)a;
			src->local->bytes -= bytes_of(c);
			pthread_mutex_lock(src->lock);
			bool kept = stash_put(src->shared, a, c, KVPI_IDPOOL_BYTES);
			pthread_mutex_unlock(src->lock);
			if (!kept)
				kvpi_sys_free(a);
		}
}

void kvpi_idstash_free(struct kvpi_idstash *st)
{
	for (unsigned c = 0; c < KVPI_IDARR_CLASSES; c++)
		while (st->head[c]) {
			void *a = st->head[c];
			st->head[c] = *(void **)a;
			kvpi_sys_free(a);
		}
	st->bytes = 0;
}
