/*
 * tests/bufcache_fault_test.c - the system allocator fails on demand (kvpi_fault_inject).
 *
 * - evict-and-retry: with the next two system allocations failing, a miss
 *   evicts the two smallest cached buffers (oldest first), retries, and
 *   succeeds on the third try; the rest of the cache is untouched.
 * - final NULL: with every allocation failing, a miss evicts everything and
 *   returns NULL with *actual = 0; nothing leaks (system_allocs ==
 *   system_frees once all is freed and cleared; LSan in the asan config).
 * - metadata failure on the miss path costs caching, not the allocation.
 * - create fails cleanly (KVP_ENOMEM, *out NULL, nothing leaked) at every
 *   one of its system allocations.
 */
#include <kvpool/bufcache.h>

#include "lib/testing/fault.h"
#include "tests/testutil.h"

static kvp_bufcache_stats stats(kvp_bufcache *c)
{
	kvp_bufcache_stats s;
	CHECK_EQ(kvp_bufcache_get_stats(c, &s), KVP_OK);
	return s;
}

/* Cache four buffers of increasing capacity (plus a second of the smallest). */
static void fill(kvp_bufcache *c, void *p[5], size_t a[5])
{
	static const size_t req[5] = {1000, 1000, 2000, 3000, 4000};

	for (int i = 0; i < 5; i++) {
		p[i] = kvp_bufcache_alloc(c, req[i], &a[i]);
		CHECK(p[i] != NULL);
	}
	for (int i = 0; i < 5; i++)
		kvp_bufcache_free(c, p[i], a[i]);
	CHECK_EQ(stats(c).cached_buffers, 5);
}

static void evict_and_retry(void)
{
	kvp_bufcache *c;
	void *p[5], *q, *r;
	size_t a[5], x, y;
	kvp_bufcache_stats s;

	CHECK_EQ(kvp_bufcache_create(1 << 20, &c), KVP_OK);
	fill(c, p, a);
	kvpi_fault_inject(0, 2);
	q = kvp_bufcache_alloc(c, 10000, &x);
	kvpi_fault_inject(0, 0);
	CHECK(q != NULL);
	CHECK_EQ(x, kvp_bufcache_round(10000));
	s = stats(c);
	CHECK_EQ(s.oom_retries, 2);
	CHECK_EQ(s.evictions, 2);
	CHECK_EQ(s.cached_buffers, 3);
	CHECK_EQ(s.cached_bytes, a[2] + a[3] + a[4]);
	/* The two 1280-byte buffers went; the 2304 one is now the smallest. */
	r = kvp_bufcache_alloc(c, 1, &y);
	CHECK(r == p[2]);
	CHECK_EQ(y, a[2]);
	kvp_bufcache_free(c, r, y);
	kvp_bufcache_free(c, q, x);
	kvp_bufcache_clear(c);
	s = stats(c);
	CHECK_EQ(s.system_allocs, s.system_frees);
	CHECK_EQ(s.bytes_in_use, 0);
	kvp_bufcache_destroy(c);
}

static void final_null(void)
{
	kvp_bufcache *c;
	void *p[5];
	size_t a[5], x = 1;
	unsigned long injected;
	kvp_bufcache_stats s;

	CHECK_EQ(kvp_bufcache_create(1 << 20, &c), KVP_OK);
	fill(c, p, a);
	injected = kvpi_fault_injected();
	kvpi_fault_inject(0, -1);
	CHECK(kvp_bufcache_alloc(c, 10000, &x) == NULL);
	kvpi_fault_inject(0, 0);
	CHECK_EQ(x, 0);
	/* One failed try per cached buffer, plus the first. */
	CHECK_EQ(kvpi_fault_injected() - injected, 6);
	s = stats(c);
	CHECK_EQ(s.oom_retries, 5);
	CHECK_EQ(s.evictions, 5);
	CHECK_EQ(s.cached_buffers, 0);
	CHECK_EQ(s.cached_bytes, 0);
	CHECK_EQ(kvp_bufcache_cached_bytes(c), 0);
	CHECK_EQ(s.system_allocs, s.system_frees);
	CHECK_EQ(s.bytes_in_use, 0);
	/* The cache works again once the system does. */
	p[0] = kvp_bufcache_alloc(c, 10000, &a[0]);
	CHECK(p[0] != NULL);
	kvp_bufcache_free(c, p[0], a[0]);
	CHECK_EQ(stats(c).cached_buffers, 1);
	kvp_bufcache_destroy(c);
}

static void metadata_failure_costs_only_caching(void)
{
	kvp_bufcache *c;
	void *p;
	size_t a;
	kvp_bufcache_stats s;

	CHECK_EQ(kvp_bufcache_create(1 << 20, &c), KVP_OK);
	/* The buffer's allocation succeeds, the size-class group's fails. */
	kvpi_fault_inject(1, -1);
	p = kvp_bufcache_alloc(c, 5000, &a);
	kvpi_fault_inject(0, 0);
	CHECK(p != NULL);
	CHECK_EQ(a, kvp_bufcache_round(5000));
	kvp_bufcache_free(c, p, a);
	s = stats(c);
	CHECK_EQ(s.cached_buffers, 0);
	CHECK_EQ(s.system_frees, 1);
	/* With memory back, the next miss creates the group and the buffer is cached. */
	p = kvp_bufcache_alloc(c, 5000, &a);
	CHECK(p != NULL);
	kvp_bufcache_free(c, p, a);
	CHECK_EQ(stats(c).cached_buffers, 1);
	kvp_bufcache_destroy(c);
}

static void create_fails_cleanly(void)
{
	int ok = 0;

	for (long k = 0; k < 100 && !ok; k++) {
		kvp_bufcache *c = (kvp_bufcache *)&ok;
		int rc;

		kvpi_fault_inject(k, 1);
		rc = kvp_bufcache_create(1 << 20, &c);
		kvpi_fault_inject(0, 0);
		if (rc == KVP_OK) {
			CHECK(c != NULL);
			ok = 1;
			kvp_bufcache_destroy(c);
		} else {
			CHECK_EQ(rc, KVP_ENOMEM);
			CHECK(c == NULL);
		}
	}
	CHECK(ok);
}

int main(void)
{
	RUN(evict_and_retry);
	RUN(final_null);
	RUN(metadata_failure_costs_only_caching);
	RUN(create_fails_cleanly);
	return 0;
}
