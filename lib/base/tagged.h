/*
 * lib/base/tagged.h - the tagged word of every lock-free stack and queue in kvpool.
 *
 * A lock-free list that names its entries by 32-bit index keeps its head
 * (and, for a queue, its tail and links) in one 64-bit word:
 *
 *     bits 63..32  ABA tag: bumped by every successful compare-and-swap
 *     bits 31..0   index of the entry (the list's "none" value when empty)
 *
 * A CAS on the word succeeds only if neither the index nor the tag changed
 * since the load.  Take a thread that read a head and slept while the entry
 * was popped and pushed back.  When it then tries its CAS, the CAS fails
 * instead of installing a stale successor.  32 bits of tag wrap only after 2^32
 * successful changes between one thread's load and its CAS.
 *
 * Used by the pool's free stacks (lib/pool/freestack.h) and the buffer
 * cache's node free lists and queues (lib/bufcache/).  Pure functions: no
 * memory access, so callers choose their own memory orders.
 *
 *   function            who may call   cost
 *   ------------------  -------------  -----------------------
 *   kvpi_tagged_pack    any thread     a shift and an or
 *   kvpi_tagged_index   any thread     a truncation
 *   kvpi_tagged_tag     any thread     a shift
 *   kvpi_tagged_next    any thread     the word after @old with @index on top
 */
#ifndef KVPOOL_LIB_BASE_TAGGED_H
#define KVPOOL_LIB_BASE_TAGGED_H

#include <stdint.h>

/** kvpi_tagged_pack - the word {@tag, @index} */
static inline uint64_t kvpi_tagged_pack(uint32_t tag, uint32_t index)
{
	return ((uint64_t)tag << 32) | index;
}

/** kvpi_tagged_index - the index half of @w */
static inline uint32_t kvpi_tagged_index(uint64_t w)
{
	return (uint32_t)w;
}

/** kvpi_tagged_tag - the tag half of @w */
static inline uint32_t kvpi_tagged_tag(uint64_t w)
{
	return (uint32_t)(w >> 32);
}

/**
 * kvpi_tagged_next - what a successful CAS on @old installs to name @index:
 * @old's tag plus one (wrapping), and @index
 */
static inline uint64_t kvpi_tagged_next(uint64_t old, uint32_t index)
{
	return kvpi_tagged_pack(kvpi_tagged_tag(old) + 1, index);
}

#endif /* KVPOOL_LIB_BASE_TAGGED_H */
