/*
 * tests/segtable_test.c - the segmented id table: geometry and racing installs.
 *
 * Geometry: for segment-0 shifts 0, 8 and 10 (storage's and the buffer
 * cache's and the block table's), walking the ids in order from 0 must
 * visit segment 0 offsets 0 .. 2^shift - 1, then segment 1 from offset 0,
 * and so on: kvpi_seg_of / kvpi_seg_off must agree with that walk at every
 * id of the first segments, at every segment boundary up to 2^32, and
 * kvpi_seg_first / kvpi_seg_len with where the walk starts each segment.
 *
 * Installs: threads race to install their own copy of each segment; for
 * every segment exactly one copy wins, every racer is handed that copy,
 * and a reader that finds the segment sees what its maker wrote into it
 * before installing it (TSan checks the release/acquire pair).
 */
#include "lib/testing/segtable.h"
#include "tests/testutil.h"

#include <pthread.h>
#include <stdlib.h>

static void check_id(uint32_t id, unsigned shift, uint32_t k, uint32_t off)
{
	CHECK_EQ(kvpi_seg_of(id, shift), k);
	CHECK_EQ(kvpi_seg_off(id, shift), off);
}

static void test_geometry(void)
{
	static const unsigned shifts[] = {0, 8, 10};

	for (size_t s = 0; s < sizeof(shifts) / sizeof(shifts[0]); s++) {
		unsigned shift = shifts[s];
		uint32_t k = 0, off = 0;
		/* Every id of the first 12 segments, one by one. */
		for (uint32_t id = 0; k < 12; id++) {
			if (off == 0) {
				CHECK_EQ(kvpi_seg_first(shift, k), id);
				CHECK_EQ(kvpi_seg_len(shift, k), (size_t)1 << (shift + k));
			}
			check_id(id, shift, k, off);
			if (++off == kvpi_seg_len(shift, k)) {
				k++;
				off = 0;
			}
		}
		/* Both sides of every boundary, up to the last id the table can name. */
		for (k = 1; shift + k < 32; k++) {
			uint32_t first = (uint32_t)kvpi_seg_first(shift, k);
			check_id(first, shift, k, 0);
			check_id(first - 1, shift, k - 1, (uint32_t)kvpi_seg_len(shift, k - 1) - 1);
		}
		uint32_t last = UINT32_MAX - (1u << shift);
		check_id(last, shift, 31 - shift, (uint32_t)kvpi_seg_len(shift, 31 - shift) - 1);
	}
}

#define RACERS 4
#define SEGS   12

static struct kvpi_segtab tab;
static _Atomic int start;

/* Each racer makes its own copy of every segment, stamped with its id, and
 * installs it; a loser must be handed the winner's copy, stamped by it. */
static void *racer(void *arg)
{
	uint32_t me = (uint32_t)(uintptr_t)arg;

	while (!atomic_load_explicit(&start, memory_order_acquire))
		;
	for (uint32_t k = 0; k < SEGS; k++) {
		uint32_t *got = kvpi_segtab_get(&tab, k);
		if (!got) {
			uint32_t *fresh = malloc(kvpi_seg_len(0, k) * sizeof(*fresh));
			CHECK(fresh != NULL);
			for (size_t i = 0; i < kvpi_seg_len(0, k); i++)
				fresh[i] = me;
			got = kvpi_segtab_install(&tab, k, fresh);
			if (got != fresh)
				free(fresh);
		}
		/* The copy in the table, whoever made it, is whole. */
		CHECK(got == kvpi_segtab_get(&tab, k));
		for (size_t i = 0; i < kvpi_seg_len(0, k); i++)
			CHECK_EQ(got[i], got[0]);
	}
	return NULL;
}

static void test_install_race(void)
{
	pthread_t t[RACERS];

	for (int round = 0; round < 50; round++) {
		kvpi_segtab_init(&tab);
		atomic_store(&start, 0);
		for (uintptr_t i = 0; i < RACERS; i++)
			CHECK_EQ(pthread_create(&t[i], NULL, racer, (void *)i), 0);
		atomic_store_explicit(&start, 1, memory_order_release);
		for (int i = 0; i < RACERS; i++)
			CHECK_EQ(pthread_join(t[i], NULL), 0);
		for (uint32_t k = 0; k < SEGS; k++) {
			uint32_t *s = kvpi_segtab_get(&tab, k);
			CHECK(s != NULL);
			CHECK(s[0] < RACERS);
			/* Freed by the table, not by us: kvpi_sys_free is free(). */
		}
		for (uint32_t k = SEGS; k < KVPI_SEGTAB_MAX; k++)
			CHECK(kvpi_segtab_get(&tab, k) == NULL);
		kvpi_segtab_destroy(&tab);
		for (uint32_t k = 0; k < KVPI_SEGTAB_MAX; k++)
			CHECK(kvpi_segtab_get(&tab, k) == NULL);
	}
}

int main(void)
{
	RUN(test_geometry);
	RUN(test_install_race);
	return 0;
}
