/*
 * lib/storage_epoch.c - the process-wide ck_epoch behind storage readers.
 *
 * Why ck_epoch and not liburcu: storage readers are the hot path of a
 * server's decode loop and run on any thread with no registration step;
 * ck_epoch's read side is a store and a fence on a per-thread record, and a
 * record is cheap to hand to a new thread (ck_epoch_recycle).  The pool's
 * own RCU grace period (before retire hooks run) does not cover storage
 * readers, which never enter the pool's read-side sections around their copy.
 *
 * Record life: made on a thread's first section (recycled if an exited
 * thread left one), remembered in a _Thread_local pointer for the fast
 * path and in a pthread key whose destructor unregisters it at thread exit.
 */
#include "lib/storage_epoch.h"

#include <pthread.h>
#include <stddef.h>

#include "lib/sysmem.h"
#include "lib/tsan.h"

static ck_epoch_t g_epoch;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_key_t g_key;
static int g_key_ok;
static _Thread_local ck_epoch_record_t *tl_rec;

static void record_destructor(void *p)
{
	ck_epoch_record_t *r = p;

	/* the next thread to recycle @r must see our last uses of it */
	KVP_TSAN_RELEASE(r);
	ck_epoch_unregister(r);
	tl_rec = NULL;
}

static void epoch_init_once(void)
{
	ck_epoch_init(&g_epoch);
	g_key_ok = pthread_key_create(&g_key, record_destructor) == 0;
}

static ck_epoch_record_t *record_make(void)
{
	ck_epoch_record_t *r;

	pthread_once(&g_once, epoch_init_once);
	if (!g_key_ok)
		return NULL;
	r = ck_epoch_recycle(&g_epoch, NULL);
	if (r) {
		KVP_TSAN_ACQUIRE(r);
	} else {
		r = kvp_sys_calloc(1, sizeof *r, CK_MD_CACHELINE);
		if (!r)
			return NULL;
		ck_epoch_register(&g_epoch, r, NULL);
	}
	if (pthread_setspecific(g_key, r) != 0) {
		KVP_TSAN_RELEASE(r);
		ck_epoch_unregister(r);
		return NULL;
	}
	tl_rec = r;
	return r;
}

int kvp_storage_epoch_enter(ck_epoch_record_t **rec)
{
	ck_epoch_record_t *r = tl_rec;

	if (!r && !(r = record_make()))
		return -1;
	ck_epoch_begin(r, NULL);
	*rec = r;
	return 0;
}

void kvp_storage_epoch_exit(ck_epoch_record_t *rec)
{
	/* before leaving: a synchronizer's acquire after the grace period then
	 * orders every access of this section before what it frees */
	KVP_TSAN_RELEASE(&g_epoch);
	ck_epoch_end(rec, NULL);
}

void kvp_storage_epoch_synchronize(void)
{
	pthread_once(&g_once, epoch_init_once);
	ck_epoch_synchronize_wait(&g_epoch, NULL, NULL);
	KVP_TSAN_ACQUIRE(&g_epoch);
}
