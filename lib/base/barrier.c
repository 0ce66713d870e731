/*
 * lib/base/barrier.c - membarrier registration, the fallback switch, the heavy barrier.
 *
 * Why one module: the block pool and the buffer cache both pair a frequent
 * side with a rare one (lib/base/barrier.h).  Each once had its own copy of
 * the registration and the barrier, and the copies drifted (one ignored the
 * environment switch and the syscall's failure).  Here is the only one.
 *
 * Registration happens once per process, on the first kvpi_barrier_asym_ok
 * call: MEMBARRIER_CMD_QUERY must list both PRIVATE_EXPEDITED commands,
 * REGISTER_PRIVATE_EXPEDITED must succeed, and the page for the fallback
 * must map.  Only then may objects use the asymmetric protocols; failure
 * costs only speed (they use seq_cst on both sides).
 *
 * The fallback after start-up, the TLB-shootdown trick: the page is dirtied
 * so its entry is present, then made read-only.  The kernel must flush that
 * entry from every CPU that may cache it, i.e. every CPU currently running a
 * thread of the process, and does so with an IPI whose handler serializes
 * the CPU, draining its store buffer, before mprotect returns: the same
 * guarantee as MEMBARRIER_CMD_PRIVATE_EXPEDITED.  CPUs not running the
 * process drained theirs at the context switch.  The page is mlock'ed where
 * the limit allows, so it cannot be swapped out between the write and the
 * mprotect (which would leave no entry to flush); the mutex keeps one
 * caller's write out of another's read-only window.  mprotect on a page we
 * mapped has no failure mode but ENOMEM for splitting a mapping, which one
 * whole page never needs; should it fail anyway we retry.
 */
#define _GNU_SOURCE
#include "lib/base/barrier.h"

#include <linux/membarrier.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "lib/base/tsan.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static bool registered;     /* written once under `once`, read after it */
static _Atomic bool failed; /* membarrier failed after registration */
static pthread_mutex_t flush_lock = PTHREAD_MUTEX_INITIALIZER;
static void *flush_page;
static size_t flush_page_len;

static long sys_membarrier(int cmd)
{
	return syscall(SYS_membarrier, cmd, 0, 0);
}

static void setup(void)
{
#ifndef KVPI_TSAN
	long cmds = sys_membarrier(MEMBARRIER_CMD_QUERY);
	if (cmds < 0 || !(cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) ||
	    !(cmds & MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED))
		return;
	long pg = sysconf(_SC_PAGESIZE);
	size_t len = pg > 0 ? (size_t)pg : 4096;
	void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return;
	if (sys_membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) != 0) {
		munmap(m, len);
		return;
	}
	(void)mlock(m, len); /* best effort: see the top of this file */
	flush_page = m;      /* kept for the life of the process */
	flush_page_len = len;
	registered = true;
#endif
}

bool kvpi_barrier_asym_ok(void)
{
	const char *env = getenv("KVPOOL_FORCE_FALLBACK");
	if (env && env[0] == '1')
		return false;
	pthread_once(&once, setup); /* under TSan it registers nothing: false */
	return registered;
}

static void tlb_shootdown_barrier(void)
{
	pthread_mutex_lock(&flush_lock);
	for (;;) {
		*(volatile char *)flush_page = 1;
		if (mprotect(flush_page, flush_page_len, PROT_READ) == 0 &&
		    mprotect(flush_page, flush_page_len, PROT_READ | PROT_WRITE) == 0)
			break;
		/* If the first call failed nothing changed; if the second did,
		 * the page is read-only and the write above must not run until
		 * it is writable again. */
		while (mprotect(flush_page, flush_page_len, PROT_READ | PROT_WRITE) != 0)
			sched_yield();
	}
	pthread_mutex_unlock(&flush_lock);
}

void kvpi_barrier_heavy(void)
{
	/* Callers made their object while asym_ok was true: setup ran and
	 * registered (pthread_once's return ordered its writes for them). */
	if (!registered)
		return;
	/* relaxed: only picks which of two complete barriers runs. */
	if (!atomic_load_explicit(&failed, memory_order_relaxed)) {
		/* It fails only if something (a seccomp filter) denies it after
		 * registration.  Then switch for good: the other barrier is
		 * equivalent, so threads inside a frequent side mid-switch are
		 * covered either way. */
		if (sys_membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0)
			return;
		/* relaxed: as the load above. */
		atomic_store_explicit(&failed, true, memory_order_relaxed);
	}
	tlb_shootdown_barrier();
}

bool kvpi_barrier_denied(void)
{
	/* relaxed: a report. */
	return atomic_load_explicit(&failed, memory_order_relaxed);
}
