/*
 * kvpool/storage.h - K/V row storage for pool blocks, one buffer per block id.
 *
 * A storage keeps the rows of one stream (typically one storage for K and
 * one for V) for every block of one pool.  A block's buffer holds
 * block_size rows of row_dim elements encoded in the block's format (the
 * format given to kvp_allocate, read back with kvp_block_get).  The buffer is
 * made lazily by the first write to the block (from the kvp_bufcache given
 * at create, else from the system), reused in place every time the block is
 * handed out again, and replaced only when a write finds that the block's
 * format changed.  A buffer goes away when kvp_storage_release drops it,
 * when kvp_shrink retires its block (an id that growth later reuses starts
 * without a buffer), or with the storage.
 *
 * Formats and the layout kvp_storage_read returns (row stride:
 * kvp_storage_row_bytes):
 *   KVP_FP32  row_dim floats, bit for bit
 *   KVP_FP16  row_dim IEEE binary16, round to nearest even (subnormals kept,
 *             overflow to inf, NaN to quiet NaN)
 *   KVP_BF16  row_dim bfloat16 (top half of binary32), round to nearest even
 *   KVP_INT8  a float scale, then row_dim int8 codes in [-127, 127]:
 *             value = code * scale, scale = absmax(row) / 127 (per row)
 *   KVP_INT4  a float scale, then two codes per byte (element 2i in the low
 *             nibble), two's complement in [-7, 7]: value = code * scale,
 *             scale = absmax(row) / 7
 *   KVP_INT2, KVP_INT1: tags only.  Blocks may carry them, but no codec
 *             exists: writes are KVP_EINVAL and kvp_storage_row_bytes is 0.
 * Quantized rows are padded to a multiple of 4 bytes.  int8/int4 cannot hold
 * inf or NaN: a write with one is KVP_EINVAL and writes nothing.  Error
 * bounds per element: fp16 2^-11 |x| (normal range), bf16 2^-8 |x|,
 * int8 absmax/254, int4 absmax/14 (see docs/KVCACHE.md).
 *
 * Rows and n_used: a write raises the block's n_used (kvp_block_set_used) to
 * cover the rows written, never lowers it.  It does so after storing the
 * rows and letting the block's slot lock go (a pool call made under that
 * lock could close a lock cycle with kvp_shrink's retire hook), so a write
 * concurrent with another write or an n_used change on the same block (the
 * caller's to serialize, see below) may leave either value.  Reads return
 * the block's n_used rows.  Rows below n_used that were not written since
 * kvp_allocate (or kvp_alloc_block) last handed the block out read as
 * zeros: never a previous owner's rows, nor the bytes a new buffer came
 * with.  Storage keeps a written-rows mark per buffer (the hand-out it
 * belongs to and how many leading rows are valid) instead of clearing
 * buffers: a write that leaves a gap zeroes the gap's rows, and a read
 * that finds n_used above the mark (n_used raised by kvp_block_set_used
 * without writes) zeroes the rows between, once per hand-out, under the
 * block's slot lock (read_f32 returns zeros without touching the buffer).
 * A block in use that was never written has no buffer, and reads return
 * 0 rows.
 *
 * Rows follow the holder, not the block's history (prefix cache,
 * kvpool/prefix.h).  What a holder reads is what the block's holders
 * wrote since kvp_allocate (or kvp_alloc_block, growth, an eviction) last
 * handed it out afresh, and zeros for rows not written since.  A prefix
 * match that takes a block, held or cached, is not a fresh hand-out: it
 * shares exactly those rows.  So a block published without a write reads
 * zeros, never a previous owner's rows.  A block that is published, or
 * that has two or more holders (also after kvp_prefix_reset unpublished
 * it), takes no write: kvp_storage_write and kvp_block_set_used on it are
 * KVP_EINVAL.  kvp_prefix_reset, an eviction of other blocks, kvp_shrink
 * and growth never change what a holder reads, and no read changes a
 * shared buffer's valid rows.  docs/PREFIX.md has the argument.
 *
 * Synchronization:
 *
 *   function                       may run concurrently with     waits for
 *   -----------------------------  ----------------------------  --------------------------
 *   kvp_storage_create             everything else               -
 *   kvp_storage_destroy            nothing on this storage       in-flight retire hooks
 *   kvp_storage_write              everything; see below         the block's slot lock;
 *                                                                when the format changed,
 *                                                                readers of the old buffer
 *   kvp_storage_read / read_f32    everything; see below         never (lock-free), except
 *                                                                a read zeroing unwritten
 *                                                                rows: the slot lock
 *   kvp_storage_release            everything                    the block's slot lock;
 *                                                                readers of its buffer
 *   kvp_storage_resident_bytes,    everything                    never (wait-free)
 *   kvp_storage_get_stats, _row_*
 *   retire hook (in kvp_shrink)    everything                    the block's slot lock;
 *                                                                readers of its buffer
 *
 * Calls on different blocks never wait for each other, and no call takes a
 * lock shared by all blocks.  Calls on the same block: writes are the
 * caller's to serialize (two concurrent writes to one block, or a read
 * concurrent with a write to it, give unspecified rows and are data races
 * in C11 terms); the owner of a block orders its own writes and reads.
 * A write's rows are visible to whoever next receives the block from the
 * pool (kvp_free happens-before the kvp_allocate that hands it out again).
 * Prefix cache (kvpool/prefix.h): publish a block after its last write
 * (a write racing kvp_prefix_publish of its block is the caller's to
 * serialize, like two writes); every owner that then matches the block,
 * also after it was cached, reads the published rows.
 *
 * Stale refs: every call validates @ref with kvp_block_get; a stale
 * generation, a retired block or an id never created is KVP_ENOENT and
 * changes nothing.  A write validates under the block's slot lock and
 * stores its rows there; should another thread free the block between
 * that and the write's n_used update, the write has taken effect before
 * the free and returns KVP_OK, and the update (which validates the
 * generation again) leaves the freed block and any later holder alone.
 * A reader whose ref goes stale while it copies (another thread frees the
 * block, then releases or retires it) never touches freed memory: a reader
 * protects the buffer with a hazard pointer before it validates, and a
 * buffer taken out of the table is freed only once no reader protects it
 * (lib/storage/storage_hazard.h has the argument).  read_f32 re-validates after
 * its copy and then returns KVP_ENOENT.  The one remaining overlap is
 * benign by construction but still a C11 data race: a stale reader
 * copying a block that was handed out again while its new owner writes it
 * (the copy is then discarded with KVP_ENOENT).
 *
 * Memory: one storage uses at most one buffer per block id ever written
 * plus a table of 8 bytes per id (in segments made on demand; ids never
 * move).  The pool and the bufcache must outlive the storage.
 */
#ifndef KVPOOL_STORAGE_H
#define KVPOOL_STORAGE_H

#include <stddef.h>
#include <stdint.h>

#include <kvpool/bufcache.h>
#include <kvpool/pool.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvp_storage kvp_storage;

/* Bytes in front of each buffer's rows (buffer header); rows start 64-byte aligned. */
#define KVP_STORAGE_HEADER_BYTES 64

/**
 * kvp_storage_create - make a storage for @pool's blocks
 * @pool:    the pool whose block ids this storage keeps rows for
 * @row_dim: elements per row (a token's K or V row: n_kv_heads * head_dim)
 * @cache:   where buffers come from and go back to; NULL for the system
 * @out:     the new storage
 *
 * Registers a retire hook with @pool (kvp_pool_add_retire_hook), so a pool
 * carries at most KVP_MAX_RETIRE_HOOKS storages.
 *
 * Returns KVP_OK; KVP_EINVAL (NULL @pool or @out, @row_dim 0 or so large a
 * fp32 row would not fit in 32 bits); KVP_ERANGE (the pool has no retire
 * hook slot left); KVP_ENOMEM.  Thread-safe.
 */
int kvp_storage_create(kvp_pool *pool, uint32_t row_dim, kvp_bufcache *cache, kvp_storage **out);

/**
 * kvp_storage_destroy - free every buffer and the storage (NULL is a no-op)
 *
 * Unregisters the retire hook first (waiting for a kvp_shrink that is
 * running it).  No other call on @s may run concurrently or follow.
 */
void kvp_storage_destroy(kvp_storage *s);

/**
 * kvp_storage_write - encode rows into a block
 * @s:      the storage
 * @ref:    a block in use (current generation)
 * @offset: first row slot to write
 * @rows:   @n_rows rows of row_dim floats
 * @n_rows: rows to write, at least 1
 *
 * Makes the block's buffer when it has none (or has one of another format,
 * which is then freed once no reader holds it), encodes the rows in the
 * block's format and raises the block's n_used to @offset + @n_rows when it
 * was lower.
 *
 * Returns KVP_OK; KVP_EINVAL (NULL @s or @rows, @n_rows 0, a format without
 * codec, inf/NaN for int8/int4, or the block is shared: published under a
 * prefix key, or held by two or more owners, kvpool/prefix.h: its rows are
 * fixed); KVP_ERANGE (@offset + @n_rows > block_size);
 * KVP_ENOENT (stale ref, block not in use when the call checks it);
 * KVP_ENOMEM (no buffer).  On failure nothing changed.  A block freed by
 * another thread while the call runs, after its check: KVP_OK, the rows
 * stored, n_used left as the free left it (see "Stale refs" above).
 * Thread-safe; see the table for same-block calls.
 */
int kvp_storage_write(kvp_storage *s, kvp_ref ref, uint32_t offset, const float *rows,
                      uint32_t n_rows);

/**
 * kvp_storage_read - the block's live rows, as stored, without a copy
 * @s:      the storage
 * @ref:    a block in use
 * @data:   receives the first row (NULL when the block has no rows stored);
 *          rows are kvp_storage_row_bytes(@s, format) apart, format as
 *          kvp_block_get reports it
 * @n_rows: receives the block's n_used (0 when it has no buffer yet, or its
 *          buffer still holds another format)
 *
 * The pointer stays valid while the caller holds the block: until the block
 * is freed (then released or retired) or written in another format.
 *
 * Returns KVP_OK; KVP_EINVAL (NULL args); KVP_ENOENT (stale ref, block not
 * in use); KVP_ENOMEM (the thread's first read could not get a hazard
 * record).  Thread-safe, lock-free except for zeroing rows not written
 * since the hand-out below n_used (see the top of this file).
 */
int kvp_storage_read(kvp_storage *s, kvp_ref ref, const void **data, uint32_t *n_rows);

/**
 * kvp_storage_read_f32 - the block's live rows decoded to floats
 * @s:        the storage
 * @ref:      a block in use
 * @rows:     receives n_used rows of row_dim floats
 * @cap_rows: capacity of @rows in rows
 * @n_rows:   receives the rows written (or needed, on KVP_ERANGE)
 *
 * Returns KVP_OK; KVP_EINVAL (NULL args); KVP_ERANGE (@cap_rows < n_used,
 * nothing written); KVP_ENOENT (stale ref or block not in use, checked
 * before and after the copy: the contents of @rows are then unspecified);
 * KVP_ENOMEM as for kvp_storage_read.  Thread-safe, lock-free.
 */
int kvp_storage_read_f32(kvp_storage *s, kvp_ref ref, float *rows, uint32_t cap_rows,
                         uint32_t *n_rows);

/**
 * kvp_storage_resident_bytes - bytes of the buffers that exist now
 *
 * Counts each buffer's full allocation (its true capacity from the
 * bufcache, header included).  Drops when a buffer is given back, which
 * the call that dropped it (release, a shrink's retire hook, a write that
 * changed the format) does before it returns.  0 for NULL.  Thread-safe,
 * wait-free.
 */
size_t kvp_storage_resident_bytes(kvp_storage *s);

/**
 * kvp_storage_release - drop the buffer of a free block at once
 * @s:   the storage
 * @ref: the block's current ref (freed since it was handed out with it)
 *
 * The buffer goes back to the bufcache (or the system) before this returns,
 * once no stale reader still copies it; the next write to the block makes
 * a new one.
 * A free block without buffer is fine (KVP_OK, nothing to do).
 *
 * Returns KVP_OK; KVP_EINVAL (NULL @s, or the block is in use: release is
 * for free blocks only, a block's holder keeps its buffer; or the block is
 * cached under a prefix key, kvpool/prefix.h: it keeps its rows for a
 * later match, and eviction reuses the buffer in place); KVP_ENOENT
 * (stale ref: the block was handed out again, retired, or never created).
 * Thread-safe; waits for the slot lock and for readers of that buffer.
 */
int kvp_storage_release(kvp_storage *s, kvp_ref ref);

/* --- storage management beyond the basic calls -------------------------- */

/** kvp_storage_row_dim - the storage's row_dim (0 for NULL) */
uint32_t kvp_storage_row_dim(const kvp_storage *s);

/** kvp_storage_pool - the pool given at create (NULL for NULL) */
kvp_pool *kvp_storage_pool(const kvp_storage *s);

/**
 * kvp_storage_row_bytes - stride in bytes between rows of format @f
 *
 * 0 for NULL, or a format without codec (KVP_INT2, KVP_INT1).
 */
size_t kvp_storage_row_bytes(const kvp_storage *s, kvp_format f);

typedef struct kvp_storage_stats {
	uint64_t resident_bytes;  /* as kvp_storage_resident_bytes */
	uint64_t n_buffers;       /* buffers that exist now */
	uint64_t buffers_made;    /* buffers taken from the bufcache or the system, cumulative */
	uint64_t buffers_dropped; /* buffers given back: released, retired, replaced */
	uint64_t format_changes;  /* buffers replaced because the block's format changed */
} kvp_storage_stats;

/**
 * kvp_storage_get_stats - counters of @s
 *
 * Each figure is exact at some instant during the call (not an atomic cut).
 * Returns KVP_OK or KVP_EINVAL (NULL args).  Thread-safe, wait-free.
 */
int kvp_storage_get_stats(kvp_storage *s, kvp_storage_stats *out);

#ifdef __cplusplus
}
#endif
#endif /* KVPOOL_STORAGE_H */
