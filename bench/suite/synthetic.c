/*
 * bench/suite/synthetic.c - benchmark 3: a synthetic generation
 * workload through kvpool against naive per-token allocation.
 *
 * Workload (deterministic, splitmix64 seed 42): R requests, at most C
 * running at once (continuous batching).  A request is admitted into a free
 * slot and prefilled (prompt tokens 64..2048), then each scheduler step
 * decodes one token for every running request (output tokens 16..512);
 * a finished request gives everything back and the next one is admitted.
 * One stream (think: the K cache of one layer); a token is TOKEN_BYTES.
 *
 *   kvpool: prefill = one kvp_allocate(prompt tokens); decode = one
 *           kvp_allocate(1 token) when the last block is full, else
 *           kvp_block_set_used on the last block; finish = kvp_free_all.
 *   naive:  one malloc(TOKEN_BYTES) per token, one free per token.
 *
 * Each backend runs once as an accounting pass (peaks, fragmentation,
 * system-allocation counts, not timed) and then kvb_opt.reps timed passes
 * (tokens/s, median).  System allocations are counted over the whole first
 * pass, over its second half (requests admitted after R/2), and over the
 * repeat (timed) passes: the steady state of a server that has run the
 * workload once, which the "no system allocation" target is judged on.  Per-request arrays (refs,
 * token pointers) are allocated before the passes so neither backend is charged for them.
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/suite/cases.h"
#include "bench/suite/suite.h"
#include "bench/suite/syscount.h"

#define BENCH       "synthetic"
#define TOKEN_BYTES 2048 /* 8 KV heads x 128 dims x fp16 */

typedef struct req {
	uint32_t prompt, output, gen, len, nb;
	kvp_owner owner;
	kvp_ref *refs;
	void **toks;
} req;

typedef struct acct {
	uint64_t calls, free_calls, tokens, blocks;
	uint64_t peak_live_tokens, peak_slots; /* slots = blocks x block_size */
	double waste_sum;                      /* sum over steps of 1 - live/slots */
	uint64_t steps;
	uint64_t peak_heap; /* naive: mallinfo2 bytes held, sampled per step */
	uint64_t sys_allocs_all, sys_allocs_steady;
	uint64_t sys_allocs_repeat; /* summed over the timed passes that follow the first */
	double pool_frag_at_peak;   /* kvp_stats_fragmentation at the peak */
	uint64_t pool_peak_blocks;  /* from kvp_pool_stats */
	uint64_t pool_meta_bytes;   /* heap bytes the pool took at create */
} acct;

typedef struct wl {
	uint32_t R, C, max_len;
	uint32_t *prompt, *output;
	req *slot;
	kvp_pool *pool;
	bool kv; /* backend: kvpool (true) or naive */
	uint64_t live_tokens, live_slots;
} wl;

static int admit(wl *w, req *r, uint32_t i, acct *a)
{
	r->prompt = w->prompt[i];
	r->output = w->output[i];
	r->gen = 0;
	r->len = r->prompt;
	if (w->kv) {
		size_t n;
		int rc;
		r->owner = kvb_new_owner();
		rc = kvp_allocate(w->pool, KVP_KV, r->prompt, r->owner, KVP_FP16, r->refs,
		                  w->max_len / KVB_BLOCK_SIZE + 1, &n);
		if (rc != KVP_OK)
			return rc;
		r->nb = (uint32_t)n;
		a->calls++;
		a->blocks += n;
		w->live_slots += n * KVB_BLOCK_SIZE;
	} else {
		for (uint32_t t = 0; t < r->prompt; t++) {
			r->toks[t] = malloc(TOKEN_BYTES);
			if (!r->toks[t])
				return -1;
		}
		a->calls += r->prompt;
		w->live_slots += r->prompt;
	}
	a->tokens += r->prompt;
	w->live_tokens += r->prompt;
	return 0;
}

static int decode(wl *w, req *r, acct *a)
{
	if (w->kv) {
		int rc;
		if (r->len % KVB_BLOCK_SIZE == 0) {
			size_t n;
			rc = kvp_allocate(w->pool, KVP_KV, 1, r->owner, KVP_FP16, r->refs + r->nb,
			                  w->max_len / KVB_BLOCK_SIZE + 1 - r->nb, &n);
			r->nb++;
			a->calls++;
			a->blocks++;
			w->live_slots += KVB_BLOCK_SIZE;
		} else {
			rc = kvp_block_set_used(w->pool, r->refs[r->nb - 1],
			                        r->len % KVB_BLOCK_SIZE + 1);
		}
		if (rc != KVP_OK)
			return rc;
	} else {
		r->toks[r->len] = malloc(TOKEN_BYTES);
		if (!r->toks[r->len])
			return -1;
		a->calls++;
		w->live_slots++;
	}
	r->len++;
	r->gen++;
	a->tokens++;
	w->live_tokens++;
	return 0;
}

static int finish(wl *w, req *r, acct *a)
{
	w->live_tokens -= r->len;
	if (w->kv) {
		int rc = kvp_free_all(w->pool, r->owner);
		a->free_calls++;
		w->live_slots -= (uint64_t)r->nb * KVB_BLOCK_SIZE;
		if (rc != KVP_OK)
			return rc;
	} else {
		for (uint32_t t = 0; t < r->len; t++)
			free(r->toks[t]);
		a->free_calls += r->len;
		w->live_slots -= r->len;
	}
	return 0;
}

static void sample(wl *w, acct *a)
{
	if (w->live_tokens > a->peak_live_tokens)
		a->peak_live_tokens = w->live_tokens;
	if (w->live_slots > a->peak_slots) {
		a->peak_slots = w->live_slots;
		if (w->kv) {
			kvp_stats st;
			if (kvp_pool_stats(w->pool, &st) == KVP_OK)
				a->pool_frag_at_peak = kvp_stats_fragmentation(&st);
		}
	}
	if (w->live_slots)
		a->waste_sum += 1.0 - (double)w->live_tokens / (double)w->live_slots;
	a->steps++;
	if (!w->kv) {
		size_t h = kvb_heap_bytes();
		if (h > a->peak_heap)
			a->peak_heap = h;
	}
}

/* One pass of the whole workload; @accounting samples peaks and counters. */
static int run_pass(wl *w, acct *a, bool accounting)
{
	uint32_t next = 0, finished = 0;
	kvb_syscount s0, s1, s2;
	bool steady = false;
	int rc = 0;

	kvb_syscount_read(&s0);
	s1 = s0;
	for (uint32_t i = 0; i < w->C && next < w->R; i++, next++)
		if ((rc = admit(w, &w->slot[i], next, a)) != 0)
			return rc;
	while (finished < w->R) {
		for (uint32_t i = 0; i < w->C; i++) {
			req *r = &w->slot[i];
			if (r->prompt == 0)
				continue;
			if ((rc = decode(w, r, a)) != 0)
				return rc;
			if (r->gen < r->output)
				continue;
			if ((rc = finish(w, r, a)) != 0)
				return rc;
			finished++;
			r->prompt = 0;
			if (next < w->R) {
				if (!steady && next >= w->R / 2) {
					kvb_syscount_read(&s1);
					steady = true;
				}
				if ((rc = admit(w, r, next++, a)) != 0)
					return rc;
			}
		}
		if (accounting)
			sample(w, a);
	}
	kvb_syscount_read(&s2);
	a->sys_allocs_all = s2.allocs - s0.allocs;
	a->sys_allocs_steady = s2.allocs - s1.allocs;
	return 0;
}

static void gen_workload(wl *w)
{
	uint64_t seed = 42;
	uint32_t pmax = kvb_opt.smoke ? 256 : 2048, omax = kvb_opt.smoke ? 64 : 512;

	w->max_len = pmax + omax;
	for (uint32_t i = 0; i < w->R; i++) {
		w->prompt[i] = 64 + (uint32_t)(kvb_rand(&seed) % (pmax - 64 + 1));
		w->output[i] = 16 + (uint32_t)(kvb_rand(&seed) % (omax - 16 + 1));
	}
}

static void fig2(const char *series, const char *metric, double value)
{
	kvb_fig(BENCH, series, "", metric, value, NULL, 0);
}

static const char *const name[2] = {"naive_per_token_malloc", "kvpool"};

/*
 * The workload (R requests, C slots, their per-request arrays) and the pool
 * that holds C requests of the longest length; a[1] gets the heap bytes the
 * pool took at create.  Returns 0, or 1 (wl_free frees what was made).
 */
static int wl_setup(wl *w, kvp_pool_config *cfg, acct a[2])
{
	w->R = kvb_opt.smoke ? 64 : kvb_opt.quick ? 1024 : 4096;
	w->C = kvb_opt.smoke ? 16 : 64;
	w->prompt = calloc(w->R, sizeof(uint32_t));
	w->output = calloc(w->R, sizeof(uint32_t));
	w->slot = calloc(w->C, sizeof(req));
	if (!w->prompt || !w->output || !w->slot)
		return 1;
	gen_workload(w);
	for (uint32_t i = 0; i < w->C; i++) {
		w->slot[i].refs = calloc(w->max_len / KVB_BLOCK_SIZE + 1, sizeof(kvp_ref));
		w->slot[i].toks = calloc(w->max_len, sizeof(void *));
		if (!w->slot[i].refs || !w->slot[i].toks)
			return 1;
	}
	kvp_pool_config_init(cfg);
	cfg->block_size = KVB_BLOCK_SIZE;
	cfg->separate_kv = false;
	cfg->n_blocks = w->C * (w->max_len / KVB_BLOCK_SIZE + 1);
	size_t h0 = kvb_heap_bytes();
	if (kvp_pool_create(cfg, &w->pool) != KVP_OK) {
		printf("cannot create the pool\n");
		return 1;
	}
	a[1].pool_meta_bytes = kvb_heap_bytes() - h0;
	return 0;
}

static void wl_free(wl *w)
{
	for (uint32_t i = 0; w->slot && i < w->C; i++) {
		free(w->slot[i].refs);
		free(w->slot[i].toks);
	}
	free(w->slot);
	free(w->prompt);
	free(w->output);
	kvp_pool_destroy(w->pool);
}

/* What glibc holds for one TOKEN_BYTES malloc: usable size plus its header. */
static size_t malloc_chunk(void)
{
	void *p = malloc(TOKEN_BYTES);
	size_t chunk = p ? malloc_usable_size(p) + sizeof(size_t) : TOKEN_BYTES;
	free(p);
	return chunk;
}

/*
 * Backend @b (0 naive, 1 kvpool): the accounting pass into *@a, then the
 * timed passes; returns the median tokens/s, *@bad set when a call failed.
 */
static double run_backend(wl *w, int b, acct *a, int *bad)
{
	double tps[KVB_MAX_REPS], med;
	acct tmp;

	w->kv = b == 1;
	w->live_tokens = w->live_slots = 0;
	if (run_pass(w, a, true) != 0) {
		printf("  %s: a call failed\n", name[b]);
		*bad = 1;
		return 0; /* no figure; the table shows 0 (it showed an unset value) */
	}
	if (w->kv) {
		kvp_stats st;
		kvp_pool_stats(w->pool, &st);
		a->pool_peak_blocks = st.peak_blocks_in_use;
	}
	for (int r = 0; r < kvb_opt.reps; r++) {
		double t0 = kvb_now();
		memset(&tmp, 0, sizeof(tmp));
		if (run_pass(w, &tmp, false) != 0) {
			*bad = 1;
			break;
		}
		tps[r] = (double)tmp.tokens / (kvb_now() - t0);
		a->sys_allocs_repeat += tmp.sys_allocs_all;
	}
	med = kvb_median(tps, kvb_opt.reps);
	kvb_fig(BENCH, name[b], "", "tokens_per_s", med, tps, kvb_opt.reps);
	return med;
}

/* Calls, tokens, blocks and system allocations; returns the call cut naive/kvpool. */
static double print_calls(const acct a[2], bool counted)
{
	double r[3];
	r[0] = (double)a[0].calls, r[1] = (double)a[1].calls, r[2] = r[0] / r[1];
	printf("%-34s %11.4g %11.4g %10.1fx\n", "allocation calls", r[0], r[1], r[2]);
	fig2(name[0], "allocation_calls", (double)a[0].calls);
	fig2(name[1], "allocation_calls", (double)a[1].calls);
	fig2("kvpool", "allocation_calls_cut_x", r[2]);
	double calls_cut = r[2];

	r[0] = (double)a[0].free_calls, r[1] = (double)a[1].free_calls;
	printf("%-34s %11.4g %11.4g %10.1fx\n", "free calls", r[0], r[1], r[0] / r[1]);
	fig2(name[0], "free_calls", r[0]);
	fig2(name[1], "free_calls", r[1]);

	printf("%-34s %11.4g %11.4g\n", "tokens", (double)a[0].tokens, (double)a[1].tokens);
	printf("%-34s %11s %11.4g\n", "blocks handed out", "-", (double)a[1].blocks);
	fig2(name[1], "blocks_allocated", (double)a[1].blocks);
	fig2(name[1], "tokens", (double)a[1].tokens);
	if (!counted) {
		printf("%-34s %23s\n", "system allocs", "not counted (sanitizer build)");
		kvb_note(BENCH, "system allocations not counted: sanitizer build");
		return calls_cut;
	}
	printf("%-34s %11.4g %11.4g\n", "system allocs, whole run", (double)a[0].sys_allocs_all,
	       (double)a[1].sys_allocs_all);
	printf("%-34s %11.4g %11.4g\n", "system allocs, 1st pass 2nd half",
	       (double)a[0].sys_allocs_steady, (double)a[1].sys_allocs_steady);
	printf("%-34s %11.4g %11.4g\n", "system allocs, repeat passes",
	       (double)a[0].sys_allocs_repeat, (double)a[1].sys_allocs_repeat);
	for (int b = 0; b < 2; b++) {
		fig2(name[b], "system_allocs_whole_run", (double)a[b].sys_allocs_all);
		fig2(name[b], "system_allocs_first_pass_second_half",
		     (double)a[b].sys_allocs_steady);
		fig2(name[b], "system_allocs_repeat_passes", (double)a[b].sys_allocs_repeat);
	}
	return calls_cut;
}

/* Peak memory (live, held, heap) and fragmentation of both backends. */
static void print_memory(const acct a[2], size_t chunk)
{
	double peak_naive_req = (double)a[0].peak_live_tokens * TOKEN_BYTES;
	double peak_kv = (double)a[1].pool_peak_blocks * KVB_BLOCK_SIZE * TOKEN_BYTES;
	double naive_held = (double)a[0].peak_live_tokens * (double)chunk;
	double peak_kv_req = (double)a[1].peak_live_tokens * TOKEN_BYTES;
	printf("%-34s %11s %11s %10.2fx\n", "peak memory: live token bytes",
	       kvb_si(peak_naive_req, (char[16]){0}, 16), kvb_si(peak_kv_req, (char[16]){0}, 16),
	       peak_naive_req / peak_kv_req);
	printf("%-34s %11s %11s %10.2fx\n", "peak memory: held (see notes)",
	       kvb_si(naive_held, (char[16]){0}, 16), kvb_si(peak_kv, (char[16]){0}, 16),
	       naive_held / peak_kv);
	printf("%-34s %11s %11s\n", "peak heap (mallinfo2) / pool meta",
	       kvb_si((double)a[0].peak_heap, (char[16]){0}, 16),
	       kvb_si((double)a[1].pool_meta_bytes, (char[16]){0}, 16));
	fig2(name[0], "peak_live_token_bytes", peak_naive_req);
	fig2(name[0], "peak_held_bytes", naive_held);
	fig2(name[0], "peak_heap_bytes_mallinfo2", (double)a[0].peak_heap);
	fig2(name[1], "peak_held_bytes", peak_kv);
	fig2(name[1], "pool_metadata_bytes", (double)a[1].pool_meta_bytes);
	fig2(name[1], "peak_blocks_in_use", (double)a[1].pool_peak_blocks);

	double fr0 = 1.0 - (double)TOKEN_BYTES / (double)chunk;
	double fr1 = a[1].steps ? a[1].waste_sum / (double)a[1].steps : 0;
	printf("%-34s %10.2f%% %10.2f%%\n", "fragmentation: wasted/held, mean", fr0 * 100,
	       fr1 * 100);
	printf("%-34s %11s %11.3f\n", "kvp_stats_fragmentation at peak", "-",
	       a[1].pool_frag_at_peak);
	fig2(name[0], "fragmentation_mean", fr0);
	fig2(name[1], "fragmentation_mean", fr1);
	fig2(name[1], "kvp_stats_fragmentation_at_peak", a[1].pool_frag_at_peak);
}

/* Throughput, the notes and the two targets. */
static void print_verdicts(const double med[2], const acct a[2], size_t chunk, double calls_cut,
                           bool counted)
{
	printf("%-34s %11s %11s %10.2fx\n", "throughput, tokens/s (median)",
	       kvb_si(med[0], (char[16]){0}, 16), kvb_si(med[1], (char[16]){0}, 16),
	       med[0] / med[1]);
	fig2("kvpool", "throughput_ratio_vs_naive", med[1] / med[0]);

	printf("notes: naive held = peak live tokens x %zu B (glibc chunk of a %d B malloc:\n"
	       "  malloc_usable_size + header); kvpool held = peak blocks x %u tokens x %d "
	       "B.\n"
	       "  System allocs = malloc-family calls in the whole process "
	       "(bench/suite/syscount.c).\n",
	       chunk, TOKEN_BYTES, KVB_BLOCK_SIZE, TOKEN_BYTES);
	kvb_target(BENCH, "allocation calls cut >= block_size (16x) (naive/kvpool)", calls_cut,
	           calls_cut >= KVB_BLOCK_SIZE);
	if (counted)
		kvb_target(BENCH, "no system allocation in steady state (repeat passes)",
		           (double)a[1].sys_allocs_repeat, a[1].sys_allocs_repeat == 0);
}

int kvb_bench_synthetic(void)
{
	wl w = {0};
	acct a[2] = {{0}};
	double med[2];
	kvp_pool_config cfg;
	int bad = 0;
	bool counted = kvb_syscount_enabled();

	kvb_heading("3. synthetic generation workload: kvpool vs naive per-token malloc");
	if (wl_setup(&w, &cfg, a) != 0)
		return 1;
	size_t chunk = malloc_chunk();
	for (int b = 0; b < 2; b++)
		med[b] = run_backend(&w, b, &a[b], &bad);
	if (kvp_n_free(w.pool, KVP_KV) != cfg.n_blocks) {
		printf("  LEAK: kvpool has %zu of %u blocks free\n", kvp_n_free(w.pool, KVP_KV),
		       cfg.n_blocks);
		bad = 1;
	}
	printf("\n%u requests, %u at once, prompt 64..%u, output 16..%u tokens, %d B/token, "
	       "block %u tokens\n",
	       w.R, w.C, kvb_opt.smoke ? 256 : 2048, kvb_opt.smoke ? 64 : 512, TOKEN_BYTES,
	       KVB_BLOCK_SIZE);
	const char *cols[3] = {"naive", "kvpool", "naive/kv"};
	kvb_row_head("", cols, 3);
	double calls_cut = print_calls(a, counted);
	print_memory(a, chunk);
	print_verdicts(med, a, chunk, calls_cut, counted);
	wl_free(&w);
	return bad;
}
