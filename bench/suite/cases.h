/*
 * bench/suite/cases.h - threaded cases for kvpool, the mutex-pool baseline and
 * the thread-local limit, shared by the get/put, batch, scaling and stats
 * benchmarks.  One "op" is one allocate call plus the matching free call.
 *
 * Each thread that uses an owner-tracking case registers its own owner id
 * (unique in the process) in setup and releases it in teardown, so the
 * measured loop neither creates nor drops owners, except in the free_all
 * variants, where the API itself releases the owner on every op, and the
 * new-owner variant, which uses a new owner id on every op.
 *
 * Every constructor mallocs the case context: free it with kvb_case_free().
 */
#ifndef KVPOOL_BENCH_CASES_H
#define KVPOOL_BENCH_CASES_H

#include <kvpool/kvpool.h>

#include "bench/suite/harness.h"
#include "bench/suite/mutex_pool.h"

#define KVB_BLOCK_SIZE 16   /* tokens per block in every benchmark */
#define KVB_MAX_BATCH  1024 /* largest blocks per op */

/* A fresh owner id, unique in the process. */
kvp_owner kvb_new_owner(void);

/* kvp_allocate(k * block_size tokens) + kvp_free(refs, k), owner registered per thread. */
void kvb_case_kv_full(kvb_case *c, kvp_pool *pool, kvp_stream s, unsigned k);
/* kvp_allocate(k * block_size tokens) + kvp_free_all(owner) (which releases the owner). */
void kvb_case_kv_free_all(kvb_case *c, kvp_pool *pool, kvp_stream s, unsigned k);
/* kvp_allocate(k * block_size tokens) for a new owner id each op + kvp_free_all (the
 * serving loop's owner churn: every op makes and drops an owner). */
void kvb_case_kv_new_owner(kvb_case *c, kvp_pool *pool, kvp_stream s, unsigned k);
/* The same with each op's owner id from kvp_owner_new (homed at the thread). */
void kvb_case_kv_minted_owner(kvb_case *c, kvp_pool *pool, kvp_stream s, unsigned k);
/* kvp_alloc_block + kvp_free_block: the raw path, no owner. */
void kvb_case_kv_raw(kvb_case *c, kvp_pool *pool, kvp_stream s);
/* The mutex pool: mpool_allocate + mpool_free(refs, k), or mpool_free_all. */
void kvb_case_mutex(kvb_case *c, mpool *pool, unsigned k, bool free_all);
/* The limit: pop and push an id on a per-thread array, no atomics, no sharing. */
void kvb_case_limit(kvb_case *c);

#endif /* KVPOOL_BENCH_CASES_H */
