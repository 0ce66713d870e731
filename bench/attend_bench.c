/*
 * bench/attend_bench.c - decode-step attention: paged blocks vs a contiguous array.
 *
 * For each context length, one request's layer is appended to a kvcache on
 * a pool (block_size 16, fp32 by default), and the same K and V rows are
 * copied into one contiguous (len, n_kv_heads, head_dim) array each.  The
 * paged side is kvp_kvcache_attend, reading the blocks where they lie; the
 * contiguous side is the very same kernel (lib/kvcache/kvcache_attend.h) given the
 * array as a single block - so the ratio is the cost of paging alone
 * (scattered 32 KiB block buffers, one pointer per block), not of two
 * different implementations.  The two outputs are compared bit for bit.
 *
 * Shape: 32 query heads, 8 KV heads, head_dim 64 (Llama-3.2-1B-like).
 * Timing: batches of steps alternate between the two sides; each side's
 * figure is the median batch time per step, in thread CPU time
 * (CLOCK_THREAD_CPUTIME_ID), so other work on a shared machine inflates
 * neither side.
 *
 *   attend_bench [--quick] [--format fp32|fp16|bf16|int8|int4] [--block-size N]
 *
 * --quick: 1k and 8k tokens, a few batches (~1 s): the smoke run.
 */
#include <kvpool/kvpool.h>

#include <math.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lib/testing/codec.h"
#include "lib/testing/attend.h"

#include "bench/clock.h"

enum { NH = 32, KVH = 8, HD = 64, ROW = KVH * HD, MAX_BATCHES = 15 };

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static float frand(void)
{
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return (float)((double)((rng * 0x2545f4914f6cdd1dull) >> 11) * 0x1p-53 * 2.0 - 1.0);
}

struct result {
	double paged_ms, contig_ms;
	int identical;
};

/*
 * Append @len random tokens to layer 0 of @c in chunks of 256 (@chunk holds
 * one chunk's K and V), the contiguous copies @kc and @vc encoded alike.
 */
static int prefill(kvp_kvcache *c, uint32_t len, kvp_format fmt, size_t rb, uint8_t *kc,
                   uint8_t *vc, float *chunk)
{
	for (uint32_t t = 0; t < len; t += 256) {
		uint32_t n = len - t < 256 ? len - t : 256;
		float *k = chunk, *v = chunk + (size_t)256 * ROW;
		for (uint32_t i = 0; i < n * ROW; i++) {
			k[i] = frand();
			v[i] = frand();
		}
		if (kvp_kvcache_append(c, 0, k, v, n) != KVP_OK)
			return -1;
		kvpi_codec_encode(fmt, kc + (size_t)t * rb, k, n, ROW);
		kvpi_codec_encode(fmt, vc + (size_t)t * rb, v, n, ROW);
	}
	return 0;
}

/*
 * Batches of decode steps alternating between the paged cache @c and the
 * contiguous rows @src; the median batch time per step of each side, and
 * whether the last outputs are identical.
 */
static void time_steps(kvp_kvcache *c, const struct kvpi_attend_src *src, uint32_t len, int batches,
                       struct result *res)
{
	float q[NH * HD], out_p[NH * HD], out_c[NH * HD];
	double tp[MAX_BATCHES], tc[MAX_BATCHES];
	int steps, b, s;

	for (int i = 0; i < NH * HD; i++)
		q[i] = frand();
	/* about 20 ms of work per batch, at least one step */
	steps = (int)(2e7 / ((double)len * NH * HD * 2)) + 1;
	for (b = 0; b < batches; b++) {
		double t0 = kvb_cpu_seconds();
		for (s = 0; s < steps; s++)
			kvp_kvcache_attend(c, 0, q, NH, 0.125f, out_p);
		double t1 = kvb_cpu_seconds();
		for (s = 0; s < steps; s++)
			kvpi_attend_rows(src, q, NH, 0.125f, out_c);
		double t2 = kvb_cpu_seconds();
		tp[b] = (t1 - t0) / steps;
		tc[b] = (t2 - t1) / steps;
	}
	qsort(tp, (size_t)batches, sizeof(double), cmp_double);
	qsort(tc, (size_t)batches, sizeof(double), cmp_double);
	res->paged_ms = tp[batches / 2] * 1e3;
	res->contig_ms = tc[batches / 2] * 1e3;
	res->identical = memcmp(out_p, out_c, sizeof out_p) == 0;
}

static int run_len(uint32_t len, kvp_format fmt, uint32_t bs, int quick, struct result *res)
{
	kvp_pool_config pc;
	kvp_pool *pool = NULL;
	kvp_storage *ks = NULL, *vs = NULL;
	kvp_kvcache *c = NULL;
	kvp_kvcache_config cfg = {1, KVH, HD, fmt, 1};
	size_t rb = kvpi_codec_row_bytes(fmt, ROW);
	uint8_t *kc = malloc((size_t)len * rb), *vc = malloc((size_t)len * rb);
	float *chunk = malloc((size_t)256 * ROW * sizeof(float) * 2);
	int rc = 1;

	if (!kc || !vc || !chunk)
		goto out;
	kvp_pool_config_init(&pc);
	pc.block_size = bs;
	pc.n_blocks = 2 * ((len + bs - 1) / bs);
	if (kvp_pool_create(&pc, &pool) || kvp_storage_create(pool, ROW, NULL, &ks) ||
	    kvp_storage_create(pool, ROW, NULL, &vs) || kvp_kvcache_create(pool, ks, vs, &cfg, &c))
		goto out;
	if (prefill(c, len, fmt, rb, kc, vc, chunk) != 0)
		goto out;
	const uint8_t *kbase = kc, *vbase = vc;
	struct kvpi_attend_src src = {&kbase, &vbase, len, len, rb, fmt, KVH, HD};
	time_steps(c, &src, len, quick ? 3 : MAX_BATCHES, res);
	rc = 0;
out:
	kvp_kvcache_destroy(c);
	kvp_storage_destroy(ks);
	kvp_storage_destroy(vs);
	kvp_pool_destroy(pool);
	free(kc);
	free(vc);
	free(chunk);
	return rc;
}

static void usage(void)
{
	printf("usage: attend_bench [options]\n"
	       "  --quick, --smoke     1024 and 8192 tokens only (default: also "
	       "32768)\n"
	       "  --format F           fp32 (default), fp16, bf16, int8, int4\n"
	       "  --block-size N       tokens per block, 1..%u (default 16)\n"
	       "  -h, --help           this text\n"
	       "  -V, --version        the kvpool version\n"
	       "Options take their value as --opt VALUE or --opt=VALUE.\n",
	       KVP_MAX_BLOCK_SIZE);
}

/* -1 to go on, or the exit status (0 after --help and --version, 2 on bad usage). */
static int parse_args(int argc, char **argv, int *quick, kvp_format *fmt, uint32_t *bs)
{
	static const struct option longopts[] = {
	    {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},
	    {"quick", no_argument, NULL, 'q'},
	    {"smoke", no_argument, NULL, 'q'},
	    {"format", required_argument, NULL, 'f'},
	    {"block-size", required_argument, NULL, 'b'},
	    {NULL, 0, NULL, 0},
	};
	int c;
	opterr = 0; /* one line of our own below */
	while ((c = getopt_long(argc, argv, ":hV", longopts, NULL)) != -1) {
		switch (c) {
		case 'h':
			usage();
			return 0;
		case 'V':
			printf("attend_bench (kvpool) %s\n", kvp_version());
			return 0;
		case 'q':
			*quick = 1;
			break;
		case 'f':
			if (kvp_format_parse(optarg, fmt) != KVP_OK ||
			    !kvpi_codec_supported(*fmt)) {
				fprintf(stderr, "attend_bench: no codec for format %s\n", optarg);
				return 2;
			}
			break;
		case 'b':
			*bs = (uint32_t)strtoul(optarg, NULL, 10);
			if (*bs == 0 || *bs > KVP_MAX_BLOCK_SIZE) {
				fprintf(stderr, "attend_bench: bad --block-size '%s'\n", optarg);
				return 2;
			}
			break;
		case ':':
			fprintf(stderr, "attend_bench: option %s needs a value (see --help)\n",
			        argv[optind - 1]);
			return 2;
		default:
			fprintf(stderr, "attend_bench: unknown option '%s' (see --help)\n",
			        argv[optind - 1]);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "attend_bench: unexpected argument '%s' (see --help)\n",
		        argv[optind]);
		return 2;
	}
	return -1;
}

int main(int argc, char **argv)
{
	static const uint32_t lens[] = {1024, 8192, 32768};
	kvp_format fmt = KVP_FP32;
	uint32_t bs = 16;
	int quick = 0, i, n_lens = 3, bad = 0, rc;

	if ((rc = parse_args(argc, argv, &quick, &fmt, &bs)) >= 0)
		return rc;
	if (quick)
		n_lens = 2;
	printf("attend_bench: decode step, %d query heads, %d KV heads, head_dim %d, %s, "
	       "block_size %u%s\n",
	       NH, KVH, HD, kvp_format_name(fmt), bs, quick ? " (quick)" : "");
	printf("%8s %12s %14s %8s %10s\n", "tokens", "paged_ms", "contiguous_ms", "ratio",
	       "identical");
	for (i = 0; i < n_lens; i++) {
		struct result r;
		if (run_len(lens[i], fmt, bs, quick, &r) != 0) {
			fprintf(stderr, "attend_bench: setup failed at %u tokens\n", lens[i]);
			return 1;
		}
		printf("%8u %12.3f %14.3f %8.3f %10s\n", lens[i], r.paged_ms, r.contig_ms,
		       r.paged_ms / r.contig_ms, r.identical ? "yes" : "NO");
		bad |= !r.identical;
	}
	return bad;
}
