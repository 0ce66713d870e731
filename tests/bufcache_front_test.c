/*
 * tests/bufcache_front_test.c - per-thread fronts: parked threads, thread exit, clear, OOM.
 *
 * A "parked" thread allocates buffers, frees them (so they sit in its own
 * front), then waits, alive and idle, until the test lets it go on.  While
 * it is parked the main thread checks that its buffers are still reachable:
 *
 * - OOM: a miss whose system allocation fails evicts the parked thread's
 *   smallest buffer (the front is claimed) and retries; with every system
 *   allocation failing, alloc returns NULL only after evicting every one
 *   of them (no false exhaustion), and the parked thread's front still
 *   works afterwards.
 * - Budget: a free that needs room evicts the parked thread's buffers
 *   (smallest first) instead of giving the freed buffer back to the system;
 *   when the parked front's unused reservation covers what the free lacks,
 *   it is taken back and nothing is evicted.
 * - clear empties the parked thread's front; destroy while a thread is
 *   parked with a full front leaks nothing (LSan, asan config), and the
 *   thread then exits without touching the destroyed cache.
 * - Thread exit: an exiting thread parks its front with its buffers (a hit
 *   of another thread does not see them), the next new thread takes it
 *   whole from its first call (same pointers, best fit and oldest first),
 *   and a free that needs room evicts parked buffers before a live
 *   thread's.
 * - Which buffer a hit returns with several threads: the smallest fitting
 *   buffer of the caller's front unless the shared tier has one as good;
 *   buffers in another thread's front are not considered by a hit.
 * - Many short-lived threads (each exiting with a non-empty front) against
 *   a thread that clears, then exact quiescent accounting.
 * - Parked threads hold 32 buffers in their fronts while three threads
 *   churn and the main thread's misses meet injected failures: no
 *   allocation ever returns NULL (each failure is absorbed by an eviction,
 *   from the other threads' fronts, since the main thread caches nothing).
 */
#include <kvpool/bufcache.h>

#include "lib/testing/bufcache_peek.h"
#include "lib/testing/fault.h"
#include "tests/testutil.h"

#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <string.h>

#define MAXB 40 /* a front keeps 32 buffers of a capacity */

struct parked {
	kvp_bufcache *c;
	int n;
	size_t req[MAXB];
	void *p[MAXB];
	size_t a[MAXB];
	sem_t ready, go, done;
	int after; /* 1: allocate one buffer after waking and free it (front still works) */
	void *again;
	size_t again_a;
	pthread_t th;
};

static void *parked_main(void *arg)
{
	struct parked *t = arg;

	for (int i = 0; i < t->n; i++) {
		t->p[i] = kvp_bufcache_alloc(t->c, t->req[i], &t->a[i]);
		CHECK(t->p[i] != NULL);
	}
	for (int i = 0; i < t->n; i++)
		kvp_bufcache_free(t->c, t->p[i], t->a[i]);
	sem_post(&t->ready);
	while (sem_wait(&t->go))
		;
	if (t->after) {
		t->again = kvp_bufcache_alloc(t->c, 1000, &t->again_a);
		CHECK(t->again != NULL);
		kvp_bufcache_free(t->c, t->again, t->again_a);
	}
	sem_post(&t->done);
	return NULL;
}

/* Start a thread that caches @n buffers of the given requests in its front and parks. */
static void park(struct parked *t, kvp_bufcache *c, int n, const size_t *req, int after)
{
	memset(t, 0, sizeof(*t));
	t->c = c;
	t->n = n;
	t->after = after;
	memcpy(t->req, req, (size_t)n * sizeof(*req));
	CHECK_EQ(sem_init(&t->ready, 0, 0), 0);
	CHECK_EQ(sem_init(&t->go, 0, 0), 0);
	CHECK_EQ(sem_init(&t->done, 0, 0), 0);
	CHECK_EQ(pthread_create(&t->th, NULL, parked_main, t), 0);
	while (sem_wait(&t->ready))
		;
}

static void unpark(struct parked *t)
{
	sem_post(&t->go);
	while (sem_wait(&t->done))
		;
	CHECK_EQ(pthread_join(t->th, NULL), 0);
	sem_destroy(&t->ready);
	sem_destroy(&t->go);
	sem_destroy(&t->done);
}

static kvp_bufcache_stats stats(kvp_bufcache *c)
{
	kvp_bufcache_stats s;
	CHECK_EQ(kvp_bufcache_get_stats(c, &s), KVP_OK);
	return s;
}

static const size_t four[4] = {3000, 1000, 2000, 1000}; /* caps 3584, 1280, 2304, 1280 */

/* One failed system allocation: the parked front's smallest, oldest buffer is evicted. */
static void oom_reaches_parked_front(void)
{
	kvp_bufcache *c;
	struct parked t;
	kvp_bufcache_stats s;
	size_t x;
	void *q;

	CHECK_EQ(kvp_bufcache_create(1 << 20, &c), KVP_OK);
	park(&t, c, 4, four, 1);
	s = stats(c);
	CHECK_EQ(s.cached_buffers, 4);
	kvpi_fault_inject(0, 1);
	q = kvp_bufcache_alloc(c, 50000, &x);
	kvpi_fault_inject(0, 0);
	CHECK(q != NULL);
	s = stats(c);
	CHECK_EQ(s.oom_retries, 1);
	CHECK_EQ(s.evictions, 1);
	CHECK_EQ(s.cached_buffers, 3);
	CHECK_EQ(s.cached_bytes, 3584 + 2304 + 1280);
	/* The evicted one was p[1] (1280, cached before p[3]): p[3] is still there. */
	{
		size_t y;
		void *r = kvp_bufcache_alloc(c, 1, &y);
		CHECK(r == t.p[3]);
		CHECK_EQ(y, 1280);
		kvp_bufcache_free(c, r, y);
	}
	kvp_bufcache_free(c, q, x);
	unpark(&t);
	kvp_bufcache_destroy(c);
}

/* Every system allocation failing: NULL only after every parked buffer was evicted. */
static void oom_null_only_when_nothing_left(void)
{
	kvp_bufcache *c;
	struct parked t;
	kvp_bufcache_stats s;
	unsigned long inj;
	size_t x = 1;

	CHECK_EQ(kvp_bufcache_create(1 << 20, &c), KVP_OK);
	park(&t, c, 4, four, 1);
	inj = kvpi_fault_injected();
	kvpi_fault_inject(0, -1);
	CHECK(kvp_bufcache_alloc(c, 50000, &x) == NULL);
	kvpi_fault_inject(0, 0);
	CHECK_EQ(x, 0);
	CHECK_EQ(kvpi_fault_injected() - inj, 5);
	s = stats(c);
	CHECK_EQ(s.evictions, 4);
	CHECK_EQ(s.cached_buffers, 0);
	CHECK_EQ(s.cached_bytes, 0);
	CHECK_EQ(s.system_allocs, s.system_frees);
	/* The parked thread's front still works (its alloc misses, its free caches). */
	unpark(&t);
	CHECK_EQ(stats(c).cached_buffers, 1);
	kvp_bufcache_destroy(c);
}

/* A free needing room evicts the parked front's buffers, smallest first. */
static void budget_reaches_parked_front(void)
{
	const size_t budget = 64 * 1024, big = 57344; /* round(big) = 64512 */
	kvp_bufcache *c;
	struct parked t;
	kvp_bufcache_stats s;
	size_t x, y;
	void *q, *r;

	CHECK_EQ(kvp_bufcache_create(budget, &c), KVP_OK);
	q = kvp_bufcache_alloc(c, big, &x);
	CHECK(q != NULL);
	CHECK_EQ(x, 64512);
	park(&t, c, 3, (const size_t[]){1000, 1000, 2000}, 0);
	CHECK_EQ(stats(c).cached_bytes, 1280 + 1280 + 2304);
	kvp_bufcache_free(c, q, x);
	s = stats(c);
	CHECK_EQ(s.evictions, 3); /* 1024 bytes of room left: all three had to go */
	CHECK_EQ(s.cached_buffers, 1);
	CHECK_EQ(s.cached_bytes, 64512);
	CHECK(kvp_bufcache_cached_bytes(c) <= budget);
	r = kvp_bufcache_alloc(c, big, &y);
	CHECK(r == q); /* cached, not given back to the system */
	kvp_bufcache_free(c, r, y);
	unpark(&t);
	kvp_bufcache_destroy(c);
}

/* Another front's unused reservation covers a free's shortfall: taken back, nothing evicted. */
static void reservation_taken_back_instead_of_evicting(void)
{
	const size_t budget = 256 * 1024; /* batch = budget / 256 = 1024 */
	kvp_bufcache *c;
	struct parked t;
	kvp_bufcache_stats s;
	size_t x;
	void *q;

	CHECK_EQ(kvp_bufcache_create(budget, &c), KVP_OK);
	q = kvp_bufcache_alloc(c, 231424, &x);
	CHECK(q != NULL);
	CHECK_EQ(x, budget - 1280 - 512);
	/* The parked front holds a 1280-byte buffer and 1024 bytes of unused reservation. */
	park(&t, c, 1, (const size_t[]){1000}, 0);
	CHECK_EQ(stats(c).cached_bytes, 1280);
	/* 512 bytes short unless that reservation comes back. */
	kvp_bufcache_free(c, q, x);
	s = stats(c);
	CHECK_EQ(s.evictions, 0);
	CHECK_EQ(s.cached_buffers, 2);
	CHECK_EQ(s.cached_bytes, 1280 + x);
	CHECK_EQ(s.system_frees, 0);
	unpark(&t);
	kvp_bufcache_destroy(c);
}

static void clear_and_destroy_reach_parked_fronts(void)
{
	kvp_bufcache *c;
	struct parked t;
	kvp_bufcache_stats s;

	CHECK_EQ(kvp_bufcache_create(1 << 20, &c), KVP_OK);
	park(&t, c, 4, four, 1);
	kvp_bufcache_clear(c);
	s = stats(c);
	CHECK_EQ(s.cached_buffers, 0);
	CHECK_EQ(s.cached_bytes, 0);
	CHECK_EQ(s.system_allocs, s.system_frees);
	CHECK_EQ(s.evictions, 0);
	unpark(&t); /* its front is empty now: its alloc misses */
	s = stats(c);
	CHECK_EQ(s.misses, 5);
	CHECK_EQ(s.cached_buffers, 1);
	kvp_bufcache_destroy(c);

	/* Destroyed while a thread is parked with a full front: nothing leaks, and
	 * the thread's exit does not touch the destroyed cache. */
	CHECK_EQ(kvp_bufcache_create(1 << 20, &c), KVP_OK);
	park(&t, c, 4, four, 0);
	kvp_bufcache_destroy(c);
	unpark(&t);
}

static void *use_and_exit(void *arg)
{
	struct parked *t = arg;

	for (int i = 0; i < t->n; i++) {
		t->p[i] = kvp_bufcache_alloc(t->c, t->req[i], &t->a[i]);
		CHECK(t->p[i] != NULL);
	}
	for (int i = 0; i < t->n; i++)
		kvp_bufcache_free(t->c, t->p[i], t->a[i]);
	return NULL;
}

struct take_back {
	struct parked *t;
	void *q[4];
	size_t a[4];
};

/* A new thread: four 1-byte allocations, then frees them. */
static void *alloc_four_and_exit(void *arg)
{
	struct take_back *tb = arg;

	for (int i = 0; i < 4; i++) {
		tb->q[i] = kvp_bufcache_alloc(tb->t->c, 1, &tb->a[i]);
		CHECK(tb->q[i] != NULL);
	}
	for (int i = 0; i < 4; i++)
		kvp_bufcache_free(tb->t->c, tb->q[i], tb->a[i]);
	return NULL;
}

/* An exiting thread parks its front with its buffers; the next new thread takes it whole. */
static void thread_exit_parks_front(void)
{
	kvp_bufcache *c;
	struct parked t;
	struct take_back tb;
	kvp_bufcache_stats s;
	pthread_t th;
	size_t a;

	CHECK_EQ(kvp_bufcache_create(1 << 20, &c), KVP_OK);
	memset(&t, 0, sizeof(t));
	t.c = c;
	t.n = 4;
	memcpy(t.req, four, sizeof(four));
	CHECK_EQ(pthread_create(&th, NULL, use_and_exit, &t), 0);
	CHECK_EQ(pthread_join(th, NULL), 0);
	s = stats(c);
	CHECK_EQ(s.cached_buffers, 4);
	CHECK_EQ(s.cached_bytes, 3584 + 1280 + 2304 + 1280);
	CHECK_EQ(s.misses, 4);
	/* Parked buffers are not in the shared tier: the main thread's hit
	 * does not see them (a miss), and they stay cached. */
	void *m = kvp_bufcache_alloc(c, 1, &a);
	CHECK(m != NULL);
	CHECK_EQ(stats(c).misses, 5);
	kvp_bufcache_free(c, m, a);
	CHECK_EQ(stats(c).cached_buffers, 5);
	/* The next new thread starts with the parked front, from its very
	 * first call: best fit and oldest-first among equals. */
	{
		static const int order[4] = {1, 3, 2, 0};
		memset(&tb, 0, sizeof(tb));
		tb.t = &t;
		CHECK_EQ(pthread_create(&th, NULL, alloc_four_and_exit, &tb), 0);
		CHECK_EQ(pthread_join(th, NULL), 0);
		for (int i = 0; i < 4; i++)
			CHECK(tb.q[i] == t.p[order[i]]);
		s = stats(c);
		CHECK_EQ(s.hits, 4);
		CHECK_EQ(s.misses, 5);
	}
	/* Threads come and go (each takes a front an earlier one parked):
	 * every buffer stays accounted for. */
	for (int k = 0; k < 50; k++) {
		CHECK_EQ(pthread_create(&th, NULL, use_and_exit, &t), 0);
		CHECK_EQ(pthread_join(th, NULL), 0);
	}
	s = stats(c);
	CHECK_EQ(s.misses, 5); /* every new thread started warm */
	CHECK_EQ(s.bytes_in_use, 0);
	CHECK_EQ(s.system_allocs - s.system_frees, s.cached_buffers);
	kvp_bufcache_clear(c);
	s = stats(c);
	CHECK_EQ(s.system_allocs, s.system_frees);
	CHECK_EQ(s.cached_buffers, 0);
	kvp_bufcache_destroy(c);
}

/*
 * A free that needs room evicts the buffers an exited thread parked before
 * a live thread's: they join the shared tier, where the smallest go first.
 */
static void parked_buffers_evicted_before_live_ones(void)
{
	static const size_t three[3] = {1000, 2000, 1000}; /* caps 1280, 2304, 1280 */
	kvp_bufcache *c;
	struct parked t;
	pthread_t th;
	size_t a, ax;

	/* 64 KiB: a front holds up to 8 KiB, so nothing here spills. */
	CHECK_EQ(kvp_bufcache_create(65536, &c), KVP_OK);
	void *mine = kvp_bufcache_alloc(c, 3600, &a); /* capacity 4096 */
	CHECK(mine != NULL);
	CHECK_EQ(a, 4096);
	kvp_bufcache_free(c, mine, a); /* in the main thread's front */
	memset(&t, 0, sizeof(t));
	t.c = c;
	t.n = 3;
	memcpy(t.req, three, sizeof(three));
	CHECK_EQ(pthread_create(&th, NULL, use_and_exit, &t), 0);
	CHECK_EQ(pthread_join(th, NULL), 0);
	CHECK_EQ(stats(c).cached_bytes, 4096 + 4864);
	/* 58624 more bytes need 2048 of room: the two parked 1280s go, not our
	 * 4096 (the smallest live buffer, which eviction took before). */
	void *x = kvp_bufcache_alloc(c, 52000, &ax);
	CHECK(x != NULL);
	CHECK_EQ(ax, 58624);
	kvp_bufcache_free(c, x, ax);
	kvp_bufcache_stats s = stats(c);
	CHECK_EQ(s.evictions, 2);
	CHECK_EQ(s.cached_bytes, 4096 + 2304 + 58624);
	void *again = kvp_bufcache_alloc(c, 3600, &a);
	CHECK(again == mine);
	kvp_bufcache_free(c, again, a);
	kvp_bufcache_destroy(c);
}

/* With two threads a hit takes the caller's front's best fit, not another front's. */
static void hit_rule_with_two_threads(void)
{
	kvp_bufcache *c;
	struct parked t;
	size_t a, b, x;
	void *big, *q;

	CHECK_EQ(kvp_bufcache_create(1 << 20, &c), KVP_OK);
	big = kvp_bufcache_alloc(c, 4000, &a); /* 4608, into our front */
	CHECK(big != NULL);
	kvp_bufcache_free(c, big, a);
	park(&t, c, 1, (const size_t[]){1000}, 0); /* 1280 in the other front */
	q = kvp_bufcache_alloc(c, 500, &x);
	CHECK(q == big); /* our front's smallest fit; the other front is not searched */
	CHECK_EQ(x, a);
	/* A shared buffer as good or better wins: one a thread's front spilled
	 * (33 frees of one capacity: the oldest goes to the shared tier). */
	{
		struct parked u;
		pthread_t th;
		memset(&u, 0, sizeof(u));
		u.c = c;
		u.n = 33;
		for (int i = 0; i < u.n; i++)
			u.req[i] = 2000; /* 2304 */
		CHECK_EQ(pthread_create(&th, NULL, use_and_exit, &u), 0);
		CHECK_EQ(pthread_join(th, NULL), 0);
		kvp_bufcache_free(c, q, x); /* 4608 back in our front */
		q = kvp_bufcache_alloc(c, 500, &b);
		CHECK(q == u.p[0]);
		CHECK_EQ(b, 2304);
		kvp_bufcache_free(c, q, b);
	}
	unpark(&t);
	kvp_bufcache_destroy(c);
}

/* ---- short-lived threads against a clearing thread ------------------------------------- */

#define N_CHURN 4

static atomic_int churn_stop;
static atomic_long churn_allocs;

struct churner {
	kvp_bufcache *c;
	uint64_t seed;
};

static void *short_life(void *arg)
{
	struct churner *w = arg;
	void *held[8] = {0};
	size_t ha[8] = {0};

	for (int i = 0; i < 200; i++) {
		size_t want = 1 + (size_t)(tu_rand(&w->seed) % 40000), got;
		int k = (int)(tu_rand(&w->seed) % 8);
		void *p = kvp_bufcache_alloc(w->c, want, &got);
		CHECK(p != NULL);
		CHECK(got >= want);
		atomic_fetch_add_explicit(&churn_allocs, 1, memory_order_relaxed);
		memset(p, 0x5a, want < 64 ? want : 64);
		if (held[k])
			kvp_bufcache_free(w->c, held[k], ha[k]);
		held[k] = p;
		ha[k] = got;
	}
	/* Exit with a non-empty front: the destructor moves it to the shared tier. */
	for (int k = 0; k < 8; k++)
		if (held[k])
			kvp_bufcache_free(w->c, held[k], ha[k]);
	return NULL;
}

static void *spawner(void *arg)
{
	struct churner *w = arg;

	while (!atomic_load_explicit(&churn_stop, memory_order_relaxed)) {
		pthread_t th;
		struct churner v = {w->c, tu_rand(&w->seed)};
		CHECK_EQ(pthread_create(&th, NULL, short_life, &v), 0);
		CHECK_EQ(pthread_join(th, NULL), 0);
	}
	return NULL;
}

static void short_lived_threads_and_clears(void)
{
	const size_t budget = 256 * 1024;
	kvp_bufcache *c;
	pthread_t sp[N_CHURN];
	struct churner w[N_CHURN];
	kvp_bufcache_stats s;

	CHECK_EQ(kvp_bufcache_create(budget, &c), KVP_OK);
	atomic_store(&churn_stop, 0);
	atomic_store(&churn_allocs, 0);
	for (int i = 0; i < N_CHURN; i++) {
		w[i] = (struct churner){c, 0x9e37ull * (uint64_t)(i + 1)};
		CHECK_EQ(pthread_create(&sp[i], NULL, spawner, &w[i]), 0);
	}
	for (int i = 0; i < 300 || atomic_load(&churn_allocs) < 20000; i++) {
		CHECK(kvp_bufcache_cached_bytes(c) <= budget);
		CHECK_EQ(kvp_bufcache_get_stats(c, &s), KVP_OK);
		CHECK(s.cached_bytes <= budget);
		CHECK(s.peak_cached_bytes <= budget);
		if (i % 8 == 0)
			kvp_bufcache_clear(c);
		sched_yield();
	}
	atomic_store(&churn_stop, 1);
	for (int i = 0; i < N_CHURN; i++)
		CHECK_EQ(pthread_join(sp[i], NULL), 0);
	s = stats(c);
	CHECK_EQ(s.hits + s.misses, atomic_load(&churn_allocs));
	CHECK_EQ(s.bytes_in_use, 0);
	CHECK_EQ(s.system_allocs - s.system_frees, s.cached_buffers);
	CHECK(s.cached_bytes <= budget);
	kvp_bufcache_clear(c);
	s = stats(c);
	CHECK_EQ(s.cached_buffers, 0);
	CHECK_EQ(s.cached_bytes, 0);
	CHECK_EQ(s.system_allocs, s.system_frees);
	kvp_bufcache_destroy(c);
}

/* ---- parked fronts while churning threads hit injected allocation failures --------------- */

#define N_PARKED 4
#define N_BUSY   3

struct busy {
	kvp_bufcache *c;
	uint64_t seed;
	long allocs;
};

static void *busy_main(void *arg)
{
	struct busy *w = arg;
	void *held[4] = {0};
	size_t ha[4] = {0};

	while (!atomic_load_explicit(&churn_stop, memory_order_relaxed)) {
		size_t want = 1 + (size_t)(tu_rand(&w->seed) % 9000), got;
		int k = (int)(tu_rand(&w->seed) % 4);
		void *p = kvp_bufcache_alloc(w->c, want, &got);
		/* Buffers are cached somewhere (at least the parked ones): never NULL. */
		CHECK(p != NULL);
		w->allocs++;
		if (held[k])
			kvp_bufcache_free(w->c, held[k], ha[k]);
		held[k] = p;
		ha[k] = got;
	}
	for (int k = 0; k < 4; k++)
		if (held[k])
			kvp_bufcache_free(w->c, held[k], ha[k]);
	return NULL;
}

/* The main thread's misses meet injected failures while others churn; every one of
 * them is absorbed by an eviction, reaching the parked and busy fronts (the main
 * thread caches nothing: its buffers are larger than the budget). */
static void parked_fronts_absorb_oom_races(void)
{
	static const size_t sizes[8] = {700, 1500, 2500, 3500, 700, 1500, 2500, 3500};
	struct parked t[N_PARKED];
	struct busy w[N_BUSY];
	pthread_t th[N_BUSY];
	kvp_bufcache *c;
	kvp_bufcache_stats s;
	long allocs = 0;

	CHECK_EQ(kvp_bufcache_create(1 << 20, &c), KVP_OK);
	for (int i = 0; i < N_PARKED; i++)
		park(&t[i], c, 8, sizes, 1);
	atomic_store(&churn_stop, 0);
	for (int i = 0; i < N_BUSY; i++) {
		w[i] = (struct busy){c, 77ull * (uint64_t)(i + 1), 0};
		CHECK_EQ(pthread_create(&th[i], NULL, busy_main, &w[i]), 0);
	}
	for (int k = 0; k < 24; k++) {
		size_t a;
		void *q;
		kvpi_fault_inject(0, 1);
		q = kvp_bufcache_alloc(c, ((size_t)1 << 20) + (size_t)k * 4096, &a);
		CHECK(q != NULL);
		allocs++;
		kvp_bufcache_free(c, q, a); /* above the budget: back to the system */
	}
	kvpi_fault_inject(0, 0);
	atomic_store(&churn_stop, 1);
	for (int i = 0; i < N_BUSY; i++) {
		CHECK_EQ(pthread_join(th[i], NULL), 0);
		allocs += w[i].allocs;
	}
	for (int i = 0; i < N_PARKED; i++)
		unpark(&t[i]);
	s = stats(c);
	CHECK(s.oom_retries >= 1); /* each injected failure is one retry or one metadata failure */
	CHECK(s.evictions >= s.oom_retries);
	CHECK_EQ(s.hits + s.misses, allocs + N_PARKED * (8 + 1));
	CHECK_EQ(s.bytes_in_use, 0);
	CHECK_EQ(s.system_allocs - s.system_frees, s.cached_buffers);
	kvp_bufcache_destroy(c);
}

int main(void)
{
	RUN(oom_reaches_parked_front);
	RUN(oom_null_only_when_nothing_left);
	RUN(budget_reaches_parked_front);
	RUN(reservation_taken_back_instead_of_evicting);
	RUN(clear_and_destroy_reach_parked_fronts);
	RUN(thread_exit_parks_front);
	RUN(parked_buffers_evicted_before_live_ones);
	RUN(hit_rule_with_two_threads);
	RUN(short_lived_threads_and_clears);
	RUN(parked_fronts_absorb_oom_races);
	return 0;
}
