/*
 * lib/base/tsan.h - ThreadSanitizer annotations, compiled away elsewhere.
 *
 * liburcu 0.13 orders memory with inline assembly and volatile accesses
 * that TSan cannot see.  In places kvpool relies on an RCU grace period for
 * ordering: a reader's critical section ends before the memory it read is
 * freed.  There it tells TSan with a release at read-unlock, and an acquire
 * after synchronize_rcu, on one sync address.  That is all these macros
 * are for.
 */
#ifndef KVPOOL_LIB_TSAN_H
#define KVPOOL_LIB_TSAN_H

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KVPI_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define KVPI_TSAN 1
#endif

#ifdef KVPI_TSAN
#include <sanitizer/tsan_interface.h>
#define KVPI_TSAN_RELEASE(addr) __tsan_release((void *)(addr))
#define KVPI_TSAN_ACQUIRE(addr) __tsan_acquire((void *)(addr))
#else
#define KVPI_TSAN_RELEASE(addr) ((void)(addr))
#define KVPI_TSAN_ACQUIRE(addr) ((void)(addr))
#endif

#endif /* KVPOOL_LIB_TSAN_H */
