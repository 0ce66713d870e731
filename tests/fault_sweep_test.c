/*
 * tests/fault_sweep_test.c - "fail the Nth system call" over a serving loop.
 *
 * One pass of serve() makes a growing pool, a buffer cache, two storages
 * (one over the cache) and two kvcaches, and runs a few requests: allocate,
 * storage writes and reads, kvcache appends, attends, gathers and trims,
 * grow past the initial blocks, shrink, release and destroy - every call
 * that can reach the system allocator (kvpi_sys_alloc), a thread-local key
 * (kvpi_sys_key_create) or a thread (kvpi_sys_thread_create).  The sweep runs
 * it with the Nth such call failing, for every N until a pass sees no
 * failure, then with every call from the Nth on failing.  Checked in each
 * pass: every call returns a documented status (an injected failure may
 * only turn into KVP_ENOMEM, or into KVP_EEXHAUSTED where a grow failed),
 * nothing crashes, the pool's books balance after the pass (blocks in use
 * + free + retired = created; allocations - frees = in use; everything free
 * once the requests are gone), and nothing leaks (LSan in the asan config,
 * with every object destroyed at the end of the pass).  test_key_create_failure
 * covers the storage's thread-local key, made once per process.
 */
#include <kvpool/kvpool.h>

#include <string.h>

#include "lib/testing/fault.h"
#include "tests/testutil.h"

enum { BS = 4, H = 2, D = 4, DIM = H * D };

static int ok_or(int rc, int also)
{
	return rc == KVP_OK || rc == KVP_ENOMEM || rc == also;
}

#define EXPECT(rc, also)                                                                           \
	do {                                                                                       \
		int rc_ = (rc);                                                                    \
		if (!ok_or(rc_, (also))) {                                                         \
			fprintf(stderr, "%s:%d: %s returned %d\n", __FILE__, __LINE__, #rc, rc_);  \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

static void books_balance(kvp_pool *p)
{
	kvp_stats s;

	CHECK_EQ(kvp_pool_stats(p, &s), KVP_OK);
	CHECK_EQ(kvp_stats_blocks_in_use(&s), s.n_allocations - s.n_frees);
	CHECK_EQ(kvp_n_free(p, KVP_K) + kvp_n_free(p, KVP_V) + kvp_stats_blocks_in_use(&s),
	         s.n_blocks);
	CHECK(s.n_blocks <= 64);
}

/* One serving pass; returns with every object destroyed. */
static void serve(void)
{
	kvp_pool_config pc;
	kvp_pool *p = NULL;
	kvp_bufcache *bc = NULL;
	kvp_storage *ks = NULL, *vs = NULL;
	kvp_kvcache *c[2] = {NULL, NULL};
	float rows[8 * DIM], q[H * D], out[H * D], gk[64 * DIM], gv[64 * DIM];
	kvp_ref refs[32];
	size_t n;
	uint32_t nr;

	for (int i = 0; i < 8 * DIM; i++)
		rows[i] = (float)(i % 11) * 0.5f - 2.0f;
	for (int i = 0; i < H * D; i++)
		q[i] = 0.25f;
	kvp_pool_config_init(&pc);
	pc.block_size = BS;
	pc.n_blocks = 16;
	pc.grow_on_exhaustion = true;
	pc.max_blocks = 64;
	pc.thread_cache = 4;
	if (kvp_pool_create(&pc, &p) != KVP_OK) {
		CHECK(p == NULL);
		return;
	}
	EXPECT(kvp_bufcache_create(1 << 20, &bc), KVP_ENOMEM);
	if (kvp_storage_create(p, DIM, bc, &ks) != KVP_OK)
		ks = NULL;
	if (kvp_storage_create(p, DIM, NULL, &vs) != KVP_OK)
		vs = NULL;

	/* raw pool traffic with growth: 20 blocks of K from an 8-block stream */
	{
		int rc = kvp_allocate(p, KVP_K, 20 * BS, 100, KVP_FP16, refs, 32, &n);
		EXPECT(rc, KVP_EEXHAUSTED);
		if (rc == KVP_OK) {
			CHECK_EQ(n, 20);
			if (ks) {
				EXPECT(kvp_storage_write(ks, refs[0], 0, rows, 2), 0);
				EXPECT(kvp_storage_write(ks, refs[1], 2, rows, 2), 0);
				int r2 = kvp_storage_read_f32(ks, refs[1], gk, BS, &nr);
				EXPECT(r2, 0);
				EXPECT(kvp_block_set_used(p, refs[2], BS), 0);
				const void *data;
				EXPECT(kvp_storage_read(ks, refs[2], &data, &nr), 0);
			}
			EXPECT(kvp_free(p, refs, 10), 0);
			if (ks)
				EXPECT(kvp_storage_release(ks, refs[0]), 0);
		}
		EXPECT(kvp_free_all(p, 100), KVP_ENOENT);
	}
	/* two requests through kvcaches */
	if (ks && vs) {
		for (int i = 0; i < 2; i++) {
			kvp_kvcache_config kc = {.n_layers = 2,
			                         .n_kv_heads = H,
			                         .head_dim = D,
			                         .format = i ? KVP_INT8 : KVP_FP32,
			                         .owner = 7 + i};
			if (kvp_kvcache_create(p, i ? vs : ks, vs, &kc, &c[i]) != KVP_OK)
				c[i] = NULL;
		}
		for (int step = 0; step < 6; step++)
			for (int i = 0; i < 2; i++) {
				if (!c[i])
					continue;
				int rc = kvp_kvcache_append(c[i], step % 2, rows, rows, 1 + step);
				EXPECT(rc, KVP_EEXHAUSTED);
				if (kvp_kvcache_len(c[i], 0)) {
					CHECK_EQ(kvp_kvcache_attend(c[i], 0, q, H, 0.5f, out),
					         KVP_OK);
					CHECK_EQ(kvp_kvcache_gather(c[i], 0, gk, gv), KVP_OK);
				}
			}
		for (int i = 0; i < 2; i++)
			if (c[i]) {
				EXPECT(kvp_kvcache_trim(c[i], 5), 0);
				EXPECT(kvp_kvcache_reserve(c[i], 200), 0);
			}
		if (c[0])
			kvp_kvcache_release(c[0]);
	}
	books_balance(p);
	/* shrink (retire hooks free storage buffers), then grow again */
	EXPECT(kvp_shrink(p, KVP_K, 1, NULL), 0);
	EXPECT(kvp_shrink(p, KVP_V, 0, NULL), 0);
	{
		int rc = kvp_allocate(p, KVP_V, 6 * BS, 200, KVP_FP32, refs, 32, &n);
		EXPECT(rc, KVP_EEXHAUSTED);
		if (rc == KVP_OK && vs)
			EXPECT(kvp_storage_write(vs, refs[5], 0, rows, 1), 0);
		EXPECT(kvp_free_all(p, 200), KVP_ENOENT);
	}
	books_balance(p);
	for (int i = 0; i < 2; i++)
		kvp_kvcache_destroy(c[i]);
	{
		kvp_stats s;
		CHECK_EQ(kvp_pool_stats(p, &s), KVP_OK);
		CHECK_EQ(kvp_stats_blocks_in_use(&s), 0); /* every request gone */
		CHECK_EQ(s.n_allocations, s.n_frees);
	}
	books_balance(p);
	kvp_storage_destroy(ks);
	kvp_storage_destroy(vs);
	kvp_bufcache_destroy(bc);
	kvp_pool_destroy(p);
}

/* Run serve() with the (skip+1)th call failing (or every call from it on);
 * returns the failures injected. */
static unsigned long pass(long skip, long fail)
{
	unsigned long before = kvpi_fault_injected();

	kvpi_fault_inject(skip, fail);
	serve();
	kvpi_fault_inject(0, 0);
	return kvpi_fault_injected() - before;
}

static void test_sweep(void)
{
	long n, single = 0, tail = 0;

	serve(); /* warm: per-process keys and records exist, as in a server */
	for (n = 0; n < 100000; n++, single++)
		if (pass(n, 1) == 0)
			break;
	CHECK(single > 20); /* the loop reached many system calls */
	for (n = 0; n < single; n++, tail++)
		pass(n, -1);
	printf("swept %ld points failing one call, %ld failing every call from the Nth on\n",
	       single, tail);
}

/* The first read in the process: the storage's thread-local key cannot be
 * made; the read says KVP_ENOMEM, and the next read makes the key and
 * works (a passing shortage does not disable reads for good).  Runs first,
 * before anything in this process made the key. */
static void test_key_create_failure(void)
{
	kvp_pool_config pc;
	kvp_pool *p;
	kvp_storage *s;
	kvp_ref r;
	size_t n;
	float row[DIM] = {1, 2, 3, 4, 5, 6, 7, 8}, back[BS * DIM];
	const void *data;
	uint32_t nr;
	unsigned long before;

	kvp_pool_config_init(&pc);
	pc.block_size = BS;
	pc.n_blocks = 4;
	CHECK_EQ(kvp_pool_create(&pc, &p), KVP_OK);
	CHECK_EQ(kvp_storage_create(p, DIM, NULL, &s), KVP_OK);
	CHECK_EQ(kvp_allocate(p, KVP_K, 1, 3, KVP_FP32, &r, 1, &n), KVP_OK);
	CHECK_EQ(kvp_storage_write(s, r, 0, row, 1), KVP_OK);
	before = kvpi_fault_injected();
	kvpi_fault_inject(0, 1);
	CHECK_EQ(kvp_storage_read(s, r, &data, &nr), KVP_ENOMEM);
	kvpi_fault_inject(0, 0);
	CHECK_EQ(kvpi_fault_injected() - before, 1);
	CHECK_EQ(kvp_storage_read_f32(s, r, back, BS, &nr), KVP_OK);
	CHECK_EQ(nr, 1);
	CHECK(memcmp(back, row, sizeof row) == 0);
	CHECK_EQ(kvp_free_all(p, 3), KVP_OK);
	kvp_storage_destroy(s);
	kvp_pool_destroy(p);
}

int main(void)
{
	RUN(test_key_create_failure);
	RUN(test_sweep);
	return 0;
}
