/*
 * lib/testing/barrier.h - test support: the library's asymmetric barrier policy
 * (kvpi_barrier_asym_ok, kvpi_barrier_denied), for tests that deny membarrier
 *
 * For kvpool's own tests, benchmarks and tools only; not installed, not part
 * of the API, and free to change with the library.  It exposes lib/base/barrier.h,
 * whose comments give the contract.  Library code never includes lib/testing/.
 */
#ifndef KVPOOL_LIB_TESTING_BARRIER_H
#define KVPOOL_LIB_TESTING_BARRIER_H

#include "lib/base/barrier.h"

#endif
