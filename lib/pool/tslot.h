/*
 * lib/pool/tslot.h - per-thread pool state: magazines of free blocks and stats.
 *
 * Each thread that calls a pool gets one slot for that pool: a magazine of
 * up to thread_cache free block ids per stream, and its statistics
 * counters.  A magazine starts with room for KVPI_MAG_INITIAL ids and grows
 * (doubling) when one call gives back more than it holds, so a thread that
 * frees a whole request keeps it at home for its next request.  Slots sit on a lock-free, add-only
 * list owned by the pool; a slot is never freed before the pool, and a slot given up by an exiting
 * thread is reused by the next new thread.
 *
 * Magazines are entered and drained by the protocol in lib/pool/magazine.h.
 *
 * Statistics counters have one writer, the slot's thread, which stores
 * load+delta with relaxed order (no locked instruction); readers sum them
 * with relaxed loads.  Relaxed suffices: each counter is exact on its own,
 * and no other memory is published through them.
 */
#ifndef KVPOOL_LIB_TSLOT_H
#define KVPOOL_LIB_TSLOT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "lib/pool/owner.h"

struct kvpi_mag {
	_Atomic uintptr_t in_call; /* owner only writes; drainers read */
	_Atomic uint32_t claimed;  /* drainers' (and thread exit's) CAS */
	_Atomic uint32_t count;    /* written by the holder; read racily by kvp_n_free */
	uint32_t cap;              /* room in ids; grown by the holder (pool_blocks.c, mag_grow) */
	uint32_t *ids;             /* ids[count-1] is the most recently freed */
	uint32_t *heap;            /* ids when grown past the slot's inline room, else NULL */
};

/* Room a magazine starts with (or thread_cache, if smaller); it grows by
 * demand up to thread_cache (lib/pool/pool_blocks.c, mag_make_room). */
#define KVPI_MAG_INITIAL 64u

/* The slot's owner cache: recent owner ids -> records (lib/pool/owner.h). */
#define KVPI_OCACHE_N 64u
struct kvpi_ocache_ent {
	kvp_owner key;
	struct kvpi_orec *rec;
	uint32_t epoch;
};

enum kvpi_ctr {
	KVPI_C_ALLOCS,
	KVPI_C_FREES,
	KVPI_C_REUSED,
	KVPI_C_EXHAUSTED,
	KVPI_C_GROWN,
	KVPI_C_RETIRED,
	KVPI_C_STALE,
	KVPI_C_NOT_FULL,  /* signed delta, two's complement */
	KVPI_C_PQUERIES,  /* prefix cache: keys asked for by kvp_prefix_match */
	KVPI_C_PHITS,     /* prefix cache: blocks kvp_prefix_match handed out */
	KVPI_C_EVICTIONS, /* prefix cache: cached blocks evicted */
	KVPI_N_CTR
};

struct kvpi_tslot {
	struct kvpi_tslot *next; /* immutable once on the list */
	_Atomic int taken;       /* 1 while a live thread owns the slot */
	struct kvpi_mag mag[2];
	/* What this slot's thread is inside, or 0: the record of an owner
	 * op, the shard of a shard op, or KVPI_RAW_OP; written only by that
	 * thread (lib/pool/bias.h, and kvp_free's raw op). */
	_Atomic uintptr_t in_owner_op;
	/* While this is KVPI_RAW_BIASED, the slot's thread may free the raw
	 * blocks it stamped (owner word = the slot) without a CAS.  The first
	 * other thread that frees or sets the fill of one revokes it for the
	 * slot's life (lib/pool/bias.c). */
	_Atomic uint32_t raw_bias;
	_Atomic uint64_t ctr[KVPI_N_CTR];
	struct kvpi_ocache_ent ocache[KVPI_OCACHE_N]; /* owner only */
	struct kvpi_rec_cache recs; /* owner only: spare owner records (lib/pool/owner.h) */
	int64_t delta_in_use;       /* owner only: blocks not yet added to pool->in_use */
	int64_t in_use_room;        /* owner only: largest delta_in_use the fast path keeps
	                             * (kvpi_account_in_use); -1 for the fallback slot */
	uint32_t calls;             /* owner only: mutating calls, for history cadence */
	uint32_t idx;               /* immutable: 1, 2, ... in order made; 0 the fallback slot */
	uint64_t minted;            /* owner only (fallback: its lock): ids minted */
	uint32_t ids[] __attribute__((aligned(64)));
} __attribute__((aligned(64)));

struct kvp_pool;

/* Add @d to counter @c of @s; only the slot's thread may call it. */
static inline void kvpi_ctr_add(struct kvpi_tslot *s, enum kvpi_ctr c, uint64_t d)
{
	/* relaxed load: only this thread writes its counters.
	 * release store (a plain mov on x86, stlr on ARM; no locked
	 * instruction): a reader that acquires this thread's new ALLOCS count
	 * must also see every FREES count that happened before this
	 * allocation.  One such count is another thread's free of the block
	 * whose push (release) this thread's pop (acquire) read.  Without it,
	 * kvpi_stats_sum's two passes could report more blocks in use than
	 * there ever were (lib/pool/pool_stats.c). */
	uint64_t v = atomic_load_explicit(&s->ctr[c], memory_order_relaxed);
	atomic_store_explicit(&s->ctr[c], v + d, memory_order_release);
}

/* A thread's {pool, slot} entries, most recently made first. */
struct kvpi_tls_ent {
	struct kvpi_tls_ent *next;
	struct kvp_pool *pool;
	uint64_t uid;
	struct kvpi_tslot *slot;
};

extern __thread struct kvpi_tls_ent *kvpi_tls_head
    __attribute__((tls_model("initial-exec"), visibility("hidden")));

struct kvpi_tslot *kvpi_tslot_get_slow(struct kvp_pool *pool);
void kvpi_tslot_put_fallback(struct kvp_pool *pool);

/**
 * kvpi_tslot_alloc - a zeroed slot whose magazines start with room for
 * min(@cap, KVPI_MAG_INITIAL) ids per stream (the fallback slot: @cap 0).
 * NULL on no memory.
 */
struct kvpi_tslot *kvpi_tslot_alloc(uint32_t cap);

/** kvpi_tslot_free - free a slot and its grown magazine arrays (pool destroy) */
void kvpi_tslot_free(struct kvpi_tslot *s);

/** kvpi_registry_add / kvpi_registry_remove - the live-pool registry (thread exit vs destroy) */
void kvpi_registry_add(struct kvp_pool *pool);
void kvpi_registry_remove(struct kvp_pool *pool);

#endif /* KVPOOL_LIB_TSLOT_H */
