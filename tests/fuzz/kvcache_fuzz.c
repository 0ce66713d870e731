/*
 * tests/fuzz/kvcache_fuzz.c - libFuzzer: kvp_kvcache against plain arrays.
 *
 * The input picks the geometry (layers, heads, head size, block size,
 * pool size, fp32 or another format, one or two storages) and then a
 * sequence of appends (any layer, 1..40 tokens of values from the input,
 * sometimes inf/NaN), trims, releases, reserves, gathers and attends.
 * The model keeps each layer's rows in one array.  Checked after each call:
 * the status (KVP_EEXHAUSTED exactly when the pool has fewer free blocks
 * than the append needs; KVP_EINVAL for inf/NaN in int8/int4), len and
 * blocks_held, every block's n_used, kvp_n_free (blocks held + free =
 * pool), gather equal to the model (bit for bit in fp32, within the
 * format's error bound otherwise) and attend equal to the same kernel
 * over the model's rows (fp32) or finite (other formats).
 */
#include <kvpool/kvpool.h>

#include <math.h>
#include <string.h>

#include "tests/fuzz/fuzz_util.h"

#define MAX_TOK 256
#define MAX_DIM 16

struct lmodel {
	uint32_t len;
	float k[MAX_TOK * MAX_DIM], v[MAX_TOK * MAX_DIM];
};

static struct lmodel lm[3];

static float val(struct fz *f)
{
	uint8_t b = fz_byte(f);

	if (b == 255)
		return INFINITY;
	if (b == 254)
		return NAN;
	return ((float)b - 127.0f) / 16.0f;
}

/* attend over contiguous rows, the textbook way, in double */
static void ref_attend(const float *k, const float *v, uint32_t len, uint32_t kvh, uint32_t hd,
                       const float *q, uint32_t nh, float scale, double *out)
{
	uint32_t group = nh / kvh;

	for (uint32_t h = 0; h < nh; h++) {
		uint32_t g = h / group;
		double mx = -INFINITY, sum = 0;
		for (uint32_t t = 0; t < len; t++) {
			double s = 0;
			for (uint32_t d = 0; d < hd; d++)
				s += (double)(scale * q[h * hd + d]) * k[(t * kvh + g) * hd + d];
			mx = s > mx ? s : mx;
		}
		for (uint32_t d = 0; d < hd; d++)
			out[h * hd + d] = 0;
		for (uint32_t t = 0; t < len; t++) {
			double s = 0;
			for (uint32_t d = 0; d < hd; d++)
				s += (double)(scale * q[h * hd + d]) * k[(t * kvh + g) * hd + d];
			double w = exp(s - mx);
			sum += w;
			for (uint32_t d = 0; d < hd; d++)
				out[h * hd + d] += w * v[(t * kvh + g) * hd + d];
		}
		for (uint32_t d = 0; d < hd; d++)
			out[h * hd + d] /= sum;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz f = {data, size};
	uint8_t g0 = fz_byte(&f), g1 = fz_byte(&f), g2 = fz_byte(&f);
	static const kvp_format fmts[] = {KVP_FP32, KVP_FP32, KVP_FP16,
	                                  KVP_BF16, KVP_INT8, KVP_INT4};
	kvp_kvcache_config kc = {.n_layers = 1 + g0 % 3,
	                         .n_kv_heads = 1 + (g0 >> 2) % 2,
	                         .head_dim = 1 + (g0 >> 3) % 8,
	                         .format = fmts[g1 % 6],
	                         .owner = 42};
	uint32_t dim = kc.n_kv_heads * kc.head_dim, bs = 1 + (g1 >> 3) % 8;
	uint32_t nblocks = 2 + g2 % 40;
	int one_store = (g2 >> 6) & 1, exact = kc.format == KVP_FP32;
	int quant = kc.format == KVP_INT8 || kc.format == KVP_INT4;
	kvp_pool_config pc;
	kvp_pool *p;
	kvp_storage *ks, *vs;
	kvp_kvcache *c;
	static float kbuf[MAX_TOK * MAX_DIM], vbuf[MAX_TOK * MAX_DIM];

	kvp_pool_config_init(&pc);
	pc.block_size = bs;
	pc.n_blocks = nblocks;
	pc.separate_kv = (g1 >> 6) & 1;
	pc.thread_cache = 0;
	FZ_EQ(kvp_pool_create(&pc, &p), KVP_OK);
	FZ_EQ(kvp_storage_create(p, dim, NULL, &ks), KVP_OK);
	if (one_store)
		vs = ks;
	else
		FZ_EQ(kvp_storage_create(p, dim, NULL, &vs), KVP_OK);
	FZ_EQ(kvp_kvcache_create(p, ks, vs, &kc, &c), KVP_OK);
	memset(lm, 0, sizeof lm);
	for (int ops = 0; f.n && ops < 64; ops++) {
		uint8_t op = fz_byte(&f);
		uint32_t layer = (op >> 3) % kc.n_layers;
		struct lmodel *L = &lm[layer];
		uint64_t held = 0;
		for (uint32_t i = 0; i < kc.n_layers; i++)
			held += 2 * (uint64_t)((lm[i].len + bs - 1) / bs);
		switch (op % 6) {
		case 0:
		case 1: { /* append */
			uint32_t n = 1 + fz_byte(&f) % 40, bad = 0;
			if (L->len + n > MAX_TOK)
				break;
			for (uint32_t i = 0; i < n * dim; i++) {
				kbuf[i] = val(&f);
				vbuf[i] = i % 3 ? kbuf[i] : (float)(i % 7);
				bad |= !isfinite(kbuf[i]);
			}
			uint32_t need = (L->len + n + bs - 1) / bs - (L->len + bs - 1) / bs;
			uint64_t free_k = kvp_n_free(p, pc.separate_kv ? KVP_K : KVP_KV);
			uint64_t free_v = kvp_n_free(p, pc.separate_kv ? KVP_V : KVP_KV);
			int enough = pc.separate_kv ? free_k >= need && free_v >= need
			                            : free_k >= 2 * (uint64_t)need;
			int rc = kvp_kvcache_append(c, layer, kbuf, vbuf, n);
			if (bad && quant) {
				FZ_CHECK(rc == KVP_EINVAL || rc == KVP_EEXHAUSTED);
			} else if (!enough) {
				FZ_EQ(rc, KVP_EEXHAUSTED);
			} else {
				FZ_EQ(rc, KVP_OK);
			}
			if (rc == KVP_OK) {
				memcpy(L->k + (size_t)L->len * dim, kbuf,
				       (size_t)n * dim * sizeof(float));
				memcpy(L->v + (size_t)L->len * dim, vbuf,
				       (size_t)n * dim * sizeof(float));
				L->len += n;
			}
			break;
		}
		case 2: { /* trim */
			uint32_t n = fz_byte(&f) % 50;
			FZ_EQ(kvp_kvcache_trim(c, n), KVP_OK);
			for (uint32_t i = 0; i < kc.n_layers; i++)
				lm[i].len -= n < lm[i].len ? n : lm[i].len;
			break;
		}
		case 3: /* release, or reserve */
			if (op & 0x80) {
				kvp_kvcache_release(c);
				for (uint32_t i = 0; i < kc.n_layers; i++)
					lm[i].len = 0;
			} else {
				FZ_EQ(kvp_kvcache_reserve(c, fz_byte(&f)), KVP_OK);
			}
			break;
		case 4: { /* gather */
			static float gk[MAX_TOK * MAX_DIM], gv[MAX_TOK * MAX_DIM];
			FZ_EQ(kvp_kvcache_gather(c, layer, gk, gv), KVP_OK);
			for (uint32_t t = 0; t < L->len; t++)
				for (uint32_t h = 0; h < kc.n_kv_heads; h++)
					for (uint32_t d = 0; d < kc.head_dim; d++) {
						size_t go =
						    ((size_t)h * L->len + t) * kc.head_dim + d;
						size_t mo =
						    ((size_t)t * kc.n_kv_heads + h) * kc.head_dim +
						    d;
						if (exact) {
							FZ_CHECK(memcmp(&gk[go], &L->k[mo], 4) ==
							         0);
							FZ_CHECK(memcmp(&gv[go], &L->v[mo], 4) ==
							         0);
						} else if (!quant && isfinite(L->k[mo])) {
							FZ_CHECK(fabsf(gk[go] - L->k[mo]) <=
							         fabsf(L->k[mo]) / 128 + 1e-6f);
						} else if (quant) {
							FZ_CHECK(isfinite(gk[go]));
						}
					}
			break;
		}
		default: { /* attend */
			uint32_t nh = kc.n_kv_heads * (1 + fz_byte(&f) % 2);
			float q[2 * MAX_DIM], out[2 * MAX_DIM];
			double want[2 * MAX_DIM];
			int finite = 1;
			for (uint32_t i = 0; i < nh * kc.head_dim; i++)
				q[i] = val(&f) / 4;
			for (uint32_t i = 0; i < nh * kc.head_dim; i++)
				finite &= isfinite(q[i]);
			for (uint32_t i = 0; i < L->len * dim; i++)
				finite &= isfinite(L->k[i]) && isfinite(L->v[i]);
			int rc = kvp_kvcache_attend(c, layer, q, nh, 0.5f, out);
			if (L->len == 0) {
				FZ_EQ(rc, KVP_EINVAL);
				break;
			}
			FZ_EQ(rc, KVP_OK);
			if (!finite)
				break;
			if (exact) {
				ref_attend(L->k, L->v, L->len, kc.n_kv_heads, kc.head_dim, q, nh,
				           0.5f, want);
				for (uint32_t i = 0; i < nh * kc.head_dim; i++)
					FZ_CHECK(fabs(out[i] - want[i]) <=
					         1e-3 * (1 + fabs(want[i])));
			} else {
				for (uint32_t i = 0; i < nh * kc.head_dim; i++)
					FZ_CHECK(isfinite(out[i]));
			}
		}
		}
		held = 0;
		for (uint32_t i = 0; i < kc.n_layers; i++) {
			FZ_EQ(kvp_kvcache_len(c, i), lm[i].len);
			held += 2 * (uint64_t)((lm[i].len + bs - 1) / bs);
		}
		FZ_EQ(kvp_kvcache_blocks_held(c), held);
		uint64_t nfree = pc.separate_kv ? kvp_n_free(p, KVP_K) + kvp_n_free(p, KVP_V)
		                                : kvp_n_free(p, KVP_KV);
		FZ_EQ(nfree + held, nblocks);
	}
	kvp_kvcache_destroy(c);
	if (!one_store)
		kvp_storage_destroy(vs);
	kvp_storage_destroy(ks);
	kvp_pool_destroy(p);
	return 0;
}
