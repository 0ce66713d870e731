/*
 * tests/bufcache_class_test.c - the three-level class bitmap against a plain bool array.
 *
 * Random sets and clears over all 2^18 exact classes (dense runs inside one
 * group, lone bits far apart, every group and l1 word boundary), then
 * kvpi_bc_bitmap_find(from) must equal a linear scan of the reference for every
 * probed `from`.  Also the size helpers: units for a request.
 */
#include "lib/testing/bufcache_class.h"
#include "tests/testutil.h"

#include <stdlib.h>
#include <string.h>

static unsigned char ref[KVPI_BC_EXACT_UNITS];

static long ref_find(size_t from)
{
	for (size_t i = from; i < KVPI_BC_EXACT_UNITS; i++)
		if (ref[i])
			return (long)i;
	return -1;
}

static void set(struct kvpi_bc_bitmap *b, size_t c)
{
	kvpi_bc_bitmap_set(b, c);
	ref[c] = 1;
}

static void clear(struct kvpi_bc_bitmap *b, size_t c)
{
	kvpi_bc_bitmap_clear(b, c);
	ref[c] = 0;
}

static void probe(struct kvpi_bc_bitmap *b, uint64_t *rng)
{
	static const size_t edges[] = {0, 1, 63, 64, 65, 4095, 4096, 4097, 262080, 262143};

	for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]); i++)
		CHECK_EQ(kvpi_bc_bitmap_find(b, edges[i]), ref_find(edges[i]));
	for (int i = 0; i < 200; i++) {
		size_t f = tu_rand(rng) % KVPI_BC_EXACT_UNITS;
		CHECK_EQ(kvpi_bc_bitmap_find(b, f), ref_find(f));
	}
	CHECK_EQ(kvpi_bc_bitmap_find(b, KVPI_BC_EXACT_UNITS), -1);
}

static void bitmap_matches_reference(void)
{
	struct kvpi_bc_bitmap b;
	uint64_t rng = 42;

	CHECK_EQ(kvpi_bc_bitmap_init(&b), 0);
	memset(ref, 0, sizeof(ref));
	probe(&b, &rng);
	for (int round = 0; round < 300; round++) {
		uint64_t r = tu_rand(&rng);
		size_t c = (size_t)(r % KVPI_BC_EXACT_UNITS);
		switch (r >> 60 & 3) {
		case 0: /* a lone bit */
			if (ref[c])
				clear(&b, c);
			else
				set(&b, c);
			break;
		case 1: /* a run inside one group */
			for (size_t i = c & ~(size_t)63; i < (c | 63); i += 1 + (r >> 50 & 3))
				set(&b, i);
			break;
		case 2: /* clear a run */
			for (size_t i = c & ~(size_t)63; i <= (c | 63); i++)
				if (ref[i])
					clear(&b, i);
			break;
		default: /* group and l1 boundaries */
			set(&b, (c & ~(size_t)4095) + 4095);
			if (c & 1)
				clear(&b, (c & ~(size_t)4095) + 4095);
		}
		probe(&b, &rng);
	}
	/* Clear everything that is left: the bitmap reads empty again. */
	for (size_t i = 0; i < KVPI_BC_EXACT_UNITS; i++)
		if (ref[i])
			clear(&b, i);
	CHECK_EQ(kvpi_bc_bitmap_find(&b, 0), -1);
	kvpi_bc_bitmap_destroy(&b);
}

static void units_for_request(void)
{
	CHECK_EQ(kvpi_bc_units_for_request(0), 1);
	CHECK_EQ(kvpi_bc_units_for_request(1), 1);
	CHECK_EQ(kvpi_bc_units_for_request(256), 1);
	CHECK_EQ(kvpi_bc_units_for_request(257), 2);
	CHECK_EQ(kvpi_bc_units_for_request(512), 2);
	CHECK_EQ(kvpi_bc_units_for_request(KVP_BUF_LOCKFREE_MAX), KVPI_BC_EXACT_UNITS);
	CHECK_EQ(kvpi_bc_units_for_request(KVP_BUF_LOCKFREE_MAX + 1), KVPI_BC_EXACT_UNITS + 1);
	CHECK_EQ(kvpi_bc_floor_log2(1), 0);
	CHECK_EQ(kvpi_bc_floor_log2(KVPI_BC_EXACT_UNITS), KVPI_BC_EXACT_BITS);
}

int main(void)
{
	RUN(bitmap_matches_reference);
	RUN(units_for_request);
	return 0;
}
