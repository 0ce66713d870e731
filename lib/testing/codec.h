/*
 * lib/testing/codec.h - test support: the row codecs (fp32/fp16/bf16/int8/int4/int2/int1 encode and
 * decode), for tools that build reference rows or time attention kernels
 *
 * For kvpool's own tests, benchmarks and tools only; not installed, not part
 * of the API, and free to change with the library.  It exposes lib/storage/codec.h,
 * whose comments give the contract.  Library code never includes lib/testing/.
 */
#ifndef KVPOOL_LIB_TESTING_CODEC_H
#define KVPOOL_LIB_TESTING_CODEC_H

#include "lib/storage/codec.h"

#endif
