/*
 * lib/base/rcu.c - liburcu-bp wrapper.
 *
 * One process-wide sync address stands for "a grace period": every reader
 * releases on it when it leaves its section and synchronize acquires on it
 * after the grace period.  Under TSan this turns liburcu's invisible
 * ordering into a happens-before edge from every finished reader to the
 * code that frees what readers saw; elsewhere it compiles to nothing.
 */
#include "lib/base/rcu.h"

#include <pthread.h>
#include <stddef.h>
#include <urcu/urcu-bp.h>

#include "lib/base/sysmem.h"
#include "lib/base/tsan.h"

_Static_assert(sizeof(struct rcu_head) <= KVPI_RCU_HEAD_BYTES, "rcu_head must fit its room");

static char grace_sync;

void kvpi_rcu_read_lock(void)
{
	urcu_bp_read_lock();
}

void kvpi_rcu_read_unlock(void)
{
	KVPI_TSAN_RELEASE(&grace_sync);
	urcu_bp_read_unlock();
}

void kvpi_rcu_synchronize(void)
{
	urcu_bp_synchronize_rcu();
	KVPI_TSAN_ACQUIRE(&grace_sync);
}

bool kvpi_rcu_read_ongoing(void)
{
	return urcu_bp_read_ongoing() != 0;
}

/* Runs on liburcu's call_rcu thread once every reader that could see the
 * memory has left its section. */
static void free_cb(struct rcu_head *head)
{
	KVPI_TSAN_ACQUIRE(&grace_sync);
	kvpi_sys_free(head);
}

void kvpi_rcu_free_deferred(void *p)
{
	urcu_bp_call_rcu((struct rcu_head *)p, free_cb);
}

static void call_cb(struct rcu_head *head)
{
	struct kvpi_rcu_cb *cb = (struct kvpi_rcu_cb *)head;
	KVPI_TSAN_ACQUIRE(&grace_sync);
	cb->fn(cb);
}

void kvpi_rcu_call(struct kvpi_rcu_cb *cb, void (*fn)(struct kvpi_rcu_cb *cb))
{
	_Static_assert(sizeof(cb->head) >= sizeof(struct rcu_head), "rcu_head must fit its room");
	cb->fn = fn;
	urcu_bp_call_rcu((struct rcu_head *)cb->head, call_cb);
}

static void *probe_thread(void *arg)
{
	return arg;
}

int kvpi_rcu_start_threads(void)
{
	/* liburcu aborts the process ("Unrecoverable error") when it cannot
	 * create one of its threads, so first see whether a thread can be
	 * created at all, and fail cleanly if not. */
	pthread_t t;
	if (pthread_create(&t, NULL, probe_thread, NULL) != 0)
		return -1;
	pthread_join(t, NULL);
	/* Creates the process's default call_rcu worker unless it exists; it
	 * lives until the process exits, so no later call_rcu starts one. */
	(void)urcu_bp_get_default_call_rcu_data();
	return 0;
}
