/*
 * tests/remote_fault_test.c - the remote tier while its server dies and freezes.
 *
 * Several threads serve requests the way a replay does: match locally,
 * fetch the rest of the prefix from Redis, check the rows of every block
 * they got against the rows its key determines, compute (write) the rest,
 * publish it through the tier, let go.  The pool is small, so most blocks
 * are evicted locally and come back from Redis.  Meanwhile the main thread
 * kills the server (SIGKILL) and starts a new one on the same port, then
 * freezes it (SIGSTOP) and thaws it.  Checked: every fetch returns within
 * the bound the header promises (the timeout, plus slack for the local
 * work on a loaded machine), kvp_remote_publish never waits on the network (a few
 * preempted outliers aside), every row
 * check passes, faults were seen (errors, reconnects), and after each
 * fault the tier serves hits again.
 */
#include <kvpool/kvpool.h>

#include <pthread.h>
#include <stdatomic.h>

#include "tests/remote_testutil.h"

#define BS       4
#define ROW      8
#define NCONV    48
#define MAXLEN   8
#define NTHREADS 4
#define TIMEOUT  100 /* ms; a publish that waited on a frozen server would take this long */

static char url[64];
static kvp_pool *pool;
static kvp_storage *sto;
static kvp_remote *tier;
static atomic_bool stop;
static _Atomic uint64_t max_fetch_ns, max_publish_ns, checks, bad_rows, fetched, requests;
static _Atomic uint64_t publishes, slow_publishes, fetches, slow_fetches;

static kvp_hash key_at(uint64_t conv, uint32_t j, kvp_hash parent)
{
	kvp_hash k;
	uint64_t tok[2] = {conv, j};
	CHECK_EQ(kvp_prefix_hash(j ? &parent : NULL, 3, tok, sizeof tok, &k), KVP_OK);
	return k;
}

static void rows_of(kvp_hash k, float *r)
{
	uint64_t s = k.lo ^ (k.hi << 1);
	for (int i = 0; i < BS * ROW; i++)
		r[i] = (float)((int64_t)(tu_rand(&s) % 4001) - 2000) / 128.0f;
}

static void raise_max(_Atomic uint64_t *m, uint64_t v)
{
	uint64_t cur = atomic_load(m);
	while (v > cur && !atomic_compare_exchange_weak(m, &cur, v))
		;
}

static void check_rows(kvp_ref ref, kvp_hash k)
{
	float want[BS * ROW], got[BS * ROW];
	uint32_t n = 0;
	rows_of(k, want);
	CHECK_EQ(kvp_storage_read_f32(sto, ref, got, BS, &n), KVP_OK);
	atomic_fetch_add(&checks, 1);
	if (n != BS || memcmp(want, got, sizeof want) != 0)
		atomic_fetch_add(&bad_rows, 1);
}

static void *worker(void *arg)
{
	uint64_t seed = (uint64_t)(uintptr_t)arg * 0x9e37 + 1;
	kvp_owner owner = (uint64_t)(uintptr_t)arg << 40;
	while (!atomic_load(&stop)) {
		uint64_t conv = tu_rand(&seed) % NCONV;
		uint32_t len = 1 + (uint32_t)(tu_rand(&seed) % MAXLEN);
		kvp_hash keys[MAXLEN];
		kvp_ref refs[MAXLEN];
		size_t m = 0, f = 0;
		for (uint32_t j = 0; j < len; j++)
			keys[j] = key_at(conv, j, j ? keys[j - 1] : keys[0]);
		owner++;
		CHECK_EQ(
		    kvp_prefix_match(pool, KVP_KV, KVP_FP32, keys, len, owner, refs, MAXLEN, &m),
		    KVP_OK);
		if (m < len) {
			uint64_t t = rt_now_ns();
			int rc = kvp_remote_fetch(tier, KVP_KV, KVP_FP32, keys + m, len - m, owner,
			                          refs + m, MAXLEN - m, &f);
			t = rt_now_ns() - t;
			raise_max(&max_fetch_ns, t);
			atomic_fetch_add(&fetches, 1);
			if (t > (TIMEOUT + 150) * 1000000ull)
				atomic_fetch_add(&slow_fetches, 1);
			CHECK(rc == KVP_OK || rc == KVP_EREMOTE);
			CHECK(rc == KVP_OK || f == 0);
			atomic_fetch_add(&fetched, f);
		}
		for (size_t j = 0; j < m + f; j++)
			check_rows(refs[j], keys[j]);
		for (size_t j = m + f; j < len; j++) {
			kvp_ref ref;
			size_t na;
			float rows[BS * ROW];
			if (kvp_allocate(pool, KVP_KV, BS, owner, KVP_FP32, &ref, 1, &na) != KVP_OK)
				break;
			rows_of(keys[j], rows);
			CHECK_EQ(kvp_storage_write(sto, ref, 0, rows, BS), KVP_OK);
			uint64_t t = rt_now_ns();
			int rc = kvp_remote_publish(tier, ref, keys[j]);
			t = rt_now_ns() - t;
			raise_max(&max_publish_ns, t);
			atomic_fetch_add(&publishes, 1);
			if (t >= TIMEOUT * 1000000ull)
				atomic_fetch_add(&slow_publishes, 1);
			CHECK(rc == KVP_OK || rc == KVP_EEXIST);
		}
		CHECK_EQ(kvp_free_all(pool, owner), KVP_OK);
		atomic_fetch_add(&requests, 1);
	}
	return NULL;
}

static kvp_remote_stats rstats(void)
{
	kvp_remote_stats s;
	CHECK_EQ(kvp_remote_get_stats(tier, &s), KVP_OK);
	return s;
}

/* Let the workers run until the tier has served @more hits (or @ms pass). */
static bool run_until_hits(uint64_t more, unsigned ms)
{
	uint64_t base = rstats().hits;
	for (unsigned t = 0; t < ms; t += 10) {
		if (rstats().hits >= base + more)
			return true;
		rt_sleep_ms(10);
	}
	return false;
}

static void test_kill_and_pause_mid_run(void)
{
	kvp_pool_config c;
	kvp_remote_config rc;
	pthread_t th[NTHREADS];
	kvp_pool_config_init(&c);
	c.block_size = BS;
	c.n_blocks = 64; /* far fewer than NCONV * MAXLEN keys */
	c.separate_kv = false;
	c.prefix_cache = true;
	CHECK_EQ(kvp_pool_create(&c, &pool), KVP_OK);
	CHECK_EQ(kvp_storage_create(pool, ROW, NULL, &sto), KVP_OK);
	kvp_remote_config_init(&rc);
	rc.url = url;
	rc.timeout_ms = TIMEOUT;
	rc.backoff_max_ms = 200;
	rc.copy_rows = true; /* a 64-block pool churns: the writer would find most blocks gone */
	CHECK_EQ(kvp_remote_create(sto, &rc, &tier), KVP_OK);
	for (uintptr_t i = 0; i < NTHREADS; i++)
		CHECK(pthread_create(&th[i], NULL, worker, (void *)(i + 1)) == 0);

	CHECK(run_until_hits(200, 20000)); /* the tier serves */
	rt_server_kill();
	rt_sleep_ms(600); /* down: every fetch fails fast or within the timeout */
	uint64_t err_down = rstats().errors;
	rt_server_restart(); /* empty: refilled by publishes, then hits again */
	CHECK(run_until_hits(200, 20000));
	uint64_t reconnects = rstats().reconnects;
	CHECK(kill(rt_pid, SIGSTOP) == 0);
	rt_sleep_ms(1500); /* frozen: connections time out; a stuck call would wait it out */
	uint64_t err_frozen = rstats().errors;
	CHECK(kill(rt_pid, SIGCONT) == 0);
	CHECK(run_until_hits(200, 20000)); /* thawed: used again */
	atomic_store(&stop, true);
	for (int i = 0; i < NTHREADS; i++)
		pthread_join(th[i], NULL);

	kvp_remote_stats s = rstats();
	printf("requests %llu, blocks checked %llu, fetched %llu, errors %llu (down %llu, "
	       "frozen %llu), reconnects %llu, writes %llu failed %llu dropped %llu, "
	       "max fetch %.1f ms, max publish %.3f ms\n",
	       (unsigned long long)requests, (unsigned long long)checks,
	       (unsigned long long)fetched, (unsigned long long)s.errors,
	       (unsigned long long)err_down, (unsigned long long)err_frozen,
	       (unsigned long long)s.reconnects, (unsigned long long)s.writes_done,
	       (unsigned long long)s.writes_failed, (unsigned long long)s.writes_dropped,
	       (double)max_fetch_ns / 1e6, (double)max_publish_ns / 1e6);
	CHECK_EQ(bad_rows, 0);
	CHECK(checks > 0 && fetched > 0);
	CHECK(err_down > 0);          /* the kill was seen */
	CHECK(err_frozen > err_down); /* the freeze was seen */
	CHECK(reconnects > 0);        /* and the tier came back */
	CHECK(s.corrupt == 0);
	/* the timeout (connection wait, connect and round trip share one
	 * deadline), then local work, with room for a loaded, sanitized run; a
	 * call stuck on a frozen server would take seconds */
	printf("fetches %llu, of them %llu took over the timeout + 150 ms\n",
	       (unsigned long long)fetches, (unsigned long long)slow_fetches);
	CHECK(slow_fetches <= 5);                /* preempted outliers only */
	CHECK(max_fetch_ns < 1000 * 1000000ull); /* none waited out the 1.5 s freeze */
	/* A publish that waited on the network would take a timeout each while
	 * the server is frozen (hundreds of them); a loaded, sanitized machine
	 * may preempt a thread that long a few times. */
	printf("publishes %llu, of them %llu took a timeout or longer\n",
	       (unsigned long long)publishes, (unsigned long long)slow_publishes);
	CHECK(publishes > 1000);
	CHECK(slow_publishes <= 5);
	kvp_remote_destroy(tier);
	kvp_storage_destroy(sto);
	kvp_pool_destroy(pool);
}

int main(void)
{
	rt_server_start(url, sizeof url);
	RUN(test_kill_and_pause_mid_run);
	return 0;
}
