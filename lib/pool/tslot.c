/*
 * lib/pool/tslot.c - finding the calling thread's slot, and giving it back.
 *
 * A thread keeps a short list of {pool, pool uid, slot} entries in
 * thread-local storage; the first entry is found in one comparison for the
 * common case of one pool.  The uid guards against a pool destroyed and
 * another created at the same address.
 *
 * Thread exit versus pool destruction: a process-wide registry of live
 * pools, under one mutex, decides.  The thread-exit destructor holds the
 * registry lock while it returns its cached blocks to the pools still
 * alive; kvp_pool_destroy takes the pool out of the registry under the same
 * lock before freeing anything.  Neither is on the allocate/free path: the
 * registry lock is taken once per thread per pool at first use, and at
 * thread exit.
 */
#include "lib/base/spin.h"
#include "lib/pool/tslot.h"

#include <pthread.h>
#include <sched.h>
#include <string.h>

#include "lib/pool/pool_internal.h"
#include "lib/base/sysmem.h"

/* initial-exec: one instruction to reach it, in a program or a library
 * loaded at start-up or by dlopen (glibc keeps static TLS room for a few
 * such pointers). */
__thread struct kvpi_tls_ent *kvpi_tls_head __attribute__((tls_model("initial-exec")));
static pthread_key_t tls_key;
static pthread_once_t tls_once = PTHREAD_ONCE_INIT;
static int tls_key_ok;

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct kvp_pool *reg_head;

void kvpi_registry_add(struct kvp_pool *pool)
{
	pthread_mutex_lock(&reg_lock);
	pool->reg_next = reg_head;
	reg_head = pool;
	pthread_mutex_unlock(&reg_lock);
}

void kvpi_registry_remove(struct kvp_pool *pool)
{
	pthread_mutex_lock(&reg_lock);
	struct kvp_pool **pp = &reg_head;
	while (*pp && *pp != pool)
		pp = &(*pp)->reg_next;
	if (*pp)
		*pp = pool->reg_next;
	pthread_mutex_unlock(&reg_lock);
}

/* Registry lock held. */
static bool registry_alive(const struct kvp_pool *pool, uint64_t uid)
{
	for (struct kvp_pool *p = reg_head; p; p = p->reg_next)
		if (p == pool && p->uid == uid)
			return true;
	return false;
}

struct kvpi_tslot *kvpi_tslot_alloc(uint32_t cap)
{
	if (cap > KVPI_MAG_INITIAL)
		cap = KVPI_MAG_INITIAL;
	size_t bytes = sizeof(struct kvpi_tslot) + 2 * (size_t)cap * sizeof(uint32_t);
	struct kvpi_tslot *s = kvpi_sys_calloc(1, bytes, 64);
	if (!s)
		return NULL;
	s->mag[0].ids = s->ids;
	s->mag[1].ids = s->ids + cap;
	s->mag[0].cap = s->mag[1].cap = cap;
	return s;
}

void kvpi_tslot_free(struct kvpi_tslot *s)
{
	if (!s)
		return;
	kvpi_sys_free(s->mag[0].heap);
	kvpi_sys_free(s->mag[1].heap);
	kvpi_sys_free(s);
}

/*
 * Give a slot back: its cached blocks go to the global stacks, its unpublished
 * in-use delta to the pool, and the slot to the next new thread.  Registry
 * lock held and the pool alive.
 */
static void tslot_release(struct kvp_pool *p, struct kvpi_tslot *s)
{
	for (uint32_t si = 0; si < p->n_streams; si++) {
		struct kvpi_mag *m = &s->mag[si];
		uint32_t exp = 0;
		/* We are outside any call (in_call 0), so drainers may claim the
		 * magazine too: take it the way they do, waiting a moment if one
		 * holds it.  acquire: see what the last claimer left. */
		struct kvpi_spin spin = {0};
		while (!atomic_compare_exchange_weak_explicit(
		    &m->claimed, &exp, 1, memory_order_acquire, memory_order_relaxed)) {
			exp = 0;
			kvpi_spin_wait(&spin);
		}
		uint32_t cnt = atomic_load_explicit(&m->count, memory_order_relaxed);
		kvpi_fs_push_ids(&p->fs[si], &p->bt, m->ids, cnt);
		atomic_store_explicit(&m->count, 0, memory_order_relaxed);
		/* release: the next holder sees the emptied magazine. */
		atomic_store_explicit(&m->claimed, 0, memory_order_release);
	}
	/* relaxed: a statistic.  The published count after it is one that
	 * happened (every other unpublished delta is >= 0), so it may raise
	 * the peak: a publish never leaves the count above the peak. */
	int64_t now = atomic_fetch_add_explicit(&p->in_use, s->delta_in_use, memory_order_relaxed) +
	              s->delta_in_use;
	(void)kvpi_peak_raise(p, now);
	s->delta_in_use = 0;
	s->in_use_room = 0; /* the next thread's first allocation recomputes it */
	kvpi_rec_cache_drain(&p->owners, &s->recs);
	/* release: the thread that takes the slot next (acquire CAS) sees our
	 * final counter values and empty magazines. */
	atomic_store_explicit(&s->taken, 0, memory_order_release);
}

static void tls_destructor(void *unused)
{
	(void)unused;
	struct kvpi_tls_ent *e = kvpi_tls_head;
	kvpi_tls_head = NULL;
	pthread_mutex_lock(&reg_lock);
	while (e) {
		struct kvpi_tls_ent *next = e->next;
		if (registry_alive(e->pool, e->uid))
			tslot_release(e->pool, e->slot);
		kvpi_sys_free(e);
		e = next;
	}
	pthread_mutex_unlock(&reg_lock);
}

static void tls_make_key(void)
{
	tls_key_ok = kvpi_sys_key_create(&tls_key, tls_destructor) == 0;
}

/* Drop entries of pools that no longer exist. */
static void tls_prune(void)
{
	pthread_mutex_lock(&reg_lock);
	struct kvpi_tls_ent **pp = &kvpi_tls_head;
	while (*pp) {
		struct kvpi_tls_ent *e = *pp;
		if (!registry_alive(e->pool, e->uid)) {
			*pp = e->next;
			kvpi_sys_free(e);
		} else {
			pp = &e->next;
		}
	}
	pthread_mutex_unlock(&reg_lock);
}

/* Take a slot another thread gave up, or make one and add it to the list. */
static struct kvpi_tslot *slot_take(struct kvp_pool *p)
{
	/* acquire: see the slots' contents as published by their push. */
	for (struct kvpi_tslot *s = atomic_load_explicit(&p->slots, memory_order_acquire); s;
	     s = s->next) {
		int exp = 0;
		/* acquire: pairs with the release in tslot_release. */
		if (atomic_load_explicit(&s->taken, memory_order_relaxed) == 0 &&
		    atomic_compare_exchange_strong_explicit(
		        &s->taken, &exp, 1, memory_order_acquire, memory_order_relaxed))
			return s;
	}
	struct kvpi_tslot *s = kvpi_tslot_alloc(p->thread_cache);
	if (!s)
		return NULL;
	atomic_init(&s->taken, 1);
	/* relaxed: a number that spreads slots over stripes; orders nothing. */
	s->idx = atomic_fetch_add_explicit(&p->n_slots, 1, memory_order_relaxed) + 1;
	/* Raw blocks biased to their thread only in the asymmetric mode: the
	 * fallback keeps the CAS on every raw free (lib/pool/bias.c). */
	atomic_init(&s->raw_bias, p->asym ? KVPI_RAW_BIASED : KVPI_RAW_REVOKED);
	struct kvpi_tslot *head = atomic_load_explicit(&p->slots, memory_order_relaxed);
	do {
		s->next = head;
		/* seq_cst: a starving thread that raised its flag (seq_cst) and
		 * then loads the list (seq_cst) must see this slot if our first
		 * call missed the flag; release alone would not promise that. */
	} while (!atomic_compare_exchange_weak_explicit(&p->slots, &head, s, memory_order_seq_cst,
	                                                memory_order_relaxed));
	return s;
}

static struct kvpi_tslot *fallback_get(struct kvp_pool *p)
{
	pthread_mutex_lock(&p->fallback_lock);
	return p->fallback;
}

static struct kvpi_tslot *tslot_get_slow(struct kvp_pool *p)
{
	pthread_once(&tls_once, tls_make_key);
	if (!tls_key_ok)
		return fallback_get(p);
	tls_prune();
	struct kvpi_tls_ent *e = kvpi_sys_alloc(sizeof(*e), 8);
	if (!e)
		return fallback_get(p);
	struct kvpi_tslot *s = slot_take(p);
	if (!s) {
		kvpi_sys_free(e);
		return fallback_get(p);
	}
	e->pool = p;
	e->uid = p->uid;
	e->slot = s;
	e->next = kvpi_tls_head;
	kvpi_tls_head = e;
	/* Any non-NULL value makes the destructor run at thread exit. */
	pthread_setspecific(tls_key, (void *)1);
	return s;
}

struct kvpi_tslot *kvpi_tslot_get_slow(struct kvp_pool *p)
{
	for (struct kvpi_tls_ent *e = kvpi_tls_head; e; e = e->next)
		if (e->pool == p && e->uid == p->uid)
			return e->slot;
	return tslot_get_slow(p);
}

void kvpi_tslot_put_fallback(struct kvp_pool *p)
{
	pthread_mutex_unlock(&p->fallback_lock);
}
