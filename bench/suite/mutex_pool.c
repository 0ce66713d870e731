/*
 * bench/suite/mutex_pool.c - the one-mutex pool design kvpool replaces (one
 * lock, owner dict, LIFO free list) as a C baseline.  Everything happens
 * under p->lock; the data structures are as fast as a single-threaded pool can be made, so what the
 * benchmarks show against it is the cost of the lock, not of sloppy code.
 */
#include "bench/suite/mutex_pool.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#define NONE UINT32_MAX

typedef struct mblock {
	uint32_t gen;
	uint32_t n_used;
	uint32_t owner; /* owner record index, NONE when free or unowned */
	uint32_t prev, next;
	uint32_t in_use;
} mblock;

typedef struct mowner {
	uint64_t key;
	uint32_t head, tail, count;
	uint32_t registered;
} mowner;

struct mpool {
	pthread_mutex_t lock;
	uint32_t block_size, n_blocks;
	mblock *blocks;
	uint32_t *free_stack; /* LIFO */
	uint32_t n_free;
	/* owner dictionary: linear-probing table of record indices */
	uint32_t *table;
	uint32_t table_mask, n_owners;
	mowner *recs;
	uint32_t n_recs, cap_recs;
	uint32_t *free_recs;
	uint32_t n_free_recs;
};

static uint32_t hash64(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	return (uint32_t)k;
}

int mpool_create(uint32_t block_size, uint32_t n_blocks, mpool **out)
{
	mpool *p;

	if (!out || block_size == 0 || n_blocks == 0 || n_blocks == NONE)
		return -1;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -1;
	p->block_size = block_size;
	p->n_blocks = n_blocks;
	p->blocks = calloc(n_blocks, sizeof(*p->blocks));
	p->free_stack = malloc((size_t)n_blocks * sizeof(uint32_t));
	p->table_mask = 255;
	p->table = malloc(256 * sizeof(uint32_t));
	if (!p->blocks || !p->free_stack || !p->table) {
		mpool_destroy(p);
		return -1;
	}
	for (uint32_t i = 0; i < 256; i++)
		p->table[i] = NONE;
	/* Lowest id on top, so ids are handed out in order until reused. */
	for (uint32_t i = 0; i < n_blocks; i++) {
		p->free_stack[i] = n_blocks - 1 - i;
		p->blocks[i].owner = NONE;
	}
	p->n_free = n_blocks;
	pthread_mutex_init(&p->lock, NULL);
	*out = p;
	return 0;
}

void mpool_destroy(mpool *p)
{
	if (!p)
		return;
	if (p->table)
		pthread_mutex_destroy(&p->lock);
	free(p->blocks);
	free(p->free_stack);
	free(p->table);
	free(p->recs);
	free(p->free_recs);
	free(p);
}

/* Slot of @key in the table, or the empty slot where it would go. */
static uint32_t find_slot(const mpool *p, uint64_t key)
{
	uint32_t i = hash64(key) & p->table_mask;

	while (p->table[i] != NONE && p->recs[p->table[i]].key != key)
		i = (i + 1) & p->table_mask;
	return i;
}

static int grow_table(mpool *p)
{
	uint32_t old_mask = p->table_mask, *old = p->table;
	uint32_t mask = old_mask * 2 + 1;
	uint32_t *t = malloc(((size_t)mask + 1) * sizeof(uint32_t));

	if (!t)
		return -1;
	for (uint32_t i = 0; i <= mask; i++)
		t[i] = NONE;
	p->table = t;
	p->table_mask = mask;
	for (uint32_t i = 0; i <= old_mask; i++)
		if (old[i] != NONE)
			t[find_slot(p, p->recs[old[i]].key)] = old[i];
	free(old);
	return 0;
}

/* Record of @key, made if @create; NONE if absent or out of memory. */
static uint32_t owner_get(mpool *p, uint64_t key, bool create)
{
	uint32_t s = find_slot(p, key), r;

	if (p->table[s] != NONE)
		return p->table[s];
	if (!create)
		return NONE;
	if ((p->n_owners + 1) * 2 > p->table_mask + 1) {
		if (grow_table(p) != 0)
			return NONE;
		s = find_slot(p, key);
	}
	if (p->n_free_recs) {
		r = p->free_recs[--p->n_free_recs];
	} else {
		if (p->n_recs == p->cap_recs) {
			uint32_t nc = p->cap_recs ? p->cap_recs * 2 : 64;
			mowner *nr = realloc(p->recs, nc * sizeof(*nr));
			uint32_t *nf = realloc(p->free_recs, nc * sizeof(*nf));
			if (nr)
				p->recs = nr;
			if (nf)
				p->free_recs = nf;
			if (!nr || !nf)
				return NONE;
			p->cap_recs = nc;
		}
		r = p->n_recs++;
	}
	p->recs[r] = (mowner){.key = key, .head = NONE, .tail = NONE};
	p->table[s] = r;
	p->n_owners++;
	return r;
}

/* Remove record @r from the dictionary (backward-shift deletion). */
static void owner_drop(mpool *p, uint32_t r)
{
	uint32_t i = find_slot(p, p->recs[r].key), j = i;

	for (;;) {
		j = (j + 1) & p->table_mask;
		if (p->table[j] == NONE)
			break;
		uint32_t home = hash64(p->recs[p->table[j]].key) & p->table_mask;
		/* Move j back to i unless its home lies cyclically in (i, j]. */
		if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) {
			p->table[i] = p->table[j];
			i = j;
		}
	}
	p->table[i] = NONE;
	p->n_owners--;
	p->free_recs[p->n_free_recs++] = r;
}

/* Unlink block @id from its owner; release an unregistered owner left empty. */
static void free_one(mpool *p, uint32_t id)
{
	mblock *b = &p->blocks[id];

	if (b->owner != NONE) {
		mowner *o = &p->recs[b->owner];
		if (b->prev != NONE)
			p->blocks[b->prev].next = b->next;
		else
			o->head = b->next;
		if (b->next != NONE)
			p->blocks[b->next].prev = b->prev;
		else
			o->tail = b->prev;
		if (--o->count == 0 && !o->registered)
			owner_drop(p, b->owner);
		b->owner = NONE;
	}
	b->in_use = 0;
	p->free_stack[p->n_free++] = id;
}

int mpool_allocate(mpool *p, uint32_t n_tokens, uint64_t owner, uint64_t *refs, size_t cap,
                   size_t *n_refs)
{
	uint32_t need, r;
	int rc = 0;

	if (!p || !refs || !n_refs || n_tokens == 0)
		return -1;
	need = (n_tokens + p->block_size - 1) / p->block_size;
	*n_refs = need;
	if (cap < need)
		return -1;
	pthread_mutex_lock(&p->lock);
	if (p->n_free < need) {
		rc = -2;
		goto out;
	}
	r = owner_get(p, owner, true);
	if (r == NONE) {
		rc = -3;
		goto out;
	}
	for (uint32_t i = 0; i < need; i++) {
		uint32_t id = p->free_stack[--p->n_free];
		mblock *b = &p->blocks[id];
		mowner *o = &p->recs[r];
		b->gen++;
		b->in_use = 1;
		b->n_used = i + 1 < need ? p->block_size : n_tokens - i * p->block_size;
		b->owner = r;
		b->next = NONE;
		b->prev = o->tail;
		if (o->tail != NONE)
			p->blocks[o->tail].next = id;
		else
			o->head = id;
		o->tail = id;
		o->count++;
		refs[i] = (uint64_t)b->gen << 32 | id;
	}
out:
	pthread_mutex_unlock(&p->lock);
	return rc;
}

int mpool_free(mpool *p, const uint64_t *refs, size_t n)
{
	if (!p || (!refs && n))
		return -1;
	pthread_mutex_lock(&p->lock);
	for (size_t i = 0; i < n; i++) {
		if ((uint32_t)refs[i] >= p->n_blocks) {
			pthread_mutex_unlock(&p->lock);
			return -1;
		}
	}
	for (size_t i = 0; i < n; i++) {
		uint32_t id = (uint32_t)refs[i];
		mblock *b = &p->blocks[id];
		if (b->in_use && b->gen == (uint32_t)(refs[i] >> 32))
			free_one(p, id);
	}
	pthread_mutex_unlock(&p->lock);
	return 0;
}

int mpool_free_all(mpool *p, uint64_t owner)
{
	uint32_t r;

	if (!p)
		return -1;
	pthread_mutex_lock(&p->lock);
	r = owner_get(p, owner, false);
	if (r == NONE) {
		pthread_mutex_unlock(&p->lock);
		return -1;
	}
	p->recs[r].registered = 0;
	if (p->recs[r].count == 0) {
		owner_drop(p, r);
	} else {
		while (p->recs[r].head != NONE && p->recs[r].count > 1)
			free_one(p, p->recs[r].head);
		free_one(p, p->recs[r].head); /* the last one drops the owner */
	}
	pthread_mutex_unlock(&p->lock);
	return 0;
}

int mpool_register_owner(mpool *p, uint64_t owner)
{
	int rc = 0;
	uint32_t r;

	if (!p)
		return -1;
	pthread_mutex_lock(&p->lock);
	if (owner_get(p, owner, false) != NONE) {
		rc = -1;
	} else {
		r = owner_get(p, owner, true);
		if (r == NONE)
			rc = -3;
		else
			p->recs[r].registered = 1;
	}
	pthread_mutex_unlock(&p->lock);
	return rc;
}

int mpool_release_owner(mpool *p, uint64_t owner)
{
	uint32_t r;
	int rc = 0;

	if (!p)
		return -1;
	pthread_mutex_lock(&p->lock);
	r = owner_get(p, owner, false);
	if (r == NONE) {
		rc = -1;
	} else {
		p->recs[r].registered = 0;
		if (p->recs[r].count == 0)
			owner_drop(p, r);
	}
	pthread_mutex_unlock(&p->lock);
	return rc;
}

size_t mpool_n_free(mpool *p)
{
	size_t n;

	if (!p)
		return 0;
	pthread_mutex_lock(&p->lock);
	n = p->n_free;
	pthread_mutex_unlock(&p->lock);
	return n;
}
