/*
 * lib/testing/segtable.h - test support: the library's segmented id table (geometry,
 * install, destroy), for its unit test
 *
 * For kvpool's own tests, benchmarks and tools only; not installed, not part
 * of the API, and free to change with the library.  It exposes lib/base/segtable.h,
 * whose comments give the contract.  Library code never includes lib/testing/.
 */
#ifndef KVPOOL_LIB_TESTING_SEGTABLE_H
#define KVPOOL_LIB_TESTING_SEGTABLE_H

#include "lib/base/segtable.h"

#endif
