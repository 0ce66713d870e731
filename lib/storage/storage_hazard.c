/*
 * lib/storage/storage_hazard.c - one hazard pointer per reading thread (see the header).
 *
 * The record list only grows: records are pushed at the head with a CAS
 * (release: a scanner that reaches a record sees it initialised) and their
 * next links never change.  A thread claims a free record with a CAS on
 * in_use (acquire: it sees the last owner's clear), or pushes a new one.
 */
#include "lib/base/spin.h"
#include "lib/storage/storage_hazard.h"

#include <pthread.h>
#include <sched.h>
#include <stddef.h>

#include "lib/base/sysmem.h"

struct kvpi_hazard_rec {
	_Atomic(void *) hp; /* the buffer this thread reads, or NULL */
	_Atomic int in_use; /* owned by a live thread */
	struct kvpi_hazard_rec *next;
} __attribute__((aligned(64))); /* one cache line each: readers write theirs often */

static _Atomic(struct kvpi_hazard_rec *) g_head;
static pthread_mutex_t g_key_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_key_t g_key;
static _Atomic int g_key_ok;
static _Thread_local struct kvpi_hazard_rec *tl_rec;

static void record_release(void *p)
{
	struct kvpi_hazard_rec *r = p;

	atomic_store_explicit(&r->hp, NULL, memory_order_release);
	/* release: the next owner's claiming CAS (acquire) sees our last uses */
	atomic_store_explicit(&r->in_use, 0, memory_order_release);
	tl_rec = NULL;
}

/* Make the key once; a failed attempt (EAGAIN) is retried by the next
 * caller, so a passing shortage does not disable reads for good. */
static int key_init(void)
{
	/* acquire: pairs with the release below; g_key is then initialised */
	if (atomic_load_explicit(&g_key_ok, memory_order_acquire))
		return 1;
	pthread_mutex_lock(&g_key_lock);
	if (!atomic_load_explicit(&g_key_ok, memory_order_relaxed) &&
	    kvpi_sys_key_create(&g_key, record_release) == 0)
		atomic_store_explicit(&g_key_ok, 1, memory_order_release);
	pthread_mutex_unlock(&g_key_lock);
	return atomic_load_explicit(&g_key_ok, memory_order_relaxed);
}

static struct kvpi_hazard_rec *record_claim(void)
{
	/* seq_cst: every access to g_head is, so that a record a reader reached
	 * (or pushed) before its seq_cst hazard store is on the list a
	 * reclaimer walks after its seq_cst unpublish; acquire part: records
	 * reached through the list are initialised. */
	struct kvpi_hazard_rec *r = atomic_load_explicit(&g_head, memory_order_seq_cst);

	for (; r; r = r->next) {
		int free_ = 0;
		if (atomic_compare_exchange_strong_explicit(
		        &r->in_use, &free_, 1, memory_order_acquire, memory_order_relaxed))
			return r;
	}
	r = kvpi_sys_calloc(1, sizeof *r, 64);
	if (!r)
		return NULL;
	atomic_init(&r->in_use, 1);
	r->next = atomic_load_explicit(&g_head, memory_order_relaxed);
	/* seq_cst (see above); release part: publishes the record's
	 * initialisation to scanners */
	while (!atomic_compare_exchange_weak_explicit(&g_head, &r->next, r, memory_order_seq_cst,
	                                              memory_order_relaxed))
		;
	return r;
}

struct kvpi_hazard_rec *kvpi_hazard_record(void)
{
	struct kvpi_hazard_rec *r = tl_rec;

	if (r)
		return r;
	if (!key_init() || !(r = record_claim()))
		return NULL;
	if (pthread_setspecific(g_key, r) != 0) {
		record_release(r);
		return NULL;
	}
	tl_rec = r;
	return r;
}

void *kvpi_hazard_protect(struct kvpi_hazard_rec *rec, _Atomic uintptr_t *slot, uintptr_t mask)
{
	/* seq_cst, all three: the reader's half of the Dekker pair (header) */
	uintptr_t p = atomic_load_explicit(slot, memory_order_seq_cst) & ~mask;

	for (;;) {
		uintptr_t again;
		atomic_store_explicit(&rec->hp, (void *)p, memory_order_seq_cst);
		again = atomic_load_explicit(slot, memory_order_seq_cst) & ~mask;
		if (again == p)
			return (void *)p;
		p = again;
	}
}

void kvpi_hazard_clear(struct kvpi_hazard_rec *rec)
{
	/* release: the reclaimer that reads NULL here frees after our reads */
	atomic_store_explicit(&rec->hp, NULL, memory_order_release);
}

void kvpi_hazard_wait(const void *p)
{
	/* seq_cst: after our seq_cst unpublish, so the walk includes every
	 * record whose owner could still have seen the old pointer. */
	struct kvpi_hazard_rec *r = atomic_load_explicit(&g_head, memory_order_seq_cst);

	for (; r; r = r->next) {
		struct kvpi_spin spin = {0};
		/* seq_cst: the reclaimer's half of the Dekker pair */
		while (atomic_load_explicit(&r->hp, memory_order_seq_cst) == p)
			kvpi_spin_wait(&spin);
	}
}
