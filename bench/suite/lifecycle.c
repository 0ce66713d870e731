/*
 * bench/suite/lifecycle.c - benchmark 7: the serving loop, kvpool against a
 * one-mutex pool shaped like vLLM v1's BlockPool (bench/suite/mutex_blockpool.c).
 *
 * Each thread is a serving worker.  It takes the requests of a trace in
 * trace order (thread t of N takes every N-th request, starting at t), and
 * for each one, under a new owner id (kvpool's from kvp_owner_new, as a
 * server using it would make them; the mutex pool's the request's index):
 *   plain:  allocates the prompt in one call (ceil(prompt / 16) blocks of 16
 *           tokens), then one block per call every 16 output tokens
 *           (ceil(output / 16) calls), then kvp_free_all;
 *   prefix: matches the keys of the prompt's full blocks (kvp_prefix_match),
 *           allocates the rest of the prompt in one call, publishes each new
 *           full prompt block under its key, decodes as above, and ends
 *           with kvp_free_all (published blocks become cached).
 * A prompt block's key is made from the trace's hash_id of the 512 tokens
 * it lies in and its position (0..31) among them, so two requests share a
 * block exactly when the trace says their prompts share those tokens.
 *
 * The work of a run is fixed: the first eighth of the requests warm the
 * pool up untimed, each thread taking its share, then the rest (plain: the
 * rest three times over) are timed.  Both sides get the same requests split
 * the same way.  Every run gets fresh pools, sized so that every thread's
 * largest request fits at once beside a fixed cache: no request may fail.
 * The sides alternate (kvpool first on odd runs, the mutex pool first on
 * even ones) and the best of --runs is kept.  Blocks counted are the prompt
 * blocks (matched or allocated) plus the decode blocks.  CPU ns per block
 * is the threads' CPU time (CLOCK_THREAD_CPUTIME_ID) over the blocks, so it
 * shows cost apart from waiting.  In prefix mode each side also runs once,
 * untimed, with the requests in lockstep (one_run): the matched shares the
 * two sides must agree on are those.
 */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <kvpool/kvpool.h>

#include "bench/suite/harness.h"
#include "bench/suite/mutex_blockpool.h"
#include "bench/suite/phases.h"
#include "bench/suite/suite.h"
#include "stress/trace.h"

#define BENCH         "lifecycle"
#define BLOCK         16u            /* tokens per block */
#define PER_HASH      (512u / BLOCK) /* blocks per trace hash_id */
#define MAX_T         8              /* thread counts in a sweep (kvb_opts.threads) */
#define DEFAULT_TRACE "../shared/traces/conversation_trace.jsonl"

enum { PLAIN, PREFIX, NMODE };
enum { KV, MUTEX, NSIDE };

static const char *const mode_name[NMODE] = {"plain", "prefix"};
static const char *const side_name[NSIDE] = {"kvpool", "mutex_blockpool"};

/* The requests: the trace's (or synthetic ones), with their hash ids. */
typedef struct work {
	trace_request *req;
	size_t n;
	uint64_t *hash_ids;
	uint64_t *session;   /* per request: a hash of its conversation (see serve) */
	uint8_t *thread_of;  /* per request: its thread in the current run (place_sessions) */
	uint32_t max_blocks; /* largest request, prompt + decode blocks */
	uint64_t blocks;     /* blocks of all requests */
	char source[160];
} work;

/* One side's run at one thread count. */
typedef struct run {
	int side, mode, n_threads, passes;
	kvp_pool *kv;
	mbp *mp;
	const work *w;
	size_t n_warm; /* requests [0, n_warm) warm up, [n_warm, n) are timed */
	bool lockstep; /* one request at a time, in the run's order (lockstep_wait) */
	/* lockstep: the place in the run's order of the request that may start */
	_Atomic size_t turn;
	pthread_barrier_t bar;
} run;

typedef struct worker {
	pthread_t th;
	run *r;
	int tid;
	uint64_t blocks, prompt_blocks, matched, failed, eexist;
	double t0, t1, cpu; /* timed part: wall start and end, thread CPU seconds */
	phase_clock pc;     /* --phases: the timed part's steps */
} worker;

/* What a side did at one thread count: the best run, and the sums. */
typedef struct result {
	double best_bps;     /* blocks per second, best run */
	double ns_cpu;       /* CPU ns per block of that run */
	double matched;      /* matched share of prompt blocks, percent, that run */
	double lock_matched; /* the same, requests in lockstep (one_run) */
	double bps[KVB_MAX_REPS];
	uint64_t failed;      /* failed requests, every run */
	uint64_t eexist;      /* publishes refused (another block has the key), every run */
	int leaks;            /* runs after which blocks were missing */
	double ph_ns[NPHASE]; /* --phases: wall ns per block in each step, best run */
} result;

static result res[NMODE][MAX_T][NSIDE];

static double thread_cpu(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/*
 * The keys of a request's @nfull full prompt blocks: block b lies in hash
 * id b / 32 at position b % 32.  A block past the trace's hash ids (every
 * block of a trace without them) gets a key of its own request and chunk.
 */
__attribute__((noinline)) static void make_keys(const work *w, const trace_request *q,
                                                uint64_t owner, uint32_t nfull, kvp_hash *keys)
{
	for (uint32_t b = 0; b < nfull; b++) {
		uint32_t c = b / PER_HASH;
		uint64_t h = c < q->n_hash ? w->hash_ids[q->hash_off + c]
		                           : ~mix64(owner * 0x9e3779b97f4a7c15ull + c);
		keys[b].hi = h;
		keys[b].lo = mix64(h * PER_HASH + b % PER_HASH + 1);
	}
}

/* Per-thread buffers, sized for the largest request. */
typedef struct bufs {
	kvp_ref *refs;
	uint32_t *ids;
	kvp_hash *keys;
	int *status; /* kvp_prefix_publish_many's per-block results */
} bufs;

__attribute__((noinline)) static void one_kv(run *r, worker *me, bufs *B, const trace_request *q,
                                             uint64_t owner)
{
	uint32_t nb = (q->prompt + BLOCK - 1) / BLOCK, nfull = q->prompt / BLOCK;
	uint32_t nd = (q->output + BLOCK - 1) / BLOCK;
	size_t m = 0, n, cap = r->w->max_blocks;
	kvp_ref one;
	int rc;

	if (r->mode == PREFIX) {
		make_keys(r->w, q, owner, nfull, B->keys);
		phase_start(&me->pc);
		rc = kvp_prefix_match(r->kv, KVP_KV, KVP_FP16, B->keys, nfull, owner, B->refs, cap,
		                      &m);
		phase_end(&me->pc, PH_MATCH);
		if (rc != KVP_OK)
			goto failed;
	} else {
		phase_start(&me->pc);
	}
	if (nb > m) {
		rc = kvp_allocate(r->kv, KVP_KV, q->prompt - (uint32_t)m * BLOCK, owner, KVP_FP16,
		                  B->refs + m, cap - m, &n);
		if (rc != KVP_OK)
			goto failed;
	}
	phase_end(&me->pc, PH_ALLOC);
	if (r->mode == PREFIX && nfull > m) {
		/* The request's new full blocks in one call, as the mutex pool's
		 * mbp_publish takes them. */
		size_t np;
		rc = kvp_prefix_publish_many(r->kv, B->refs + m, B->keys + m, nfull - m, B->status,
		                             &np);
		phase_end(&me->pc, PH_PUBLISH);
		if (rc != KVP_OK)
			goto failed;
		for (size_t i = 0; i < nfull - m; i++) {
			if (B->status[i] == KVP_EEXIST)
				me->eexist++;
			else if (B->status[i] != KVP_OK)
				goto failed;
		}
	}
	for (uint32_t d = 0; d < nd; d++) {
		rc = kvp_allocate(r->kv, KVP_KV, BLOCK, owner, KVP_FP16, &one, 1, &n);
		if (rc != KVP_OK)
			goto failed;
	}
	phase_end(&me->pc, PH_DECODE);
	if (kvp_free_all(r->kv, owner) != KVP_OK)
		goto failed;
	phase_end(&me->pc, PH_FREE);
	me->blocks += nb + nd;
	me->prompt_blocks += nb;
	me->matched += m;
	return;
failed:
	me->failed++;
	kvp_free_all(r->kv, owner); /* whatever the request got so far */
}

__attribute__((noinline)) static void one_mutex(run *r, worker *me, bufs *B, const trace_request *q,
                                                uint64_t owner)
{
	uint32_t nb = (q->prompt + BLOCK - 1) / BLOCK, nfull = q->prompt / BLOCK;
	uint32_t nd = (q->output + BLOCK - 1) / BLOCK;
	uint32_t m = 0, one;

	if (r->mode == PREFIX) {
		make_keys(r->w, q, owner, nfull, B->keys);
		phase_start(&me->pc);
		if (mbp_match(r->mp, owner, B->keys, nfull, B->ids, &m) != 0)
			goto failed;
		phase_end(&me->pc, PH_MATCH);
	} else {
		phase_start(&me->pc);
	}
	if (nb > m && mbp_allocate(r->mp, owner, nb - m, B->ids + m) != 0)
		goto failed;
	phase_end(&me->pc, PH_ALLOC);
	if (r->mode == PREFIX && nfull > m) {
		me->eexist += (nfull - m) - mbp_publish(r->mp, B->ids + m, B->keys + m, nfull - m);
		phase_end(&me->pc, PH_PUBLISH);
	}
	for (uint32_t d = 0; d < nd; d++)
		if (mbp_allocate(r->mp, owner, 1, &one) != 0)
			goto failed;
	phase_end(&me->pc, PH_DECODE);
	if (mbp_free_all(r->mp, owner) != 0)
		goto failed;
	phase_end(&me->pc, PH_FREE);
	me->blocks += nb + nd;
	me->prompt_blocks += nb;
	me->matched += m;
	return;
failed:
	me->failed++;
	mbp_free_all(r->mp, owner);
}

/*
 * Lockstep (one_run): wait until the request at place @at of the
 * run's order may start, that is until the one before it has ended.  The
 * waiting threads yield, as there may be more of them than cores.
 */
static void lockstep_wait(run *r, size_t at)
{
	/* acquire: pairs with the release store that ended the request before. */
	while (atomic_load_explicit(&r->turn, memory_order_acquire) != at)
		sched_yield();
}

/*
 * The thread's share of requests [from, to), in trace order, @pass tagging
 * the mutex pool's owner ids (kvpool's come from kvp_owner_new).  With
 * --split session (the default) every request of a conversation goes to
 * the same thread, as a prefix-aware router sends it (the conversations
 * placed so the threads get equal work: place_sessions), so a turn always
 * finds its earlier turn published and the matched share does not depend
 * on how fast the threads run, as long as the cache still holds it.  With
 * --split rr thread t takes every N-th request from t, and a turn racing
 * its predecessor on another thread may miss: the shares of the two sides
 * then differ by luck.
 */
static void serve(run *r, worker *me, bufs *B, size_t from, size_t to, int pass)
{
	size_t N = (size_t)r->n_threads;
	bool rr = kvb_opt.split && !strcmp(kvb_opt.split, "rr");
	/* The place of request @from of this pass in the run's order. */
	size_t base = pass == 0 ? 0 : r->n_warm + (size_t)(pass - 1) * (r->w->n - r->n_warm);

	for (size_t i = from + (rr ? (size_t)me->tid : 0); i < to; i += rr ? N : 1) {
		if (!rr && r->w->thread_of[i] != (uint8_t)me->tid)
			continue;
		uint64_t owner = (uint64_t)pass * r->w->n + i;
		if (r->lockstep)
			lockstep_wait(r, base + (i - from));
		if (r->side == MUTEX) {
			one_mutex(r, me, B, &r->w->req[i], owner);
		} else if (kvp_owner_new(r->kv, &owner) == KVP_OK) {
			/* A server's owner per request: an id homed at this thread. */
			one_kv(r, me, B, &r->w->req[i], owner);
		} else {
			me->failed++;
		}
		if (r->lockstep)
			/* release: the next request's thread sees this one's
			 * calls done (the pools order them too; this keeps the
			 * order the run's, not the scheduler's). */
			atomic_store_explicit(&r->turn, base + (i - from) + 1,
			                      memory_order_release);
	}
}

static void *worker_main(void *arg)
{
	worker *me = arg;
	run *r = me->r;
	bufs B;
	double c0;

	B.refs = malloc(r->w->max_blocks * sizeof(kvp_ref));
	B.ids = malloc(r->w->max_blocks * sizeof(uint32_t));
	B.keys = malloc(r->w->max_blocks * sizeof(kvp_hash));
	B.status = malloc(r->w->max_blocks * sizeof(int));
	if (!B.refs || !B.ids || !B.keys || !B.status) {
		fprintf(stderr, "bench: out of memory\n");
		exit(2);
	}
	me->pc.on = kvb_opt.phases;
	serve(r, me, &B, 0, r->n_warm, 0);
	me->blocks = me->prompt_blocks = me->matched = 0;
	memset(me->pc.ns, 0, sizeof(me->pc.ns));
	pthread_barrier_wait(&r->bar);
	me->t0 = kvb_now();
	c0 = thread_cpu();
	for (int p = 1; p <= r->passes; p++)
		serve(r, me, &B, r->n_warm, r->w->n, p);
	me->cpu = thread_cpu() - c0;
	me->t1 = kvb_now();
	free(B.refs);
	free(B.ids);
	free(B.keys);
	free(B.status);
	return NULL;
}

/* Pool room beyond the live requests: the prefix cache's (smoke: small, for the sanitizers). */
#define CACHE_BLOCKS (kvb_opt.smoke ? 1u << 12 : 1u << 18)

/*
 * Blocks of every run's pool: room for the largest request on each thread
 * of the sweep's largest count at once, plus the cache.  The same at every
 * thread count, so the cache (and the matched share) is the same too.
 */
static uint64_t pool_blocks(const work *w)
{
	int most = 1;

	for (int i = 0; i < kvb_opt.n_threads; i++)
		most = kvb_opt.threads[i] > most ? kvb_opt.threads[i] : most;
	return (uint64_t)most * w->max_blocks + CACHE_BLOCKS;
}

/* The most blocks a run's pool may have: beyond it the trace is refused
 * (a request of a billion tokens is a broken row, not a workload). */
#define MAX_POOL_BLOCKS (1u << 28)

/* A conversation's requests and their blocks (place_sessions). */
typedef struct session_load {
	uint64_t session, blocks;
} session_load;

static int by_session(const void *a, const void *b)
{
	uint64_t x = ((const session_load *)a)->session, y = ((const session_load *)b)->session;
	return x < y ? -1 : x > y;
}

static int by_load_desc(const void *a, const void *b)
{
	const session_load *x = a, *y = b;
	if (x->blocks != y->blocks)
		return x->blocks > y->blocks ? -1 : 1;
	return x->session < y->session ? -1 : x->session > y->session;
}

static uint32_t request_blocks(const trace_request *q)
{
	return (q->prompt + BLOCK - 1) / BLOCK + (q->output + BLOCK - 1) / BLOCK;
}

/*
 * Each conversation's thread for a run on @n threads, in w->thread_of: the
 * conversations, largest (in blocks) first, each on the thread with the
 * fewest blocks so far (a prefix-aware router that balances load).  Taking
 * the conversation's hash modulo @n instead left one of two threads 9% more
 * than its share of this trace, so the run's wall time, set by its slowest
 * thread, capped two-thread scaling at 1.83x before any cost of the pools.
 * Deterministic, and the same for both sides.
 */
static void place_sessions(const work *w, int n)
{
	session_load *g = malloc((w->n ? w->n : 1) * sizeof(*g));
	uint64_t load[KVB_MAX_THREADS] = {0};
	size_t ng = 0;

	if (!g) {
		fprintf(stderr, "bench: out of memory\n");
		exit(2);
	}
	for (size_t i = 0; i < w->n; i++)
		g[i] = (session_load){w->session[i], request_blocks(&w->req[i])};
	qsort(g, w->n, sizeof(*g), by_session);
	for (size_t i = 0; i < w->n; i++) { /* one entry per conversation */
		if (ng && g[ng - 1].session == g[i].session)
			g[ng - 1].blocks += g[i].blocks;
		else
			g[ng++] = g[i];
	}
	qsort(g, ng, sizeof(*g), by_load_desc);
	for (size_t k = 0; k < ng; k++) {
		int t = 0;
		for (int u = 1; u < n; u++)
			t = load[u] < load[t] ? u : t;
		load[t] += g[k].blocks;
		g[k].blocks = (uint64_t)t; /* now the conversation's thread */
	}
	qsort(g, ng, sizeof(*g), by_session);
	for (size_t i = 0; i < w->n; i++) {
		session_load key = {w->session[i], 0};
		const session_load *hit = bsearch(&key, g, ng, sizeof(*g), by_session);
		w->thread_of[i] = (uint8_t)hit->blocks;
	}
	free(g);
}

/*
 * One run of one side with a fresh pool; adds its figures to @out.  0, or 1
 * on a failure.
 *
 * With @lockstep the run is untimed and only its matched share counts
 * (out->lock_matched): the threads take their requests as in a timed run,
 * but one request at a time, in the order of the trace (lockstep_wait).
 * Why: once the cache is full, whether a turn finds its earlier turn's
 * blocks depends on how many blocks other threads cached in between, so
 * in a timed run the matched share depends on how the scheduler ran the
 * threads.  With more threads than cores the two sides are run very
 * differently: the mutex pool's threads convoy (the thread that holds the
 * mutex runs many requests of its own conversations in a row while the
 * others sleep), kvpool's take turns by time slice.  In lockstep both
 * pools see the same calls in the same order, from the same threads, so
 * their shares may differ only by what their caches do: the share check
 * compares those.  (Measured in docs/BENCHMARKS.md.)  At one thread the
 * timed runs take the requests in trace order already, and their share
 * stands for the lockstep one.
 */
static int one_run(const work *w, int mode, int side, int n_threads, int passes, result *out,
                   int rep, bool lockstep)
{
	run r = {.side = side,
	         .mode = mode,
	         .n_threads = n_threads,
	         .passes = passes,
	         .w = w,
	         .lockstep = lockstep};
	atomic_init(&r.turn, 0);
	worker ws[KVB_MAX_THREADS];
	uint32_t nblk = (uint32_t)pool_blocks(w); /* at most MAX_POOL_BLOCKS */
	uint64_t blocks = 0, prompt = 0, matched = 0, ph[NPHASE] = {0};
	double t0 = 1e300, t1 = 0, cpu = 0;

	r.n_warm = w->n / 8;
	place_sessions(w, n_threads);
	if (side == KV) {
		kvp_pool_config cfg;
		kvp_pool_config_init(&cfg);
		cfg.block_size = BLOCK;
		cfg.n_blocks = nblk;
		cfg.separate_kv = false;
		cfg.prefix_cache = mode == PREFIX;
		if (kvb_opt.thread_cache >= 0)
			cfg.thread_cache = (uint32_t)kvb_opt.thread_cache;
		if (kvp_pool_create(&cfg, &r.kv) != KVP_OK) {
			printf("  cannot create a kvpool pool of %u blocks (thread_cache %ld)\n",
			       nblk, kvb_opt.thread_cache);
			return 1;
		}
	} else if (mbp_create(nblk, &r.mp) != 0) {
		printf("  cannot create a mutex pool of %u blocks\n", nblk);
		return 1;
	}
	pthread_barrier_init(&r.bar, NULL, (unsigned)n_threads);
	for (int t = 0; t < n_threads; t++) {
		ws[t] = (worker){.r = &r, .tid = t};
		if (pthread_create(&ws[t].th, NULL, worker_main, &ws[t]) != 0) {
			fprintf(stderr, "bench: pthread_create failed\n");
			exit(2);
		}
	}
	for (int t = 0; t < n_threads; t++) {
		pthread_join(ws[t].th, NULL);
		blocks += ws[t].blocks;
		prompt += ws[t].prompt_blocks;
		matched += ws[t].matched;
		out->failed += ws[t].failed;
		out->eexist += ws[t].eexist;
		cpu += ws[t].cpu;
		for (int k = 0; k < NPHASE; k++)
			ph[k] += ws[t].pc.ns[k];
		t0 = ws[t].t0 < t0 ? ws[t].t0 : t0;
		t1 = ws[t].t1 > t1 ? ws[t].t1 : t1;
	}
	pthread_barrier_destroy(&r.bar);
	/* Every block must be free again (the threads gave their caches back at exit). */
	size_t free_now = side == KV ? kvp_n_free(r.kv, KVP_KV) : mbp_n_free(r.mp);
	if (free_now != nblk || (side == MUTEX && mbp_n_owners(r.mp) != 0)) {
		printf("  LEAK: %s %s %d threads: %zu of %u blocks free\n", side_name[side],
		       mode_name[mode], n_threads, free_now, nblk);
		out->leaks++;
	}
	kvp_pool_destroy(r.kv);
	mbp_destroy(r.mp);
	if (lockstep) {
		out->lock_matched = prompt ? 100.0 * (double)matched / (double)prompt : 0;
		return out->leaks || out->failed;
	}
	double bps = t1 > t0 ? (double)blocks / (t1 - t0) : 0;
	out->bps[rep] = bps;
	if (bps > out->best_bps) {
		out->best_bps = bps;
		out->ns_cpu = blocks ? cpu * 1e9 / (double)blocks : KVB_NA;
		out->matched = prompt ? 100.0 * (double)matched / (double)prompt : 0;
		for (int k = 0; k < NPHASE; k++)
			out->ph_ns[k] = blocks ? (double)ph[k] / (double)blocks : 0;
	}
	return out->leaks || out->failed;
}

/* --- the requests ---------------------------------------------------------- */

/*
 * The largest request and the total, in blocks; each request's session: a
 * conversation's turns share their hash ids up to the earlier turn's end,
 * and the first hash id is the system prompt every request shares, so the
 * second one (else the first) names the conversation.  0, or -1.
 */
static int size_work(work *w)
{
	w->max_blocks = 1;
	w->blocks = 0;
	w->session = malloc((w->n ? w->n : 1) * sizeof(uint64_t));
	w->thread_of = malloc(w->n ? w->n : 1);
	if (!w->session || !w->thread_of)
		return -1;
	for (size_t i = 0; i < w->n; i++) {
		const trace_request *q = &w->req[i];
		uint64_t k = q->n_hash > 1 ? w->hash_ids[q->hash_off + 1]
		             : q->n_hash   ? w->hash_ids[q->hash_off]
		                           : ~(uint64_t)i;
		w->session[i] = mix64(k + 0x9e3779b97f4a7c15ull);
		uint32_t b = request_blocks(&w->req[i]);
		if (b > w->max_blocks)
			w->max_blocks = b;
		w->blocks += b;
	}
	return 0;
}

/*
 * Synthetic conversations, when no trace is at hand (the smoke test): half
 * the requests continue an earlier one (its hash ids, then new ones), the
 * rest start fresh; prompts up to @max_tokens.
 */
static int synth_work(work *w, size_t n, uint32_t max_tokens)
{
	uint64_t s = 20261202, next_id = 0;
	size_t off = 0, cap = n * (max_tokens / 512 + 2);

	w->req = calloc(n, sizeof(trace_request));
	w->hash_ids = malloc(cap * sizeof(uint64_t));
	if (!w->req || !w->hash_ids)
		return -1;
	for (size_t i = 0; i < n; i++) {
		trace_request *q = &w->req[i];
		uint32_t prompt = 1 + (uint32_t)(kvb_rand(&s) % max_tokens);
		uint32_t nh = (prompt + 511) / 512, keep = 0;
		if (i > 0 && kvb_rand(&s) % 2) {
			const trace_request *e = &w->req[i - 1 - kvb_rand(&s) % (i < 16 ? i : 16)];
			keep = e->n_hash < nh ? e->n_hash : nh - 1;
			memcpy(w->hash_ids + off, w->hash_ids + e->hash_off,
			       keep * sizeof(uint64_t));
		}
		for (uint32_t k = keep; k < nh; k++)
			w->hash_ids[off + k] = next_id++;
		*q = (trace_request){.prompt = prompt,
		                     .output = (uint32_t)(kvb_rand(&s) % 600),
		                     .n_hash = nh,
		                     .hash_off = (uint32_t)off};
		off += nh;
	}
	w->n = n;
	snprintf(w->source, sizeof(w->source), "synthetic conversations (no trace file)");
	return 0;
}

/* The trace named by --trace, else the default path beside the workspace. */
static const char *trace_path(char *buf, size_t cap)
{
	const char *ws = getenv("BUILD_WORKSPACE_DIRECTORY");
	const char *wd = getenv("BUILD_WORKING_DIRECTORY");

	/* A relative --trace names a file from where `bazel run` was called. */
	if (kvb_opt.trace && kvb_opt.trace[0] != '/' && wd && *wd) {
		snprintf(buf, cap, "%s/%s", wd, kvb_opt.trace);
		return buf;
	}
	if (kvb_opt.trace)
		return kvb_opt.trace;
	if (kvb_opt.smoke)
		return NULL;
	if (ws) {
		snprintf(buf, cap, "%s/%s", ws, DEFAULT_TRACE);
		if (access(buf, R_OK) == 0)
			return buf;
	}
	return access(DEFAULT_TRACE, R_OK) == 0 ? DEFAULT_TRACE : NULL;
}

static int load_work(work *w, trace *t)
{
	char buf[1024], err[512];
	const char *path = trace_path(buf, sizeof(buf));
	size_t limit = kvb_opt.limit > 0 ? (size_t)kvb_opt.limit : kvb_opt.quick ? 1500 : 0;

	memset(w, 0, sizeof(*w));
	memset(t, 0, sizeof(*t));
	if (!path) {
		if (synth_work(w,
		               limit           ? limit
		               : kvb_opt.smoke ? 96
		                               : 4000,
		               kvb_opt.smoke ? 2048 : 16384) != 0)
			return -1;
	} else {
		/* Any format the replay reads; only Mooncake rows have hash
		 * ids, without them no two requests share a block. */
		trace_opts o = {.format = TRACE_AUTO, .max_rows = limit};
		if (trace_load(path, &o, t, err, sizeof(err)) != 0) {
			printf("  %s\n", err);
			return -1;
		}
		w->req = t->req;
		w->n = t->n;
		w->hash_ids = t->hash_ids;
		snprintf(w->source, sizeof(w->source), "%s", path);
	}
	return size_work(w);
}

static void free_work(work *w, trace *t)
{
	if (t->req) {
		trace_free(t);
	} else {
		free(w->req);
		free(w->hash_ids);
	}
	free(w->session);
	free(w->thread_of);
}

/* --- tables and targets ---------------------------------------------------- */

static bool mode_selected(int mode)
{
	const char *p = kvb_opt.modes;
	size_t len = strlen(mode_name[mode]);

	if (!p)
		return true;
	while (*p) {
		const char *e = strchr(p, ',');
		size_t l = e ? (size_t)(e - p) : strlen(p);
		if (l == len && !strncmp(p, mode_name[mode], len))
			return true;
		if (!e)
			break;
		p = e + 1;
	}
	return false;
}

static int thread_index(int t)
{
	for (int i = 0; i < kvb_opt.n_threads; i++)
		if (kvb_opt.threads[i] == t)
			return i;
	return -1;
}

static void record(int mode, int ti, int runs)
{
	char x[64];

	snprintf(x, sizeof(x), "mode=%s,threads=%d", mode_name[mode], kvb_opt.threads[ti]);
	for (int s = 0; s < NSIDE; s++) {
		result *o = &res[mode][ti][s];
		kvb_fig(BENCH, side_name[s], x, "blocks_per_s", o->best_bps, o->bps, runs);
		kvb_fig(BENCH, side_name[s], x, "cpu_ns_per_block", o->ns_cpu, NULL, 0);
		kvb_fig(BENCH, side_name[s], x, "matched_percent", o->matched, NULL, 0);
		if (mode == PREFIX)
			kvb_fig(BENCH, side_name[s], x, "matched_percent_lockstep", o->lock_matched,
			        NULL, 0);
		kvb_fig(BENCH, side_name[s], x, "failed_requests", (double)o->failed, NULL, 0);
	}
	kvb_fig(BENCH, "kvpool", x, "ratio_vs_mutex_blockpool",
	        res[mode][ti][KV].best_bps / res[mode][ti][MUTEX].best_bps, NULL, 0);
	for (int k = 0; kvb_opt.phases && k < NPHASE; k++) {
		snprintf(x, sizeof(x), "mode=%s,threads=%d,step=%s", mode_name[mode],
		         kvb_opt.threads[ti], phase_name[k]);
		for (int s = 0; s < NSIDE; s++)
			kvb_fig(BENCH, side_name[s], x, "wall_ns_per_block",
			        res[mode][ti][s].ph_ns[k], NULL, 0);
	}
}

/* --phases: each step's wall ns per block, both sides, and kvpool's over the mutex pool's. */
static void print_phases(int mode)
{
	printf("\n%s: wall ns per block in each step of a request (--phases; best run of each "
	       "side)\n",
	       mode_name[mode]);
	printf("%-7s %-7s", "threads", "side");
	for (int k = 0; k < NPHASE; k++)
		printf(" %9s", phase_name[k]);
	printf(" %9s\n", "all");
	for (int ti = 0; ti < kvb_opt.n_threads; ti++) {
		for (int s = 0; s <= NSIDE; s++) {
			const double *a = res[mode][ti][KV].ph_ns, *b = res[mode][ti][MUTEX].ph_ns;
			double sa = 0, sb = 0;
			printf("%-7d %-7s", kvb_opt.threads[ti],
			       s == KV      ? "kvpool"
			       : s == MUTEX ? "mutex"
			                    : "kv/mx");
			for (int k = 0; k < NPHASE; k++) {
				sa += a[k];
				sb += b[k];
				if (s < NSIDE)
					printf(" %9.2f", s == KV ? a[k] : b[k]);
				else if (b[k] > 0)
					printf(" %8.2fx", a[k] / b[k]);
				else
					printf(" %9s", "-");
			}
			if (s < NSIDE)
				printf(" %9.2f\n", s == KV ? sa : sb);
			else
				printf(" %8.2fx\n", sb > 0 ? sa / sb : 0);
		}
	}
}

static void print_mode(int mode, int runs)
{
	int t1 = thread_index(1);

	printf("\n%s: blocks/s (best of %d), CPU ns per block, matched share of prompt blocks"
	       "%s\n",
	       mode_name[mode], runs, mode == PREFIX ? " (that run; in lockstep)" : "");
	printf("%-7s %9s %9s %7s %8s %9s %9s %8s %8s %7s", "threads", "kvpool", "mutex", "ratio",
	       "scaling", "kv ns/b", "mx ns/b", "kv match", "mx match", "failed");
	if (mode == PREFIX)
		printf(" %8s %8s", "kv lock", "mx lock");
	printf("\n");
	for (int ti = 0; ti < kvb_opt.n_threads; ti++) {
		result *k = &res[mode][ti][KV], *m = &res[mode][ti][MUTEX];
		char sc[16] = "-";
		if (t1 >= 0)
			snprintf(sc, sizeof(sc), "%.2fx", k->best_bps / res[mode][t1][KV].best_bps);
		printf("%-7d %8.1fM %8.1fM %6.2fx %8s %9.1f %9.1f %7.1f%% %7.1f%% %7llu",
		       kvb_opt.threads[ti], k->best_bps / 1e6, m->best_bps / 1e6,
		       k->best_bps / m->best_bps, sc, k->ns_cpu, m->ns_cpu, k->matched, m->matched,
		       (unsigned long long)(k->failed + m->failed));
		if (mode == PREFIX)
			printf(" %7.1f%% %7.1f%%", k->lock_matched, m->lock_matched);
		printf("\n");
		if (mode == PREFIX && (k->eexist || m->eexist))
			printf(
			    "        (publishes refused, another block had the key: kvpool %llu, "
			    "mutex %llu)\n",
			    (unsigned long long)k->eexist, (unsigned long long)m->eexist);
	}
}

static void target_ratio(int mode, int t, double goal)
{
	int ti = thread_index(t);
	char what[128];

	snprintf(what, sizeof(what), "%s %d thread%s: kvpool >= %.1fx mutex pool", mode_name[mode],
	         t, t > 1 ? "s" : "", goal);
	double v = ti >= 0 ? res[mode][ti][KV].best_bps / res[mode][ti][MUTEX].best_bps : KVB_NA;
	kvb_target(BENCH, what, v, v >= goal);
}

static void target_scaling(int mode, double goal)
{
	int t1 = thread_index(1), t2 = thread_index(2);
	char what[128];

	snprintf(what, sizeof(what), "%s 2 threads: kvpool >= %.1fx its own 1 thread",
	         mode_name[mode], goal);
	double v =
	    t1 >= 0 && t2 >= 0 ? res[mode][t2][KV].best_bps / res[mode][t1][KV].best_bps : KVB_NA;
	kvb_target(BENCH, what, v, v >= goal);
}

static void print_targets(int mode)
{
	double one = mode == PLAIN ? 1.0 : 0.8, two = mode == PLAIN ? 1.8 : 1.6;
	uint64_t failed = 0;
	double diff = 0;
	char what[128];

	target_ratio(mode, 1, one);
	target_scaling(mode, two);
	target_ratio(mode, 8, 1.5);
	target_ratio(mode, 16, 1.5);
	for (int ti = 0; ti < kvb_opt.n_threads; ti++) {
		const result *k = &res[mode][ti][KV], *m = &res[mode][ti][MUTEX];
		/* prefix: in lockstep, where the order of requests is the
		 * trace's on both sides (one_run) */
		double d = mode == PREFIX ? fabs(k->lock_matched - m->lock_matched)
		                          : fabs(k->matched - m->matched);
		failed += k->failed + m->failed;
		diff = d > diff ? d : diff;
	}
	snprintf(what, sizeof(what), "%s: 0 failed requests (failed, both sides)", mode_name[mode]);
	kvb_target(BENCH, what, (double)failed, failed == 0);
	snprintf(what, sizeof(what), "%s: matched shares within 1 point%s (largest gap)",
	         mode_name[mode], mode == PREFIX ? ", in lockstep" : "");
	kvb_target(BENCH, what, diff, diff <= 1.0);
}

int kvb_bench_lifecycle(void)
{
	int runs = kvb_opt.runs > 0 ? kvb_opt.runs : kvb_opt.smoke ? 1 : 3;
	int n_t = kvb_opt.n_threads < MAX_T ? kvb_opt.n_threads : MAX_T;
	int bad = 0;
	work w;
	trace t;

	kvb_heading("7. serving lifecycle: a new owner per request, prompt in one call, "
	            "decode a block per call, kvp_free_all (blocks/s, best of runs)");
	if (load_work(&w, &t) != 0) {
		printf("  no requests: skipped\n");
		kvb_note(BENCH, "skipped: no requests");
		free_work(&w, &t);
		return 1;
	}
	if (pool_blocks(&w) > MAX_POOL_BLOCKS) {
		printf("  a request of %u blocks: a pool for it on every thread would exceed %u "
		       "blocks; skipped\n",
		       w.max_blocks, MAX_POOL_BLOCKS);
		kvb_note(BENCH, "skipped: requests too large");
		free_work(&w, &t);
		return 1;
	}
	int plain_passes = kvb_opt.quick || kvb_opt.smoke ? 1 : 3;
	printf("requests: %zu from %s; %zu warm up, the rest timed (plain: %d pass%s); "
	       "split: %s\n",
	       w.n, w.source, w.n / 8, plain_passes, plain_passes > 1 ? "es" : "",
	       kvb_opt.split && !strcmp(kvb_opt.split, "rr") ? "round robin" : "by conversation");
	printf("blocks of %u tokens: %llu in all, %.1f a request on average, %u at most; pool: %u "
	       "blocks (most threads x %u + %u)%s\n",
	       BLOCK, (unsigned long long)w.blocks, (double)w.blocks / (double)w.n, w.max_blocks,
	       (unsigned)pool_blocks(&w), w.max_blocks, CACHE_BLOCKS,
	       KVB_SANITIZED ? " (sanitizer build: figures mean nothing)" : "");
	size_t keyed = 0;
	for (size_t i = 0; i < w.n; i++)
		keyed += w.req[i].n_hash > 0;
	if (keyed == 0)
		printf("no request has hash ids (only Mooncake traces do): in prefix mode no two "
		       "requests share a block\n");
	if (kvb_opt.thread_cache >= 0)
		printf("kvpool thread_cache: %ld (--thread-cache)\n", kvb_opt.thread_cache);
	memset(res, 0, sizeof(res));
	for (int mode = 0; mode < NMODE; mode++) {
		if (!mode_selected(mode))
			continue;
		for (int ti = 0; ti < n_t; ti++) {
			for (int rep = 0; rep < runs; rep++) {
				for (int k = 0; k < NSIDE; k++) {
					int side = rep % 2 ? NSIDE - 1 - k : k;
					bad |= one_run(&w, mode, side, kvb_opt.threads[ti],
					               mode == PLAIN ? plain_passes : 1,
					               &res[mode][ti][side], rep, false);
				}
			}
			/* One thread runs its requests in trace order anyway. */
			for (int side = 0; mode == PREFIX && side < NSIDE; side++)
				if (kvb_opt.threads[ti] == 1)
					res[mode][ti][side].lock_matched =
					    res[mode][ti][side].matched;
				else
					bad |= one_run(&w, mode, side, kvb_opt.threads[ti], 1,
					               &res[mode][ti][side], 0, true);
			record(mode, ti, runs);
		}
		print_mode(mode, runs);
		if (kvb_opt.phases)
			print_phases(mode);
		print_targets(mode);
	}
	free_work(&w, &t);
	return bad;
}
