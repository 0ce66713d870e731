/*
 * tests/fuzz/prefix_fuzz.c - libFuzzer: the prefix cache against a model.
 *
 * One thread drives a pool made with prefix_cache (block size, pool size
 * 4..64, separate_kv and thread cache chosen by the input) with a sequence
 * of calls chosen by the input: kvp_allocate (new and active owners, some
 * asking for more than the pool so that cached blocks are evicted or the
 * call is exhausted, some with a short refs_cap, a bad stream or format),
 * kvp_prefix_match (keys from a small key space, some never published; a
 * short refs_cap, NULL keys), kvp_prefix_publish and _publish_many (held
 * full blocks, and not-full, free, cached, raw, stale and never-created
 * refs, keys already taken), kvp_free, kvp_free_owned, kvp_free_all,
 * kvp_register_owner, kvp_release_owner, kvp_alloc_block, kvp_free_block,
 * kvp_prefix_reset, kvp_shrink, kvp_block_set_used, kvp_block_get,
 * kvp_blocks_for, kvp_pool_stats and kvp_n_free; and whole requests as a
 * server makes them (match a key sequence, allocate the rest, publish it,
 * kvp_free_all), which keep hits and evictions frequent.
 *
 * A model written from kvpool/pool.h, kvpool/prefix.h and kvpool/stats.h
 * knows, per block, whether it is free, cached, held (and by which owners),
 * raw or retired, its current ref, format, fill and key; per owner, the
 * blocks it holds in kvp_blocks_for order; per stream and key, the block
 * published under it.  After every call it checks:
 *   - the status, against those the header gives for that case (where the
 *     header allows two, either, and the model follows what happened);
 *   - isolation: kvp_allocate and kvp_alloc_block hand out only free or
 *     cached blocks of the stream, never a held one; uncached free blocks
 *     go first, and the cached ones evicted are exactly the shortfall, the
 *     least recently cached (one thread: exact LRU; the caching order of a
 *     kvp_free of several refs is not documented, so those tie);
 *   - a match returns, for each key in order, the block published under
 *     that key (stream and format) and stops at the first that has none;
 *     a block already held comes back with no second hold;
 *   - every block through kvp_block_get (in use, holders, owner,
 *     published, format, n_used, stream), stale refs ENOENT;
 *   - kvp_blocks_for of every owner: exactly its holds, in allocation
 *     order with matched blocks after (KVP_ENOENT once not active, e.g.
 *     after kvp_free_all), and KVP_ERANGE one short;
 *   - conservation: kvp_n_free of each stream (cached blocks included) +
 *     blocks in use = blocks managed, n_cached <= free;
 *   - the counters of kvp_pool_stats: blocks managed, allocations, frees,
 *     reused, exhausted, grown, retired, stale frees, not full, peak,
 *     cached, prefix queries and hits, evictions.
 * ASan, LSan and UBSan watch the rest, and kvp_pool_destroy must leave no
 * leak.
 *
 * Where the headers leave a choice, the model takes what the library did:
 * which free blocks kvp_shrink retires (their refs turn KVP_ENOENT);
 * whether a match that found nothing leaves a new owner active; whether a
 * block a reset unpublished may be published again; and which of two
 * statuses a call with two faults returns.
 */
#include <kvpool/kvpool.h>

#include <string.h>

#include "tests/fuzz/fuzz_util.h"

#define N_OWNERS   6
#define N_KEYS     10 /* keys a match asks for; the last two are never published */
#define N_PUB_KEYS 8
#define MAX_BLOCKS 64
#define MAX_NEED   80 /* blocks one kvp_allocate asks for at most: more than the pool */
#define MAX_KEYS   8
#define N_OLD      64 /* refs handed out, kept to be tried again once stale */

/* A status as a bit, for the set of statuses a case allows. */
#define ST(rc) (1u << (unsigned)-(rc))

/* FZ_IN - abort unless status @rc is in the set @allowed (of ST bits) */
#define FZ_IN(rc, allowed)                                                                         \
	do {                                                                                       \
		int fz_rc_ = (rc);                                                                 \
		if (fz_rc_ > 0 || fz_rc_ < -31 || !((allowed)&ST(fz_rc_))) {                       \
			fprintf(stderr, "%s:%d: FUZZ CHECK failed: %s = %d, allowed %#x\n",        \
			        __FILE__, __LINE__, #rc, fz_rc_, (unsigned)(allowed));             \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

enum { B_FREE, B_CACHED, B_USED, B_RETIRED };

struct mblk {
	kvp_ref ref;        /* current: its latest hand-out's (generation 0 before any) */
	int state;          /* B_* */
	int si;             /* stream index: 0 (K, or the one stream), 1 (V) */
	kvp_format fmt;     /* of its latest hand-out */
	uint32_t used;      /* n_used */
	unsigned holders;   /* owners holding it (bit o) */
	unsigned seen;      /* owners that held it since its latest hand-out */
	int raw;            /* from kvp_alloc_block */
	int key;            /* published (held or cached) under this key, or -1 */
	int reset_unpub;    /* a reset unpublished it while held */
	int ever;           /* handed out at least once */
	uint64_t cached_at; /* its caching stamp while cached */
};

struct mowner {
	int active, registered;
	uint32_t ids[MAX_BLOCKS]; /* held blocks, in kvp_blocks_for order */
	int n;
};

struct model {
	uint32_t bs, nb;
	int sep;
	struct mblk b[MAX_BLOCKS];
	struct mowner o[N_OWNERS];
	int key_blk[2][N_KEYS]; /* per stream index: the block published under a key, or -1 */
	uint64_t clock;         /* caching stamps */
	kvp_ref old[N_OLD];
	int n_old, old_at;
	uint64_t allocs, frees, reused, exhausted, retired, stale, in_use, peak;
	uint64_t queries, hits, evictions;
};

static kvp_owner owner_id(int o)
{
	return (kvp_owner)o * 0x9e3779b97f4a7c15ull; /* 0 included */
}

static kvp_hash key_of(int k)
{
	uint64_t x = (uint64_t)k + 1;
	kvp_hash h = {x * 0x9e3779b97f4a7c15ull + 7, x ^ 0xabcdefull};
	return h;
}

/* Mostly two formats, so that matches find blocks; now and then a bad one. */
static kvp_format pick_format(uint8_t b)
{
	switch (b % 16) {
	case 15:
		return (kvp_format)KVP_N_FORMATS;
	case 14:
		return KVP_FP32;
	default:
		return b % 16 < 7 ? KVP_FP16 : KVP_INT8;
	}
}

static int format_ok(kvp_format f)
{
	return (unsigned)f < KVP_N_FORMATS;
}

static int stream_ok(const struct model *m, kvp_stream s)
{
	return !(m->sep && s == KVP_KV);
}

static int si_of(const struct model *m, kvp_stream s)
{
	return m->sep ? (int)s : 0;
}

static int n_holders(const struct mblk *b)
{
	return __builtin_popcount(b->holders);
}

/* The one holder of a block held once. */
static int sole_holder(const struct mblk *b)
{
	return __builtin_ctz(b->holders);
}

static uint32_t count(const struct model *m, int si, int state)
{
	uint32_t n = 0;

	for (uint32_t id = 0; id < m->nb; id++)
		n += m->b[id].si == si && m->b[id].state == state;
	return n;
}

static void remember(struct model *m, kvp_ref r)
{
	m->old[m->old_at] = r;
	m->old_at = (m->old_at + 1) % N_OLD;
	if (m->n_old < N_OLD)
		m->n_old++;
}

static void forget_key(struct model *m, struct mblk *b)
{
	if (b->key < 0)
		return;
	m->key_blk[b->si][b->key] = -1;
	b->key = -1;
}

/* @o takes a hold on block @id: at the end of its kvp_blocks_for. */
static void hold(struct model *m, uint32_t id, int o)
{
	struct mowner *ow = &m->o[o];

	FZ_CHECK(ow->n < MAX_BLOCKS);
	ow->ids[ow->n++] = id;
	ow->active = 1;
	m->b[id].holders |= 1u << o;
	m->b[id].seen |= 1u << o;
}

/*
 * let_go - @o drops its hold on block @id (@o < 0: a raw block is freed)
 *
 * The last hold frees the block: cached, with stamp @stamp, when it is
 * published, else an ordinary free block.  An owner that was not
 * registered is released when it holds nothing.
 */
static void let_go(struct model *m, uint32_t id, int o, uint64_t stamp)
{
	struct mblk *b = &m->b[id];

	if (o >= 0) {
		struct mowner *ow = &m->o[o];
		int i = 0;

		while (i < ow->n && ow->ids[i] != id)
			i++;
		FZ_CHECK(i < ow->n);
		memmove(&ow->ids[i], &ow->ids[i + 1], (size_t)(ow->n - i - 1) * sizeof(ow->ids[0]));
		ow->n--;
		if (!ow->registered && ow->n == 0)
			ow->active = 0;
		b->holders &= ~(1u << o);
	}
	if (b->holders)
		return;
	b->state = b->key >= 0 ? B_CACHED : B_FREE;
	b->cached_at = stamp;
	b->raw = 0;
	b->reset_unpub = 0;
	m->frees++;
	m->in_use--;
}

/*
 * hand_out - block @id handed out fresh as @ref (kvp_allocate, kvp_alloc_block)
 * @o: the owner, or -1 for a raw block
 *
 * Isolation: only a free block, or a cached one (evicted now), may be
 * handed out; a held block never.  The generation changes.
 */
static void hand_out(struct model *m, uint32_t id, kvp_ref ref, int o, kvp_format fmt,
                     uint32_t used)
{
	struct mblk *b = &m->b[id];

	FZ_CHECK(b->state == B_FREE || b->state == B_CACHED);
	FZ_CHECK(b->holders == 0);
	FZ_CHECK(KVP_REF_GEN(ref) != KVP_REF_GEN(b->ref));
	if (b->state == B_CACHED) {
		forget_key(m, b);
		m->evictions++;
	}
	m->reused += b->ever;
	m->allocs++;
	m->in_use++;
	if (m->in_use > m->peak)
		m->peak = m->in_use;
	b->ever = 1;
	b->state = B_USED;
	b->ref = ref;
	b->fmt = fmt;
	b->used = used;
	b->raw = o < 0;
	b->holders = b->seen = 0;
	b->key = -1;
	b->reset_unpub = 0;
	if (o >= 0)
		hold(m, id, o);
	remember(m, ref);
}

/*
 * check_taken - the blocks an allocation of stream @si got are fair to take
 * @refs:    what it handed out
 * @n:       how many
 * @n_evict: how many of them must be cached blocks (the shortfall of
 *           uncached free blocks)
 *
 * Each is a distinct block of the stream, free or cached (never held);
 * exactly @n_evict were cached, and none left cached was cached before
 * one of them (least recently cached first).
 */
static void check_taken(const struct model *m, int si, const kvp_ref *refs, uint32_t n,
                        uint32_t n_evict)
{
	uint8_t taken[MAX_BLOCKS] = {0};
	uint64_t newest = 0;
	uint32_t evicted = 0;

	for (uint32_t i = 0; i < n; i++) {
		uint32_t id = KVP_REF_ID(refs[i]);
		FZ_CHECK(id < m->nb);
		FZ_CHECK(!taken[id]);
		taken[id] = 1;
		const struct mblk *b = &m->b[id];
		FZ_EQ(b->si, si);
		FZ_CHECK(b->state == B_FREE || b->state == B_CACHED);
		if (b->state == B_CACHED) {
			evicted++;
			if (b->cached_at > newest)
				newest = b->cached_at;
		}
	}
	FZ_EQ(evicted, n_evict);
	for (uint32_t id = 0; id < m->nb; id++)
		if (!taken[id] && m->b[id].si == si && m->b[id].state == B_CACHED)
			FZ_CHECK(m->b[id].cached_at >= newest);
}

/* A ref to try: mostly a held block's, else any block's, an old one, or a never-created id. */
static kvp_ref pick_ref(const struct model *m, struct fz *f)
{
	uint8_t b = fz_byte(f), x = fz_byte(f);

	switch (b % 16) {
	case 0:
	case 1:
	case 2:
	case 3:
	case 4:
	case 5:
	case 6: {
		const struct mowner *ow = &m->o[b / 16 % N_OWNERS];
		if (ow->n)
			return m->b[ow->ids[x % ow->n]].ref;
		return m->b[x % m->nb].ref;
	}
	case 7:
	case 8:
	case 9:
	case 10:
	case 11:
		return m->b[x % m->nb].ref;
	case 12:
	case 13:
	case 14:
		return m->n_old ? m->old[x % m->n_old] : m->b[x % m->nb].ref;
	default:
		return KVP_MAKE_REF(m->nb + x % 4, x);
	}
}

/* The statuses kvp_prefix_publish(@ref, key @k) may return now (prefix.h). */
static unsigned publish_allowed(const struct model *m, kvp_ref ref, int k)
{
	uint32_t id = KVP_REF_ID(ref);

	if (id >= m->nb)
		return ST(KVP_ENOENT); /* never created */
	const struct mblk *b = &m->b[id];
	if (ref != b->ref)
		return ST(KVP_ENOENT); /* stale */
	if (b->state != B_USED)        /* free, cached or retired: "not in use", or a stale ref */
		return ST(KVP_EINVAL) | ST(KVP_ENOENT);
	int taken = m->key_blk[b->si][k] >= 0 && m->key_blk[b->si][k] != (int)id;
	if (b->raw || b->key >= 0 || b->used != m->bs)
		return ST(KVP_EINVAL) | (taken ? ST(KVP_EEXIST) : 0);
	if (taken)
		return ST(KVP_EEXIST);
	/* Unpublished by a reset: "not yet published" reads either way. */
	return b->reset_unpub ? ST(KVP_OK) | ST(KVP_EINVAL) : ST(KVP_OK);
}

static void publish_apply(struct model *m, kvp_ref ref, int k)
{
	struct mblk *b = &m->b[KVP_REF_ID(ref)];

	b->key = k;
	b->reset_unpub = 0;
	m->key_blk[b->si][k] = (int)KVP_REF_ID(ref);
}

/*
 * settle_owner - @o was not active and a match gave it nothing
 *
 * Whether such a match leaves the owner registered is not said clearly
 * ("registered as kvp_allocate would"): either is allowed.  An owner left
 * active with nothing is ended, so that the model stays exact.
 */
static void settle_owner(kvp_pool *p, struct model *m, int o)
{
	size_t n = 99;
	int rc = kvp_blocks_for(p, owner_id(o), NULL, 0, &n);

	FZ_EQ(n, 0);
	FZ_IN(rc, ST(KVP_OK) | ST(KVP_ENOENT));
	if (rc == KVP_OK)
		FZ_EQ(kvp_free_all(p, owner_id(o)), KVP_OK);
	(void)m;
}

/* --- checks -------------------------------------------------------------- */

static void check_block(kvp_pool *p, const struct model *m, uint32_t id)
{
	const struct mblk *b = &m->b[id];
	kvp_block_info bi;
	int rc = kvp_block_get(p, b->ref, &bi);

	if (b->state == B_RETIRED) {
		FZ_EQ(rc, KVP_ENOENT);
		return;
	}
	FZ_EQ(rc, KVP_OK);
	FZ_EQ(bi.id, id);
	FZ_EQ(bi.stream, m->sep ? b->si : KVP_KV);
	FZ_EQ(bi.in_use, b->state == B_USED);
	FZ_EQ(bi.published, b->key >= 0);
	FZ_EQ(bi.ever_allocated, b->ever);
	if (b->state == B_FREE) {
		FZ_EQ(bi.n_holders, 0);
		return;
	}
	FZ_EQ(bi.format, b->fmt);
	FZ_EQ(bi.n_used, b->used);
	if (b->state == B_CACHED) {
		FZ_EQ(bi.n_holders, 0);
		return;
	}
	if (b->raw)
		return;
	FZ_EQ(bi.n_holders, n_holders(b));
	if (n_holders(b) == 1) {
		FZ_EQ(bi.owner, owner_id(sole_holder(b)));
	} else {
		int ok = 0;
		for (int o = 0; o < N_OWNERS; o++)
			ok |= (b->seen >> o & 1) && bi.owner == owner_id(o);
		FZ_CHECK(ok);
	}
}

static void check_owner(kvp_pool *p, const struct model *m, int o)
{
	const struct mowner *ow = &m->o[o];
	kvp_ref refs[MAX_BLOCKS + 1];
	size_t n = 99;
	int rc = kvp_blocks_for(p, owner_id(o), refs, MAX_BLOCKS + 1, &n);

	if (!ow->active) {
		FZ_EQ(rc, KVP_ENOENT);
		FZ_EQ(n, 0);
		return;
	}
	FZ_EQ(rc, KVP_OK);
	FZ_EQ(n, ow->n);
	for (int i = 0; i < ow->n; i++)
		FZ_EQ(refs[i], m->b[ow->ids[i]].ref);
	if (ow->n > 0) {
		FZ_EQ(kvp_blocks_for(p, owner_id(o), refs, (size_t)ow->n - 1, &n), KVP_ERANGE);
		FZ_EQ(n, ow->n);
	}
}

static void check_all(kvp_pool *p, const struct model *m)
{
	kvp_stats s;
	uint64_t not_full = 0, cached = 0, free_[2] = {0, 0}, managed = 0;

	for (uint32_t id = 0; id < m->nb; id++) {
		const struct mblk *b = &m->b[id];
		check_block(p, m, id);
		not_full += b->state == B_USED && b->used < m->bs;
		cached += b->state == B_CACHED;
		free_[b->si] += b->state == B_FREE || b->state == B_CACHED;
		managed += b->state != B_RETIRED;
	}
	for (int i = 0; i < m->n_old; i++) {
		uint32_t id = KVP_REF_ID(m->old[i]);
		kvp_block_info bi;
		if (id < m->nb && m->old[i] != m->b[id].ref)
			FZ_EQ(kvp_block_get(p, m->old[i], &bi), KVP_ENOENT);
	}
	for (int o = 0; o < N_OWNERS; o++)
		check_owner(p, m, o);
	size_t nf;
	if (m->sep) {
		FZ_EQ(kvp_n_free(p, KVP_K), free_[0]);
		FZ_EQ(kvp_n_free(p, KVP_V), free_[1]);
		FZ_EQ(kvp_n_free(p, KVP_KV), 0);
		nf = kvp_n_free(p, KVP_K) + kvp_n_free(p, KVP_V);
	} else {
		FZ_EQ(kvp_n_free(p, KVP_KV), free_[0]);
		FZ_EQ(kvp_n_free(p, KVP_K), free_[0]);
		nf = kvp_n_free(p, KVP_KV);
	}
	FZ_EQ(kvp_pool_stats(p, &s), KVP_OK);
	/* conservation: free (cached included) + in use = managed */
	FZ_EQ(nf + kvp_stats_blocks_in_use(&s), s.n_blocks);
	FZ_CHECK(s.n_cached <= nf);
	FZ_EQ(s.n_blocks, managed);
	FZ_EQ(kvp_pool_n_ids(p), m->nb);
	FZ_EQ(kvp_pool_n_retired_ids(p), m->nb - managed);
	FZ_EQ(s.n_allocations, m->allocs);
	FZ_EQ(s.n_frees, m->frees);
	FZ_EQ(kvp_stats_blocks_in_use(&s), m->in_use);
	FZ_EQ(s.n_reused, m->reused);
	FZ_EQ(s.n_exhausted, m->exhausted);
	FZ_EQ(s.n_grown, 0);
	FZ_EQ(s.n_retired, m->retired);
	FZ_EQ(s.n_stale_frees, m->stale);
	FZ_EQ(s.n_not_full, not_full);
	FZ_EQ(s.peak_blocks_in_use, m->peak);
	FZ_EQ(s.n_cached, cached);
	FZ_EQ(s.n_prefix_queries, m->queries);
	FZ_EQ(s.n_prefix_hits, m->hits);
	FZ_EQ(s.n_evictions, m->evictions);
}

/* --- operations ------------------------------------------------------------ */

/*
 * do_allocate - kvp_allocate of @tokens for owner @o, checked and modelled
 * @refs: room for MAX_NEED refs; gets the blocks handed out
 *
 * Returns how many blocks were handed out (0 on any failure).
 */
static uint32_t do_allocate(kvp_pool *p, struct model *m, kvp_stream s, uint32_t tokens, int o,
                            kvp_format fmt, size_t cap, kvp_ref *refs)
{
	uint32_t need = (tokens + m->bs - 1) / m->bs;
	size_t got = 12345;
	int rc = kvp_allocate(p, s, tokens, owner_id(o), fmt, refs, cap, &got);

	if (tokens == 0 || !format_ok(fmt) || !stream_ok(m, s)) {
		FZ_EQ(rc, KVP_EINVAL);
		return 0;
	}
	if (cap < need) {
		FZ_EQ(rc, KVP_ERANGE);
		FZ_EQ(got, need);
		return 0;
	}
	int si = si_of(m, s);
	uint32_t u = count(m, si, B_FREE), c = count(m, si, B_CACHED);
	if (u + c < need) {
		FZ_EQ(rc, KVP_EEXHAUSTED);
		FZ_EQ(got, 0);
		m->exhausted++;
		return 0;
	}
	FZ_EQ(rc, KVP_OK);
	FZ_EQ(got, need);
	check_taken(m, si, refs, need, need > u ? need - u : 0);
	for (uint32_t i = 0; i < need; i++) {
		uint32_t used = i + 1 < need ? m->bs : tokens - (need - 1) * m->bs;
		hand_out(m, KVP_REF_ID(refs[i]), refs[i], o, fmt, used);
	}
	return need;
}

static void op_allocate(kvp_pool *p, struct model *m, struct fz *f)
{
	uint8_t b = fz_byte(f);
	int o = fz_byte(f) % N_OWNERS;
	kvp_format fmt = pick_format(fz_byte(f));
	uint32_t tokens;
	kvp_ref refs[MAX_NEED];

	if ((b & 0xc0) == 0xc0) { /* up to more than the pool holds */
		tokens = fz_u32(f, m->bs * MAX_NEED + 1);
	} else {
		tokens = fz_u32(f, m->bs * 8 + 1);
		if (b & 0xc0) /* whole blocks, to publish */
			tokens = (tokens + m->bs - 1) / m->bs * m->bs;
	}
	uint32_t need = (tokens + m->bs - 1) / m->bs;
	size_t cap = (b & 0x3c) == 0x3c ? need / 2 : MAX_NEED;
	do_allocate(p, m, (kvp_stream)(b % 3), tokens, o, fmt, cap, refs);
}

static void op_raw(kvp_pool *p, struct model *m, struct fz *f)
{
	uint8_t b = fz_byte(f);

	if (b & 0x80) { /* kvp_free_block: kvp_free of one ref */
		kvp_ref r = pick_ref(m, f);
		uint32_t id = KVP_REF_ID(r);
		int rc = kvp_free_block(p, r);
		if (id >= m->nb) {
			FZ_EQ(rc, KVP_ENOENT);
			return;
		}
		struct mblk *mb = &m->b[id];
		int cur = r == mb->ref && mb->state == B_USED;
		if (cur && n_holders(mb) >= 2) {
			FZ_EQ(rc, KVP_EINVAL);
			return;
		}
		FZ_EQ(rc, KVP_OK);
		if (cur)
			let_go(m, id, mb->raw ? -1 : sole_holder(mb), ++m->clock);
		else
			m->stale++;
		return;
	}
	kvp_stream s = (kvp_stream)(b % 3);
	kvp_format fmt = pick_format(fz_byte(f));
	kvp_ref r = 0;
	int rc = kvp_alloc_block(p, s, fmt, &r);
	if (!format_ok(fmt) || !stream_ok(m, s)) {
		FZ_EQ(rc, KVP_EINVAL);
		return;
	}
	int si = si_of(m, s);
	uint32_t u = count(m, si, B_FREE), c = count(m, si, B_CACHED);
	if (u + c == 0) {
		FZ_EQ(rc, KVP_EEXHAUSTED);
		m->exhausted++;
		return;
	}
	FZ_EQ(rc, KVP_OK);
	check_taken(m, si, &r, 1, u ? 0 : 1);
	hand_out(m, KVP_REF_ID(r), r, -1, fmt, m->bs);
}

static void op_free(kvp_pool *p, struct model *m, struct fz *f)
{
	kvp_ref refs[6];
	int n = fz_byte(f) % 6, bad = 0, shared = 0;

	for (int i = 0; i < n; i++) {
		refs[i] = pick_ref(m, f);
		uint32_t id = KVP_REF_ID(refs[i]);
		if (id >= m->nb) {
			bad = 1;
			continue;
		}
		const struct mblk *b = &m->b[id];
		shared |= refs[i] == b->ref && b->state == B_USED && n_holders(b) >= 2;
	}
	int rc = kvp_free(p, refs, (size_t)n);
	if (bad || shared) { /* nothing freed */
		FZ_IN(rc, (bad ? ST(KVP_ENOENT) : 0) | (shared ? ST(KVP_EINVAL) : 0));
		return;
	}
	FZ_EQ(rc, KVP_OK);
	/* The caching order within one kvp_free is not documented: one stamp. */
	uint64_t stamp = ++m->clock;
	for (int i = 0; i < n; i++) {
		uint32_t id = KVP_REF_ID(refs[i]);
		struct mblk *b = &m->b[id];
		if (refs[i] == b->ref && b->state == B_USED)
			let_go(m, id, b->raw ? -1 : sole_holder(b), stamp);
		else
			m->stale++;
	}
}

static void op_free_owned(kvp_pool *p, struct model *m, struct fz *f)
{
	uint8_t b = fz_byte(f);
	int o = b % N_OWNERS, n = (b >> 3) % 7, bad = 0;
	kvp_ref refs[8];

	if (b >> 6 == 3 && (b & 1)) {
		FZ_EQ(kvp_free_owned(p, owner_id(o), NULL, 2), KVP_EINVAL);
		return;
	}
	if (b >> 6 == 3 && m->o[o].n) { /* all it holds, as kvp_free_all would */
		n = m->o[o].n < 8 ? m->o[o].n : 8;
		for (int i = 0; i < n; i++)
			refs[i] = m->b[m->o[o].ids[i]].ref;
	} else {
		for (int i = 0; i < n; i++)
			refs[i] = pick_ref(m, f);
	}
	for (int i = 0; i < n; i++)
		bad |= KVP_REF_ID(refs[i]) >= m->nb;
	int rc = kvp_free_owned(p, owner_id(o), refs, (size_t)n);
	if (bad) {
		FZ_EQ(rc, KVP_ENOENT);
		return;
	}
	FZ_EQ(rc, KVP_OK);
	/* Published blocks let go of in one call become cached last ref first. */
	for (int i = n; i-- > 0;) {
		uint32_t id = KVP_REF_ID(refs[i]);
		struct mblk *mb = &m->b[id];
		if (refs[i] == mb->ref && mb->state == B_USED && (mb->holders >> o & 1))
			let_go(m, id, o, ++m->clock);
		else
			m->stale++;
	}
}

/* do_free_all - kvp_free_all(@o): its blocks go, last block first; then not active */
static void do_free_all(kvp_pool *p, struct model *m, int o)
{
	struct mowner *ow = &m->o[o];

	if (!ow->active) {
		FZ_EQ(kvp_free_all(p, owner_id(o)), KVP_ENOENT);
		return;
	}
	FZ_EQ(kvp_free_all(p, owner_id(o)), KVP_OK);
	ow->registered = 0;
	while (ow->n)
		let_go(m, ow->ids[ow->n - 1], o, ++m->clock);
	ow->active = 0;
	check_owner(p, m, o);
}

static void op_owner(kvp_pool *p, struct model *m, struct fz *f)
{
	uint8_t b = fz_byte(f);
	int o = (b >> 2) % N_OWNERS;
	struct mowner *ow = &m->o[o];

	switch (b & 3) {
	case 0:
		do_free_all(p, m, o);
		break;
	case 1:
		if (ow->active) {
			FZ_EQ(kvp_register_owner(p, owner_id(o)), KVP_EOWNER);
			break;
		}
		FZ_EQ(kvp_register_owner(p, owner_id(o)), KVP_OK);
		ow->active = ow->registered = 1;
		break;
	case 2:
		if (!ow->active) {
			FZ_EQ(kvp_release_owner(p, owner_id(o)), KVP_ENOENT);
			break;
		}
		FZ_EQ(kvp_release_owner(p, owner_id(o)), KVP_OK);
		ow->registered = 0;
		if (ow->n == 0)
			ow->active = 0;
		break;
	default:
		check_owner(p, m, o);
	}
}

/*
 * do_match - kvp_prefix_match of keys @ks for owner @o, checked and modelled
 * @null_keys: pass NULL keys (KVP_EINVAL when @nk > 0)
 *
 * Returns how many keys matched (0 on any failure).
 */
static size_t do_match(kvp_pool *p, struct model *m, kvp_stream s, kvp_format fmt, const int *ks,
                       size_t nk, int o, size_t cap, int null_keys)
{
	kvp_hash keys[MAX_KEYS];
	kvp_ref refs[MAX_KEYS];
	size_t got = 999;

	for (size_t i = 0; i < nk; i++)
		keys[i] = key_of(ks[i]);
	int was_active = m->o[o].active;
	int rc =
	    kvp_prefix_match(p, s, fmt, null_keys ? NULL : keys, nk, owner_id(o), refs, cap, &got);

	if ((null_keys && nk) || !format_ok(fmt) || !stream_ok(m, s)) {
		FZ_EQ(rc, KVP_EINVAL);
		return 0;
	}
	if (cap < nk) { /* nothing done */
		FZ_EQ(rc, KVP_ERANGE);
		FZ_EQ(got, nk);
		return 0;
	}
	FZ_EQ(rc, KVP_OK);
	int si = si_of(m, s);
	size_t i = 0;
	for (; i < nk; i++) {
		int id = m->key_blk[si][ks[i]];
		if (id < 0 || m->b[id].fmt != fmt)
			break; /* the first key not found ends the match */
		struct mblk *mb = &m->b[id];
		FZ_CHECK(i < got);
		/* a block published under this very key */
		FZ_EQ(KVP_REF_ID(refs[i]), id);
		if (mb->state == B_USED) {
			FZ_EQ(refs[i], mb->ref);
			if (!(mb->holders >> o & 1))
				hold(m, (uint32_t)id, o);
			continue;
		}
		/* cached: in use again, with a new generation; an allocation and a reuse */
		FZ_EQ(mb->state, B_CACHED);
		FZ_CHECK(KVP_REF_GEN(refs[i]) != KVP_REF_GEN(mb->ref));
		mb->state = B_USED;
		mb->ref = refs[i];
		mb->holders = 0;
		hold(m, (uint32_t)id, o);
		remember(m, refs[i]);
		m->allocs++;
		m->reused++;
		m->in_use++;
		if (m->in_use > m->peak)
			m->peak = m->in_use;
	}
	FZ_EQ(got, i);
	m->queries += nk;
	m->hits += got;
	if (!was_active && got == 0)
		settle_owner(p, m, o);
	return got;
}

static void op_match(kvp_pool *p, struct model *m, struct fz *f)
{
	uint8_t b = fz_byte(f);
	int o = fz_byte(f) % N_OWNERS;
	kvp_format fmt = pick_format(fz_byte(f));
	size_t nk = fz_byte(f) % 7;
	int ks[MAX_KEYS];

	if (b & 0x80) { /* a sequence: k0, k0 + 1, ... */
		int k0 = fz_byte(f) % N_KEYS;
		for (size_t i = 0; i < nk; i++)
			ks[i] = (k0 + (int)i) % N_KEYS;
	} else {
		for (size_t i = 0; i < nk; i++)
			ks[i] = fz_byte(f) % N_KEYS;
	}
	size_t cap = (b & 0x18) == 0x18 && nk ? nk - 1 : MAX_KEYS;
	int null_keys = (b & 0x60) == 0x60 && (b & 0x18) == 0x10;
	do_match(p, m, (kvp_stream)(b % 3), fmt, ks, nk, o, cap, null_keys);
}

static void op_publish(kvp_pool *p, struct model *m, struct fz *f)
{
	kvp_ref r = pick_ref(m, f);
	int k = fz_byte(f) % N_PUB_KEYS;
	unsigned allowed = publish_allowed(m, r, k);
	int rc = kvp_prefix_publish(p, r, key_of(k));

	FZ_IN(rc, allowed);
	if (rc == KVP_OK)
		publish_apply(m, r, k);
}

/* do_publish_many - kvp_prefix_publish_many of @refs under keys @ks, checked and modelled */
static void do_publish_many(kvp_pool *p, struct model *m, const kvp_ref *refs, const int *ks, int n)
{
	kvp_hash keys[MAX_NEED];
	int st[MAX_NEED];
	size_t np = 99;

	for (int i = 0; i < n; i++)
		keys[i] = key_of(ks[i]);
	FZ_EQ(kvp_prefix_publish_many(p, refs, keys, (size_t)n, st, &np), KVP_OK);
	/* each block in order, exactly as by kvp_prefix_publish */
	size_t done = 0;
	for (int i = 0; i < n; i++) {
		FZ_IN(st[i], publish_allowed(m, refs[i], ks[i]));
		if (st[i] == KVP_OK) {
			publish_apply(m, refs[i], ks[i]);
			done++;
		}
	}
	FZ_EQ(np, done);
}

static void op_publish_many(kvp_pool *p, struct model *m, struct fz *f)
{
	uint8_t b = fz_byte(f);
	int n = b % 7, ks[MAX_KEYS], st[1];
	kvp_ref refs[MAX_KEYS];
	kvp_hash keys[1] = {{0, 0}};
	size_t np = 99;

	if ((b & 0xf8) == 0xf8) {
		FZ_EQ(kvp_prefix_publish_many(p, NULL, keys, 1, st, &np), KVP_EINVAL);
		FZ_EQ(np, 0);
		return;
	}
	if (b & 0x80) { /* an owner's blocks in order, under a sequence of keys */
		const struct mowner *ow = &m->o[(b >> 3) % N_OWNERS];
		int k0 = fz_byte(f) % N_PUB_KEYS;
		n = ow->n < n ? ow->n : n;
		for (int i = 0; i < n; i++) {
			refs[i] = m->b[ow->ids[i]].ref;
			ks[i] = (k0 + i) % N_PUB_KEYS;
		}
	} else {
		for (int i = 0; i < n; i++) {
			refs[i] = pick_ref(m, f);
			ks[i] = fz_byte(f) % N_PUB_KEYS;
		}
	}
	do_publish_many(p, m, refs, ks, n);
}

/*
 * op_serve - one request as a server runs it: match the prompt's key
 * sequence, allocate the rest in whole blocks, publish those under the
 * keys that follow, and mostly end the request (kvp_free_all), caching
 * its published blocks.  Mixes hits, evictions and EEXIST densely.
 */
static void op_serve(kvp_pool *p, struct model *m, struct fz *f)
{
	uint8_t b = fz_byte(f), x = fz_byte(f);
	int o = b % N_OWNERS, len = 1 + (b >> 3) % 8, ks[MAX_KEYS];
	kvp_stream s = m->sep ? (kvp_stream)(x & 1) : KVP_KV;
	kvp_ref refs[MAX_NEED];

	for (int i = 0; i < len; i++)
		ks[i] = ((x >> 1) + i) % N_PUB_KEYS;
	size_t got = do_match(p, m, s, KVP_FP16, ks, (size_t)len, o, MAX_KEYS, 0);
	if ((size_t)len > got) {
		uint32_t n = do_allocate(p, m, s, (uint32_t)(len - got) * m->bs, o, KVP_FP16,
		                         MAX_NEED, refs);
		do_publish_many(p, m, refs, ks + got, (int)n);
	}
	if (x & 0xc0)
		do_free_all(p, m, o);
}

static void op_reset(kvp_pool *p, struct model *m)
{
	size_t want = 0;

	for (uint32_t id = 0; id < m->nb; id++)
		want += m->b[id].key >= 0; /* cached (evicted) or held (unpublished) */
	FZ_EQ(kvp_prefix_reset(p), want);
	for (uint32_t id = 0; id < m->nb; id++) {
		struct mblk *b = &m->b[id];
		if (b->key < 0)
			continue;
		forget_key(m, b);
		if (b->state == B_CACHED) {
			b->state = B_FREE;
			m->evictions++;
		} else {
			b->reset_unpub = 1;
		}
	}
}

/*
 * op_shrink - kvp_shrink: uncached free blocks retire before cached ones
 *
 * Which of them retire is not said: each free block's current ref tells
 * (a retired block's is KVP_ENOENT).  A cached block retired was evicted.
 */
static void op_shrink(kvp_pool *p, struct model *m, struct fz *f)
{
	uint8_t b = fz_byte(f);
	kvp_stream s = (kvp_stream)(b % 3);
	uint32_t target = (uint32_t)(b >> 2) % 24, n = 999;
	int rc = kvp_shrink(p, s, target, &n);

	if (!stream_ok(m, s)) {
		FZ_EQ(rc, KVP_EINVAL);
		return;
	}
	FZ_EQ(rc, KVP_OK);
	int si = si_of(m, s);
	uint32_t u = count(m, si, B_FREE), c = count(m, si, B_CACHED);
	uint32_t want = u + c > target ? u + c - target : 0, ru = 0, rcached = 0;
	FZ_EQ(n, want);
	for (uint32_t id = 0; id < m->nb; id++) {
		struct mblk *mb = &m->b[id];
		kvp_block_info bi;
		if (mb->si != si || (mb->state != B_FREE && mb->state != B_CACHED))
			continue;
		int grc = kvp_block_get(p, mb->ref, &bi);
		if (grc == KVP_OK)
			continue;
		FZ_EQ(grc, KVP_ENOENT);
		if (mb->state == B_CACHED) {
			forget_key(m, mb);
			m->evictions++;
			rcached++;
		} else {
			ru++;
		}
		mb->state = B_RETIRED;
	}
	FZ_EQ(ru, want < u ? want : u);
	FZ_EQ(rcached, want - ru);
	m->retired += want;
}

static void op_set_used(kvp_pool *p, struct model *m, struct fz *f)
{
	kvp_ref r = pick_ref(m, f);
	uint32_t used = fz_byte(f) % (m->bs + 2), id = KVP_REF_ID(r);
	int rc = kvp_block_set_used(p, r, used);
	unsigned allowed = 0;

	if (id >= m->nb) {
		FZ_EQ(rc, KVP_ENOENT);
		return;
	}
	struct mblk *b = &m->b[id];
	if (r != b->ref || b->state != B_USED)
		allowed |= ST(KVP_ENOENT);
	else if (b->key >= 0 || n_holders(b) >= 2)
		allowed |= ST(KVP_EINVAL); /* fixed */
	if (used > m->bs)
		allowed |= ST(KVP_ERANGE);
	if (!allowed)
		allowed = ST(KVP_OK);
	FZ_IN(rc, allowed);
	if (rc == KVP_OK)
		b->used = used;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz f = {data, size};
	static struct model m;
	kvp_pool_config c;
	kvp_pool *p;
	uint8_t b0 = fz_byte(&f), b1 = fz_byte(&f);
	static const uint32_t caches[4] = {0, 2, 8, 64};

	memset(&m, 0, sizeof m);
	kvp_pool_config_init(&c);
	c.block_size = 1 + b0 % 8;
	c.n_blocks = 4 + b1 % (MAX_BLOCKS - 3);
	c.separate_kv = (b0 >> 3) & 1;
	c.thread_cache = caches[(b0 >> 4) % 4];
	c.prefix_cache = true;
	if (kvp_pool_create(&c, &p) != KVP_OK)
		abort();
	m.bs = c.block_size;
	m.nb = c.n_blocks;
	m.sep = c.separate_kv;
	memset(m.key_blk, 0xff, sizeof m.key_blk);
	for (uint32_t id = 0; id < m.nb; id++) {
		m.b[id].ref = KVP_MAKE_REF(id, 0);
		m.b[id].state = B_FREE;
		m.b[id].si = m.sep && id >= (m.nb + 1) / 2;
		m.b[id].key = -1;
	}
	for (int ops = 0; f.n && ops < 400; ops++) {
		uint8_t op = fz_byte(&f);
		switch (op % 16) {
		case 0:
		case 1:
		case 2:
			op_allocate(p, &m, &f);
			break;
		case 3:
		case 4:
			op_match(p, &m, &f);
			break;
		case 5:
			op_publish(p, &m, &f);
			break;
		case 6:
			op_publish_many(p, &m, &f);
			break;
		case 7:
			op_free(p, &m, &f);
			break;
		case 8:
			op_free_owned(p, &m, &f);
			break;
		case 9:
		case 10:
			op_owner(p, &m, &f);
			break;
		case 11:
			op_raw(p, &m, &f);
			break;
		case 12:
			if (op >> 4 < 2)
				op_reset(p, &m);
			else
				op_set_used(p, &m, &f);
			break;
		case 13:
			if (op >> 4 < 6)
				op_shrink(p, &m, &f);
			else
				op_set_used(p, &m, &f);
			break;
		case 14:
			op_serve(p, &m, &f);
			break;
		default:
			break; /* just the checks */
		}
		check_all(p, &m);
	}
	kvp_pool_destroy(p);
	return 0;
}
