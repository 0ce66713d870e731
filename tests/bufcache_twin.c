/*
 * tests/bufcache_twin.c - the buffer cache and its model in lockstep
 * (tests/bufcache_twin.h).
 */
#include "tests/bufcache_twin.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "lib/testing/fault.h"

#define TW_CHECK(t, cond)                                                                          \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);   \
			(t)->die();                                                                \
		}                                                                                  \
	} while (0)

#define TW_EQ(t, a, b)                                                                             \
	do {                                                                                       \
		long long tw_a_ = (long long)(a), tw_b_ = (long long)(b);                          \
		if (tw_a_ != tw_b_) {                                                              \
			fprintf(stderr, "%s:%d: CHECK_EQ failed: %s == %s (%lld vs %lld)\n",       \
			        __FILE__, __LINE__, #a, #b, tw_a_, tw_b_);                         \
			(t)->die();                                                                \
		}                                                                                  \
	} while (0)

/* The live buffer with pointer @p on one side, or -1 (evicted buffers' pointers may be reused). */
static int find(const struct bufcache_twin *t, const void *p, int ref)
{
	for (int i = t->n_bufs - 1; i >= 0; i--)
		if ((ref ? t->bufs[i].ref : t->bufs[i].kv) == p)
			return i;
	return -1;
}

static void same_stats(const struct bufcache_twin *t)
{
	kvp_bufcache_stats a;
	struct ref_bufcache_stats b;

	TW_EQ(t, kvp_bufcache_get_stats(t->kv, &a), KVP_OK);
	ref_bufcache_get_stats(t->ref, &b);
	TW_EQ(t, a.hits, b.hits);
	TW_EQ(t, a.misses, b.misses);
	TW_EQ(t, a.evictions, b.evictions);
	TW_EQ(t, a.oom_retries, b.oom_retries);
	TW_EQ(t, a.system_allocs, b.system_allocs);
	TW_EQ(t, a.system_frees, b.system_frees);
	TW_EQ(t, a.cached_bytes, b.cached_bytes);
	TW_EQ(t, kvp_bufcache_cached_bytes(t->kv), b.cached_bytes);
}

int twin_create(struct bufcache_twin *t, size_t budget, struct twin_buf *bufs, int max_bufs,
                void (*die)(void))
{
	memset(t, 0, sizeof *t);
	t->bufs = bufs;
	t->max_bufs = max_bufs;
	t->die = die;
	if (kvp_bufcache_create(budget, &t->kv) != KVP_OK)
		return -1;
	t->ref = ref_bufcache_create(budget, 0);
	TW_CHECK(t, t->ref != NULL);
	return 0;
}

void twin_destroy(struct bufcache_twin *t)
{
	while (t->n_out)
		twin_free(t, 0);
	kvp_bufcache_destroy(t->kv);
	ref_bufcache_destroy(t->ref);
}

int twin_full(const struct bufcache_twin *t)
{
	return t->n_bufs >= t->max_bufs - 1;
}

/* A hit must be a cached buffer, the same on both sides; a miss makes a new one. */
static int hit_or_new(struct bufcache_twin *t, void *pk, void *pr, size_t cap, int hit)
{
	int i, old;

	if (hit) {
		i = find(t, pk, 0);
		TW_CHECK(t, i >= 0);
		TW_EQ(t, find(t, pr, 1), i); /* the same buffer on both sides */
		TW_CHECK(t, !t->bufs[i].out);
		TW_EQ(t, t->bufs[i].cap, cap);
		return i;
	}
	TW_CHECK(t, t->n_bufs < t->max_bufs);
	/* A reused address belongs to a buffer evicted earlier: forget it. */
	if ((old = find(t, pk, 0)) >= 0)
		t->bufs[old].kv = NULL;
	if ((old = find(t, pr, 1)) >= 0)
		t->bufs[old].ref = NULL;
	i = t->n_bufs++;
	t->bufs[i] = (struct twin_buf){pk, pr, cap, 0};
	return i;
}

void twin_alloc(struct bufcache_twin *t, size_t req, long fail)
{
	size_t ak = 1, ar = 1;
	kvp_bufcache_stats before, after;
	void *pk, *pr;

	TW_CHECK(t, t->n_out < TWIN_MAX_OUT);
	TW_EQ(t, kvp_bufcache_get_stats(t->kv, &before), KVP_OK);
	kvpi_fault_inject(0, fail);
	pk = kvp_bufcache_alloc(t->kv, req, &ak);
	kvpi_fault_inject(0, fail);
	pr = ref_bufcache_alloc(t->ref, req, &ar);
	kvpi_fault_inject(0, 0);
	TW_EQ(t, ak, ar);
	TW_EQ(t, pk == NULL, pr == NULL);
	same_stats(t);
	if (!pk)
		return;
	TW_CHECK(t, ak >= req);
	TW_EQ(t, (uintptr_t)pk % 256, 0);
	TW_EQ(t, kvp_bufcache_get_stats(t->kv, &after), KVP_OK);
	int i = hit_or_new(t, pk, pr, ak, after.hits > before.hits);
	memset(pk, 0xA5, ak); /* the whole capacity is ours */
	t->bufs[i].out = 1;
	t->outs[t->n_out++] = i;
}

void twin_free(struct bufcache_twin *t, int k)
{
	int i = t->outs[k];

	t->outs[k] = t->outs[--t->n_out];
	t->bufs[i].out = 0;
	kvp_bufcache_free(t->kv, t->bufs[i].kv, t->bufs[i].cap);
	ref_bufcache_free(t->ref, t->bufs[i].ref, t->bufs[i].cap);
	same_stats(t);
}
