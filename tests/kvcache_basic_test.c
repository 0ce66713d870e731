/*
 * tests/kvcache_basic_test.c - kvpool/kvcache.h, single-threaded.
 *
 * fp32 gather is bit-identical to a contiguous reference built from the
 * same appends; attend is within 1e-5 (relative to each head's largest
 * output element) of naive double-precision attention, for fp32 and, over
 * the decoded rows, for every other format; block accounting, reuse,
 * trim across block boundaries, all-or-nothing appends, no allocation
 * per token.
 */
#include <kvpool/kvpool.h>

#include <math.h>
#include <string.h>

#include "lib/testing/fault.h"
#include "tests/kvcache_ref.h"
#include "tests/testutil.h"

#define ATTEND_TOL 1e-5

struct env {
	kvp_pool *pool;
	kvp_storage *ks, *vs;
};

static struct env env_make(uint32_t bs, uint32_t n_blocks, bool sep, bool grow, uint32_t row_dim)
{
	kvp_pool_config c;
	struct env e;

	kvp_pool_config_init(&c);
	c.block_size = bs;
	c.n_blocks = n_blocks;
	c.separate_kv = sep;
	c.grow_on_exhaustion = grow;
	CHECK_EQ(kvp_pool_create(&c, &e.pool), KVP_OK);
	CHECK_EQ(kvp_storage_create(e.pool, row_dim, NULL, &e.ks), KVP_OK);
	CHECK_EQ(kvp_storage_create(e.pool, row_dim, NULL, &e.vs), KVP_OK);
	return e;
}

static void env_free(struct env *e)
{
	kvp_storage_destroy(e->ks);
	kvp_storage_destroy(e->vs);
	kvp_pool_destroy(e->pool);
}

static kvp_kvcache *mkcache(struct env *e, uint32_t layers, uint32_t kvh, uint32_t hd, kvp_format f,
                            kvp_owner owner)
{
	kvp_kvcache_config cfg = {layers, kvh, hd, f, owner};
	kvp_kvcache *c = NULL;

	CHECK_EQ(kvp_kvcache_create(e->pool, e->ks, e->vs, &cfg, &c), KVP_OK);
	return c;
}

static kvp_stats pstats(kvp_pool *p)
{
	kvp_stats s;

	CHECK_EQ(kvp_pool_stats(p, &s), KVP_OK);
	return s;
}

/* Append @total tokens to @layer in random chunks of 1..@max_chunk, mirrored in @r. */
static void append_random(kvp_kvcache *c, struct kref *r, uint32_t layer, uint32_t total,
                          uint32_t max_chunk, uint64_t *seed)
{
	size_t row = (size_t)r->n_kv_heads * r->head_dim;
	float *k = malloc(max_chunk * row * sizeof(float)),
	      *v = malloc(max_chunk * row * sizeof(float));
	uint32_t done = 0;

	CHECK(k && v);
	while (done < total) {
		uint32_t n = 1 + (uint32_t)(tu_rand(seed) % max_chunk);
		n = n > total - done ? total - done : n;
		kref_fill(k, n * row, 3.0f, seed);
		kref_fill(v, n * row, 3.0f, seed);
		CHECK_EQ(kvp_kvcache_append(c, layer, k, v, n), KVP_OK);
		kref_append(r, k, v, n);
		done += n;
	}
	free(k);
	free(v);
}

/* Transpose the reference (len, H, D) into gather's (H, len, D). */
static void ref_heads_major(const struct kref *r, const float *src, float *dst)
{
	uint32_t t, h;

	for (t = 0; t < r->len; t++)
		for (h = 0; h < r->n_kv_heads; h++)
			memcpy(dst + ((size_t)h * r->len + t) * r->head_dim,
			       src + ((size_t)t * r->n_kv_heads + h) * r->head_dim,
			       r->head_dim * sizeof(float));
}

static void check_gather_exact(const kvp_kvcache *c, uint32_t layer, const struct kref *r)
{
	size_t n = (size_t)r->len * r->n_kv_heads * r->head_dim;
	float *gk = malloc(n * sizeof(float) + 4), *gv = malloc(n * sizeof(float) + 4);
	float *wk = malloc(n * sizeof(float) + 4), *wv = malloc(n * sizeof(float) + 4);

	CHECK(gk && gv && wk && wv);
	CHECK_EQ(kvp_kvcache_len(c, layer), r->len);
	CHECK_EQ(kvp_kvcache_gather(c, layer, gk, gv), KVP_OK);
	ref_heads_major(r, r->k, wk);
	ref_heads_major(r, r->v, wv);
	CHECK(memcmp(gk, wk, n * sizeof(float)) == 0);
	CHECK(memcmp(gv, wv, n * sizeof(float)) == 0);
	free(gk);
	free(gv);
	free(wk);
	free(wv);
}

/* attend vs naive attention over (len, H, D) rows @k, @v; returns the error */
static double attend_err(const kvp_kvcache *c, uint32_t layer, const float *k, const float *v,
                         uint32_t len, uint32_t kvh, uint32_t hd, uint32_t n_heads, uint64_t *seed)
{
	float *q = malloc((size_t)n_heads * hd * sizeof(float));
	float *out = malloc((size_t)n_heads * hd * sizeof(float));
	double *want = malloc((size_t)n_heads * hd * sizeof(double)), err;
	float scale = 1.0f / sqrtf((float)hd);

	CHECK(q && out && want);
	kref_fill(q, (size_t)n_heads * hd, 2.0f, seed);
	CHECK_EQ(kvp_kvcache_attend(c, layer, q, n_heads, scale, out), KVP_OK);
	kref_attend(k, v, len, kvh, hd, q, n_heads, scale, want);
	err = kref_rel_err(out, want, n_heads, hd);
	free(q);
	free(out);
	free(want);
	return err;
}

static void test_fp32_gather_and_attend(void)
{
	/* shapes: GQA groups of 1, 2, 12 (more than the kernel's 8 heads at
	 * once), head_dim 300 (more than its 256-float slice), lengths past its
	 * 128-token chunk, block sizes 1, 4, 16 */
	static const struct {
		uint32_t bs, layers, kvh, hd, n_heads, len, chunk;
	} cases[] = {
	    {4, 2, 2, 8, 4, 37, 7},      {16, 3, 2, 16, 2, 300, 40}, {1, 1, 1, 8, 12, 20, 3},
	    {16, 1, 1, 300, 3, 150, 50}, {5, 2, 3, 4, 6, 131, 13},
	};
	uint64_t seed = 11;
	size_t ci;

	for (ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
		struct env e =
		    env_make(cases[ci].bs, 4096, true, false, cases[ci].kvh * cases[ci].hd);
		kvp_kvcache *c =
		    mkcache(&e, cases[ci].layers, cases[ci].kvh, cases[ci].hd, KVP_FP32, 100 + ci);
		uint32_t l;
		for (l = 0; l < cases[ci].layers; l++) {
			struct kref r;
			double err;
			kref_init(&r, cases[ci].kvh, cases[ci].hd, cases[ci].len);
			append_random(c, &r, l, cases[ci].len, cases[ci].chunk, &seed);
			check_gather_exact(c, l, &r);
			err = attend_err(c, l, r.k, r.v, r.len, r.n_kv_heads, r.head_dim,
			                 cases[ci].n_heads, &seed);
			CHECK(err <= ATTEND_TOL);
			kref_free(&r);
		}
		kvp_kvcache_destroy(c);
		env_free(&e);
	}
}

static void test_formats_attend_and_roundtrip(void)
{
	static const kvp_format fmts[] = {KVP_FP16, KVP_BF16, KVP_INT8, KVP_INT4};
	enum { BS = 8, KVH = 2, HD = 9, NH = 4, LEN = 150 };
	uint64_t seed = 12;
	size_t fi, i;

	for (fi = 0; fi < sizeof fmts / sizeof fmts[0]; fi++) {
		kvp_format f = fmts[fi];
		struct env e = env_make(BS, 512, fi % 2 == 0, false, KVH * HD);
		kvp_kvcache *c = mkcache(&e, 1, KVH, HD, f, 7);
		size_t n = (size_t)LEN * KVH * HD;
		float *gk = malloc(n * sizeof(float)), *gv = malloc(n * sizeof(float));
		float *wk = malloc(n * sizeof(float)), *dk = malloc(n * sizeof(float));
		float *dv = malloc(n * sizeof(float));
		struct kref r;
		uint32_t t, h;

		CHECK(gk && gv && wk && dk && dv);
		kref_init(&r, KVH, HD, LEN);
		append_random(c, &r, 0, LEN, 11, &seed);
		CHECK_EQ(kvp_kvcache_gather(c, 0, gk, gv), KVP_OK);
		/* round trip within the format's bound (lib/storage/codec.h), values in [-3, 3] */
		ref_heads_major(&r, r.k, wk);
		for (i = 0; i < n; i++) {
			double x = wk[i], err = fabs((double)gk[i] - x);
			size_t tok = (i / HD) % LEN, head = i / ((size_t)HD * LEN);
			double absmax = 0;
			for (h = 0; h < KVH * HD; h++) /* the token's whole row: one scale */
				absmax = fmax(absmax, fabs(r.k[tok * KVH * HD + h]));
			(void)head;
			double bound = f == KVP_FP16   ? ldexp(fabs(x), -11) + 0x1p-25
			               : f == KVP_BF16 ? ldexp(fabs(x), -8)
			               : f == KVP_INT8 ? absmax / 254 * (1 + 0x1p-12)
			                               : absmax / 14 * (1 + 0x1p-12);
			CHECK(err <= bound);
		}
		/* attend reads the encoded blocks: compare with naive attention over
		 * the decoded rows (gather's output, back in (len, H, D) layout) */
		for (t = 0; t < LEN; t++)
			for (h = 0; h < KVH; h++) {
				memcpy(dk + ((size_t)t * KVH + h) * HD,
				       gk + ((size_t)h * LEN + t) * HD, HD * sizeof(float));
				memcpy(dv + ((size_t)t * KVH + h) * HD,
				       gv + ((size_t)h * LEN + t) * HD, HD * sizeof(float));
			}
		CHECK(attend_err(c, 0, dk, dv, LEN, KVH, HD, NH, &seed) <= ATTEND_TOL);
		kref_free(&r);
		free(gk);
		free(gv);
		free(wk);
		free(dk);
		free(dv);
		kvp_kvcache_destroy(c);
		env_free(&e);
	}
}

static size_t owner_blocks(kvp_pool *p, kvp_owner o)
{
	size_t n = 0;
	int rc = kvp_blocks_for(p, o, NULL, 0, &n);

	CHECK(rc == KVP_OK || rc == KVP_ERANGE);
	return n;
}

static void test_block_accounting_and_reuse(void)
{
	enum { BS = 16, LAYERS = 3, KVH = 2, HD = 4 };
	static const uint32_t lens[] = {1, 15, 16, 17, 100, 128};
	struct env e = env_make(BS, 1024, true, false, KVH * HD);
	uint64_t seed = 13;
	size_t li;

	for (li = 0; li < sizeof lens / sizeof lens[0]; li++) {
		uint32_t L = lens[li], want = (L + BS - 1) / BS, l;
		kvp_kvcache *c = mkcache(&e, LAYERS, KVH, HD, KVP_FP32, 1);
		kvp_storage_stats k0, v0, k1, v1;
		kvp_stats s0, s1;
		CHECK_EQ(kvp_storage_get_stats(e.ks, &k0), KVP_OK);
		CHECK_EQ(kvp_storage_get_stats(e.vs, &v0), KVP_OK);
		s0 = pstats(e.pool);
		for (l = 0; l < LAYERS; l++) {
			struct kref r;
			kref_init(&r, KVH, HD, L);
			append_random(c, &r, l, L, 9, &seed);
			kref_free(&r);
			/* exactly ceil(L / block_size) blocks per stream per layer so far */
			CHECK_EQ(owner_blocks(e.pool, 1), 2 * (size_t)want * (l + 1));
			CHECK_EQ(kvp_kvcache_blocks_held(c), 2 * (size_t)want * (l + 1));
		}
		s1 = pstats(e.pool);
		CHECK_EQ(kvp_stats_blocks_in_use(&s1), 2 * (size_t)want * LAYERS);
		CHECK_EQ(kvp_n_free(e.pool, KVP_K), 512 - (size_t)want * LAYERS);
		CHECK_EQ(kvp_n_free(e.pool, KVP_V), 512 - (size_t)want * LAYERS);
		CHECK_EQ(s1.n_allocations - s0.n_allocations, 2 * (size_t)want * LAYERS);
		if (li > 0) {
			/* this request came after the previous one released: every block
			 * it needed that the previous one held was reused, and storage
			 * made a buffer only for blocks never written before */
			CHECK(s1.n_reused > s0.n_reused);
		}
		kvp_kvcache_release(c);
		CHECK_EQ(kvp_kvcache_blocks_held(c), 0);
		CHECK_EQ(kvp_kvcache_len(c, 0), 0);
		CHECK_EQ(owner_blocks(e.pool, 1), 0);
		s0 = pstats(e.pool);
		CHECK_EQ(kvp_stats_blocks_in_use(&s0), 0);
		/* a second request of the same size: all blocks reused, no new buffer */
		for (l = 0; l < LAYERS; l++) {
			struct kref r;
			kref_init(&r, KVH, HD, L);
			append_random(c, &r, l, L, 9, &seed);
			check_gather_exact(c, l, &r);
			kref_free(&r);
		}
		s1 = pstats(e.pool);
		CHECK_EQ(s1.n_reused - s0.n_reused, 2 * (size_t)want * LAYERS);
		CHECK_EQ(kvp_storage_get_stats(e.ks, &k1), KVP_OK);
		CHECK_EQ(kvp_storage_get_stats(e.vs, &v1), KVP_OK);
		(void)k0;
		(void)v0;
		k0 = k1;
		v0 = v1;
		kvp_kvcache_destroy(c); /* releases */
		CHECK_EQ(pstats(e.pool).n_allocations, pstats(e.pool).n_frees);
		c = mkcache(&e, LAYERS, KVH, HD, KVP_FP32, 1);
		for (l = 0; l < LAYERS; l++) {
			struct kref r;
			kref_init(&r, KVH, HD, L);
			append_random(c, &r, l, L, 9, &seed);
			kref_free(&r);
		}
		CHECK_EQ(kvp_storage_get_stats(e.ks, &k1), KVP_OK);
		CHECK_EQ(kvp_storage_get_stats(e.vs, &v1), KVP_OK);
		CHECK_EQ(k1.buffers_made, k0.buffers_made);
		CHECK_EQ(v1.buffers_made, v0.buffers_made);
		CHECK_EQ(k1.resident_bytes, k0.resident_bytes);
		CHECK_EQ(v1.resident_bytes, v0.resident_bytes);
		kvp_kvcache_destroy(c);
	}
	env_free(&e);
}

static kvp_ref last_ref(kvp_pool *p, kvp_owner o, kvp_stream want_stream)
{
	kvp_ref refs[256], r = 0;
	kvp_block_info bi;
	size_t n, i;

	CHECK_EQ(kvp_blocks_for(p, o, refs, 256, &n), KVP_OK);
	for (i = 0; i < n; i++) {
		CHECK_EQ(kvp_block_get(p, refs[i], &bi), KVP_OK);
		if (bi.stream == want_stream)
			r = refs[i];
	}
	return r;
}

static void test_trim(void)
{
	enum { BS = 4, KVH = 1, HD = 3 };
	struct env e = env_make(BS, 64, true, false, KVH * HD);
	kvp_kvcache *c = mkcache(&e, 2, KVH, HD, KVP_FP32, 5);
	struct kref r0, r1;
	uint64_t seed = 14;
	kvp_block_info bi;

	kref_init(&r0, KVH, HD, 64);
	kref_init(&r1, KVH, HD, 64);
	append_random(c, &r0, 0, 13, 5, &seed); /* 4 blocks per stream */
	append_random(c, &r1, 1, 6, 5, &seed);  /* 2 blocks per stream */
	CHECK_EQ(kvp_kvcache_blocks_held(c), 2 * (4 + 2));
	CHECK_EQ(kvp_kvcache_trim(c, 0), KVP_OK);
	CHECK_EQ(kvp_kvcache_blocks_held(c), 12);
	/* layer 0: 13 -> 8 tokens, blocks 2 and 3 go, 8 tokens fill blocks 0-1;
	 * layer 1: 6 -> 1 token, block 1 goes, block 0 keeps 1 row */
	CHECK_EQ(kvp_kvcache_trim(c, 5), KVP_OK);
	CHECK_EQ(kvp_kvcache_len(c, 0), 8);
	CHECK_EQ(kvp_kvcache_len(c, 1), 1);
	CHECK_EQ(kvp_kvcache_blocks_held(c), 2 * (2 + 1));
	CHECK_EQ(owner_blocks(e.pool, 5), 6);
	CHECK_EQ(kvp_n_free(e.pool, KVP_K), 32 - 3);
	r0.len = 8;
	r1.len = 1;
	check_gather_exact(c, 0, &r0);
	check_gather_exact(c, 1, &r1);
	/* the owner's last V block is layer 1's block 0: its n_used went down to 1 */
	CHECK_EQ(kvp_block_get(e.pool, last_ref(e.pool, 5, KVP_V), &bi), KVP_OK);
	CHECK_EQ(bi.n_used, 1);
	/* 8 -> 7: within a block; n_used lowered */
	CHECK_EQ(kvp_kvcache_trim(c, 1), KVP_OK);
	CHECK_EQ(kvp_kvcache_len(c, 0), 7);
	CHECK_EQ(kvp_kvcache_len(c, 1), 0);
	CHECK_EQ(kvp_kvcache_blocks_held(c), 2 * 2);
	r0.len = 7;
	check_gather_exact(c, 0, &r0);
	CHECK_EQ(kvp_block_get(e.pool, last_ref(e.pool, 5, KVP_K), &bi), KVP_OK);
	CHECK_EQ(bi.n_used, 3);
	CHECK_EQ(pstats(e.pool).n_not_full, 2);
	/* appending after a trim continues where the trim left off */
	append_random(c, &r0, 0, 6, 6, &seed);
	check_gather_exact(c, 0, &r0);
	CHECK(attend_err(c, 0, r0.k, r0.v, r0.len, KVH, HD, 2, &seed) <= ATTEND_TOL);
	CHECK_EQ(kvp_kvcache_blocks_held(c), 2 * 4);
	/* trimming more than everything empties every layer */
	CHECK_EQ(kvp_kvcache_trim(c, 1000), KVP_OK);
	CHECK_EQ(kvp_kvcache_len(c, 0), 0);
	CHECK_EQ(kvp_kvcache_blocks_held(c), 0);
	CHECK_EQ(kvp_n_free(e.pool, KVP_K), 32);
	CHECK_EQ(kvp_kvcache_trim(NULL, 1), KVP_EINVAL);
	kref_free(&r0);
	kref_free(&r1);
	kvp_kvcache_destroy(c);
	env_free(&e);
}

static void test_errors_and_all_or_nothing(void)
{
	enum { BS = 4, KVH = 2, HD = 2 };
	struct env e = env_make(BS, 8, true, false, KVH * HD); /* 4 K + 4 V blocks */
	kvp_kvcache_config cfg = {2, KVH, HD, KVP_FP32, 9};
	kvp_storage *other;
	kvp_kvcache *c = NULL, *c2 = NULL;
	float k[64 * KVH * HD], v[64 * KVH * HD], q[8 * HD], out[8 * HD];
	uint64_t seed = 15;
	kvp_stats s0;

	kref_fill(k, sizeof k / sizeof k[0], 1, &seed);
	kref_fill(v, sizeof v / sizeof v[0], 1, &seed);
	kref_fill(q, sizeof q / sizeof q[0], 1, &seed);
	CHECK_EQ(kvp_storage_create(e.pool, KVH * HD + 1, NULL, &other), KVP_OK);
	CHECK_EQ(kvp_kvcache_create(e.pool, other, e.vs, &cfg, &c), KVP_EINVAL); /* row_dim */
	CHECK_EQ(kvp_kvcache_create(NULL, e.ks, e.vs, &cfg, &c), KVP_EINVAL);
	cfg.n_layers = 0;
	CHECK_EQ(kvp_kvcache_create(e.pool, e.ks, e.vs, &cfg, &c), KVP_EINVAL);
	cfg.n_layers = 2;
	cfg.format = KVP_INT2;
	CHECK_EQ(kvp_kvcache_create(e.pool, e.ks, e.vs, &cfg, &c), KVP_EINVAL);
	cfg.format = KVP_FP32;
	CHECK(c == NULL);
	CHECK_EQ(kvp_kvcache_create(e.pool, e.ks, e.vs, &cfg, &c), KVP_OK);
	/* one owner per kvcache */
	CHECK_EQ(kvp_kvcache_create(e.pool, e.ks, e.vs, &cfg, &c2), KVP_EOWNER);
	CHECK_EQ(kvp_kvcache_append(c, 0, k, v, 0), KVP_EINVAL);
	CHECK_EQ(kvp_kvcache_append(c, 2, k, v, 1), KVP_EINVAL);
	CHECK_EQ(kvp_kvcache_append(c, 0, NULL, v, 1), KVP_EINVAL);
	CHECK_EQ(kvp_kvcache_attend(c, 0, q, 4, 1.0f, out), KVP_EINVAL); /* empty layer */
	CHECK_EQ(kvp_kvcache_gather(c, 0, NULL, NULL), KVP_EINVAL);
	CHECK_EQ(kvp_kvcache_append(c, 0, k, v, 5), KVP_OK);             /* 2 blocks per stream */
	CHECK_EQ(kvp_kvcache_attend(c, 0, q, 3, 1.0f, out), KVP_EINVAL); /* 3 % 2 */
	CHECK_EQ(kvp_kvcache_attend(c, 0, q, 0, 1.0f, out), KVP_EINVAL);
	CHECK_EQ(kvp_kvcache_attend(c, 1, q, 2, 1.0f, out), KVP_EINVAL);
	CHECK_EQ(kvp_kvcache_attend(c, 0, NULL, 2, 1.0f, out), KVP_EINVAL);
	CHECK_EQ(kvp_kvcache_len(NULL, 0), 0);
	CHECK_EQ(kvp_kvcache_blocks_held(NULL), 0);
	/* 3 blocks more than the 2 free per stream: nothing taken, nothing changed */
	s0 = pstats(e.pool);
	CHECK_EQ(kvp_kvcache_append(c, 0, k, v, 12), KVP_EEXHAUSTED);
	CHECK_EQ(kvp_kvcache_len(c, 0), 5);
	CHECK_EQ(kvp_kvcache_blocks_held(c), 4);
	CHECK_EQ(kvp_n_free(e.pool, KVP_K), 2);
	CHECK_EQ(kvp_n_free(e.pool, KVP_V), 2);
	CHECK_EQ(kvp_stats_blocks_in_use(&s0), 4);
	CHECK_EQ(pstats(e.pool).n_allocations, s0.n_allocations);
	CHECK_EQ(pstats(e.pool).n_exhausted, s0.n_exhausted + 1);
	{
		struct kref r;
		kref_init(&r, KVH, HD, 16);
		kref_append(&r, k, v, 5);
		check_gather_exact(c, 0, &r);
		/* exactly fills the free blocks: fine */
		CHECK_EQ(kvp_kvcache_append(c, 0, k + 5 * KVH * HD, v + 5 * KVH * HD, 11), KVP_OK);
		kref_append(&r, k + 5 * KVH * HD, v + 5 * KVH * HD, 11);
		check_gather_exact(c, 0, &r);
		kref_free(&r);
	}
	kvp_kvcache_destroy(c);
	kvp_kvcache_destroy(NULL);
	kvp_kvcache_release(NULL);
	kvp_storage_destroy(other);
	env_free(&e);
}

/* int8 refuses NaN: the append changes nothing, blocks it took go back */
static void test_int8_nan_append_is_undone(void)
{
	enum { BS = 4, KVH = 1, HD = 4 };
	struct env e = env_make(BS, 64, false, false, KVH * HD);
	kvp_kvcache *c = mkcache(&e, 1, KVH, HD, KVP_INT8, 3);
	float k[12 * HD], v[12 * HD], g0[12 * HD], g1[12 * HD];
	uint64_t seed = 16;
	kvp_ref refs[16];
	kvp_block_info bi;
	size_t n;

	kref_fill(k, 12 * HD, 1, &seed);
	kref_fill(v, 12 * HD, 1, &seed);
	CHECK_EQ(kvp_kvcache_append(c, 0, k, v, 2), KVP_OK);
	CHECK_EQ(kvp_kvcache_gather(c, 0, g0, NULL), KVP_OK);
	v[9 * HD + 1] = NAN; /* a V row in the second new block */
	CHECK_EQ(kvp_kvcache_append(c, 0, k + 2 * HD, v + 2 * HD, 9), KVP_EINVAL);
	CHECK_EQ(kvp_kvcache_len(c, 0), 2);
	CHECK_EQ(kvp_kvcache_blocks_held(c), 2);
	CHECK_EQ(kvp_n_free(e.pool, KVP_KV), 62);
	CHECK_EQ(kvp_blocks_for(e.pool, 3, refs, 16, &n), KVP_OK);
	CHECK_EQ(n, 2);
	CHECK_EQ(kvp_block_get(e.pool, refs[0], &bi), KVP_OK);
	CHECK_EQ(bi.n_used, 2); /* restored after the write had raised it */
	CHECK_EQ(kvp_kvcache_gather(c, 0, g1, NULL), KVP_OK);
	CHECK(memcmp(g0, g1, 2 * HD * sizeof(float)) == 0);
	kvp_kvcache_destroy(c);
	env_free(&e);
}

/* Within a checked-out block, appending a token allocates nothing at all:
 * with every system allocation failing, 15 more single-token appends work. */
static void test_no_allocation_per_token(void)
{
	enum { BS = 16, KVH = 2, HD = 8 };
	struct env e = env_make(BS, 64, true, false, KVH * HD);
	kvp_kvcache *c = mkcache(&e, 2, KVH, HD, KVP_FP16, 4);
	float k[KVH * HD], v[KVH * HD], q[4 * HD], out[4 * HD];
	uint64_t seed = 17;
	struct kref r;
	int i;

	kref_init(&r, KVH, HD, BS);
	kref_fill(k, KVH * HD, 1, &seed);
	kref_fill(v, KVH * HD, 1, &seed);
	kref_fill(q, 4 * HD, 1, &seed);
	CHECK_EQ(kvp_kvcache_append(c, 1, k, v, 1), KVP_OK);
	kvpi_fault_inject(0, -1);
	for (i = 1; i < BS; i++)
		CHECK_EQ(kvp_kvcache_append(c, 1, k, v, 1), KVP_OK);
	CHECK_EQ(kvp_kvcache_attend(c, 1, q, 4, 0.3f, out), KVP_OK);
	kvpi_fault_inject(0, 0);
	CHECK_EQ(kvp_kvcache_len(c, 1), BS);
	CHECK_EQ(kvp_kvcache_blocks_held(c), 2);
	kref_free(&r);
	kvp_kvcache_destroy(c);
	env_free(&e);
}

int main(void)
{
	RUN(test_fp32_gather_and_attend);
	RUN(test_formats_attend_and_roundtrip);
	RUN(test_block_accounting_and_reuse);
	RUN(test_trim);
	RUN(test_errors_and_all_or_nothing);
	RUN(test_int8_nan_append_is_undone);
	RUN(test_no_allocation_per_token);
	return 0;
}
