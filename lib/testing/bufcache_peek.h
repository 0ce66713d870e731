/*
 * lib/testing/bufcache_peek.h - test support: the buffer cache's per-thread fronts, for white-box
 * tests of the front
 *
 * For kvpool's own tests, benchmarks and tools only; not installed, not part
 * of the API, and free to change with the library.  It exposes lib/bufcache/bufcache_front.h,
 * whose comments give the contract.  Library code never includes lib/testing/.
 */
#ifndef KVPOOL_LIB_TESTING_BUFCACHE_PEEK_H
#define KVPOOL_LIB_TESTING_BUFCACHE_PEEK_H

#include "lib/bufcache/bufcache_front.h"

#endif
