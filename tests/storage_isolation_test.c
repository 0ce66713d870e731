/*
 * tests/storage_isolation_test.c - rows follow the holder, not the block's history.
 *
 * Storage and the prefix cache on a 4-block pool with one storage:
 *   - a block published without a write reads zeros, never the rows of the
 *     hand-out before (its publisher's, and every matcher's, reads);
 *   - a block with two or more holders takes no write and no n_used change,
 *     also once kvp_prefix_reset has unpublished it;
 *   - kvp_prefix_reset, evictions of other blocks, kvp_shrink and growth
 *     leave what a holder reads unchanged (read_f32 and the zero-copy read,
 *     which must not zero the shared buffer in place);
 *   - a reset-unpublished block with one holder left is that holder's again.
 */
#include <kvpool/kvpool.h>

#include <string.h>

#include "tests/testutil.h"

#define BS  4
#define ROW 8

static kvp_pool *mkpool(uint32_t n_blocks, bool grow)
{
	kvp_pool_config c;
	kvp_pool *p = NULL;

	kvp_pool_config_init(&c);
	c.block_size = BS;
	c.n_blocks = n_blocks;
	c.separate_kv = false;
	c.prefix_cache = true;
	c.grow_on_exhaustion = grow;
	c.max_blocks = grow ? 64 : n_blocks;
	CHECK_EQ(kvp_pool_create(&c, &p), KVP_OK);
	return p;
}

static void rows_of(float *r, float base)
{
	for (int i = 0; i < BS * ROW; i++)
		r[i] = base + (float)i;
}

static kvp_hash key_of(uint8_t tok)
{
	kvp_hash k;

	CHECK_EQ(kvp_prefix_hash(NULL, 0, &tok, 1, &k), KVP_OK);
	return k;
}

/* Both reads of @ref give exactly @want (BS rows). */
static void reads_equal(kvp_storage *s, kvp_ref ref, const float *want)
{
	float got[BS * ROW];
	const void *data = NULL;
	uint32_t n = 0;

	CHECK_EQ(kvp_storage_read_f32(s, ref, got, BS, &n), KVP_OK);
	CHECK_EQ(n, BS);
	CHECK(memcmp(got, want, sizeof got) == 0);
	CHECK_EQ(kvp_storage_read(s, ref, &data, &n), KVP_OK);
	CHECK_EQ(n, BS);
	CHECK(data != NULL);
	CHECK(memcmp(data, want, sizeof got) == 0);
	/* and again: the zero-copy read changed nothing */
	CHECK_EQ(kvp_storage_read_f32(s, ref, got, BS, &n), KVP_OK);
	CHECK(memcmp(got, want, sizeof got) == 0);
}

/* A: B gets the block A wrote and freed unpublished, writes nothing, and
 * publishes it: B, and C after a match, read zeros, never A's rows. */
static void test_publish_unwritten_reads_zeros(void)
{
	kvp_pool *p = mkpool(4, false);
	kvp_storage *s;
	kvp_ref ra, rb[4], rc;
	float a[BS * ROW], zero[BS * ROW] = {0}, got[BS * ROW];
	size_t n, nm;
	kvp_hash k = key_of(1);
	int i, mine = -1;
	uint32_t nr;

	CHECK_EQ(kvp_storage_create(p, ROW, NULL, &s), KVP_OK);
	rows_of(a, 1.0f);
	CHECK_EQ(kvp_allocate(p, KVP_KV, BS, 1, KVP_FP32, &ra, 1, &n), KVP_OK);
	CHECK_EQ(kvp_storage_write(s, ra, 0, a, BS), KVP_OK);
	reads_equal(s, ra, a);
	CHECK_EQ(kvp_free_all(p, 1), KVP_OK);
	/* B takes every block, so it surely gets A's */
	CHECK_EQ(kvp_allocate(p, KVP_KV, 4 * BS, 2, KVP_FP32, rb, 4, &n), KVP_OK);
	for (i = 0; i < 4; i++)
		if (KVP_REF_ID(rb[i]) == KVP_REF_ID(ra))
			mine = i;
	CHECK(mine >= 0);
	/* read_f32 only: it zeroes nothing in the buffer */
	CHECK_EQ(kvp_storage_read_f32(s, rb[mine], got, BS, &nr), KVP_OK);
	CHECK_EQ(nr, BS);
	CHECK(memcmp(got, zero, sizeof got) == 0);
	CHECK_EQ(kvp_prefix_publish(p, rb[mine], k), KVP_OK);
	reads_equal(s, rb[mine], zero);
	CHECK_EQ(kvp_prefix_match(p, KVP_KV, KVP_FP32, &k, 1, 3, &rc, 1, &nm), KVP_OK);
	CHECK_EQ(nm, 1);
	reads_equal(s, rc, zero);
	/* cached, then revived: still zeros */
	CHECK_EQ(kvp_free_all(p, 2), KVP_OK);
	CHECK_EQ(kvp_free_all(p, 3), KVP_OK);
	CHECK_EQ(kvp_prefix_match(p, KVP_KV, KVP_FP32, &k, 1, 4, &rc, 1, &nm), KVP_OK);
	CHECK_EQ(nm, 1);
	reads_equal(s, rc, zero);
	CHECK_EQ(kvp_free_all(p, 4), KVP_OK);
	kvp_storage_destroy(s);
	kvp_pool_destroy(p);
}

/* A publisher that wrote only some rows publishes those and zeros: never
 * the earlier hand-out's rows beyond them. */
static void test_publish_partly_written(void)
{
	kvp_pool *p = mkpool(1, false);
	kvp_storage *s;
	kvp_ref ra, rb, rc;
	float a[BS * ROW], b[BS * ROW], want[BS * ROW] = {0};
	size_t n, nm;
	kvp_hash k = key_of(2);

	CHECK_EQ(kvp_storage_create(p, ROW, NULL, &s), KVP_OK);
	rows_of(a, 1.0f);
	rows_of(b, 500.0f);
	CHECK_EQ(kvp_allocate(p, KVP_KV, BS, 1, KVP_FP32, &ra, 1, &n), KVP_OK);
	CHECK_EQ(kvp_storage_write(s, ra, 0, a, BS), KVP_OK);
	CHECK_EQ(kvp_free_all(p, 1), KVP_OK);
	CHECK_EQ(kvp_allocate(p, KVP_KV, BS, 2, KVP_FP32, &rb, 1, &n), KVP_OK);
	CHECK_EQ(KVP_REF_ID(rb), KVP_REF_ID(ra));
	CHECK_EQ(kvp_storage_write(s, rb, 1, b, 1), KVP_OK); /* row 1 only */
	memcpy(want + ROW, b, ROW * sizeof(float));
	CHECK_EQ(kvp_prefix_publish(p, rb, k), KVP_OK);
	reads_equal(s, rb, want);
	CHECK_EQ(kvp_free_all(p, 2), KVP_OK);
	CHECK_EQ(kvp_prefix_match(p, KVP_KV, KVP_FP32, &k, 1, 3, &rc, 1, &nm), KVP_OK);
	CHECK_EQ(nm, 1);
	reads_equal(s, rc, want);
	CHECK_EQ(kvp_free_all(p, 3), KVP_OK);
	kvp_storage_destroy(s);
	kvp_pool_destroy(p);
}

/* B and C: two holders of K.  A reset unpublishes the block; neither may
 * then write it or change its n_used, and each reads the published rows. */
static void test_two_holders_after_reset_take_no_writes(void)
{
	kvp_pool *p = mkpool(4, false);
	kvp_storage *s;
	kvp_ref ra, rb, rc;
	float a[BS * ROW], b[BS * ROW];
	size_t n, nm;
	kvp_hash k = key_of(3);
	kvp_block_info info;

	CHECK_EQ(kvp_storage_create(p, ROW, NULL, &s), KVP_OK);
	rows_of(a, 1.0f);
	rows_of(b, 700.0f);
	CHECK_EQ(kvp_allocate(p, KVP_KV, BS, 1, KVP_FP32, &ra, 1, &n), KVP_OK);
	CHECK_EQ(kvp_storage_write(s, ra, 0, a, BS), KVP_OK);
	CHECK_EQ(kvp_prefix_publish(p, ra, k), KVP_OK);
	CHECK_EQ(kvp_free_all(p, 1), KVP_OK); /* cached */
	CHECK_EQ(kvp_prefix_match(p, KVP_KV, KVP_FP32, &k, 1, 2, &rb, 1, &nm), KVP_OK);
	CHECK_EQ(nm, 1);
	CHECK_EQ(kvp_prefix_match(p, KVP_KV, KVP_FP32, &k, 1, 3, &rc, 1, &nm), KVP_OK);
	CHECK_EQ(nm, 1);
	CHECK_EQ(rb, rc);
	CHECK_EQ(kvp_prefix_reset(p), 1);
	CHECK_EQ(kvp_block_get(p, rb, &info), KVP_OK);
	CHECK(!info.published);
	CHECK_EQ(info.n_holders, 2);
	/* no write, no n_used change: C's rows stay A's */
	CHECK_EQ(kvp_storage_write(s, rb, 0, b, BS), KVP_EINVAL);
	CHECK_EQ(kvp_storage_write(s, rb, 2, b, 1), KVP_EINVAL);
	CHECK_EQ(kvp_block_set_used(p, rb, 1), KVP_EINVAL);
	reads_equal(s, rc, a);
	reads_equal(s, rb, a);
	/* C lets go: B is the only holder, and the block is B's to write */
	CHECK_EQ(kvp_free_owned(p, 3, &rc, 1), KVP_OK);
	reads_equal(s, rb, a);
	CHECK_EQ(kvp_storage_write(s, rb, 0, b, BS), KVP_OK);
	reads_equal(s, rb, b);
	CHECK_EQ(kvp_free_all(p, 2), KVP_OK);
	kvp_storage_destroy(s);
	kvp_pool_destroy(p);
}

/* A publishes and frees; B matches.  A reset, evictions of other blocks,
 * a shrink and a growth leave B's rows as A wrote them. */
static void test_holder_rows_survive_reset_evict_shrink_grow(void)
{
	kvp_pool *p = mkpool(4, true);
	kvp_storage *s;
	kvp_ref ra, rb, other[8];
	float a[BS * ROW], x[BS * ROW];
	size_t n, nm;
	kvp_hash k = key_of(4);
	uint32_t retired;

	CHECK_EQ(kvp_storage_create(p, ROW, NULL, &s), KVP_OK);
	rows_of(a, 1.0f);
	rows_of(x, 900.0f);
	CHECK_EQ(kvp_allocate(p, KVP_KV, BS, 1, KVP_FP32, &ra, 1, &n), KVP_OK);
	CHECK_EQ(kvp_storage_write(s, ra, 0, a, BS), KVP_OK);
	CHECK_EQ(kvp_prefix_publish(p, ra, k), KVP_OK);
	CHECK_EQ(kvp_free_all(p, 1), KVP_OK);
	CHECK_EQ(kvp_prefix_match(p, KVP_KV, KVP_FP32, &k, 1, 2, &rb, 1, &nm), KVP_OK);
	CHECK_EQ(nm, 1);
	reads_equal(s, rb, a);
	CHECK_EQ(kvp_prefix_reset(p), 1);
	reads_equal(s, rb, a);
	CHECK_EQ(kvp_prefix_reset(p), 0);
	reads_equal(s, rb, a);

	/* other blocks: written, published, cached, evicted by an allocation */
	for (uint8_t i = 0; i < 3; i++) {
		kvp_ref r;
		CHECK_EQ(kvp_allocate(p, KVP_KV, BS, 10 + i, KVP_FP32, &r, 1, &n), KVP_OK);
		CHECK_EQ(kvp_storage_write(s, r, 0, x, BS), KVP_OK);
		CHECK_EQ(kvp_prefix_publish(p, r, key_of((uint8_t)(20 + i))), KVP_OK);
		CHECK_EQ(kvp_free_all(p, 10 + i), KVP_OK);
	}
	CHECK_EQ(kvp_allocate(p, KVP_KV, 3 * BS, 30, KVP_FP32, other, 8, &n), KVP_OK);
	for (size_t i = 0; i < n; i++)
		CHECK_EQ(kvp_storage_write(s, other[i], 0, x, BS), KVP_OK);
	reads_equal(s, rb, a);
	/* growth */
	CHECK_EQ(kvp_allocate(p, KVP_KV, 4 * BS, 31, KVP_FP32, other, 8, &n), KVP_OK);
	CHECK_EQ(kvp_storage_write(s, other[0], 0, x, BS), KVP_OK);
	reads_equal(s, rb, a);
	CHECK_EQ(kvp_free_all(p, 30), KVP_OK);
	CHECK_EQ(kvp_free_all(p, 31), KVP_OK);
	/* shrink: every free block retired, the held one kept */
	CHECK_EQ(kvp_shrink(p, KVP_KV, 0, &retired), KVP_OK);
	CHECK(retired > 0);
	reads_equal(s, rb, a);
	CHECK_EQ(kvp_free_all(p, 2), KVP_OK);
	kvp_storage_destroy(s);
	kvp_pool_destroy(p);
}

/* A block unpublished by a reset and then freed is an ordinary free
 * block: its next owner reads zeros. */
static void test_after_reset_and_free_next_owner_reads_zeros(void)
{
	kvp_pool *p = mkpool(1, false);
	kvp_storage *s;
	kvp_ref ra, rb, rn;
	float a[BS * ROW], zero[BS * ROW] = {0};
	size_t n, nm;
	kvp_hash k = key_of(5);

	CHECK_EQ(kvp_storage_create(p, ROW, NULL, &s), KVP_OK);
	rows_of(a, 1.0f);
	CHECK_EQ(kvp_allocate(p, KVP_KV, BS, 1, KVP_FP32, &ra, 1, &n), KVP_OK);
	CHECK_EQ(kvp_storage_write(s, ra, 0, a, BS), KVP_OK);
	CHECK_EQ(kvp_prefix_publish(p, ra, k), KVP_OK);
	CHECK_EQ(kvp_free_all(p, 1), KVP_OK);
	CHECK_EQ(kvp_prefix_match(p, KVP_KV, KVP_FP32, &k, 1, 2, &rb, 1, &nm), KVP_OK);
	CHECK_EQ(kvp_prefix_reset(p), 1);
	CHECK_EQ(kvp_free_all(p, 2), KVP_OK);
	CHECK_EQ(kvp_allocate(p, KVP_KV, BS, 3, KVP_FP32, &rn, 1, &n), KVP_OK);
	CHECK_EQ(KVP_REF_ID(rn), KVP_REF_ID(ra));
	reads_equal(s, rn, zero);
	CHECK_EQ(kvp_free_all(p, 3), KVP_OK);
	kvp_storage_destroy(s);
	kvp_pool_destroy(p);
}

int main(void)
{
	RUN(test_publish_unwritten_reads_zeros);
	RUN(test_publish_partly_written);
	RUN(test_two_holders_after_reset_take_no_writes);
	RUN(test_holder_rows_survive_reset_evict_shrink_grow);
	RUN(test_after_reset_and_free_next_owner_reads_zeros);
	return 0;
}
