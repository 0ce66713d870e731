/*
 * lib/base/barrier.h - the heavy side of kvpool's asymmetric Dekker pairs.
 *
 * Several structures pair a frequent side (a thread entering its own block
 * magazine, owner record or buffer-cache front) with a rare side (a thread
 * that must take that state over: a drainer, a revoker, a claimer).  Each
 * side stores its own word, then loads the other's; at least one must see
 * the other.  Two ways to make that hold:
 *
 * - symmetric: both sides store and load seq_cst (the frequent side pays
 *   an xchg per entry);
 * - asymmetric: the frequent side stores relaxed or release, with only a
 *   compiler barrier before its load; the rare side calls
 *   kvpi_barrier_heavy() between its seq_cst store and its loads.  The
 *   heavy barrier runs a full fence on every CPU running one of our
 *   threads.  So either the frequent side's store was visible before it.
 *   Or the frequent side's later load comes after it, and sees the rare
 *   side's store.
 *
 * One policy for the whole library, applied when an object (a pool, a
 * buffer cache) is made, by kvpi_barrier_asym_ok():
 * - never under ThreadSanitizer, which cannot model the asymmetric pair;
 * - never when the environment has KVPOOL_FORCE_FALLBACK=1 at that moment
 *   (read at each call: a process may make objects of both kinds);
 * - otherwise only if the kernel offers MEMBARRIER_CMD_PRIVATE_EXPEDITED,
 *   this process could register for it, and the fallback page below could
 *   be mapped (both decided once per process).
 *
 * The heavy barrier is membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED).  That
 * call may fail after start-up, e.g. when a seccomp filter is installed
 * later.  The barrier then switches for good to an mprotect TLB shootdown
 * of one process-wide page, which gives the same guarantee (barrier.c).  So
 * the frequent sides' protocol never changes.
 *
 * Synchronization:
 *
 *   function                 may run concurrently with   progress
 *   -----------------------  --------------------------  ---------------------------
 *   kvpi_barrier_asym_ok     everything                  once-init on first call
 *   kvpi_barrier_heavy       everything                  a system call; after
 *                                                        membarrier failed, one
 *                                                        process-wide mutex (a leaf)
 */
#ifndef KVPOOL_LIB_BASE_BARRIER_H
#define KVPOOL_LIB_BASE_BARRIER_H

#include <stdbool.h>

/**
 * kvpi_barrier_asym_ok - whether an object made now may use the asymmetric protocols
 *
 * Returns false under ThreadSanitizer, when KVPOOL_FORCE_FALLBACK=1 is set,
 * or when membarrier or the fallback page is not available.  Thread-safe.
 */
bool kvpi_barrier_asym_ok(void);

/**
 * kvpi_barrier_heavy - full barrier on every CPU running one of this process's threads
 *
 * Only for objects made while kvpi_barrier_asym_ok() returned true (it
 * registered the process).  membarrier, or the mprotect shootdown once
 * membarrier has failed.  Never fails, never aborts.  Thread-safe.
 */
void kvpi_barrier_heavy(void);

/**
 * kvpi_barrier_denied - whether the heavy barrier has switched to its fallback
 *
 * For tests and reports: true once membarrier failed after start-up.
 */
bool kvpi_barrier_denied(void);

#endif /* KVPOOL_LIB_BASE_BARRIER_H */
