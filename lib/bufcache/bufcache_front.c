/*
 * lib/bufcache/bufcache_front.c - finding a thread's front, claiming fronts, giving them back.
 *
 * A thread keeps a short list of {cache, uid, front} entries in thread-local
 * storage; the first entry is found with two comparisons in the common case
 * of one cache.  The uid guards against a cache destroyed and another
 * created at the same address.
 *
 * Thread exit against cache destruction: a process-wide registry of live
 * caches, under one mutex, decides (as for the block pool's slots).  The
 * thread-exit destructor holds the registry lock while it empties its
 * fronts of the caches still alive; kvp_bufcache_destroy takes the cache out
 * of the registry under the same lock before freeing anything.  Neither is
 * on the hit path: the lock is taken once per thread per cache at first use,
 * and at thread exit.
 */
#define _GNU_SOURCE
#include "lib/base/spin.h"
#include "lib/bufcache/bufcache_front.h"

#include <linux/membarrier.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "lib/bufcache/bufcache_internal.h"
#include "lib/base/sysmem.h"

/* initial-exec: one instruction to reach it (see lib/pool/tslot.c). */
__thread struct kvpi_bc_tls_ent *kvpi_bc_tls_head __attribute__((tls_model("initial-exec")));
/* The cache for which this thread last failed to make a front: not retried per call. */
static __thread uint64_t nofront_uid __attribute__((tls_model("initial-exec")));

#ifndef KVP_TSAN
int kvpi_bc_front_asym;
#endif

static pthread_key_t tls_key;
static pthread_once_t setup_once = PTHREAD_ONCE_INIT;
static int tls_key_ok;

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static kvp_bufcache *reg_head;

static void tls_destructor(void *unused);

static void setup(void)
{
	tls_key_ok = kvpi_sys_key_create(&tls_key, tls_destructor) == 0;
#ifndef KVP_TSAN
	kvpi_bc_front_asym =
	    syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
#endif
}

void kvpi_bc_front_setup(void)
{
	pthread_once(&setup_once, setup);
}

void kvpi_bc_front_registry_add(kvp_bufcache *c)
{
	pthread_mutex_lock(&reg_lock);
	c->reg_next = reg_head;
	reg_head = c;
	pthread_mutex_unlock(&reg_lock);
}

void kvpi_bc_front_registry_remove(kvp_bufcache *c)
{
	pthread_mutex_lock(&reg_lock);
	kvp_bufcache **pp = &reg_head;
	while (*pp && *pp != c)
		pp = &(*pp)->reg_next;
	if (*pp)
		*pp = c->reg_next;
	pthread_mutex_unlock(&reg_lock);
}

/* Registry lock held. */
static int registry_alive(const kvp_bufcache *c, uint64_t uid)
{
	for (kvp_bufcache *p = reg_head; p; p = p->reg_next)
		if (p == c && p->uid == uid)
			return 1;
	return 0;
}

struct kvpi_bc_front *kvpi_bc_front_alloc(void)
{
	struct kvpi_bc_front *f = kvpi_sys_calloc(1, sizeof(*f), 64);

	/* Zeroed memory: IDLE, unclaimed, empty, untaken (valid atomics on this ABI). */
	return f;
}

/* Full barrier on every CPU running one of our threads (asymmetric protocol). */
static void barrier_all(void)
{
#ifndef KVP_TSAN
	if (kvpi_bc_front_asym)
		syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
#endif
}

/*
 * Empty a held front: buffers (with @buffers) to the shared tier, the unused
 * reservation back to the budget.  Buffers that find no shared node are
 * chained on *@rejects (through their first word) for the caller to give
 * back to the system once it holds no front.  Returns buffers moved + 1 if
 * a reservation came back.
 */
static uint64_t empty_front(kvp_bufcache *c, struct kvpi_bc_front *f, int buffers, void **rejects)
{
	uint64_t moved = 0;

	while (buffers && f->l1) {
		long cls = kvpi_bc_front_find(f, 0);
		void *p = kvpi_bc_front_pop(f, (size_t)cls);
		if (!kvpi_bc_shared_put(c, p, kvpi_bc_front_cap((size_t)cls))) {
			((void **)p)[0] = *rejects; /* the chain and the capacity, in the buffer */
			((size_t *)p)[1] = kvpi_bc_front_cap((size_t)cls);
			*rejects = p;
		}
		moved++;
	}
	size_t res = kvpi_bc_front_get(&f->reserve);
	if (res) {
		kvpi_bc_unreserve(c, res);
		kvpi_bc_front_set(&f->reserve, 0);
		moved++;
	}
	return moved;
}

/* Give back buffers chained by empty_front (their bytes are still reserved). */
static void release_rejects(kvp_bufcache *c, struct kvpi_bc_front *me, void *p)
{
	while (p) {
		void *next = *(void **)p;
		/* The capacity travels in the second word (empty_front). */
		size_t cap = ((size_t *)p)[1];
		kvpi_bc_unreserve(c, cap);
		kvpi_bc_release_to_system(c, me, p, cap);
		p = next;
	}
}

static int worth_claiming(struct kvpi_bc_front *f, int buffers)
{
	/* Relaxed: a hint; a buffer put in after this look is a later free. */
	return (buffers && atomic_load_explicit(&f->nbufs, memory_order_relaxed)) ||
	       kvpi_bc_front_get(&f->reserve);
}

uint64_t kvpi_bc_fronts_drain(kvp_bufcache *c, struct kvpi_bc_front *me, int buffers)
{
	/* Acquire: see each front's initial state as published by its push. */
	struct kvpi_bc_front *head = atomic_load_explicit(&c->fronts, memory_order_acquire);
	void *rejects = NULL;
	uintptr_t token = (uintptr_t)&rejects; /* unique among live drainers */
	int any = 0, busy_elsewhere = 0;

	for (struct kvpi_bc_front *f = head; f; f = f->next) {
		if (!worth_claiming(f, buffers))
			continue;
		uintptr_t exp = 0;
		/* seq_cst: the claimer's store half of the Dekker pair (see the header);
		 * relaxed on failure: another drainer holds it, we only note that. */
		if (atomic_compare_exchange_strong_explicit(
		        &f->claim, &exp, token, memory_order_seq_cst, memory_order_relaxed)) {
			any = 1;
		} else {
			busy_elsewhere = 1;
		}
	}
	if (any)
		barrier_all();
	uint64_t moved = 0;
	for (struct kvpi_bc_front *f = head; f; f = f->next) {
		/* Relaxed: only our own CAS above stored our token. */
		if (atomic_load_explicit(&f->claim, memory_order_relaxed) != token)
			continue;
		struct kvpi_spin spin = {0};
		/* seq_cst: the claimer's load half; acquire: the owner's last writes. */
		while (atomic_load_explicit(&f->state, memory_order_seq_cst) != KVPI_BC_FRONT_IDLE)
			kvpi_spin_wait(&spin);
		moved += empty_front(c, f, buffers, &rejects);
		/* Release: the owner's next enter (acquire) sees the emptied front. */
		atomic_store_explicit(&f->claim, 0, memory_order_release);
	}
	/* Fronts another drainer held: wait until it is done, holding nothing ourselves
	 * (bounded: a drainer holds a front for one empty_front). */
	for (struct kvpi_bc_front *f = head; busy_elsewhere && f; f = f->next) {
		struct kvpi_spin spin = {0};
		/* Acquire: pairs with that drainer's release of the claim, so what
		 * it moved to the shared tier is visible when we return. */
		while (atomic_load_explicit(&f->claim, memory_order_acquire))
			kvpi_spin_wait(&spin);
	}
	release_rejects(c, me, rejects);
	return moved;
}

size_t kvpi_bc_fronts_reserve_sum(kvp_bufcache *c, struct kvpi_bc_front *me)
{
	size_t sum = 0;

	/* Acquire: as in kvpi_bc_fronts_drain (the list's fronts initialised). */
	for (struct kvpi_bc_front *f = atomic_load_explicit(&c->fronts, memory_order_acquire); f;
	     f = f->next)
		if (f != me)
			sum += kvpi_bc_front_get(&f->reserve);
	return sum;
}

/*
 * The owner gives its front back at thread exit: contents to the shared
 * tier, reservation to the budget, the front to the next new thread.
 * Registry lock held and the cache alive.
 */
static void front_release(kvp_bufcache *c, struct kvpi_bc_front *f)
{
	void *rejects = NULL;
	struct kvpi_spin spin = {0};

	while (!kvpi_bc_front_enter(f)) /* a drainer holds it for a moment: wait */
		kvpi_spin_wait(&spin);
	empty_front(c, f, 1, &rejects);
	kvpi_bc_front_leave(f);
	release_rejects(c, f, rejects);
	/* Release: the thread that takes the front next (acquire CAS) sees it empty
	 * and our final counter values. */
	atomic_store_explicit(&f->taken, 0, memory_order_release);
}

static void tls_destructor(void *unused)
{
	struct kvpi_bc_tls_ent *e = kvpi_bc_tls_head;

	(void)unused;
	kvpi_bc_tls_head = NULL;
	pthread_mutex_lock(&reg_lock);
	while (e) {
		struct kvpi_bc_tls_ent *next = e->next;
		if (registry_alive(e->c, e->uid))
			front_release(e->c, e->f);
		kvpi_sys_free(e);
		e = next;
	}
	pthread_mutex_unlock(&reg_lock);
}

/* Drop entries of caches that no longer exist. */
static void tls_prune(void)
{
	pthread_mutex_lock(&reg_lock);
	struct kvpi_bc_tls_ent **pp = &kvpi_bc_tls_head;
	while (*pp) {
		struct kvpi_bc_tls_ent *e = *pp;
		if (!registry_alive(e->c, e->uid)) {
			*pp = e->next;
			kvpi_sys_free(e);
		} else {
			pp = &e->next;
		}
	}
	pthread_mutex_unlock(&reg_lock);
}

/* Take a front another thread gave up, or make one and add it to the list. */
static struct kvpi_bc_front *front_take(kvp_bufcache *c)
{
	/* Acquire: see the fronts' contents as published by their push. */
	for (struct kvpi_bc_front *f = atomic_load_explicit(&c->fronts, memory_order_acquire); f;
	     f = f->next) {
		int exp = 0;
		/* Relaxed look first (skip taken fronts without a locked instruction);
		 * acquire CAS: pairs with the release in front_release. */
		if (atomic_load_explicit(&f->taken, memory_order_relaxed) == 0 &&
		    atomic_compare_exchange_strong_explicit(
		        &f->taken, &exp, 1, memory_order_acquire, memory_order_relaxed))
			return f;
	}
	struct kvpi_bc_front *f = kvpi_bc_front_alloc();
	if (!f)
		return NULL;
	atomic_init(&f->taken, 1);
	/* relaxed: the release CAS below publishes; a stale head only fails it. */
	struct kvpi_bc_front *head = atomic_load_explicit(&c->fronts, memory_order_relaxed);
	do {
		f->next = head;
		/* Release: a drainer that finds the front sees it initialised. */
	} while (!atomic_compare_exchange_weak_explicit(&c->fronts, &head, f, memory_order_release,
	                                                memory_order_relaxed));
	return f;
}

/* Remember that this thread could not make a front for @uid (not retried per call). */
static struct kvpi_bc_front *no_front(uint64_t uid)
{
	nofront_uid = uid;
	return NULL;
}

struct kvpi_bc_front *kvpi_bc_front_get_slow(kvp_bufcache *c, uint64_t uid)
{
	for (struct kvpi_bc_tls_ent *e = kvpi_bc_tls_head; e; e = e->next)
		if (e->c == c && e->uid == uid)
			return e->f;
	if (nofront_uid == uid)
		return NULL;
	kvpi_bc_front_setup();
	if (!tls_key_ok)
		return no_front(uid);
	tls_prune();
	struct kvpi_bc_tls_ent *e = kvpi_sys_alloc(sizeof(*e), 8);
	if (!e)
		return no_front(uid);
	struct kvpi_bc_front *f = front_take(c);
	if (!f) {
		kvpi_sys_free(e);
		return no_front(uid);
	}
	e->c = c;
	e->uid = uid;
	e->f = f;
	e->next = kvpi_bc_tls_head;
	kvpi_bc_tls_head = e;
	/* Any non-NULL value makes the destructor run at thread exit. */
	pthread_setspecific(tls_key, (void *)1);
	return f;
}
