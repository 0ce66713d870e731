/*
 * lib/testing/pool_peek.h - test support: the pool's internals (struct kvp_pool, per-thread slots,
 * owner records), for white-box tests that check magazines, bias and records directly
 *
 * For kvpool's own tests, benchmarks and tools only; not installed, not part
 * of the API, and free to change with the library.  It exposes lib/pool/pool_internal.h,
 * whose comments give the contract.  Library code never includes lib/testing/.
 */
#ifndef KVPOOL_LIB_TESTING_POOL_PEEK_H
#define KVPOOL_LIB_TESTING_POOL_PEEK_H

#include "lib/pool/pool_internal.h"

#endif
