/*
 * bench/suite/dpdk_peer.c - rte_mempool cases for the suite.
 *
 * A case context holds the pool and, for bulk cases, the bulk size; the
 * per-thread state is the thread's registration (and its object array).
 */
#define _GNU_SOURCE
#include "bench/suite/dpdk_peer.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_mempool.h>

#define MAX_BULK 1024

static int eal_state; /* 0 not tried, 1 up, -1 failed (main thread only) */
static const char *eal_why = "not initialised";

int kvb_dpdk_init(const char **why)
{
	char *argv[] = {
	    "kvpool-bench", "--no-huge", "--no-pci",       "--no-shconf",       "-l", "0",
	    "-m",           "512",       "--no-telemetry", "--log-level=error", NULL};
	cpu_set_t saved;
	int have_saved;

	if (eal_state == 0) {
		have_saved = sched_getaffinity(0, sizeof(saved), &saved) == 0;
		if (rte_eal_init((int)(sizeof(argv) / sizeof(argv[0])) - 1, argv) < 0) {
			eal_state = -1;
			eal_why = "rte_eal_init failed (see the EAL message above)";
		} else {
			eal_state = 1;
			eal_why = NULL;
		}
		/* The EAL pinned this thread to lcore 0's CPU: undo it, pin nothing. */
		if (have_saved)
			sched_setaffinity(0, sizeof(saved), &saved);
	}
	if (why)
		*why = eal_why;
	return eal_state == 1 ? 0 : -1;
}

void kvb_dpdk_cleanup(void)
{
	if (eal_state == 1)
		rte_eal_cleanup();
	eal_state = 0;
}

void *kvb_dpdk_pool(unsigned n, unsigned cache)
{
	static int seq;
	char name[RTE_MEMPOOL_NAMESIZE];

	if (eal_state != 1)
		return NULL;
	snprintf(name, sizeof(name), "kvb%d", seq++);
	return rte_mempool_create(name, n, KVB_DPDK_ELT_SIZE, cache, 0, NULL, NULL, NULL, NULL,
	                          SOCKET_ID_ANY, 0);
}

void kvb_dpdk_pool_free(void *pool)
{
	rte_mempool_free(pool);
}

unsigned kvb_dpdk_avail(void *pool)
{
	return rte_mempool_avail_count(pool);
}

typedef struct dctx {
	struct rte_mempool *mp;
	unsigned k;
} dctx;

typedef struct dtls {
	int registered;
	void *objs[MAX_BULK];
} dtls;

static void *d_setup(void *ctx, int tid)
{
	dtls *t = calloc(1, sizeof(*t));

	(void)ctx, (void)tid;
	if (!t)
		return NULL;
	/* An lcore id for this thread, hence its own mempool cache. */
	t->registered = rte_thread_register() == 0;
	if (!t->registered)
		kvb_fail("rte_thread_register", rte_errno);
	return t;
}

static void d_teardown(void *ctx, void *tls, int tid)
{
	dtls *t = tls;

	(void)ctx, (void)tid;
	if (t && t->registered)
		rte_thread_unregister();
	free(t);
}

static uint64_t d_run_getput(void *ctx, void *tls, int tid, const atomic_int *stop)
{
	struct rte_mempool *mp = ((dctx *)ctx)->mp;
	uint64_t ops = 0;
	void *o;

	(void)tid;
	if (!tls)
		return 0;
	KVB_LOOP(stop, ops, {
		if (rte_mempool_get(mp, &o) != 0) {
			kvb_fail("rte_mempool_get", -1);
			return ops;
		}
		KVB_ESCAPE(o);
		rte_mempool_put(mp, o);
	});
	return ops;
}

static uint64_t d_run_bulk(void *ctx, void *tls, int tid, const atomic_int *stop)
{
	struct rte_mempool *mp = ((dctx *)ctx)->mp;
	unsigned k = ((dctx *)ctx)->k;
	dtls *t = tls;
	uint64_t ops = 0;

	(void)tid;
	if (!t)
		return 0;
	KVB_LOOP(stop, ops, {
		if (rte_mempool_get_bulk(mp, t->objs, k) != 0) {
			kvb_fail("rte_mempool_get_bulk", -1);
			return ops;
		}
		KVB_ESCAPE(t->objs[0]);
		rte_mempool_put_bulk(mp, t->objs, k);
	});
	return ops;
}

static dctx *new_ctx(void *pool, unsigned k)
{
	dctx *d = kvb_ctx_alloc(sizeof(*d));

	d->mp = pool;
	d->k = k;
	return d;
}

void kvb_dpdk_case_getput(kvb_case *c, void *pool)
{
	*c = (kvb_case){
	    .setup = d_setup, .run = d_run_getput, .teardown = d_teardown, .ctx = new_ctx(pool, 1)};
}

void kvb_dpdk_case_bulk(kvb_case *c, void *pool, unsigned k)
{
	*c = (kvb_case){.setup = d_setup,
	                .run = d_run_bulk,
	                .teardown = d_teardown,
	                .ctx = new_ctx(pool, k > MAX_BULK ? MAX_BULK : k)};
}
