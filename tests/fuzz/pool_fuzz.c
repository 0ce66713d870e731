/*
 * tests/fuzz/pool_fuzz.c - libFuzzer: the block pool against a small model.
 *
 * One thread drives a pool (size, block size, separate_kv, growth cap and
 * thread cache chosen by the input) with a sequence of calls chosen by the
 * input: kvp_allocate (some with a short refs_cap, a bad stream or format),
 * kvp_free of held and stale refs, kvp_free_all, kvp_register_owner,
 * kvp_release_owner, kvp_alloc_block / kvp_free_block, kvp_block_get,
 * kvp_block_set_used, kvp_blocks_for, kvp_shrink.  A model written from
 * kvpool/pool.h predicts every status, every ref's block (in use, owner,
 * stream, format, n_used), every owner's list in allocation order,
 * kvp_n_free of each stream, kvp_blocks_for, and the counters of
 * kvp_pool_stats (allocations, frees, exhausted calls, grown, retired,
 * stale frees, blocks managed, blocks in use, blocks not full, peak).
 */
#include <kvpool/kvpool.h>

#include <string.h>

#include "tests/fuzz/fuzz_util.h"

#define N_OWNERS 6
#define MAX_REFS 512

struct mref {
	kvp_ref ref;
	int live;  /* held (else freed: a stale ref from now on) */
	int owner; /* 0..N_OWNERS-1, or -1 for a raw block */
	int stream;
	kvp_format format;
	uint32_t used;
	uint32_t seq; /* allocation order */
};

struct model {
	uint32_t bs, managed, max_blocks;
	int sep, grow;
	uint64_t free_[3];
	uint64_t allocs, frees, exhausted, grown, retired, stale, in_use;
	int active[N_OWNERS], registered[N_OWNERS];
	struct mref r[MAX_REFS];
	int nr;
	uint32_t seq;
};

static kvp_owner owner_id(int o)
{
	return (kvp_owner)o * 0x9e3779b97f4a7c15ull; /* 0 included */
}

static int st_of(const struct model *m, kvp_stream s)
{
	return m->sep ? (int)s : KVP_KV;
}

static int owner_blocks(const struct model *m, int o)
{
	int n = 0;

	for (int i = 0; i < m->nr; i++)
		n += m->r[i].live && m->r[i].owner == o;
	return n;
}

static void drop_ref(struct model *m, struct mref *r)
{
	r->live = 0;
	m->free_[r->stream]++;
	m->frees++;
	m->in_use--;
	if (r->owner >= 0 && !m->registered[r->owner] && owner_blocks(m, r->owner) == 0)
		m->active[r->owner] = 0;
}

/* Make room for @need blocks of stream @st like kvp_allocate: grow by the
 * shortfall within max_blocks, else exhausted. */
static int take(struct model *m, int st, uint32_t need)
{
	if (m->free_[st] >= need)
		return 1;
	uint64_t short_ = need - m->free_[st];
	if (m->grow && m->managed + short_ <= m->max_blocks) {
		m->managed += (uint32_t)short_;
		m->grown += short_;
		m->free_[st] += short_;
		return 1;
	}
	m->exhausted++;
	return 0;
}

static struct mref *add_ref(struct model *m, kvp_ref ref, int owner, int st, kvp_format f,
                            uint32_t used)
{
	int slot = -1;

	if (m->nr < MAX_REFS)
		slot = m->nr++;
	for (int i = 0; slot < 0 && i < m->nr; i++)
		if (!m->r[i].live) /* full: forget a stale ref */
			slot = i;
	FZ_CHECK(slot >= 0);
	m->r[slot] = (struct mref){ref, 1, owner, st, f, used, m->seq++};
	m->free_[st]--;
	m->allocs++;
	m->in_use++;
	return &m->r[slot];
}

static void check_ref(kvp_pool *p, const struct model *m, const struct mref *r)
{
	kvp_block_info bi;
	int rc = kvp_block_get(p, r->ref, &bi);

	if (!r->live) { /* stale: freed, maybe handed out again or retired */
		FZ_CHECK(rc == KVP_ENOENT || (rc == KVP_OK && !bi.in_use));
		return;
	}
	FZ_EQ(rc, KVP_OK);
	FZ_CHECK(bi.in_use);
	FZ_EQ(bi.id, KVP_REF_ID(r->ref));
	FZ_EQ(bi.n_used, r->used);
	FZ_EQ(bi.format, r->format);
	FZ_EQ(bi.stream, r->stream);
	FZ_EQ(bi.owner, r->owner >= 0 ? owner_id(r->owner) : 0);
	(void)m;
}

static void check_owner(kvp_pool *p, const struct model *m, int o)
{
	kvp_ref refs[MAX_REFS];
	int idx[MAX_REFS], want = 0;
	size_t n = 99;

	int rc = kvp_blocks_for(p, owner_id(o), refs, MAX_REFS, &n);
	if (!m->active[o]) {
		FZ_EQ(rc, KVP_ENOENT);
		FZ_EQ(n, 0);
		return;
	}
	FZ_EQ(rc, KVP_OK);
	/* the model's refs of @o in allocation order (insertion sort by seq) */
	for (int i = 0; i < m->nr; i++) {
		if (!m->r[i].live || m->r[i].owner != o)
			continue;
		int k = want++;
		while (k > 0 && m->r[idx[k - 1]].seq > m->r[i].seq) {
			idx[k] = idx[k - 1];
			k--;
		}
		idx[k] = i;
	}
	FZ_EQ(n, want);
	for (int k = 0; k < want; k++)
		FZ_EQ(refs[k], m->r[idx[k]].ref);
	if (want > 0) {
		FZ_EQ(kvp_blocks_for(p, owner_id(o), refs, (size_t)want - 1, &n), KVP_ERANGE);
		FZ_EQ(n, want);
	}
}

static void check_all(kvp_pool *p, const struct model *m)
{
	kvp_stats s;
	uint64_t not_full = 0;

	for (int i = 0; i < m->nr; i++) {
		check_ref(p, m, &m->r[i]);
		not_full += m->r[i].live && m->r[i].used < m->bs;
	}
	for (int o = 0; o < N_OWNERS; o++)
		check_owner(p, m, o);
	if (m->sep) {
		FZ_EQ(kvp_n_free(p, KVP_K), m->free_[KVP_K]);
		FZ_EQ(kvp_n_free(p, KVP_V), m->free_[KVP_V]);
		FZ_EQ(kvp_n_free(p, KVP_KV), 0);
	} else {
		FZ_EQ(kvp_n_free(p, KVP_KV), m->free_[KVP_KV]);
		FZ_EQ(kvp_n_free(p, KVP_K), m->free_[KVP_KV]);
	}
	FZ_EQ(kvp_pool_stats(p, &s), KVP_OK);
	FZ_EQ(s.n_blocks, m->managed);
	FZ_EQ(s.n_allocations, m->allocs);
	FZ_EQ(s.n_frees, m->frees);
	FZ_EQ(s.n_exhausted, m->exhausted);
	FZ_EQ(s.n_grown, m->grown);
	FZ_EQ(s.n_retired, m->retired);
	FZ_EQ(s.n_stale_frees, m->stale);
	FZ_EQ(kvp_stats_blocks_in_use(&s), m->in_use);
	FZ_EQ(s.n_not_full, not_full);
	FZ_CHECK(s.peak_blocks_in_use >= m->in_use && s.peak_blocks_in_use <= m->max_blocks);
}

static void op_allocate(kvp_pool *p, struct model *m, struct fz *f)
{
	uint8_t b = fz_byte(f);
	int o = fz_byte(f) % N_OWNERS;
	kvp_stream s = (kvp_stream)(b % 3);
	kvp_format fmt = (kvp_format)((b >> 2) % 8); /* 7 is no format */
	uint32_t tokens = fz_u32(f, 0) % (m->bs * 24 + 1);
	uint32_t need = (tokens + m->bs - 1) / m->bs;
	size_t cap = (b & 0x20) ? need / 2 : MAX_REFS, got = 12345;
	kvp_ref refs[MAX_REFS];
	int rc = kvp_allocate(p, s, tokens, owner_id(o), fmt, refs, cap, &got);
	int want;

	if (tokens == 0 || fmt > KVP_INT1 || (m->sep && s == KVP_KV)) {
		FZ_EQ(rc, KVP_EINVAL);
		return;
	}
	if (cap < need) {
		FZ_EQ(rc, KVP_ERANGE);
		FZ_EQ(got, need);
		return;
	}
	int st = st_of(m, s);
	want = take(m, st, need) ? KVP_OK : KVP_EEXHAUSTED;
	FZ_EQ(rc, want);
	if (rc != KVP_OK) {
		FZ_EQ(got, 0);
		return;
	}
	FZ_EQ(got, need);
	m->active[o] = 1;
	for (uint32_t i = 0; i < need; i++) {
		uint32_t used = i + 1 < need ? m->bs : tokens - (need - 1) * m->bs;
		FZ_CHECK(KVP_REF_ID(refs[i]) < kvp_pool_n_ids(p));
		add_ref(m, refs[i], o, st, fmt, used);
	}
}

static void op_free(kvp_pool *p, struct model *m, struct fz *f)
{
	kvp_ref refs[8];
	struct mref *mr[8];
	int n = fz_byte(f) % 8;

	if (!m->nr)
		return;
	for (int i = 0; i < n; i++) {
		mr[i] = &m->r[fz_byte(f) % m->nr];
		refs[i] = mr[i]->ref;
	}
	if (n && fz_byte(f) % 8 == 0) { /* an id never created: nothing freed */
		refs[n - 1] = ((kvp_ref)7 << 32) | (KVP_MAX_BLOCKS + 5u);
		FZ_EQ(kvp_free(p, refs, (size_t)n), KVP_ENOENT);
		return;
	}
	FZ_EQ(kvp_free(p, refs, (size_t)n), KVP_OK);
	for (int i = 0; i < n; i++) {
		if (mr[i]->live)
			drop_ref(m, mr[i]);
		else
			m->stale++;
	}
}

static void op_owner(kvp_pool *p, struct model *m, struct fz *f)
{
	uint8_t b = fz_byte(f);
	int o = (b >> 2) % N_OWNERS;

	switch (b & 3) {
	case 0: /* free_all */
		if (!m->active[o]) {
			FZ_EQ(kvp_free_all(p, owner_id(o)), KVP_ENOENT);
			break;
		}
		FZ_EQ(kvp_free_all(p, owner_id(o)), KVP_OK);
		m->registered[o] = 0;
		for (int i = 0; i < m->nr; i++)
			if (m->r[i].live && m->r[i].owner == o)
				drop_ref(m, &m->r[i]);
		m->active[o] = 0;
		break;
	case 1: /* register */
		if (m->active[o]) {
			FZ_EQ(kvp_register_owner(p, owner_id(o)), KVP_EOWNER);
			break;
		}
		FZ_EQ(kvp_register_owner(p, owner_id(o)), KVP_OK);
		m->active[o] = m->registered[o] = 1;
		break;
	case 2: /* release */
		if (!m->active[o]) {
			FZ_EQ(kvp_release_owner(p, owner_id(o)), KVP_ENOENT);
			break;
		}
		FZ_EQ(kvp_release_owner(p, owner_id(o)), KVP_OK);
		m->registered[o] = 0;
		if (owner_blocks(m, o) == 0)
			m->active[o] = 0;
		break;
	default:
		check_owner(p, m, o);
	}
}

static void op_raw(kvp_pool *p, struct model *m, struct fz *f)
{
	uint8_t b = fz_byte(f);
	kvp_stream s = (kvp_stream)(b % 3);
	kvp_format fmt = (kvp_format)((b >> 2) % 7);
	kvp_ref r;

	if (b & 0x80) { /* free_block of any model ref */
		if (!m->nr)
			return;
		struct mref *mr = &m->r[fz_byte(f) % m->nr];
		FZ_EQ(kvp_free_block(p, mr->ref), KVP_OK);
		if (mr->live)
			drop_ref(m, mr);
		else
			m->stale++;
		return;
	}
	int rc = kvp_alloc_block(p, s, fmt, &r);
	if (m->sep && s == KVP_KV) {
		FZ_EQ(rc, KVP_EINVAL);
		return;
	}
	int st = st_of(m, s);
	FZ_EQ(rc, take(m, st, 1) ? KVP_OK : KVP_EEXHAUSTED);
	if (rc == KVP_OK)
		add_ref(m, r, -1, st, fmt, m->bs);
}

static void op_block(kvp_pool *p, struct model *m, struct fz *f)
{
	uint8_t b = fz_byte(f);
	struct mref *mr;

	if (!m->nr)
		return;
	mr = &m->r[fz_byte(f) % m->nr];
	if (b & 1) {
		check_ref(p, m, mr);
		return;
	}
	uint32_t used = (uint32_t)(b >> 1) % (m->bs + 2);
	int rc = kvp_block_set_used(p, mr->ref, used);
	if (used > m->bs && !mr->live) { /* both wrong: either answer */
		FZ_CHECK(rc == KVP_ERANGE || rc == KVP_ENOENT);
	} else if (used > m->bs) {
		FZ_EQ(rc, KVP_ERANGE);
	} else if (!mr->live) {
		FZ_EQ(rc, KVP_ENOENT);
	} else {
		FZ_EQ(rc, KVP_OK);
		mr->used = used;
	}
}

static void op_shrink(kvp_pool *p, struct model *m, struct fz *f)
{
	uint8_t b = fz_byte(f);
	kvp_stream s = (kvp_stream)(b % 3);
	uint32_t target = (uint32_t)(b >> 2) % 16, n = 999;

	int rc = kvp_shrink(p, s, target, &n);
	if (m->sep && s == KVP_KV) {
		FZ_EQ(rc, KVP_EINVAL);
		return;
	}
	FZ_EQ(rc, KVP_OK);
	int st = st_of(m, s);
	uint32_t want = m->free_[st] > target ? (uint32_t)(m->free_[st] - target) : 0;
	FZ_EQ(n, want);
	m->free_[st] -= want;
	m->managed -= want;
	m->retired += want;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz f = {data, size};
	static struct model m;
	kvp_pool_config c;
	kvp_pool *p;
	uint8_t b0 = fz_byte(&f), b1 = fz_byte(&f);

	memset(&m, 0, sizeof m);
	kvp_pool_config_init(&c);
	c.block_size = 1 + b0 % 8;
	c.n_blocks = 1 + b1 % 40;
	c.separate_kv = (b0 >> 3) & 1;
	c.grow_on_exhaustion = (b0 >> 4) & 1;
	c.max_blocks = c.grow_on_exhaustion ? c.n_blocks + (b1 >> 6) * 16 : 0;
	c.thread_cache = (b0 >> 5) % 4 == 0 ? 0 : (b0 >> 5);
	if (kvp_pool_create(&c, &p) != KVP_OK)
		return 0;
	m.bs = c.block_size;
	m.managed = c.n_blocks;
	m.max_blocks = c.grow_on_exhaustion ? c.max_blocks : c.n_blocks;
	m.sep = c.separate_kv;
	m.grow = c.grow_on_exhaustion;
	if (m.sep) {
		m.free_[KVP_K] = (c.n_blocks + 1) / 2;
		m.free_[KVP_V] = c.n_blocks / 2;
	} else {
		m.free_[KVP_KV] = c.n_blocks;
	}
	for (int ops = 0; f.n && ops < 400; ops++) {
		switch (fz_byte(&f) % 8) {
		case 0:
		case 1:
			op_allocate(p, &m, &f);
			break;
		case 2:
			op_free(p, &m, &f);
			break;
		case 3:
			op_owner(p, &m, &f);
			break;
		case 4:
			op_raw(p, &m, &f);
			break;
		case 5:
			op_block(p, &m, &f);
			break;
		case 6:
			op_shrink(p, &m, &f);
			break;
		default:
			check_all(p, &m);
		}
	}
	check_all(p, &m);
	kvp_pool_destroy(p);
	return 0;
}
