/*
 * lib/testing/tsan.h - test support: the ThreadSanitizer annotations the library uses
 *
 * For kvpool's own tests, benchmarks and tools only; not installed, not part
 * of the API, and free to change with the library.  It exposes lib/base/tsan.h,
 * whose comments give the contract.  Library code never includes lib/testing/.
 */
#ifndef KVPOOL_LIB_TESTING_TSAN_H
#define KVPOOL_LIB_TESTING_TSAN_H

#include "lib/base/tsan.h"

#endif
