/*
 * kvpool/kvpool.h - everything: #include <kvpool/kvpool.h>.
 *
 * kvpool manages KV-cache memory for LLM inference servers: a lock-free
 * block pool (pool.h, stats.h), an aligned buffer cache (bufcache.h), block
 * storage (storage.h) and a paged KV cache (kvcache.h); report.h exports a
 * live pool's figures (Prometheus text, a stats dump), version.h the
 * version.  See README.md and docs/ for the design and the threading
 * contract of each part.
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
#include <kvpool/remote.h>
#include <kvpool/report.h>
#include <kvpool/version.h>

/* The same version under its first names (kvpool/version.h has KVP_VERSION_*). */
#define KVPOOL_VERSION_MAJOR KVP_VERSION_MAJOR
#define KVPOOL_VERSION_MINOR KVP_VERSION_MINOR
#define KVPOOL_VERSION_PATCH KVP_VERSION_PATCH
#define KVPOOL_VERSION       KVP_VERSION

#endif /* KVPOOL_KVPOOL_H */
