/*
 * lib/prefix/prefix_internal.h - the prefix cache inside the pool (kvpool/prefix.h).
 *
 * A pool made with prefix_cache keeps five things beside the block path.
 *
 *   - Side entries.  Each block id has a side entry (struct kvpi_pside) in a
 *     two-level table that never moves.  The table is made of segments of
 *     KVPI_SEG_BLOCKS entries.  Segments are made with the pool's growth,
 *     under its grow mutex, and published with a release store.  An entry
 *     holds the hold count, the XOR of the holders' owner ids, a version
 *     bumped by every locker that changes them (for lock-free readers), the
 *     key it is published under (its index hash is made from it), its LRU
 *     links and flags, and a hint of its position in its latest holder's
 *     hold array.
 *   - A lock bit in each block's state word (KVPI_ST_LOCKED).  The block's
 *     prefix fields change only while it is set: hold count, holder XOR,
 *     owner, published key and LRU flags.  The store that clears the bit
 *     also writes the block's next state.  Taking the bit is one CAS on the
 *     state word, from a state the taker has checked.  So a match, a
 *     release, a publish and an eviction of the same block are ordered by
 *     that one word.  Blocks never share a lock.
 *   - The key index (lib/prefix/prefix_index.c): open addressing in
 *     KVPI_PIDX_SHARDS shards, mapping (stream tag, 128-bit key) to the
 *     block id published under it.  Lookups take no lock and run in a
 *     read-side section (a full table is replaced and retired to a grace
 *     period).  Changes are made under the shard's mutex, with the block
 *     locked or owned by an evictor.
 *   - LRU lists of cached blocks: KVPI_PFX_LRU_SHARDS per stream, with a
 *     mutex per shard.  A block is cached on the shard of the thread whose
 *     release cached it.  An evictor looks in its own thread's shard first.
 *     Each list is in order of caching time.  That time comes from the
 *     coarse monotonic clock, made strictly increasing per shard.  It is
 *     stamped under the shard mutex when a block is put on the list.
 *   - The pool's owner table (lib/pool/owner.h), shared with plain mode: an
 *     owner record holds the ids it holds in an array, in hold order
 *     (lib/pool/idarray.h).  Dropped ids leave holes (KVPI_NO_ID), compacted
 *     when they outnumber the live ids.  Records are recycled through the
 *     threads' record caches, arrays through their stashes.  In prefix
 *     mode every access holds the owner's shard mutex (no bias).
 *
 * The LRU lists are lazy across shards.  A match that takes a cached block
 * leaves it on its list, marked stale.  Its last release moves it to the
 * tail of its list if that is the releasing thread's own, else leaves it.
 * An evictor that meets a held block drops it from the list, and one that
 * meets a stale cached block moves it to the tail, with a new sequence
 * number.  A last release takes only its own thread's shard mutex.
 *
 * The number of cached blocks per stream is kept apart, in one counter.
 * A block is added before it becomes claimable, and taken off after it
 * stopped being available; a batch of releases adds its blocks in one
 * step, and a match takes its revived blocks off in one step when the call
 * ends.  So the counter is never below the blocks cached and unheld.  The
 * exhaustion decision reads it (lib/prefix/prefix_alloc.c, "Exhaustion").
 *
 * Private blocks.  An owned allocation hands each block out PRIVATE
 * (KVPI_ST_PRIVATE): one holder, the owner stamped in the block, on no LRU
 * list.  Every writer of such a word holds the owner's shard mutex: the
 * owner's releases (kvp_free, kvp_free_owned, kvp_free_all),
 * kvp_prefix_publish_many (which takes that mutex for a private block:
 * prefix_publish.c), kvp_block_set_used (lib/pool/pool_query.c), and the
 * two that make a published one ordinary or unpublished (a match of another
 * owner, a reset: prefix_match.c, prefix.c).  So under that mutex the word
 * is written with plain release stores, no lock bit and no CAS, and no lock
 * path accepts a private state: a CAS would race those stores.  A release
 * frees a private block that way (locked with a plain store while it writes
 * the holders, so snapshots wait).  A publish adds it to the index and then
 * stores it PUBLISHED, PRIVATE kept: its publisher is still its only
 * holder, and its last release makes it cached with no CAS either (locked
 * with a plain store, listed, counted, unlocked to the cached state; a
 * snapshot waits meanwhile).  Between the index add and the PUBLISHED store
 * a matcher that finds it sees it unpublished and refuses it without a CAS,
 * and a refused publish leaves it as it was.  A match that finds it
 * published and private first checks its key and clears PRIVATE with one
 * store under the owner's mutex (its own, when the owner is in its shard;
 * another taken only with trylock, else after its section, with no lock
 * held), then locks it as any published block.  A private block is listed
 * only while so locked by its last release, so an evictor leaves it, and no
 * lock path accepts a private state: no CAS ever meets one.  The bit never
 * comes back in a generation, so a lock path that sees it clear may lock as
 * below.  A reader that wants the owner of a private block reads the
 * state, then the owner, takes that owner's mutex and reads both again: the
 * same private state and owner are that owner's hand-out (another would
 * have needed the mutex).  Measured: docs/DESIGN.md, "Private blocks".
 *
 * Block states in prefix mode (state word bits, lib/pool/blocktable.h).
 * "lock" = CAS st -> st|LOCKED from a checked st; "unlock to S" = release
 * store of S (LOCKED clear); "store" = release store under the owner's
 * shard mutex.
 *
 *   free (on a free stack) --allocate (exclusive, popped)--> IN_USE|PRIVATE,
 *                                   1 holder (raw: IN_USE|RAW)
 *   IN_USE|PRIVATE --release: store--> free (then pushed on the free stack)
 *   IN_USE|PRIVATE --set_used: store--> IN_USE|PRIVATE, new fill
 *   IN_USE|PRIVATE --publish: index add, store--> IN_USE|PRIVATE|PUBLISHED
 *   IN_USE|PRIVATE|PUBLISHED --release (last hold): store it LOCKED, list
 *                                   it, count, unlock to--> CACHED|PUBLISHED
 *   IN_USE|PRIVATE|PUBLISHED --match of another owner: store--> IN_USE|PUBLISHED
 *   IN_USE|PRIVATE|PUBLISHED --reset: index del, store--> IN_USE|PRIVATE
 *   IN_USE|PUBLISHED --match: lock, holders+1, unlock--> same state
 *   IN_USE --publish: lock, index add, unlock to--> IN_USE|PUBLISHED
 *   IN_USE, 2+ holders --release: lock, holders-1, unlock--> same state
 *   IN_USE, unpublished, last hold --release: lock, unlock to--> free
 *                                   (then pushed on the free stack)
 *   IN_USE|PUBLISHED, last hold --release: lock, list it (or move it on its
 *                                   thread's list), count, unlock--> CACHED|PUBLISHED
 *   CACHED --match: lock, 1 holder, unlock to--> IN_USE|PUBLISHED, gen + 1
 *   CACHED, not stale --evictor: CAS (LRU mutex held)--> EVICTING --index
 *           key deleted, store--> free (exclusive: handed out or pushed)
 *   EVICTING --a publish of its key: the index slot names the new block
 *           (under the index shard mutex)--> same state, key gone
 *   EVICTING (claimed by an allocation that then fails) --relisted in
 *           caching-time order, store under its index shard mutex-->
 *           CACHED (its key still names it); if a reset began since the
 *           claim, or its key was taken over: unlisted, evicted as above
 *   IN_USE|PUBLISHED --reset: lock, index del, unlock to--> IN_USE
 *   listed CACHED stale / listed IN_USE --evictor: try-lock (one CAS, never
 *           waits), move to tail / drop from list, unlock--> same state
 *   any plain-pool writer (set_used) waits while LOCKED.
 *
 * Why nothing is lost or handed out twice:
 *   - A block leaves CACHED only by a CAS from a state with CACHED set and
 *     LOCKED clear.  That is either the matcher's lock, which then revives
 *     the block, or the evictor's CAS to EVICTING.
 *   - Whichever CAS comes first changes the word.  So the other fails and
 *     sees the new state.  If the matcher's lock won, the block is held,
 *     and the evictor moves on.  If the evictor won, EVICTING is not
 *     lockable, and the key is a miss.
 *   - A matcher found the block's id in the index before it locked.  So
 *     after locking (a private one: under its owner's mutex first) it checks
 *     the key it looked up (pside.pub, .pub_stream, .pub_key).  Those
 *     fields change only while locked or while EVICTING.  So a block
 *     evicted and published again under another key is a miss, never a
 *     wrong hit.
 *   - Every hold is counted under the lock.  So the last release (count to
 *     0) is decided once.
 *   - A block becomes cached (counted, listed) while still locked.  So an
 *     evictor never sees it CACHED and unlisted.
 *
 * docs/PREFIX.md ("Concurrency protocol") walks through the races.
 *
 * Lock order (outer first):
 *   owner shard mutex (the pool's table) -> block lock bit -> LRU shard mutex
 *   block lock bit -> index shard mutex (innermost: its holder takes no lock)
 *   owner shard mutex -> [leave read-side section] grow mutex (growth)
 *   owner shard mutex -> index shard mutex (a private block's publish; the
 *     publish takes the owner's mutex outside a read-side section and with
 *     no block lock held; a reset's unpublishing of a private block, alike;
 *     and an allocation's eviction commit or unclaim, which holds no block
 *     lock or LRU mutex while it takes it)
 *   owner shard mutex -> another owner shard mutex: only tried
 *     (pthread_mutex_trylock), never waited for (a match making another
 *     owner's published block ordinary); a thread that waits for an owner
 *     shard mutex holds no other one
 *   (an allocation's eviction ahead takes the LRU and index shard mutexes
 *   after it released the owner's: lib/prefix/prefix_alloc.c)
 *
 * A thread holds at most one LRU mutex at a time, and at most one block
 * lock, with two exceptions.  kvp_free_all keeps the blocks it makes
 * cached locked until it lists them together (a batch,
 * lib/prefix/prefix_free.c); a block in a batch has no holder left.
 * kvp_prefix_publish_many keeps the blocks it publishes locked until it has
 * added their keys to the index, shard by shard (lib/prefix/prefix_publish.c);
 * meanwhile it waits only for index shard mutexes, whose holders wait for
 * nothing.  Both only try a block's lock while they hold a batch, and
 * finish the batch before they wait for one.  So a thread that waits for a
 * block lock holds no block lock.  An evictor holding an LRU mutex
 * only ever tries a block lock once.  That try is a CAS that fails when
 * the bit is set.  So the evictor never waits for a block lock.
 *
 * Synchronization:
 *
 *   data                       written by / under            read by / under
 *   -------------------------  ----------------------------  --------------------------
 *   pside.holders, .owner_xor  block lock, or the hand-out    block lock; block_get
 *                              (exclusive) before its         racily (seqlock on the
 *                              release store of the state,    state word, retry while
 *                              or a private block's release   locked)
 *                              (owner shard mutex, bumped)
 *   state word of a private    its owner's shard mutex        any (acquire); private
 *   block                      (plain release stores)         stays private only
 *                                                             under that mutex
 *   pside.pub, .pub_key,       block lock, the owner's shard  block lock; the index's
 *   .pub_stream                mutex of a private block, or   shard mutex while the
 *                              an evictor (EVICTING,          index holds the block
 *                              exclusive); the key set before (uniqueness check)
 *                              the index add, pub after it;   the owner's shard mutex
 *                              cleared after the delete       of a private block
 *   pside.listed, lru links,   LRU shard mutex (+ block lock  LRU shard mutex; listed
 *   seq and shard              for listed and shard, or the   and shard also under
 *                              claim: EVICTING, exclusive)    the block lock
 *   pside.stale                block lock                     block lock, or evictor
 *                                                             after acquire of the state
 *   pside.pos_hint             any (relaxed): a hint, always  owner shard mutex, checked
 *                              checked against the array      against the array
 *   pside.epoch                the fresh hand-out (exclusive, kvpi_block_get_epoch: no lock,
 *                              release, before the state's    validated by the state word
 *                              release store)                 (seqlock, acquire fence)
 *   lru.head_seq               LRU shard mutex (atomic)       evictors' scans (hint)
 *   prefix.resets              kvp_prefix_reset (seq_cst     claims (acquire), unclaim
 *                              add and fence; release sub)   (seq_cst fence, relaxed)
 *   prefix.cached              atomic add: +n before blocks   n_free, stats, and the
 *                              become claimable, -n after     exhaustion decision (one
 *                              they stop being available (a   load: never below the
 *                              match: once, at the call's     blocks cached and unheld)
 *                              end)
 *   prefix.pend                allocations (kvpi_pfx_get_    the exhaustion decision
 *                              blocks): RMW before a partial  (kvpi_pfx_get_blocks)
 *                              reserve, after a give-back
 *   index slots                shard mutex (relaxed stores),  lookups: no lock, in a
 *                              with the block locked or       read-side section
 *                              EVICTING                       (relaxed loads: a hint,
 *                                                             checked under the block
 *                                                             lock)
 *   index shard's table        shard mutex (release store);   lookups (acquire), in a
 *                              the old one retired to a       read-side section
 *                              grace period
 *   index shard's spare        the retired table's callback   the shard's writer
 *                              (exchange, acq_rel)            (exchange, acquire)
 *   owner records (the pool's  owner shard mutex (never       owner shard mutex
 *   table, lib/pool/owner.h)   biased in prefix mode)
 */
#ifndef KVPOOL_LIB_PREFIX_INTERNAL_H
#define KVPOOL_LIB_PREFIX_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <kvpool/prefix.h>

#include "lib/pool/pool_internal.h"
#include "lib/base/rcu.h"
#include "lib/base/spin.h"
#include "lib/prefix/prefix_index.h"

#define KVPI_PFX_LRU_SHARDS    16u
#define KVPI_PFX_COUNT_STRIPES 16u
/* Eviction is least recently cached first across shards to within this
 * window: a batch takes blocks cached up to it past the other shards' (home
 * batch) or the next shard's (another shard's) oldest (prefix_lru.c). */
#define KVPI_PFX_LRU_WINDOW_NS 20000000u
/* An evicting allocation drains the idle threads' magazines first, at most
 * once in this many nanoseconds per stream (lib/prefix/prefix_alloc.c). */
#define KVPI_PFX_IDLE_DRAIN_NS 1000000u
/* A small allocation that leaves its stream's free stack empty, with more
 * than KVPI_PFX_EVICT_AHEAD_CACHED blocks cached, evicts up to this many into
 * its thread's magazine (lib/prefix/prefix_alloc.c, "Evicting ahead"). */
#define KVPI_PFX_EVICT_AHEAD        64u
#define KVPI_PFX_EVICT_AHEAD_CACHED 4096u
/* Side table: top level of KVPI_PFX_TOP entries, each a segment directory of
 * KVPI_PFX_MID segments of KVPI_SEG_BLOCKS entries (2^31 ids in all). */
#define KVPI_PFX_MID_SHIFT 10u
#define KVPI_PFX_MID       (1u << KVPI_PFX_MID_SHIFT)
#define KVPI_PFX_TOP       (1u << (31 - KVPI_PFX_MID_SHIFT - KVPI_SEG_SHIFT))

struct kvpi_prefix;

/* Per-block prefix state (see the table above). */
struct kvpi_pside {
	_Atomic uint32_t holders;
	_Atomic uint32_t version; /* bumped by every locker that changes holders or owner */
	_Atomic uint32_t pos_hint;
	/* The generation of the block's latest fresh hand-out (allocation,
	 * growth, eviction), kept when a match revives it: the hand-out its
	 * storage rows belong to (lib/prefix/prefix_epoch.c).  Written only by
	 * the hand-out, while it holds the block exclusively. */
	_Atomic uint32_t epoch;
	_Atomic uint64_t owner_xor;
	/* The key the block is published under (while pub). */
	kvp_hash pub_key;
	uint64_t lru_seq;
	uint32_t lru_prev, lru_next;
	uint8_t lru_shard;  /* the list it is on (while listed) */
	uint8_t pub_stream; /* pub_key's stream tag (kvpi_stream_tag) */
	bool pub;
	/* Relaxed atomics (the evictor peeks at stale before it takes the
	 * lock; the lock bit and LRU mutex order every write). */
	_Atomic bool listed; /* on its LRU list */
	_Atomic bool stale;  /* listed, and taken by a match since it was put there */
	/* A private block in a publish batch, not flushed yet (written and
	 * read under its owner's shard mutex: lib/prefix/prefix_publish.c). */
	bool pub_pending;
} __attribute__((aligned(64)));

/* One line a block: every path that touches a block's prefix state touches
 * one cache line of it, not two. */
_Static_assert(sizeof(struct kvpi_pside) == 64, "a side entry is one cache line");
_Static_assert(KVPI_PFX_LRU_SHARDS <= 256, "lru_shard is a byte");

/* Relaxed accessors of the flags above: their writers are ordered by the
 * block lock and the LRU mutex, which publish them. */
static inline bool kvpi_pfx_flag(_Atomic bool *f)
{
	return atomic_load_explicit(f, memory_order_relaxed);
}

static inline void kvpi_pfx_set_flag(_Atomic bool *f, bool v)
{
	atomic_store_explicit(f, v, memory_order_relaxed);
}

struct kvpi_plru {
	pthread_mutex_t lock;
	uint32_t head, tail;
	uint64_t last_seq;         /* the largest caching time given out */
	_Atomic uint64_t head_seq; /* UINT64_MAX when empty */
} __attribute__((aligned(64)));

struct kvpi_pcount {
	_Atomic int64_t n[2];
} __attribute__((aligned(64)));

/* prefix.resets: kvp_prefix_reset adds KVPI_PFX_RESET_START at its start
 * and takes 1 off at its end, so the high half counts resets begun and the
 * low half those running. */
#define KVPI_PFX_RESET_START ((1ull << 32) + 1)

struct kvpi_prefix {
	struct kvpi_pshard idx[KVPI_PIDX_SHARDS];
	bool grow; /* the pool's grow_on_exhaustion (the pool's own flag is off) */
	/* Evict ahead only with more than this many blocks of the stream
	 * cached: KVPI_PFX_EVICT_AHEAD_CACHED (tests lower it, before the
	 * pool is shared, to race the path on small pools). */
	uint32_t ahead_cached;
	_Atomic uint64_t resets;   /* KVPI_PFX_RESET_START above; read by every claim */
	_Atomic uint64_t deferred; /* index tables waiting for a grace period */
	/* Per stream: when an evicting allocation last drained the idle
	 * threads' magazines (coarse monotonic ns; kvpi_pfx_get_blocks). */
	_Atomic uint64_t idle_drain[2];
	/* Cached blocks per stream: one counter (kvpi_pfx_count_one); only
	 * cached[0] is used.  Not striped: the exhaustion decision needs the
	 * count of one instant, and a sum of stripes read one by one misses a
	 * block counted in a stripe read late and uncounted in one read early. */
	struct kvpi_pcount cached[KVPI_PFX_COUNT_STRIPES] __attribute__((aligned(64)));
	/* Per stream, two counts (lib/prefix/prefix_alloc.c, "Exhaustion").
	 * Low 32 bits: blocks reserved from the free stack by allocations that
	 * may still give them back.  High 32 bits: how many give-backs there
	 * were. */
	struct kvpi_pcount pend __attribute__((aligned(64)));
	/* Side entries of ids below n0 (the pool's first blocks, rounded up
	 * to whole segments), also entered in the directory below; set before
	 * the pool is shared, never changed. */
	struct kvpi_pside *seg0;
	uint32_t n0;
	_Atomic(_Atomic(struct kvpi_pside *) *) top[KVPI_PFX_TOP];
	/* The pool's block table: an index add reads the state of the block
	 * that holds a key (lib/prefix/prefix_index.c, "Taking over"). */
	struct kvpi_blocktable *bt;
	struct kvpi_plru lru[2][KVPI_PFX_LRU_SHARDS];
};

/* The side entry of @id (created: below kvp_pool_n_ids or from a free stack),
 * given the table's first segment @seg0 of @n0 entries (read once by a loop). */
static inline struct kvpi_pside *kvpi_pfx_side_at(struct kvpi_prefix *pf, struct kvpi_pside *seg0,
                                                  uint32_t n0, uint32_t id)
{
	if (__builtin_expect(id < n0, 1))
		return &seg0[id];
	/* acquire (both): pairs with the release stores of kvpi_pfx_extend, so
	 * the entries initialised before publication are seen. */
	_Atomic(struct kvpi_pside *) *mid = atomic_load_explicit(
	    &pf->top[id >> (KVPI_PFX_MID_SHIFT + KVPI_SEG_SHIFT)], memory_order_acquire);
	struct kvpi_pside *seg = atomic_load_explicit(
	    &mid[(id >> KVPI_SEG_SHIFT) & (KVPI_PFX_MID - 1)], memory_order_acquire);
	return &seg[id & KVPI_SEG_MASK];
}

/* The side entry of @id: kvpi_pfx_side_at with the table's first segment. */
static inline struct kvpi_pside *kvpi_pfx_side(struct kvpi_prefix *pf, uint32_t id)
{
	return kvpi_pfx_side_at(pf, pf->seg0, pf->n0, id);
}

/*
 * kvpi_pfx_cas - CAS a block's state word from @st to @nst
 *
 * This is the CAS that takes a block's lock bit or moves it out of CACHED.
 * Matches, releases and evictions of one block are ordered by it.  When a
 * match and an evictor race for a cached block, exactly one such CAS wins.
 * It is out of line so the race test can widen the window before it.  It
 * lives in a file of its own, lib/prefix/prefix_cas.c, so that no caller
 * inlines it.
 */
bool kvpi_pfx_cas(struct kvpi_block *b, uint64_t st, uint64_t nst);

/* What kvpi_pfx_trylock returns when another thread holds the lock (no
 * state it locks is this: LOCKED is set in it). */
#define KVPI_PFX_BUSY UINT64_MAX

/*
 * kvpi_pfx_trylock - kvpi_pfx_lock that never waits
 *
 * Returns KVPI_PFX_BUSY when another thread holds the lock.  Else it
 * returns the state it locked, with LOCKED clear in the value returned; or
 * 0 when @ok refused the state, with nothing locked and the state refused
 * in *@seen.  For callers that hold other block locks, which must never
 * wait for one (the lock order in the file's top comment).
 */
static inline uint64_t kvpi_pfx_trylock(struct kvpi_block *b,
                                        bool (*ok)(uint64_t st, const void *arg), const void *arg,
                                        uint64_t *seen)
{
	for (;;) {
		/* acquire: see what the last unlocker (or hand-out) wrote. */
		uint64_t st = atomic_load_explicit(&b->state, memory_order_acquire);
		if (st & KVPI_ST_LOCKED)
			return KVPI_PFX_BUSY;
		if (!ok(st, arg)) {
			*seen = st;
			return 0;
		}
		if (kvpi_pfx_cas(b, st, st | KVPI_ST_LOCKED))
			return st;
	}
}

/*
 * kvpi_pfx_lock - lock block @b when @ok(@st, @arg) accepts its state
 *
 * kvpi_pfx_trylock, waiting (kvpi_spin_wait) while another thread holds
 * the lock: never returns KVPI_PFX_BUSY.
 */
static inline uint64_t kvpi_pfx_lock(struct kvpi_block *b, bool (*ok)(uint64_t st, const void *arg),
                                     const void *arg, uint64_t *seen)
{
	struct kvpi_spin spin = {0};
	uint64_t st;
	while ((st = kvpi_pfx_trylock(b, ok, arg, seen)) == KVPI_PFX_BUSY)
		kvpi_spin_wait(&spin);
	return st;
}

/* kvpi_pfx_unlock - leave block @b's lock, its state now @st */
static inline void kvpi_pfx_unlock(struct kvpi_block *b, uint64_t st)
{
	/* release: whoever locks or reads the word next (acquire) sees every
	 * prefix field written under the lock, and the holders' writes. */
	atomic_store_explicit(&b->state, st & ~KVPI_ST_LOCKED, memory_order_release);
}

/* Called by a locker about to change @e's holders or the block's owner.
 * Readers that straddle the change see the version move
 * (kvpi_pfx_snapshot). */
static inline void kvpi_pfx_bump(struct kvpi_pside *e)
{
	/* relaxed load: only lockers write it.
	 * release store: a reader that sees the new version (acquire) sees the
	 * lock taken, hence LOCKED or the state after it.
	 * release fence: a reader whose loads see a field written below sees
	 * the new version after its acquire fence. */
	uint32_t v = atomic_load_explicit(&e->version, memory_order_relaxed);
	atomic_store_explicit(&e->version, v + 1, memory_order_release);
	atomic_thread_fence(memory_order_release);
}

/*
 * kvpi_pfx_snapshot - read block @b's state, owner and hold count without its lock
 *
 * The read is consistent.  It retries while the block is locked, or while
 * the state or @e's version moved during the read.
 */
static inline uint64_t kvpi_pfx_snapshot(struct kvpi_block *b, struct kvpi_pside *e,
                                         kvp_owner *owner, uint32_t *holders)
{
	struct kvpi_spin spin = {0};
	for (;;) {
		/* acquire (both): pair with kvpi_pfx_bump's release store and the
		 * unlock's (or hand-out's) release store. */
		uint32_t v = atomic_load_explicit(&e->version, memory_order_acquire);
		uint64_t st = atomic_load_explicit(&b->state, memory_order_acquire);
		if (!(st & KVPI_ST_LOCKED)) {
			/* relaxed: validated by the re-reads below. */
			*owner = atomic_load_explicit(&b->owner, memory_order_relaxed);
			*holders = atomic_load_explicit(&e->holders, memory_order_relaxed);
			/* acquire fence: keeps the loads above before the re-reads,
			 * and pairs with kvpi_pfx_bump's release fence. */
			atomic_thread_fence(memory_order_acquire);
			if (atomic_load_explicit(&b->state, memory_order_relaxed) == st &&
			    atomic_load_explicit(&e->version, memory_order_relaxed) == v)
				return st;
		}
		kvpi_spin_wait(&spin);
	}
}

/* The calling thread's LRU shard and count stripe.  Slots made one after
 * another get different ones, up to KVPI_PFX_LRU_SHARDS threads. */
static inline uint32_t kvpi_pfx_home(const struct kvpi_tslot *s)
{
	_Static_assert(KVPI_PFX_COUNT_STRIPES == KVPI_PFX_LRU_SHARDS, "one home index for both");
	return s->idx % KVPI_PFX_LRU_SHARDS;
}

/*
 * Add @d to stream @si's cached count.  Add +1 before a block becomes
 * claimable: under its lock, before the unlock.  Add -1 after it stopped
 * being available: revived (a match adds its call's revivals in one step,
 * at the end), or evicted and pushed.  So the count never falls below the
 * blocks cached and unheld.
 *
 * release: a reader that sees the change (acquire) sees what the caller
 * did before.  That includes an evicted block's push onto the free stack
 * (lib/prefix/prefix_alloc.c, "Exhaustion").
 */
static inline void kvpi_pfx_count_one(struct kvpi_prefix *pf, int si, int64_t d)
{
	if (d)
		atomic_fetch_add_explicit(&pf->cached[0].n[si], d, memory_order_release);
}

/* Bring block @id's state word (to be CASed) and side entry into the cache. */
static inline void kvpi_pfx_prefetch(struct kvp_pool *p, uint32_t id)
{
	__builtin_prefetch(&kvpi_bt_block(&p->bt, id)->state, 1);
	__builtin_prefetch(kvpi_pfx_side(p->prefix, id), 1);
}

/* Stream index of a block from its state word. */
static inline int kvpi_pfx_si(const struct kvp_pool *p, uint64_t st)
{
	return p->separate_kv ? (int)kvpi_st_stream(st) : 0;
}

/* lib/prefix/prefix.c: life cycle. */
int kvpi_pfx_create(struct kvp_pool *p, const kvp_pool_config *cfg);
void kvpi_pfx_destroy(struct kvp_pool *p);
/* Side entries for ids below @n_ids; grow mutex held (or creation).  0 or -1. */
int kvpi_pfx_extend(struct kvpi_prefix *pf, uint32_t n_ids);

/* The index hash of the key block @e is published under (pub set). */
static inline uint64_t kvpi_pfx_pub_hash(const struct kvpi_pside *e)
{
	return kvpi_pfx_index_hash(&e->pub_key, e->pub_stream);
}

/* The LRU lists of cached blocks (lib/prefix/prefix_lru.c). */
#include "lib/prefix/prefix_lru.h"

/*
 * lib/prefix/prefix_owner.c: owners in prefix mode.  They live in the pool's
 * owner table (lib/pool/owner.h), each with the ids it holds in its id
 * array; a block may be held by several owners, so its position there is
 * a hint beside the block (pside.pos_hint), checked against the array.
 * Every call holds the owner's shard mutex; prefix records are never
 * biased.
 */
/* @key's record in @sh, made from @s's cache if it has none (*@made then
 * true); NULL: no memory. */
struct kvpi_orec *kvpi_pfx_oget(struct kvp_pool *p, struct kvpi_tslot *s, struct kvpi_oshard *sh,
                                kvp_owner key, bool *made);
/* Drop @r from @sh into @s's cache. */
void kvpi_pfx_oremove(struct kvp_pool *p, struct kvpi_tslot *s, struct kvpi_oshard *sh,
                      struct kvpi_orec *r);
/* Room for @extra more ids in @r (compacting first); 0 or -1 (no memory). */
int kvpi_pfx_oreserve(struct kvp_pool *p, struct kvpi_tslot *s, struct kvpi_orec *r,
                      uint32_t extra);
/* kvpi_pfx_set_hint - note that @id sits at @pos in its latest holder's array */
static inline void kvpi_pfx_set_hint(struct kvpi_prefix *pf, uint32_t id, uint32_t pos)
{
	/* relaxed: a hint, always checked against the array. */
	atomic_store_explicit(&kvpi_pfx_side(pf, id)->pos_hint, pos, memory_order_relaxed);
}

/* kvpi_pfx_oappend - append @id to @r (room reserved), noting its place */
static inline void kvpi_pfx_oappend(struct kvpi_prefix *pf, struct kvpi_orec *r, uint32_t id)
{
	kvpi_pfx_set_hint(pf, id, kvpi_idarr_push(&r->ids, id));
}
/* Position of @id in @r, or -1. */
int64_t kvpi_pfx_ofind_pos(struct kvpi_prefix *pf, const struct kvpi_orec *r, uint32_t id);

/*
 * lib/prefix/prefix_alloc.c and prefix_free.c: the pool calls in prefix mode
 * (dispatched from the pool through its mode table, on a branch marked
 * unlikely, so the plain pool's fast paths are laid out as if the hooks
 * were not there: bench/prefix_offcost.sh's off/nohooks).  They are not
 * declared cold: declared so, their code ran 601 instructions a block on
 * the serving loop against 584 without (bench/callgrind_lifecycle.sh), and
 * prefix_offcost.sh's on/off was 0.874x-0.889x against 0.895x-0.907x.
 */
int kvpi_pfx_allocate(struct kvp_pool *p, int si, uint32_t n_tokens, kvp_owner owner,
                      kvp_format format, kvp_ref *refs, uint32_t nb);
int kvpi_pfx_alloc_block(struct kvp_pool *p, int si, kvp_format format, kvp_ref *out);
int kvpi_pfx_free(struct kvp_pool *p, const kvp_ref *refs, size_t n);
int kvpi_pfx_free_all(struct kvp_pool *p, kvp_owner owner);
int kvpi_pfx_free_owned(struct kvp_pool *p, kvp_owner owner, const kvp_ref *refs, size_t n);
int kvpi_pfx_shrink(struct kvp_pool *p, int si, uint32_t target_free, uint32_t *n_retired);
int kvpi_pfx_block_get(struct kvp_pool *p, kvp_ref ref, kvp_block_info *out);
/* Take @k blocks of @si: uncached free ones, then evicted, then growth;
 * *@slow: they were not all in the thread's magazine or on the global
 * stack at first (the caller may then evict ahead). */
int kvpi_pfx_get_blocks(struct kvp_pool *p, struct kvpi_tslot *s, int si, kvpi_u32_alias *ids,
                        uint32_t k, bool *slow);
/* After an allocation of @k blocks of @si that went the slow way, with no
 * lock held: evict ahead into the thread's magazine when the stack is
 * empty and the cache large (lib/prefix/prefix_alloc.c, "Evicting ahead"). */
void kvpi_pfx_evict_ahead(struct kvp_pool *p, struct kvpi_tslot *s, int si, uint32_t k);

#endif /* KVPOOL_LIB_PREFIX_INTERNAL_H */
