/*
 * kvpool/kvpool.h - everything: #include <kvpool/kvpool.h>.
 *
 * kvpool manages KV-cache memory for LLM inference servers.  Its parts:
 *   - a lock-free block pool (pool.h, stats.h) with a prefix cache
 *     (prefix.h);
 *   - an aligned buffer cache (bufcache.h);
 *   - block storage (storage.h);
 *   - a paged KV cache (kvcache.h);
 *   - a remote prefix tier on Redis (remote.h).
 * report.h exports a live pool's figures (Prometheus text, a stats dump).
 * version.h gives the version.  See README.md and docs/ for the design.
 * Each header states the threading contract of its part.
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
