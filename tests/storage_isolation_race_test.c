/*
 * tests/storage_isolation_race_test.c - rows follow the holder, with everything at once.
 *
 * T threads on a growable prefix pool with one storage.  Every row a
 * thread writes encodes who wrote it: a private block's rows encode the
 * request (a nonce), the block id and the row; a block meant for sharing
 * gets rows derived from its content key (only the rows the key's mask
 * names: the others must read as zeros).  Each thread, at random:
 * allocates and writes private blocks, allocates, writes and publishes
 * keyed blocks, matches keys, reads every block it holds (read_f32 and the
 * zero-copy read), tries to overwrite its published blocks (accepted only
 * when it is their one holder and they are unpublished: it then expects
 * its new rows), lets go of everything; and now and then resets the prefix
 * cache, shrinks the pool to a few free blocks, or allocates enough to
 * grow it.  Every read is checked against what the reader may see: its
 * own rows, or the key's.  Wrong reads must be 0.
 *
 * KVP_SOAK_SECONDS=N runs N seconds (a soak) instead of the default
 * second and a half.
 */
#include <kvpool/kvpool.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/prefix_testutil.h"

#define T      4
#define BS     4
#define ROW    8
#define NKEYS  24
#define MAXH   8 /* blocks a thread holds at most */
#define POOL0  24
#define POOLMX 96

struct shared {
	kvp_pool *p;
	kvp_storage *s;
	_Atomic bool stop;
	_Atomic uint64_t reads, wrong, other, exhausted, resets, shrinks, grows, matched, published,
	    writes_refused, writes_taken;
};

/* What a held block must read as. */
struct held {
	kvp_ref ref;
	bool keyed;     /* rows from a key (matched, or written to publish) */
	bool mine;      /* allocated by this thread (may try to write it) */
	uint32_t key;   /* keyed: which key */
	uint64_t nonce; /* private: the request that wrote it */
	uint32_t mask;  /* rows written (the rest read as zeros) */
};

static double seconds(void)
{
	const char *e = getenv("KVP_SOAK_SECONDS");
	return e ? atof(e) : 1.5;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static kvp_hash key_of(uint32_t k)
{
	return tpx_key(k + 1, 3, 9);
}

/* A key's rows: the mask of rows written, never all and never none. */
static uint32_t key_mask(uint32_t k)
{
	uint32_t m = (k * 7u + 3u) % ((1u << BS) - 1u);
	return m ? m : 1u;
}

/* Row @r element @j of a keyed block (nonzero, exact in fp32). */
static float key_val(uint32_t k, uint32_t r, uint32_t j)
{
	return (float)(1 + (k * 1000u + r * 10u + j) % 1000003u);
}

/* Row @r element @j of a private block of request @nonce, block @id. */
static float priv_val(uint64_t nonce, uint32_t id, uint32_t r, uint32_t j)
{
	return (float)(2000000u + (uint32_t)((nonce * 131u + id * 17u + r * 5u + j) % 4000000u));
}

static void expected(const struct held *h, float *out)
{
	for (uint32_t r = 0; r < BS; r++)
		for (uint32_t j = 0; j < ROW; j++) {
			float v = 0.0f;
			if (h->mask & (1u << r))
				v = h->keyed ? key_val(h->key, r, j)
				             : priv_val(h->nonce, KVP_REF_ID(h->ref), r, j);
			out[r * ROW + j] = v;
		}
}

/* Write the rows @h says, one row at a time. */
static int write_rows(struct shared *sh, const struct held *h)
{
	float row[ROW];
	for (uint32_t r = 0; r < BS; r++) {
		if (!(h->mask & (1u << r)))
			continue;
		for (uint32_t j = 0; j < ROW; j++)
			row[j] = h->keyed ? key_val(h->key, r, j)
			                  : priv_val(h->nonce, KVP_REF_ID(h->ref), r, j);
		int rc = kvp_storage_write(sh->s, h->ref, r, row, 1);
		if (rc != KVP_OK)
			return rc;
	}
	return KVP_OK;
}

static void check_read(struct shared *sh, const struct held *h, bool zero_copy)
{
	float want[BS * ROW], got[BS * ROW];
	uint32_t n = 0;
	int rc;

	expected(h, want);
	if (zero_copy) {
		const void *data = NULL;
		rc = kvp_storage_read(sh->s, h->ref, &data, &n);
		if (rc == KVP_OK && n == BS && data)
			memcpy(got, data, sizeof got);
	} else {
		rc = kvp_storage_read_f32(sh->s, h->ref, got, BS, &n);
	}
	atomic_fetch_add(&sh->reads, 1);
	/* a block never written in this storage has no buffer: 0 rows, which
	 * is right only when every row must read as zero */
	bool none_ok = rc == KVP_OK && n == 0 && h->mask == 0;
	if (!none_ok && (rc != KVP_OK || n != BS || memcmp(got, want, sizeof got) != 0)) {
		if (atomic_fetch_add(&sh->wrong, 1) < 5)
			fprintf(stderr,
			        "wrong read: block %u (%s key %u nonce %llu mask %x) rc %d n %u "
			        "row0 %g want %g\n",
			        KVP_REF_ID(h->ref), h->keyed ? "keyed" : "private", h->key,
			        (unsigned long long)h->nonce, h->mask, rc, n, got[0], want[0]);
	}
}

struct worker {
	struct shared *sh;
	uint32_t idx;
};

static void *worker(void *arg)
{
	struct worker *w = arg;
	struct shared *sh = w->sh;
	uint64_t rng = tpx_seed() * 31 + w->idx;
	uint64_t nonce = (uint64_t)w->idx << 40;
	struct held h[MAXH];
	kvp_ref refs[MAXH];

	while (!atomic_load(&sh->stop)) {
		kvp_owner owner = ++nonce;
		size_t nh = 0, n = 0;
		/* match a few keys, one call per key (a sequence stops at a miss) */
		uint32_t nm = (uint32_t)(tu_rand(&rng) % 3);
		for (uint32_t i = 0; i < nm && nh < MAXH; i++) {
			uint32_t k = (uint32_t)(tu_rand(&rng) % NKEYS);
			kvp_hash key = key_of(k);
			size_t got = 0;
			if (kvp_prefix_match(sh->p, KVP_KV, KVP_FP32, &key, 1, owner, refs, 1,
			                     &got) != KVP_OK) {
				atomic_fetch_add(&sh->other, 1);
				continue;
			}
			if (got == 1) {
				bool dup = false;
				for (size_t j = 0; j < nh; j++)
					dup |= h[j].ref == refs[0];
				if (dup)
					continue; /* the same key twice: one hold */
				h[nh++] = (struct held){refs[0], true, false, k, 0, key_mask(k)};
				atomic_fetch_add(&sh->matched, 1);
			}
		}
		/* allocate: private blocks and keyed ones to publish */
		uint32_t na = 1 + (uint32_t)(tu_rand(&rng) % 3);
		if (nh + na > MAXH)
			na = (uint32_t)(MAXH - nh);
		int rc = na ? kvp_allocate(sh->p, KVP_KV, na * BS, owner, KVP_FP32, refs, MAXH, &n)
		            : KVP_OK;
		if (rc == KVP_EEXHAUSTED)
			atomic_fetch_add(&sh->exhausted, 1);
		else if (rc != KVP_OK)
			atomic_fetch_add(&sh->other, 1);
		for (size_t i = 0; rc == KVP_OK && i < n; i++) {
			struct held *x = &h[nh++];
			bool keyed = tu_rand(&rng) % 2;
			uint32_t k = (uint32_t)(tu_rand(&rng) % NKEYS);
			*x = (struct held){refs[i], keyed, true, k, nonce, 0};
			x->mask = keyed ? key_mask(k) : (uint32_t)(tu_rand(&rng) % (1u << BS));
			/* a fresh block reads as zeros before any write */
			uint32_t m = x->mask;
			x->mask = 0;
			check_read(sh, x, tu_rand(&rng) % 2);
			x->mask = m;
			if (write_rows(sh, x) != KVP_OK)
				atomic_fetch_add(&sh->other, 1);
			if (keyed) {
				int prc = kvp_prefix_publish(sh->p, x->ref, key_of(k));
				if (prc == KVP_OK)
					atomic_fetch_add(&sh->published, 1);
				else if (prc != KVP_EEXIST)
					atomic_fetch_add(&sh->other, 1);
			}
		}
		/* read everything held, twice, with an admin call in between */
		for (size_t i = 0; i < nh; i++)
			check_read(sh, &h[i], tu_rand(&rng) % 2);
		switch (tu_rand(&rng) % 64) {
		case 0:
			kvp_prefix_reset(sh->p);
			atomic_fetch_add(&sh->resets, 1);
			break;
		case 1: {
			uint32_t retired;
			if (kvp_shrink(sh->p, KVP_KV, (uint32_t)(tu_rand(&rng) % 4), &retired) !=
			    KVP_OK)
				atomic_fetch_add(&sh->other, 1);
			atomic_fetch_add(&sh->shrinks, 1);
			break;
		}
		case 2: { /* enough to grow a shrunk pool */
			kvp_ref big[16];
			size_t nb = 0;
			int grc = kvp_allocate(sh->p, KVP_KV, 16 * BS, owner + (1ull << 62),
			                       KVP_FP32, big, 16, &nb);
			if (grc == KVP_OK)
				kvp_free_all(sh->p, owner + (1ull << 62));
			atomic_fetch_add(&sh->grows, 1);
			break;
		}
		default:
			break;
		}
		/* overwrite own published blocks: refused while shared */
		for (size_t i = 0; i < nh; i++) {
			if (!h[i].mine || !h[i].keyed || tu_rand(&rng) % 2)
				continue;
			struct held y = h[i];
			y.keyed = false;
			y.nonce = ++nonce;
			y.mask = (1u << BS) - 1;
			kvp_block_info info;
			int wrc = write_rows(sh, &y);
			if (wrc == KVP_OK) {
				/* taken: it must have been ours alone and unpublished */
				if (kvp_block_get(sh->p, y.ref, &info) != KVP_OK ||
				    info.published || info.n_holders != 1)
					atomic_fetch_add(&sh->wrong, 1);
				h[i] = y;
				atomic_fetch_add(&sh->writes_taken, 1);
			} else if (wrc == KVP_EINVAL) {
				atomic_fetch_add(&sh->writes_refused, 1);
			} else {
				atomic_fetch_add(&sh->other, 1);
			}
		}
		for (size_t i = 0; i < nh; i++)
			check_read(sh, &h[i], tu_rand(&rng) % 2);
		if (nh && kvp_free_all(sh->p, owner) != KVP_OK)
			atomic_fetch_add(&sh->other, 1);
	}
	return NULL;
}

static void test_isolation_race(void)
{
	static struct shared sh;
	kvp_pool_config c;
	struct worker args[T];
	pthread_t th[T];

	memset(&sh, 0, sizeof sh);
	kvp_pool_config_init(&c);
	c.block_size = BS;
	c.n_blocks = POOL0;
	c.separate_kv = false;
	c.prefix_cache = true;
	c.grow_on_exhaustion = true;
	c.max_blocks = POOLMX;
	CHECK_EQ(kvp_pool_create(&c, &sh.p), KVP_OK);
	CHECK_EQ(kvp_storage_create(sh.p, ROW, NULL, &sh.s), KVP_OK);
	for (uint32_t i = 0; i < T; i++) {
		args[i] = (struct worker){&sh, i};
		CHECK_EQ(pthread_create(&th[i], NULL, worker, &args[i]), 0);
	}
	double end = now_s() + seconds();
	while (now_s() < end) {
		struct timespec ts = {0, 10000000};
		nanosleep(&ts, NULL);
	}
	atomic_store(&sh.stop, true);
	for (uint32_t i = 0; i < T; i++)
		pthread_join(th[i], NULL);
	printf("isolation race: %llu reads, %llu wrong; %llu matched, %llu published, "
	       "%llu resets, %llu shrinks, %llu grows, writes to own published blocks %llu "
	       "refused %llu taken; %llu exhausted, %llu other errors\n",
	       (unsigned long long)sh.reads, (unsigned long long)sh.wrong,
	       (unsigned long long)sh.matched, (unsigned long long)sh.published,
	       (unsigned long long)sh.resets, (unsigned long long)sh.shrinks,
	       (unsigned long long)sh.grows, (unsigned long long)sh.writes_refused,
	       (unsigned long long)sh.writes_taken, (unsigned long long)sh.exhausted,
	       (unsigned long long)sh.other);
	CHECK(sh.reads > 0);
	CHECK(sh.matched > 0);
	CHECK(sh.resets > 0);
	CHECK_EQ(sh.wrong, 0);
	CHECK_EQ(sh.other, 0);
	CHECK_EQ(sh.exhausted, 0);
	kvp_storage_destroy(sh.s);
	kvp_pool_destroy(sh.p);
}

int main(void)
{
	RUN(test_isolation_race);
	return 0;
}
