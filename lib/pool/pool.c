/*
 * lib/pool/pool.c - pool life cycle: configuration, creation, destruction, hooks.
 *
 * Design rationale (the long form is docs/DESIGN.md):
 *   - The allocate/free path must scale with threads on a shared server, so
 *     its common case touches only the calling thread's magazine, and its
 *     uncommon case a lock-free Treiber stack per stream.
 *   - "No false exhaustion" is a hard guarantee, not a heuristic: a thread
 *     short of blocks can take every other thread's cached blocks itself
 *     (lib/pool/pool_blocks.c), whatever those threads are doing.
 *   - Block ids index storage and block tables directly, so blocks never
 *     move: the table grows by segments that are never moved or replaced,
 *     so reading it needs no read-side section at all.
 *   - Owner bookkeeping needs per-owner atomicity anyway, so it uses a
 *     sharded table with one mutex per shard instead of a global one, and
 *     a record is biased to the thread that first allocates for it, which
 *     then needs no lock at all (lib/pool/owner.h).
 *   - Synchronization between a thread's own work and the rare thread that
 *     interferes (a drainer, a revoker) is asymmetric: the common side uses
 *     plain stores, the rare side membarrier() (lib/base/barrier.h), with a
 *     seq_cst fallback where membarrier is missing or must not be used.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "lib/pool/pool_internal.h"
#include "lib/pool/pool_report.h"
#include "lib/base/barrier.h"
#include "lib/base/sysmem.h"
#include "lib/base/tsan.h"

static _Atomic uint64_t next_uid = 1;

/* The heavy side's barrier (lib/base/barrier.h); nothing in the seq_cst fallback. */
void kvpi_heavy_barrier(struct kvp_pool *p)
{
	if (p->asym)
		kvpi_barrier_heavy();
}

void kvp_pool_config_init(kvp_pool_config *cfg)
{
	if (!cfg)
		return;
	memset(cfg, 0, sizeof(*cfg));
	cfg->block_size = 16;
	cfg->n_blocks = 1024;
	cfg->separate_kv = true;
	cfg->grow_on_exhaustion = false;
	cfg->max_blocks = 0;
	cfg->thread_cache = KVP_DEFAULT_THREAD_CACHE;
	cfg->history_len = 256;
}

static bool config_valid(const kvp_pool_config *c)
{
	if (c->block_size < 1 || c->block_size > KVP_MAX_BLOCK_SIZE)
		return false;
	if (c->n_blocks < 1 || c->n_blocks > KVP_MAX_BLOCKS)
		return false;
	if (c->max_blocks && (c->max_blocks < c->n_blocks || c->max_blocks > KVP_MAX_BLOCKS))
		return false;
	if (c->thread_cache > KVP_MAX_THREAD_CACHE)
		return false;
	return true;
}

/* Put the initial ids of stream @si, [first, first+n), on its stack, lowest on top. */
static void fill_stream(struct kvp_pool *p, int si, uint32_t first, uint32_t n)
{
	uint32_t tag = kvpi_stream_tag(p, si);
	if (n == 0)
		return;
	for (uint32_t i = 0; i < n; i++) {
		struct kvpi_block *b = kvpi_bt_block(&p->bt, first + i);
		atomic_init(&b->state, kvpi_st_make(0, 0, 0, tag, 0));
		atomic_init(&b->owner, 0);
		atomic_init(&b->free_next, i + 1 < n ? first + i + 1 : KVPI_NO_ID);
		b->own_pos = KVPI_NO_ID;
		b->lru_ahead = b->pad = 0;
	}
	atomic_init(&p->fs[si].head, kvpi_fs_pack(0, first));
	atomic_init(&p->fs[si].avail, n);
	atomic_init(&p->managed_stream[si], n);
}

static void pool_free(struct kvp_pool *p)
{
	struct kvpi_tslot *s = atomic_load_explicit(&p->slots, memory_order_relaxed);
	while (s) {
		struct kvpi_tslot *next = s->next;
		kvpi_rec_cache_free(&s->recs);
		kvpi_tslot_free(s);
		s = next;
	}
	if (p->fallback)
		kvpi_rec_cache_free(&p->fallback->recs);
	kvpi_tslot_free(p->fallback);
	kvpi_sys_free(p->hist);
	if (p->mode)
		p->mode->destroy(p);
	kvpi_owners_destroy(&p->owners);
	kvpi_bt_destroy(&p->bt);
	pthread_mutex_destroy(&p->grow_lock);
	pthread_mutex_destroy(&p->hist_lock);
	pthread_mutex_destroy(&p->fallback_lock);
	kvpi_sys_free(p);
}

int kvpi_pool_create(const kvp_pool_config *cfg, struct kvp_pool **out)
{
	if (!config_valid(cfg))
		return KVP_EINVAL;

	struct kvp_pool *p = kvpi_sys_calloc(1, sizeof(*p), 64);
	if (!p)
		return KVP_ENOMEM;
	p->block_size = cfg->block_size;
	p->bs_shift =
	    (cfg->block_size & (cfg->block_size - 1)) ? -1 : __builtin_ctz(cfg->block_size);
	p->asym = kvpi_barrier_asym_ok(); /* decided once per pool, before any thread sees it */
	p->max_blocks = cfg->max_blocks ? cfg->max_blocks : KVP_MAX_BLOCKS;
	p->thread_cache = cfg->thread_cache;
	p->history_len = cfg->history_len;
	p->separate_kv = cfg->separate_kv;
	p->n_streams = cfg->separate_kv ? 2 : 1;
	p->si_of[KVP_K] = 0;
	p->si_of[KVP_V] = cfg->separate_kv ? 1 : 0;
	p->si_of[KVP_KV] = cfg->separate_kv ? -1 : 0;
	p->si_of[3] = -1;
	p->grow = cfg->grow_on_exhaustion;
	p->grow_cfg = cfg->grow_on_exhaustion;
	p->n_blocks_initial = cfg->n_blocks;
	p->uid = atomic_fetch_add_explicit(&next_uid, 1, memory_order_relaxed);
	pthread_mutex_init(&p->grow_lock, NULL);
	pthread_mutex_init(&p->hist_lock, NULL);
	pthread_mutex_init(&p->fallback_lock, NULL);
	kvpi_fs_init(&p->fs[0]);
	kvpi_fs_init(&p->fs[1]);
	p->retired_head = KVPI_NO_ID;

	/* On failure each part is left empty but destroyable (pool_free). */
	bool ok = kvpi_bt_init(&p->bt, cfg->n_blocks) == 0;
	ok = ok && kvpi_owners_init(&p->owners) == 0;
	if (ok)
		p->fallback = kvpi_tslot_alloc(0);
	if (ok && p->history_len)
		p->hist = kvpi_sys_calloc(p->history_len, sizeof(kvp_stats), 64);
	if (!ok || !p->fallback || (p->history_len && !p->hist)) {
		pool_free(p);
		return KVP_ENOMEM;
	}

	if (p->separate_kv) {
		uint32_t nk = cfg->n_blocks - cfg->n_blocks / 2; /* K takes the odd one */
		fill_stream(p, 0, 0, nk);
		fill_stream(p, 1, nk, cfg->n_blocks - nk);
	} else {
		fill_stream(p, 0, 0, cfg->n_blocks);
	}
	atomic_init(&p->managed, cfg->n_blocks);
	/* release: the pool is handed to other threads by the caller, which
	 * needs its own synchronisation; this orders our init before it. */
	atomic_store_explicit(&p->n_ids, cfg->n_blocks, memory_order_release);
	kvpi_registry_add(p);
	kvpi_pool_report_at_create(p); /* KVPOOL_SHOW_STATS at exit */
	*out = p;
	return KVP_OK;
}

void kvpi_pool_discard(struct kvp_pool *p)
{
	kvpi_registry_remove(p);
	pool_free(p);
}

void kvp_pool_destroy(kvp_pool *p)
{
	if (!p)
		return;
	kvpi_pool_report_at_destroy(p); /* KVPOOL_SHOW_STATS (kvpool/report.h) */
	/* After this no exiting thread touches the pool (lib/pool/tslot.c). */
	kvpi_registry_remove(p);
	pool_free(p);
}

uint32_t kvp_pool_block_size(const kvp_pool *p)
{
	return p ? p->block_size : 0;
}

bool kvp_pool_separate_kv(const kvp_pool *p)
{
	return p ? p->separate_kv : false;
}

uint32_t kvp_pool_n_ids(const kvp_pool *p)
{
	/* acquire: ids below the value are fully initialised. */
	return p ? atomic_load_explicit(&((kvp_pool *)p)->n_ids, memory_order_acquire) : 0;
}

uint32_t kvp_pool_n_retired_ids(const kvp_pool *p)
{
	/* relaxed: a count; exact when no grow or shrink is in flight. */
	return p ? atomic_load_explicit(&((kvp_pool *)p)->n_retired_ids, memory_order_relaxed) : 0;
}

int kvp_pool_add_retire_hook(kvp_pool *p, kvp_retire_fn fn, void *arg)
{
	if (!p || !fn)
		return KVP_EINVAL;
	int rc = KVP_ERANGE;
	pthread_mutex_lock(&p->grow_lock);
	for (int i = 0; i < KVP_MAX_RETIRE_HOOKS; i++) {
		if (!p->hooks[i].fn) {
			p->hooks[i].fn = fn;
			p->hooks[i].arg = arg;
			rc = KVP_OK;
			break;
		}
	}
	pthread_mutex_unlock(&p->grow_lock);
	return rc;
}

int kvp_pool_remove_retire_hook(kvp_pool *p, kvp_retire_fn fn, void *arg)
{
	if (!p || !fn)
		return KVP_EINVAL;
	int rc = KVP_ENOENT;
	pthread_mutex_lock(&p->grow_lock);
	for (int i = 0; i < KVP_MAX_RETIRE_HOOKS; i++) {
		if (p->hooks[i].fn == fn && p->hooks[i].arg == arg) {
			p->hooks[i].fn = NULL;
			p->hooks[i].arg = NULL;
			rc = KVP_OK;
			break;
		}
	}
	pthread_mutex_unlock(&p->grow_lock);
	return rc;
}
