/*
 * bench/suite/mutex_blockpool.c - the one-mutex, vLLM-v1-shaped block pool of the
 * lifecycle benchmark.
 *
 * It is meant to be the best a simple design does: each call takes the
 * mutex once and does O(1) work per block on flat arrays.  The block
 * records are 32 bytes (two to a cache line); the key map holds the key
 * beside the id so a probe reads one line; the owner map is an
 * open-addressing table of (owner, record) pairs that doubles when half
 * full; a record's id array grows by doubling and is kept for the next
 * owner that reuses the record.  Nothing is allocated per request once the
 * tables have reached the sizes the workload needs.  The block records, the
 * free list and the key map are aligned to cache lines, as kvpool's tables
 * are: with malloc's 16-byte alignment half the block records could
 * straddle two lines, depending on where the array landed, and this pool's
 * one-thread figure moved between 2.4 and 3.6 ns a block from one build of
 * the benchmark to the next.
 */
#include "bench/suite/mutex_blockpool.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define NIL UINT32_MAX

typedef struct blk {
	mbp_key key;    /* valid while published */
	uint32_t holds; /* owners holding the block */
	uint32_t prev;  /* LRU links while cached */
	uint32_t next;
	uint32_t published;
} blk;

typedef struct kent {
	mbp_key key;
	uint32_t id; /* NIL: empty slot */
} kent;

typedef struct oent {
	uint64_t owner;
	uint32_t rec; /* NIL: empty slot */
} oent;

typedef struct orec {
	uint32_t *ids;
	uint32_t n, cap;
} orec;

struct mbp {
	pthread_mutex_t mu;
	uint32_t n_blocks;
	blk *b;
	uint32_t *free_ids; /* uncached free blocks, LIFO */
	uint32_t n_free;
	uint32_t lru_head, lru_tail, n_cached; /* oldest at the head */
	kent *kmap;
	uint64_t kmask;
	uint32_t n_keys;
	oent *omap;
	uint64_t omask;
	uint32_t n_owners;
	orec *recs;
	uint32_t n_recs, cap_recs;
	uint32_t *free_recs; /* indices of unused records (cap_recs of room) */
	uint32_t n_free_recs;
};

static uint64_t key_slot(const mbp *p, mbp_key k)
{
	return (k.lo ^ (k.hi * 0x9e3779b97f4a7c15ull)) & p->kmask;
}

static uint64_t owner_slot(uint64_t owner, uint64_t mask)
{
	uint64_t h = owner * 0x9e3779b97f4a7c15ull;
	return (h ^ (h >> 29)) & mask;
}

int mbp_create(uint32_t n_blocks, mbp **out)
{
	mbp *p;
	uint64_t kcap = 16;

	if (!out || n_blocks == 0 || n_blocks > (1u << 31))
		return -1;
	*out = NULL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -1;
	pthread_mutex_init(&p->mu, NULL);
	while (kcap < 2ull * n_blocks)
		kcap <<= 1;
	p->n_blocks = n_blocks;
	p->b = aligned_alloc(64, ((size_t)n_blocks * sizeof(blk) + 63) & ~(size_t)63);
	if (p->b)
		memset(p->b, 0, (size_t)n_blocks * sizeof(blk));
	p->free_ids = aligned_alloc(64, ((size_t)n_blocks * sizeof(uint32_t) + 63) & ~(size_t)63);
	p->kmap = aligned_alloc(64, ((size_t)kcap * sizeof(kent) + 63) & ~(size_t)63);
	p->kmask = kcap - 1;
	p->omask = 63;
	p->omap = malloc((p->omask + 1) * sizeof(oent));
	if (!p->b || !p->free_ids || !p->kmap || !p->omap) {
		mbp_destroy(p);
		return -1;
	}
	for (uint64_t i = 0; i <= p->kmask; i++)
		p->kmap[i].id = NIL;
	for (uint64_t i = 0; i <= p->omask; i++)
		p->omap[i].rec = NIL;
	/* Lowest id on top of the LIFO, as kvpool hands out lowest first. */
	for (uint32_t i = 0; i < n_blocks; i++)
		p->free_ids[i] = n_blocks - 1 - i;
	p->n_free = n_blocks;
	p->lru_head = p->lru_tail = NIL;
	*out = p;
	return 0;
}

void mbp_destroy(mbp *p)
{
	if (!p)
		return;
	for (uint32_t i = 0; i < p->n_recs; i++)
		free(p->recs[i].ids);
	free(p->recs);
	free(p->free_recs);
	free(p->omap);
	free(p->kmap);
	free(p->free_ids);
	free(p->b);
	pthread_mutex_destroy(&p->mu);
	free(p);
}

/* --- key map ---------------------------------------------------------------- */

static uint32_t key_find(const mbp *p, mbp_key k)
{
	for (uint64_t i = key_slot(p, k);; i = (i + 1) & p->kmask) {
		const kent *e = &p->kmap[i];
		if (e->id == NIL)
			return NIL;
		if (e->key.lo == k.lo && e->key.hi == k.hi)
			return e->id;
	}
}

/* Map @k to @id unless mapped; true if it was inserted.  Never full: 2x blocks. */
static bool key_insert(mbp *p, mbp_key k, uint32_t id)
{
	uint64_t i = key_slot(p, k);

	for (;; i = (i + 1) & p->kmask) {
		kent *e = &p->kmap[i];
		if (e->id == NIL)
			break;
		if (e->key.lo == k.lo && e->key.hi == k.hi)
			return false;
	}
	p->kmap[i] = (kent){.key = k, .id = id};
	p->n_keys++;
	return true;
}

/* Remove @k (present): backward-shift deletion keeps every probe run intact. */
static void key_delete(mbp *p, mbp_key k)
{
	uint64_t i = key_slot(p, k), j;

	while (p->kmap[i].key.lo != k.lo || p->kmap[i].key.hi != k.hi || p->kmap[i].id == NIL)
		i = (i + 1) & p->kmask;
	for (j = i;;) {
		j = (j + 1) & p->kmask;
		if (p->kmap[j].id == NIL)
			break;
		uint64_t h = key_slot(p, p->kmap[j].key);
		/* Move j back to i unless its home lies cyclically in (i, j]. */
		if ((j > i && (h <= i || h > j)) || (j < i && h <= i && h > j)) {
			p->kmap[i] = p->kmap[j];
			i = j;
		}
	}
	p->kmap[i].id = NIL;
	p->n_keys--;
}

/* --- LRU of cached blocks ---------------------------------------------------- */

static void lru_unlink(mbp *p, uint32_t id)
{
	blk *b = &p->b[id];

	if (b->prev != NIL)
		p->b[b->prev].next = b->next;
	else
		p->lru_head = b->next;
	if (b->next != NIL)
		p->b[b->next].prev = b->prev;
	else
		p->lru_tail = b->prev;
	p->n_cached--;
}

static void lru_append(mbp *p, uint32_t id)
{
	blk *b = &p->b[id];

	b->next = NIL;
	b->prev = p->lru_tail;
	if (p->lru_tail != NIL)
		p->b[p->lru_tail].next = id;
	else
		p->lru_head = id;
	p->lru_tail = id;
	p->n_cached++;
}

/* --- owners ---------------------------------------------------------------- */

static uint64_t owner_find_slot(const mbp *p, uint64_t owner)
{
	uint64_t i = owner_slot(owner, p->omask);

	while (p->omap[i].rec != NIL && p->omap[i].owner != owner)
		i = (i + 1) & p->omask;
	return i;
}

/* Double the owner map; false when out of memory (the map is unchanged). */
static bool owner_grow(mbp *p)
{
	uint64_t mask = p->omask * 2 + 1;
	oent *m = malloc((mask + 1) * sizeof(oent));

	if (!m)
		return false;
	for (uint64_t i = 0; i <= mask; i++)
		m[i].rec = NIL;
	for (uint64_t i = 0; i <= p->omask; i++) {
		if (p->omap[i].rec == NIL)
			continue;
		uint64_t j = owner_slot(p->omap[i].owner, mask);
		while (m[j].rec != NIL)
			j = (j + 1) & mask;
		m[j] = p->omap[i];
	}
	free(p->omap);
	p->omap = m;
	p->omask = mask;
	return true;
}

/* A record index for a new owner; NIL when out of memory. */
static uint32_t rec_take(mbp *p)
{
	if (p->n_free_recs)
		return p->free_recs[--p->n_free_recs];
	if (p->n_recs == p->cap_recs) {
		uint32_t cap = p->cap_recs ? p->cap_recs * 2 : 64;
		orec *r = realloc(p->recs, cap * sizeof(orec));
		if (!r)
			return NIL;
		p->recs = r;
		uint32_t *f = realloc(p->free_recs, cap * sizeof(uint32_t));
		if (!f)
			return NIL;
		p->free_recs = f;
		p->cap_recs = cap;
	}
	p->recs[p->n_recs] = (orec){0};
	return p->n_recs++;
}

/*
 * The record of @owner with room for @more ids, made if unknown; NIL when
 * out of memory (then no owner was made).
 */
static uint32_t owner_get(mbp *p, uint64_t owner, uint32_t more)
{
	uint64_t i = owner_find_slot(p, owner);
	uint32_t r = p->omap[i].rec;
	bool made = false;

	if (r == NIL) {
		if ((uint64_t)(p->n_owners + 1) * 2 > p->omask + 1) {
			if (!owner_grow(p))
				return NIL;
			i = owner_find_slot(p, owner);
		}
		r = rec_take(p);
		if (r == NIL)
			return NIL;
		made = true;
	}
	orec *o = &p->recs[r];
	if (o->n + more > o->cap) {
		uint32_t cap = o->cap ? o->cap : 16;
		while (cap < o->n + more)
			cap *= 2;
		uint32_t *ids = realloc(o->ids, cap * sizeof(uint32_t));
		if (!ids) {
			if (made)
				p->free_recs[p->n_free_recs++] = r;
			return NIL;
		}
		o->ids = ids;
		o->cap = cap;
	}
	if (made) {
		p->omap[i] = (oent){.owner = owner, .rec = r};
		p->n_owners++;
	}
	return r;
}

/* Remove the owner at map slot @i by backward shift. */
static void owner_delete(mbp *p, uint64_t i)
{
	for (uint64_t j = i;;) {
		j = (j + 1) & p->omask;
		if (p->omap[j].rec == NIL)
			break;
		uint64_t h = owner_slot(p->omap[j].owner, p->omask);
		if ((j > i && (h <= i || h > j)) || (j < i && h <= i && h > j)) {
			p->omap[i] = p->omap[j];
			i = j;
		}
	}
	p->omap[i].rec = NIL;
	p->n_owners--;
}

/* --- calls ---------------------------------------------------------------- */

int mbp_allocate(mbp *p, uint64_t owner, uint32_t n, uint32_t *ids)
{
	uint32_t r;

	if (!p || !ids || n == 0)
		return -1;
	pthread_mutex_lock(&p->mu);
	if ((uint64_t)p->n_free + p->n_cached < n) {
		pthread_mutex_unlock(&p->mu);
		return -2;
	}
	r = owner_get(p, owner, n);
	if (r == NIL) {
		pthread_mutex_unlock(&p->mu);
		return -3;
	}
	orec *o = &p->recs[r];
	for (uint32_t k = 0; k < n; k++) {
		uint32_t id;
		if (p->n_free) {
			id = p->free_ids[--p->n_free];
		} else {
			id = p->lru_head;
			lru_unlink(p, id);
			key_delete(p, p->b[id].key);
			p->b[id].published = 0;
		}
		p->b[id].holds = 1;
		o->ids[o->n++] = id;
		ids[k] = id;
	}
	pthread_mutex_unlock(&p->mu);
	return 0;
}

int mbp_match(mbp *p, uint64_t owner, const mbp_key *keys, uint32_t n, uint32_t *ids,
              uint32_t *n_matched)
{
	uint32_t m = 0, r;

	if (!p || !n_matched || (n && (!keys || !ids)))
		return -1;
	*n_matched = 0;
	pthread_mutex_lock(&p->mu);
	while (m < n && (ids[m] = key_find(p, keys[m])) != NIL)
		m++;
	if (m == 0) {
		pthread_mutex_unlock(&p->mu);
		return 0;
	}
	r = owner_get(p, owner, m);
	if (r == NIL) {
		pthread_mutex_unlock(&p->mu);
		return -3;
	}
	orec *o = &p->recs[r];
	for (uint32_t k = 0; k < m; k++) {
		blk *b = &p->b[ids[k]];
		if (b->holds++ == 0)
			lru_unlink(p, ids[k]);
		o->ids[o->n++] = ids[k];
	}
	pthread_mutex_unlock(&p->mu);
	*n_matched = m;
	return 0;
}

uint32_t mbp_publish(mbp *p, const uint32_t *ids, const mbp_key *keys, uint32_t n)
{
	uint32_t done = 0;

	if (!p || (n && (!ids || !keys)))
		return 0;
	pthread_mutex_lock(&p->mu);
	for (uint32_t k = 0; k < n; k++) {
		blk *b = &p->b[ids[k]];
		if (b->published || b->holds == 0 || !key_insert(p, keys[k], ids[k]))
			continue;
		b->key = keys[k];
		b->published = 1;
		done++;
	}
	pthread_mutex_unlock(&p->mu);
	return done;
}

int mbp_free_all(mbp *p, uint64_t owner)
{
	if (!p)
		return -1;
	pthread_mutex_lock(&p->mu);
	uint64_t i = owner_find_slot(p, owner);
	uint32_t r = p->omap[i].rec;
	if (r == NIL) {
		pthread_mutex_unlock(&p->mu);
		return -1;
	}
	orec *o = &p->recs[r];
	for (uint32_t k = o->n; k-- > 0;) {
		uint32_t id = o->ids[k];
		blk *b = &p->b[id];
		if (--b->holds)
			continue;
		if (b->published)
			lru_append(p, id);
		else
			p->free_ids[p->n_free++] = id;
	}
	o->n = 0;
	owner_delete(p, i);
	p->free_recs[p->n_free_recs++] = r;
	pthread_mutex_unlock(&p->mu);
	return 0;
}

#define LOCKED_READ(p, expr)                                                                       \
	do {                                                                                       \
		uint32_t v_;                                                                       \
		pthread_mutex_lock(&(p)->mu);                                                      \
		v_ = (expr);                                                                       \
		pthread_mutex_unlock(&(p)->mu);                                                    \
		return v_;                                                                         \
	} while (0)

uint32_t mbp_n_free(mbp *p)
{
	LOCKED_READ(p, p->n_free + p->n_cached);
}

uint32_t mbp_n_cached(mbp *p)
{
	LOCKED_READ(p, p->n_cached);
}

uint32_t mbp_n_keys(mbp *p)
{
	LOCKED_READ(p, p->n_keys);
}

uint32_t mbp_n_owners(mbp *p)
{
	LOCKED_READ(p, p->n_owners);
}
