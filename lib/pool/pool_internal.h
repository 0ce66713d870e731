/*
 * lib/pool/pool_internal.h - the pool object and the functions its .c files share.
 *
 * Laid out in three parts:
 *   - the struct;
 *   - the functions the .c files share, declared under the file that
 *     defines each;
 *   - the small inline helpers: thread slots, streams, statistics.  The
 *     magazine protocol's inline half is in lib/pool/magazine.h, and the
 *     bias protocols' (owner ops, shard ops) in lib/pool/bias.h, both
 *     included among them.
 *
 * Locks and waits, in the order they nest (outer first):
 *   fallback_lock (only a thread without a slot) -> owner shard lock
 *     -> [waits for a biased thread to leave its owner op] -> owner op
 *     -> grow_lock -> hist_lock
 *   any of these -> the heavy barrier's fallback lock (lib/base/barrier.c; a leaf)
 *   registry lock (thread exit) -> [waits for a drainer's claim]
 *   owner shard lock or owner op -> the thread's own magazine, entered,
 *     never waited for (the one-block paths, alloc_from_mag, kvp_free_all)
 *   owner shard lock -> spare_lock (a leaf: record batches, shared id arrays)
 *
 * An owner op or a shard lock may be held across a system allocation or
 * free of an owner's id array (lib/pool/idarray.h): the allocator's own
 * locks are leaves to kvpool.  Never inside a magazine: kvp_free_all drops
 * the record only after it has left its magazines.
 *
 * An owner op is a thread inside its own biased owner record
 * (lib/pool/owner.h).  It takes no shard lock while inside.  So a revoker
 * that holds a shard lock and waits for it closes no cycle.  A shard op
 * (a thread inside the minted shard biased to it, lib/pool/bias.h) stands
 * where that shard's lock would in the order above; inside it the thread
 * may revoke a record's bias (owner ops wait for nothing) but takes no
 * other shard's exclusion, so a revoker of the shard, which holds its lock
 * and waits for the op, closes no cycle either.  In a plain
 * pool neither a shard lock nor an owner op is held across a drain or a
 * growth, since kvp_allocate takes its blocks first.  The exception is
 * when no owner record can be reserved for lack of memory.  (A prefix
 * pool's allocation evicts, drains and grows under the owner's shard
 * mutex: lib/prefix/prefix_internal.h gives that lock order.)  A drainer
 * waits for magazines whose owners are inside a block-path call (in_call).
 * Such a call never waits for any lock.  A thread entering its magazine
 * never waits at all: it sees the stream starving and leaves the magazine
 * alone.
 */
#ifndef KVPOOL_LIB_POOL_INTERNAL_H
#define KVPOOL_LIB_POOL_INTERNAL_H

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <kvpool/pool.h>

#include "lib/pool/blocktable.h"
#include "lib/pool/freestack.h"
#include "lib/pool/owner.h"
#include "lib/pool/pool_latency.h"
#include "lib/pool/tslot.h"

struct kvpi_prefix; /* opaque here: the mode's own state (lib/prefix) */

/*
 * A mode of the pool: a layer above it that takes some public calls over.
 * The prefix cache (lib/prefix) is the one mode today.  It installs its
 * table when the pool is made (kvp_pool_create, lib/prefix/prefix_mode.c)
 * and before the pool is shared; the pool calls it through this table only,
 * so lib/pool includes nothing of the layers above it.  Each entry has the
 * contract of the public call it replaces, arguments already checked
 * (stream index @si valid, ids below n_ids where the call says so).
 */
struct kvpi_pool_mode {
	int (*allocate)(struct kvp_pool *p, int si, uint32_t n_tokens, kvp_owner owner,
	                kvp_format format, kvp_ref *refs, uint32_t nb);
	int (*alloc_block)(struct kvp_pool *p, int si, kvp_format format, kvp_ref *out);
	int (*free)(struct kvp_pool *p, const kvp_ref *refs, size_t n);
	int (*free_all)(struct kvp_pool *p, kvp_owner owner);
	int (*shrink)(struct kvp_pool *p, int si, uint32_t target_free, uint32_t *n_retired);
	int (*block_get)(struct kvp_pool *p, kvp_ref ref, kvp_block_info *out);
	/* Free blocks the mode keeps out of the pool's free lists (cached). */
	uint64_t (*n_cached)(struct kvp_pool *p, int si);
	/* Make room for ids below @n_ids (grow_lock held); 0 or -1. */
	int (*extend)(struct kvp_pool *p, uint32_t n_ids);
	/* Free the mode's state (pool destroy, single-threaded). */
	void (*destroy)(struct kvp_pool *p);
};

struct kvpi_retire_hook {
	kvp_retire_fn fn;
	void *arg;
};

struct kvp_pool {
	/* Read-mostly configuration. */
	uint32_t block_size;
	int32_t bs_shift;    /* log2(block_size) when a power of two, else -1 */
	bool asym;           /* membarrier-based asymmetric protocols (else seq_cst) */
	uint32_t max_blocks; /* resolved: never 0 */
	uint32_t thread_cache;
	uint32_t history_len;
	uint32_t n_streams; /* 2 with separate_kv, else 1 */
	bool separate_kv;
	int8_t si_of[4]; /* stream -> stream index, or -1 (kvpi_stream_index) */
	bool grow;       /* false in prefix mode: that layer grows after eviction */
	bool grow_cfg;   /* grow_on_exhaustion as configured, either mode (reports) */
	uint64_t uid;    /* unique for the process's life; names the pool in TLS */
	/* The mode above the pool (struct kvpi_pool_mode), or NULL for a plain
	 * pool.  In the first cache line: every allocate and free tests it. */
	const struct kvpi_pool_mode *mode;
	/* The prefix cache's state when that mode is on (lib/prefix). */
	struct kvpi_prefix *prefix;

	struct kvpi_blocktable bt;
	_Atomic uint32_t n_ids; /* blocks ever created; release-published */

	/* On lines of their own: every push and pop writes a head, and n_ids
	 * above is read by every free. */
	struct kvpi_freestack fs[2] __attribute__((aligned(64)));
	/* Raised by drainers (seq_cst RMW) before their heavy barrier; read
	 * by owners entering a magazine.  See the protocol in lib/pool/magazine.h. */
	_Atomic uint32_t starving[2] __attribute__((aligned(64)));

	/* Blocks managed (created - retired), per stream and total; grow_lock. */
	_Atomic uint64_t managed_stream[2] __attribute__((aligned(64)));
	_Atomic uint64_t managed;

	/* In-use count published in batches by the threads, and its peak. */
	_Atomic int64_t in_use __attribute__((aligned(64)));
	_Atomic uint64_t peak;

	/* Per-thread slots: add-only lock-free list. */
	_Atomic(struct kvpi_tslot *) slots __attribute__((aligned(64)));
	_Atomic uint32_t n_slots; /* slots made (their idx: 1, 2, ...) */
	struct kvpi_tslot *fallback;
	pthread_mutex_t fallback_lock;

	struct kvpi_owners owners;

	pthread_mutex_t grow_lock; /* growth, shrink, retire hooks */
	struct kvpi_retire_hook hooks[KVP_MAX_RETIRE_HOOKS];
	/* Retired ids, linked by free_next, for growth to reuse; grow_lock. */
	uint32_t retired_head;
	_Atomic uint32_t n_retired_ids; /* written under grow_lock, read anywhere */

	pthread_mutex_t hist_lock;
	kvp_stats *hist;
	size_t hist_head, hist_n;
	_Atomic int hist_started;

	struct kvp_pool *reg_next; /* registry of live pools (lib/pool/tslot.c) */

	/* Reports (lib/pool/pool_report.c, pool_prom.c, pool_latency.h). */
	uint32_t n_blocks_initial;       /* the config's n_blocks */
	struct kvp_pool *show_next;      /* KVPOOL_SHOW_STATS exit list; its lock */
	struct kvpi_alloc_lat alloc_lat; /* sampled kvp_allocate durations */
};

/*
 * Raw-block bias of a slot (struct kvpi_tslot's raw_bias) and the value its
 * in_owner_op word holds while its thread frees one of its raw blocks
 * without a CAS (records are aligned, so 1 names none).
 * lib/pool/bias.c has the protocol.
 */
#define KVPI_RAW_REVOKED  0u
#define KVPI_RAW_BIASED   1u
#define KVPI_RAW_REVOKING 2u
#define KVPI_RAW_OP       ((uintptr_t)1)

/* ---- Functions the pool's .c files share, by the file that defines them ---- */

/* lib/pool/pool.c: create, destroy, and the heavy barrier. */
/*
 * kvpi_pool_create - kvp_pool_create without a mode: a plain pool, not yet
 * shared.  Returns KVP_OK, KVP_EINVAL (a bad @cfg) or KVP_ENOMEM.
 */
int kvpi_pool_create(const kvp_pool_config *cfg, struct kvp_pool **out);
/* kvpi_pool_discard - destroy a pool nobody else has seen (a failed create). */
void kvpi_pool_discard(struct kvp_pool *p);
/* The heavy side's barrier of the asymmetric Dekker pairs, after its seq_cst
 * store (lib/pool/magazine.h): kvpi_barrier_heavy() when p->asym. */
void kvpi_heavy_barrier(struct kvp_pool *p);

/* lib/pool/bias.c: the owner and raw-block bias protocols. */
/*
 * kvpi_bias_revoke_slow - kvpi_bias_revoke's revocation, once it found @r
 * biased to slot @t, not the caller's: clears the bias, issues the heavy
 * barrier and waits until @t's thread is not inside an owner op on @r.
 */
void kvpi_bias_revoke_slow(struct kvp_pool *p, struct kvpi_orec *r, uintptr_t t);

/*
 * kvpi_oshard_note_slow - kvpi_oshard_lock's rare case, holding @sh's lock
 * and having found its bias @t not the caller's slot @s: revoke that bias
 * (as kvpi_bias_revoke_slow does a record's) when @t is not 0, and start
 * a new streak for @s; with @t 0, start a new streak when the last one was
 * another slot's, else (kvpi_oshard_lock counted it long enough) bias the
 * shard to @s when it is @s's minted shard in a plain pool
 * (lib/pool/owner.h, "Biased shards").
 */
void kvpi_oshard_note_slow(struct kvp_pool *p, struct kvpi_tslot *s, struct kvpi_oshard *sh,
                           uintptr_t t);

/*
 * kvpi_raw_exclude - before changing the state word of raw block @b (a CAS)
 * from slot @s: if the hand-out whose state is @st has its owner word naming
 * another slot whose raw bias still stands, revoke that bias (once for the
 * slot's life), so that slot's thread no longer frees it without a CAS.
 * lib/pool/bias.c.
 */
void kvpi_raw_exclude(struct kvp_pool *p, struct kvpi_tslot *s, struct kvpi_block *b, uint64_t st);

/* lib/pool/pool_blocks.c: the block path. */
int kvpi_get_blocks(struct kvp_pool *p, struct kvpi_tslot *s, int si, kvpi_u32_alias *ids,
                    uint32_t k);
/*
 * kvpi_get_blocks_fast - kvpi_get_blocks without its starving tail: @k
 * blocks from the slot's magazine and the global stack, or false having
 * taken nothing (no drain, no growth).
 */
bool kvpi_get_blocks_fast(struct kvp_pool *p, struct kvpi_tslot *s, int si, kvpi_u32_alias *ids,
                          uint32_t k);
void kvpi_put_blocks(struct kvp_pool *p, struct kvpi_tslot *s, int si, const uint32_t *ids,
                     uint32_t k);
void kvpi_put_chain(struct kvp_pool *p, struct kvpi_tslot *s, int si, uint32_t first, uint32_t last,
                    uint32_t k);
/*
 * kvpi_mag_hold_room - enter slot @s's magazine of stream @si with room for
 * @n more ids (grown, or its oldest ids flushed to the global stack); *@base
 * is where they go.  NULL, holding nothing, when the slot has no magazine,
 * the stream is starving or @n ids cannot fit.  The caller writes ids from
 * *@base on, waits for nothing while it holds the magazine, and ends with
 * kvpi_mag_release_room.
 */
struct kvpi_mag *kvpi_mag_hold_room(struct kvp_pool *p, struct kvpi_tslot *s, int si, uint32_t n,
                                    uint32_t *base);
/* kvpi_mag_release_room - the @k ids written from @base become the
 * magazine's top, the first allocated on top; leaves it.  They were written
 * oldest allocation first, or with @top_first in stack order already. */
void kvpi_mag_release_room(struct kvpi_mag *m, uint32_t base, uint32_t k, bool top_first);

/* lib/pool/magazine.c: draining the magazines (lib/pool/magazine.h). */
/* Drain stream @si's magazines into its global stack: until @want blocks are
 * reservable (idle magazines first), or all of them (@want 0).  The caller
 * has raised starving[si] (seq_cst). */
void kvpi_drain_magazines(struct kvp_pool *p, int si, uint32_t want);
/* kvpi_drain_magazines' first pass only: the magazines of threads outside
 * a call, never waiting for one inside.  The caller has raised starving. */
void kvpi_drain_idle_magazines(struct kvp_pool *p, int si);

/*
 * kvpi_starve_begin - raise stream @si's starving count: until the matching
 * kvpi_starve_end, no thread enters its magazine of @si, so frees go to the
 * global stack and, after kvpi_drain_magazines, every free block of @si is
 * there or in transit to it (lib/pool/magazine.h).
 */
static inline void kvpi_starve_begin(struct kvp_pool *p, int si)
{
	/* seq_cst: the store half of the Dekker pair (lib/pool/magazine.h). */
	atomic_fetch_add_explicit(&p->starving[si], 1, memory_order_seq_cst);
}

/** kvpi_starve_end - lower the count kvpi_starve_begin raised */
static inline void kvpi_starve_end(struct kvp_pool *p, int si)
{
	/* release: nothing to publish; only lifts the bypass. */
	atomic_fetch_sub_explicit(&p->starving[si], 1, memory_order_release);
}

/* lib/pool/pool_resize.c: growth (grow_lock held). */
int kvpi_grow_locked(struct kvp_pool *p, int si, uint32_t n, kvpi_u32_alias *ids);
/* kvp_shrink of stream @si, arguments checked (prefix mode retires in two steps). */
int kvpi_shrink_stream(struct kvp_pool *p, int si, uint32_t target_free, uint32_t *n_retired);

/* lib/pool/pool_stats.c: statistics, the in-use count and the history. */
void kvpi_stats_sum(struct kvp_pool *p, kvp_stats *out);
void kvpi_history_record(struct kvp_pool *p);
void kvpi_history_tick_slow(struct kvp_pool *p, uint32_t calls);
/* kvpi_account_in_use when the delta leaves the thread's room. */
void kvpi_account_in_use_slow(struct kvp_pool *p, struct kvpi_tslot *s, int64_t d);
/* Raise the stored peak to @v, a count of blocks in use that happened;
 * returns the peak after (lib/pool/pool_stats.c). */
uint64_t kvpi_peak_raise(struct kvp_pool *p, int64_t v);
/* kvpi_fast_end's rare case: kvpi_account_in_use and kvpi_history_tick; KVP_OK. */
int kvpi_fast_end_slow(struct kvp_pool *p, struct kvpi_tslot *s, int64_t d);

/* lib/pool/tslot.c: declared in lib/pool/tslot.h (kvpi_tslot_get_slow and
 * the live-pool registry). */

/* ---- Inline helpers ---- */

/* Stream index of @stream for this pool, or -1 if not valid for its layout. */
static inline int kvpi_stream_index(const struct kvp_pool *p, kvp_stream stream)
{
	/* A table made at create: separate_kv maps K and V to 0 and 1, else
	 * K, V and KV all to 0; anything else is -1. */
	return (unsigned)stream < 4 ? p->si_of[(unsigned)stream] : -1;
}

/* Stream tag stored in a block of stream index @si. */
static inline uint32_t kvpi_stream_tag(const struct kvp_pool *p, int si)
{
	return p->separate_kv ? (uint32_t)si : (uint32_t)KVP_KV;
}

/**
 * kvpi_tslot_get - the calling thread's slot for @p
 *
 * The first thread-local entry is the common case (one pool per thread);
 * otherwise the slow path searches, takes a free slot from the pool's list,
 * or allocates one.  If memory runs out it returns the pool's shared
 * fallback slot with its mutex held (kvpi_tslot_put releases it).  Never
 * NULL.
 */
static inline struct kvpi_tslot *kvpi_tslot_get(struct kvp_pool *p)
{
	struct kvpi_tls_ent *e = kvpi_tls_head;
	/* The uid alone names the pool: uids are never reused in a process,
	 * so an equal uid is this pool's entry (kvpi_tslot_mine). */
	if (e && e->uid == p->uid)
		return e->slot;
	return kvpi_tslot_get_slow(p);
}

/**
 * kvpi_tslot_mine - the calling thread's slot for @p when it is the first
 * thread-local entry (the common case: one pool per thread), else NULL
 *
 * For the one-block fast paths: a slot found here is never the fallback
 * slot (that one is never in a thread's list), so they skip every fallback
 * check and need no kvpi_tslot_put.
 */
static inline struct kvpi_tslot *kvpi_tslot_mine(const struct kvp_pool *p)
{
	struct kvpi_tls_ent *e = kvpi_tls_head;
	/* No pointer compare: a uid is unique for the process's life, so an
	 * entry with @p's uid is @p's, even if another pool once lived at
	 * @p's address (that one had another uid). */
	if (__builtin_expect(e && e->uid == p->uid, 1))
		return e->slot;
	return NULL;
}

/** kvpi_tslot_is_fallback - whether @s is the pool's shared fallback slot */
static inline bool kvpi_tslot_is_fallback(const struct kvp_pool *p, const struct kvpi_tslot *s)
{
	return s == p->fallback;
}

/** kvpi_tslot_put - end of a call: releases the fallback slot's mutex if it was taken */
static inline void kvpi_tslot_put(struct kvp_pool *p, struct kvpi_tslot *s)
{
	if (s == p->fallback)
		kvpi_tslot_put_fallback(p);
}

/* The magazine protocol's inline half: it needs struct kvp_pool above. */
#include "lib/pool/magazine.h"

/* The bias protocols' inline half: it needs the slot helpers above. */
#include "lib/pool/bias.h"

/*
 * kvpi_account_in_use - note @d blocks more (or fewer) in use by this thread
 *
 * The common case stays thread-local and reads no shared word.  In it the
 * new unpublished delta stays within [0, in_use_room].  That is the room
 * the slow path last left: at most KVP_PEAK_BATCH - 1, and no more than the
 * pool's peak minus its published count then.  The fallback slot's room is
 * -1, so it always publishes.  See the slow path for why the peak stays
 * honest.
 */
static inline void kvpi_account_in_use(struct kvp_pool *p, struct kvpi_tslot *s, int64_t d)
{
	int64_t nd = s->delta_in_use + d;
	if (__builtin_expect(nd >= 0 && nd <= s->in_use_room, 1)) {
		s->delta_in_use = nd;
		return;
	}
	kvpi_account_in_use_slow(p, s, d);
}

/*
 * kvpi_note_freed - count @n blocks freed by this thread and note them out of
 * use.  Call it before the blocks are given back (pushed).  A summed stats
 * snapshot then never sees a block allocated again before its free is
 * counted.  And no thread that takes them next can count them in a peak
 * while we still do.
 */
static inline void kvpi_note_freed(struct kvp_pool *p, struct kvpi_tslot *s, uint64_t n)
{
	kvpi_ctr_add(s, KVPI_C_FREES, n);
	kvpi_account_in_use(p, s, -(int64_t)n);
}

/* kvpi_give_back - kvpi_note_freed, then push the @n blocks @ids of stream
 * @si (one block straight to the thread's magazine when it has room). */
static inline void kvpi_give_back(struct kvp_pool *p, struct kvpi_tslot *s, int si,
                                  const uint32_t *ids, uint32_t n)
{
	kvpi_note_freed(p, s, n);
	if (n != 1 || !kvpi_put_one_fast(p, s, si, ids[0]))
		kvpi_put_blocks(p, s, si, ids, n);
}

/*
 * kvpi_history_tick - count a mutating call; on a slot's first call and every
 * KVP_HISTORY_EVERY-th one, see whether a snapshot is due (the pool's first
 * mutating call, or this thread's cadence).
 */
static inline void kvpi_history_tick(struct kvp_pool *p, struct kvpi_tslot *s)
{
	_Static_assert((KVP_HISTORY_EVERY & (KVP_HISTORY_EVERY - 1)) == 0, "power of two");
	uint32_t calls = s->calls++;
	if ((calls & (KVP_HISTORY_EVERY - 1)) == 0)
		kvpi_history_tick_slow(p, calls);
}

/*
 * kvpi_fast_end - end a one-block fast path: note @d blocks more (or fewer)
 * in use and count the call for the history; returns KVP_OK.
 *
 * The common case is two thread-local stores; when the in-use room is
 * exceeded or a history snapshot may be due, kvpi_fast_end_slow does both
 * the long way (lib/pool/pool_stats.c).  That call is the fast path's last
 * act, a tail call, so a fast path that makes no other call keeps no
 * register across one (no saves and restores of callee-saved registers).
 */
static inline __attribute__((always_inline)) int kvpi_fast_end(struct kvp_pool *p,
                                                               struct kvpi_tslot *s, int64_t d)
{
	int64_t nd = s->delta_in_use + d;
	uint32_t calls = s->calls;
	if (__builtin_expect(
	        nd >= 0 && nd <= s->in_use_room && (calls & (KVP_HISTORY_EVERY - 1)) != 0, 1)) {
		s->delta_in_use = nd;
		s->calls = calls + 1;
		return KVP_OK;
	}
	return kvpi_fast_end_slow(p, s, d);
}

/* kvpi_end_call - end a public call: count it for the history cadence when
 * it changed the pool (@mutated), and give the fallback slot back if taken. */
static inline void kvpi_end_call(struct kvp_pool *p, struct kvpi_tslot *s, bool mutated)
{
	if (mutated)
		kvpi_history_tick(p, s);
	kvpi_tslot_put(p, s);
}

/* kvpi_fail_call - end an allocate call that got no blocks: an exhaustion is
 * counted and recorded in the history; returns @rc. */
static inline int kvpi_fail_call(struct kvp_pool *p, struct kvpi_tslot *s, int rc)
{
	if (rc == KVP_EEXHAUSTED) {
		kvpi_ctr_add(s, KVPI_C_EXHAUSTED, 1);
		kvpi_history_record(p);
	}
	kvpi_end_call(p, s, false);
	return rc;
}

#endif /* KVPOOL_LIB_POOL_INTERNAL_H */
