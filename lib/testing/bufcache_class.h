/*
 * lib/testing/bufcache_class.h - test support: the buffer cache's size classes (rounding and class
 * index), for their unit test
 *
 * For kvpool's own tests, benchmarks and tools only; not installed, not part
 * of the API, and free to change with the library.  It exposes lib/bufcache/bufcache_class.h,
 * whose comments give the contract.  Library code never includes lib/testing/.
 */
#ifndef KVPOOL_LIB_TESTING_BUFCACHE_CLASS_H
#define KVPOOL_LIB_TESTING_BUFCACHE_CLASS_H

#include "lib/bufcache/bufcache_class.h"

#endif
