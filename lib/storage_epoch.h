/*
 * lib/storage_epoch.h - grace periods for storage readers (ConcurrencyKit ck_epoch).
 *
 * Storage frees a block's buffer (release, retire, format change) only after
 * every reader that might have loaded the buffer's pointer has left its
 * read-side section.  One process-wide ck_epoch_t serves every storage: a
 * thread gets one record on its first read, kept in thread-local storage and
 * given back (ck_epoch_unregister, later ck_epoch_recycle'd by a new thread)
 * by a pthread key destructor when the thread exits.  Because the epoch and
 * its records are not tied to any storage, destroying a storage while
 * threads still hold records is harmless; records are never freed (their
 * number is the peak number of threads that ever read at once).
 *
 * TSan cannot see ck's inline-assembly atomics, so this wrapper tells it:
 * a reader releases on the epoch's address before leaving its section, the
 * synchronizer acquires it after the grace period; a record released at
 * thread exit is acquired by the thread that recycles it.  Only under TSan.
 *
 *   function                        may run concurrently with   blocks
 *   ------------------------------  --------------------------  ----------------------
 *   kvp_storage_epoch_enter / exit  everything                  never (exit: wait-free)
 *   kvp_storage_epoch_synchronize   everything but a section    until every section
 *                                   of the calling thread       begun before it ended
 */
#ifndef KVPOOL_LIB_STORAGE_EPOCH_H
#define KVPOOL_LIB_STORAGE_EPOCH_H

#include <ck_epoch.h>

/**
 * kvp_storage_epoch_enter - begin a read-side section
 * @rec: receives the calling thread's record, to give to kvp_storage_epoch_exit
 *
 * Sections nest.  Returns 0, or -1 when the thread has no record and none
 * could be made (allocation failure): then no section was entered.
 */
int kvp_storage_epoch_enter(ck_epoch_record_t **rec);

/** kvp_storage_epoch_exit - end the section begun by kvp_storage_epoch_enter */
void kvp_storage_epoch_exit(ck_epoch_record_t *rec);

/**
 * kvp_storage_epoch_synchronize - wait for a grace period
 *
 * Returns once every read-side section that was running when it was called
 * has ended; memory unpublished before the call may then be freed.  Must not
 * be called inside a section.  Needs no record, so it cannot fail.
 */
void kvp_storage_epoch_synchronize(void);

#endif /* KVPOOL_LIB_STORAGE_EPOCH_H */
