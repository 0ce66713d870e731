/*
 * tests/pool_membarrier_denied_test.c - membarrier denied after create.
 *
 * A pool probes membarrier once, at creation.  A process may deny it later
 * (a sandbox entered after start-up, a library installing a seccomp filter
 * for all threads).  Every call that needs the heavy barrier - a bias
 * revocation, a magazine drain, a shrink - must then still return, and the
 * pool must stay exact.  The filter cannot be removed, so this test is a
 * program of its own; seccomp with PR_SET_NO_NEW_PRIVS needs no privilege.
 * Under TSan the pool never uses membarrier, so there it checks only that
 * the same calls are correct.  An alarm turns a hang into a failure.
 */
#define _GNU_SOURCE
#include <kvpool/kvpool.h>

#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "tests/seccomp_testutil.h"
#include "tests/testutil.h"

#define N_BLOCKS 64
#define OWNER    42

static kvp_pool *P;
static _Atomic int stage;

/* Owns OWNER (its record is biased to this thread) and keeps freed blocks
 * in its magazine, then idles until main is done. */
static void *biased_thread(void *arg)
{
	(void)arg;
	kvp_ref r[8];
	size_t n;
	CHECK_EQ(kvp_allocate(P, KVP_KV, 16 * 8, 7, KVP_FP16, r, 8, &n), KVP_OK);
	CHECK_EQ(kvp_free_all(P, 7), KVP_OK); /* 8 blocks in this thread's magazine */
	CHECK_EQ(kvp_allocate(P, KVP_KV, 16 * 4, OWNER, KVP_FP16, r, 8, &n), KVP_OK);
	atomic_store(&stage, 1);
	while (atomic_load(&stage) != 2)
		usleep(1000);
	return NULL;
}

struct churn {
	int id;
	uint64_t seed;
};

/* Allocate and free for two owners shared by all churn threads. */
static void *churn_thread(void *arg)
{
	struct churn *c = arg;
	kvp_ref r[4];
	size_t n;
	for (int i = 0; i < 3000; i++) {
		kvp_owner o = 100 + tu_rand(&c->seed) % 2;
		/* At most 6 of 56 blocks are ever in use: never exhausted. */
		CHECK_EQ(kvp_allocate(P, KVP_KV, 16 * 2, o, KVP_FP16, r, 4, &n), KVP_OK);
		CHECK_EQ(kvp_free(P, r, n), KVP_OK);
	}
	return NULL;
}

static void test_calls_return_after_membarrier_denied(void)
{
	kvp_pool_config c;
	kvp_pool_config_init(&c);
	c.separate_kv = false;
	c.n_blocks = N_BLOCKS;
	c.thread_cache = 16;
	CHECK_EQ(kvp_pool_create(&c, &P), KVP_OK);
	pthread_t t;
	CHECK_EQ(pthread_create(&t, NULL, biased_thread, NULL), 0);
	while (atomic_load(&stage) != 1)
		usleep(1000);

	tu_deny_membarrier();
	alarm(60); /* a hang (the bug) kills the test */

	/* A revocation: the record is biased to the other thread. */
	kvp_ref refs[N_BLOCKS];
	size_t n;
	CHECK_EQ(kvp_blocks_for(P, OWNER, refs, N_BLOCKS, &n), KVP_OK);
	CHECK_EQ(n, 4);
	CHECK_EQ(kvp_free_all(P, OWNER), KVP_OK);
	/* Every block: drains the other thread's magazine (no false exhaustion). */
	CHECK_EQ(kvp_allocate(P, KVP_KV, 16 * N_BLOCKS, 1, KVP_FP16, refs, N_BLOCKS, &n), KVP_OK);
	CHECK_EQ(n, N_BLOCKS);
	CHECK_EQ(kvp_free_all(P, 1), KVP_OK);
	uint32_t k = 0;
	CHECK_EQ(kvp_shrink(P, KVP_KV, N_BLOCKS - 8, &k), KVP_OK);
	CHECK_EQ(k, 8);

	/* Threads sharing owners revoke each other's bias over and over. */
	pthread_t ct[3];
	struct churn cs[3];
	for (int i = 0; i < 3; i++) {
		cs[i] = (struct churn){i, 0x1234567ull * (i + 1)};
		CHECK_EQ(pthread_create(&ct[i], NULL, churn_thread, &cs[i]), 0);
	}
	for (int i = 0; i < 3; i++)
		CHECK_EQ(pthread_join(ct[i], NULL), 0);
	CHECK_EQ(kvp_n_free(P, KVP_KV), N_BLOCKS - 8);
	kvp_stats s;
	CHECK_EQ(kvp_pool_stats(P, &s), KVP_OK);
	CHECK_EQ(kvp_stats_blocks_in_use(&s), 0);
	/* And all of it once more, drain included. */
	CHECK_EQ(kvp_allocate(P, KVP_KV, 16 * (N_BLOCKS - 8), 1, KVP_FP16, refs, N_BLOCKS, &n),
	         KVP_OK);
	CHECK_EQ(kvp_free_all(P, 1), KVP_OK);

	atomic_store(&stage, 2);
	CHECK_EQ(pthread_join(t, NULL), 0);
	alarm(0);
	kvp_pool_destroy(P);
}

int main(void)
{
	RUN(test_calls_return_after_membarrier_denied);
	return 0;
}
