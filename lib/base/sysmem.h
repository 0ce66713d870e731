/*
 * lib/base/sysmem.h - the one door to the system allocator, with fault injection.
 *
 * Every allocation kvpool makes from the system goes through
 * kvpi_sys_alloc: block-table segments, owner records, thread slots, cached
 * buffers, storage buffers.  Every thread-local key it makes goes through
 * kvpi_sys_key_create, and every thread through kvpi_sys_thread_create.  So
 * tests and the stress harness can make those system calls fail on demand,
 * with one fault counter for all three.  They then check that nothing is
 * lost.
 *
 * Thread-safe.  The fault counters are process-wide atomics, read with
 * relaxed order: injection needs no ordering with the memory it guards.
 */
#ifndef KVPOOL_LIB_SYSMEM_H
#define KVPOOL_LIB_SYSMEM_H

#include <pthread.h>
#include <stddef.h>

/**
 * kvpi_sys_alloc - allocate @size bytes aligned to @align from the system
 * @size:  bytes (0 is treated as 1)
 * @align: a power of two; values below sizeof(void *) are raised to it
 *
 * Returns the memory, or NULL when the system (or an injected fault) fails.
 */
void *kvpi_sys_alloc(size_t size, size_t align);

/** kvpi_sys_calloc - kvpi_sys_alloc zeroed (overflow of n * size fails) */
void *kvpi_sys_calloc(size_t n, size_t size, size_t align);

/** kvpi_sys_free - give back memory from kvpi_sys_alloc (NULL is a no-op) */
void kvpi_sys_free(void *p);

/**
 * kvpi_sys_key_create - pthread_key_create through the fault door
 *
 * Returns 0, or an error number (EAGAIN when injected) with no key made.
 */
int kvpi_sys_key_create(pthread_key_t *key, void (*destructor)(void *));

/**
 * kvpi_sys_thread_create - pthread_create through the fault door
 *
 * Returns 0, or an error number (EAGAIN when injected) with no thread started.
 */
int kvpi_sys_thread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*start)(void *),
                           void *arg);

/**
 * kvpi_fault_inject - make system allocations fail on demand (tests only)
 * @skip:  let this many further calls (allocations, key and thread
 *         creations) succeed first
 * @fail:  then fail this many (negative: fail every one until reset)
 *
 * kvpi_fault_inject(0, 0) turns injection off.  Process-wide.
 */
void kvpi_fault_inject(long skip, long fail);

/** kvpi_fault_injected - allocations failed by injection since the process started */
unsigned long kvpi_fault_injected(void);

#endif /* KVPOOL_LIB_SYSMEM_H */
