/*
 * lib/testing/prefix_peek.h - test support: the prefix cache's internals
 * (struct kvpi_prefix, side entries, the lock bit), for white-box tests
 * that set a knob before the pool is shared or check the protocol's state
 * directly
 *
 * For kvpool's own tests only; not installed, not part of the API, and
 * free to change with the library.  It exposes lib/prefix/prefix_internal.h,
 * whose comments give the contract.  Library code never includes lib/testing/.
 */
#ifndef KVPOOL_LIB_TESTING_PREFIX_PEEK_H
#define KVPOOL_LIB_TESTING_PREFIX_PEEK_H

#include "lib/prefix/prefix_internal.h"

#endif
