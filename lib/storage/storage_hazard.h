/*
 * lib/storage/storage_hazard.h - hazard pointers guarding storage buffers from readers.
 *
 * Storage frees a block's buffer (release, retire, format change) only once
 * no reader can still be reading it.  Each reading thread owns one hazard
 * record in a process-wide list; one is enough, since a reader reads one
 * buffer at a time.  A reader announces the buffer it is about to read in
 * its record.  The thread that unpublished a buffer waits until no record
 * names it.
 *
 * Why hazard pointers and not an epoch (ck_epoch) grace period: a retire
 * hook runs once per retired block.  An epoch grace period waits for every
 * reader in a section to leave it, whatever it reads.  A hazard wait only
 * waits for a reader of that very buffer.  Nobody reads a retired block's
 * buffer but a thread holding a stale ref.  Measured with three busy
 * readers on a 2-core machine (tests/storage_shrink_test.c, kvp_shrink of
 * 16 blocks, timed around the call):
 *   - with ck_epoch_synchronize per block: 0.7-2.5 s per shrink;
 *   - with hazard pointers: 5.1-5.7 ms mean (max 63-72 ms).
 *
 * Proof (the classic Dekker argument; all four accesses are seq_cst):
 *   - A reader stores its hazard H = p, then reloads the slot.  It uses p
 *     only if the slot still holds p.
 *   - The reclaimer stores the slot (p leaves it), then loads every H.
 *   - In the single total order of seq_cst operations, one of two things
 *     happens.  Either the reclaimer's H load comes after the reader's H
 *     store.  Then the reclaimer sees p and waits until the reader clears
 *     H.  That clear is a release store, read by the reclaimer's load, so
 *     everything the reader did happens-before the free.  Or the reader's
 *     slot reload comes after the reclaimer's slot store.  Then the reader
 *     sees that p is gone and never touches p.
 *   - The record list's head is read and pushed with seq_cst too.  A
 *     reader's record is reached (claimed) or pushed before its hazard
 *     store.  So it precedes the reclaimer's walk in the same total order,
 *     and the walk finds it.
 *
 * All are C11 atomics: ThreadSanitizer sees every edge, and no annotation
 * is needed.
 *
 * Records are never freed.  A pthread key destructor marks a thread's
 * record free at thread exit, and the next new thread reuses it.  So the
 * list is as long as the peak number of threads that read at once.
 * Destroying a storage while threads still own records is harmless.
 *
 *   function                   may run concurrently with   waits for
 *   -------------------------  --------------------------  -------------------------
 *   kvpi_hazard_record          everything                  never (allocates once per thread)
 *   kvpi_hazard_protect / clear everything                  never (retries only while
 *                                                          the slot changes under it)
 *   kvpi_hazard_wait            everything                  readers of that one buffer
 */
#ifndef KVPOOL_LIB_STORAGE_HAZARD_H
#define KVPOOL_LIB_STORAGE_HAZARD_H

#include <stdatomic.h>
#include <stdint.h>

struct kvpi_hazard_rec;

/** kvpi_hazard_record - the calling thread's record; NULL if none could be made */
struct kvpi_hazard_rec *kvpi_hazard_record(void);

/**
 * kvpi_hazard_protect - load a published pointer and make it safe to read
 * @rec:  the calling thread's record
 * @slot: the word publishing the pointer
 * @mask: low bits of the word that are not part of the pointer (a lock bit)
 *
 * Returns the pointer (NULL if none is published); it stays allocated until
 * kvpi_hazard_clear.  One pointer per thread at a time.
 */
void *kvpi_hazard_protect(struct kvpi_hazard_rec *rec, _Atomic uintptr_t *slot, uintptr_t mask);

/** kvpi_hazard_clear - end the protection of kvpi_hazard_protect */
void kvpi_hazard_clear(struct kvpi_hazard_rec *rec);

/**
 * kvpi_hazard_wait - wait until no reader protects @p
 *
 * @p must have been unpublished by a seq_cst store (or RMW) to every slot
 * that held it; afterwards it may be freed.  Must not be called by a thread
 * that protects @p itself.
 */
void kvpi_hazard_wait(const void *p);

#endif /* KVPOOL_LIB_STORAGE_HAZARD_H */
