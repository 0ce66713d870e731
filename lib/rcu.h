/*
 * lib/rcu.h - the pool's RCU: liburcu's bulletproof flavor, TSan-annotated.
 *
 * The bp flavor registers a reader thread on its first read-side section
 * and unregisters it at thread exit by itself, so callers of kvpool never
 * see a registration step.  Read-side sections may nest and may block on a
 * mutex; kvp_rcu_synchronize must never be called inside one, nor while
 * holding a lock that a reader may wait for inside one.
 *
 *   function              who may call                 cost
 *   --------------------  ---------------------------  -----------------
 *   kvp_rcu_read_lock     any thread                   a few ns, no fence
 *   kvp_rcu_read_unlock   the thread that locked       a few ns
 *   kvp_rcu_synchronize   any thread outside sections  waits for readers
 */
#ifndef KVPOOL_LIB_RCU_H
#define KVPOOL_LIB_RCU_H

void kvp_rcu_read_lock(void);
void kvp_rcu_read_unlock(void);
void kvp_rcu_synchronize(void);

#endif /* KVPOOL_LIB_RCU_H */
