/*
 * lib/storage/storage.c - block storage: one encoded row buffer per pool block id.
 *
 * Design.
 *
 * Table: a slot (one atomic word) per block id, in the library's
 * segmented id table (lib/base/segtable.h), whose segments never move:
 * segment k holds 1024 << k slots, so 22 segments cover every id below
 * KVP_MAX_BLOCKS and the top level is a fixed array of pointers.  A
 * segment is made (zeroed) by the first write that needs it and installed
 * with a CAS; a loser frees its copy.  Growth of the pool thus
 * never moves or copies a slot, and readers need no protection for the
 * table itself (segments die with the storage).
 *
 * Slot word: the buffer's address with bit 0 as a lock.  Buffers are
 * 256-byte aligned, so the bit is free.  Every call that changes a slot
 * (write, release, the retire hook) takes the slot's lock and validates the
 * ref under it, so a release that saw the block free cannot drop a buffer
 * that the block's next owner is already writing: the owner's write either
 * ran before (then the release sees the block in use) or runs after (then
 * it sees no buffer and makes one).  The lock is per block, held for one
 * encode at most, and uncontended unless the caller races a block with
 * itself.  Readers never take it: they load the word (acquire) and mask
 * the bit.  No pool call that may wait runs under it: the ref is validated
 * with kvp_block_get (lock-free, no thread slot), and a write raises n_used
 * with kvp_block_set_used only after the unlock (that call may wait for the
 * pool's fallback-slot mutex, and a shrink's retire hook waits for this
 * lock while holding the pool's grow_lock).
 *
 * Buffer: a 64-byte header (format, row stride, capacity) then block_size
 * encoded rows.  The header is written before the buffer is published by
 * the slot unlock (release) and never changed after, so a reader that
 * loaded the pointer may read it.  A buffer is replaced, never re-formatted
 * in place, when the block's format changes.
 *
 * Prefix cache: rows follow the holder, not the block's history.  The
 * written-rows mark is keyed by the block's epoch (lib/prefix/prefix_epoch.h):
 * the generation of its latest fresh hand-out, which a match that revives
 * a cached block keeps and nothing but a fresh hand-out changes.  So a
 * published block shows what its publisher wrote since the hand-out
 * (zeros elsewhere), a match shares exactly that, and a reset, an
 * eviction of other blocks, a shrink or a growth leaves it alone.  A
 * block that is published or has two or more holders takes no write: the
 * check reads `published` and `n_holders` in the same snapshot the write
 * already makes under the slot lock.  Holders are added only by a match,
 * and a match needs the block published, so a block that passed the check
 * gets no new holder before the write ends (publishing it meanwhile is
 * the caller's race, like two writes).  A cached block (published and
 * free) keeps its buffer: release refuses it, and when eviction hands the
 * block out again the next write reuses the buffer in place.
 *
 * Reclamation: an unpublished buffer (release, retire, format change) is
 * freed only when no reader protects it with its hazard pointer
 * (lib/storage/storage_hazard.h: why not an epoch, and the proof).  Readers protect
 * the buffer before validating the ref and copying; the call that
 * unpublished it (with a seq_cst store) waits for those readers of that
 * one buffer, then frees it before returning.  None of these calls is on
 * a decode hot path.
 *
 * Counters (resident bytes, buffers) are relaxed atomics: they order
 * nothing, and they change only when a buffer is made or dropped, never
 * per row.
 */
#include <kvpool/storage.h>

#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "lib/base/segtable.h"
#include "lib/base/spin.h"
#include "lib/prefix/prefix_epoch.h"
#include "lib/storage/codec.h"
#include "lib/storage/storage_hazard.h"
#include "lib/base/sysmem.h"

#define SEG0_SHIFT 10u
#define SLOT_LOCK  ((uintptr_t)1)
#define BUF_ALIGN  256u

struct sbuf {
	kvp_format format;
	uint32_t row_bytes;
	size_t capacity; /* bytes of the allocation, header included */
	/* Written-rows mark: (epoch << 32) | rows.  Rows [0, rows) hold what
	 * the block's holders wrote, or zeros, since the fresh hand-out named
	 * by epoch; every other row is stale and reads as zeros.  Changed
	 * only under the slot lock, after the rows it covers are stored:
	 * release, so a lock-free reader of a shared block that sees a mark
	 * (acquire) sees the rows (zeros) a concurrent read_fill stored. */
	_Atomic uint64_t mark;
};
_Static_assert(sizeof(struct sbuf) <= KVP_STORAGE_HEADER_BYTES, "header fits");

struct kvp_storage {
	kvp_pool *pool;
	kvp_bufcache *cache;
	uint32_t row_dim;
	uint32_t block_size;
	struct kvpi_segtab slots; /* segments of _Atomic uintptr_t slots */
	_Atomic uint64_t resident, n_buffers, made, dropped, format_changes;
};

/* --- slot table ---------------------------------------------------------- */

/* The slot of @id, or NULL when its segment does not exist (and @create is
 * false, or making it failed).  @id < KVP_MAX_BLOCKS. */
static _Atomic uintptr_t *slot_of(kvp_storage *s, uint32_t id, bool create)
{
	uint32_t k = kvpi_seg_of(id, SEG0_SHIFT);
	/* acquire (in kvpi_segtab_get): an installed segment's zeroed slots are visible */
	_Atomic uintptr_t *seg = kvpi_segtab_get(&s->slots, k);

	if (!seg && create) {
		_Atomic uintptr_t *fresh =
		    kvpi_sys_calloc(kvpi_seg_len(SEG0_SHIFT, k), sizeof(*fresh), 64);
		if (!fresh)
			return NULL;
		/* release publishes the zeroed segment; acquire on failure reads the winner's */
		seg = kvpi_segtab_install(&s->slots, k, fresh);
		if (seg != fresh)
			kvpi_sys_free(fresh);
	}
	return seg ? &seg[kvpi_seg_off(id, SEG0_SHIFT)] : NULL;
}

/* Lock a slot; returns the buffer it held.  acquire: pairs with the
 * release of the previous unlock, so the holder sees the buffer's header
 * and everything the previous holder did. */
static uintptr_t slot_lock(_Atomic uintptr_t *slot)
{
	struct kvpi_spin spin = {0};

	for (;;) {
		uintptr_t v = atomic_fetch_or_explicit(slot, SLOT_LOCK, memory_order_acquire);
		if (!(v & SLOT_LOCK))
			return v;
		while (atomic_load_explicit(slot, memory_order_relaxed) & SLOT_LOCK)
			kvpi_spin_wait(&spin);
	}
}

/* Unlock with @buf as the slot's buffer.  release: publishes @buf's header
 * and rows to readers and the next lock holder. */
static void slot_unlock(_Atomic uintptr_t *slot, uintptr_t buf)
{
	atomic_store_explicit(slot, buf, memory_order_release);
}

/* Unlock, taking the slot's old buffer out of it.  seq_cst: the
 * reclaimer's store of the hazard-pointer Dekker pair (storage_hazard.h). */
static void slot_unpublish(_Atomic uintptr_t *slot, uintptr_t buf)
{
	atomic_store_explicit(slot, buf, memory_order_seq_cst);
}

static inline uint8_t *buf_rows(struct sbuf *b)
{
	return (uint8_t *)b + KVP_STORAGE_HEADER_BYTES;
}

/* --- written-rows mark ------------------------------------------------------ */

/*
 * The mark's key is the block's epoch (kvpi_block_get_epoch): the
 * generation of its latest fresh hand-out (kvp_allocate, kvp_alloc_block,
 * growth, eviction).  A prefix match that revives a cached block gives
 * it a new generation but keeps its epoch, so the rows its publisher
 * wrote stay valid for every later holder, and rows the publisher did not
 * write stay zeros: never an earlier hand-out's.  The rule is never "any
 * key": a published block trusts only its own hand-out's rows.
 */

/* Rows of @b valid for epoch @key: written or zeroed since, the rest stale. */
static inline uint32_t mark_rows(const struct sbuf *b, uint32_t key)
{
	/* acquire: pairs with mark_set's release (rows before the mark) */
	uint64_t m = atomic_load_explicit(&((struct sbuf *)b)->mark, memory_order_acquire);

	return (m >> 32) == key ? (uint32_t)m : 0;
}

/* Under the slot lock, after storing the rows it covers. */
static inline void mark_set(struct sbuf *b, uint32_t key, uint32_t rows)
{
	/* release: a reader that sees the mark sees the rows (above) */
	atomic_store_explicit(&b->mark, ((uint64_t)key << 32) | rows, memory_order_release);
}

/* Under the slot lock: zero the stale rows [valid, to) of @b and mark
 * [0, to) valid for @key.  O(rows zeroed): only rows never written since
 * the hand-out, each at most once per hand-out. */
static void mark_fill(struct sbuf *b, uint32_t key, uint32_t to)
{
	uint32_t valid = mark_rows(b, key);

	if (to <= valid)
		return;
	memset(buf_rows(b) + (size_t)valid * b->row_bytes, 0, (size_t)(to - valid) * b->row_bytes);
	mark_set(b, key, to);
}

/* --- buffers ------------------------------------------------------------- */

static struct sbuf *buf_new(kvp_storage *s, kvp_format f)
{
	uint32_t rb = (uint32_t)kvpi_codec_row_bytes(f, s->row_dim);
	size_t need = KVP_STORAGE_HEADER_BYTES + (size_t)s->block_size * rb, cap = need;
	struct sbuf *b;

	if (s->cache)
		b = kvp_bufcache_alloc(s->cache, need, &cap);
	else
		b = kvpi_sys_alloc(need, BUF_ALIGN);
	if (!b)
		return NULL;
	b->format = f;
	b->row_bytes = rb;
	b->capacity = cap;
	/* no valid row: the rows hold whatever the memory held */
	atomic_init(&b->mark, 0);
	atomic_fetch_add_explicit(&s->resident, cap, memory_order_relaxed);
	atomic_fetch_add_explicit(&s->n_buffers, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&s->made, 1, memory_order_relaxed);
	return b;
}

/* Give a buffer back at once: never published, or no reader holds it any more. */
static void buf_free(kvp_storage *s, struct sbuf *b)
{
	size_t cap = b->capacity;

	atomic_fetch_sub_explicit(&s->resident, cap, memory_order_relaxed);
	atomic_fetch_sub_explicit(&s->n_buffers, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&s->dropped, 1, memory_order_relaxed);
	if (s->cache)
		kvp_bufcache_free(s->cache, b, cap);
	else
		kvpi_sys_free(b);
}

/* Free a buffer that readers may still see, once it is unpublished: after
 * every reader that protects it has let go. */
static void buf_retire(kvp_storage *s, struct sbuf *b)
{
	kvpi_hazard_wait(b);
	buf_free(s, b);
}

/* --- retire hook ---------------------------------------------------------- */

static void storage_retire_hook(void *arg, uint32_t id)
{
	kvp_storage *s = arg;
	_Atomic uintptr_t *slot = slot_of(s, id, false);
	uintptr_t cur;

	if (!slot)
		return;
	/* a retired block never comes back: unpublish, wait out readers, free */
	cur = slot_lock(slot);
	slot_unpublish(slot, 0);
	if (cur)
		buf_retire(s, (struct sbuf *)cur);
}

/* --- life cycle ------------------------------------------------------------ */

int kvp_storage_create(kvp_pool *pool, uint32_t row_dim, kvp_bufcache *cache, kvp_storage **out)
{
	kvp_storage *s;
	int rc;

	if (!pool || !out || kvpi_codec_row_bytes(KVP_FP32, row_dim) == 0)
		return KVP_EINVAL;
	s = kvpi_sys_calloc(1, sizeof *s, 64);
	if (!s)
		return KVP_ENOMEM;
	s->pool = pool;
	s->cache = cache;
	s->row_dim = row_dim;
	s->block_size = kvp_pool_block_size(pool);
	kvpi_segtab_init(&s->slots);
	rc = kvp_pool_add_retire_hook(pool, storage_retire_hook, s);
	if (rc != KVP_OK) {
		kvpi_sys_free(s);
		return rc;
	}
	*out = s;
	return KVP_OK;
}

void kvp_storage_destroy(kvp_storage *s)
{
	uint32_t k;

	if (!s)
		return;
	/* under the pool's grow lock: no retire hook of ours runs after this */
	kvp_pool_remove_retire_hook(s->pool, storage_retire_hook, s);
	for (k = 0; k < KVPI_SEGTAB_MAX; k++) {
		_Atomic uintptr_t *seg = kvpi_segtab_get(&s->slots, k);
		if (!seg)
			continue;
		for (size_t i = 0; i < kvpi_seg_len(SEG0_SHIFT, k); i++) {
			/* acquire: the last unlock's buffer and its header */
			uintptr_t b = atomic_load_explicit(&seg[i], memory_order_acquire);
			if (b)
				buf_free(s, (struct sbuf *)(b & ~SLOT_LOCK));
		}
	}
	kvpi_segtab_destroy(&s->slots);
	kvpi_sys_free(s);
}

/* --- write ------------------------------------------------------------------ */

int kvp_storage_write(kvp_storage *s, kvp_ref ref, uint32_t offset, const float *rows,
                      uint32_t n_rows)
{
	kvp_block_info info;
	_Atomic uintptr_t *slot;
	struct sbuf *cur, *fresh = NULL, *dst;
	uint32_t end, epoch;
	int rc;

	if (!s || !rows || n_rows == 0)
		return KVP_EINVAL;
	if (offset >= s->block_size || n_rows > s->block_size - offset)
		return KVP_ERANGE;
	end = offset + n_rows;
	/* never make a segment for an id the pool never made */
	if (KVP_REF_ID(ref) >= kvp_pool_n_ids(s->pool))
		return KVP_ENOENT;
	slot = slot_of(s, KVP_REF_ID(ref), true);
	if (!slot)
		return KVP_ENOMEM;

	cur = (struct sbuf *)slot_lock(slot);
	/* validated under the slot lock: see "Slot word" above */
	rc = kvpi_block_get_epoch(s->pool, ref, &info, &epoch);
	if (rc == KVP_OK && !info.in_use)
		rc = KVP_ENOENT;
	/* shared rows are fixed: published, or two or more holders (see
	 * "Prefix cache" above for why no holder joins before we finish) */
	if (rc == KVP_OK && (info.published || info.n_holders >= 2))
		rc = KVP_EINVAL;
	if (rc == KVP_OK)
		rc = kvpi_codec_check(info.format, rows, n_rows, s->row_dim);
	if (rc == KVP_OK && (!cur || cur->format != info.format) &&
	    !(fresh = buf_new(s, info.format)))
		rc = KVP_ENOMEM;
	if (rc != KVP_OK) {
		slot_unlock(slot, (uintptr_t)cur);
		if (fresh)
			buf_free(s, fresh);
		return rc;
	}
	dst = fresh ? fresh : cur;
	/* rows below @offset not written since the hand-out become zeros, and
	 * every row up to @end is valid once stored */
	mark_fill(dst, epoch, offset);
	kvpi_codec_encode(info.format, buf_rows(dst) + (size_t)offset * dst->row_bytes, rows,
	                  n_rows, s->row_dim);
	if (mark_rows(dst, epoch) < end)
		mark_set(dst, epoch, end);
	if (fresh && cur)
		slot_unpublish(slot, (uintptr_t)dst);
	else
		slot_unlock(slot, (uintptr_t)dst);
	if (fresh && cur) {
		atomic_fetch_add_explicit(&s->format_changes, 1, memory_order_relaxed);
		buf_retire(s, cur);
	}
	/* After the unlock: kvp_block_set_used may wait for the pool's
	 * fallback-slot mutex (a thread that got no slot), whose holder may
	 * wait for grow_lock, whose holder (a shrink's retire hook) may wait
	 * for this slot lock.  set_used validates the generation itself: if
	 * the block was freed since the check above, it changes nothing (see
	 * storage.h for why the write is still KVP_OK). */
	if (end > info.n_used)
		(void)kvp_block_set_used(s->pool, ref, end);
	return KVP_OK;
}

/* --- reads ------------------------------------------------------------------- */

/* Validate @ref and protect its buffer: *@buf is NULL when the block has
 * no buffer of its format.  On KVP_OK the caller must kvpi_hazard_clear. */
static int read_lookup(kvp_storage *s, kvp_ref ref, struct kvpi_hazard_rec *rec,
                       kvp_block_info *info, uint32_t *epoch, struct sbuf **buf)
{
	_Atomic uintptr_t *slot;
	struct sbuf *b = NULL;
	int rc;

	if (KVP_REF_ID(ref) >= kvp_pool_n_ids(s->pool))
		return KVP_ENOENT;
	slot = slot_of(s, KVP_REF_ID(ref), false);
	/* protect first, validate after: a buffer unpublished after the
	 * validation (block freed, then released or retired) stays readable */
	if (slot)
		b = kvpi_hazard_protect(rec, slot, SLOT_LOCK);
	rc = kvpi_block_get_epoch(s->pool, ref, info, epoch);
	if (rc == KVP_OK && !info->in_use)
		rc = KVP_ENOENT;
	if (rc != KVP_OK) {
		kvpi_hazard_clear(rec);
		return rc;
	}
	*buf = b && b->format == info->format ? b : NULL;
	return KVP_OK;
}

/*
 * Make rows [0, @n) of @b read as zeros where they were not written since
 * the hand-out of @ref: the slow path of a read that finds n_used above the
 * written-rows mark (n_used raised by kvp_block_set_used past the rows
 * written).  Zeroes under the slot lock after validating @ref again, so a
 * reader whose ref went stale never writes to a buffer that a later holder
 * uses.  Returns KVP_OK or KVP_ENOENT (the block changed hands).
 */
static int read_fill(kvp_storage *s, kvp_ref ref, struct sbuf *b, uint32_t n)
{
	_Atomic uintptr_t *slot = slot_of(s, KVP_REF_ID(ref), false);
	kvp_block_info info;
	uintptr_t cur;
	uint32_t epoch;
	int rc;

	if (!slot)
		return KVP_ENOENT;
	cur = slot_lock(slot);
	rc = kvpi_block_get_epoch(s->pool, ref, &info, &epoch);
	if (rc == KVP_OK && (!info.in_use || (struct sbuf *)cur != b))
		rc = KVP_ENOENT;
	if (rc == KVP_OK)
		mark_fill(b, epoch, n);
	slot_unlock(slot, cur);
	return rc;
}

int kvp_storage_read(kvp_storage *s, kvp_ref ref, const void **data, uint32_t *n_rows)
{
	struct kvpi_hazard_rec *rec;
	kvp_block_info info;
	struct sbuf *b;
	uint32_t epoch;
	int rc;

	if (!s || !data || !n_rows)
		return KVP_EINVAL;
	if (!(rec = kvpi_hazard_record()))
		return KVP_ENOMEM;
	rc = read_lookup(s, ref, rec, &info, &epoch, &b);
	if (rc != KVP_OK)
		return rc;
	if (b && mark_rows(b, epoch) < info.n_used)
		rc = read_fill(s, ref, b, info.n_used);
	if (rc != KVP_OK) {
		kvpi_hazard_clear(rec);
		return rc;
	}
	*data = b ? buf_rows(b) : NULL;
	*n_rows = b ? info.n_used : 0;
	kvpi_hazard_clear(rec);
	return KVP_OK;
}

int kvp_storage_read_f32(kvp_storage *s, kvp_ref ref, float *rows, uint32_t cap_rows,
                         uint32_t *n_rows)
{
	struct kvpi_hazard_rec *rec;
	kvp_block_info info, again;
	struct sbuf *b;
	uint32_t n, epoch;
	int rc;

	if (!s || !rows || !n_rows)
		return KVP_EINVAL;
	if (!(rec = kvpi_hazard_record()))
		return KVP_ENOMEM;
	rc = read_lookup(s, ref, rec, &info, &epoch, &b);
	if (rc != KVP_OK)
		return rc;
	n = b ? info.n_used : 0;
	if (n > cap_rows) {
		*n_rows = n;
		rc = KVP_ERANGE;
	} else if (n) {
		/* rows not written since the hand-out read as zeros */
		uint32_t valid = mark_rows(b, epoch);
		if (valid > n)
			valid = n;
		kvpi_codec_decode(info.format, rows, buf_rows(b), valid, s->row_dim);
		memset(rows + (size_t)valid * s->row_dim, 0,
		       (size_t)(n - valid) * s->row_dim * sizeof(float));
		/* the block may have been freed (and handed out) while we copied */
		if (kvp_block_get(s->pool, ref, &again) != KVP_OK || !again.in_use)
			rc = KVP_ENOENT;
	}
	kvpi_hazard_clear(rec);
	if (rc == KVP_OK)
		*n_rows = n;
	return rc;
}

/* --- release, accounting --------------------------------------------------- */

int kvp_storage_release(kvp_storage *s, kvp_ref ref)
{
	kvp_block_info info;
	_Atomic uintptr_t *slot;
	uintptr_t cur;
	int rc;

	if (!s)
		return KVP_EINVAL;
	rc = kvp_block_get(s->pool, ref, &info);
	if (rc != KVP_OK)
		return rc;
	if (info.in_use || info.published) /* a cached block keeps its rows */
		return KVP_EINVAL;
	slot = slot_of(s, KVP_REF_ID(ref), false);
	if (!slot)
		return KVP_OK;
	cur = slot_lock(slot);
	/* again under the lock: the block may have been handed out meanwhile */
	rc = kvp_block_get(s->pool, ref, &info);
	if (rc == KVP_OK && (info.in_use || info.published))
		rc = KVP_EINVAL;
	if (rc != KVP_OK) {
		slot_unlock(slot, cur);
		return rc;
	}
	slot_unpublish(slot, 0);
	if (cur)
		buf_retire(s, (struct sbuf *)cur);
	return KVP_OK;
}

size_t kvp_storage_resident_bytes(kvp_storage *s)
{
	return s ? (size_t)atomic_load_explicit(&s->resident, memory_order_relaxed) : 0;
}

uint32_t kvp_storage_row_dim(const kvp_storage *s)
{
	return s ? s->row_dim : 0;
}

kvp_pool *kvp_storage_pool(const kvp_storage *s)
{
	return s ? s->pool : NULL;
}

size_t kvp_storage_row_bytes(const kvp_storage *s, kvp_format f)
{
	return s ? kvpi_codec_row_bytes(f, s->row_dim) : 0;
}

int kvp_storage_get_stats(kvp_storage *s, kvp_storage_stats *out)
{
	if (!s || !out)
		return KVP_EINVAL;
	out->resident_bytes = atomic_load_explicit(&s->resident, memory_order_relaxed);
	out->n_buffers = atomic_load_explicit(&s->n_buffers, memory_order_relaxed);
	out->buffers_made = atomic_load_explicit(&s->made, memory_order_relaxed);
	out->buffers_dropped = atomic_load_explicit(&s->dropped, memory_order_relaxed);
	out->format_changes = atomic_load_explicit(&s->format_changes, memory_order_relaxed);
	return KVP_OK;
}
