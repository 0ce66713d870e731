/*
 * tests/kvcache_threads_test.c - 8 threads, each running a request loop on
 * one shared pool and one K and one V storage: append 1..300 tokens per
 * layer (a prefill chunk, then decode-sized chunks), attend, sometimes
 * trim and attend again, release (now and then destroy and re-create).
 * Every attend result is checked against the thread's own contiguous
 * reference (naive double-precision attention): fp32 threads against the
 * rows they appended, fp16/int8 threads against the decoded rows (gather),
 * so blocks also change format between requests and storage replaces
 * buffers while other threads read theirs.  Afterwards the pool holds
 * nothing and storage no more buffers than blocks.
 */
#include <kvpool/kvpool.h>

#include <pthread.h>
#include <string.h>

#include "tests/kvcache_ref.h"
#include "tests/testutil.h"

enum { THREADS = 8, LAYERS = 2, KVH = 2, HD = 16, NH = 4, MAX_LEN = 300, BS = 16 };

#ifndef ITERS
#define ITERS 40
#endif

static kvp_pool *pool;
static kvp_storage *ks, *vs;

struct worker {
	int id;
	uint64_t seed;
	long attends;
};

static double check_attend(kvp_kvcache *c, uint32_t layer, const struct kref *r, kvp_format f,
                           uint64_t *seed)
{
	size_t n = (size_t)r->len * KVH * HD;
	float q[NH * HD], out[NH * HD];
	double want[NH * HD], err;
	const float *k = r->k, *v = r->v;
	float *dk = NULL, *dv = NULL;

	kref_fill(q, NH * HD, 2.0f, seed);
	if (f != KVP_FP32) { /* the decoded rows, back in (len, H, D) order */
		float *gk = malloc(n * sizeof(float)), *gv = malloc(n * sizeof(float));
		uint32_t t, h;
		dk = malloc(n * sizeof(float));
		dv = malloc(n * sizeof(float));
		CHECK(gk && gv && dk && dv);
		CHECK_EQ(kvp_kvcache_gather(c, layer, gk, gv), KVP_OK);
		for (t = 0; t < r->len; t++)
			for (h = 0; h < KVH; h++) {
				memcpy(dk + ((size_t)t * KVH + h) * HD,
				       gk + ((size_t)h * r->len + t) * HD, HD * sizeof(float));
				memcpy(dv + ((size_t)t * KVH + h) * HD,
				       gv + ((size_t)h * r->len + t) * HD, HD * sizeof(float));
			}
		free(gk);
		free(gv);
		k = dk;
		v = dv;
	}
	CHECK_EQ(kvp_kvcache_attend(c, layer, q, NH, 0.25f, out), KVP_OK);
	kref_attend(k, v, r->len, KVH, HD, q, NH, 0.25f, want);
	err = kref_rel_err(out, want, NH, HD);
	free(dk);
	free(dv);
	return err;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	static const kvp_format fmts[] = {KVP_FP32, KVP_FP16, KVP_FP32, KVP_INT8};
	kvp_format f = fmts[w->id % 4];
	kvp_kvcache_config cfg = {LAYERS, KVH, HD, f, (kvp_owner)w->id};
	float *k = malloc((size_t)MAX_LEN * KVH * HD * sizeof(float));
	float *v = malloc((size_t)MAX_LEN * KVH * HD * sizeof(float));
	struct kref ref[LAYERS];
	kvp_kvcache *c;
	int it;
	uint32_t l;

	CHECK(k && v);
	CHECK_EQ(kvp_kvcache_create(pool, ks, vs, &cfg, &c), KVP_OK);
	for (l = 0; l < LAYERS; l++)
		kref_init(&ref[l], KVH, HD, MAX_LEN);
	for (it = 0; it < ITERS; it++) {
		uint32_t len = 1 + (uint32_t)(tu_rand(&w->seed) % MAX_LEN);
		for (l = 0; l < LAYERS; l++) {
			uint32_t done = 0;
			ref[l].len = 0;
			while (done < len) {
				/* a prefill chunk first, then decode-sized steps */
				uint32_t n = done == 0 ? 1 + (uint32_t)(tu_rand(&w->seed) % len)
				                       : 1 + (uint32_t)(tu_rand(&w->seed) % 4);
				n = n > len - done ? len - done : n;
				kref_fill(k, (size_t)n * KVH * HD, 3.0f, &w->seed);
				kref_fill(v, (size_t)n * KVH * HD, 3.0f, &w->seed);
				CHECK_EQ(kvp_kvcache_append(c, l, k, v, n), KVP_OK);
				kref_append(&ref[l], k, v, n);
				done += n;
			}
			CHECK_EQ(kvp_kvcache_len(c, l), len);
		}
		CHECK_EQ(kvp_kvcache_blocks_held(c), 2 * LAYERS * (size_t)((len + BS - 1) / BS));
		for (l = 0; l < LAYERS; l++) {
			CHECK(check_attend(c, l, &ref[l], f, &w->seed) <= 1e-5);
			w->attends++;
		}
		if (len > 1 && tu_rand(&w->seed) % 3 == 0) {
			uint32_t cut = 1 + (uint32_t)(tu_rand(&w->seed) % (len - 1));
			CHECK_EQ(kvp_kvcache_trim(c, cut), KVP_OK);
			for (l = 0; l < LAYERS; l++) {
				ref[l].len = len - cut;
				CHECK(check_attend(c, l, &ref[l], f, &w->seed) <= 1e-5);
				w->attends++;
			}
		}
		if (it % 5 == 4) {
			kvp_kvcache_destroy(c);
			CHECK_EQ(kvp_kvcache_create(pool, ks, vs, &cfg, &c), KVP_OK);
		} else {
			kvp_kvcache_release(c);
		}
		CHECK_EQ(kvp_kvcache_blocks_held(c), 0);
	}
	kvp_kvcache_destroy(c);
	for (l = 0; l < LAYERS; l++)
		kref_free(&ref[l]);
	free(k);
	free(v);
	return NULL;
}

static void test_request_loops(void)
{
	kvp_pool_config pc;
	kvp_bufcache *bc;
	pthread_t th[THREADS];
	struct worker w[THREADS];
	kvp_storage_stats kst, vst;
	kvp_stats st;
	long attends = 0;
	int i;

	kvp_pool_config_init(&pc);
	pc.block_size = BS;
	/* each thread holds at most 2 layers x 19 blocks per stream: enough for
	 * all, so any exhaustion would be a bug */
	pc.n_blocks = 2 * THREADS * LAYERS * ((MAX_LEN + BS - 1) / BS);
	CHECK_EQ(kvp_pool_create(&pc, &pool), KVP_OK);
	CHECK_EQ(kvp_bufcache_create(64u << 20, &bc), KVP_OK);
	CHECK_EQ(kvp_storage_create(pool, KVH * HD, bc, &ks), KVP_OK);   /* K: via the bufcache */
	CHECK_EQ(kvp_storage_create(pool, KVH * HD, NULL, &vs), KVP_OK); /* V: from the system */
	for (i = 0; i < THREADS; i++) {
		w[i].id = i;
		w[i].seed = 0x1234567ull * (uint64_t)(i + 1);
		w[i].attends = 0;
		CHECK_EQ(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
	}
	for (i = 0; i < THREADS; i++) {
		CHECK_EQ(pthread_join(th[i], NULL), 0);
		attends += w[i].attends;
	}
	CHECK(attends >= THREADS * ITERS * LAYERS);
	CHECK_EQ(kvp_pool_stats(pool, &st), KVP_OK);
	CHECK_EQ(kvp_stats_blocks_in_use(&st), 0);
	CHECK_EQ(st.n_exhausted, 0);
	CHECK(st.n_reused > 0);
	CHECK_EQ(kvp_storage_get_stats(ks, &kst), KVP_OK);
	CHECK_EQ(kvp_storage_get_stats(vs, &vst), KVP_OK);
	/* one buffer per block at most, and buffers were reused across requests */
	CHECK(kst.n_buffers + vst.n_buffers <= st.n_blocks);
	CHECK(kst.buffers_made + vst.buffers_made < st.n_allocations);
	printf("attends checked: %ld; blocks handed out %llu, buffers made %llu, format changes "
	       "%llu\n",
	       attends, (unsigned long long)st.n_allocations,
	       (unsigned long long)(kst.buffers_made + vst.buffers_made),
	       (unsigned long long)(kst.format_changes + vst.format_changes));
	kvp_storage_destroy(ks);
	kvp_storage_destroy(vs);
	kvp_bufcache_destroy(bc);
	kvp_pool_destroy(pool);
}

int main(void)
{
	RUN(test_request_loops);
	return 0;
}
