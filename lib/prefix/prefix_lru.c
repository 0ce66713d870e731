/*
 * lib/prefix/prefix_lru.c - cached blocks, least recently cached first.
 *
 * Per stream, KVPI_PFX_LRU_SHARDS doubly linked lists through the blocks'
 * side entries, each under its own mutex.  Each thread has a home shard
 * (its slot's, kvpi_pfx_home): the release that caches a block puts it on
 * the releasing thread's shard, and the block stays on that shard until it
 * leaves the lists.  Putting a block on a list stamps it with its caching
 * time while holding the shard's mutex and appends it: the coarse monotonic
 * clock in nanoseconds, or one more than the shard's last stamp if that is
 * not below it, so every list is in strictly increasing order; each shard
 * publishes the stamp of its head (head_seq).  (A counter shared by all
 * shards gave exact order across shards, but its cache line moved between
 * the cores on every caching: 88% of the samples in kvpi_pfx_lru_insert
 * with two threads publishing, docs/PREFIX.md.  Across shards the stamps now order
 * blocks by the clock, whose tick is a few milliseconds.)
 *
 * An allocation evicts in batches (kvpi_pfx_claim): each batch takes as
 * many blocks as it can under one hold of one shard's mutex.  A batch takes
 * the oldest blocks of the thread's home shard (local), those cached at
 * most KVPI_PFX_LRU_WINDOW_NS after the other shards' oldest (others_bound);
 * else, or when the home shard has nothing to give, it takes the stream's
 * oldest (global): from the shard whose head is oldest, the blocks cached
 * up to the window past the next shard's head.  So eviction is least
 * recently cached first across the stream, to within the window.  (When
 * evictions took the home shard's oldest unless the stream's was 50 ms
 * older, checked one eviction in 8, a thread evicted its own
 * conversations' blocks while older ones of other threads stayed: on the
 * lifecycle benchmark kvpool matched 22.7% of prompt blocks at 16 threads
 * where a pool with one exact LRU list matched 26.2%.  Taken one block
 * per mutex hold, global evictions had cost 30-40% of the throughput at 8
 * and 16 threads; in batches, with the window, the benchmark ran no slower
 * than before, docs/PREFIX.md.)
 *
 * The lists are lazy across shards (lib/prefix/prefix_internal.h): a match
 * takes a cached block without unlinking it (the block is marked stale),
 * and a release that caches a block still on another shard's list leaves
 * it there; one still on the releasing thread's own list moves to its tail
 * (kvpi_pfx_lru_insert, _many).  A
 * global eviction walks from the head of the shard with the smallest
 * head_seq (a local one from its home shard's head, to the end if need
 * be):
 *   - a cached block that is not stale: CAS CACHED -> EVICTING (the CAS a
 *     racing match's lock may beat; then the block is held, see below);
 *   - a stale cached block (taken and let go again since it was listed):
 *     moved to the tail with a new sequence number, as if cached now;
 *   - a held block: dropped from the list (its last release lists it
 *     again);
 *   - a locked block: skipped (its locker is changing it).
 * The last two take the block's lock bit with one CAS that never waits.
 * A walk meets the blocks it moved again at the tail (and takes one if it
 * can), but never moves a block twice: one that is stale again by then is
 * left where it is, so a walk visits each block at most twice and ends
 * even while matches keep taking and letting go of the blocks it moved
 * (tests/prefix_walk_test.c).
 * In a global walk, a block stamped more than the window after the second
 * smallest head seen ends the walk (another shard may now hold an older
 * block); the evictor then scans again (another thread took a block
 * meanwhile, so the retry is progress somewhere).
 *
 * What holds (stated in kvpool/prefix.h's terms): let a block's caching
 * time be when it was put on its list, or when an evictor moved it to the
 * tail.  Then
 *   - within a shard, blocks are evicted strictly in caching-time order,
 *     but for a block that a match holds locked when the walk meets it
 *     (passed over; the match may leave it cached: one whose lookup found
 *     a key the block has since lost), and for one an allocation has
 *     claimed when the walk passes (off the list) and then gives back in
 *     its old place (kvpi_pfx_unclaim: the allocation failed);
 *     a thread's home shard holds every block it cached (and those of the
 *     threads that share the shard), so the blocks one thread cached are
 *     evicted in the order it cached them;
 *   - a block cached, taken by a match and cached again by a thread of
 *     its shard is cached anew then (moved to the tail); cached again by a
 *     thread of another shard, it keeps its old caching time until an
 *     eviction reaches it, which moves it to the tail: it outlives every
 *     block of its shard cached before that moment, but not necessarily
 *     the blocks cached between its first caching and its release.  (When
 *     every such block stayed in its old place, a request's matched blocks
 *     that an eviction had dropped while held were listed again at its
 *     release, and the rest were moved to the tail later, after them: the
 *     prompt's early blocks were then evicted while later ones stayed.  On
 *     the lifecycle benchmark at one thread, 128-288 publishes a run met a
 *     key still cached past one already gone; none do now.)
 *   - a local eviction takes the oldest block its home shard has to give
 *     (a walk never passes a block it could take);
 *   - a global batch during which no block is cached (or given back by
 *     kvpi_pfx_unclaim) takes, among blocks that no match took since they
 *     were cached, blocks cached at most the window after the least
 *     recently cached block of the whole stream, oldest first; a local
 *     batch, blocks of a shard whose oldest was cached at most the window
 *     after the stream's; eviction is exact LRU with one thread when no
 *     cached block is matched (its shard holds every cached block);
 *   - a block cached while an eviction scans may be ordered either way
 *     against the block that eviction takes.
 */
#include <sched.h>
#include <time.h>

#include "lib/base/spin.h"
#include "lib/prefix/prefix_internal.h"
#include "lib/prefix/prefix_lru_ahead.h"

void kvpi_pfx_lru_init(struct kvpi_prefix *pf)
{
	for (int si = 0; si < 2; si++)
		for (uint32_t i = 0; i < KVPI_PFX_LRU_SHARDS; i++) {
			struct kvpi_plru *l = &pf->lru[si][i];
			pthread_mutex_init(&l->lock, NULL);
			l->head = l->tail = KVPI_NO_ID;
			atomic_init(&l->head_seq, UINT64_MAX);
		}
}

void kvpi_pfx_lru_destroy(struct kvpi_prefix *pf)
{
	for (int si = 0; si < 2; si++)
		for (uint32_t i = 0; i < KVPI_PFX_LRU_SHARDS; i++)
			pthread_mutex_destroy(&pf->lru[si][i].lock);
}

/* The list block @id is on (listed; block locked or shard mutex held). */
static struct kvpi_plru *shard_of(struct kvpi_prefix *pf, int si, uint32_t id)
{
	return &pf->lru[si][kvpi_pfx_side(pf, id)->lru_shard];
}

/*
 * Take an LRU shard's mutex, spinning briefly first: every holder keeps it
 * for a few list operations, so a short spin is cheaper than the futex
 * sleep and wake-up a plain lock costs when two threads meet on a shard
 * (evictors taking consecutive oldest blocks, or an evictor and a release
 * caching into the shard it evicted from); after the spin, sleep.
 */
static void lru_lock(struct kvpi_plru *l)
{
	kvpi_mutex_lock_spin(&l->lock);
}

/* relaxed stores: head_seq and n are hints for scans, kept exact under the
 * shard mutex; nothing else is published through them. */
static void set_head(struct kvpi_prefix *pf, struct kvpi_plru *l, uint32_t id)
{
	l->head = id;
	atomic_store_explicit(&l->head_seq,
	                      id == KVPI_NO_ID ? UINT64_MAX : kvpi_pfx_side(pf, id)->lru_seq,
	                      memory_order_relaxed);
}

#ifdef CLOCK_MONOTONIC_COARSE
#define CACHING_CLOCK CLOCK_MONOTONIC_COARSE /* 7 ns a read here, vs 26 ns */
#else
#define CACHING_CLOCK CLOCK_MONOTONIC
#endif

/* The next caching time of shard @l (its mutex held): the clock, but always
 * above the shard's previous stamp. */
static uint64_t caching_time(struct kvpi_plru *l)
{
	struct timespec ts;
	uint64_t now = 0;
	if (clock_gettime(CACHING_CLOCK, &ts) == 0)
		now = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	l->last_seq = now > l->last_seq ? now : l->last_seq + 1;
	return l->last_seq;
}

/* Shard mutex held; @id, its caching time set, on no list: link it between
 * @prev and @next, neighbours on @l (KVPI_NO_ID at an end). */
static void link_locked(struct kvpi_prefix *pf, struct kvpi_plru *l, uint32_t id, uint32_t prev,
                        uint32_t next)
{
	struct kvpi_pside *e = kvpi_pfx_side(pf, id);
	e->lru_prev = prev;
	e->lru_next = next;
	if (prev == KVPI_NO_ID)
		set_head(pf, l, id);
	else
		kvpi_pfx_side(pf, prev)->lru_next = id;
	if (next == KVPI_NO_ID)
		l->tail = id;
	else
		kvpi_pfx_side(pf, next)->lru_prev = id;
	kvpi_pfx_set_flag(&e->listed, true);
	kvpi_pfx_set_flag(&e->stale, false);
}

/* Shard mutex held; @id on no list: at the tail, cached now. */
static void append_locked(struct kvpi_prefix *pf, struct kvpi_plru *l, uint32_t id)
{
	struct kvpi_pside *e = kvpi_pfx_side(pf, id);
	e->lru_seq = caching_time(l);
	e->lru_shard = (uint8_t)((l - pf->lru[0]) % KVPI_PFX_LRU_SHARDS);
	link_locked(pf, l, id, l->tail, KVPI_NO_ID);
	kvpi_ahead_linked(pf, id);
}

/* Shard mutex held; @id listed. */
static void unlink_locked(struct kvpi_prefix *pf, struct kvpi_plru *l, uint32_t id)
{
	struct kvpi_pside *e = kvpi_pfx_side(pf, id);
	if (e->lru_prev == KVPI_NO_ID)
		set_head(pf, l, e->lru_next);
	else
		kvpi_pfx_side(pf, e->lru_prev)->lru_next = e->lru_next;
	if (e->lru_next == KVPI_NO_ID)
		l->tail = e->lru_prev;
	else
		kvpi_pfx_side(pf, e->lru_next)->lru_prev = e->lru_prev;
	e->lru_prev = e->lru_next = KVPI_NO_ID;
	kvpi_pfx_set_flag(&e->listed, false);
	kvpi_pfx_set_flag(&e->stale, false);
}

void kvpi_pfx_lru_insert(struct kvpi_prefix *pf, const struct kvpi_tslot *s, int si, uint32_t id)
{
	kvpi_pfx_lru_insert_many(pf, s, si, &id, 1);
}

void kvpi_pfx_lru_insert_many(struct kvpi_prefix *pf, const struct kvpi_tslot *s, int si,
                              const uint32_t *ids, uint32_t n)
{
	if (n == 0)
		return;
	uint32_t home = kvpi_pfx_home(s);
	struct kvpi_plru *l = &pf->lru[si][home];
	lru_lock(l);
	/* One clock read: the later blocks take the next stamps, so the
	 * list stays in strictly increasing order. */
	uint64_t seq = caching_time(l);
	uint32_t k = 0;
	/* The look-ahead of appends: the block KVPI_LRU_AHEAD before each new
	 * tail gets its id (the tail's own hint is none). */
	uint32_t back[KVPI_LRU_AHEAD]; /* back[j]: the block j + 1 before the tail's place */
	kvpi_ahead_tail_back(pf, l, back);
	struct kvpi_blocktable *bt = pf->bt;
	struct kvpi_block *seg0 = bt->seg0;
	uint32_t n0 = bt->n0;
	for (uint32_t i = 0; i < n; i++) {
		struct kvpi_pside *e = kvpi_pfx_side(pf, ids[i]);
		/* listed and lru_shard change only under the block lock (ours)
		 * and the shard mutex: both stay as read here. */
		if (kvpi_pfx_flag(&e->listed)) {
			/* On another thread's list it stays (lazy); on ours it
			 * moves to the tail. */
			if (e->lru_shard != home)
				continue;
			unlink_locked(pf, l, ids[i]);
			kvpi_ahead_tail_back(pf, l, back);
		}
		e->lru_seq = seq + k++;
		e->lru_shard = (uint8_t)home;
		link_locked(pf, l, ids[i], l->tail, KVPI_NO_ID);
		kvpi_ahead_append(bt, seg0, n0, back, ids[i]);
	}
	if (k)
		l->last_seq = seq + k - 1;
	pthread_mutex_unlock(&l->lock);
}

void kvpi_pfx_lru_unlink(struct kvpi_prefix *pf, int si, uint32_t id)
{
	/* listed and lru_shard change only under the shard mutex and the
	 * block's lock, which we hold: both stay as read here. */
	if (!kvpi_pfx_flag(&kvpi_pfx_side(pf, id)->listed))
		return;
	struct kvpi_plru *l = shard_of(pf, si, id);
	lru_lock(l);
	unlink_locked(pf, l, id);
	pthread_mutex_unlock(&l->lock);
}

uint64_t kvpi_pfx_n_cached(struct kvpi_prefix *pf, int si)
{
	/* acquire: pairs with kvpi_pfx_count_one's release (one counter: the
	 * count of one instant, never below the blocks cached and unheld). */
	int64_t n = atomic_load_explicit(&pf->cached[0].n[si], memory_order_acquire);
	return n > 0 ? (uint64_t)n : 0;
}

/*
 * Walk shard @l, its mutex held, from the head: take up to @want cached
 * blocks that no match took since they were listed, into @ids, fixing the
 * place of held and stale blocks on the way, and stop at a block listed
 * after @bound.  Returns how many it took, each off the list and in
 * EVICTING; the mutex stays held.
 */
static uint32_t walk_locked(struct kvp_pool *p, struct kvpi_plru *l, uint64_t bound, uint32_t *ids,
                            uint32_t want)
{
	uint32_t got = 0;
	struct kvpi_prefix *pf = p->prefix;
	/* The blocks this walk moves to the tail are stamped above this. */
	uint64_t moved_above = l->last_seq;
	/* Ids below it have side entries and block table entries to
	 * prefetch (a stale look-ahead hint is any id ever listed). */
	uint32_t n_ids = kvp_pool_n_ids(p);
	for (uint32_t id = l->head; id != KVPI_NO_ID && got < want;) {
		struct kvpi_pside *e = kvpi_pfx_side(pf, id);
		if (e->lru_seq > bound)
			break; /* another shard may now hold an older block */
		uint32_t next = e->lru_next;
		struct kvpi_block *b = kvpi_bt_block(&p->bt, id);
		uint32_t ahead = b->lru_ahead; /* lib/prefix/prefix_lru_ahead.h */
		if (ahead < n_ids) {
			__builtin_prefetch(kvpi_pfx_side(pf, ahead));
			__builtin_prefetch(kvpi_bt_block(&p->bt, ahead));
		}
		/* acquire: see the state its last holder or locker left, and
		 * the stale flag written before that release. */
		uint64_t st = atomic_load_explicit(&b->state, memory_order_acquire);
		/* Locked: its locker is changing it; leave it.  (A listed block
		 * is held or cached, but for one an allocation is giving back
		 * (EVICTING, CACHED again in a moment or evicted,
		 * kvpi_pfx_unclaim): leave it too.  The release that frees a
		 * listed block takes it off first.) */
		if ((st & KVPI_ST_LOCKED) || !(st & (KVPI_ST_IN_USE | KVPI_ST_CACHED))) {
			id = next;
			continue;
		}
		if ((st & KVPI_ST_CACHED) && !kvpi_pfx_flag(&e->stale)) {
			if (kvpi_pfx_cas(b, st, (st & ~KVPI_ST_CACHED) | KVPI_ST_EVICTING)) {
				unlink_locked(pf, l, id);
				ids[got++] = id;
				id = next;
				continue;
			}
			/* A match locked it: it is held now, or the match
			 * found it no longer has its key and left it cached
			 * (passed over: kvpool/prefix.h). */
			id = next;
			continue;
		}
		/* Stale again since this walk moved it: leave it.  Moving it
		 * again would meet it again, and the walk would last as long as
		 * matches keep taking and letting go of the blocks it moved. */
		if ((st & KVPI_ST_CACHED) && e->lru_seq > moved_above) {
			id = next;
			continue;
		}
		/* Held, or stale: fix its place under its lock, tried once. */
		if (kvpi_pfx_cas(b, st, st | KVPI_ST_LOCKED)) {
			unlink_locked(pf, l, id);
			if (st & KVPI_ST_CACHED) /* stale: as if cached now */
				append_locked(pf, l, id);
			kvpi_pfx_unlock(b, st);
		}
		id = next;
	}
	return got;
}

/* The newest caching time a batch may take while another shard of stream
 * @si than @home holds a block: the window past the oldest of their heads
 * (UINT64_MAX when they hold none). */
static uint64_t others_bound(struct kvpi_prefix *pf, int si, uint32_t home)
{
	uint64_t oldest = UINT64_MAX;
	for (uint32_t i = 0; i < KVPI_PFX_LRU_SHARDS; i++) {
		/* relaxed: hints, as in evict_global. */
		uint64_t v = atomic_load_explicit(&pf->lru[si][i].head_seq, memory_order_relaxed);
		if (i != home && v < oldest)
			oldest = v;
	}
	return oldest > UINT64_MAX - KVPI_PFX_LRU_WINDOW_NS ? UINT64_MAX
	                                                    : oldest + KVPI_PFX_LRU_WINDOW_NS;
}

/* A local eviction: up to @want of the oldest blocks shard @home of stream
 * @si has to give, into @ids, none cached more than the window after the
 * other shards' oldest (others_bound); returns how many. */
static uint32_t evict_local(struct kvp_pool *p, int si, uint32_t home, uint32_t *ids, uint32_t want)
{
	struct kvpi_plru *l = &p->prefix->lru[si][home];
	/* relaxed: a hint; an empty shard, or one whose oldest is too young,
	 * is passed over without its mutex, and the global eviction that
	 * follows looks again. */
	uint64_t bound = others_bound(p->prefix, si, home);
	uint64_t head = atomic_load_explicit(&l->head_seq, memory_order_relaxed);
	if (head == UINT64_MAX || head > bound)
		return 0;
	lru_lock(l);
	uint32_t got = walk_locked(p, l, bound, ids, want);
	pthread_mutex_unlock(&l->lock);
	return got;
}

/* A global eviction: up to @want of the least recently cached blocks of
 * stream @si, into @ids, off their list, their state now EVICTING.  They
 * come from the shard with the oldest head, and none was cached after the
 * next shard's head: so the batch is in the stream's LRU order.  Returns
 * how many (0 when no block is cached). */
static uint32_t evict_global(struct kvp_pool *p, int si, uint32_t *ids, uint32_t want)
{
	struct kvpi_prefix *pf = p->prefix;
	struct kvpi_spin spin = {0};
	for (;;) {
		uint64_t m1 = UINT64_MAX, m2 = UINT64_MAX;
		int best = -1;
		for (uint32_t i = 0; i < KVPI_PFX_LRU_SHARDS; i++) {
			/* relaxed: a hint, checked under the shard mutex below. */
			uint64_t v =
			    atomic_load_explicit(&pf->lru[si][i].head_seq, memory_order_relaxed);
			if (v < m1) {
				m2 = m1;
				m1 = v;
				best = (int)i;
			} else if (v < m2) {
				m2 = v;
			}
		}
		if (best < 0)
			return 0;
		struct kvpi_plru *l = &pf->lru[si][best];
		lru_lock(l);
		/* Up to the next shard's head, and within the window past it:
		 * blocks cached within one window of each other are taken as
		 * cached at once (the clock's tick is a few milliseconds). */
		uint64_t bound = m2 > UINT64_MAX - KVPI_PFX_LRU_WINDOW_NS
		                     ? UINT64_MAX
		                     : m2 + KVPI_PFX_LRU_WINDOW_NS;
		uint32_t got = walk_locked(p, l, bound, ids, want);
		pthread_mutex_unlock(&l->lock);
		if (got)
			return got;
		kvpi_spin_wait(&spin);
	}
}

/* Up to @want blocks into @ids: from the home shard, those cached within
 * the window of the other shards' oldest; else (none) the stream's oldest.
 * Returns how many (0: nothing cached). */
static uint32_t evict_batch(struct kvp_pool *p, struct kvpi_tslot *s, int si, uint32_t *ids,
                            uint32_t want)
{
	uint32_t got = evict_local(p, si, kvpi_pfx_home(s), ids, want);
	return got ? got : evict_global(p, si, ids, want);
}

uint32_t kvpi_pfx_claim(struct kvp_pool *p, struct kvpi_tslot *s, int si, uint32_t *ids, uint32_t n)
{
	uint32_t got = 0;
	while (got < n) {
		uint32_t k = evict_batch(p, s, si, ids + got, n - got);
		if (k == 0)
			break;
		got += k;
	}
	return got;
}

void kvpi_pfx_commit(struct kvp_pool *p, struct kvpi_tslot *s, int si, const uint32_t *ids,
                     uint32_t n)
{
	kvpi_pfx_commit_uncounted(p, s, ids, n);
	/* after the blocks left the cache: the count never runs low */
	kvpi_pfx_count_one(p->prefix, si, -(int64_t)n);
}

void kvpi_pfx_commit_uncounted(struct kvp_pool *p, struct kvpi_tslot *s, const uint32_t *ids,
                               uint32_t n)
{
	/* We own the blocks (EVICTING): no match can lock them, and a
	 * matcher that found an old key sees EVICTING, then free. */
	kvpi_pfx_forget_many(p->prefix, ids, n);
	for (uint32_t i = 0; i < n; i++) {
		struct kvpi_block *b = kvpi_bt_block(&p->bt, ids[i]);
		/* relaxed load: ours.  release store: a kvp_block_get or a
		 * matcher (acquire) sees a whole word, and the next owner the
		 * last holders' writes (chained through our acquire CAS). */
		uint64_t st = atomic_load_explicit(&b->state, memory_order_relaxed);
		atomic_store_explicit(&b->state, st & ~(KVPI_ST_EVICTING | KVPI_ST_PUBLISHED),
		                      memory_order_release);
	}
	kvpi_ctr_add(s, KVPI_C_EVICTIONS, n);
}

/* Shard mutex held; @id (ours, EVICTING) on no list: put it back where its
 * caching time says, so the list stays in order. */
static void insert_sorted_locked(struct kvpi_prefix *pf, struct kvpi_plru *l, uint32_t id)
{
	uint64_t seq = kvpi_pfx_side(pf, id)->lru_seq;
	uint32_t prev = KVPI_NO_ID, next = l->head;
	while (next != KVPI_NO_ID && kvpi_pfx_side(pf, next)->lru_seq < seq) {
		prev = next;
		next = kvpi_pfx_side(pf, next)->lru_next;
	}
	link_locked(pf, l, id, prev, next);
	kvpi_ahead_linked(pf, id);
}

/* A reset began after @resets0 was read, or was running then. */
static bool reset_overlapped(uint64_t resets0, uint64_t now)
{
	return (resets0 & 0xffffffffu) != 0 || (now >> 32) != (resets0 >> 32);
}

/* Evict @n claimed (EVICTING) blocks that kvpi_pfx_unclaim listed again:
 * off their lists, keys forgotten, pushed on the free stack, uncounted. */
static void evict_unclaimed(struct kvp_pool *p, struct kvpi_tslot *s, int si, const uint32_t *ids,
                            uint32_t n)
{
	struct kvpi_prefix *pf = p->prefix;
	for (uint32_t i = 0; i < n; i++) {
		struct kvpi_plru *l = shard_of(pf, si, ids[i]);
		lru_lock(l);
		unlink_locked(pf, l, ids[i]);
		pthread_mutex_unlock(&l->lock);
	}
	kvpi_pfx_commit_uncounted(p, s, ids, n);
	kvpi_fs_push_ids(&p->fs[si], &p->bt, ids, n);
	kvpi_pfx_count_one(pf, si, -(int64_t)n); /* pushed first: never low */
}

void kvpi_pfx_unclaim(struct kvp_pool *p, struct kvpi_tslot *s, int si, uint32_t *ids, uint32_t n,
                      uint64_t resets0)
{
	struct kvpi_prefix *pf = p->prefix;
	if (!n)
		return;
	/* Listed again before it is CACHED again: an evictor that meets
	 * it meanwhile passes it over (neither held nor cached), and no
	 * match or release can lock it until the store below, so nobody
	 * else lists it (listed and lru_shard are ours while EVICTING). */
	for (uint32_t i = 0; i < n; i++) {
		struct kvpi_plru *l = shard_of(pf, si, ids[i]);
		lru_lock(l);
		insert_sorted_locked(pf, l, ids[i]);
		pthread_mutex_unlock(&l->lock);
	}
	/* A reset that ran while the blocks were claimed passed them over.
	 * seq_cst fence, pairing with kvp_prefix_reset's add and fence: either
	 * the load below sees a reset that began, or that reset's scan sees
	 * the blocks listed (and waits for them to be CACHED, then evicts
	 * them).  relaxed load: ordered by the fence. */
	atomic_thread_fence(memory_order_seq_cst);
	uint64_t now = atomic_load_explicit(&pf->resets, memory_order_relaxed);
	if (reset_overlapped(resets0, now)) {
		evict_unclaimed(p, s, si, ids, n);
		return;
	}
	/* CACHED again only if its key still names it (decided under the
	 * key's index shard mutex).  The blocks whose keys went are moved
	 * to the front of @ids, and evicted. */
	uint32_t gone = 0;
	for (uint32_t i = 0; i < n; i++) {
		if (kvpi_pfx_index_recache(pf, ids[i]))
			continue;
		uint32_t t = ids[gone];
		ids[gone++] = ids[i];
		ids[i] = t;
	}
	if (gone)
		evict_unclaimed(p, s, si, ids, gone);
}

uint32_t kvpi_pfx_evict_free(struct kvp_pool *p, struct kvpi_tslot *s, int si, uint32_t *ids,
                             uint32_t n, bool own)
{
	uint32_t got = kvpi_pfx_claim(p, s, si, ids, n);
	kvpi_pfx_commit_uncounted(p, s, ids, got);
	if (own) /* the thread's magazine, or the stack as a free puts them */
		kvpi_put_blocks(p, s, si, ids, got);
	else /* the stream's global stack, where any thread takes them */
		kvpi_fs_push_ids(&p->fs[si], &p->bt, ids, got);
	/* after the put: an allocation that sees the count drop (acquire)
	 * sees the blocks on the stack, or in a magazine a drain empties */
	kvpi_pfx_count_one(p->prefix, si, -(int64_t)got);
	return got;
}
