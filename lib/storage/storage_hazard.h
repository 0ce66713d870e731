/*
 * lib/storage/storage_hazard.h - hazard pointers guarding storage buffers from readers.
 *
 * Storage frees a block's buffer (release, retire, format change) only once
 * no reader can still be reading it.  Each reading thread owns one hazard
 * record (a reader reads one buffer at a time) in a process-wide list;
 * a reader announces the buffer it is about to read in its record, and the
 * thread that unpublished a buffer waits until no record names it.
 *
 * Why hazard pointers and not an epoch (ck_epoch) grace period: a retire
 * hook runs once per retired block, and an epoch grace period waits for
 * every reader in a section to leave it, whatever it reads.  Measured with
 * three busy readers on this 2-core machine (tests/storage_shrink_test.c,
 * kvp_shrink of 16 blocks, timed around the call): 0.7-2.5 s per shrink
 * with ck_epoch_synchronize per block, 5.1-5.7 ms mean (max 63-72 ms) with
 * hazard pointers.  A hazard wait only waits for a reader of that very
 * buffer, and nobody reads a retired block's buffer but a thread holding a
 * stale ref.
 *
 * Proof (the classic Dekker argument, all four accesses seq_cst): a reader
 * stores its hazard H = p, then reloads the slot and uses p only if the
 * slot still holds p.  The reclaimer stores the slot (p leaves it), then
 * loads every H.  In the single total order of seq_cst operations either
 * the reclaimer's H load comes after the reader's H store - then it sees p
 * and waits until the reader clears H (release store, read by the
 * reclaimer's load: everything the reader did happens-before the free) -
 * or the reader's slot reload comes after the reclaimer's slot store and
 * sees that p is gone, and the reader never touches p.  The record list's
 * head is read and pushed with seq_cst too: a reader's record is reached
 * (claimed) or pushed before its hazard store, so it precedes the
 * reclaimer's walk in the same total order and the walk finds it.  All C11 atomics:
 * ThreadSanitizer sees every edge, no annotation needed.
 *
 * Records are never freed: a thread's record is marked free by a pthread
 * key destructor at thread exit and reused by the next new thread, so the
 * list is as long as the peak number of threads that read at once, and
 * destroying a storage while threads still own records is harmless.
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
