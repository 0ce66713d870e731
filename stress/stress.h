/*
 * stress/stress.h - the engine of kvpool_stress: random mixes of every pool
 * operation from N threads, a model of what each thread was given, and the
 * invariant checks run between phases.
 *
 * Each worker slot i owns the owner ids (i+1) << 32 | k (k < ST_OWNERS),
 * its raw blocks (kvp_alloc_block) and the refs it freed (its stale refs),
 * and keeps an exact model of them: which refs each owner holds, in
 * allocation order, with each block's n_used, and whether the owner is
 * registered.  Because no other slot touches them, every return code and
 * every kvp_blocks_for / kvp_block_get answer can be predicted exactly,
 * even while other threads run.  Contested ids (ST_SHARED of them) are
 * raced for with kvp_register_owner: exactly one thread may win each.
 *
 * Threads: a phase runs one fresh thread per slot (threads exit at the end
 * of every phase and new ones re-enter the pool); st_check runs alone,
 * between phases.  Slot models are plain data, touched by one thread at a
 * time (thread creation and join order them).
 */
#ifndef KVPOOL_STRESS_STRESS_H
#define KVPOOL_STRESS_STRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <kvpool/kvpool.h>

#include "stress/promhist.h"

#define ST_OWNERS            6   /* private owners per slot */
#define ST_SHARED            4   /* contested owner ids, raced for by every slot */
#define ST_STALE             64  /* freed refs each slot remembers */
#define ST_RAW               32  /* raw blocks a slot holds at most */
#define ST_MAX_TOKENS_BLOCKS 512 /* largest allocation, in blocks */
#define ST_BURST             48  /* fresh owners in one burst (more than the pool keeps spare) */

typedef enum {
	OP_ALLOC,
	OP_ALLOC_SHORT_CAP,
	OP_FREE_SOME,
	OP_FREE_BOGUS,
	OP_FREE_ALL,
	OP_REGISTER,
	OP_RELEASE,
	OP_RAW_ALLOC,
	OP_RAW_FREE,
	OP_STALE,
	OP_GET,
	OP_SET_USED,
	OP_BLOCKS_FOR,
	OP_STATS,
	OP_SHRINK,
	OP_CONTEST,
	OP_EPHEMERAL,
	OP_OWNER_BURST,
	OP_N
} st_op;

extern const char *const st_op_names[OP_N];

typedef struct st_mref {
	kvp_ref ref;
	uint32_t n_used;
	uint8_t stream;
} st_mref;

typedef struct st_owner {
	kvp_owner id;
	bool registered;
	st_mref *refs;
	size_t n, cap;
} st_owner;

/* What a slot has done; summed over slots to compare with kvp_pool_stats. */
typedef struct st_counts {
	uint64_t ops[OP_N];
	uint64_t allocated, freed, stale_frees, exhausted, retired, enomem;
} st_counts;

typedef struct st_slot {
	unsigned index;
	st_owner owners[ST_OWNERS];
	st_owner eph; /* blocks left behind by short-lived threads */
	st_mref raw[ST_RAW];
	size_t n_raw;
	kvp_ref stale[ST_STALE];
	size_t n_stale, stale_next;
	uint64_t rng;
	bool shrunk; /* this phase's one shrink is done */
	st_counts c;
	uint64_t violations;
	char first_violation[512];
	kvp_ref *scratch; /* ST_MAX_TOKENS_BLOCKS + 1 refs */
} st_slot;

typedef struct st_world {
	kvp_pool *pool;
	promhist *alloc_lat; /* if not NULL, every kvp_allocate of do_alloc is timed into it */
	uint32_t block_size;
	uint32_t initial_blocks;
	bool faults_on; /* this phase injects allocator failures: ENOMEM is allowed */
	unsigned weight_total;
	uint32_t max_ids;      /* no shrink once this many ids exist (set by the caller) */
	uint32_t max_blocks;   /* the pool's growth cap (set by the caller) */
	st_counts mainc;       /* operations of the checking thread (drain, final release) */
	uint64_t probe_enomem; /* fault probes answered KVP_ENOMEM */
	unsigned n_slots;
	st_slot *slots;
	/* Invariant checks run, by kind, and their failures. */
	uint64_t checks_run, checks_failed;
	uint64_t check_kinds[9];
	FILE *log;
} st_world;

/** st_world_init - make @n slots for @pool; returns 0 or -1 (out of memory) */
int st_world_init(st_world *w, kvp_pool *pool, unsigned n, uint64_t seed, FILE *log);

/** st_world_free - free the models (not the pool) */
void st_world_free(st_world *w);

/** st_seed_slot - start slot @s's @phase: its PRNG state from the run's @seed, one shrink allowed
 */
void st_seed_slot(st_slot *s, uint64_t seed, uint64_t phase);

/** st_step - one random operation of slot @s, with its checks */
void st_step(st_world *w, st_slot *s);

/**
 * st_check - every invariant, with the pool quiescent (no phase running)
 * Returns the number of violations found (also counted in checks_failed).
 */
uint64_t st_check(st_world *w);

/**
 * st_drain_check - all free blocks of each stream can be taken at once by
 * this thread without growing the pool (nothing lost in exited threads'
 * caches), then given back.  Returns violations found.
 */
uint64_t st_drain_check(st_world *w);

/**
 * st_fault_probe - an allocation that must grow the pool, with every system
 * allocation failing: it must return KVP_ENOMEM and leave the pool exactly
 * as it was (stats, free counts, blocks created, no owner left behind).
 * It first shrinks both streams to no free block, to make room under the
 * growth cap; skipped when there is still no room.  Returns violations found.
 */
uint64_t st_fault_probe(st_world *w);

/** st_release_all - free everything the models hold (end of run) */
void st_release_all(st_world *w);

/** st_violations - violations found so far, by operations and by checks */
uint64_t st_violations(const st_world *w);

/** st_first_violation - the first violation's message ("" if none) */
const char *st_first_violation(const st_world *w);

/** st_total - sum of every slot's counts */
void st_total(const st_world *w, st_counts *out);

#define ST_CHECK_KINDS 9
extern const char *const st_check_names[ST_CHECK_KINDS];

#endif /* KVPOOL_STRESS_STRESS_H */
