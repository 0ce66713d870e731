/*
 * lib/base/rcu.h - the pool's RCU: liburcu's bulletproof flavor, TSan-annotated.
 *
 * The bp flavor registers a reader thread on its first read-side section
 * and unregisters it at thread exit by itself, so callers of kvpool never
 * see a registration step.  Read-side sections may nest and may block on a
 * mutex; kvpi_rcu_synchronize must never be called inside one, nor while
 * holding a lock that a reader may wait for inside one.
 *
 *   function              who may call                 cost
 *   --------------------  ---------------------------  -----------------
 *   kvpi_rcu_read_lock     any thread                   a few ns, no fence
 *   kvpi_rcu_read_unlock   the thread that locked       a few ns
 *   kvpi_rcu_synchronize   any thread outside sections  waits for readers
 *                         and holding no lock a
 *                         reader may wait for
 *   kvpi_rcu_free_deferred any thread, anywhere         never waits (call_rcu)
 *   kvpi_rcu_call          any thread, anywhere         never waits (call_rcu)
 *
 * The block pool's own paths use none of these: its block table never
 * moves, so nothing a pool call reads is freed before kvp_pool_destroy.
 * The prefix cache (lib/prefix/, pools made with prefix_cache) uses them
 * for its key index: lookups run in read-side sections, and a replaced
 * table is retired with kvpi_rcu_call.  Note two things liburcu does.
 * liburcu-bp registers a thread on its first read-side section or
 * read_ongoing query, by mapping memory.  The first call_rcu starts a
 * worker thread.  liburcu aborts the process if either fails.
 */
#ifndef KVPOOL_LIB_RCU_H
#define KVPOOL_LIB_RCU_H

#include <stdbool.h>

void kvpi_rcu_read_lock(void);
void kvpi_rcu_read_unlock(void);
void kvpi_rcu_synchronize(void);

/** kvpi_rcu_read_ongoing - whether the calling thread is inside a read-side section */
bool kvpi_rcu_read_ongoing(void);

/**
 * kvpi_rcu_free_deferred - free @p (from kvpi_sys_alloc) after a grace period
 *
 * Never blocks, so it may be called anywhere, a read-side section included.
 * @p must start with KVPI_RCU_HEAD_BYTES bytes the callback may use.
 */
#define KVPI_RCU_HEAD_BYTES 16
void kvpi_rcu_free_deferred(void *p);

/* Room for liburcu's rcu_head and the function to run after a grace period. */
struct kvpi_rcu_cb {
	void *head[KVPI_RCU_HEAD_BYTES / sizeof(void *)];
	void (*fn)(struct kvpi_rcu_cb *cb);
};

/**
 * kvpi_rcu_call - run @fn(@cb) on liburcu's call_rcu thread after a grace period
 *
 * Never blocks.  TSan is told that every read-side section that ended
 * before the grace period happens-before @fn.
 */
void kvpi_rcu_call(struct kvpi_rcu_cb *cb, void (*fn)(struct kvpi_rcu_cb *cb));

/**
 * kvpi_rcu_start_threads - make liburcu's call_rcu worker exist, or fail
 *
 * liburcu starts its call_rcu worker lazily, at the first call_rcu.  It
 * aborts the process if pthread_create fails then.  The pool makes no
 * cds_lfht, so that worker is the only thread liburcu runs for it.  This
 * function first creates and joins a trivial thread.  If that fails it
 * returns -1, having done nothing else.  It then has liburcu create the
 * default call_rcu worker, which lives for the rest of the process.  So
 * later kvpi_rcu_call and kvpi_rcu_free_deferred never start a thread.
 * Call it before the first call_rcu could happen.  Returns 0 on success.
 *
 * Two windows remain:
 *   - Another thread of the process may reach a thread limit between the
 *     probe and liburcu's own pthread_create.  That still aborts.  The
 *     window spans one creation, in this same call.
 *   - After fork() the child has no call_rcu worker until liburcu restarts
 *     it (urcu_bp_call_rcu_after_fork_child).
 */
int kvpi_rcu_start_threads(void);

#endif /* KVPOOL_LIB_RCU_H */
