/*
 * tests/kvcache_reserve_test.c - kvp_kvcache_reserve: after it, appends up
 * to the reserved tokens never grow a block table.
 *
 * kvpool/kvcache.h promises: "Afterwards appends up to @n_tokens per layer
 * never grow a table.  Returns KVP_OK, KVP_EINVAL (NULL @c) or KVP_ENOMEM
 * (nothing changed)."  The test sees table growth through the system-call
 * door (lib/testing/fault.h): with every system allocation failing, an
 * append that must grow its table returns KVP_ENOMEM, and one that need not
 * allocates nothing at all.
 *
 * So that a table is the only thing an append could allocate, the pool and
 * the storages are warmed first: a first kvcache writes every block of the
 * pool once (storage buffers stay with the block ids), and the pool keeps
 * no per-thread cache (no magazine to grow).
 */
#include <kvpool/kvpool.h>

#include <string.h>

#include "lib/testing/fault.h"
#include "tests/testutil.h"

#define LAYERS 2
#define KVH    1
#define HD     4
#define BS     4
/* Past the tables' initial KVP_KVCACHE_INITIAL_BLOCKS, so appending them grows a table. */
#define NB   (KVP_KVCACHE_INITIAL_BLOCKS + 16)
#define NTOK (NB * BS)

struct env {
	kvp_pool *pool;
	kvp_storage *ks, *vs;
};

static float rows[NTOK * KVH * HD];

static kvp_kvcache *mkcache(struct env *e, kvp_owner owner)
{
	kvp_kvcache_config cfg = {LAYERS, KVH, HD, KVP_FP32, owner};
	kvp_kvcache *c;

	CHECK_EQ(kvp_kvcache_create(e->pool, e->ks, e->vs, &cfg, &c), KVP_OK);
	return c;
}

/* A pool of exactly the blocks one full kvcache needs, every one written once. */
static struct env env_warm(void)
{
	kvp_pool_config pc;
	struct env e;

	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
		rows[i] = (float)i;
	kvp_pool_config_init(&pc);
	pc.block_size = BS;
	pc.n_blocks = 2 * LAYERS * NB; /* K and V */
	pc.thread_cache = 0;
	CHECK_EQ(kvp_pool_create(&pc, &e.pool), KVP_OK);
	CHECK_EQ(kvp_storage_create(e.pool, KVH * HD, NULL, &e.ks), KVP_OK);
	CHECK_EQ(kvp_storage_create(e.pool, KVH * HD, NULL, &e.vs), KVP_OK);

	kvp_kvcache *w = mkcache(&e, 1);
	for (uint32_t l = 0; l < LAYERS; l++)
		CHECK_EQ(kvp_kvcache_append(w, l, rows, rows, NTOK), KVP_OK);
	CHECK_EQ(kvp_n_free(e.pool, KVP_K), 0);
	CHECK_EQ(kvp_n_free(e.pool, KVP_V), 0);
	kvp_kvcache_destroy(w);
	return e;
}

static void env_free(struct env *e)
{
	kvp_storage_destroy(e->ks);
	kvp_storage_destroy(e->vs);
	kvp_pool_destroy(e->pool);
}

/* Append @n tokens to every layer one at a time; returns the first status not KVP_OK. */
static int append_each(kvp_kvcache *c, uint32_t n)
{
	for (uint32_t t = 0; t < n; t++)
		for (uint32_t l = 0; l < LAYERS; l++) {
			uint32_t at = kvp_kvcache_len(c, l) * KVH * HD;
			int rc = kvp_kvcache_append(c, l, rows + at, rows + at, 1);
			if (rc != KVP_OK)
				return rc;
		}
	return KVP_OK;
}

/* Every layer holds rows[0 .. @n tokens) in K and V. */
static void check_rows(kvp_kvcache *c, uint32_t n)
{
	static float k[NTOK * KVH * HD], v[NTOK * KVH * HD];

	for (uint32_t l = 0; l < LAYERS; l++) {
		CHECK_EQ(kvp_kvcache_len(c, l), n);
		CHECK_EQ(kvp_kvcache_gather(c, l, k, v), KVP_OK);
		CHECK(memcmp(k, rows, (size_t)n * KVH * HD * sizeof(float)) == 0);
		CHECK(memcmp(v, rows, (size_t)n * KVH * HD * sizeof(float)) == 0);
	}
}

static void test_reserve_null_is_einval(void)
{
	CHECK_EQ(kvp_kvcache_reserve(NULL, 0), KVP_EINVAL);
	CHECK_EQ(kvp_kvcache_reserve(NULL, NTOK), KVP_EINVAL);
}

/* The control: without reserve, the same appends need a bigger table, and
 * with every allocation failing they stop at the initial table's end. */
static void test_unreserved_append_grows_the_table(void)
{
	struct env e = env_warm();
	kvp_kvcache *c = mkcache(&e, 2);
	unsigned long injected = kvpi_fault_injected();

	kvpi_fault_inject(0, -1);
	int rc = append_each(c, NTOK);
	kvpi_fault_inject(0, 0);
	CHECK_EQ(rc, KVP_ENOMEM);
	CHECK(kvpi_fault_injected() > injected);
	/* the first layer stopped at the initial table's end, and nothing was lost */
	CHECK_EQ(kvp_kvcache_len(c, 0), KVP_KVCACHE_INITIAL_BLOCKS * BS);
	CHECK_EQ(kvp_kvcache_len(c, 1), KVP_KVCACHE_INITIAL_BLOCKS * BS);
	check_rows(c, KVP_KVCACHE_INITIAL_BLOCKS * BS);
	kvp_kvcache_destroy(c);
	env_free(&e);
}

/* The promise: after reserve, appends up to the reserved tokens per layer
 * make no system allocation, so they succeed while every allocation fails. */
static void test_reserved_appends_allocate_nothing(void)
{
	struct env e = env_warm();
	kvp_kvcache *c = mkcache(&e, 2);

	CHECK_EQ(kvp_kvcache_reserve(c, NTOK), KVP_OK);
	unsigned long injected = kvpi_fault_injected();
	kvpi_fault_inject(0, -1);
	int rc = append_each(c, NTOK);
	unsigned long failed = kvpi_fault_injected() - injected;
	kvpi_fault_inject(0, 0);
	CHECK_EQ(rc, KVP_OK);
	CHECK_EQ(failed, 0); /* not one allocation was even tried */
	CHECK_EQ(kvp_kvcache_blocks_held(c), 2 * LAYERS * NB);
	check_rows(c, NTOK);
	kvp_kvcache_destroy(c);
	env_free(&e);
}

/* KVP_ENOMEM from reserve changes nothing: same tokens, blocks and rows,
 * and the kvcache works on once memory is back. */
static void test_reserve_enomem_changes_nothing(void)
{
	struct env e = env_warm();
	kvp_kvcache *c = mkcache(&e, 2);

	CHECK_EQ(append_each(c, 10), KVP_OK);
	size_t held = kvp_kvcache_blocks_held(c);
	kvpi_fault_inject(0, -1);
	int rc = kvp_kvcache_reserve(c, NTOK);
	kvpi_fault_inject(0, 0);
	CHECK_EQ(rc, KVP_ENOMEM);
	CHECK_EQ(kvp_kvcache_blocks_held(c), held);
	check_rows(c, 10);
	CHECK_EQ(kvp_kvcache_reserve(c, NTOK), KVP_OK);
	CHECK_EQ(append_each(c, NTOK - 10), KVP_OK);
	check_rows(c, NTOK);
	kvp_kvcache_destroy(c);
	env_free(&e);
}

int main(void)
{
	RUN(test_reserve_null_is_einval);
	RUN(test_unreserved_append_grows_the_table);
	RUN(test_reserved_appends_allocate_nothing);
	RUN(test_reserve_enomem_changes_nothing);
	return 0;
}
