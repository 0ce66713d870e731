/*
 * lib/pool/idarray.h - an owner's block ids: an array in allocation order.
 *
 * The pool's owner table (lib/pool/owner.h), in plain and prefix mode
 * alike, keeps the ids each owner holds in one of these.  Appending is a store at the end. Dropping
 * one id leaves a hole (KVPI_NO_ID) where it was, so no other entry moves and a position kept
 * beside the block stays right.  The array is compacted, in order, when
 * holes outnumber live entries and it would otherwise grow; the caller's
 * callback then learns every moved id's new position.  Trailing holes are
 * trimmed at once, so an owner that frees its newest block (a decode step
 * undone) leaves no hole.
 *
 * Why an array and not a list through the blocks: kvp_free_all and
 * kvp_blocks_for read the ids with independent loads, which the processor
 * overlaps, where a list is a chain of dependent cache misses
 * (docs/DESIGN.md, "Owner records").
 *
 * Memory: arrays come in sizes of 64 << c ids.  An array of the smallest
 * size (KVPI_IDARR_ATTACHED ids, 256 bytes) stays with its record when the
 * record is dropped, so an owner of a few blocks costs no array traffic.
 * A record made new gets one.  Bigger arrays circulate apart from the
 * records that use them: a record dropped with one gives it to the
 * dropping thread's stash (struct kvpi_idstash, beside the thread's spare
 * records) and takes a smallest one from there if it has one.  An array
 * that must grow takes a stashed array of its size class or up to two
 * above, from the thread's stash, else from the pool's shared stash, else
 * from the system; its old array goes to the thread's stash.  A thread's
 * stash keeps at most KVPI_IDSTASH_BYTES and passes the rest to the
 * shared one (and gives it everything when the thread exits), which keeps
 * at most KVPI_IDPOOL_BYTES and frees the rest.  So a server that makes an
 * owner per request asks the system for nothing once it has seen its peak,
 * whichever record serves which request and whichever thread ends it.
 *
 * Synchronization: none of its own for an array.  Every function is
 * called under the owning record's exclusion (lib/pool/owner.h).  A
 * thread's stash is used by its slot's thread only (or the fallback
 * slot's lock holder); the shared stash under the lock given with it.
 */
#ifndef KVPOOL_LIB_POOL_IDARRAY_H
#define KVPOOL_LIB_POOL_IDARRAY_H

#include <pthread.h>
#include <stdint.h>

#include "lib/pool/blocktable.h"

/* Array sizes: 64 << c ids for c < KVPI_IDARR_CLASSES (64 .. 1 M ids). */
#define KVPI_IDARR_MIN_SHIFT 6
#define KVPI_IDARR_CLASSES   15
/* Arrays of the smallest size stay with their record when it is dropped. */
#define KVPI_IDARR_ATTACHED (1u << KVPI_IDARR_MIN_SHIFT)
/* A growing array takes a stashed one at most this many classes bigger. */
#define KVPI_IDARR_TAKE_UP 2u
/* Bytes of spare arrays a thread's stash keeps at most; the shared one. */
#define KVPI_IDSTASH_BYTES ((uint64_t)256 << 10)
#define KVPI_IDPOOL_BYTES  ((uint64_t)64 << 20)

struct kvpi_idarr {
	uint32_t *ids;  /* allocation order; KVPI_NO_ID marks a hole */
	uint32_t len;   /* entries used, holes included */
	uint32_t cap;   /* entries allocated: 0 or 64 << c */
	uint32_t count; /* live entries */
};

/* Spare arrays by size class, linked through their first bytes. */
struct kvpi_idstash {
	void *head[KVPI_IDARR_CLASSES];
	uint64_t bytes;
};

/* Where arrays come from and go to: the calling thread's stash, then the
 * pool's shared one under @lock. */
struct kvpi_idsrc {
	struct kvpi_idstash *local;
	struct kvpi_idstash *shared;
	pthread_mutex_t *lock;
};

/* Told that live entry @id now sits at @pos (compaction); @ctx is the caller's. */
typedef void kvpi_idarr_moved_fn(void *ctx, uint32_t id, uint32_t pos);

/**
 * kvpi_idarr_reserve_slow - kvpi_idarr_reserve when the array is full
 * Compacts (calling @moved for every live entry that moves) if holes
 * outnumber live entries, or if the array could not grow otherwise; then
 * grows if that was not enough, into an array from @src or else the
 * system.  0, or -1 when no memory could be had (the array is then
 * unchanged but maybe compacted).
 */
int kvpi_idarr_reserve_slow(struct kvpi_idarr *a, uint32_t extra, kvpi_idarr_moved_fn *moved,
                            void *ctx, const struct kvpi_idsrc *src);

/**
 * kvpi_idarr_reserve - room for @extra more pushes
 * @moved, @ctx: told where entries go if the array is compacted
 * @src: the stashes of spare arrays
 * Returns 0, or -1 (no memory, or past 2^31 live entries).
 */
static inline int kvpi_idarr_reserve(struct kvpi_idarr *a, uint32_t extra,
                                     kvpi_idarr_moved_fn *moved, void *ctx,
                                     const struct kvpi_idsrc *src)
{
	if ((uint64_t)a->len + extra <= a->cap)
		return 0;
	return kvpi_idarr_reserve_slow(a, extra, moved, ctx, src);
}

/** kvpi_idarr_room - true when one more push fits without reserving */
static inline int kvpi_idarr_room(const struct kvpi_idarr *a)
{
	return a->len < a->cap;
}

/** kvpi_idarr_push - append @id (room reserved); returns its position */
static inline uint32_t kvpi_idarr_push(struct kvpi_idarr *a, uint32_t id)
{
	uint32_t pos = a->len++;
	a->ids[pos] = id;
	a->count++;
	return pos;
}

/** kvpi_idarr_remove_at - drop the live entry at @pos, trimming trailing holes */
static inline void kvpi_idarr_remove_at(struct kvpi_idarr *a, uint32_t pos)
{
	a->ids[pos] = KVPI_NO_ID;
	a->count--;
	while (a->len && a->ids[a->len - 1] == KVPI_NO_ID)
		a->len--;
}

/** kvpi_idarr_init - an empty array with room for KVPI_IDARR_ATTACHED ids;
 * 0, or -1 when no memory could be had (then @a is empty, with no room) */
int kvpi_idarr_init(struct kvpi_idarr *a);

/* kvpi_idarr_release's out-of-line half: a bigger array goes to @local
 * (or @shared), and a smallest one comes from @local if it has one. */
void kvpi_idarr_release_slow(struct kvpi_idarr *a, const struct kvpi_idsrc *src);

/**
 * kvpi_idarr_release - no entries (the record is dropped); an array of
 * the smallest size is kept, a bigger one traded at @src for a smallest
 * one when there is one (else the record keeps none)
 */
static inline void kvpi_idarr_release(struct kvpi_idarr *a, const struct kvpi_idsrc *src)
{
	a->len = a->count = 0;
	if (a->cap > KVPI_IDARR_ATTACHED)
		kvpi_idarr_release_slow(a, src);
}

/** kvpi_idarr_free - free the memory (record destroyed) */
void kvpi_idarr_free(struct kvpi_idarr *a);

/** kvpi_idstash_give - move every array of @src's local stash to its shared
 * one (thread exit); the shared one frees what it cannot keep */
void kvpi_idstash_give(const struct kvpi_idsrc *src);

/** kvpi_idstash_free - free every array in @st (pool destroyed) */
void kvpi_idstash_free(struct kvpi_idstash *st);

#endif /* KVPOOL_LIB_POOL_IDARRAY_H */
