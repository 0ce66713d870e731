/*
 * tests/bufcache_race_test.c - 8 threads allocating, freeing, and freeing each other's buffers.
 *
 * Each worker allocates buffers of random sizes, stamps a header and fills
 * the rest with a per-buffer canary byte, then either keeps it for a while or
 * swaps it into a shared exchange array, verifying and freeing whatever
 * buffer (usually another thread's) it gets back.  A buffer handed to two
 * owners at once, a cached buffer written by the cache, or a buffer returned
 * with the wrong capacity breaks a canary (and is a data race under TSan).
 * A watcher thread meanwhile reads cached bytes and stats (never above the
 * budget, at any instant) and clears the cache now and then.  Every worker
 * has its own front (lib/bufcache/bufcache_front.h): the watcher's clears, and the
 * workers' evictions when their front and the shared tier are empty, claim
 * fronts whose owners are running, and workers exit with non-empty fronts.
 *
 * Once quiescent: cached bytes <= budget; hits + misses = allocations;
 * bytes_in_use = 0; system_allocs - system_frees = cached buffers; taking
 * every cached buffer back out gives distinct 256-aligned buffers whose
 * capacities add up to cached bytes exactly; after clear, every system
 * allocation has been freed (and LSan, in the asan config, finds no leak).
 *
 * A second phase does the same with buffers straddling the 64 MiB tier
 * boundary (lock-free exact classes and locked large classes together),
 * touching only their first and last pages; a third puts every thread on
 * the same two size classes under an eight-buffer budget, so the queues,
 * the bitmap protocol and eviction run at maximal contention.
 */
#include <kvpool/bufcache.h>

#include "tests/testutil.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define N_THREADS 8
#define N_SLOTS   32
#define HOLD      4
#define MAGIC     0x6b7670626366ull /* "kvpbcf" */

struct hdr {
	uint64_t magic;
	uint64_t actual;
	uint64_t requested;
	uint64_t canary; /* the fill byte */
};

struct phase {
	kvp_bufcache *c;
	size_t budget;
	int iters;
	int large; /* 1: sizes across the tier boundary, sparse touching; 2: two classes only */
	_Atomic uintptr_t slot[N_SLOTS];
	_Atomic uint64_t allocs;
	_Atomic int done;
};

struct worker {
	struct phase *ph;
	int id;
	unsigned char *ref; /* pattern scratch for memcmp */
};

#define REF_MAX (128 * 1024)
#define MIB     ((size_t)1 << 20)

static size_t pick_size(struct phase *ph, uint64_t *rng)
{
	uint64_t r = tu_rand(rng);

	if (ph->large == 1) /* 1 MiB .. 124 MiB: both tiers, mostly large */
		return MIB + (size_t)(r % (123 * MIB));
	if (ph->large == 2) /* capacities 512 and 768: every thread on the same two queues */
		return (r & 1) ? 300 : 600;
	if ((r & 15) == 0)
		return sizeof(struct hdr) + (size_t)((r >> 8) % (96 * 1024));
	return sizeof(struct hdr) + (size_t)((r >> 8) % (16 * 1024));
}

/* Bytes that carry the canary: all of them for small buffers, the first 4 KiB for large. */
static size_t body_len(struct phase *ph, size_t requested)
{
	size_t n = requested - sizeof(struct hdr);
	if (ph->large == 1 && n > 4096)
		n = 4096;
	return n;
}

static void stamp(struct worker *w, unsigned char *p, size_t requested, size_t actual,
                  unsigned char canary)
{
	struct hdr h = {MAGIC, actual, requested, canary};

	memcpy(p, &h, sizeof(h));
	memset(p + sizeof(h), canary, body_len(w->ph, requested));
	if (w->ph->large == 1)
		p[requested - 1] = canary;
}

/* Verify a buffer's header and canary; returns its capacity. */
static size_t verify(struct worker *w, unsigned char *p)
{
	struct hdr h;
	size_t n;

	CHECK_EQ((uintptr_t)p % KVP_BUF_ALIGN, 0);
	memcpy(&h, p, sizeof(h));
	CHECK_EQ(h.magic, MAGIC);
	CHECK(h.actual >= h.requested);
	CHECK_EQ(h.actual % KVP_BUF_ALIGN, 0);
	n = body_len(w->ph, (size_t)h.requested);
	CHECK(n <= REF_MAX);
	memset(w->ref, (int)h.canary, n);
	CHECK(memcmp(p + sizeof(h), w->ref, n) == 0);
	if (w->ph->large == 1)
		CHECK_EQ(p[h.requested - 1], (unsigned char)h.canary);
	memset(p, 0, sizeof(h)); /* a stale second owner would now fail its check */
	return (size_t)h.actual;
}

static void release(struct worker *w, unsigned char *p)
{
	size_t a = verify(w, p);
	kvp_bufcache_free(w->ph->c, p, a);
}

static void *work(void *arg)
{
	struct worker *w = arg;
	struct phase *ph = w->ph;
	uint64_t rng = 0x1234567ull * (uint64_t)(w->id + 1);
	unsigned char *held[HOLD] = {0};

	for (int i = 0; i < ph->iters; i++) {
		size_t req = pick_size(ph, &rng), actual;
		unsigned char *p = kvp_bufcache_alloc(ph->c, req, &actual);
		unsigned char canary = (unsigned char)((w->id * 37 + i) | 1);

		CHECK(p != NULL);
		CHECK(actual >= req);
		atomic_fetch_add_explicit(&ph->allocs, 1, memory_order_relaxed);
		stamp(w, p, req, actual, canary);
		if (tu_rand(&rng) & 1) {
			int k = (int)(tu_rand(&rng) % HOLD);
			if (held[k])
				release(w, held[k]);
			held[k] = p;
		} else {
			unsigned s = (unsigned)(tu_rand(&rng) % N_SLOTS);
			/* acq_rel: the buffer's contents travel with the pointer. */
			uintptr_t old = atomic_exchange_explicit(&ph->slot[s], (uintptr_t)p,
			                                         memory_order_acq_rel);
			if (old)
				release(w, (unsigned char *)old);
		}
	}
	for (int k = 0; k < HOLD; k++)
		if (held[k])
			release(w, held[k]);
	return NULL;
}

static void *watch(void *arg)
{
	struct phase *ph = arg;
	unsigned long n = 0;

	while (!atomic_load_explicit(&ph->done, memory_order_acquire)) {
		kvp_bufcache_stats s;
		CHECK(kvp_bufcache_cached_bytes(ph->c) <= ph->budget);
		CHECK_EQ(kvp_bufcache_get_stats(ph->c, &s), KVP_OK);
		CHECK(s.cached_bytes <= ph->budget);
		CHECK(s.peak_cached_bytes <= ph->budget);
		if (++n % 64 == 0)
			kvp_bufcache_clear(ph->c);
		sched_yield();
	}
	return NULL;
}

static int cmp_ptr(const void *a, const void *b)
{
	uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
	return x < y ? -1 : x > y;
}

/* Quiescent accounting: every cached byte is in a real, distinct buffer. */
static void account(struct phase *ph)
{
	kvp_bufcache_stats s, t;
	uintptr_t *ptrs;
	size_t *caps, sum = 0;

	CHECK_EQ(kvp_bufcache_get_stats(ph->c, &s), KVP_OK);
	CHECK(s.cached_bytes <= ph->budget);
	CHECK_EQ(s.cached_bytes, kvp_bufcache_cached_bytes(ph->c));
	CHECK_EQ(s.hits + s.misses, atomic_load(&ph->allocs));
	CHECK_EQ(s.bytes_in_use, 0);
	CHECK_EQ(s.system_allocs - s.system_frees, s.cached_buffers);
	ptrs = calloc(s.cached_buffers + 1, sizeof(*ptrs));
	caps = calloc(s.cached_buffers + 1, sizeof(*caps));
	CHECK(ptrs && caps);
	for (uint64_t i = 0; i < s.cached_buffers; i++) {
		ptrs[i] = (uintptr_t)kvp_bufcache_alloc(ph->c, 1, &caps[i]);
		CHECK(ptrs[i] != 0);
		CHECK_EQ(ptrs[i] % KVP_BUF_ALIGN, 0);
		sum += caps[i];
	}
	CHECK_EQ(kvp_bufcache_get_stats(ph->c, &t), KVP_OK);
	CHECK_EQ(t.hits, s.hits + s.cached_buffers); /* all of them were cached */
	CHECK_EQ(t.misses, s.misses);
	CHECK_EQ(sum, s.cached_bytes);
	CHECK_EQ(t.cached_bytes, 0);
	CHECK_EQ(t.cached_buffers, 0);
	{
		uintptr_t *sorted = calloc(s.cached_buffers + 1, sizeof(*sorted));
		CHECK(sorted != NULL);
		memcpy(sorted, ptrs, s.cached_buffers * sizeof(*sorted));
		qsort(sorted, s.cached_buffers, sizeof(*sorted), cmp_ptr);
		for (uint64_t i = 1; i < s.cached_buffers; i++)
			CHECK(sorted[i] != sorted[i - 1]);
		free(sorted);
	}
	for (uint64_t i = 0; i < s.cached_buffers; i++)
		kvp_bufcache_free(ph->c, (void *)ptrs[i], caps[i]);
	CHECK_EQ(kvp_bufcache_cached_bytes(ph->c), s.cached_bytes);
	kvp_bufcache_clear(ph->c);
	CHECK_EQ(kvp_bufcache_get_stats(ph->c, &t), KVP_OK);
	CHECK_EQ(t.cached_bytes, 0);
	CHECK_EQ(t.cached_buffers, 0);
	CHECK_EQ(t.system_allocs, t.system_frees);
	free(ptrs);
	free(caps);
}

static void run_phase(size_t budget, int iters, int large)
{
	static struct phase ph;
	pthread_t th[N_THREADS], wt;
	struct worker w[N_THREADS];

	memset(&ph, 0, sizeof(ph));
	ph.budget = budget;
	ph.iters = iters;
	ph.large = large;
	CHECK_EQ(kvp_bufcache_create(budget, &ph.c), KVP_OK);
	CHECK_EQ(pthread_create(&wt, NULL, watch, &ph), 0);
	for (int i = 0; i < N_THREADS; i++) {
		w[i] = (struct worker){&ph, i, malloc(REF_MAX)};
		CHECK(w[i].ref != NULL);
		CHECK_EQ(pthread_create(&th[i], NULL, work, &w[i]), 0);
	}
	for (int i = 0; i < N_THREADS; i++)
		CHECK_EQ(pthread_join(th[i], NULL), 0);
	atomic_store_explicit(&ph.done, 1, memory_order_release);
	CHECK_EQ(pthread_join(wt, NULL), 0);
	for (int s = 0; s < N_SLOTS; s++) {
		uintptr_t p = atomic_exchange(&ph.slot[s], 0);
		if (p)
			release(&w[0], (unsigned char *)p);
	}
	account(&ph);
	for (int i = 0; i < N_THREADS; i++)
		free(w[i].ref);
	kvp_bufcache_destroy(ph.c);
}

static void race_small_buffers(void)
{
	run_phase(192 * 1024, 3000, 0);
}

static void race_across_tiers(void)
{
	run_phase(512 * MIB, 150, 1);
}

/* Maximal contention: two size classes, a budget of eight buffers, constant eviction. */
static void race_two_classes(void)
{
	run_phase(8 * 768, 4000, 2);
}

int main(void)
{
	RUN(race_small_buffers);
	RUN(race_across_tiers);
	RUN(race_two_classes);
	return 0;
}
