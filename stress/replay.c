/*
 * stress/replay.c - the serving replay engine (see replay.h).
 *
 * Rationale:
 *   - One scheduler, T workers, each running a continuous batch, is the
 *     shape of a real inference server (vLLM, TGI, SGLang): many requests
 *     hold KV blocks at once, finish in arbitrary order, and their blocks
 *     go straight to the next requests.  That is the load that exercises
 *     reuse, fragmentation and exhaustion, not one request at a time.
 *   - Admission reserves each request's whole footprint, so the replay can
 *     check that the pool never reports exhaustion when the scheduler's
 *     arithmetic says the blocks exist (kvpool's "no false exhaustion"),
 *     and so decode can never deadlock.
 *   - The harness's own locks (scheduler mutex) are taken once per request
 *     admitted or finished, never per token; per-token work touches only
 *     the worker's own state and the pool (or malloc).
 *   - Every per-worker figure the monitor reads is a relaxed atomic written
 *     by its worker alone; the rest is plain data read after the join.
 */
#define _GNU_SOURCE /* malloc_usable_size */
#include "stress/replay.h"

#include <inttypes.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "lib/testing/codec.h"
#include "stress/progress.h"
#include "stress/util.h"

#define MONITOR_NS         2000000ull    /* monitor sampling period */
#define STATS_EVERY        10            /* pool stats every this many samples */
#define EXHAUSTED_RETRY_NS 2000000000ull /* give up retrying a false exhaustion */
#define MAX_REJECT_LOG     10

typedef struct rp_slot {
	size_t idx; /* request index, also the pool owner id */
	uint32_t prompt, output, decoded, tokens;
	uint64_t need;    /* blocks reserved per stream (prefix: to allocate) */
	uint64_t blocks;  /* pool blocks it holds, K and V */
	uint32_t matched; /* prefix: full prompt blocks matched per stream */
	uint64_t left[2]; /* prefix: blocks per stream still to allocate */
	kvp_ref last[2];
	void **ptrs; /* naive: every stored row, K and V interleaved */
	size_t ptr_cap;
} rp_slot;

typedef struct rp_worker {
	struct rp_engine *e;
	pthread_t tid;
	rp_slot *slots;
	unsigned n_active;
	kvp_ref *refs;
	size_t refs_cap;
	unsigned lat_tick;
	/* Written by this worker only, read by the monitor: relaxed. */
	_Alignas(64) _Atomic uint64_t blocks_held;
	_Atomic uint64_t tokens_held, bytes_held, done, alloc_calls;
	/* Plain: read after the join. */
	_Alignas(64) uint64_t free_calls, set_used_calls, row_writes, blocks_allocated;
	uint64_t expected_blocks, prompt_tokens, output_tokens, unexpected_exhausted, errors;
	uint64_t prefix_blocks, prefix_matched, prefix_published, prefix_dup;
	char first_error[256];
	hist lat;
	float *krows; /* check_rows: one block's rows for a keyed block */
} rp_worker;

typedef struct rp_engine {
	const rp_config *c;
	rp_live *live;
	uint64_t t0, step_ns;
	size_t usable; /* naive: malloc_usable_size of one row */
	size_t row_bytes;
	float *rows; /* block_size rows of row_dim, the data written */
	pthread_mutex_t mu;
	pthread_cond_t sched_cv, work_cv;
	/* Under mu. */
	size_t *ready, rhead, rcount, rcap;
	uint64_t reserved, peak_reserved;
	size_t in_system, finished, admitted;
	bool arrivals_done;
	/* Hint for workers, written under mu, read without it: relaxed. */
	_Atomic size_t ready_hint;
	/* Published by the scheduler for the monitor: relaxed gauges. */
	_Atomic uint64_t admitted_pub, rejected_pub, in_system_pub, waits_pub;
	_Atomic bool stop;
	rp_worker *w;
	/* Prefix cache.  pending[s]: blocks of stream s admitted requests have
	 * still to allocate; a worker lowers it (release) after each allocation,
	 * the scheduler reads it (acquire) before kvp_n_free, so it never sees
	 * an allocation's pending drop without the allocation itself. */
	_Atomic uint64_t pending[2];
	uint32_t *matched; /* per request: blocks per stream matched at admission */
	kvp_ref *mrefs[2]; /* the scheduler's match buffers */
	uint64_t prefix_returned;
	float *crows[2]; /* check_rows: the scheduler's expected and read rows */
} rp_engine;

static uint64_t ld(_Atomic uint64_t *a)
{
	return atomic_load_explicit(a, memory_order_relaxed);
}

static void st(_Atomic uint64_t *a, uint64_t v)
{
	atomic_store_explicit(a, v, memory_order_relaxed);
}

/* Add to a counter only its owner thread writes (a relaxed load + store, no RMW). */
static void bump(_Atomic uint64_t *a, int64_t d)
{
	st(a, ld(a) + (uint64_t)d);
}

/* Prefix: @n blocks of stream @si that @s had still to allocate are allocated. */
static void allocated(rp_worker *w, rp_slot *s, int si, uint64_t n)
{
	if (!w->e->c->prefix)
		return;
	s->left[si] -= n;
	/* release: the scheduler that sees the drop also sees the allocation */
	atomic_fetch_sub_explicit(&w->e->pending[si], n, memory_order_release);
}

static void fail(rp_worker *w, const char *what, size_t idx, int rc)
{
	if (w->errors++ == 0)
		snprintf(w->first_error, sizeof w->first_error, "request %zu: %s: %s", idx, what,
		         kvp_strerror(rc));
}

static bool lat_take(rp_worker *w)
{
	if (++w->lat_tick < w->e->c->latency_every)
		return false;
	w->lat_tick = 0;
	return true;
}

/* One timed allocate call: the summary's histogram and, live, /metrics'. */
static void lat_record(rp_worker *w, uint64_t ns)
{
	hist_record(&w->lat, ns);
	if (w->e->live)
		promhist_observe(&w->e->live->alloc_lat, ns);
}

/* --- kvpool backend ------------------------------------------------------------ */

static int pool_allocate(rp_worker *w, kvp_stream stream, uint32_t n_tokens, size_t owner,
                         size_t *n)
{
	const rp_config *c = w->e->c;
	uint64_t first_fail = 0;
	for (;;) {
		bool timed = lat_take(w);
		uint64_t t = timed ? su_now_ns() : 0;
		int rc = kvp_allocate(c->pool, stream, n_tokens, owner, KVP_FP16, w->refs,
		                      w->refs_cap, n);
		if (timed)
			lat_record(w, su_now_ns() - t);
		bump(&w->alloc_calls, 1);
		if (rc != KVP_EEXHAUSTED)
			return rc;
		/*
		 * Admission reserved these blocks: the pool says they are not
		 * free.  Count it (the run fails its checks) and retry for a
		 * while, so a transient fault shows up as a count, not a hang.
		 */
		w->unexpected_exhausted++;
		uint64_t now = su_now_ns();
		if (first_fail == 0)
			first_fail = now;
		else if (now - first_fail > EXHAUSTED_RETRY_NS)
			return rc;
		su_sleep_ns(20000);
	}
}

static int pool_store_rows(rp_worker *w, int si, kvp_ref ref, uint32_t offset, uint32_t n_rows)
{
	rp_engine *e = w->e;
	w->row_writes++;
	return kvp_storage_write(e->c->storage[si], ref, offset, e->rows, n_rows);
}

/* check_rows: block @j of request @idx's prompt gets its key's rows, if it has a key. */
static int pool_store_prompt_rows(rp_worker *w, int si, size_t idx, uint32_t j, kvp_ref ref,
                                  uint32_t n_rows)
{
	const rp_config *c = w->e->c;
	if (!c->check_rows || j >= c->n_keys[idx])
		return pool_store_rows(w, si, ref, 0, n_rows);
	w->row_writes++;
	rp_key_rows(c->keys[c->key_off[idx] + j], si, n_rows, c->row_dim, w->krows);
	return kvp_storage_write(c->storage[si], ref, 0, w->krows, n_rows);
}

void rp_key_rows(kvp_hash key, int si, uint32_t n_rows, uint32_t row_dim, float *out)
{
	uint64_t x = key.lo ^ (key.hi * 0x9e3779b97f4a7c15ull) ^ (uint64_t)(si + 1);
	for (size_t i = 0; i < (size_t)n_rows * row_dim; i++) {
		x ^= x >> 12; /* xorshift64* */
		x ^= x << 25;
		x ^= x >> 27;
		out[i] = (float)((int)((x * 0x2545f4914f6cdd1dull) >> 53) - 1024) / 64.0f;
	}
}

/* Prefix: publish the request's full prompt blocks it computed itself:
 * blocks matched .. n_keys - 1, which are refs[0 ..] of its prefill. */
static void pool_publish(rp_worker *w, rp_slot *s, int si, size_t n)
{
	const rp_config *c = w->e->c;
	const kvp_hash *keys = c->keys + c->key_off[s->idx];
	for (uint32_t j = s->matched; j < c->n_keys[s->idx] && j - s->matched < n; j++) {
		kvp_ref ref = w->refs[j - s->matched];
		/* with a remote tier: published here and queued for Redis */
		int rc = c->remote[si] ? kvp_remote_publish(c->remote[si], ref, keys[j])
		                       : kvp_prefix_publish(c->pool, ref, keys[j]);
		if (rc == KVP_OK)
			w->prefix_published++;
		else if (rc == KVP_EEXIST) /* another request computed it meanwhile */
			w->prefix_dup++;
		else
			fail(w, "kvp_prefix_publish", s->idx, rc);
	}
}

static int pool_prefill(rp_worker *w, rp_slot *s)
{
	const rp_config *c = w->e->c;
	uint32_t bs = c->block_size;
	uint32_t rest = s->prompt - s->matched * bs; /* matched blocks are full */
	s->blocks += 2 * (uint64_t)s->matched;
	bump(&w->blocks_held, 2 * (int64_t)s->matched);
	for (int si = 0; si < 2 && rest > 0; si++) {
		size_t n = 0;
		int rc = pool_allocate(w, (kvp_stream)si, rest, s->idx, &n);
		if (rc != KVP_OK) {
			fail(w, "kvp_allocate (prompt)", s->idx, rc);
			return -1;
		}
		allocated(w, s, si, n);
		w->blocks_allocated += n;
		s->blocks += n;
		bump(&w->blocks_held, (int64_t)n);
		s->last[si] = w->refs[n - 1];
		if (c->storage[si] != NULL && c->write_rows) {
			for (size_t b = 0; b < n; b++) {
				uint32_t rows = b + 1 < n ? bs : rest - (uint32_t)b * bs;
				rc = pool_store_prompt_rows(w, si, s->idx, s->matched + (uint32_t)b,
				                            w->refs[b], rows);
				if (rc != KVP_OK) {
					fail(w, "kvp_storage_write (prompt)", s->idx, rc);
					return -1;
				}
			}
		}
		if (c->prefix) /* written: the full prompt blocks are final */
			pool_publish(w, s, si, n);
	}
	return 0;
}

static int pool_decode(rp_worker *w, rp_slot *s)
{
	const rp_config *c = w->e->c;
	uint32_t off = s->tokens % c->block_size;
	for (int si = 0; si < 2; si++) {
		int rc;
		if (off == 0) { /* the last block is full: extend the owner by one block */
			size_t n = 0;
			rc = pool_allocate(w, (kvp_stream)si, 1, s->idx, &n);
			if (rc != KVP_OK) {
				fail(w, "kvp_allocate (decode)", s->idx, rc);
				return -1;
			}
			allocated(w, s, si, 1);
			w->blocks_allocated++;
			s->blocks++;
			bump(&w->blocks_held, 1);
			s->last[si] = w->refs[0];
		} else if (c->storage[si] == NULL || !c->write_rows) {
			w->set_used_calls++;
			rc = kvp_block_set_used(c->pool, s->last[si], off + 1);
			if (rc != KVP_OK) {
				fail(w, "kvp_block_set_used", s->idx, rc);
				return -1;
			}
		}
		/* A storage write raises the block's n_used itself. */
		if (c->storage[si] != NULL && c->write_rows) {
			rc = pool_store_rows(w, si, s->last[si], off, 1);
			if (rc != KVP_OK) {
				fail(w, "kvp_storage_write (decode)", s->idx, rc);
				return -1;
			}
		}
	}
	return 0;
}

static void pool_finish(rp_worker *w, rp_slot *s)
{
	const rp_config *c = w->e->c;
	if (s->blocks == 0)
		return; /* the first allocation failed: nothing to free */
	w->free_calls++;
	int rc = kvp_free_all(c->pool, s->idx);
	if (rc != KVP_OK)
		fail(w, "kvp_free_all", s->idx, rc);
	bump(&w->blocks_held, -(int64_t)s->blocks);
}

/* --- naive backend: one malloc per token per stream ------------------------------ */

static int naive_token(rp_worker *w, rp_slot *s)
{
	rp_engine *e = w->e;
	for (int si = 0; si < 2; si++) {
		bool timed = lat_take(w);
		uint64_t t = timed ? su_now_ns() : 0;
		void *p = malloc(e->row_bytes);
		if (timed)
			lat_record(w, su_now_ns() - t);
		bump(&w->alloc_calls, 1);
		if (p == NULL) {
			if (si == 1) /* keep the token whole: drop its K row */
				free(s->ptrs[2 * (size_t)s->tokens]);
			fail(w, "malloc", s->idx, KVP_ENOMEM);
			return -1;
		}
		if (e->c->write_rows) {
			kvpi_codec_encode(KVP_FP16, p,
			                  e->rows + (size_t)(s->tokens % e->c->block_size) *
			                                e->c->row_dim,
			                  1, e->c->row_dim);
			w->row_writes++;
		}
		s->ptrs[2 * (size_t)s->tokens + (size_t)si] = p;
	}
	bump(&w->bytes_held, 2 * (int64_t)e->usable);
	return 0;
}

static int naive_prefill(rp_worker *w, rp_slot *s)
{
	size_t need = 2 * ((size_t)s->prompt + s->output);
	if (need > s->ptr_cap) { /* harness bookkeeping, reused across requests */
		void **np = realloc(s->ptrs, need * sizeof *np);
		if (np == NULL) {
			fail(w, "realloc (bookkeeping)", s->idx, KVP_ENOMEM);
			return -1;
		}
		s->ptrs = np;
		s->ptr_cap = need;
	}
	for (uint32_t i = 0; i < s->prompt; i++) { /* s->tokens: rows stored so far */
		if (naive_token(w, s) != 0)
			return -1;
		s->tokens++;
	}
	return 0;
}

static void naive_finish(rp_worker *w, rp_slot *s)
{
	for (size_t i = 0; i < 2 * (size_t)s->tokens; i++)
		free(s->ptrs[i]);
	w->free_calls += 2 * (uint64_t)s->tokens;
	bump(&w->bytes_held, -2 * (int64_t)w->e->usable * (int64_t)s->tokens);
}

/* --- workers --------------------------------------------------------------------- */

static int prefill(rp_worker *w, rp_slot *s)
{
	int rc = w->e->c->kind == RP_POOL ? pool_prefill(w, s) : naive_prefill(w, s);
	if (rc == 0)
		s->tokens = s->prompt;
	bump(&w->tokens_held, s->tokens); /* finish takes s->tokens back off */
	return rc;
}

static int decode(rp_worker *w, rp_slot *s)
{
	rp_engine *e = w->e;
	int rc = e->c->kind == RP_POOL ? pool_decode(w, s) : naive_token(w, s);
	if (rc == 0) {
		s->tokens++;
		s->decoded++;
		bump(&w->tokens_held, 1);
	}
	return rc;
}

/* Free the request's memory and give its reservation back to the scheduler. */
static void finish(rp_worker *w, rp_slot *s, bool ok)
{
	rp_engine *e = w->e;
	if (e->c->kind == RP_POOL)
		pool_finish(w, s);
	else
		naive_finish(w, s);
	bump(&w->tokens_held, -(int64_t)s->tokens);
	if (ok) {
		w->prompt_tokens += s->prompt;
		w->output_tokens += s->output;
		w->expected_blocks +=
		    2 * (((uint64_t)s->tokens + e->c->block_size - 1) / e->c->block_size);
		w->prefix_blocks += s->prompt / e->c->block_size;
		w->prefix_matched += s->matched;
		bump(&w->done, 1);
	}
	for (int si = 0; si < 2 && e->c->prefix; si++) /* a failed request's rest */
		atomic_fetch_sub_explicit(&e->pending[si], s->left[si], memory_order_release);
	pthread_mutex_lock(&e->mu);
	e->reserved -= s->need;
	e->in_system--;
	e->finished++;
	atomic_store_explicit(&e->in_system_pub, e->in_system, memory_order_relaxed);
	pthread_cond_signal(&e->sched_cv);
	pthread_mutex_unlock(&e->mu);
}

/* Take admitted requests while there is room in the batch; false when the run is over. */
static bool refill(rp_worker *w)
{
	rp_engine *e = w->e;
	unsigned room = e->c->batch - w->n_active;
	if (room == 0 ||
	    (w->n_active > 0 && atomic_load_explicit(&e->ready_hint, memory_order_relaxed) == 0))
		return true;
	size_t got[64];
	unsigned n = 0;
	if (room > 64)
		room = 64;
	pthread_mutex_lock(&e->mu);
	while (e->rcount == 0 && w->n_active == 0 && !e->arrivals_done)
		pthread_cond_wait(&e->work_cv, &e->mu);
	if (e->rcount == 0 && w->n_active == 0 && e->arrivals_done) {
		pthread_mutex_unlock(&e->mu);
		return false;
	}
	while (n < room && e->rcount > 0) {
		got[n++] = e->ready[e->rhead];
		e->rhead = (e->rhead + 1) % e->rcap;
		e->rcount--;
	}
	atomic_store_explicit(&e->ready_hint, e->rcount, memory_order_relaxed);
	pthread_mutex_unlock(&e->mu);
	for (unsigned i = 0; i < n; i++) {
		rp_slot *s = &w->slots[w->n_active];
		const trace_request *r = &e->c->req[got[i]];
		s->idx = got[i];
		s->prompt = r->prompt;
		s->output = r->output;
		s->decoded = 0;
		s->tokens = 0;
		s->blocks = 0;
		s->matched = e->c->prefix ? e->matched[got[i]] : 0;
		s->need = rp_blocks_needed(r, e->c->block_size) - s->matched;
		s->left[0] = s->left[1] = s->need;
		if (prefill(w, s) != 0) {
			finish(w, s, false);
			continue;
		}
		if (s->output == 0) {
			finish(w, s, true);
			continue;
		}
		w->n_active++;
	}
	return true;
}

static void *worker_main(void *arg)
{
	rp_worker *w = arg;
	rp_engine *e = w->e;
	uint64_t tick = su_now_ns();
	while (refill(w)) {
		for (unsigned i = 0; i < w->n_active;) {
			rp_slot *s = &w->slots[i];
			int rc = decode(w, s);
			if (rc != 0 || s->decoded == s->output) {
				finish(w, s, rc == 0);
				/* Swap the last active slot in; keep this slot's buffers. */
				rp_slot tmp = *s;
				*s = w->slots[--w->n_active];
				w->slots[w->n_active] = tmp;
				continue;
			}
			i++;
		}
		if (e->step_ns > 0 && w->n_active > 0) {
			tick += e->step_ns;
			uint64_t now = su_now_ns();
			if (tick < now)
				tick = now; /* behind: no catch-up burst */
			su_sleep_until_ns(tick);
		} else {
			tick = su_now_ns();
		}
	}
	return NULL;
}

/* --- monitor: peaks, fragmentation, live figures, progress line -------------------- */

typedef struct monitor {
	rp_engine *e;
	rp_result *res;
	pthread_t tid;
	double frag_sum;
	uint64_t frag_n;
} monitor;

static size_t due_count(const rp_engine *e, uint64_t now)
{
	const rp_config *c = e->c;
	if (c->speed <= 0)
		return c->n;
	double trace_ns = (double)(now - e->t0) * c->speed;
	size_t lo = 0, hi = c->n; /* first index whose arrival is later than trace_ns */
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if ((double)c->req[mid].arrival_ns <= trace_ns)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static void sample(monitor *m, uint64_t iter, prog *pg)
{
	rp_engine *e = m->e;
	const rp_config *c = e->c;
	uint64_t blocks = 0, tokens = 0, bytes = 0, done = 0, calls = 0;
	for (unsigned i = 0; i < c->threads; i++) {
		blocks += ld(&e->w[i].blocks_held);
		tokens += ld(&e->w[i].tokens_held);
		bytes += ld(&e->w[i].bytes_held);
		done += ld(&e->w[i].done);
		calls += ld(&e->w[i].alloc_calls);
	}
	/* Counters of several workers are read at slightly different instants. */
	if ((int64_t)blocks > 0 && blocks > m->res->peak_blocks && blocks < (1ull << 62)) {
		m->res->peak_blocks = blocks;
		m->res->peak_tokens = tokens;
	}
	if (bytes > m->res->peak_bytes && bytes < (1ull << 62))
		m->res->peak_bytes = bytes;
	m->res->samples++;
	if (c->kind == RP_POOL && iter % STATS_EVERY == 0) {
		kvp_stats s;
		if (kvp_pool_stats(c->pool, &s) == KVP_OK) {
			double f = kvp_stats_fragmentation(&s);
			m->frag_sum += f;
			m->frag_n++;
			if (f > m->res->frag_max)
				m->res->frag_max = f;
		}
	}
	uint64_t now = su_now_ns();
	uint64_t admitted = ld(&e->admitted_pub), rejected = ld(&e->rejected_pub);
	size_t due = due_count(e, now);
	uint64_t queued = due > admitted + rejected ? due - admitted - rejected : 0;
	if (e->live != NULL) {
		rp_live *l = e->live;
		st(&l->done, done);
		st(&l->rejected, rejected);
		st(&l->in_flight, ld(&e->in_system_pub));
		st(&l->queued, queued);
		st(&l->tokens, tokens);
		st(&l->blocks_held, blocks);
		st(&l->bytes_held, bytes);
		st(&l->waits, ld(&e->waits_pub));
		st(&l->alloc_calls, calls);
		st(&l->elapsed_ns, now - e->t0);
	}
	if (prog_due(pg)) {
		char line[200];
		double secs = (double)(now - e->t0) / 1e9;
		snprintf(line, sizeof line,
		         "%s: %" PRIu64 "/%zu requests  %.1f s  in flight %" PRIu64
		         "  queued %" PRIu64 "  blocks in use %" PRIu64 "  %.0f req/s",
		         c->label ? c->label : "replay", done + rejected, c->n, secs,
		         ld(&e->in_system_pub), queued, blocks,
		         secs > 0 ? (double)done / secs : 0.0);
		prog_update(pg, line);
	}
}

static void *monitor_main(void *arg)
{
	monitor *m = arg;
	prog pg;
	prog_init(&pg, m->e->c->progress);
	uint64_t next = su_now_ns(), iter = 0;
	while (!atomic_load_explicit(&m->e->stop, memory_order_acquire)) {
		sample(m, iter++, &pg);
		next += MONITOR_NS;
		su_sleep_until_ns(next);
	}
	prog_done(&pg);
	return NULL;
}

/* --- scheduler --------------------------------------------------------------------- */

static void reject(rp_engine *e, size_t i, uint64_t need, uint64_t *n_rejected)
{
	const trace_request *r = &e->c->req[i];
	FILE *log = e->c->log ? e->c->log : stderr;
	if (*n_rejected < MAX_REJECT_LOG)
		fprintf(
		    log,
		    "replay: request %zu (arrival %.3f s) rejected: it needs %" PRIu64
		    " blocks per stream (prompt %u + output %u tokens, %u-token blocks) but the "
		    "pool has only %" PRIu64 " per stream; use more --blocks\n",
		    i, (double)r->arrival_ns / 1e9, need, r->prompt, r->output, e->c->block_size,
		    e->c->capacity);
	else if (*n_rejected == MAX_REJECT_LOG)
		fprintf(log, "replay: further rejections are counted, not shown\n");
	(*n_rejected)++;
	atomic_store_explicit(&e->rejected_pub, *n_rejected, memory_order_relaxed);
}

/* @ns / @speed as wall nanoseconds, saturating at 2^62 (146 years): no
 * float-to-integer overflow and no overflow when added to a clock reading. */
static uint64_t wall_ns(double ns, double speed)
{
	double w = ns / speed;

	return w >= 0x1p62 || w != w ? (uint64_t)1 << 62 : w <= 0 ? 0 : (uint64_t)w;
}

/*
 * Remote tier: after the local match of request @i stopped at *@got in
 * stream @si, fetch the rest of its keyed blocks from Redis, at most as
 * many as are free beyond what admitted requests have still to allocate
 * (a fetch allocates its blocks now).  A tier that is down costs one
 * failed call (counted), and the request goes on with the local match.
 */
static void remote_fill(rp_engine *e, size_t i, int si, size_t *got, rp_result *res)
{
	const rp_config *c = e->c;
	uint32_t nk = c->n_keys[i];
	if (*got >= nk)
		return;
	/* acquire, and before kvp_n_free: see rp_engine.pending */
	uint64_t p = atomic_load_explicit(&e->pending[si], memory_order_acquire);
	uint64_t f = kvp_n_free(c->pool, (kvp_stream)si);
	uint64_t room = f > p ? f - p : 0, want = nk - *got;
	if (want > room)
		want = room;
	if (want == 0)
		return;
	/* The scheduler holds mu; workers must not wait for the network with it.
	 * Meanwhile they only finish requests and allocate what admission
	 * reserved (free and pending drop together), so room stays a bound. */
	pthread_mutex_unlock(&e->mu);
	while (want > 0) { /* a call takes at most the tier's max_fetch keys */
		size_t n = 0;
		uint64_t t0 = su_now_ns();
		int rc = kvp_remote_fetch(c->remote[si], (kvp_stream)si, KVP_FP16,
		                          c->keys + c->key_off[i] + *got, want, i,
		                          e->mrefs[si] + *got, nk - *got, &n);
		t0 = su_now_ns() - t0;
		if (t0 > res->remote_fetch_max_ns)
			res->remote_fetch_max_ns = t0;
		if (rc == KVP_EREMOTE)
			res->remote_fetch_failed++; /* the tier is down or slow: serve on */
		else if (rc != KVP_OK && res->errors++ == 0)
			snprintf(res->first_error, sizeof res->first_error,
			         "request %zu: kvp_remote_fetch: %s", i, kvp_strerror(rc));
		*got += n;
		want -= n;
		if (rc != KVP_OK || n == 0)
			break; /* failed, or the next key is a miss */
	}
	pthread_mutex_lock(&e->mu);
}

/* check_rows: the rows of request @i's @m matched blocks are their keys' rows. */
static void check_matched_rows(rp_engine *e, size_t i, uint32_t m, rp_result *res)
{
	const rp_config *c = e->c;
	size_t nf = (size_t)c->block_size * c->row_dim;
	for (int si = 0; si < 2; si++) {
		for (uint32_t j = 0; j < m; j++) {
			uint32_t n = 0;
			kvp_hash key = c->keys[c->key_off[i] + j];
			int rc = kvp_storage_read_f32(c->storage[si], e->mrefs[si][j], e->crows[1],
			                              c->block_size, &n);
			rp_key_rows(key, si, c->block_size, c->row_dim, e->crows[0]);
			res->row_checks++;
			if (rc == KVP_OK && n == c->block_size &&
			    memcmp(e->crows[0], e->crows[1], nf * sizeof(float)) == 0)
				continue;
			res->row_check_failed++;
			if (res->errors++ == 0)
				snprintf(res->first_error, sizeof res->first_error,
				         "request %zu: %s block %u of the prompt does not hold its "
				         "key's rows (%s)",
				         i, si ? "V" : "K", j, kvp_strerror(rc));
		}
	}
}

/* Prefix: match at most @limit of request @i's keyed prompt blocks in K
 * and V for owner @i, then (with a remote tier) fetch what the local match
 * missed; keeps the shorter match in both streams and returns its length
 * (the refs in e->mrefs[0] and [1]), *@remote of them fetched. */
static uint32_t admit_match(rp_engine *e, size_t i, uint64_t limit, uint32_t *remote,
                            rp_result *res)
{
	const rp_config *c = e->c;
	uint32_t nk = c->n_keys[i], m;
	size_t got[2] = {0, 0};
	if (nk > limit)
		nk = (uint32_t)limit;
	if (nk == 0)
		return 0;
	for (int si = 0; si < 2; si++) {
		int rc =
		    kvp_prefix_match(c->pool, (kvp_stream)si, KVP_FP16, c->keys + c->key_off[i], nk,
		                     i, e->mrefs[si], nk, &got[si]);
		if (rc != KVP_OK) {
			if (res->errors++ == 0)
				snprintf(res->first_error, sizeof res->first_error,
				         "request %zu: kvp_prefix_match: %s", i, kvp_strerror(rc));
			got[si] = 0;
		}
	}
	e->prefix_returned += got[0] + got[1];
	size_t local = got[0] < got[1] ? got[0] : got[1];
	for (int si = 0; si < 2 && c->remote[si] != NULL; si++)
		remote_fill(e, i, si, &got[si], res);
	m = (uint32_t)(got[0] < got[1] ? got[0] : got[1]);
	for (int si = 0; si < 2; si++)
		if (got[si] > m)
			kvp_free_owned(c->pool, i, e->mrefs[si] + m, got[si] - m);
	*remote = m > local ? (uint32_t)(m - local) : 0;
	return m;
}

/* Prefix: the slack, the fewest per stream of free blocks (cached ones
 * count: allocation evicts them) beyond what admitted requests have still
 * to allocate; 0 when none. */
static uint64_t prefix_slack(rp_engine *e)
{
	uint64_t slack = UINT64_MAX;
	for (int si = 0; si < 2; si++) {
		/* acquire, and before kvp_n_free: see rp_engine.pending */
		uint64_t p = atomic_load_explicit(&e->pending[si], memory_order_acquire);
		uint64_t f = kvp_n_free(e->c->pool, (kvp_stream)si);
		uint64_t s = f > p ? f - p : 0;
		slack = s < slack ? s : slack;
	}
	return slack;
}

/* The scheduler's view of the request at the head of the queue. */
typedef struct head_state {
	bool blocked;      /* waiting for blocks (counted once in res->waits) */
	bool slot_blocked; /* waiting for a batch slot (counted once in res->slot_waits) */
	uint64_t blocked_since;
} head_state;

/*
 * Whether the head request @next, @need blocks per stream, fits now; *@newb
 * is what it still has to allocate (less the blocks its prefix matched).
 *
 * Prefix cache: the promise to admitted requests is that the slack never
 * goes below 0, so the blocks they have still to allocate stay free.  A
 * match may revive cached blocks, which then stop being free, so the head
 * matches at most slack keys per stream: the slack after the match is at
 * least 0.  A head that then does not fit drops its holds at once (the
 * revived blocks are cached again) and waits holding nothing: it matches
 * again when it is looked at next.  So a waiting head never holds a block
 * an admitted request was promised.
 */
static bool head_fits(rp_engine *e, size_t next, uint64_t need, rp_result *res, uint64_t *newb)
{
	const rp_config *c = e->c;
	if (!c->prefix) {
		*newb = need;
		return e->reserved + need <= c->capacity;
	}
	/* Remote tier: match once the whole request would fit, so the blocks a
	 * fetch takes are not cut short by what admitted requests still need. */
	if (c->remote[0] != NULL && e->in_system > 0 && prefix_slack(e) < need)
		return false;
	uint32_t remote = 0;
	uint32_t m = admit_match(e, next, prefix_slack(e), &remote, res);
	e->matched[next] = m;
	*newb = need - m;
	bool fits = prefix_slack(e) >= *newb;
	if (!fits && e->in_system == 0) {
		/* cannot happen if the pool counts right: say so, never hang */
		if (res->errors++ == 0)
			snprintf(res->first_error, sizeof res->first_error,
			         "request %zu: %" PRIu64
			         " blocks do not fit with nothing in flight",
			         next, *newb);
		fits = true;
	}
	if (!fits && m > 0) {
		for (int si = 0; si < 2; si++)
			kvp_free_owned(c->pool, next, e->mrefs[si], m);
		e->matched[next] = 0;
	}
	if (fits) { /* counted once, for the match the request is admitted with */
		res->remote_hits += remote;
		if (c->check_rows)
			check_matched_rows(e, next, m, res);
	}
	return fits;
}

/* The head waits for blocks from @now: one exhaustion wait, however long. */
static void wait_begin(rp_engine *e, head_state *h, uint64_t now, rp_result *res)
{
	if (h->blocked)
		return;
	h->blocked = true;
	h->blocked_since = now;
	res->waits++;
	atomic_store_explicit(&e->waits_pub, res->waits, memory_order_relaxed);
}

/* The head is admitted at @now: add the time it waited, if it did. */
static void wait_end(head_state *h, uint64_t now, rp_result *res)
{
	if (h->blocked) {
		uint64_t waited = now - h->blocked_since;
		res->wait_ns_total += waited;
		if (waited > res->wait_ns_max)
			res->wait_ns_max = waited;
		h->blocked = false;
	}
	h->slot_blocked = false;
}

/* Admit request @next: reserve its @newb blocks, hand it to the workers. */
static void admit(rp_engine *e, size_t next, uint64_t newb)
{
	const rp_config *c = e->c;
	e->reserved += newb;
	for (int si = 0; si < 2 && c->prefix; si++) /* its workers lower it */
		atomic_fetch_add_explicit(&e->pending[si], newb, memory_order_relaxed);
	if (e->reserved > e->peak_reserved)
		e->peak_reserved = e->reserved;
	e->in_system++;
	e->admitted++;
	e->ready[(e->rhead + e->rcount) % e->rcap] = next;
	e->rcount++;
	atomic_store_explicit(&e->ready_hint, e->rcount, memory_order_relaxed);
	atomic_store_explicit(&e->admitted_pub, e->admitted, memory_order_relaxed);
	atomic_store_explicit(&e->in_system_pub, e->in_system, memory_order_relaxed);
	pthread_cond_broadcast(&e->work_cv); /* any idle worker may take it */
}

/*
 * Admit the requests in trace order, each when it is due (--speed), a batch
 * slot is free and its blocks fit; reject those larger than the pool.  Then
 * wait for the workers to finish every admitted one.
 */
static void schedule(rp_engine *e, rp_result *res)
{
	const rp_config *c = e->c;
	size_t slots = (size_t)c->threads * c->batch;
	head_state h = {0};
	pthread_mutex_lock(&e->mu);
	for (size_t next = 0; next < c->n;) {
		const trace_request *r = &c->req[next];
		uint64_t due = e->t0;
		if (c->speed > 0)
			due += wall_ns((double)r->arrival_ns, c->speed);
		uint64_t now = su_now_ns();
		if (now < due) {
			pthread_mutex_unlock(&e->mu);
			su_sleep_until_ns(due);
			pthread_mutex_lock(&e->mu);
			continue;
		}
		uint64_t need = rp_blocks_needed(r, c->block_size), newb;
		if (need > c->capacity) {
			reject(e, next, need, &res->rejected);
			next++;
			continue;
		}
		if (e->in_system >= slots) {
			if (!h.slot_blocked)
				res->slot_waits++;
			h.slot_blocked = true;
			pthread_cond_wait(&e->sched_cv, &e->mu);
			continue;
		}
		if (!head_fits(e, next, need, res, &newb)) {
			wait_begin(e, &h, now, res);
			pthread_cond_wait(&e->sched_cv, &e->mu);
			continue;
		}
		wait_end(&h, now, res);
		hist_record(&res->queue_delay, now - due);
		admit(e, next, newb);
		next++;
	}
	e->arrivals_done = true;
	pthread_cond_broadcast(&e->work_cv);
	while (e->finished < e->admitted)
		pthread_cond_wait(&e->sched_cv, &e->mu);
	pthread_mutex_unlock(&e->mu);
}

/* --- the run ------------------------------------------------------------------------- */

static void collect(rp_engine *e, rp_result *res)
{
	for (unsigned i = 0; i < e->c->threads; i++) {
		rp_worker *w = &e->w[i];
		res->requests_done += ld(&w->done);
		res->alloc_calls += ld(&w->alloc_calls);
		res->free_calls += w->free_calls;
		res->set_used_calls += w->set_used_calls;
		res->row_writes += w->row_writes;
		res->blocks_allocated += w->blocks_allocated;
		res->expected_blocks += w->expected_blocks;
		res->prompt_tokens += w->prompt_tokens;
		res->output_tokens += w->output_tokens;
		res->unexpected_exhausted += w->unexpected_exhausted;
		res->prefix_blocks += w->prefix_blocks;
		res->prefix_matched += w->prefix_matched;
		res->prefix_published += w->prefix_published;
		res->prefix_dup += w->prefix_dup;
		if (w->errors > 0 && res->errors == 0)
			memcpy(res->first_error, w->first_error, sizeof res->first_error);
		res->errors += w->errors;
		hist_merge(&res->alloc_lat, &w->lat);
	}
	res->peak_reserved = e->peak_reserved;
	res->prefix_returned = e->prefix_returned;
}

static void engine_free(rp_engine *e)
{
	if (e->w != NULL) {
		for (unsigned i = 0; i < e->c->threads; i++) {
			rp_worker *w = &e->w[i];
			if (w->slots != NULL) {
				for (unsigned k = 0; k < e->c->batch; k++)
					free(w->slots[k].ptrs);
			}
			free(w->slots);
			free(w->refs);
			free(w->krows);
		}
	}
	free(e->w);
	free(e->matched);
	free(e->mrefs[0]);
	free(e->mrefs[1]);
	free(e->crows[0]);
	free(e->crows[1]);
	free(e->ready);
	free(e->rows);
	pthread_mutex_destroy(&e->mu);
	pthread_cond_destroy(&e->sched_cv);
	pthread_cond_destroy(&e->work_cv);
}

static bool config_ok(const rp_config *c)
{
	return !(c->threads == 0 || c->batch == 0 || c->block_size == 0 || c->row_dim == 0 ||
	         c->latency_every == 0 || (c->kind == RP_POOL && c->pool == NULL) ||
	         !(c->speed >= 0 && c->speed <= 1e6) ||
	         !(c->step_ms >= 0 && c->step_ms <= 3600e3) ||
	         (c->prefix && (c->kind != RP_POOL || !c->keys || !c->key_off || !c->n_keys)) ||
	         ((c->remote[0] || c->remote[1] || c->check_rows) &&
	          (!c->prefix || !c->storage[0] || !c->storage[1] || !c->write_rows)));
}

/* The blocks of the longest prompt that can run (at least 1): the size of a
 * worker's refs.  A request larger than the pool is rejected, never run, so
 * it does not size them. */
static uint32_t max_prompt_blocks(const rp_config *c)
{
	uint32_t max = 1;
	for (size_t i = 0; i < c->n; i++) {
		if (rp_rejected(&c->req[i], c->block_size, c->capacity))
			continue;
		uint32_t b =
		    (uint32_t)(((uint64_t)c->req[i].prompt + c->block_size - 1) / c->block_size);
		if (b > max)
			max = b;
	}
	return max;
}

/* The engine's locks and buffers; false when out of memory (engine_free frees). */
static bool engine_init(rp_engine *e, const rp_config *c, rp_live *live)
{
	*e = (rp_engine){.c = c, .live = live};
	pthread_mutex_init(&e->mu, NULL);
	pthread_cond_init(&e->sched_cv, NULL);
	pthread_cond_init(&e->work_cv, NULL);
	e->row_bytes = kvpi_codec_row_bytes(KVP_FP16, c->row_dim);
	e->rcap = (size_t)c->threads * c->batch + 1;
	e->ready = calloc(e->rcap, sizeof *e->ready);
	e->w = calloc(c->threads, sizeof *e->w);
	e->rows = malloc((size_t)c->block_size * c->row_dim * sizeof *e->rows);
	uint32_t max_blocks = max_prompt_blocks(c);
	bool ok = e->ready && e->w && e->rows;
	if (ok && c->prefix && c->kind == RP_POOL) {
		e->matched = calloc(c->n ? c->n : 1, sizeof *e->matched);
		e->mrefs[0] = malloc(max_blocks * sizeof *e->mrefs[0]);
		e->mrefs[1] = malloc(max_blocks * sizeof *e->mrefs[1]);
		ok = e->matched && e->mrefs[0] && e->mrefs[1];
	}
	if (ok && c->check_rows) {
		size_t nf = (size_t)c->block_size * c->row_dim;
		e->crows[0] = malloc(nf * sizeof(float));
		e->crows[1] = malloc(nf * sizeof(float));
		ok = e->crows[0] && e->crows[1];
	}
	for (unsigned i = 0; ok && i < c->threads; i++) {
		rp_worker *w = &e->w[i];
		w->e = e;
		w->slots = calloc(c->batch, sizeof *w->slots);
		w->refs_cap = max_blocks;
		w->refs = malloc(w->refs_cap * sizeof *w->refs);
		ok = w->slots && w->refs;
		if (ok && c->check_rows) {
			w->krows = malloc((size_t)c->block_size * c->row_dim * sizeof(float));
			ok = w->krows != NULL;
		}
	}
	return ok;
}

/* The rows to write, malloc's real row size (naive's bytes), the decode step. */
static void engine_prepare(rp_engine *e)
{
	const rp_config *c = e->c;
	uint64_t rng = 0x5eed;
	for (size_t i = 0; i < (size_t)c->block_size * c->row_dim; i++)
		e->rows[i] = (float)(su_rand_unit(&rng) * 2.0 - 1.0);
	void *probe = malloc(e->row_bytes);
	e->usable = probe ? malloc_usable_size(probe) : e->row_bytes;
	free(probe);
	if (c->speed > 0 && c->step_ms > 0)
		e->step_ns = wall_ns(c->step_ms * 1e6, c->speed);
}

/* The monitor and the workers run while this thread schedules; all joined. */
static void run_threads(rp_engine *e, rp_result *res)
{
	const rp_config *c = e->c;
	e->t0 = su_now_ns();
	monitor m = {.e = e, .res = res};
	unsigned started = 0;
	bool mon = pthread_create(&m.tid, NULL, monitor_main, &m) == 0;
	for (; started < c->threads; started++) {
		if (pthread_create(&e->w[started].tid, NULL, worker_main, &e->w[started]) != 0)
			break;
	}
	if (started == c->threads && mon) {
		schedule(e, res);
	} else {
		snprintf(res->first_error, sizeof res->first_error, "replay: cannot start threads");
		res->errors++;
		pthread_mutex_lock(&e->mu);
		e->arrivals_done = true;
		pthread_cond_broadcast(&e->work_cv);
		pthread_mutex_unlock(&e->mu);
	}
	for (unsigned i = 0; i < started; i++)
		pthread_join(e->w[i].tid, NULL);
	res->wall_ns = su_now_ns() - e->t0;
	atomic_store_explicit(&e->stop, true, memory_order_release);
	if (mon)
		pthread_join(m.tid, NULL);
	monitor last = {.e = e, .res = res};
	prog quiet = {0};
	sample(&last, 1, &quiet); /* final live figures */
	res->frag_mean = m.frag_n ? m.frag_sum / (double)m.frag_n : 0.0;
}

int rp_run(const rp_config *c, rp_result *res, rp_live *live)
{
	memset(res, 0, sizeof *res);
	if (!config_ok(c)) {
		res->errors = 1; /* a failed run: the summary's checks must not pass */
		snprintf(res->first_error, sizeof res->first_error, "bad replay configuration");
		return -1;
	}
	rp_engine e;
	if (!engine_init(&e, c, live)) {
		res->errors = 1;
		snprintf(res->first_error, sizeof res->first_error, "replay: out of memory");
		engine_free(&e);
		return -1;
	}
	engine_prepare(&e);
	hist_init(&res->alloc_lat);
	hist_init(&res->queue_delay);
	if (live != NULL)
		atomic_store_explicit(&live->running, true, memory_order_relaxed);
	run_threads(&e, res);
	collect(&e, res);
	if (live != NULL)
		atomic_store_explicit(&live->running, false, memory_order_relaxed);
	engine_free(&e);
	return res->errors == 0 && res->unexpected_exhausted == 0 ? 0 : -1;
}

/* --- prefix keys -------------------------------------------------------------------- */

long rp_prefix_keys(const trace_request *r, const uint64_t *hash_ids, uint32_t block_size,
                    kvp_hash *keys, size_t cap)
{
	uint64_t bs = block_size, full = r->prompt / bs,
	         covered = (uint64_t)r->n_hash * TRACE_HASH_CHUNK;
	uint8_t buf[8 + 8 * (KVP_MAX_BLOCK_SIZE / TRACE_HASH_CHUNK + 2)];
	long n = 0;
	for (uint64_t j = 0; j < full && (j + 1) * bs <= covered && (size_t)n < cap; j++) {
		uint64_t t0 = j * bs, pos = t0 % TRACE_HASH_CHUNK;
		size_t len = 0;
		for (int b = 0; b < 4; b++) {
			buf[len + (size_t)b] = (uint8_t)(pos >> (8 * b));
			buf[len + 4 + (size_t)b] = (uint8_t)(bs >> (8 * b));
		}
		len = 8;
		for (uint64_t h = t0 / TRACE_HASH_CHUNK; h <= (t0 + bs - 1) / TRACE_HASH_CHUNK;
		     h++) {
			uint64_t id = hash_ids[r->hash_off + h];
			for (int b = 0; b < 8; b++)
				buf[len + (size_t)b] = (uint8_t)(id >> (8 * b));
			len += 8;
		}
		if (kvp_prefix_hash(j ? &keys[j - 1] : NULL, 0, buf, len, &keys[j]) != KVP_OK)
			return -1;
		n++;
	}
	return n;
}
