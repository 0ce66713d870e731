/*
 * tests/bufcache_membarrier_denied_test.c - membarrier denied after the cache is in use.
 *
 * A buffer cache picks its claim protocol when it is made (lib/base/barrier.h).
 * A process may deny membarrier later (a sandbox entered after start-up, a
 * library installing a seccomp filter for all threads).  Every call that
 * claims other threads' fronts - clear, an eviction that finds the caller's
 * front and the shared tier empty, an allocation retried after the system
 * failed, a free that takes back other fronts' reservations - must then
 * still return, reach every front (idle or busy owners alike), and lose no
 * buffer.  The filter cannot be removed, so this test is a program of its
 * own; seccomp with PR_SET_NO_NEW_PRIVS needs no privilege.  Under TSan the
 * cache never uses membarrier, so there it checks only that the same calls
 * are correct.  An alarm turns a hang into a failure.
 */
#define _GNU_SOURCE
#include <kvpool/bufcache.h>

#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "lib/testing/barrier.h"
#include "lib/testing/fault.h"
#include "tests/seccomp_testutil.h"
#include "tests/testutil.h"

#define N_PARKED 24 /* buffers an idle thread keeps in its front */
#define N_CHURN  2

static kvp_bufcache *C;
static _Atomic int stage;    /* 1: parked thread ready; 2: let it refill; 3: done */
static _Atomic int refilled; /* the parked thread refilled its front (count of rounds) */
static _Atomic int churn_stop;

/* Fill the calling thread's front with N_PARKED buffers of 1000..24000 bytes. */
static void fill_front(void)
{
	void *p[N_PARKED];
	size_t a[N_PARKED];

	for (int i = 0; i < N_PARKED; i++) {
		p[i] = kvp_bufcache_alloc(C, 1000 * (size_t)(i + 1), &a[i]);
		CHECK(p[i] != NULL);
	}
	for (int i = 0; i < N_PARKED; i++)
		kvp_bufcache_free(C, p[i], a[i]);
}

/* Keeps buffers in its front and idles, alive, while main claims them; twice. */
static void *idle_thread(void *arg)
{
	(void)arg;
	fill_front();
	atomic_store(&stage, 1);
	while (atomic_load(&stage) != 2)
		usleep(1000);
	fill_front();
	atomic_fetch_add(&refilled, 1);
	while (atomic_load(&stage) != 3)
		usleep(1000);
	return NULL;
}

/* Inside its front all the time: claims must wait out its calls, not hang. */
static void *churn_thread(void *arg)
{
	uint64_t seed = (uint64_t)(uintptr_t)arg * 0x9e3779b97f4a7c15ull + 1;
	while (!atomic_load(&churn_stop)) {
		/* Larger than any of the idle thread's buffers (at most 27 KiB):
		 * what the clear moves out of that front is never a fit here, so
		 * it can only go back to the system. */
		size_t a, n = 30000 + tu_rand(&seed) % 20000;
		void *p = kvp_bufcache_alloc(C, n, &a);
		CHECK(p != NULL);
		memset(p, 0xab, 64);
		kvp_bufcache_free(C, p, a);
	}
	return NULL;
}

static kvp_bufcache_stats stats(void)
{
	kvp_bufcache_stats s;
	CHECK_EQ(kvp_bufcache_get_stats(C, &s), KVP_OK);
	return s;
}

static void test_claims_return_after_membarrier_denied(void)
{
	pthread_t idle, churn[N_CHURN];

	/* A budget the churn never reaches: an eviction would take the idle
	 * thread's small buffers first, before the clear this test counts
	 * (it did on a quiet machine, where the churn runs fastest). */
	CHECK_EQ(kvp_bufcache_create(1u << 30, &C), KVP_OK);
	/* What the cache was made with: the asymmetric protocol, except under TSan. */
	bool asym = kvpi_barrier_asym_ok();
	CHECK_EQ(pthread_create(&idle, NULL, idle_thread, NULL), 0);
	while (atomic_load(&stage) != 1)
		usleep(1000);
	for (long i = 0; i < N_CHURN; i++)
		CHECK_EQ(pthread_create(&churn[i], NULL, churn_thread, (void *)(i + 1)), 0);
	usleep(20000); /* the cache in use by every thread */

	tu_deny_membarrier();
	alarm(60); /* a hang (the bug) kills the test */

	/* clear claims every front, the churning ones inside their calls included. */
	uint64_t frees0 = stats().system_frees;
	kvp_bufcache_clear(C);
	/* The idle thread's N_PARKED buffers went back to the system, at least. */
	CHECK(stats().system_frees - frees0 >= N_PARKED);
	/* The claim needed the heavy barrier, which switched to its fallback
	 * (TSan builds never use the asymmetric protocol: asym_ok is false). */
	CHECK(!asym || kvpi_barrier_denied());

	/* Out of memory: a miss whose system allocation fails evicts from the
	 * other fronts (claimed) and retries, while the churn goes on. */
	atomic_store(&stage, 2);
	while (atomic_load(&refilled) != 1)
		usleep(1000);
	for (int k = 0; k < 20; k++) {
		size_t a;
		kvpi_fault_inject(0, 1);
		void *p = kvp_bufcache_alloc(C, 100000 + (size_t)k * 4096, &a);
		kvpi_fault_inject(0, 0);
		CHECK(p != NULL); /* something was always left to evict */
		kvp_bufcache_free(C, p, a);
	}

	atomic_store(&churn_stop, 1);
	for (int i = 0; i < N_CHURN; i++)
		CHECK_EQ(pthread_join(churn[i], NULL), 0);
	/* No buffer lost: quiescent, every buffer from the system is cached or
	 * was given back, and a clear gives back every one. */
	kvp_bufcache_stats s = stats();
	CHECK_EQ(s.bytes_in_use, 0);
	CHECK_EQ(s.system_allocs - s.system_frees, s.cached_buffers);
	kvp_bufcache_clear(C);
	s = stats();
	CHECK_EQ(s.cached_buffers, 0);
	CHECK_EQ(s.cached_bytes, 0);
	CHECK_EQ(s.system_allocs, s.system_frees);

	atomic_store(&stage, 3);
	CHECK_EQ(pthread_join(idle, NULL), 0);
	alarm(0);
	kvp_bufcache_destroy(C);
}

int main(void)
{
	RUN(test_claims_return_after_membarrier_denied);
	return 0;
}
