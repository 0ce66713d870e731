/*
 * kvpool/storage.h - K/V row storage for pool blocks, one buffer per block id.
 *
 * A storage keeps the rows of one stream for every block of one pool.
 * Typically there is one storage for K and one for V.  A block's buffer
 * holds block_size rows of row_dim elements, encoded in the block's format.
 * That format is the one given to kvp_allocate; kvp_block_get reads it
 * back.
 *
 * Buffers.  The first write to a block makes its buffer.  It comes from the
 * kvp_bufcache given at create, else from the system.  The buffer is reused
 * in place every time the block is handed out again.  It is replaced only
 * when a write finds that the block's format changed.  A buffer goes away
 * in three ways: kvp_storage_release drops it; kvp_shrink retires its
 * block; or the storage is destroyed.  An id that growth later reuses
 * starts without a buffer.
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
 *
 * Quantized rows are padded to a multiple of 4 bytes.  The int8 and int4
 * formats cannot hold inf or NaN.  A write with one is KVP_EINVAL and
 * writes nothing.  Error bounds per element: fp16 2^-11 |x| (normal range),
 * bf16 2^-8 |x|, int8 absmax/254, int4 absmax/14 (see docs/KVCACHE.md).
 *
 * Rows and n_used.  A write raises the block's n_used (kvp_block_set_used)
 * to cover the rows written; it never lowers it.  It does so after storing
 * the rows and letting the block's slot lock go.  The reason: a pool call
 * made under that lock could close a lock cycle with kvp_shrink's retire
 * hook.  So when a write races another write or an n_used change on the
 * same block, either value may stay.  Such races are the caller's to
 * serialize (see below).  Reads return the block's n_used rows.
 *
 * Unwritten rows read as zeros.  This covers rows below n_used not written
 * since kvp_allocate (or kvp_alloc_block) last handed the block out.  They
 * never show a previous owner's rows, nor the bytes a new buffer came
 * with.  Storage does not clear buffers for this.  It keeps a written-rows
 * mark per buffer: the hand-out it belongs to and how many leading rows are
 * valid.  A write that leaves a gap zeroes the gap's rows.  A read may find
 * n_used above the mark, when kvp_block_set_used raised n_used without
 * writes.  It then zeroes the rows between, once per hand-out, under the
 * block's slot lock.  The call kvp_storage_read_f32 instead returns zeros
 * for those rows without touching the buffer.  A block in use that was never written has no buffer,
 * and reads return 0 rows.
 *
 * Rows follow the holder, not the block's history (prefix cache,
 * kvpool/prefix.h).  A holder reads what the block's holders wrote since it
 * was last handed out afresh, and zeros for rows not written since.  A
 * fresh hand-out is kvp_allocate, kvp_alloc_block, growth or an eviction.
 * A prefix match that takes a block, held or cached, is not a fresh
 * hand-out: it shares exactly those rows.  So a block published without a
 * write reads zeros, never a previous owner's rows.
 *
 * Some blocks take no write: a published block, and a block with two or
 * more holders (also after kvp_prefix_reset unpublished it).  On them
 * kvp_storage_write and kvp_block_set_used are KVP_EINVAL.  What a holder
 * reads never changes under kvp_prefix_reset, an eviction of other blocks,
 * kvp_shrink or growth.  No read changes a shared buffer's valid rows.
 * docs/PREFIX.md has the argument.
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
 * Calls on different blocks never wait for each other.  No call takes a
 * lock shared by all blocks.
 *
 * Calls on the same block.  Writes are the caller's to serialize.  Two
 * concurrent writes to one block give unspecified rows, and so does a read
 * concurrent with a write to it; both are data races in C11 terms.  The
 * owner of a block orders its own writes and reads.  A write's rows are
 * visible to whoever next receives the block from the pool: kvp_free
 * happens-before the kvp_allocate that hands it out again.
 *
 * Prefix cache (kvpool/prefix.h).  Publish a block after its last write.  A
 * write racing kvp_prefix_publish of its block is the caller's to
 * serialize, like two writes.  Every owner that then matches the block
 * reads the published rows, also after the block was cached.
 *
 * Stale refs.  Every call validates @ref with kvp_block_get.  A stale
 * generation, a retired block or an id never created is KVP_ENOENT and
 * changes nothing.  A write validates under the block's slot lock and
 * stores its rows there.  Another thread may free the block between that
 * and the write's n_used update.  The write has then taken effect before
 * the free, and returns KVP_OK.  The update validates the generation again,
 * so it leaves the freed block and any later holder alone.
 *
 * A reader whose ref goes stale while it copies never touches freed
 * memory.  (The ref goes stale when another thread frees the block, then
 * releases or retires it.)  A reader protects the buffer with a hazard
 * pointer before it validates the ref.  A buffer taken out of the table is
 * freed only once no reader protects it.  The reader announces the buffer,
 * then checks that the table still holds it.  The freer takes the buffer
 * out of the table, then waits for every announcement of it.  Both sides
 * use sequentially consistent atomics.  So either the freer sees the
 * announcement and waits, or the reader sees the buffer gone and never
 * touches it.  The call kvp_storage_read_f32 also re-validates the ref
 * after its copy; if the ref went stale, it returns KVP_ENOENT.
 *
 * One overlap remains.  A stale reader may copy a block that was handed out
 * again while its new owner writes it.  That copy is discarded with
 * KVP_ENOENT, so the overlap is benign by construction.  It is still a C11
 * data race.
 *
 * Memory.  One storage uses at most one buffer per block id ever written.
 * It also keeps a table of 8 bytes per id, in segments made on demand; ids
 * never move.  The pool and the bufcache must outlive the storage.
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
 * Registers a retire hook with @pool (kvp_pool_add_retire_hook).  So a
 * pool carries at most KVP_MAX_RETIRE_HOOKS storages.
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
 * Makes the block's buffer when it has none.  It also makes a new one when
 * the buffer holds another format; the old one is freed once no reader
 * holds it.  Encodes the rows in the block's format.  Raises the block's
 * n_used to @offset + @n_rows when it was lower.
 *
 * Returns:
 *   - KVP_OK;
 *   - KVP_EINVAL (NULL @s or @rows, @n_rows 0, a format without codec,
 *     inf/NaN for int8/int4, or the block is shared).  A shared block is
 *     published under a prefix key, or held by two or more owners
 *     (kvpool/prefix.h).  Its rows are fixed.
 *   - KVP_ERANGE (@offset + @n_rows > block_size);
 *   - KVP_ENOENT (stale ref, block not in use when the call checks it);
 *   - KVP_ENOMEM (no buffer).
 *
 * On failure nothing changed.  Another thread may free the block while the
 * call runs, after its check.  The call then returns KVP_OK with the rows
 * stored, and n_used left as the free left it (see "Stale refs" above).
 * Thread-safe; see the table for same-block calls.
 */
int kvp_storage_write(kvp_storage *s, kvp_ref ref, uint32_t offset, const float *rows,
                      uint32_t n_rows);

/**
 * kvp_storage_read - the block's live rows, as stored, without a copy
 * @s:      the storage
 * @ref:    a block in use
 * @data:   receives the first row (NULL when the block has no rows stored)
 * @n_rows: receives the block's n_used, or 0 (see below)
 *
 * Rows are kvp_storage_row_bytes(@s, format) apart, with the format that
 * kvp_block_get reports.  *@n_rows is 0 when the block has no buffer yet,
 * or its buffer still holds another format.  The pointer stays valid while
 * the caller holds the block.  That is until the block is freed (then
 * released or retired) or written in another format.
 *
 * Returns KVP_OK; KVP_EINVAL (NULL args); KVP_ENOENT (stale ref, block not
 * in use); KVP_ENOMEM (the thread's first read could not get a hazard
 * record).  Thread-safe.  Lock-free, except when it zeroes rows below
 * n_used not written since the hand-out (see the top of this file).
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
 * Returns:
 *   - KVP_OK;
 *   - KVP_EINVAL (NULL args);
 *   - KVP_ERANGE (@cap_rows < n_used, nothing written);
 *   - KVP_ENOENT (stale ref or block not in use, checked before and after
 *     the copy; the contents of @rows are then unspecified);
 *   - KVP_ENOMEM, as for kvp_storage_read.
 *
 * Thread-safe, lock-free.
 */
int kvp_storage_read_f32(kvp_storage *s, kvp_ref ref, float *rows, uint32_t cap_rows,
                         uint32_t *n_rows);

/**
 * kvp_storage_resident_bytes - bytes of the buffers that exist now
 *
 * Counts each buffer's full allocation: its true capacity from the
 * bufcache, header included.  The count drops when a buffer is given back.
 * The call that dropped the buffer gives it back before it returns: a
 * release, a shrink's retire hook, or a write that changed the format.
 * Returns 0 for NULL.  Thread-safe, wait-free.
 */
size_t kvp_storage_resident_bytes(kvp_storage *s);

/**
 * kvp_storage_release - drop the buffer of a free block at once
 * @s:   the storage
 * @ref: the block's current ref (freed since it was handed out with it)
 *
 * The buffer goes back to the bufcache (or the system) before this
 * returns, once no stale reader still copies it.  The next write to the
 * block makes a new one.  A free block without buffer is fine: KVP_OK,
 * nothing to do.
 *
 * Returns:
 *   - KVP_OK;
 *   - KVP_EINVAL: NULL @s, or the block is in use, or it is cached under a
 *     prefix key.  Release is for free blocks only; a block's holder keeps
 *     its buffer.  A cached block (kvpool/prefix.h) keeps its rows for a
 *     later match, and eviction reuses the buffer in place.
 *   - KVP_ENOENT: stale ref.  The block was handed out again, retired, or
 *     never created.
 *
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
 *
 * Returns KVP_OK or KVP_EINVAL (NULL args).  Thread-safe, wait-free.
 */
int kvp_storage_get_stats(kvp_storage *s, kvp_storage_stats *out);

#ifdef __cplusplus
}
#endif
#endif /* KVPOOL_STORAGE_H */
