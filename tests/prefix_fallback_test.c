/*
 * tests/prefix_fallback_test.c - the prefix cache with every thread on the
 * pool's shared fallback slot.
 *
 * A thread that cannot get a slot of its own uses the pool's fallback slot
 * under its mutex (lib/pool/tslot.c); the prefix cache keeps per-slot state
 * there too: the home shard.  Here
 * the thread-local key cannot be made (an injected fault on the first
 * kvpi_sys_key_create), so every thread of the process uses the fallback
 * slot, and 4 threads match, allocate, publish, hold and let go on a
 * 16-block pool under constant eviction, with a content ledger as in
 * tests/prefix_race_test.c: a match that gets a block of other contents, or
 * a held block whose contents change, is a violation, and TSan sees the
 * ledger's plain accesses.  Retired index tables come back from liburcu's
 * callback thread while the threads rebuild.  At the end every block is
 * free again and the counts add up.
 *
 * A process-wide fault (the key is made once per process): a program of
 * its own.  KVP_RACE_SEED picks the random seed.
 */
#include <kvpool/kvpool.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "lib/testing/fault.h"
#include "tests/prefix_testutil.h"

#define BS       4u
#define NBLOCKS  16u
#define NTHREADS 4
#define NSEQ     16
#define SEQLEN   4
#define ITERS    3000

static kvp_pool *pool;
static uint64_t content[NBLOCKS];
static _Atomic uint64_t violations;
static uint64_t seed0;

static kvp_hash key_of(int seq, int j)
{
	return tpx_key(0, (uint32_t)seq, (uint32_t)j);
}

static uint64_t tag_of(kvp_hash k)
{
	return tpx_tag(k);
}

static void violation(const char *what, uint32_t id)
{
	tpx_violation(&violations, what, id);
}

struct worker {
	int idx;
	uint64_t rng, matched;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	kvp_ref refs[SEQLEN];
	uint64_t want[SEQLEN];
	kvp_hash keys[SEQLEN];
	for (int it = 0; it < ITERS; it++) {
		kvp_owner owner = ((uint64_t)(w->idx + 1) << 32) | (uint64_t)it;
		int seq = (int)(tu_rand(&w->rng) % NSEQ);
		int len = 1 + (int)(tu_rand(&w->rng) % SEQLEN);
		for (int j = 0; j < len; j++) {
			keys[j] = key_of(seq, j);
			want[j] = tag_of(keys[j]);
		}
		size_t m, n;
		CHECK_EQ(kvp_prefix_match(pool, KVP_KV, KVP_FP16, keys, (size_t)len, owner, refs,
		                          SEQLEN, &m),
		         KVP_OK);
		w->matched += m;
		for (size_t i = 0; i < m; i++)
			if (content[KVP_REF_ID(refs[i])] != want[i])
				violation("matched block has other contents", KVP_REF_ID(refs[i]));
		if ((size_t)len > m) {
			/* At most 4 threads x 4 blocks held: 16 blocks always cover it. */
			CHECK_EQ(kvp_allocate(pool, KVP_KV, (uint32_t)((size_t)len - m) * BS, owner,
			                      KVP_FP16, refs + m, SEQLEN - m, &n),
			         KVP_OK);
			for (size_t i = m; i < (size_t)len; i++) {
				content[KVP_REF_ID(refs[i])] = want[i];
				int rc = kvp_prefix_publish(pool, refs[i], keys[i]);
				if (rc != KVP_OK && rc != KVP_EEXIST)
					violation("publish failed", KVP_REF_ID(refs[i]));
			}
		}
		if (tu_rand(&w->rng) % 4 == 0)
			sched_yield();
		for (int i = 0; i < len; i++)
			if (content[KVP_REF_ID(refs[i])] != want[i])
				violation("content of a held block changed", KVP_REF_ID(refs[i]));
		CHECK_EQ(kvp_free_all(pool, owner), KVP_OK);
		if (tu_rand(&w->rng) % 500 == 0)
			kvp_prefix_reset(pool);
	}
	return NULL;
}

static void test_all_on_fallback(void)
{
	pool = tpx_pool(BS, NBLOCKS);
	/* The next call through the fault door is the first thread slot's
	 * key creation: it fails, and no thread of the process gets a slot. */
	unsigned long base = kvpi_fault_injected();
	kvpi_fault_inject(0, 1);
	CHECK_EQ(kvp_prefix_reset(pool), 0);
	kvpi_fault_inject(0, 0);
	CHECK_EQ(kvpi_fault_injected(), base + 1);
	struct worker w[NTHREADS];
	pthread_t th[NTHREADS];
	for (int i = 0; i < NTHREADS; i++) {
		w[i] = (struct worker){.idx = i, .rng = seed0 + 104729u * (uint64_t)i};
		CHECK_EQ(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
	}
	uint64_t matched = 0;
	for (int i = 0; i < NTHREADS; i++) {
		CHECK_EQ(pthread_join(th[i], NULL), 0);
		matched += w[i].matched;
	}
	CHECK_EQ(atomic_load(&violations), 0);
	kvp_stats s;
	CHECK_EQ(kvp_pool_stats(pool, &s), KVP_OK);
	printf("%d threads x %d requests on the fallback slot: %llu hits, %llu evictions\n",
	       NTHREADS, ITERS, (unsigned long long)s.n_prefix_hits,
	       (unsigned long long)s.n_evictions);
	CHECK_EQ(s.n_prefix_hits, matched);
	CHECK(s.n_evictions > 1000); /* keys deleted and published again many times */
	CHECK(matched > 0);
	CHECK_EQ(kvp_stats_blocks_in_use(&s), 0);
	CHECK_EQ(s.n_allocations, s.n_frees);
	CHECK_EQ(kvp_n_free(pool, KVP_KV), NBLOCKS);
	kvp_prefix_reset(pool);
	CHECK_EQ(kvp_pool_stats(pool, &s), KVP_OK);
	CHECK_EQ(s.n_cached, 0);
	kvp_pool_destroy(pool);
	pool = NULL;
}

int main(void)
{
	seed0 = tpx_seed();
	RUN(test_all_on_fallback);
	return 0;
}
