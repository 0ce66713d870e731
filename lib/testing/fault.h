/*
 * lib/testing/fault.h - test support: the system-call door (kvpi_sys_*) and its fault injection
 * (kvpi_fault_inject: fail the Nth call), for fault sweeps and out-of-memory tests
 *
 * For kvpool's own tests, benchmarks and tools only.  It is not installed,
 * not part of the API, and free to change with the library.  It exposes
 * lib/base/sysmem.h, whose comments give the contract.  Library code never
 * includes lib/testing/.
 */
#ifndef KVPOOL_LIB_TESTING_FAULT_H
#define KVPOOL_LIB_TESTING_FAULT_H

#include "lib/base/sysmem.h"

#endif
