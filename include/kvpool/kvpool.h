/*
 * kvpool/kvpool.h - everything: #include <kvpool/kvpool.h>.
 *
 * kvpool manages KV-cache memory for LLM inference servers: a lock-free
 * block pool (pool.h, stats.h), an aligned buffer cache (bufcache.h), block
 * storage (storage.h) and a paged KV cache (kvcache.h).  See README.md and
 * docs/ for the design and the threading contract of each part.
 */
#ifndef KVPOOL_KVPOOL_H
#define KVPOOL_KVPOOL_H

#include <kvpool/status.h>
#include <kvpool/pool.h>
#include <kvpool/stats.h>
#include <kvpool/prefix.h>
#include <kvpool/bufcache.h>
#include <kvpool/storage.h>
#include <kvpool/kvcache.h>

#define KVPOOL_VERSION_MAJOR 0
#define KVPOOL_VERSION_MINOR 1
#define KVPOOL_VERSION_PATCH 0
#define KVPOOL_VERSION       "0.1.0"

#endif /* KVPOOL_KVPOOL_H */
