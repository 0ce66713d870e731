/*
 * tests/storage_shrink_test.c - kvp_shrink frees retired blocks' buffers
 * while other threads read, without a use-after-free (ASan) or a race (TSan).
 *
 * Readers hold blocks of their own and check them, and also read "victim"
 * blocks that the main thread writes, publishes, frees and retires in a
 * loop.  A victim read either fails with KVP_ENOENT (the ref went stale) or
 * succeeds with exactly the rows the main thread wrote under that ref:
 * read_f32 re-validates after its copy, so a success can never return rows
 * of a block that was freed meanwhile.  After each shrink the storage holds
 * exactly the readers' buffers.  The pool grows every round, reusing the
 * retired ids with new generations, so victim reads also meet refs whose id
 * now belongs to a later victim (KVP_ENOENT by generation).
 */
#include <kvpool/kvpool.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>

#include "tests/testutil.h"

enum {
	BS = 32,
	DIM = 256,
	READERS = 3,
	OWN = 4,      /* blocks each reader holds */
	VICTIMS = 16, /* blocks the main thread cycles per round */
	ROUNDS = 120,
};

static kvp_pool *pool;
static kvp_storage *store;
static _Atomic kvp_ref victims[VICTIMS];
static _Atomic int stop;
static _Atomic int readers_ready;
static _Atomic long victim_ok, victim_stale;

/* The value row @row, element @i of a block written under @ref holds. */
static float pattern(kvp_ref ref, uint32_t row, uint32_t i)
{
	return (float)((KVP_REF_GEN(ref) * 31u + KVP_REF_ID(ref) * 7u + row * 3u + i) % 65536u);
}

static void write_block(kvp_ref ref)
{
	static _Thread_local float rows[BS * DIM];
	uint32_t r, i;

	for (r = 0; r < BS; r++)
		for (i = 0; i < DIM; i++)
			rows[r * DIM + i] = pattern(ref, r, i);
	CHECK_EQ(kvp_storage_write(store, ref, 0, rows, BS), KVP_OK);
}

static void check_rows(kvp_ref ref, const float *rows, uint32_t n)
{
	uint32_t r;

	CHECK_EQ(n, BS);
	for (r = 0; r < n; r += 7)
		CHECK(rows[r * DIM + r] == pattern(ref, r, r) &&
		      rows[r * DIM + DIM - 1] == pattern(ref, r, DIM - 1));
}

static void *reader(void *arg)
{
	kvp_owner owner = 1000 + (kvp_owner)(uintptr_t)arg;
	static _Thread_local float rows[BS * DIM];
	kvp_ref own[OWN];
	size_t n;
	uint32_t got, i = 0;

	CHECK_EQ(kvp_allocate(pool, KVP_KV, OWN * BS, owner, KVP_FP32, own, OWN, &n), KVP_OK);
	for (n = 0; n < OWN; n++)
		write_block(own[n]);
	atomic_fetch_add(&readers_ready, 1);
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		kvp_ref v = atomic_load_explicit(&victims[i++ % VICTIMS], memory_order_acquire);
		int rc;
		CHECK_EQ(kvp_storage_read_f32(store, own[i % OWN], rows, BS, &got), KVP_OK);
		check_rows(own[i % OWN], rows, got);
		if (!v)
			continue;
		rc = kvp_storage_read_f32(store, v, rows, BS, &got);
		if (rc == KVP_OK) {
			check_rows(v, rows, got);
			atomic_fetch_add_explicit(&victim_ok, 1, memory_order_relaxed);
		} else {
			CHECK_EQ(rc, KVP_ENOENT);
			atomic_fetch_add_explicit(&victim_stale, 1, memory_order_relaxed);
		}
	}
	CHECK_EQ(kvp_free_all(pool, owner), KVP_OK);
	return NULL;
}

static void test_shrink_while_reading(void)
{
	kvp_pool_config cfg;
	pthread_t th[READERS];
	size_t one, n;
	kvp_storage_stats st;
	uint32_t retired, round, i;
	kvp_ref refs[VICTIMS];

	kvp_pool_config_init(&cfg);
	cfg.block_size = BS;
	cfg.n_blocks = READERS * OWN;
	cfg.separate_kv = false;
	cfg.grow_on_exhaustion = true;
	CHECK_EQ(kvp_pool_create(&cfg, &pool), KVP_OK);
	CHECK_EQ(kvp_storage_create(pool, DIM, NULL, &store), KVP_OK);
	for (i = 0; i < READERS; i++)
		CHECK_EQ(pthread_create(&th[i], NULL, reader, (void *)(uintptr_t)i), 0);
	while (atomic_load(&readers_ready) < READERS)
		sched_yield();
	one = kvp_storage_resident_bytes(store) / (READERS * OWN);
	CHECK_EQ(kvp_storage_resident_bytes(store), one * READERS * OWN);

	for (round = 0; round < ROUNDS; round++) {
		CHECK_EQ(kvp_allocate(pool, KVP_KV, VICTIMS * BS, 1, KVP_FP32, refs, VICTIMS, &n),
		         KVP_OK);
		for (i = 0; i < VICTIMS; i++) {
			write_block(refs[i]);
			/* release: the rows written above are visible to a reader that loads the
			 * ref */
			atomic_store_explicit(&victims[i], refs[i], memory_order_release);
		}
		CHECK_EQ(kvp_storage_resident_bytes(store), one * (READERS * OWN + VICTIMS));
		sched_yield();
		CHECK_EQ(kvp_free(pool, refs, VICTIMS), KVP_OK);
		CHECK_EQ(kvp_shrink(pool, KVP_KV, 0, &retired), KVP_OK);
		CHECK(retired >= VICTIMS);
		/* every victim buffer is gone; the readers' remain */
		CHECK_EQ(kvp_storage_get_stats(store, &st), KVP_OK);
		CHECK_EQ(st.n_buffers, READERS * OWN);
		CHECK_EQ(st.resident_bytes, one * READERS * OWN);
		for (i = 0; i < VICTIMS; i++)
			CHECK_EQ(kvp_storage_write(store, refs[i], 0, (float[DIM]){0}, 1),
			         KVP_ENOENT);
	}
	atomic_store(&stop, 1);
	for (i = 0; i < READERS; i++)
		CHECK_EQ(pthread_join(th[i], NULL), 0);
	/* growth reuses retired ids (new generation): the id space stays bounded */
	CHECK(kvp_pool_n_ids(pool) <= READERS * OWN + 2 * VICTIMS);
	CHECK_EQ(kvp_storage_get_stats(store, &st), KVP_OK);
	CHECK_EQ(st.buffers_dropped, (uint64_t)ROUNDS * VICTIMS);
	printf("victim reads: %ld ok, %ld stale\n", atomic_load(&victim_ok),
	       atomic_load(&victim_stale));
	kvp_storage_destroy(store);
	kvp_pool_destroy(pool);
}

int main(void)
{
	RUN(test_shrink_while_reading);
	return 0;
}
