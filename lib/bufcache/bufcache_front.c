/*
 * lib/bufcache/bufcache_front.c - finding a thread's front, claiming fronts, giving them back.
 *
 * A thread keeps a table of {uid, front} slots in thread-local storage,
 * indexed by the cache's registry index: every cache a thread uses is one
 * bounds check and one uid comparison away, however many there are.  The
 * registry gives out the lowest free index, so tables stay as long as the
 * most caches alive at once.  The uid guards against an index reused by a
 * cache made after another was destroyed.
 *
 * Thread exit parks the thread's fronts instead of emptying them: the
 * buffers stay, the unused reservation goes back to the budget, and the
 * front waits, unowned, for the next thread that needs one for the cache.
 * Emptying them into the shared tier (as this file once did) made a hit's
 * cost depend on thread history: the shared tier filled with buffers of the
 * very capacities the live threads use, every hit of those capacities went
 * through the shared tier (its best fit wins ties), and the fronts' depth
 * and byte limits spilled them back, so the shared traffic never ended.
 * A parked front holds no more than its thread held, and every claim
 * reaches it (evictions empty parked fronts first: bufcache_budget.c).
 *
 * Thread exit against cache destruction: a process-wide registry of live
 * caches, under one mutex, decides (as for the block pool's slots).  The
 * thread-exit destructor holds the registry lock while it empties its
 * fronts of the caches still alive; kvp_bufcache_destroy takes the cache out
 * of the registry under the same lock before freeing anything.  Neither is
 * on the hit path: the lock is taken once per thread per cache at first use,
 * and at thread exit.
 */
#include "lib/base/spin.h"
#include "lib/bufcache/bufcache_front.h"

#include <pthread.h>
#include <string.h>

#include "lib/bufcache/bufcache_internal.h"
#include "lib/base/barrier.h"
#include "lib/base/sysmem.h"

/* initial-exec: one instruction to reach it (see lib/pool/tslot.c). */
__thread struct kvpi_bc_tls_tab *kvpi_bc_tls __attribute__((tls_model("initial-exec")));
/* The cache for which this thread last failed to make a front: not retried per call. */
static __thread uint64_t nofront_uid __attribute__((tls_model("initial-exec")));

static pthread_key_t tls_key;
static pthread_once_t setup_once = PTHREAD_ONCE_INIT;
static int tls_key_ok;

/* The registry: live caches by index, under reg_lock. */
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static kvp_bufcache **reg_tab;
static uint32_t reg_cap;

static void tls_destructor(void *unused);

static void setup(void)
{
	tls_key_ok = kvpi_sys_key_create(&tls_key, tls_destructor) == 0;
}

int kvpi_bc_front_registry_add(kvp_bufcache *c)
{
	int rc = 0;
	uint32_t i;

	pthread_mutex_lock(&reg_lock);
	for (i = 0; i < reg_cap && reg_tab[i]; i++)
		;
	if (i == reg_cap) {
		uint32_t cap = reg_cap ? 2 * reg_cap : 8;
		kvp_bufcache **t = kvpi_sys_calloc(cap, sizeof(*t), 8);
		if (t) {
			if (reg_cap)
				memcpy(t, reg_tab, reg_cap * sizeof(*t));
			kvpi_sys_free(reg_tab);
			reg_tab = t;
			reg_cap = cap;
		} else {
			rc = -1;
		}
	}
	if (!rc) {
		reg_tab[i] = c;
		c->idx = i;
	}
	pthread_mutex_unlock(&reg_lock);
	return rc;
}

void kvpi_bc_front_registry_remove(kvp_bufcache *c)
{
	pthread_mutex_lock(&reg_lock);
	if (c->idx < reg_cap && reg_tab[c->idx] == c)
		reg_tab[c->idx] = NULL;
	pthread_mutex_unlock(&reg_lock);
}

/* The live cache at @idx if its uid is @uid, else NULL.  Registry lock held. */
static kvp_bufcache *registry_alive(uint32_t idx, uint64_t uid)
{
	if (idx < reg_cap && reg_tab[idx] && reg_tab[idx]->uid == uid)
		return reg_tab[idx];
	return NULL;
}

struct kvpi_bc_front *kvpi_bc_front_alloc(int asym)
{
	struct kvpi_bc_front *f = kvpi_sys_calloc(1, sizeof(*f), 64);

	/* Zeroed memory: IDLE, unclaimed, empty, untaken (valid atomics on this ABI). */
	if (f)
		f->asym = asym;
	return f;
}

/* Full barrier on every CPU running one of our threads (asymmetric protocol). */
static void barrier_all(kvp_bufcache *c)
{
	if (c->asym)
		kvpi_barrier_heavy();
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
	/* Relaxed, all three: hints; a buffer put in after this look is a later
	 * free, a front taken after it is claimed like any owner's. */
	if (buffers == KVPI_BC_DRAIN_PARKED)
		return !atomic_load_explicit(&f->taken, memory_order_relaxed) &&
		       atomic_load_explicit(&f->nbufs, memory_order_relaxed);
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
		barrier_all(c);
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
 * The owner parks its front at thread exit: the buffers stay for the next
 * thread that takes the front, the unused reservation goes back to the
 * budget.  Registry lock held and the cache alive.
 */
static void front_park(kvp_bufcache *c, struct kvpi_bc_front *f)
{
	struct kvpi_spin spin = {0};

	while (!kvpi_bc_front_enter(f)) /* a drainer holds it for a moment: wait */
		kvpi_spin_wait(&spin);
	size_t res = kvpi_bc_front_get(&f->reserve);
	if (res) {
		kvpi_bc_unreserve(c, res);
		kvpi_bc_front_set(&f->reserve, 0);
	}
	/* Relaxed: a level only the holder writes (kvpi_bc_front_set). */
	int full = atomic_load_explicit(&f->nbufs, memory_order_relaxed) != 0;
	kvpi_bc_front_leave(f);
	/* Release: the thread that takes the front next (acquire CAS) sees its
	 * buffers and our final counter values. */
	atomic_store_explicit(&f->taken, 0, memory_order_release);
	/* Relaxed: a hint for evictions (bufcache_budget.c), not a carrier of data:
	 * the claim protocol orders the buffers. */
	if (full)
		atomic_store_explicit(&c->parked, 1, memory_order_relaxed);
}

static void tls_destructor(void *unused)
{
	struct kvpi_bc_tls_tab *t = kvpi_bc_tls;

	(void)unused;
	kvpi_bc_tls = NULL;
	if (!t)
		return;
	pthread_mutex_lock(&reg_lock);
	for (uint32_t i = 0; i < t->n; i++) {
		kvp_bufcache *c;
		if (t->s[i].uid && (c = registry_alive(i, t->s[i].uid)))
			front_park(c, t->s[i].f);
	}
	pthread_mutex_unlock(&reg_lock);
	kvpi_sys_free(t);
}

/* Make the thread's table hold slot @idx; 0, or -1 when it could not grow. */
static int tls_fit(uint32_t idx)
{
	struct kvpi_bc_tls_tab *t = kvpi_bc_tls, *nt;
	uint32_t n;

	if (t && idx < t->n)
		return 0;
	n = t ? 2 * t->n : 4;
	if (n <= idx)
		n = idx + 1;
	nt = kvpi_sys_calloc(1, sizeof(*nt) + n * sizeof(nt->s[0]), 64);
	if (!nt)
		return -1;
	nt->n = n;
	if (t)
		memcpy(nt->s, t->s, t->n * sizeof(t->s[0]));
	/* Only this thread reads its table (and its destructor, on this thread). */
	kvpi_bc_tls = nt;
	kvpi_sys_free(t);
	return 0;
}

/* Take a parked front (with what it holds), or make one and add it to the list. */
static struct kvpi_bc_front *front_take(kvp_bufcache *c)
{
	/* Acquire: see the fronts' contents as published by their push. */
	for (struct kvpi_bc_front *f = atomic_load_explicit(&c->fronts, memory_order_acquire); f;
	     f = f->next) {
		int exp = 0;
		/* Relaxed look first (skip taken fronts without a locked instruction);
		 * acquire CAS: pairs with the release in front_park. */
		if (atomic_load_explicit(&f->taken, memory_order_relaxed) == 0 &&
		    atomic_compare_exchange_strong_explicit(
		        &f->taken, &exp, 1, memory_order_acquire, memory_order_relaxed))
			return f;
	}
	struct kvpi_bc_front *f = kvpi_bc_front_alloc(c->asym);
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

struct kvpi_bc_front *kvpi_bc_front_get_slow(kvp_bufcache *c)
{
	uint64_t uid = c->uid;
	struct kvpi_bc_front *f = kvpi_bc_front_here(c->idx, uid);

	if (f)
		return f;
	if (nofront_uid == uid)
		return NULL;
	pthread_once(&setup_once, setup);
	if (!tls_key_ok || tls_fit(c->idx))
		return no_front(uid);
	/* The slot may name a destroyed cache that had this index: its front
	 * went with it (and the destructor skips dead caches). */
	f = front_take(c);
	if (!f)
		return no_front(uid);
	kvpi_bc_tls->s[c->idx].uid = uid;
	kvpi_bc_tls->s[c->idx].f = f;
	/* Any non-NULL value makes the destructor run at thread exit. */
	pthread_setspecific(tls_key, (void *)1);
	return f;
}
