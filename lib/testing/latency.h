/*
 * lib/testing/latency.h - test support: the sampling mask of the pool's
 * allocate latency histogram (lib/pool/pool_latency.h).
 *
 * A thread times one kvp_allocate call in kvpi_lat_mask + 1: KVPI_LAT_EVERY
 * - 1 (1023) by default, 0 times every call, UINT32_MAX one call in 2^32
 * (off, for a baseline).  Set it with kvpi_lat_set_mask from the thread that
 * allocates, or before the threads that allocate start.  For kvpool's own
 * tests and benchmarks only; not installed.
 */
#ifndef KVPOOL_LIB_TESTING_LATENCY_H
#define KVPOOL_LIB_TESTING_LATENCY_H

#include "lib/pool/pool_latency.h"

#endif
