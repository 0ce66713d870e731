/*
 * lib/testing/attend.h - test support: the decode-step attention kernel over row pointers, to time
 * it against the same kernel on a contiguous array
 *
 * For kvpool's own tests, benchmarks and tools only; not installed, not part
 * of the API, and free to change with the library.  It exposes lib/kvcache/kvcache_attend.h,
 * whose comments give the contract.  Library code never includes lib/testing/.
 */
#ifndef KVPOOL_LIB_TESTING_ATTEND_H
#define KVPOOL_LIB_TESTING_ATTEND_H

#include "lib/kvcache/kvcache_attend.h"

#endif
