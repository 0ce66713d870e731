/*
 * kvpool/pool.h - lock-free pool of fixed-size KV-cache token blocks.
 *
 * A pool hands fixed-size token blocks of the K and V streams to request
 * owners, all or nothing, and takes them back.  Block ids are dense
 * (0 .. blocks ever created - 1), unique across streams and stable for the
 * pool's life, so they index block tables and storage directly.  A kvp_ref
 * carries the id (low 32 bits) and the block's generation (high 32 bits).
 * The generation changes each time the block is handed out.  So a stale ref
 * can neither free nor change a block that now belongs to someone else.
 *
 * Structure (see docs/DESIGN.md):
 *   - per stream, a global lock-free Treiber stack of free block ids
 *     (64-bit head: 32-bit ABA tag, 32-bit id) and an exact count of what it
 *     holds, used for all-or-nothing reservation;
 *   - in front of it, per-thread magazines of free ids, which their thread
 *     enters with plain stores.  A magazine holds up to thread_cache ids per
 *     stream.  It grows by demand, so that a thread keeps the blocks of the
 *     request it freed for its next one.  A thread that cannot find enough
 *     blocks claims the other threads' magazines itself (after a
 *     membarrier, one CAS each).  So blocks parked in a cache of an idle,
 *     blocked or exited thread are never lost to exhaustion;
 *   - a block table of segments that are never moved or replaced: growth
 *     never moves a block, and no call needs a read-side section;
 *   - owners in a hash table split into 256 shards, each with its own
 *     mutex; an owner's blocks form a list in allocation order; a record is
 *     biased to the thread that made it, which then needs no lock for it;
 *   - statistics in per-thread slots summed when read.
 *
 * Synchronization:
 *
 *   function               concurrent with          progress / locks taken
 *   ---------------------  -----------------------  ------------------------------
 *   kvp_pool_create        -                        allocates
 *   kvp_pool_destroy       nothing on this pool     -
 *   kvp_allocate           everything               no lock for an owner biased to
 *                                                   the calling thread (below), else
 *                                                   the owner's shard mutex for the
 *                                                   call; the block path is
 *                                                   lock-free with a warm cache,
 *                                                   and otherwise may wait as below
 *   kvp_alloc_block        everything               the block path alone
 *   kvp_free               everything               per owner as kvp_allocate (none
 *                                                   for raw blocks); a raw block: one
 *                                                   CAS, or none when its allocating
 *                                                   thread frees it (see kvp_alloc_block)
 *   kvp_free_all           everything               the owner's shard mutex (none
 *                                                   for a minted owner on its
 *                                                   thread: see kvp_owner_new)
 *   kvp_blocks_for         everything               the owner's shard mutex (a
 *                                                   minted owner's shard: its
 *                                                   bias revoked, if another
 *                                                   thread's)
 *   kvp_owner_new          everything               no lock, no shared write (the
 *                                                   thread's first call on the pool
 *                                                   makes its slot)
 *   kvp_register_owner /
 *   kvp_release_owner      everything               the owner's shard mutex
 *   kvp_n_free             everything               wait-free (sums counters)
 *   kvp_shrink             everything               the pool's grow mutex
 *   kvp_block_get          everything               lock-free (seqlock retry)
 *   kvp_block_set_used     everything               an owned block: per owner as
 *                                                   kvp_free; a raw block: lock-free
 *                                                   (CAS on the block)
 *
 * A pool with prefix_cache keeps its owners in a table of its own.  It
 * takes a block's lock bit (one CAS on its state word) to change its
 * holders, and kvp_block_set_used waits while that bit is set.
 * kvpool/prefix.h has the table for that mode.
 *
 * The block path (taking and giving back free blocks) is lock-free with
 * one bounded exception.  A starving thread waits for each cache whose
 * owner is inside a call.  A thread entering its own cache never waits:
 * while a stream is starving it uses the global stack.  Only growth takes a
 * mutex (the pool's grow mutex), and nothing ever waits for a grace period.
 *
 * Biased owners.  The thread that first allocated for an owner allocates
 * and frees for it with no lock; registering an owner does not bias it.
 * Such a call is an "owner op": a store to a word of its own and a load of
 * the record's bias.  The first time another thread touches that owner, it
 * revokes the bias under the shard mutex.  Touching means a free of its
 * blocks, kvp_free_all, kvp_blocks_for, kvp_release_owner or an allocate.
 * A revocation costs one membarrier() system call (about 0.1-1 us), plus a
 * wait for an owner op in progress.  After it the owner is shard-locked as
 * any other.  A call on an owner that is unbiased, or biased to the calling
 * thread, revokes nothing.
 *
 * An allocate under the shard mutex re-biases an unbiased owner to its
 * caller, at most twice per owner record.  An owner made again (released,
 * then allocated) is biased to the thread that allocated.  So an owner
 * registered by one thread and allocated for by another pays no revocation.
 * One allocated by a thread and then freed or listed by another pays one.
 *
 * Minted owners (kvp_owner_new) go one step further: the shard holding a
 * thread's minted owners is biased to that thread too, so making an owner
 * and ending it with kvp_free_all take no lock either (in a pool without
 * prefix_cache).  Another thread touching one of them (any owner call,
 * kvp_register_owner and kvp_release_owner included) revokes the shard's
 * bias as above, one membarrier; the thread earns it back after a run of
 * its own calls, twice as long each time, so owners routinely touched from
 * another thread settle on the shard mutex.
 *
 * Asymmetric and fallback protocols.  kvp_pool_create probes
 * membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) and registers the process
 * for it.  A thread's own calls then use no locked instruction for its
 * cache and its biased owners.  The rare thread that interferes (a drainer,
 * a revoker) pays the system call.  In three cases both sides use seq_cst
 * atomics instead, with the same guarantees and a few ns more per call:
 *   - membarrier is unavailable (seccomp, gVisor, old kernels);
 *   - the build uses ThreadSanitizer;
 *   - the environment holds KVPOOL_FORCE_FALLBACK=1 at pool creation.
 * Membarrier may start failing after creation, e.g. when a seccomp filter
 * is installed later.  The pool then switches for good to an
 * mprotect()-based barrier, with the same guarantee for every later drain
 * or revocation.  No call hangs or fails for it.
 *
 * Without prefix_cache, kvpool uses no RCU library on any of these paths,
 * so there is nothing it could fail to start.  So every function may be
 * called anywhere, including inside an application's own liburcu read-side
 * section.  A pool made with prefix_cache keeps its key index in liburcu
 * (kvpool/prefix.h).  There kvp_shrink refuses (KVP_EINVAL) inside a
 * liburcu-bp read-side section, whose grace period it would wait for.
 *
 * Ordering: a successful kvp_free or kvp_free_all happens-before the
 * kvp_allocate that hands the same block out again.  That is the release
 * push and acquire pop on the free stack.  So whatever a thread wrote into
 * a block's storage before freeing it is visible to the block's next owner.
 * The old owner never reads it through a stale ref.
 *
 * A blocked or preempted thread can delay another thread only in two
 * places: where a mutex is named above, and while a starving thread waits
 * for a magazine whose owner is inside a pool call.  The latter is a window
 * of a few dozen instructions.
 *
 * Every function is thread-safe, and a thread needs no registration.  Each
 * thread's per-pool state (its magazines and stats slot) is made on its
 * first call.  It is given back, with its cached blocks, when the thread
 * exits.
 */
#ifndef KVPOOL_POOL_H
#define KVPOOL_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <kvpool/stats.h>
#include <kvpool/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef uint64_t kvp_owner; /* opaque request id; every value is valid, 0 included */
typedef uint64_t kvp_ref;   /* block handle: low 32 bits id, high 32 bits generation */

#define KVP_REF_ID(ref)       ((uint32_t)(ref))
#define KVP_REF_GEN(ref)      ((uint32_t)((ref) >> 32))
#define KVP_MAKE_REF(id, gen) (((uint64_t)(uint32_t)(gen) << 32) | (uint32_t)(id))

typedef enum { KVP_K = 0, KVP_V = 1, KVP_KV = 2 } kvp_stream;
typedef enum { KVP_FP32, KVP_FP16, KVP_BF16, KVP_INT8, KVP_INT4, KVP_INT2, KVP_INT1 } kvp_format;
#define KVP_N_FORMATS 7

/** kvp_format_name - "fp32" "fp16" "bf16" "int8" "int4" "int2" "int1"; NULL if out of range */
const char *kvp_format_name(kvp_format f);

/**
 * kvp_format_parse - parse a format name (as kvp_format_name prints it)
 * @name: the name, case-sensitive
 * @out:  the format
 *
 * Returns KVP_OK, or KVP_EINVAL for NULL arguments or an unknown name
 * (then *@out is unchanged).  Thread-safe.
 */
int kvp_format_parse(const char *name, kvp_format *out);

/* Largest block_size accepted: a block's fill count lives in 16 bits of its state word.
 * Generations are 32 bits: a ref made 2^32 hand-outs of its block ago matches again. */
#define KVP_MAX_BLOCK_SIZE 65535u
/* Largest number of blocks a pool may ever create (ids are 32-bit, one value reserved). */
#define KVP_MAX_BLOCKS 0x7fffffffu
/* Default per-thread cached free blocks per stream: a cap, not a size.  A
 * thread's cache starts small and grows by demand (to the largest batch the
 * thread gives back at once), never past a quarter of the stream's blocks
 * shared among the threads that have used the pool (so all the caches
 * together hold at most about a quarter), and never below 64. */
#define KVP_DEFAULT_THREAD_CACHE 16384u
/* Largest thread_cache accepted. */
#define KVP_MAX_THREAD_CACHE 1048576u
/* Each thread records a history snapshot once every this many mutating calls. */
#define KVP_HISTORY_EVERY 65536u
/* Blocks a thread may always hold unpublished in its in-use count (more, below the
 * peak: its share of the distance to it); see kvp_pool_stats in kvpool/stats.h. */
#define KVP_PEAK_BATCH 64u

typedef struct kvp_pool_config {
	uint32_t block_size;     /* token slots per block, 1..KVP_MAX_BLOCK_SIZE; default 16 */
	uint32_t n_blocks;       /* blocks initially, all streams together; default 1024 */
	bool separate_kv;        /* default true: K and V draw from independent free lists */
	bool grow_on_exhaustion; /* default false */
	uint32_t max_blocks; /* cap on blocks managed once grown; 0 = unbounded (KVP_MAX_BLOCKS) */
	uint32_t thread_cache; /* per-thread cached free blocks per stream; 0 = none;
	                          default KVP_DEFAULT_THREAD_CACHE */
	uint32_t history_len;  /* stats history ring length; default 256; 0 = no history */
	bool prefix_cache;     /* default false: blocks shared by content (kvpool/prefix.h) */
} kvp_pool_config;

/* Declared once for C99 too (a repeated typedef is C11 only): stats.h and pool.h both need it. */
#ifndef KVP_POOL_TYPEDEF
#define KVP_POOL_TYPEDEF
typedef struct kvp_pool kvp_pool;
#endif

/** kvp_pool_config_init - fill @cfg with the defaults above (no-op on NULL) */
void kvp_pool_config_init(kvp_pool_config *cfg);

/**
 * kvp_pool_create - make a pool
 * @cfg: configuration (NULL means the defaults)
 * @out: the new pool
 *
 * With separate_kv the n_blocks are split between K and V, K taking the odd
 * one: K gets ids 0 .. ceil(n/2)-1, V the rest.  Without it a single list
 * (stream KVP_KV) backs both streams and the stream argument of other calls
 * is ignored.  Free blocks are handed out lowest id first until reused.
 *
 * With separate_kv and n_blocks 1, K has the block and V starts empty.
 *
 * Returns:
 *   - KVP_OK;
 *   - KVP_EINVAL: NULL @out, block_size 0 or above KVP_MAX_BLOCK_SIZE,
 *     n_blocks 0 or above KVP_MAX_BLOCKS, max_blocks set and below
 *     n_blocks, or thread_cache above KVP_MAX_THREAD_CACHE;
 *   - KVP_ENOMEM.  With prefix_cache this also covers a thread that cannot
 *     be created.  Such a pool starts liburcu's worker threads here, so
 *     later calls never need to.
 *
 * Thread-safe.
 */
int kvp_pool_create(const kvp_pool_config *cfg, kvp_pool **out);

/**
 * kvp_pool_destroy - free the pool and everything it holds (NULL is a no-op)
 *
 * No other call on @pool may run concurrently or follow.  Threads that used
 * the pool may still be running (or exit concurrently); their per-pool state
 * is reclaimed here.  With the environment variable KVPOOL_SHOW_STATS=1
 * the pool's kvp_pool_dump report goes to stderr first (kvpool/report.h).
 */
void kvp_pool_destroy(kvp_pool *pool);

/**
 * kvp_allocate - hand blocks to an owner, all or nothing
 * @pool:     the pool
 * @stream:   KVP_K or KVP_V (ignored without separate_kv)
 * @n_tokens: tokens to hold
 * @owner:    the request
 * @format:   compression-format tag recorded in each block
 * @refs:     receives the refs, in allocation order
 * @refs_cap: how many refs @refs holds
 * @n_refs:   set to the number of blocks handed out (or needed, on KVP_ERANGE)
 *
 * Hands out ceil(@n_tokens / block_size) blocks.  An unknown @owner is
 * registered by this call; an active one is extended.  With separate_kv,
 * @stream KVP_KV is KVP_EINVAL.  Each block's n_used is set to the slots it
 * holds: all full but the last.  If fewer blocks of @stream are free than needed, the pool grows
 * the stream by exactly the shortfall when grow_on_exhaustion allows it within max_blocks;
 * otherwise nothing is handed out.  Blocks parked in any thread's cache count as free and are taken
 * when needed, so KVP_EEXHAUSTED means that at some instant during the call fewer blocks of @stream
 * were free than the request needs.  Streams never borrow from each other.
 *
 * On any failure nothing changes: no block is handed out, the pool has not
 * grown, an owner the call would have made does not exist; *@n_refs is 0
 * (or the count needed, for KVP_ERANGE) and @refs holds no valid ref.
 *
 * Returns KVP_OK; KVP_EINVAL (NULL pool/refs/n_refs, n_tokens 0, bad stream
 * or format); KVP_ERANGE (@refs_cap too small; *@n_refs = blocks needed);
 * KVP_EEXHAUSTED; KVP_ENOMEM (growth, a new owner record, or room for
 * the owner's block ids failed).
 * Thread-safe.  No lock when @owner is biased to the calling thread (the
 * thread that first allocated for it: "Biased owners" above), else
 * @owner's shard mutex for the call (see the table).
 */
int kvp_allocate(kvp_pool *pool, kvp_stream stream, uint32_t n_tokens, kvp_owner owner,
                 kvp_format format, kvp_ref *refs, size_t refs_cap, size_t *n_refs);

/**
 * kvp_free - return blocks to their stream's free list
 * @pool: the pool
 * @refs: the refs (may be NULL when @n is 0)
 * @n:    how many
 *
 * Idempotent: a ref whose block is already free, retired, or handed out
 * again (stale generation) is skipped and counted in n_stale_frees (a
 * retired block's ref is stale here; only an id never created is an error).  A block
 * freed this way leaves its owner's list; an owner that was not registered
 * with kvp_register_owner is released when its last block goes.  A free
 * takes effect when kvp_free returns: while it runs, another thread may
 * still get KVP_EEXHAUSTED for blocks already shown free by kvp_block_get,
 * or KVP_EOWNER registering an owner whose last block it freed.
 *
 * Returns KVP_OK; KVP_ENOENT if any ref's id was never created (then
 * nothing in the call is freed); KVP_EINVAL for a NULL pool, or NULL @refs
 * with @n > 0.  Thread-safe; per owner involved, no lock when it is biased
 * to the calling thread, else its shard mutex (see the table).
 */
int kvp_free(kvp_pool *pool, const kvp_ref *refs, size_t n);

/**
 * kvp_free_all - free every block checked out to @owner and release it
 *
 * Returns KVP_OK, KVP_ENOENT when @owner is not active, KVP_EINVAL for a
 * NULL pool.  Thread-safe; takes @owner's shard mutex, or no lock for an
 * owner from kvp_owner_new ended on the thread that minted it (see the
 * table).
 */
int kvp_free_all(kvp_pool *pool, kvp_owner owner);

/**
 * kvp_blocks_for - the owner's blocks, in allocation order
 * @pool:  the pool
 * @owner: the owner
 * @refs:  receives the refs (may be NULL when @cap is 0)
 * @cap:   how many refs @refs holds
 * @n:     set to the number of blocks the owner holds
 *
 * Returns KVP_OK, KVP_ERANGE when @cap < *@n (nothing written), KVP_ENOENT
 * when @owner is not active (*@n = 0), KVP_EINVAL for NULL @pool or @n.
 * Thread-safe; takes @owner's shard mutex, so the list is a consistent
 * snapshot.
 */
int kvp_blocks_for(kvp_pool *pool, kvp_owner owner, kvp_ref *refs, size_t cap, size_t *n);

/**
 * kvp_n_free - free blocks of @stream, those in thread caches included
 *
 * Exact when no call on @stream is in flight; otherwise a value the free
 * count had at some instant, give or take blocks in transit.  Returns 0 for
 * a NULL pool or a stream not valid for the pool's layout (KVP_KV with
 * separate_kv).  Without separate_kv every stream argument names the one list.
 * Thread-safe, wait-free in the number of threads that used the pool.
 */
size_t kvp_n_free(kvp_pool *pool, kvp_stream stream);

/**
 * kvp_owner_new - a fresh owner id, homed at the calling thread
 * @pool:  the pool
 * @owner: receives the id
 *
 * For a server that makes an owner per request.  Any id works with every
 * owner call; one from here is also placed by the thread that made it: the
 * owners a thread makes here share one shard of the owner table, that of
 * the thread's per-thread state (its slot).  Slots are numbered in the
 * order the pool makes them, one per thread, a slot given up by an exiting
 * thread going to the next new one; the first 255 slots each have a shard
 * of their own, later ones share.  So a thread that makes an owner,
 * allocates for it and ends it with kvp_free_all touches no cache line
 * another thread writes in the common case, and threads doing that in
 * parallel do not slow each other down.  An owner whose id was drawn at
 * random instead lands in a shard every thread writes.  In a pool without
 * prefix_cache the thread's shard is biased to it after a few calls (see
 * "Biased owners" above), so it makes and ends its owners with no lock.
 * Any thread may use the id (it then takes that shard's mutex, revoking
 * that bias); it stays fast only on its own thread.  So mint on the
 * thread that will use the id: ids one dispatcher thread mints for many
 * workers all land in its one shard.
 *
 * The id is not registered and holds nothing: it becomes active like any
 * other id, at the first kvp_allocate, kvp_prefix_match or
 * kvp_register_owner.  Ids from here have 0xC5 in their top byte, and no
 * two calls on one pool return the same id (2^40 ids a slot, shared by the
 * threads that use the slot in turn).  An id the caller picks itself in
 * that range may equal one of them; a program that uses both keeps its own
 * ids out of it.
 *
 * Returns KVP_OK; KVP_EINVAL for a NULL argument; KVP_EEXHAUSTED when the
 * calling thread's slot has made its 2^40 ids, or is the 65536th or a
 * later slot of the pool (more threads than that used it at once); nothing
 * is written then.
 * Thread-safe.  Takes no lock and writes only the calling thread's slot,
 * once the thread has one: its first call on a pool makes it, as any
 * call's does.  A thread that could get no slot, for want of memory,
 * shares a fallback slot under a mutex.
 */
int kvp_owner_new(kvp_pool *pool, kvp_owner *owner);

/**
 * kvp_register_owner - make @owner active with no blocks
 *
 * Returns KVP_OK, KVP_EOWNER when @owner is already active (registered or
 * holding blocks), KVP_ENOMEM, KVP_EINVAL for a NULL pool.  Of several
 * threads registering one id at once exactly one succeeds.
 * Thread-safe; takes @owner's shard mutex.
 */
int kvp_register_owner(kvp_pool *pool, kvp_owner owner);

/**
 * kvp_release_owner - undo the registration of @owner; frees nothing
 *
 * An owner that still holds blocks stays active until they are freed.
 * Returns KVP_OK, KVP_ENOENT when @owner is not active, KVP_EINVAL for a
 * NULL pool.  Thread-safe; takes @owner's shard mutex.
 */
int kvp_release_owner(kvp_pool *pool, kvp_owner owner);

/**
 * kvp_shrink - retire free blocks of @stream until @target_free are left
 * @pool:        the pool
 * @stream:      as for kvp_allocate
 * @target_free: free blocks of @stream to keep
 * @n_retired:   set to the blocks retired (may be NULL)
 *
 * Retired blocks leave the pool's books; blocks in use are never touched.
 * A retired id is reused by a later growth, with a new generation (refs
 * from before stay stale), so metadata stays bounded by the pool's largest
 * size however often it grows and shrinks.
 *
 * Retire hooks (see kvp_pool_add_retire_hook) run for each retired block
 * once it is retired.  The block was free, so no pool call holds it as
 * live.  The pool never frees block metadata.  So a call racing with the
 * shrink (a stale ref's free or block_get) only sees the block as stale or
 * retired.  Memory a hook frees must guard its own readers; kvp_storage
 * uses hazard pointers.  Concurrent allocations may leave more than
 * @target_free blocks free, never fewer because of the shrink.
 *
 * Returns KVP_OK (also when nothing needed retiring), KVP_EINVAL (NULL pool,
 * bad stream, or, for a pool made with prefix_cache, called inside a
 * liburcu-bp read-side section).  Thread-safe; takes the pool's grow mutex, and issues a
 * membarrier() to drain the stream's thread caches.
 */
int kvp_shrink(kvp_pool *pool, kvp_stream stream, uint32_t target_free, uint32_t *n_retired);

typedef struct kvp_block_info {
	uint32_t id;
	kvp_stream stream; /* KVP_K or KVP_V, or KVP_KV without separate_kv */
	kvp_format format;
	uint32_t n_used; /* slots occupied, <= block_size */
	kvp_owner owner; /* meaningful only when in_use */
	bool in_use;
	bool ever_allocated;
	uint32_t n_holders; /* owners holding the block (0 when free; 1 without prefix_cache) */
	bool published;     /* published under a prefix key (kvpool/prefix.h) */
} kvp_block_info;

/**
 * kvp_block_get - describe a block
 * @pool: the pool
 * @ref:  a current ref: its generation is the block's, in use or freed
 *        since (a never-allocated block's generation is 0)
 * @out:  the description, a consistent snapshot
 *
 * Returns KVP_OK; KVP_ENOENT for a stale generation, an id never created
 * or a retired block (then *@out is unchanged); KVP_EINVAL for NULL args.
 * Thread-safe, lock-free.
 */
int kvp_block_get(kvp_pool *pool, kvp_ref ref, kvp_block_info *out);

/**
 * kvp_block_set_used - set the slots a block in use occupies
 *
 * Returns KVP_OK; KVP_ERANGE when @n_used > block_size; KVP_ENOENT when the
 * ref is stale or its block not in use (nothing changes); KVP_EINVAL for a
 * NULL pool, or (prefix cache, kvpool/prefix.h) a block that is published
 * or has two or more holders.
 *
 * Thread-safe.  An owned block is changed under its owner's exclusion, as
 * kvp_free changes it.  That takes no lock when the owner is biased to the
 * calling thread, else the owner's shard mutex.  For an owner biased to
 * another thread it also revokes that bias.  A raw block (kvp_alloc_block)
 * is changed by one CAS on its state word, lock-free.  That may revoke the
 * allocating thread's raw bias (see kvp_alloc_block).
 */
int kvp_block_set_used(kvp_pool *pool, kvp_ref ref, uint32_t n_used);

/* --- further calls ------------------------------------------------------- */

/**
 * kvp_alloc_block - the raw path: one block, no owner tracking
 * @pool:   the pool
 * @stream: as for kvp_allocate
 * @format: format tag
 * @out:    the block's ref; the block is full (n_used = block_size)
 *
 * For callers that keep their own block tables (and for benchmarks against
 * rte_mempool): the block belongs to no owner, so kvp_blocks_for and
 * kvp_free_all never see it; free it with kvp_free_block or kvp_free.
 * Same free-block search, growth and exhaustion rules as kvp_allocate.
 *
 * Freeing: the thread that allocated a raw block frees it without a locked
 * instruction; its thread slot is "raw-biased".  Another thread may free or
 * set the fill of one of that thread's raw blocks.  The first time it does,
 * it revokes the bias for the rest of the thread's life.  That costs one
 * membarrier, a few hundred nanoseconds to a few microseconds.  After it,
 * every free of its raw blocks is one CAS, as in a pool without
 * membarrier.
 *
 * Returns KVP_OK, KVP_EINVAL, KVP_EEXHAUSTED or KVP_ENOMEM (growth).
 * Thread-safe; lock-free unless it must grow the pool.
 */
int kvp_alloc_block(kvp_pool *pool, kvp_stream stream, kvp_format format, kvp_ref *out);

/**
 * kvp_free_block - the raw path: free one block (any block, owned or not)
 *
 * Same rules as kvp_free with n = 1.  Thread-safe; lock-free for a block
 * with no owner, the owner's shard mutex otherwise.
 */
int kvp_free_block(kvp_pool *pool, kvp_ref ref);

/**
 * kvp_pool_block_size - the pool's block_size (0 for NULL).  Thread-safe.
 */
uint32_t kvp_pool_block_size(const kvp_pool *pool);

/**
 * kvp_pool_separate_kv - whether the pool keeps K and V apart (false for NULL)
 */
bool kvp_pool_separate_kv(const kvp_pool *pool);

/**
 * kvp_pool_n_ids - block ids ever created: every id is below this.  Grows,
 * never shrinks.  Thread-safe (an acquire load).
 */
uint32_t kvp_pool_n_ids(const kvp_pool *pool);

/**
 * kvp_pool_n_retired_ids - ids retired by shrink and not yet reused by growth
 *
 * When no call is in flight: blocks in use + free blocks + this =
 * kvp_pool_n_ids, and n_blocks = kvp_pool_n_ids - this.  Thread-safe.
 */
uint32_t kvp_pool_n_retired_ids(const kvp_pool *pool);

/**
 * kvp_retire_fn - called once for each retired block, once it is retired
 * @arg: the argument given to kvp_pool_add_retire_hook
 * @id:  the retired block's id
 */
typedef void (*kvp_retire_fn)(void *arg, uint32_t id);

/**
 * kvp_pool_add_retire_hook - have @fn called for every block kvp_shrink retires
 *
 * Used by layers that keep memory per block id (kvp_storage) to drop it.
 * The hook runs on the shrinking thread, under the pool's grow mutex, after
 * the block was retired.  Every pool call from then on sees the block as
 * retired or stale.  None held it as live, since it was free.  A growth that
 * reuses the id comes after the hook.  Readers of memory the hook frees must be guarded by
 * the layer that owns it (kvp_storage: hazard pointers).
 * A hook must not call kvp_shrink or kvp_pool_*_retire_hook.
 * Up to KVP_MAX_RETIRE_HOOKS hooks; remove with kvp_pool_remove_retire_hook
 * before the hook's argument dies.
 *
 * Returns KVP_OK, KVP_EINVAL (NULL args), KVP_ERANGE (no hook slot left).
 * Thread-safe (grow mutex).
 */
#define KVP_MAX_RETIRE_HOOKS 8
int kvp_pool_add_retire_hook(kvp_pool *pool, kvp_retire_fn fn, void *arg);

/** kvp_pool_remove_retire_hook - undo kvp_pool_add_retire_hook (KVP_ENOENT if absent) */
int kvp_pool_remove_retire_hook(kvp_pool *pool, kvp_retire_fn fn, void *arg);

#ifdef __cplusplus
}
#endif
#endif /* KVPOOL_POOL_H */
