/*
 * lib/testing/latency.h - test support: the sampling mask of the pool's
 * allocate latency histogram (lib/pool/pool_latency.h).
 *
 * A kvp_allocate call is timed when (++thread counter & kvpi_lat_mask) == 0:
 * KVPI_LAT_EVERY - 1 (63) by default, 0 times every call, UINT32_MAX all but
 * one call in 2^32 (off, for a baseline).  Set it before the threads that
 * allocate start.  For kvpool's own tests and benchmarks only; not installed.
 */
#ifndef KVPOOL_LIB_TESTING_LATENCY_H
#define KVPOOL_LIB_TESTING_LATENCY_H

#include "lib/pool/pool_latency.h"

#endif
