/*
 * lib/rcu.c - liburcu-bp wrapper.
 *
 * One process-wide sync address stands for "a grace period": every reader
 * releases on it when it leaves its section and synchronize acquires on it
 * after the grace period.  Under TSan this turns liburcu's invisible
 * ordering into a happens-before edge from every finished reader to the
 * code that frees what readers saw; elsewhere it compiles to nothing.
 */
#include "lib/rcu.h"

#include <urcu/urcu-bp.h>

#include "lib/tsan.h"

static char grace_sync;

void kvp_rcu_read_lock(void)
{
	urcu_bp_read_lock();
}

void kvp_rcu_read_unlock(void)
{
	KVP_TSAN_RELEASE(&grace_sync);
	urcu_bp_read_unlock();
}

void kvp_rcu_synchronize(void)
{
	urcu_bp_synchronize_rcu();
	KVP_TSAN_ACQUIRE(&grace_sync);
}
