/*
 * tests/pool_owner_ids_test.c - an owner's blocks kept in allocation order
 * through frees in any order, the holes they leave, and the compaction
 * that squeezes them out; id arrays passed from dropped owners to new ones
 * without asking the system for memory.  Plain and prefix pools, checked
 * against a model after every step.
 */
#include <kvpool/kvpool.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "lib/testing/fault.h"
#include "tests/testutil.h"

#define BS 16u
#define N  4096u

/* A pool of @n blocks of one stream; @grow: grow_on_exhaustion. */
static kvp_pool *mkpool_n(bool prefix, uint32_t tc, uint32_t n, bool grow)
{
	kvp_pool_config c;
	kvp_pool *p = NULL;
	kvp_pool_config_init(&c);
	c.block_size = BS;
	c.n_blocks = n;
	c.thread_cache = tc;
	c.prefix_cache = prefix;
	c.separate_kv = false;
	c.grow_on_exhaustion = grow;
	CHECK_EQ(kvp_pool_create(&c, &p), KVP_OK);
	return p;
}

static kvp_pool *mkpool(bool prefix, uint32_t tc)
{
	return mkpool_n(prefix, tc, N, false);
}

/* The model: the refs the owner holds, in allocation order. */
struct model {
	kvp_ref r[N];
	size_t n;
};

static void check_model(kvp_pool *p, kvp_owner o, const struct model *m)
{
	static kvp_ref got[N];
	size_t n = 0;
	int rc = kvp_blocks_for(p, o, got, N, &n);
	if (m->n == 0) {
		/* An unregistered owner with no blocks has no record. */
		CHECK_EQ(rc, KVP_ENOENT);
		return;
	}
	CHECK_EQ(rc, KVP_OK);
	CHECK_EQ(n, m->n);
	CHECK(memcmp(got, m->r, n * sizeof(kvp_ref)) == 0);
}

static void model_add(struct model *m, const kvp_ref *r, size_t n)
{
	memcpy(m->r + m->n, r, n * sizeof(kvp_ref));
	m->n += n;
}

/* A model of owner @o's first @nb blocks, allocated in one call. */
static void model_start(kvp_pool *p, kvp_owner o, uint32_t nb, struct model *m)
{
	static kvp_ref r[N];
	size_t n;
	CHECK_EQ(kvp_allocate(p, KVP_KV, nb * BS, o, KVP_FP16, r, N, &n), KVP_OK);
	CHECK_EQ(n, nb);
	m->n = 0;
	model_add(m, r, n);
}

static void model_drop(struct model *m, size_t i)
{
	memmove(m->r + i, m->r + i + 1, (m->n - i - 1) * sizeof(kvp_ref));
	m->n--;
}

/* Many rounds of: allocate a few blocks (one call, or one at a time), free
 * a random live block, or free the newest; the order kvp_blocks_for gives
 * must stay the model's through every compaction. */
static void random_frees_keep_order(bool prefix, uint32_t tc, unsigned seed)
{
	kvp_pool *p = mkpool(prefix, tc);
	static struct model m;
	m.n = 0;
	kvp_owner o = 77;
	srand(seed);
	kvp_ref r[64];
	size_t n;
	for (int step = 0; step < 6000; step++) {
		int op = rand() % 8;
		if (op < 3 && m.n + 64 < N / 2) {
			uint32_t k = 1 + (uint32_t)rand() % 40;
			CHECK_EQ(kvp_allocate(p, KVP_KV, k * BS, o, KVP_FP16, r, 64, &n), KVP_OK);
			CHECK_EQ(n, k);
			model_add(&m, r, n);
		} else if (op == 3 && m.n) {
			CHECK_EQ(kvp_free(p, &m.r[m.n - 1], 1), KVP_OK);
			model_drop(&m, m.n - 1);
		} else if (m.n) {
			size_t i = (size_t)rand() % m.n;
			CHECK_EQ(kvp_free(p, &m.r[i], 1), KVP_OK);
			model_drop(&m, i);
		}
		check_model(p, o, &m);
	}
	if (m.n)
		CHECK_EQ(kvp_free_all(p, o), KVP_OK);
	kvp_stats s;
	CHECK_EQ(kvp_pool_stats(p, &s), KVP_OK);
	CHECK_EQ(kvp_stats_blocks_in_use(&s), 0);
	CHECK_EQ(kvp_n_free(p, KVP_KV), N);
	kvp_pool_destroy(p);
}

static void test_random_frees_keep_order(void)
{
	for (unsigned seed = 1; seed <= 3; seed++) {
		random_frees_keep_order(false, KVP_DEFAULT_THREAD_CACHE, seed);
		random_frees_keep_order(false, 0, seed);
		random_frees_keep_order(true, KVP_DEFAULT_THREAD_CACHE, seed);
	}
}

/* Freeing every other block, then allocating: the holes are squeezed out
 * (they outnumber live blocks once the oldest half goes), and the blocks
 * left can still be freed one by one (each knows its new place). */
static void test_compaction_moves_positions(bool prefix)
{
	kvp_pool *p = mkpool(prefix, KVP_DEFAULT_THREAD_CACHE);
	static struct model m;
	m.n = 0;
	kvp_owner o = 5;
	static kvp_ref r[1024];
	size_t n;
	CHECK_EQ(kvp_allocate(p, KVP_KV, 1024 * BS, o, KVP_FP16, r, 1024, &n), KVP_OK);
	model_add(&m, r, n);
	for (size_t i = 0; i < 1024; i += 2)
		CHECK_EQ(kvp_free(p, &r[i], 1), KVP_OK);
	for (size_t i = 0; i < 512; i++)
		m.r[i] = r[2 * i + 1];
	m.n = 512;
	for (size_t i = 1; i < 256; i += 2) /* more holes than live blocks */
		CHECK_EQ(kvp_free(p, &r[2 * i + 1], 1), KVP_OK);
	m.n = 0;
	for (size_t i = 0; i < 512; i++)
		if (!(i >= 1 && i < 256 && i % 2 == 1))
			m.r[m.n++] = r[2 * i + 1];
	check_model(p, o, &m);
	/* Enough more blocks to need room: the array compacts. */
	CHECK_EQ(kvp_allocate(p, KVP_KV, 600 * BS, o, KVP_FP16, r, 1024, &n), KVP_OK);
	model_add(&m, r, n);
	check_model(p, o, &m);
	/* Oldest first, one at a time: each free finds its block's place. */
	while (m.n) {
		CHECK_EQ(kvp_free(p, &m.r[0], 1), KVP_OK);
		model_drop(&m, 0);
		check_model(p, o, &m);
	}
	CHECK_EQ(kvp_n_free(p, KVP_KV), N);
	kvp_pool_destroy(p);
}

static void test_compaction_plain(void)
{
	test_compaction_moves_positions(false);
}

static void test_compaction_prefix(void)
{
	test_compaction_moves_positions(true);
}

/* A dropped owner's id array serves the next owner's request: a warm pool
 * hands 3000 blocks to a new owner with every system allocation failing. */
static void array_reused(bool prefix)
{
	kvp_pool *p = mkpool(prefix, KVP_DEFAULT_THREAD_CACHE);
	static kvp_ref r[3000];
	size_t n;
	CHECK_EQ(kvp_allocate(p, KVP_KV, 3000 * BS, 1, KVP_FP16, r, 3000, &n), KVP_OK);
	CHECK_EQ(kvp_free_all(p, 1), KVP_OK);
	unsigned long before = kvpi_fault_injected();
	kvpi_fault_inject(0, -1);
	CHECK_EQ(kvp_allocate(p, KVP_KV, 3000 * BS, 2, KVP_FP16, r, 3000, &n), KVP_OK);
	CHECK_EQ(kvp_free_all(p, 2), KVP_OK);
	kvpi_fault_inject(0, 0);
	CHECK_EQ(kvpi_fault_injected(), before);
	CHECK_EQ(kvp_n_free(p, KVP_KV), N);
	kvp_pool_destroy(p);
}

static void test_array_reused_plain(void)
{
	array_reused(false);
}

static void test_array_reused_prefix(void)
{
	array_reused(true);
}

/* Growing past every stashed array with the system refusing: KVP_ENOMEM,
 * nothing handed out, the owner's earlier blocks untouched. */
static void test_grow_fails_cleanly(void)
{
	for (int prefix = 0; prefix < 2; prefix++) {
		kvp_pool *p = mkpool(prefix, KVP_DEFAULT_THREAD_CACHE);
		static struct model m;
		static kvp_ref r[2048];
		size_t n;
		model_start(p, 9, 10, &m);
		kvpi_fault_inject(0, -1);
		CHECK_EQ(kvp_allocate(p, KVP_KV, 2000 * BS, 9, KVP_FP16, r, 2048, &n), KVP_ENOMEM);
		CHECK_EQ(n, 0);
		kvpi_fault_inject(0, 0);
		check_model(p, 9, &m);
		CHECK_EQ(kvp_n_free(p, KVP_KV), N - 10);
		CHECK_EQ(kvp_allocate(p, KVP_KV, 2000 * BS, 9, KVP_FP16, r, 2048, &n), KVP_OK);
		model_add(&m, r, n);
		check_model(p, 9, &m);
		CHECK_EQ(kvp_free_all(p, 9), KVP_OK);
		CHECK_EQ(kvp_n_free(p, KVP_KV), N);
		kvp_pool_destroy(p);
	}
}

/*
 * A failed allocate leaves the pool as it was, growth included.  An owner
 * whose array is full (64 ids) asks for 100 more blocks of a full pool that
 * may grow, with the system refusing from the k-th allocation on: the room
 * in the array is made before the pool grows, so for every k the call
 * either succeeds or fails with the pool not grown and the owner's blocks
 * unchanged.  The same for a new owner, whose record has room for 64.
 */
static void test_failed_allocate_does_not_grow(void)
{
	int failures = 0;
	for (long k = 0; k < 12; k++) {
		for (int fresh = 0; fresh < 2; fresh++) {
			kvp_pool *p = mkpool_n(false, KVP_DEFAULT_THREAD_CACHE, 64, true);
			static struct model m;
			static kvp_ref r[128];
			size_t n;
			model_start(p, 9, 64, &m);
			kvp_owner o = fresh ? 10 : 9;
			kvpi_fault_inject(k, -1);
			int rc = kvp_allocate(p, KVP_KV, 100 * BS, o, KVP_FP16, r, 128, &n);
			kvpi_fault_inject(0, 0);
			kvp_stats st;
			CHECK_EQ(kvp_pool_stats(p, &st), KVP_OK);
			if (rc == KVP_OK) {
				CHECK_EQ(st.n_blocks, 164);
				CHECK_EQ(kvp_free_all(p, o), KVP_OK);
				if (!fresh)
					m.n = 0;
			} else {
				CHECK_EQ(rc, KVP_ENOMEM);
				CHECK_EQ(n, 0);
				CHECK_EQ(st.n_blocks, 64); /* not grown */
				CHECK_EQ(kvp_stats_blocks_in_use(&st), 64);
				failures++;
			}
			if (m.n) {
				check_model(p, 9, &m);
				CHECK_EQ(kvp_free_all(p, 9), KVP_OK);
			}
			if (fresh) {
				size_t nb = 0;
				CHECK_EQ(kvp_blocks_for(p, 10, r, 128, &nb), KVP_ENOENT);
			}
			kvp_pool_destroy(p);
		}
	}
	CHECK(failures > 0); /* some k made the call fail */
}

/*
 * Requests allocated by one thread and ended by another: the arrays the
 * ender's stash collects reach the allocator through the pool's shared
 * stash, so once warm neither thread asks the system for anything.
 */
struct handoff {
	kvp_pool *p;
	pthread_barrier_t go, done;
	kvp_owner owner;
	int stop;
};

static void *ender(void *arg)
{
	struct handoff *h = arg;
	for (;;) {
		pthread_barrier_wait(&h->go);
		if (h->stop)
			return NULL;
		CHECK_EQ(kvp_free_all(h->p, h->owner), KVP_OK);
		pthread_barrier_wait(&h->done);
	}
}

static void serve_handed_off(struct handoff *h, kvp_owner first, int n)
{
	static kvp_ref r[512];
	size_t got;
	for (int i = 0; i < n; i++) {
		h->owner = first + (kvp_owner)i;
		uint32_t nb = 65 + (uint32_t)(i * 37) % 400; /* past the attached 64 */
		CHECK_EQ(kvp_allocate(h->p, KVP_KV, nb * BS, h->owner, KVP_FP16, r, 512, &got),
		         KVP_OK);
		pthread_barrier_wait(&h->go);
		pthread_barrier_wait(&h->done);
	}
}

static void test_arrays_cross_threads(void)
{
	struct handoff h;
	memset(&h, 0, sizeof(h));
	h.p = mkpool(false, KVP_DEFAULT_THREAD_CACHE);
	pthread_barrier_init(&h.go, NULL, 2);
	pthread_barrier_init(&h.done, NULL, 2);
	pthread_t t;
	CHECK_EQ(pthread_create(&t, NULL, ender, &h), 0);
	serve_handed_off(&h, 1, 1500); /* warm */
	unsigned long before = kvpi_fault_injected();
	kvpi_fault_inject(0, -1);
	serve_handed_off(&h, 100000, 500);
	kvpi_fault_inject(0, 0);
	CHECK_EQ(kvpi_fault_injected(), before);
	h.stop = 1;
	pthread_barrier_wait(&h.go);
	CHECK_EQ(pthread_join(t, NULL), 0);
	pthread_barrier_destroy(&h.go);
	pthread_barrier_destroy(&h.done);
	CHECK_EQ(kvp_n_free(h.p, KVP_KV), N);
	kvp_pool_destroy(h.p);
}

int main(void)
{
	RUN(test_random_frees_keep_order);
	RUN(test_compaction_plain);
	RUN(test_compaction_prefix);
	RUN(test_array_reused_plain);
	RUN(test_array_reused_prefix);
	RUN(test_grow_fails_cleanly);
	RUN(test_failed_allocate_does_not_grow);
	RUN(test_arrays_cross_threads);
	return 0;
}
