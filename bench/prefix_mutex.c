/*
 * bench/prefix_mutex.c - a one-mutex prefix cache (see prefix_mutex.h).
 *
 * Map: linear probing over a power-of-two table at most half full, with
 * backward-shift deletion (no tombstones), key -> block.  Lists: the free
 * blocks as a stack, the cached blocks as a doubly linked LRU list (evict
 * at the head, cache at the tail).  All under one mutex.
 */
#include "bench/prefix_mutex.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#define NIL UINT32_MAX

struct mx_block {
	kvp_hash key;
	uint32_t holders;
	bool published;
	uint32_t prev, next; /* LRU links while cached */
};

struct mx_cache {
	pthread_mutex_t mu;
	struct mx_block *b;
	uint32_t n, *free_stack, n_free, lru_head, lru_tail;
	uint32_t *slot; /* map: block id or NIL */
	size_t mask;
};

static size_t hslot(const mx_cache *c, kvp_hash k)
{
	uint64_t h = k.lo ^ (k.hi * 0x9e3779b97f4a7c15ull);
	h ^= h >> 33; /* murmur3's finalizer: sequential keys spread out */
	h *= 0xff51afd7ed558ccdull;
	h ^= h >> 33;
	return (size_t)h & c->mask;
}

static bool same(kvp_hash a, kvp_hash b)
{
	return a.lo == b.lo && a.hi == b.hi;
}

mx_cache *mx_create(uint32_t n_blocks)
{
	mx_cache *c = calloc(1, sizeof *c);
	size_t cap = 2;

	if (!c)
		return NULL;
	while (cap < 2 * (size_t)n_blocks)
		cap *= 2;
	c->n = n_blocks;
	c->b = calloc(n_blocks, sizeof *c->b);
	c->free_stack = malloc(n_blocks * sizeof *c->free_stack);
	c->slot = malloc(cap * sizeof *c->slot);
	if (!c->b || !c->free_stack || !c->slot) {
		mx_destroy(c);
		return NULL;
	}
	c->mask = cap - 1;
	for (size_t i = 0; i < cap; i++)
		c->slot[i] = NIL;
	for (uint32_t i = 0; i < n_blocks; i++)
		c->free_stack[i] = n_blocks - 1 - i;
	c->n_free = n_blocks;
	c->lru_head = c->lru_tail = NIL;
	pthread_mutex_init(&c->mu, NULL);
	return c;
}

void mx_destroy(mx_cache *c)
{
	if (!c)
		return;
	if (c->b)
		pthread_mutex_destroy(&c->mu);
	free(c->b);
	free(c->free_stack);
	free(c->slot);
	free(c);
}

static int64_t map_find(const mx_cache *c, kvp_hash k)
{
	for (size_t i = hslot(c, k);; i = (i + 1) & c->mask) {
		uint32_t id = c->slot[i];
		if (id == NIL)
			return -1;
		if (same(c->b[id].key, k))
			return id;
	}
}

static void map_erase(mx_cache *c, kvp_hash k)
{
	size_t i = hslot(c, k), j;

	while (!same(c->b[c->slot[i]].key, k))
		i = (i + 1) & c->mask;
	c->slot[i] = NIL;
	for (j = (i + 1) & c->mask; c->slot[j] != NIL; j = (j + 1) & c->mask) {
		size_t h = hslot(c, c->b[c->slot[j]].key);
		/* move back unless its home lies cyclically in (i, j] */
		if ((j > i && (h <= i || h > j)) || (j < i && h <= i && h > j)) {
			c->slot[i] = c->slot[j];
			c->slot[j] = NIL;
			i = j;
		}
	}
}

static void lru_unlink(mx_cache *c, uint32_t id)
{
	struct mx_block *x = &c->b[id];

	if (x->prev != NIL)
		c->b[x->prev].next = x->next;
	else
		c->lru_head = x->next;
	if (x->next != NIL)
		c->b[x->next].prev = x->prev;
	else
		c->lru_tail = x->prev;
}

static void lru_push(mx_cache *c, uint32_t id)
{
	c->b[id].prev = c->lru_tail;
	c->b[id].next = NIL;
	if (c->lru_tail != NIL)
		c->b[c->lru_tail].next = id;
	else
		c->lru_head = id;
	c->lru_tail = id;
}

size_t mx_match(mx_cache *c, const kvp_hash *keys, size_t n, uint32_t *blocks)
{
	size_t got = 0;

	pthread_mutex_lock(&c->mu);
	for (; got < n; got++) {
		int64_t id = map_find(c, keys[got]);
		if (id < 0)
			break;
		if (c->b[id].holders++ == 0)
			lru_unlink(c, (uint32_t)id);
		blocks[got] = (uint32_t)id;
	}
	pthread_mutex_unlock(&c->mu);
	return got;
}

void mx_release(mx_cache *c, const uint32_t *blocks, size_t n)
{
	pthread_mutex_lock(&c->mu);
	for (size_t i = n; i-- > 0;) { /* last first, like kvp_free_owned */
		struct mx_block *x = &c->b[blocks[i]];
		if (--x->holders)
			continue;
		if (x->published)
			lru_push(c, blocks[i]);
		else
			c->free_stack[c->n_free++] = blocks[i];
	}
	pthread_mutex_unlock(&c->mu);
}

int64_t mx_allocate(mx_cache *c)
{
	int64_t id = -1;

	pthread_mutex_lock(&c->mu);
	if (c->n_free) {
		id = c->free_stack[--c->n_free];
	} else if (c->lru_head != NIL) {
		id = c->lru_head;
		lru_unlink(c, (uint32_t)id);
		map_erase(c, c->b[id].key);
		c->b[id].published = false;
	}
	if (id >= 0)
		c->b[id].holders = 1;
	pthread_mutex_unlock(&c->mu);
	return id;
}

int mx_publish(mx_cache *c, uint32_t block, kvp_hash key)
{
	size_t i;
	int rc = 0;

	pthread_mutex_lock(&c->mu);
	for (i = hslot(c, key); c->slot[i] != NIL; i = (i + 1) & c->mask)
		if (same(c->b[c->slot[i]].key, key))
			break;
	if (c->slot[i] != NIL) {
		rc = -1;
	} else {
		c->b[block].key = key;
		c->b[block].published = true;
		c->slot[i] = block;
	}
	pthread_mutex_unlock(&c->mu);
	return rc;
}
