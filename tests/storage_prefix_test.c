/*
 * tests/storage_prefix_test.c - storage and the prefix cache.
 *
 * A published block's rows are fixed (kvp_storage_write is KVP_EINVAL and
 * changes nothing); a cached block keeps its buffer (kvp_storage_release
 * refuses it) and a match that revives it reads the published rows; when
 * allocation evicts it, the next write reuses the buffer in place (no new
 * buffer made); after a reset the unpublished block is an ordinary one.
 */
#include <kvpool/kvpool.h>

#include <string.h>

#include "tests/testutil.h"

#define BS  4
#define ROW 8

static void rows_of(float *r, float base)
{
	for (int i = 0; i < BS * ROW; i++)
		r[i] = base + (float)i;
}

static kvp_storage_stats sstats(kvp_storage *s)
{
	kvp_storage_stats st;

	CHECK_EQ(kvp_storage_get_stats(s, &st), KVP_OK);
	return st;
}

static void test_published_rows_are_fixed_and_kept(void)
{
	kvp_pool_config c;
	kvp_pool *p;
	kvp_storage *s;
	kvp_ref ref, again, all[4];
	kvp_hash key;
	float a[BS * ROW], b[BS * ROW], got[BS * ROW];
	uint32_t n;
	size_t nm, na;
	uint8_t tok = 1;

	kvp_pool_config_init(&c);
	c.block_size = BS;
	c.n_blocks = 4;
	c.separate_kv = false;
	c.prefix_cache = true;
	CHECK_EQ(kvp_pool_create(&c, &p), KVP_OK);
	CHECK_EQ(kvp_storage_create(p, ROW, NULL, &s), KVP_OK);
	CHECK_EQ(kvp_prefix_hash(NULL, 0, &tok, 1, &key), KVP_OK);
	rows_of(a, 1.0f);
	rows_of(b, 100.0f);

	CHECK_EQ(kvp_allocate(p, KVP_KV, BS, 1, KVP_FP32, &ref, 1, &na), KVP_OK);
	CHECK_EQ(kvp_storage_write(s, ref, 0, a, BS), KVP_OK);
	CHECK_EQ(kvp_prefix_publish(p, ref, key), KVP_OK);
	/* fixed: every write refused, rows unchanged */
	CHECK_EQ(kvp_storage_write(s, ref, 0, b, BS), KVP_EINVAL);
	CHECK_EQ(kvp_storage_write(s, ref, 3, b, 1), KVP_EINVAL);
	CHECK_EQ(kvp_storage_read_f32(s, ref, got, BS, &n), KVP_OK);
	CHECK_EQ(n, BS);
	CHECK(memcmp(got, a, sizeof a) == 0);

	/* cached: keeps its buffer, release refuses it */
	CHECK_EQ(kvp_free_all(p, 1), KVP_OK);
	CHECK_EQ(kvp_storage_release(s, ref), KVP_EINVAL);
	CHECK_EQ(sstats(s).n_buffers, 1);
	/* revived by a match: the published rows, shared, still fixed */
	CHECK_EQ(kvp_prefix_match(p, KVP_KV, KVP_FP32, &key, 1, 2, &again, 1, &nm), KVP_OK);
	CHECK_EQ(nm, 1);
	CHECK_EQ(KVP_REF_ID(again), KVP_REF_ID(ref));
	CHECK_EQ(kvp_storage_read_f32(s, again, got, BS, &n), KVP_OK);
	CHECK_EQ(n, BS);
	CHECK(memcmp(got, a, sizeof a) == 0);
	CHECK_EQ(kvp_storage_write(s, again, 0, b, BS), KVP_EINVAL);

	/* cached again, then evicted by an allocation of every block: the
	 * evicted block's next write reuses its buffer */
	CHECK_EQ(kvp_free_all(p, 2), KVP_OK);
	CHECK_EQ(kvp_allocate(p, KVP_KV, 4 * BS, 3, KVP_FP32, all, 4, &na), KVP_OK);
	{
		kvp_stats ps;
		CHECK_EQ(kvp_pool_stats(p, &ps), KVP_OK);
		CHECK_EQ(ps.n_evictions, 1);
	}
	uint64_t made = sstats(s).buffers_made;
	for (int i = 0; i < 4; i++) {
		if (KVP_REF_ID(all[i]) != KVP_REF_ID(ref))
			continue;
		CHECK_EQ(kvp_storage_write(s, all[i], 0, b, BS), KVP_OK); /* no longer published */
		CHECK_EQ(sstats(s).buffers_made, made);                   /* in place */
		CHECK_EQ(kvp_storage_read_f32(s, all[i], got, BS, &n), KVP_OK);
		CHECK(memcmp(got, b, sizeof b) == 0);
	}
	CHECK_EQ(kvp_free_all(p, 3), KVP_OK);
	kvp_storage_destroy(s);
	kvp_pool_destroy(p);
}

/* After kvp_prefix_reset a held block is unpublished: writable again. */
static void test_reset_unfixes(void)
{
	kvp_pool_config c;
	kvp_pool *p;
	kvp_storage *s;
	kvp_ref ref;
	kvp_hash key = {7, 7};
	float a[BS * ROW];
	size_t na;

	kvp_pool_config_init(&c);
	c.block_size = BS;
	c.n_blocks = 4;
	c.separate_kv = false;
	c.prefix_cache = true;
	CHECK_EQ(kvp_pool_create(&c, &p), KVP_OK);
	CHECK_EQ(kvp_storage_create(p, ROW, NULL, &s), KVP_OK);
	rows_of(a, 3.0f);
	CHECK_EQ(kvp_allocate(p, KVP_KV, BS, 1, KVP_FP32, &ref, 1, &na), KVP_OK);
	CHECK_EQ(kvp_prefix_publish(p, ref, key), KVP_OK);
	CHECK_EQ(kvp_storage_write(s, ref, 0, a, BS), KVP_EINVAL);
	CHECK_EQ(kvp_prefix_reset(p), 1);
	CHECK_EQ(kvp_storage_write(s, ref, 0, a, BS), KVP_OK);
	CHECK_EQ(kvp_free_all(p, 1), KVP_OK);
	CHECK_EQ(kvp_storage_release(s, ref), KVP_OK); /* an ordinary free block now */
	kvp_storage_destroy(s);
	kvp_pool_destroy(p);
}

int main(void)
{
	RUN(test_published_rows_are_fixed_and_kept);
	RUN(test_reset_unfixes);
	return 0;
}
