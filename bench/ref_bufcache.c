/*
 * bench/ref_bufcache.c - the reference 256-slot linear best-fit scan (baseline).
 *
 * Written from the single-thread contract in kvpool/bufcache.h: every
 * lookup and every eviction scans all 256 slots.  `seq` orders caching so
 * that ties go to the least recently cached buffer, as in kvpool's cache.
 */
#include "bench/ref_bufcache.h"

#include <kvpool/bufcache.h>

#include "lib/testing/fault.h"

#include <pthread.h>
#include <string.h>

struct slot {
	void *ptr;
	size_t cap; /* 0: slot empty */
	uint64_t seq;
};

struct ref_bufcache {
	struct slot slot[REF_SLOTS];
	size_t budget, cached;
	uint64_t seq;
	int locked;
	pthread_mutex_t lock;
	struct ref_bufcache_stats st;
};

ref_bufcache *ref_bufcache_create(size_t max_cached_bytes, int locked)
{
	ref_bufcache *s = kvpi_sys_alloc(sizeof(*s), 64);

	if (!s)
		return NULL;
	memset(s, 0, sizeof(*s));
	s->budget = max_cached_bytes;
	s->locked = locked;
	pthread_mutex_init(&s->lock, NULL);
	return s;
}

/* Index of the smallest slot with cap >= @need (least recently cached among equals), or -1. */
static int best_fit(ref_bufcache *s, size_t need)
{
	int best = -1;

	for (int i = 0; i < REF_SLOTS; i++) {
		struct slot *x = &s->slot[i];
		if (!x->cap || x->cap < need)
			continue;
		if (best < 0 || x->cap < s->slot[best].cap ||
		    (x->cap == s->slot[best].cap && x->seq < s->slot[best].seq))
			best = i;
	}
	return best;
}

/* Empty slot @i, returning its buffer. */
static void *take_slot(ref_bufcache *s, int i, size_t *cap)
{
	*cap = s->slot[i].cap;
	s->cached -= s->slot[i].cap;
	s->slot[i].cap = 0;
	return s->slot[i].ptr;
}

static int evict_smallest(ref_bufcache *s)
{
	int i = best_fit(s, 1);
	size_t cap;

	if (i < 0)
		return 0;
	kvpi_sys_free(take_slot(s, i, &cap));
	s->st.evictions++;
	s->st.system_frees++;
	return 1;
}

static void *do_alloc(ref_bufcache *s, size_t requested, size_t *actual)
{
	size_t cap = kvp_bufcache_round(requested);
	void *p;
	int i;

	*actual = 0;
	if (!cap)
		return NULL;
	i = best_fit(s, requested ? requested : 1);
	if (i >= 0) {
		s->st.hits++;
		return take_slot(s, i, actual);
	}
	s->st.misses++;
	while (!(p = kvpi_sys_alloc(cap, KVP_BUF_ALIGN))) {
		if (!evict_smallest(s))
			return NULL;
		s->st.oom_retries++;
	}
	s->st.system_allocs++;
	*actual = cap;
	return p;
}

static int free_slot(ref_bufcache *s)
{
	for (int i = 0; i < REF_SLOTS; i++)
		if (!s->slot[i].cap)
			return i;
	return -1;
}

static void do_free(ref_bufcache *s, void *ptr, size_t actual)
{
	int i;

	if (!ptr)
		return;
	if (actual > s->budget) {
		kvpi_sys_free(ptr);
		s->st.system_frees++;
		return;
	}
	while (s->cached + actual > s->budget)
		evict_smallest(s);
	while ((i = free_slot(s)) < 0)
		evict_smallest(s);
	s->slot[i] = (struct slot){ptr, actual, ++s->seq};
	s->cached += actual;
}

void *ref_bufcache_alloc(ref_bufcache *s, size_t requested, size_t *actual)
{
	void *p;

	if (s->locked)
		pthread_mutex_lock(&s->lock);
	p = do_alloc(s, requested, actual);
	if (s->locked)
		pthread_mutex_unlock(&s->lock);
	return p;
}

void ref_bufcache_free(ref_bufcache *s, void *ptr, size_t actual)
{
	if (s->locked)
		pthread_mutex_lock(&s->lock);
	do_free(s, ptr, actual);
	if (s->locked)
		pthread_mutex_unlock(&s->lock);
}

void ref_bufcache_get_stats(ref_bufcache *s, struct ref_bufcache_stats *out)
{
	*out = s->st;
	out->cached_bytes = s->cached;
}

void ref_bufcache_destroy(ref_bufcache *s)
{
	for (int i = 0; i < REF_SLOTS; i++)
		if (s->slot[i].cap)
			kvpi_sys_free(s->slot[i].ptr);
	pthread_mutex_destroy(&s->lock);
	kvpi_sys_free(s);
}
