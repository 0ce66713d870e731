/*
 * lib/prefix/prefix_internal.h - the prefix cache inside the pool (kvpool/prefix.h).
 *
 * A pool made with prefix_cache keeps, beside the ordinary block path:
 *
 *   - a side entry per block id (struct kvp_pside) in a two-level table that
 *     never moves (segments of KVP_SEG_BLOCKS entries, made with the pool's
 *     growth under its grow mutex and published with a release store):
 *     hold count, XOR of the holders' owner ids, the block's index node, its
 *     spare index nodes, its LRU links, and a hint of its position in its
 *     latest holder's hold array;
 *   - KVP_PFX_STRIPES block stripe mutexes: stripe (id % KVP_PFX_STRIPES)
 *     guards hold count, holder XOR, index node and spare nodes of its blocks,
 *     and every change of a block's state word except three: set_used and the
 *     hand-out of a popped block (both as in the plain pool), and the
 *     evictor's CACHED -> EVICTING CAS;
 *   - the key index: liburcu's lock-free resizable hash table (cds_lfht, bp
 *     flavor) of index nodes keyed by (stream tag, 128-bit key); looked up
 *     in a read-side section with no lock, changed under the block's stripe
 *     mutex; a deleted node is reused only after a grace period (call_rcu
 *     hands it back to its block's spare list);
 *   - per stream, KVP_PFX_LRU_SHARDS LRU lists of cached blocks (mutex per
 *     shard, shard = id % KVP_PFX_LRU_SHARDS), each in order of a global
 *     cache sequence number stamped under the shard mutex;
 *   - its own owner table (KVP_PFX_OWNER_SHARDS shards, mutex each): an
 *     owner record holds the ids it holds in an array, in hold order, with
 *     tombstones (KVP_NO_ID) compacted when they outnumber the live ids.
 *     Records and their arrays are recycled per shard.
 *
 * Block states in prefix mode (state word bits, lib/pool/blocktable.h):
 *
 *   free (on a free stack or magazine) --allocate--> IN_USE (1 holder)
 *   IN_USE --match--> IN_USE (one more holder)     (stripe mutex)
 *   IN_USE --publish--> IN_USE|PUBLISHED           (stripe mutex, CAS)
 *   IN_USE --last hold dropped, unpublished--> free (stripe mutex, CAS)
 *   IN_USE|PUBLISHED --last hold dropped--> CACHED|PUBLISHED, on an LRU list
 *                                           (stripe mutex, then LRU mutex)
 *   CACHED --match--> IN_USE|PUBLISHED, new generation (stripe mutex, CAS)
 *   CACHED --evictor--> EVICTING (LRU mutex, CAS; no stripe mutex) --key
 *           dropped under the stripe mutex--> free, handed out or pushed.
 *
 * A match and an eviction race only on the CAS out of CACHED: exactly one
 * wins.  The winner of a match unlinks the block from its LRU list; an
 * evictor that walks past a block whose CAS it lost leaves it to that match.
 *
 * Lock order (outer first):
 *   owner shard mutex (prefix table) -> block stripe mutex -> LRU shard mutex
 *   owner shard mutex -> [leave read-side section] grow mutex (growth)
 * A thread holds at most one stripe and one LRU mutex at a time.  An evictor
 * takes a stripe mutex only after it has released its LRU mutex.  The
 * call_rcu callback takes one stripe mutex and nothing else.
 *
 * Synchronization:
 *
 *   data                       written by / under            read by / under
 *   -------------------------  ----------------------------  --------------------------
 *   pside.holders, .owner_xor  stripe mutex, or the hand-out  stripe mutex; block_get
 *                              (exclusive) before its         racily (atomic, seqlock
 *                              release store of the state     on the state word)
 *   pside.pub, .spare          stripe mutex                   stripe mutex
 *   pside.lru_*                LRU shard mutex                LRU shard mutex
 *   pside.pos_hint             any (relaxed): a hint, always  owner shard mutex, checked
 *                              checked against the array      against the array
 *   lru.head_seq, lru.n        LRU shard mutex (atomic)       evictors' scans, n_free,
 *                                                             stats (relaxed, hints)
 *   index (cds_lfht)           add/del under stripe mutex,    lookups in a read-side
 *                              in a read-side section         section, no lock
 *   porec (owner records)      owner shard mutex              owner shard mutex
 */
#ifndef KVPOOL_LIB_PREFIX_INTERNAL_H
#define KVPOOL_LIB_PREFIX_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <kvpool/prefix.h>

#include "lib/pool/pool_internal.h"
#include "lib/base/rcu.h"

#define KVP_PFX_STRIPES      1024u
#define KVP_PFX_LRU_SHARDS   16u
#define KVP_PFX_OWNER_SHARDS 256u
/* Side table: top level of KVP_PFX_TOP entries, each a segment directory of
 * KVP_PFX_MID segments of KVP_SEG_BLOCKS entries (2^31 ids in all). */
#define KVP_PFX_MID_SHIFT 10u
#define KVP_PFX_MID       (1u << KVP_PFX_MID_SHIFT)
#define KVP_PFX_TOP       (1u << (31 - KVP_PFX_MID_SHIFT - KVP_SEG_SHIFT))
/* Recycled owner records kept per shard. */
#define KVP_PFX_SPARE_RECS 16u

struct kvp_prefix;

/* One published key: a node of the index, owned by one block. */
struct kvp_pnode {
	struct cds_lfht_node_room {
		void *next;
		unsigned long reverse_hash;
	} node; /* a struct cds_lfht_node (lib/prefix/prefix_index.c checks the size) */
	struct kvp_rcu_cb rcu;   /* deferred reuse */
	struct kvp_prefix *pf;   /* for the deferred callback */
	struct kvp_pnode *spare; /* next on the block's spare list */
	kvp_hash key;
	uint32_t id;
	uint32_t stream; /* stream tag (kvpi_stream_tag) */
};

/* Per-block prefix state (see the table above). */
struct kvp_pside {
	_Atomic uint32_t holders;
	_Atomic uint32_t pos_hint;
	_Atomic uint64_t owner_xor;
	struct kvp_pnode *pub;   /* the node the block is published under, or NULL */
	struct kvp_pnode *spare; /* nodes past their grace period, for reuse */
	uint64_t lru_seq;
	uint32_t lru_prev, lru_next;
};

struct kvp_plru {
	pthread_mutex_t lock;
	uint32_t head, tail;
	_Atomic uint64_t head_seq; /* UINT64_MAX when empty */
	_Atomic uint32_t n;
} __attribute__((aligned(64)));

struct kvp_porec {
	struct kvp_porec *next; /* bucket chain or spare list */
	kvp_owner key;
	uint32_t *ids;   /* held ids in hold order; KVP_NO_ID = tombstone */
	uint32_t len;    /* entries used, tombstones included */
	uint32_t cap;    /* entries allocated */
	uint32_t count;  /* live entries: blocks held */
	bool registered; /* by kvp_register_owner, not yet released */
};

struct kvp_poshard {
	pthread_mutex_t lock;
	struct kvp_porec **buckets;
	uint32_t nbuckets; /* power of two */
	uint32_t n;
	struct kvp_porec *spare;
	uint32_t n_spare;
} __attribute__((aligned(64)));

struct kvp_prefix {
	struct cds_lfht *ht;
	bool grow;                 /* the pool's grow_on_exhaustion (the pool's own flag is off) */
	_Atomic uint64_t deferred; /* index nodes waiting for a grace period */
	/* relaxed fetch_add under an LRU shard mutex: a number, orders nothing. */
	_Atomic uint64_t seq __attribute__((aligned(64)));
	_Atomic(_Atomic(struct kvp_pside *) *) top[KVP_PFX_TOP];
	pthread_mutex_t stripe[KVP_PFX_STRIPES];
	struct kvp_plru lru[2][KVP_PFX_LRU_SHARDS];
	struct kvp_poshard osh[KVP_PFX_OWNER_SHARDS];
};

/* The side entry of @id: created (below kvp_pool_n_ids or from a free stack). */
static inline struct kvp_pside *kvpi_pfx_side(struct kvp_prefix *pf, uint32_t id)
{
	/* acquire (both): pairs with the release stores of kvpi_pfx_extend, so
	 * the entries initialised before publication are seen. */
	_Atomic(struct kvp_pside *) *mid = atomic_load_explicit(
	    &pf->top[id >> (KVP_PFX_MID_SHIFT + KVP_SEG_SHIFT)], memory_order_acquire);
	struct kvp_pside *seg = atomic_load_explicit(
	    &mid[(id >> KVP_SEG_SHIFT) & (KVP_PFX_MID - 1)], memory_order_acquire);
	return &seg[id & KVP_SEG_MASK];
}

static inline pthread_mutex_t *kvpi_pfx_stripe(struct kvp_prefix *pf, uint32_t id)
{
	return &pf->stripe[id % KVP_PFX_STRIPES];
}

/* Stream index of a block from its state word. */
static inline int kvpi_pfx_si(const struct kvp_pool *p, uint64_t st)
{
	return p->separate_kv ? (int)kvpi_st_stream(st) : 0;
}

/* lib/prefix/prefix.c: life cycle. */
int kvpi_pfx_create(struct kvp_pool *p, const kvp_pool_config *cfg);
void kvpi_pfx_destroy(struct kvp_pool *p);
/* Side entries for ids below @n_ids; grow mutex held (or creation).  0 or -1. */
int kvpi_pfx_extend(struct kvp_prefix *pf, uint32_t n_ids);

/* lib/prefix/prefix_index.c: the key index.  All in a read-side section. */
int kvpi_pfx_index_init(struct kvp_prefix *pf);
void kvpi_pfx_index_destroy(struct kvp_prefix *pf);
struct kvp_pnode *kvpi_pfx_index_lookup(struct kvp_prefix *pf, uint32_t stream,
                                        const kvp_hash *key);
/* Add @n; returns NULL, or the node already published under its key. */
struct kvp_pnode *kvpi_pfx_index_add(struct kvp_prefix *pf, struct kvp_pnode *n);
/* Delete @n (stripe mutex held) and hand it back to its block after a grace period. */
void kvpi_pfx_index_del(struct kvp_prefix *pf, struct kvp_pnode *n);
/* A node for block @id: its spare one, or a new one (NULL: no memory). Stripe held. */
struct kvp_pnode *kvpi_pfx_node_get(struct kvp_prefix *pf, struct kvp_pside *e);
/* Call @fn on every node in the index (read-side section; @fn may delete it). */
void kvpi_pfx_index_each(struct kvp_prefix *pf, void (*fn)(struct kvp_pnode *n, void *arg),
                         void *arg);
/* Forget the key of block @id: its stripe mutex held. */
void kvpi_pfx_forget(struct kvp_prefix *pf, struct kvp_pside *e);

/* lib/prefix/prefix_lru.c: LRU lists of cached blocks. */
void kvpi_pfx_lru_init(struct kvp_prefix *pf);
void kvpi_pfx_lru_destroy(struct kvp_prefix *pf);
void kvpi_pfx_lru_insert(struct kvp_prefix *pf, int si, uint32_t id);
void kvpi_pfx_lru_unlink(struct kvp_prefix *pf, int si, uint32_t id);
uint64_t kvpi_pfx_n_cached(struct kvp_prefix *pf, int si);
/*
 * The CAS out of CACHED (state @st) to @nst: a match (to IN_USE) and an
 * evictor (to EVICTING) race on it, and exactly one wins.  Out of line so
 * the race test can widen the window before it.
 */
bool kvpi_pfx_leave_cached(struct kvp_block *b, uint64_t st, uint64_t nst);
/*
 * Evict up to @n cached blocks of stream @si, least recently cached first,
 * into @ids; their keys are forgotten and their state words are plain free
 * (held exclusively by the caller, on no list).  In a read-side section.
 */
uint32_t kvpi_pfx_evict(struct kvp_pool *p, struct kvp_tslot *s, int si, uint32_t *ids, uint32_t n);

/* lib/prefix/prefix_owner.c: the prefix owner table. */
int kvpi_pfx_owners_init(struct kvp_prefix *pf);
void kvpi_pfx_owners_destroy(struct kvp_prefix *pf);
struct kvp_poshard *kvpi_pfx_oshard(struct kvp_prefix *pf, kvp_owner key);
struct kvp_porec *kvpi_pfx_ofind(struct kvp_poshard *sh, kvp_owner key);
struct kvp_porec *kvpi_pfx_oinsert(struct kvp_poshard *sh, kvp_owner key);
void kvpi_pfx_oremove(struct kvp_poshard *sh, struct kvp_porec *r);
/* Room for @extra more ids in @r (compacting first); 0 or -1 (no memory). */
int kvpi_pfx_oreserve(struct kvp_prefix *pf, struct kvp_porec *r, uint32_t extra);
/* Append @id (room reserved). */
void kvpi_pfx_oappend(struct kvp_prefix *pf, struct kvp_porec *r, uint32_t id);
/* Position of @id in @r, or -1. */
int64_t kvpi_pfx_ofind_pos(struct kvp_prefix *pf, const struct kvp_porec *r, uint32_t id);
/* Tombstone position @pos. */
void kvpi_pfx_oremove_at(struct kvp_porec *r, uint32_t pos);

/* lib/prefix/prefix_pool.c: the pool calls in prefix mode (dispatched from the pool). */
int kvpi_pfx_allocate(struct kvp_pool *p, int si, uint32_t n_tokens, kvp_owner owner,
                      kvp_format format, kvp_ref *refs, uint32_t nb);
int kvpi_pfx_alloc_block(struct kvp_pool *p, int si, kvp_format format, kvp_ref *out);
int kvpi_pfx_free(struct kvp_pool *p, const kvp_ref *refs, size_t n);
int kvpi_pfx_free_all(struct kvp_pool *p, kvp_owner owner);
int kvpi_pfx_free_owned(struct kvp_pool *p, kvp_owner owner, const kvp_ref *refs, size_t n);
int kvpi_pfx_blocks_for(struct kvp_pool *p, kvp_owner owner, kvp_ref *refs, size_t cap, size_t *n);
int kvpi_pfx_register_owner(struct kvp_pool *p, kvp_owner owner);
int kvpi_pfx_release_owner(struct kvp_pool *p, kvp_owner owner);
int kvpi_pfx_shrink(struct kvp_pool *p, int si, uint32_t target_free, uint32_t *n_retired);
int kvpi_pfx_block_get(struct kvp_pool *p, kvp_ref ref, kvp_block_info *out);
/* Take @k blocks of @si: uncached free ones, then evicted, then growth. */
int kvpi_pfx_get_blocks(struct kvp_pool *p, struct kvp_tslot *s, int si, kvp_u32_alias *ids,
                        uint32_t k);

#endif /* KVPOOL_LIB_PREFIX_INTERNAL_H */
