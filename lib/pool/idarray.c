/*
 * lib/pool/idarray.c - the slow half of an owner's id array: compaction,
 * growth, and the stash of spare arrays (lib/pool/idarray.h has the
 * contract).
 */
#include "lib/pool/idarray.h"

#include <string.h>

#include "lib/base/sysmem.h"

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

/* The size class of an array of @cap ids (a power of two from 16). */
static unsigned class_of(uint64_t cap)
{
	return (unsigned)(63 - __builtin_clzll(cap)) - KVPI_IDARR_MIN_SHIFT;
}

/* Keep array @ids of @cap ids in @st, or free it. */
static void stash_put(struct kvpi_idstash *st, uint32_t *ids, uint32_t cap)
{
	if (!ids)
		return;
	unsigned c = class_of(cap);
	uint64_t bytes = (uint64_t)cap * sizeof(uint32_t);
	if (c >= KVPI_IDARR_CLASSES || st->bytes + bytes > KVPI_IDSTASH_BYTES) {
		kvpi_sys_free(ids);
		return;
	}
	*(void **)ids = st->head[c];
	st->head[c] = ids;
	st->bytes += bytes;
}

/* The smallest stashed array of class @c or above, taken out of @st, with
 * its capacity in *@cap; NULL when none. */
static uint32_t *stash_take(struct kvpi_idstash *st, unsigned c, uint32_t *cap)
{
	for (; c < KVPI_IDARR_CLASSES; c++) {
		void *a = st->head[c];
		if (!a)
			continue;
		st->head[c] = *(void **)a;
		*cap = (uint32_t)1 << (c + KVPI_IDARR_MIN_SHIFT);
		st->bytes -= (uint64_t)*cap * sizeof(uint32_t);
		return a;
	}
	return NULL;
}

int kvpi_idarr_reserve_slow(struct kvpi_idarr *a, uint32_t extra, kvpi_idarr_moved_fn *moved,
                            void *ctx, struct kvpi_idstash *st)
{
	if (a->len - a->count > a->count)
		compact(a, moved, ctx);
	uint64_t need = (uint64_t)a->len + extra;
	if (need <= a->cap)
		return 0;
	uint64_t cap = (uint64_t)1 << KVPI_IDARR_MIN_SHIFT;
	while (cap < need)
		cap *= 2;
	if (cap > (1u << 31))
		return -1;
	uint32_t got;
	uint32_t *ids = stash_take(st, class_of(cap), &got);
	if (ids) {
		cap = got;
	} else {
		ids = kvpi_sys_alloc(cap * sizeof(uint32_t), 64);
		if (!ids)
			return -1;
	}
	if (a->len)
		memcpy(ids, a->ids, (size_t)a->len * sizeof(uint32_t));
	stash_put(st, a->ids, a->cap);
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

void kvpi_idarr_release_slow(struct kvpi_idarr *a, struct kvpi_idstash *st)
{
	stash_put(st, a->ids, a->cap);
	a->ids = NULL;
	a->len = a->cap = a->count = 0;
}

void kvpi_idarr_free(struct kvpi_idarr *a)
{
	kvpi_sys_free(a->ids);
	a->ids = NULL;
	a->len = a->cap = a->count = 0;
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
