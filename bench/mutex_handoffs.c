/*
 * bench/mutex_handoffs.c - an LD_PRELOAD library that counts, per mutex,
 * how often it was taken and how often the taker was another thread than
 * the last one (a handoff: the mutex's line, and what it guards, moved
 * between cores).  bench/mutex_handoffs.sh builds it and runs a command
 * under it; at exit it prints the total and the mutexes with the most
 * handoffs, each with the return address of its last taker as an offset
 * into the executable (addr2line -f -e EXE OFFSET names the function).
 *
 * pthread_mutex_lock and pthread_mutex_trylock (when it succeeds) are
 * counted; a program that links its mutex calls statically is not seen.
 * A fixed open-addressing table of mutex addresses, filled with CAS: no
 * allocation inside the hooks.  Counts are exact; the "last taker"
 * exchange is racy only in which of two simultaneous takers is last.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#define SLOTS 65536u
#define TOP   24

struct ent {
	_Atomic(void *) m;
	_Atomic(void *) ra;
	_Atomic unsigned long locks, handoffs, last;
};

static struct ent tab[SLOTS];
static _Atomic unsigned long next_thread = 1;
static __thread unsigned long me;

static void note(void *m, void *ra)
{
	if (!me)
		me = atomic_fetch_add(&next_thread, 1);
	uint32_t h = (uint32_t)((((uintptr_t)m >> 3) * 0x9e3779b97f4a7c15ull) >> 48);
	for (uint32_t i = 0; i < SLOTS; i++) {
		struct ent *e = &tab[(h + i) % SLOTS];
		void *cur = atomic_load(&e->m);
		if (cur == NULL && atomic_compare_exchange_strong(&e->m, &cur, m))
			cur = m;
		if (cur != m)
			continue;
		atomic_fetch_add(&e->locks, 1);
		atomic_store(&e->ra, ra);
		unsigned long last = atomic_exchange(&e->last, me);
		if (last && last != me)
			atomic_fetch_add(&e->handoffs, 1);
		return;
	}
}

typedef int mutex_fn(pthread_mutex_t *);

/* Call libc's @name (looked up once into *@real) on @m; count it when it
 * took the mutex, for the caller at @ra. */
static int counted(const char *name, mutex_fn **real, pthread_mutex_t *m, void *ra)
{
	if (!*real)
		*real = (mutex_fn *)dlsym(RTLD_NEXT, name);
	int rc = (*real)(m);
	if (rc == 0)
		note(m, ra);
	return rc;
}

int pthread_mutex_lock(pthread_mutex_t *m)
{
	static mutex_fn *real;
	return counted("pthread_mutex_lock", &real, m, __builtin_return_address(0));
}

int pthread_mutex_trylock(pthread_mutex_t *m)
{
	static mutex_fn *real;
	return counted("pthread_mutex_trylock", &real, m, __builtin_return_address(0));
}

__attribute__((destructor)) static void report(void)
{
	unsigned long locks = 0, handoffs = 0;
	for (uint32_t i = 0; i < SLOTS; i++) {
		locks += tab[i].locks;
		handoffs += tab[i].handoffs;
	}
	fprintf(stderr, "mutex_handoffs: %lu locks, %lu handoffs\n", locks, handoffs);
	for (int k = 0; k < TOP; k++) {
		int best = -1;
		for (uint32_t i = 0; i < SLOTS; i++)
			if (tab[i].handoffs && (best < 0 || tab[i].handoffs > tab[best].handoffs))
				best = (int)i;
		if (best < 0)
			break;
		Dl_info di = {0};
		void *ra = atomic_load(&tab[best].ra);
		unsigned long off = dladdr(ra, &di) && di.dli_fbase
		                        ? (unsigned long)((char *)ra - (char *)di.dli_fbase)
		                        : (unsigned long)(uintptr_t)ra;
		fprintf(stderr, "mutex_handoffs: %p locks %lu handoffs %lu last taker %s+%#lx\n",
		        atomic_load(&tab[best].m), (unsigned long)tab[best].locks,
		        (unsigned long)tab[best].handoffs, di.dli_fname ? di.dli_fname : "?", off);
		tab[best].handoffs = 0;
	}
}
