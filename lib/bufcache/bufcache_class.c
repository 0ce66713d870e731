/*
 * lib/bufcache/bufcache_class.c - request rounding and the three-level class bitmap.
 *
 * Rounding is the reference's: r + r/8 rounded up to 256, with the overflow guard
 * (r > KVP_BUF_MAX_REQUEST gives 0) tested before the shift-add, so the sum
 * can never wrap: r + r/8 + 255 <= SIZE_MAX for every r <= the maximum.
 *
 * The bitmap answers "first non-empty exact class >= c" with at most three
 * word loads per level visited (TLSF's first-level/second-level idea with
 * one more level, because 256-byte granularity up to 64 MiB is 2^18 classes).
 * Why the set/clear protocol converges is explained in bufcache_class.h.
 */
#include "lib/bufcache/bufcache_class.h"
#include "lib/base/sysmem.h"

#include <kvpool/bufcache.h>

size_t kvp_bufcache_round(size_t requested)
{
	if (requested > KVP_BUF_MAX_REQUEST)
		return 0;
	size_t r = requested + (requested >> 3);
	r = (r + (KVP_BUF_ALIGN - 1)) & ~(size_t)(KVP_BUF_ALIGN - 1);
	return r ? r : KVP_BUF_ALIGN;
}

int kvpi_bc_bitmap_init(struct kvpi_bc_bitmap *b)
{
	atomic_init(&b->l0, 0);
	for (size_t i = 0; i < KVPI_BC_N_GROUPS >> 6; i++)
		atomic_init(&b->l1[i], 0);
	/* calloc'ed zero words are valid initial atomics (lock-free uint64_t). */
	b->l2 = kvpi_sys_calloc(KVPI_BC_N_GROUPS, sizeof(*b->l2), 64);
	return b->l2 ? 0 : -1;
}

void kvpi_bc_bitmap_destroy(struct kvpi_bc_bitmap *b)
{
	kvpi_sys_free((void *)b->l2);
	b->l2 = NULL;
}

static inline uint64_t bit(size_t i)
{
	return (uint64_t)1 << (i & 63);
}

/* Set bit @i in @w; returns 1 when the word was zero before (the caller owns the parent bit). */
static inline int word_set(_Atomic uint64_t *w, size_t i)
{
	/* seq_cst: the setter's half of the set/clear Dekker pair (bufcache_class.h). */
	return atomic_fetch_or_explicit(w, bit(i), memory_order_seq_cst) == 0;
}

/* Clear bit @i in @w; returns 1 when this call made the word zero. */
static inline int word_clear(_Atomic uint64_t *w, size_t i)
{
	/* seq_cst: the clearer's half of the set/clear Dekker pair (bufcache_class.h). */
	uint64_t old = atomic_fetch_and_explicit(w, ~bit(i), memory_order_seq_cst);
	return old == bit(i);
}

static void set_l1(struct kvpi_bc_bitmap *b, size_t g)
{
	if (word_set(&b->l1[g >> 6], g))
		/* seq_cst: as word_set, one level up. */
		atomic_fetch_or_explicit(&b->l0, bit(g >> 6), memory_order_seq_cst);
}

void kvpi_bc_bitmap_set(struct kvpi_bc_bitmap *b, size_t cls)
{
	size_t g = cls >> KVPI_BC_GROUP_BITS;

	if (word_set(&b->l2[g], cls))
		set_l1(b, g);
}

void kvpi_bc_bitmap_clear(struct kvpi_bc_bitmap *b, size_t cls)
{
	size_t g = cls >> KVPI_BC_GROUP_BITS, w1 = g >> 6;

	if (!word_clear(&b->l2[g], cls))
		return;
	/* l2[g] became zero: clear its bit in l1, then re-check l2[g]. */
	if (word_clear(&b->l1[w1], g)) {
		/* seq_cst, the clear-then-re-check protocol at l0: the RMW and the
		 * re-read of the child word close the Dekker pair with a setter. */
		atomic_fetch_and_explicit(&b->l0, ~bit(w1), memory_order_seq_cst);
		if (atomic_load_explicit(&b->l1[w1], memory_order_seq_cst) != 0)
			atomic_fetch_or_explicit(&b->l0, bit(w1), memory_order_seq_cst);
	}
	/* seq_cst: the re-check after our clear; a setter that raced us is seen here
	 * or sees our clear (the Dekker pair of bufcache_class.h). */
	if (atomic_load_explicit(&b->l2[g], memory_order_seq_cst) != 0)
		set_l1(b, g);
}

/* Bits of @w at positions >= @from (from < 64). */
static inline uint64_t from_bit(uint64_t w, size_t from)
{
	return w & (~(uint64_t)0 << from);
}

long kvpi_bc_bitmap_find(struct kvpi_bc_bitmap *b, size_t from)
{
	while (from < KVPI_BC_EXACT_UNITS) {
		size_t g = from >> KVPI_BC_GROUP_BITS;
		/* seq_cst, as every bitmap load (a plain load on x86): a reader that
		 * races a clear sees either the clear or the setter's re-set. */
		uint64_t m =
		    from_bit(atomic_load_explicit(&b->l2[g], memory_order_seq_cst), from & 63);
		if (m)
			return (long)((g << KVPI_BC_GROUP_BITS) + (size_t)__builtin_ctzll(m));
		/* Next non-empty group after g: first in l1[g >> 6], then via l0. */
		g++;
		if (g >= KVPI_BC_N_GROUPS)
			return -1;
		/* seq_cst: as above. */
		m = (g & 63) ? from_bit(atomic_load_explicit(&b->l1[g >> 6], memory_order_seq_cst),
		                        g & 63)
		             : 0;
		if (m) {
			g = (g & ~(size_t)63) + (size_t)__builtin_ctzll(m);
		} else {
			size_t w1 = (g + 63) >> 6; /* first l1 word not yet looked at */
			if (w1 >= 64)
				return -1;
			/* seq_cst: as above. */
			m = from_bit(atomic_load_explicit(&b->l0, memory_order_seq_cst), w1);
			if (!m)
				return -1;
			w1 = (size_t)__builtin_ctzll(m);
			/* seq_cst: as above. */
			m = atomic_load_explicit(&b->l1[w1], memory_order_seq_cst);
			if (!m) { /* stale l0 bit: go on after that word */
				from = (w1 + 1) << 12;
				continue;
			}
			g = (w1 << 6) + (size_t)__builtin_ctzll(m);
		}
		/* A stale upper bit sends us to an empty group: the loop re-checks from it. */
		from = g << KVPI_BC_GROUP_BITS;
	}
	return -1;
}
