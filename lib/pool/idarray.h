/*
 * lib/pool/idarray.h - an owner's block ids: an array in allocation order.
 *
 * Both owner tables (the plain pool's, lib/pool/owner.h, and the prefix
 * cache's, lib/prefix/prefix_owner.c) keep the ids an owner holds in one of
 * these.  Appending is a store at the end.  Dropping one id leaves a hole
 * (KVPI_NO_ID) where it was, so no other entry moves and a position kept
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
 * record is dropped, so an owner of a few blocks costs no array traffic,
 * and every record that has held a block has one.  Bigger arrays
 * circulate apart from the records that use them.  A record
 * dropped gives such an array to the dropping thread's stash (struct kvpi_idstash, in its thread
 * slot); an array that must grow takes the smallest stashed array big enough, and gives its old one
 * to the stash.  So a server making an owner per request asks the system for nothing once it has
 * seen its peak, whichever record serves which request.  A stash keeps at most KVPI_IDSTASH_BYTES;
 * arrays beyond that, and arrays above the largest stashed size, go back to the system.
 *
 * Synchronization: none of its own.  Every function is called under the
 * owning record's exclusion (lib/pool/owner.h, lib/prefix/prefix_owner.c).
 */
#ifndef KVPOOL_LIB_POOL_IDARRAY_H
#define KVPOOL_LIB_POOL_IDARRAY_H

#include <stdint.h>

#include "lib/pool/blocktable.h"

/* Array sizes: 64 << c ids for c < KVPI_IDARR_CLASSES (64 .. 1 M ids). */
#define KVPI_IDARR_MIN_SHIFT 6
#define KVPI_IDARR_CLASSES   15
/* Arrays of the smallest size stay with their record when it is dropped. */
#define KVPI_IDARR_ATTACHED (1u << KVPI_IDARR_MIN_SHIFT)
/* Bytes of spare arrays one stash keeps at most. */
#define KVPI_IDSTASH_BYTES (2u << 20)

struct kvpi_idarr {
	uint32_t *ids;  /* allocation order; KVPI_NO_ID marks a hole */
	uint32_t len;   /* entries used, holes included */
	uint32_t cap;   /* entries allocated: 0 or 64 << c */
	uint32_t count; /* live entries */
};

/* Spare arrays of one thread, by size class, linked through their first
 * bytes.  Used by the slot's thread only (or the fallback slot's lock
 * holder). */
struct kvpi_idstash {
	void *head[KVPI_IDARR_CLASSES];
	uint64_t bytes;
};

/* Told that live entry @id now sits at @pos (compaction); @ctx is the caller's. */
typedef void kvpi_idarr_moved_fn(void *ctx, uint32_t id, uint32_t pos);

/**
 * kvpi_idarr_reserve_slow - kvpi_idarr_reserve when the array is full
 * Compacts (calling @moved for every live entry that moves) if holes
 * outnumber live entries, then grows if that was not enough: into an
 * array from @st, else one from the system; the old array goes to @st.
 * 0, or -1 when no memory could be had (the array is then unchanged but
 * maybe compacted).
 */
int kvpi_idarr_reserve_slow(struct kvpi_idarr *a, uint32_t extra, kvpi_idarr_moved_fn *moved,
                            void *ctx, struct kvpi_idstash *st);

/**
 * kvpi_idarr_reserve - room for @extra more pushes
 * @moved, @ctx: told where entries go if the array is compacted
 * @st: the calling thread's stash of spare arrays
 * Returns 0, or -1 (no memory, or past 2^31 entries).
 */
static inline int kvpi_idarr_reserve(struct kvpi_idarr *a, uint32_t extra,
                                     kvpi_idarr_moved_fn *moved, void *ctx, struct kvpi_idstash *st)
{
	if ((uint64_t)a->len + extra <= a->cap)
		return 0;
	return kvpi_idarr_reserve_slow(a, extra, moved, ctx, st);
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

/* kvpi_idarr_release's out-of-line half: the array goes to @st */
void kvpi_idarr_release_slow(struct kvpi_idarr *a, struct kvpi_idstash *st);

/** kvpi_idarr_release - no entries; an array above the smallest size goes
 * to @st (or the system), one of the smallest size is kept */
static inline void kvpi_idarr_release(struct kvpi_idarr *a, struct kvpi_idstash *st)
{
	a->len = a->count = 0;
	if (a->cap > KVPI_IDARR_ATTACHED)
		kvpi_idarr_release_slow(a, st);
}

/** kvpi_idarr_free - free the memory (record destroyed) */
void kvpi_idarr_free(struct kvpi_idarr *a);

/** kvpi_idstash_free - free every array in @st (pool destroyed) */
void kvpi_idstash_free(struct kvpi_idstash *st);

#endif /* KVPOOL_LIB_POOL_IDARRAY_H */
