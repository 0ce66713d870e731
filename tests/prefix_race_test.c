/*
 * tests/prefix_race_test.c - the prefix cache raced from many threads.
 *
 * Content ledger: threads match key sequences, allocate the blocks that
 * did not match, write each new block's content tag (a function of its
 * key) into a side table indexed by block id, publish, hold (checking
 * that nothing they hold changed), and let go by kvp_free_all,
 * kvp_free_owned or kvp_free, on a pool far smaller than the keys, so
 * cached blocks are evicted all the time and matches race evictions.  A
 * match that got a block being handed out for other contents, or a block
 * whose contents changed while held, is a violation; TSan also sees the
 * ledger's plain reads and writes, so a missing happens-before between a
 * publisher, a matcher and the next owner of an evicted block is a report.
 * In the run with resets the workers also shrink the pool (which evicts
 * cached blocks to retire them) and growth brings blocks back, so every
 * transition of the protocol in lib/prefix/prefix_internal.h races every
 * other: match (lock, hold or revive) against release (lock, last hold
 * caches or frees), eviction (CAS CACHED -> EVICTING, and the evictor's
 * try-lock of held and stale listed blocks), publish (lock, index add),
 * reset (unpublish under the lock) and shrink.  kvp_block_get is checked
 * for a consistent snapshot: a block we hold with one holder names us.
 * At the end every block is free again, and without resets (which hold
 * evicted blocks in transit) no allocation fails.
 *
 * The ledger runs twice more with evicting ahead on at every cache size
 * (lib/prefix/prefix_alloc.c; as shipped only above 4096 cached blocks),
 * with resets, shrinks and growth and without: blocks evicted ahead go to
 * the evicting thread's magazine or the free stack, and on to other
 * threads (through a drain or a flush), and TSan sees their contents
 * change hands through that path too.
 *
 * Eviction order: with blocks cached in a known order and then many
 * threads evicting at once (nothing cached meanwhile), exactly the least
 * recently cached blocks are gone (the guarantee lib/prefix/prefix_lru.c states).
 *
 * The race windows are widened: the index lookup, every CAS on a block's
 * state word (the lock bit's CAS of a match, release, publish or reset, and
 * the evictor's CAS CACHED -> EVICTING) and the listing of a block at its
 * last release are wrapped (-Wl,--wrap) to yield now and then: between a
 * lookup and its lock, between reading a state and the CAS from it, and
 * while a block is locked, where an evictor, a release or a publisher may
 * slip in.
 *
 * KVP_RACE_SEED picks the random seed.
 */
#include <kvpool/kvpool.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "lib/testing/prefix_peek.h"
#include "tests/prefix_testutil.h"

#define BS       4u
#define NBLOCKS  96u /* 48 per stream */
#define NTHREADS 8
#define NSEQ     24 /* sequences per stream, 4 blocks each: 96 keys per stream */
#define SEQLEN   4
#define MAXIDS   4096

static uint64_t seed0;
static _Thread_local uint64_t wrap_rng = 88172645463325252ull;

/* Every CAS on a block's state word (a lock, an eviction), after a pause
 * now and then: between reading the state and changing it. */
bool __wrap_kvpi_pfx_cas(struct kvpi_block *b, uint64_t st, uint64_t nst)
{
	if (tu_rand(&wrap_rng) % 4 == 0)
		sched_yield();
	return __real_kvpi_pfx_cas(b, st, nst);
}

/* A lookup, then a pause now and then before its block is locked. */
uint32_t __wrap_kvpi_pfx_index_lookup(struct kvpi_prefix *pf, uint32_t stream, const kvp_hash *key)
{
	uint32_t n = __real_kvpi_pfx_index_lookup(pf, stream, key);
	if (tu_rand(&wrap_rng) % 4 == 0)
		sched_yield();
	return n;
}

/* Listing a block at its last release: the block stays locked meanwhile. */
void __wrap_kvpi_pfx_lru_insert(struct kvpi_prefix *pf, const struct kvpi_tslot *s, int si,
                                uint32_t id)
{
	if (tu_rand(&wrap_rng) % 4 == 0)
		sched_yield();
	__real_kvpi_pfx_lru_insert(pf, s, si, id);
}

static kvp_pool *pool;
/* The ledger: written by a block's allocator before it publishes, read by holders. */
static uint64_t content[MAXIDS];
static _Atomic uint64_t violations;
/* kvp_prefix_reset calls started and done (a reset unpublishes held blocks;
 * several threads may reset at once). */
static _Atomic uint64_t resets_started, resets_done;
/* A thread resets after one request in this many (0: never). */
static uint64_t reset_every;

static kvp_hash key_of(int stream, int seq, int j)
{
	return tpx_key((uint32_t)stream, (uint32_t)seq, (uint32_t)j);
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
	int idx, iters;
	uint64_t rng;
	uint64_t exhausted, matched;
};

static void check_held(const kvp_ref *refs, const uint64_t *want, size_t n, kvp_owner owner)
{
	for (size_t i = 0; i < n; i++) {
		uint32_t id = KVP_REF_ID(refs[i]);
		if (content[id] != want[i])
			violation("content of a held block changed", id);
		kvp_block_info bi;
		if (kvp_block_get(pool, refs[i], &bi) != KVP_OK || !bi.in_use || bi.n_holders < 1)
			violation("held block not in use", id);
		/* A consistent snapshot: with one holder, that holder is us. */
		else if (bi.n_holders == 1 && bi.owner != owner)
			violation("one holder, and it is another owner", id);
	}
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	kvp_ref refs[SEQLEN], got[SEQLEN];
	uint64_t want[SEQLEN];
	kvp_hash keys[SEQLEN];
	for (int it = 0; it < w->iters; it++) {
		kvp_owner owner = ((uint64_t)(w->idx + 1) << 32) | (uint64_t)it;
		int stream = (int)(tu_rand(&w->rng) % 2);
		int seq = (int)(tu_rand(&w->rng) % NSEQ);
		int len = 1 + (int)(tu_rand(&w->rng) % SEQLEN);
		kvp_stream st = stream ? KVP_V : KVP_K;
		for (int j = 0; j < len; j++)
			keys[j] = key_of(stream, seq, j);
		size_t m, n;
		uint64_t d0 = atomic_load(&resets_done), s0 = atomic_load(&resets_started);
		CHECK_EQ(kvp_prefix_match(pool, st, KVP_FP16, keys, (size_t)len, owner, refs,
		                          SEQLEN, &m),
		         KVP_OK);
		w->matched += m;
		for (size_t i = 0; i < m; i++) {
			want[i] = tag_of(keys[i]);
			uint32_t id = KVP_REF_ID(refs[i]);
			if (content[id] != want[i])
				violation("matched block has other contents", id);
			kvp_block_info bi;
			if (kvp_block_get(pool, refs[i], &bi) != KVP_OK || bi.n_used != BS)
				violation("matched block not full", id);
			/* A reset meanwhile unpublishes held blocks. */
			if (!bi.published && s0 == d0 && atomic_load(&resets_started) == s0)
				violation("matched block not published", id);
		}
		if ((size_t)len > m) {
			int rc = kvp_allocate(pool, st, (uint32_t)((size_t)len - m) * BS, owner,
			                      KVP_FP16, refs + m, SEQLEN - m, &n);
			if (rc != KVP_OK) {
				CHECK_EQ(rc, KVP_EEXHAUSTED);
				w->exhausted++;
				if (m)
					CHECK_EQ(kvp_free_all(pool, owner), KVP_OK);
				continue;
			}
			for (size_t i = m; i < (size_t)len; i++) {
				want[i] = tag_of(keys[i]);
				content[KVP_REF_ID(refs[i])] = want[i];
				rc = kvp_prefix_publish(pool, refs[i], keys[i]);
				if (rc != KVP_OK && rc != KVP_EEXIST)
					violation("publish failed", KVP_REF_ID(refs[i]));
			}
		}
		/* The owner's blocks, in order: matched, then allocated. */
		CHECK_EQ(kvp_blocks_for(pool, owner, got, SEQLEN, &n), KVP_OK);
		CHECK_EQ(n, (size_t)len);
		for (int j = 0; j < len; j++)
			CHECK_EQ(got[j], refs[j]);
		/* Hold a while. */
		check_held(refs, want, (size_t)len, owner);
		if (tu_rand(&w->rng) % 4 == 0)
			sched_yield();
		check_held(refs, want, (size_t)len, owner);
		switch (tu_rand(&w->rng) % 3) {
		case 0:
			CHECK_EQ(kvp_free_all(pool, owner), KVP_OK);
			break;
		case 1:
			CHECK_EQ(kvp_free_owned(pool, owner, refs, (size_t)len), KVP_OK);
			break;
		default: {
			int rc = kvp_free(pool, refs, (size_t)len);
			if (rc == KVP_EINVAL) /* some block is shared */
				CHECK_EQ(kvp_free_all(pool, owner), KVP_OK);
			else
				CHECK_EQ(rc, KVP_OK);
			break;
		}
		}
		if (kvp_blocks_for(pool, owner, got, SEQLEN, &n) != KVP_ENOENT)
			violation("owner still active after letting go", 0);
		if (reset_every && tu_rand(&w->rng) % reset_every == 0) {
			atomic_fetch_add(&resets_started, 1);
			kvp_prefix_reset(pool);
			atomic_fetch_add(&resets_done, 1);
		}
		/* Shrink (retires uncached free blocks, then evicts cached
		 * ones) racing everything; growth brings blocks back. */
		if (reset_every && tu_rand(&w->rng) % (reset_every / 4 + 1) == 0) {
			uint32_t retired;
			int rc = kvp_shrink(pool, stream ? KVP_V : KVP_K,
			                    (uint32_t)(tu_rand(&w->rng) % 8), &retired);
			CHECK_EQ(rc, KVP_OK);
		}
	}
	return NULL;
}

/*
 * Without resets no allocation may fail: a thread has at most SEQLEN blocks
 * of a stream held or in transit, so at least 48 - 8 * 4 = 16 blocks of
 * each stream are free or cached at every instant.
 */
static void test_ledger(int iters, uint64_t resets_every, bool ahead)
{
	reset_every = resets_every;
	kvp_pool_config c;
	kvp_pool_config_init(&c);
	c.block_size = BS;
	c.n_blocks = NBLOCKS;
	/* Evicting ahead: magazines that hold a whole batch (63), so blocks
	 * evicted ahead go through them, and through drains, to other threads. */
	c.thread_cache = ahead ? 64 : 4;
	c.prefix_cache = true;
	/* With resets the workers also shrink; growth (up to the start size)
	 * brings the blocks back. */
	c.grow_on_exhaustion = resets_every != 0;
	c.max_blocks = NBLOCKS;
	CHECK_EQ(kvp_pool_create(&c, &pool), KVP_OK);
	if (ahead)
		pool->prefix->ahead_cached = 0; /* before the workers see the pool */
	memset(content, 0, sizeof(content));
	struct worker w[NTHREADS];
	pthread_t th[NTHREADS];
	for (int i = 0; i < NTHREADS; i++) {
		w[i] =
		    (struct worker){.idx = i, .iters = iters, .rng = seed0 + 7919u * (uint64_t)i};
		CHECK_EQ(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
	}
	uint64_t matched = 0, exhausted = 0;
	for (int i = 0; i < NTHREADS; i++) {
		CHECK_EQ(pthread_join(th[i], NULL), 0);
		matched += w[i].matched;
		exhausted += w[i].exhausted;
	}
	CHECK_EQ(atomic_load(&violations), 0);
	/* Every block is back: free (cached or not), nothing in use. */
	kvp_stats s;
	CHECK_EQ(kvp_pool_stats(pool, &s), KVP_OK);
	CHECK_EQ(kvp_n_free(pool, KVP_K) + kvp_n_free(pool, KVP_V), s.n_blocks);
	CHECK_EQ(s.n_blocks, NBLOCKS - s.n_retired + s.n_grown);
	if (!resets_every)
		CHECK_EQ(s.n_blocks, NBLOCKS);
	CHECK_EQ(kvp_stats_blocks_in_use(&s), 0);
	CHECK_EQ(s.n_allocations, s.n_frees);
	CHECK_EQ(s.n_prefix_hits, matched);
	CHECK(s.n_prefix_hits <= s.n_prefix_queries);
	CHECK(s.n_cached <= NBLOCKS);
	printf("ledger: %d threads x %d requests: %llu hits of %llu keys, %llu evictions, "
	       "%llu exhausted, %llu retired, %llu grown, %llu cached at the end\n",
	       NTHREADS, iters, (unsigned long long)s.n_prefix_hits,
	       (unsigned long long)s.n_prefix_queries, (unsigned long long)s.n_evictions,
	       (unsigned long long)exhausted, (unsigned long long)s.n_retired,
	       (unsigned long long)s.n_grown, (unsigned long long)s.n_cached);
	if (resets_every)
		CHECK(s.n_retired > 0 && s.n_grown > 0); /* shrink and growth raced */
	CHECK(s.n_evictions > 0);
	CHECK(s.n_prefix_hits > 0);
	if (!resets_every)
		CHECK_EQ(exhausted, 0); /* no false exhaustion */
	/* All of a stream in one request: cached blocks are taken too.  After
	 * shrinks and growth a stream may hold more or fewer blocks than it
	 * started with (growth is capped for the pool, not per stream): all
	 * of K's free blocks, cached or not. */
	kvp_ref all[NBLOCKS];
	size_t n, k_free = kvp_n_free(pool, KVP_K);
	if (!resets_every)
		CHECK_EQ(k_free, NBLOCKS / 2);
	CHECK(k_free <= NBLOCKS);
	/* A stream shrunk to nothing takes one block, by growth. */
	size_t want = k_free ? k_free : 1;
	CHECK_EQ(kvp_allocate(pool, KVP_K, (uint32_t)want * BS, 1, KVP_FP16, all, NBLOCKS, &n),
	         KVP_OK);
	CHECK_EQ(n, want);
	CHECK_EQ(kvp_free_all(pool, 1), KVP_OK);
	kvp_prefix_reset(pool);
	CHECK_EQ(kvp_pool_stats(pool, &s), KVP_OK);
	CHECK_EQ(s.n_cached, 0);
	CHECK_EQ(kvp_n_free(pool, KVP_K) + kvp_n_free(pool, KVP_V), s.n_blocks);
	kvp_pool_destroy(pool);
	pool = NULL;
}

/* ---- eviction order with many evictors ---- */

#define EV_BLOCKS  64
#define EV_PER_THR 4

struct evictor {
	pthread_barrier_t *bar;
	int idx;
};

static void *evictor_main(void *arg)
{
	struct evictor *e = arg;
	kvp_ref r;
	size_t n;
	pthread_barrier_wait(e->bar);
	for (int i = 0; i < EV_PER_THR; i++)
		CHECK_EQ(
		    kvp_allocate(pool, KVP_KV, BS, 100 + (kvp_owner)e->idx, KVP_FP16, &r, 1, &n),
		    KVP_OK);
	return NULL;
}

static void test_eviction_order(int rounds)
{
	pool = tpx_pool(BS, EV_BLOCKS);
	for (int round = 0; round < rounds; round++) {
		kvp_ref r[EV_BLOCKS];
		size_t n;
		CHECK_EQ(kvp_allocate(pool, KVP_KV, EV_BLOCKS * BS, 1, KVP_FP16, r, EV_BLOCKS, &n),
		         KVP_OK);
		for (int i = 0; i < EV_BLOCKS; i++)
			CHECK_EQ(kvp_prefix_publish(pool, r[i], key_of(2, round, i)), KVP_OK);
		/* Cached last block first: r[63] is the least recently cached. */
		CHECK_EQ(kvp_free_all(pool, 1), KVP_OK);
		pthread_barrier_t bar;
		pthread_barrier_init(&bar, NULL, NTHREADS);
		struct evictor ev[NTHREADS];
		pthread_t th[NTHREADS];
		for (int i = 0; i < NTHREADS; i++) {
			ev[i] = (struct evictor){&bar, i};
			CHECK_EQ(pthread_create(&th[i], NULL, evictor_main, &ev[i]), 0);
		}
		for (int i = 0; i < NTHREADS; i++)
			CHECK_EQ(pthread_join(th[i], NULL), 0);
		pthread_barrier_destroy(&bar);
		/* 32 evicted: exactly r[32..63]; r[0..31] still cached. */
		int evicted = NTHREADS * EV_PER_THR;
		for (int i = 0; i < EV_BLOCKS; i++) {
			kvp_block_info bi;
			int rc = kvp_block_get(pool, r[i], &bi);
			bool cached = rc == KVP_OK && !bi.in_use && bi.published;
			if (cached != (i < EV_BLOCKS - evicted)) {
				fprintf(stderr, "round %d: block %d of the sequence cached=%d\n",
				        round, i, cached);
				CHECK(0);
			}
		}
		for (int i = 0; i < NTHREADS; i++)
			CHECK_EQ(kvp_free_all(pool, 100 + (kvp_owner)i), KVP_OK);
		CHECK_EQ(kvp_prefix_reset(pool), (size_t)(EV_BLOCKS - evicted));
	}
	kvp_pool_destroy(pool);
	pool = NULL;
}

int main(void)
{
	seed0 = tpx_seed();
	test_ledger(5000, 1000, false);
	printf("ok test_ledger\n");
	test_ledger(3000, 0, false);
	printf("ok test_ledger_no_false_exhaustion\n");
	test_ledger(3000, 0, true);
	printf("ok test_ledger_evicting_ahead\n");
	test_ledger(3000, 1000, true);
	printf("ok test_ledger_evicting_ahead_with_resets\n");
	test_eviction_order(50);
	printf("ok test_eviction_order\n");
	return 0;
}
