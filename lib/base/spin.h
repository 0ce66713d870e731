/*
 * lib/base/spin.h - the one back-off policy of every wait loop in kvpool.
 *
 * kvpool waits only where another thread is inside a short, bounded window
 * (an owner finishing a pool call, a drainer emptying a magazine, a pusher
 * between its CAS and its count, a reader leaving a hazard slot).  Such a
 * window ends within a few dozen instructions unless its thread was
 * preempted; on a machine with more runnable threads than cores that is
 * common, so spinning long is wasted.  The policy (as ConcurrencyKit's
 * ck_backoff, but bounded): pause the CPU for the first KVPI_SPIN_PAUSES
 * rounds, then give the core away with sched_yield() on every round after,
 * so a preempted thread gets to run and finish its window.
 *
 *   function          who may call                 cost
 *   ----------------  ---------------------------  ------------------------
 *   kvpi_cpu_relax    any thread                   one pause instruction
 *   kvpi_spin_wait    the thread owning @s         a pause, or a sched_yield
 *   kvpi_mutex_lock_  any thread                   trylock and pause, then
 *   spin                                           pthread_mutex_lock
 */
#ifndef KVPOOL_LIB_BASE_SPIN_H
#define KVPOOL_LIB_BASE_SPIN_H

#include <pthread.h>
#include <sched.h>

/* Rounds of pause before the loop starts yielding: about 1-5 us of spinning. */
#define KVPI_SPIN_PAUSES 128u

/* A waiter's state: how many rounds it has waited.  Start at {0}. */
struct kvpi_spin {
	unsigned n;
};

/** kvpi_cpu_relax - tell the CPU we are spinning (frees the sibling hyperthread) */
static inline void kvpi_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

/**
 * kvpi_spin_wait - one round of waiting for another thread's bounded window
 * @s: this wait's state
 *
 * Pauses for the first KVPI_SPIN_PAUSES rounds, then yields the core each
 * round.  The caller re-checks its condition after every call.
 */
static inline void kvpi_spin_wait(struct kvpi_spin *s)
{
	if (s->n < KVPI_SPIN_PAUSES) {
		s->n++;
		kvpi_cpu_relax();
		return;
	}
	sched_yield();
}

/**
 * kvpi_mutex_lock_spin - take @m, spinning briefly before sleeping
 * @m: a mutex whose holders keep it for a short, bounded window
 *
 * Tries the lock for KVPI_SPIN_PAUSES rounds of pause, then waits in
 * pthread_mutex_lock.  Two threads that meet on such a mutex otherwise pay
 * a futex sleep and wake-up, which costs many times the window.  Any
 * thread; the lock order is the mutex's own.
 */
static inline void kvpi_mutex_lock_spin(pthread_mutex_t *m)
{
	struct kvpi_spin spin = {0};
	while (pthread_mutex_trylock(m) != 0) {
		if (spin.n >= KVPI_SPIN_PAUSES) {
			pthread_mutex_lock(m);
			return;
		}
		kvpi_spin_wait(&spin);
	}
}

#endif /* KVPOOL_LIB_BASE_SPIN_H */
