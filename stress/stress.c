/*
 * stress/stress.c - operations, model and invariants of kvpool_stress
 * (see stress.h).
 *
 * Rationale: a stress test is only as good as what it can tell apart from
 * success.  Every operation here checks its own return code against the
 * model (an owner that is active must answer KVP_EOWNER to a second
 * registration, a stale ref must never free or change a block, ...), and
 * between phases the whole pool is compared with the union of the models:
 * ownership, block states, the conservation law in-use + free + retired =
 * created, and every statistics counter against the harness's own counts.
 * Fault-injection phases allow KVP_ENOMEM wherever the pool may allocate,
 * and then demand that the failed call changed nothing.
 */
#include "stress/stress.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "lib/testing/fault.h"
#include "stress/util.h"

#define SHARED_BASE 0xC0FFEE0000000000ull
#define DRAIN_OWNER 0xD5A1000000000000ull
#define PROBE_OWNER 0xFA17000000000000ull
#define BOGUS_ID    0x7ffffff0u
#define CHECKER     0xffffffffu /* slot index of the between-phases checker */

const char *const st_op_names[OP_N] = {
    "allocate",
    "allocate (short refs_cap)",
    "free (some refs)",
    "free (unknown id)",
    "free_all",
    "register_owner",
    "release_owner",
    "alloc_block (raw)",
    "free_block (raw)",
    "stale ref (free/get/set)",
    "block_get",
    "block_set_used",
    "blocks_for",
    "stats/history/n_free",
    "shrink",
    "contested register",
    "short-lived thread",
    "burst of new owners",
};

const char *const st_check_names[ST_CHECK_KINDS] = {
    "owner lists match the model (kvp_blocks_for)", "no block held by two holders",
    "block states match (kvp_block_get)",           "in use + free + retired = created",
    "stats agree with the harness's counts",        "contested owners all released",
    "no free block lost (drain without growth)",    "all blocks back at the end",
    "failed growth leaves no trace (ENOMEM probe)",
};

/* Weights per operation (out of their sum). */
static const unsigned weights[OP_N] = {
    [OP_ALLOC] = 200,     [OP_ALLOC_SHORT_CAP] = 10, [OP_FREE_SOME] = 100, [OP_FREE_BOGUS] = 10,
    [OP_FREE_ALL] = 70,   [OP_REGISTER] = 40,        [OP_RELEASE] = 40,    [OP_RAW_ALLOC] = 50,
    [OP_RAW_FREE] = 50,   [OP_STALE] = 80,           [OP_GET] = 80,        [OP_SET_USED] = 60,
    [OP_BLOCKS_FOR] = 50, [OP_STATS] = 25,           [OP_SHRINK] = 1,      [OP_CONTEST] = 40,
    [OP_EPHEMERAL] = 1,   [OP_OWNER_BURST] = 4,
};

static void violation(st_slot *s, FILE *log, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void violation(st_slot *s, FILE *log, const char *fmt, ...)
{
	char msg[480];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	char who[32];
	if (s->index == CHECKER)
		snprintf(who, sizeof who, "between phases");
	else
		snprintf(who, sizeof who, "thread %u", s->index);
	if (s->violations++ == 0)
		snprintf(s->first_violation, sizeof s->first_violation, "%s: %s", who, msg);
	if (s->violations <= 10)
		fprintf(log, "VIOLATION (%s): %s\n", who, msg);
}

/* rc is what the call returned, want what the model predicts. */
static bool expect(st_world *w, st_slot *s, const char *what, int rc, int want)
{
	if (rc == want)
		return true;
	if (rc == KVP_ENOMEM && w->faults_on) {
		s->c.enomem++;
		return false;
	}
	violation(s, w->log, "%s returned %s, the model expects %s", what, kvp_strerror(rc),
	          kvp_strerror(want));
	return false;
}

static bool active(const st_owner *o)
{
	return o->registered || o->n > 0;
}

static int owner_push(st_owner *o, kvp_ref ref, uint32_t n_used, int stream)
{
	if (o->n == o->cap) {
		size_t nc = o->cap ? o->cap * 2 : 16;
		st_mref *nr = realloc(o->refs, nc * sizeof *nr);
		if (nr == NULL)
			return -1;
		o->refs = nr;
		o->cap = nc;
	}
	o->refs[o->n++] = (st_mref){.ref = ref, .n_used = n_used, .stream = (uint8_t)stream};
	return 0;
}

static void stale_push(st_slot *s, kvp_ref ref)
{
	s->stale[s->stale_next] = ref;
	s->stale_next = (s->stale_next + 1) % ST_STALE;
	if (s->n_stale < ST_STALE)
		s->n_stale++;
}

static uint64_t rnd(st_slot *s, uint64_t n)
{
	return su_rand_below(&s->rng, n);
}

static st_owner *pick_owner(st_slot *s)
{
	return &s->owners[rnd(s, ST_OWNERS)];
}

static st_owner *pick_owner_with_blocks(st_slot *s)
{
	unsigned start = (unsigned)rnd(s, ST_OWNERS);
	for (unsigned k = 0; k < ST_OWNERS; k++) {
		st_owner *o = &s->owners[(start + k) % ST_OWNERS];
		if (o->n > 0)
			return o;
	}
	return NULL;
}

/* --- operations ------------------------------------------------------------------- */

static void do_alloc(st_world *w, st_slot *s, st_owner *o, bool short_cap)
{
	uint32_t bs = w->block_size;
	int stream = (int)rnd(s, 2);
	/* Mostly small (decode-like), some prompt-sized, a few huge (to reach the cap). */
	uint32_t r = (uint32_t)rnd(s, 100);
	uint32_t max_blocks = r < 75 ? 4 : r < 97 ? 24 : ST_MAX_TOKENS_BLOCKS;
	uint32_t blocks = 1 + (uint32_t)rnd(s, max_blocks);
	uint32_t tokens = (blocks - 1) * bs + 1 + (uint32_t)rnd(s, bs);
	kvp_format fmt = (kvp_format)rnd(s, KVP_N_FORMATS);
	size_t cap = short_cap ? blocks - 1 : ST_MAX_TOKENS_BLOCKS + 1;
	size_t n = 0;
	uint64_t t0 = w->alloc_lat ? su_now_ns() : 0;
	int rc = kvp_allocate(w->pool, (kvp_stream)stream, tokens, o->id, fmt, s->scratch, cap, &n);
	if (w->alloc_lat)
		promhist_observe(w->alloc_lat, su_now_ns() - t0);
	if (short_cap) {
		if (expect(w, s, "kvp_allocate with a short refs_cap", rc, KVP_ERANGE) &&
		    n != blocks)
			violation(s, w->log,
			          "kvp_allocate ERANGE reported %zu blocks needed, not %u", n,
			          blocks);
		return;
	}
	if (rc == KVP_EEXHAUSTED) {
		s->c.exhausted++;
		return;
	}
	if (!expect(w, s, "kvp_allocate", rc, KVP_OK))
		return;
	if (n != blocks) {
		violation(s, w->log, "kvp_allocate of %u tokens gave %zu blocks, not %u", tokens, n,
		          blocks);
		return;
	}
	uint32_t ids = kvp_pool_n_ids(w->pool);
	for (size_t i = 0; i < n; i++) {
		if (KVP_REF_ID(s->scratch[i]) >= ids)
			violation(s, w->log, "kvp_allocate returned id %u >= blocks created %u",
			          KVP_REF_ID(s->scratch[i]), ids);
		uint32_t used = i + 1 < n ? bs : tokens - (blocks - 1) * bs;
		if (owner_push(o, s->scratch[i], used, stream) != 0)
			violation(s, w->log, "harness out of memory");
	}
	s->c.allocated += n;
}

static void do_free_some(st_world *w, st_slot *s)
{
	st_owner *o = pick_owner_with_blocks(s);
	if (o == NULL)
		return;
	size_t k = 0;
	bool *take = calloc(o->n, sizeof *take);
	kvp_ref *refs = malloc(o->n * sizeof *refs);
	if (take == NULL || refs == NULL) {
		free(take);
		free(refs);
		return;
	}
	for (size_t i = 0; i < o->n; i++) {
		take[i] = rnd(s, 2) == 0 || (k == 0 && i + 1 == o->n);
		if (take[i])
			refs[k++] = o->refs[i].ref;
	}
	int rc = kvp_free(w->pool, refs, k);
	if (expect(w, s, "kvp_free of the owner's own refs", rc, KVP_OK)) {
		size_t j = 0;
		for (size_t i = 0; i < o->n; i++) {
			if (take[i])
				stale_push(s, o->refs[i].ref);
			else
				o->refs[j++] = o->refs[i];
		}
		o->n = j;
		s->c.freed += k;
	}
	free(take);
	free(refs);
}

static void do_free_bogus(st_world *w, st_slot *s)
{
	st_owner *o = pick_owner_with_blocks(s);
	if (o == NULL)
		return;
	kvp_ref refs[2] = {o->refs[rnd(s, o->n)].ref, KVP_MAKE_REF(BOGUS_ID, 1)};
	/* An id never created: KVP_ENOENT and nothing in the call freed (st_check sees it). */
	expect(w, s, "kvp_free with an id never created", kvp_free(w->pool, refs, 2), KVP_ENOENT);
}

static void do_free_all(st_world *w, st_slot *s, st_owner *o)
{
	int rc = kvp_free_all(w->pool, o->id);
	if (!active(o)) {
		expect(w, s, "kvp_free_all of an inactive owner", rc, KVP_ENOENT);
		return;
	}
	if (!expect(w, s, "kvp_free_all", rc, KVP_OK))
		return;
	for (size_t i = 0; i < o->n; i++)
		stale_push(s, o->refs[i].ref);
	s->c.freed += o->n;
	o->n = 0;
	o->registered = false;
}

static void do_register(st_world *w, st_slot *s, st_owner *o)
{
	int rc = kvp_register_owner(w->pool, o->id);
	if (active(o)) {
		expect(w, s, "kvp_register_owner of an active owner", rc, KVP_EOWNER);
		return;
	}
	if (expect(w, s, "kvp_register_owner", rc, KVP_OK))
		o->registered = true;
}

static void do_release(st_world *w, st_slot *s, st_owner *o)
{
	int rc = kvp_release_owner(w->pool, o->id);
	if (!active(o)) {
		expect(w, s, "kvp_release_owner of an inactive owner", rc, KVP_ENOENT);
		return;
	}
	if (expect(w, s, "kvp_release_owner", rc, KVP_OK))
		o->registered = false; /* still active while it holds blocks */
}

static void do_raw_alloc(st_world *w, st_slot *s)
{
	if (s->n_raw == ST_RAW)
		return;
	int stream = (int)rnd(s, 2);
	kvp_ref ref;
	int rc = kvp_alloc_block(w->pool, (kvp_stream)stream, KVP_FP16, &ref);
	if (rc == KVP_EEXHAUSTED) {
		s->c.exhausted++;
		return;
	}
	if (!expect(w, s, "kvp_alloc_block", rc, KVP_OK))
		return;
	s->raw[s->n_raw++] =
	    (st_mref){.ref = ref, .n_used = w->block_size, .stream = (uint8_t)stream};
	s->c.allocated++;
}

static void do_raw_free(st_world *w, st_slot *s)
{
	if (s->n_raw == 0)
		return;
	size_t i = rnd(s, s->n_raw);
	if (!expect(w, s, "kvp_free_block", kvp_free_block(w->pool, s->raw[i].ref), KVP_OK))
		return;
	stale_push(s, s->raw[i].ref);
	s->raw[i] = s->raw[--s->n_raw];
	s->c.freed++;
}

static void do_stale(st_world *w, st_slot *s)
{
	if (s->n_stale == 0)
		return;
	kvp_ref ref = s->stale[rnd(s, s->n_stale)];
	kvp_block_info info;
	int rc;
	switch (rnd(s, 3)) {
	case 0: /* skipped and counted, never an error */
		if (expect(w, s, "kvp_free of a stale ref", kvp_free(w->pool, &ref, 1), KVP_OK))
			s->c.stale_frees++;
		break;
	case 1:
		expect(w, s, "kvp_block_set_used with a stale ref",
		       kvp_block_set_used(w->pool, ref, 1), KVP_ENOENT);
		break;
	default:
		rc = kvp_block_get(w->pool, ref, &info);
		if (rc == KVP_OK && info.in_use)
			violation(s, w->log,
			          "kvp_block_get of freed ref %#" PRIx64
			          " says in use (owner %#" PRIx64
			          "): a stale ref sees another holder's block",
			          ref, info.owner);
		else if (rc != KVP_OK && rc != KVP_ENOENT)
			violation(s, w->log, "kvp_block_get of a stale ref returned %s",
			          kvp_strerror(rc));
	}
}

/* Compare one model ref with kvp_block_get; @owner NULL for a raw block. */
static void check_ref(st_world *w, st_slot *s, const st_mref *m, const st_owner *owner)
{
	kvp_block_info info;
	int rc = kvp_block_get(w->pool, m->ref, &info);
	if (rc != KVP_OK) {
		violation(s, w->log, "kvp_block_get of held ref %#" PRIx64 " returned %s", m->ref,
		          kvp_strerror(rc));
		return;
	}
	if (!info.in_use || info.id != KVP_REF_ID(m->ref) || info.n_used != m->n_used ||
	    (int)info.stream != m->stream || (owner != NULL && info.owner != owner->id))
		violation(s, w->log,
		          "block %u: pool says in_use=%d owner=%#" PRIx64 " n_used=%u stream=%d, "
		          "model says in use by %#" PRIx64 ", n_used=%u stream=%d",
		          KVP_REF_ID(m->ref), info.in_use, info.owner, info.n_used,
		          (int)info.stream, owner ? owner->id : 0, m->n_used, m->stream);
}

static st_mref *pick_ref(st_slot *s, st_owner **owner)
{
	st_owner *o = pick_owner_with_blocks(s);
	if (o != NULL && (s->n_raw == 0 || rnd(s, 4) != 0)) {
		*owner = o;
		return &o->refs[rnd(s, o->n)];
	}
	*owner = NULL;
	return s->n_raw ? &s->raw[rnd(s, s->n_raw)] : NULL;
}

static void do_get(st_world *w, st_slot *s)
{
	st_owner *o;
	st_mref *m = pick_ref(s, &o);
	if (m != NULL)
		check_ref(w, s, m, o);
}

static void do_set_used(st_world *w, st_slot *s)
{
	st_owner *o;
	st_mref *m = pick_ref(s, &o);
	if (m == NULL)
		return;
	uint32_t v = (uint32_t)rnd(s, w->block_size + 2);
	int rc = kvp_block_set_used(w->pool, m->ref, v);
	if (v > w->block_size) {
		expect(w, s, "kvp_block_set_used past block_size", rc, KVP_ERANGE);
		return;
	}
	if (expect(w, s, "kvp_block_set_used", rc, KVP_OK))
		m->n_used = v;
}

static void check_blocks_for(st_world *w, st_slot *s, const st_owner *o, bool quiet_enoent)
{
	size_t n = 0, cap = o->n + 4;
	kvp_ref *refs = malloc(cap * sizeof *refs);
	if (refs == NULL)
		return;
	int rc = kvp_blocks_for(w->pool, o->id, refs, cap, &n);
	if (!active(o)) {
		if (rc != KVP_ENOENT && !(quiet_enoent && rc == KVP_OK && n == 0))
			violation(s, w->log,
			          "kvp_blocks_for of inactive owner %#" PRIx64 " returned %s (%zu)",
			          o->id, kvp_strerror(rc), n);
	} else if (rc != KVP_OK) {
		violation(s, w->log, "kvp_blocks_for of owner %#" PRIx64 " returned %s", o->id,
		          kvp_strerror(rc));
	} else if (n != o->n) {
		violation(s, w->log, "owner %#" PRIx64 " holds %zu blocks, the model says %zu",
		          o->id, n, o->n);
	} else {
		for (size_t i = 0; i < n; i++) {
			if (refs[i] != o->refs[i].ref) {
				violation(s, w->log,
				          "owner %#" PRIx64 " block %zu is %#" PRIx64
				          ", the model says %#" PRIx64 " (allocation order)",
				          o->id, i, refs[i], o->refs[i].ref);
				break;
			}
		}
	}
	free(refs);
}

static void do_stats(st_world *w, st_slot *s)
{
	kvp_stats st, hist[4];
	char line[256];
	if (!expect(w, s, "kvp_pool_stats", kvp_pool_stats(w->pool, &st), KVP_OK))
		return;
	if (kvp_stats_format(&st, line, sizeof line) <= 0)
		violation(s, w->log, "kvp_stats_format failed");
	uint32_t ids = kvp_pool_n_ids(w->pool);
	size_t fk = kvp_n_free(w->pool, KVP_K), fv = kvp_n_free(w->pool, KVP_V);
	if (fk > ids || fv > ids || st.n_blocks > ids || kvp_pool_n_retired_ids(w->pool) > ids)
		violation(s, w->log,
		          "free counts K %zu V %zu or managed %" PRIu64 " above blocks created %u",
		          fk, fv, st.n_blocks, ids);
	size_t nh = kvp_pool_history(w->pool, hist, 4);
	if (nh > 4)
		violation(s, w->log, "kvp_pool_history wrote %zu of 4", nh);
}

static void do_shrink(st_world *w, st_slot *s)
{
	uint32_t retired = 0;
	/*
	 * Growth reuses retired ids, so shrink + regrow cycles keep the id count
	 * bounded; max_ids is a safety net that a correct pool never reaches
	 * (the final summary prints the ids created).  One shrink per thread
	 * per phase keeps shrink a minority operation.
	 */
	if (s->shrunk || kvp_pool_n_ids(w->pool) >= w->max_ids)
		return;
	s->shrunk = true;
	int stream = (int)rnd(s, 2);
	uint32_t target = 64 + (uint32_t)rnd(s, 448);
	if (expect(w, s, "kvp_shrink", kvp_shrink(w->pool, (kvp_stream)stream, target, &retired),
	           KVP_OK))
		s->c.retired += retired;
}

static void do_contest(st_world *w, st_slot *s)
{
	st_owner o = {.id = SHARED_BASE + rnd(s, ST_SHARED)};
	int rc = kvp_register_owner(w->pool, o.id);
	if (rc == KVP_EOWNER)
		return; /* another thread holds it */
	if (!expect(w, s, "kvp_register_owner (contested)", rc, KVP_OK))
		return;
	o.registered = true;
	/* We won: the id is ours alone until free_all releases it. */
	do_alloc(w, s, &o, false);
	if (o.n > 0 && rnd(s, 2))
		do_alloc(w, s, &o, false);
	check_blocks_for(w, s, &o, false);
	do_free_all(w, s, &o);
	free(o.refs);
}

/*
 * A burst of new requests: ST_BURST owner ids this slot never used before
 * in this burst's range, or (every other burst) ids from kvp_owner_new,
 * each get one block, are checked, then freed.  More owners than the pool
 * keeps spare records for, so owner records come from the system
 * allocator, and fault injection can make them fail.  A minted id that
 * named an active owner would merge two owners, which the list check
 * catches.
 */
static void do_owner_burst(st_world *w, st_slot *s)
{
	st_owner burst[ST_BURST];
	bool minted = rnd(s, 2) == 0;
	memset(burst, 0, sizeof burst);
	for (unsigned j = 0; j < ST_BURST; j++) {
		if (!minted ||
		    !expect(w, s, "kvp_owner_new", kvp_owner_new(w->pool, &burst[j].id), KVP_OK))
			burst[j].id = ((uint64_t)(s->index + 1) << 32) | (0x10000u + j);
		do_alloc(w, s, &burst[j], false);
	}
	for (unsigned j = 0; j < ST_BURST; j++)
		check_blocks_for(w, s, &burst[j], false);
	for (unsigned j = 0; j < ST_BURST; j++) {
		do_free_all(w, s, &burst[j]);
		free(burst[j].refs);
	}
}

/* --- short-lived threads: leave blocks and cached frees behind, then exit -------------- */

typedef struct eph_arg {
	st_world *w;
	st_slot *s;
} eph_arg;

static void *eph_main(void *p)
{
	eph_arg *a = p;
	st_slot *s = a->s;
	unsigned n = 1 + (unsigned)rnd(s, 4);
	for (unsigned i = 0; i < n; i++) {
		do_alloc(a->w, s, &s->eph, false);
		/* Free half of them one by one: they land in this thread's cache. */
		for (size_t k = rnd(s, 2) ? s->eph.n / 2 : 0; k > 0; k--) {
			kvp_ref r = s->eph.refs[s->eph.n - 1].ref;
			if (!expect(a->w, s, "kvp_free (short-lived thread)",
			            kvp_free(a->w->pool, &r, 1), KVP_OK))
				break;
			stale_push(s, r);
			s->c.freed++;
			s->eph.n--;
		}
	}
	return NULL;
}

static void do_ephemeral(st_world *w, st_slot *s)
{
	pthread_t t;
	eph_arg a = {w, s};
	if (pthread_create(&t, NULL, eph_main, &a) != 0)
		return;
	pthread_join(t, NULL);
	if (s->eph.n > 64) /* keep the adopted owner small */
		do_free_all(w, s, &s->eph);
}

/* --- public ------------------------------------------------------------------------- */

/* The operations that act on an owner picked at random (pick_owner). */
static void op_alloc(st_world *w, st_slot *s)
{
	do_alloc(w, s, pick_owner(s), false);
}

static void op_alloc_short_cap(st_world *w, st_slot *s)
{
	do_alloc(w, s, pick_owner(s), true);
}

static void op_free_all(st_world *w, st_slot *s)
{
	do_free_all(w, s, pick_owner(s));
}

static void op_register(st_world *w, st_slot *s)
{
	do_register(w, s, pick_owner(s));
}

static void op_release(st_world *w, st_slot *s)
{
	do_release(w, s, pick_owner(s));
}

static void op_blocks_for(st_world *w, st_slot *s)
{
	check_blocks_for(w, s, pick_owner(s), false);
}

/* Each operation's step, by st_op. */
static void (*const op_fn[OP_N])(st_world *, st_slot *) = {
    [OP_ALLOC] = op_alloc,
    [OP_ALLOC_SHORT_CAP] = op_alloc_short_cap,
    [OP_FREE_SOME] = do_free_some,
    [OP_FREE_BOGUS] = do_free_bogus,
    [OP_FREE_ALL] = op_free_all,
    [OP_REGISTER] = op_register,
    [OP_RELEASE] = op_release,
    [OP_RAW_ALLOC] = do_raw_alloc,
    [OP_RAW_FREE] = do_raw_free,
    [OP_STALE] = do_stale,
    [OP_GET] = do_get,
    [OP_SET_USED] = do_set_used,
    [OP_BLOCKS_FOR] = op_blocks_for,
    [OP_STATS] = do_stats,
    [OP_SHRINK] = do_shrink,
    [OP_CONTEST] = do_contest,
    [OP_EPHEMERAL] = do_ephemeral,
    [OP_OWNER_BURST] = do_owner_burst,
};

void st_step(st_world *w, st_slot *s)
{
	unsigned r = (unsigned)rnd(s, w->weight_total), op = 0;
	while (r >= weights[op]) {
		r -= weights[op];
		op++;
	}
	s->c.ops[op]++;
	op_fn[op](w, s);
}

int st_world_init(st_world *w, kvp_pool *pool, unsigned n, uint64_t seed, FILE *log)
{
	memset(w, 0, sizeof *w);
	w->pool = pool;
	w->block_size = kvp_pool_block_size(pool);
	w->initial_blocks = kvp_pool_n_ids(pool);
	w->n_slots = n;
	w->log = log ? log : stderr;
	for (int i = 0; i < OP_N; i++)
		w->weight_total += weights[i];
	w->slots = calloc(n, sizeof *w->slots);
	if (w->slots == NULL)
		return -1;
	for (unsigned i = 0; i < n; i++) {
		st_slot *s = &w->slots[i];
		s->index = i;
		for (unsigned k = 0; k < ST_OWNERS; k++)
			s->owners[k].id = ((uint64_t)(i + 1) << 32) | k;
		s->eph.id = ((uint64_t)(i + 1) << 32) | 0xffff;
		s->scratch = malloc((ST_MAX_TOKENS_BLOCKS + 1) * sizeof *s->scratch);
		if (s->scratch == NULL)
			return -1;
		st_seed_slot(s, seed, 0);
	}
	return 0;
}

void st_world_free(st_world *w)
{
	for (unsigned i = 0; w->slots && i < w->n_slots; i++) {
		st_slot *s = &w->slots[i];
		for (unsigned k = 0; k < ST_OWNERS; k++)
			free(s->owners[k].refs);
		free(s->eph.refs);
		free(s->scratch);
	}
	free(w->slots);
	w->slots = NULL;
}

void st_seed_slot(st_slot *s, uint64_t seed, uint64_t phase)
{
	uint64_t h = seed ^ (0x9e3779b97f4a7c15ull * (phase + 1));
	h ^= (uint64_t)(s->index + 1) * 0xbf58476d1ce4e5b9ull;
	s->rng = su_rand(&h);
	s->shrunk = false;
}

void st_total(const st_world *w, st_counts *out)
{
	*out = w->mainc;
	for (unsigned i = 0; i < w->n_slots; i++) {
		const st_counts *c = &w->slots[i].c;
		for (int k = 0; k < OP_N; k++)
			out->ops[k] += c->ops[k];
		out->allocated += c->allocated;
		out->freed += c->freed;
		out->stale_frees += c->stale_frees;
		out->exhausted += c->exhausted;
		out->retired += c->retired;
		out->enomem += c->enomem;
	}
}

/* --- invariants (the pool is quiescent) ------------------------------------------------ */

static st_slot checker = {.index = CHECKER};

static uint64_t checked(st_world *w, int kind, uint64_t before)
{
	w->checks_run++;
	w->check_kinds[kind]++;
	uint64_t found = checker.violations - before;
	if (found)
		w->checks_failed++;
	return found;
}

typedef struct holder {
	uint32_t slot_plus1; /* 0: nobody */
} holder;

static void claim(st_world *w, holder *h, uint32_t ids, kvp_ref ref, unsigned slot)
{
	uint32_t id = KVP_REF_ID(ref);
	if (id >= ids) {
		violation(&checker, w->log, "held block id %u >= blocks created %u", id, ids);
		return;
	}
	if (h[id].slot_plus1 != 0)
		violation(&checker, w->log, "block %u is held twice (slots %u and %u)", id,
		          h[id].slot_plus1 - 1, slot);
	h[id].slot_plus1 = slot + 1;
}

/* The owner @k of slot @s: one of its ST_OWNERS, or (k == ST_OWNERS) its short-lived one. */
static st_owner *slot_owner(st_slot *s, unsigned k)
{
	return k < ST_OWNERS ? &s->owners[k] : &s->eph;
}

/* 0: every owner's list equals the model, in allocation order; returns the blocks held. */
static uint64_t check_lists(st_world *w)
{
	uint64_t before = checker.violations, held = 0;
	for (unsigned i = 0; i < w->n_slots; i++) {
		st_slot *s = &w->slots[i];
		for (unsigned k = 0; k <= ST_OWNERS; k++) {
			st_owner *o = slot_owner(s, k);
			check_blocks_for(w, &checker, o, false);
			held += o->n;
		}
		held += s->n_raw;
	}
	checked(w, 0, before);
	return held;
}

/* 1: no block in two holders' hands. */
static void check_single_holder(st_world *w, uint32_t ids)
{
	uint64_t before = checker.violations;
	holder *h = calloc(ids ? ids : 1, sizeof *h);
	if (h == NULL) {
		violation(&checker, w->log, "harness out of memory");
	} else {
		for (unsigned i = 0; i < w->n_slots; i++) {
			st_slot *s = &w->slots[i];
			for (unsigned k = 0; k <= ST_OWNERS; k++) {
				st_owner *o = slot_owner(s, k);
				for (size_t j = 0; j < o->n; j++)
					claim(w, h, ids, o->refs[j].ref, i);
			}
			for (size_t j = 0; j < s->n_raw; j++)
				claim(w, h, ids, s->raw[j].ref, i);
		}
		free(h);
	}
	checked(w, 1, before);
}

/* 2: each held block is in use, by its owner, with the model's n_used. */
static void check_held(st_world *w)
{
	uint64_t before = checker.violations;
	for (unsigned i = 0; i < w->n_slots; i++) {
		st_slot *s = &w->slots[i];
		for (unsigned k = 0; k <= ST_OWNERS; k++) {
			st_owner *o = slot_owner(s, k);
			for (size_t j = 0; j < o->n; j++)
				check_ref(w, &checker, &o->refs[j], o);
		}
		for (size_t j = 0; j < s->n_raw; j++)
			check_ref(w, &checker, &s->raw[j], NULL);
	}
	checked(w, 2, before);
}

/* 3: conservation: in use + free + retired (not yet reused) = created. */
static void check_conservation(st_world *w, const kvp_stats *st, uint32_t ids, uint64_t held)
{
	uint64_t before = checker.violations;
	size_t fk = kvp_n_free(w->pool, KVP_K), fv = kvp_n_free(w->pool, KVP_V);
	uint64_t in_use = kvp_stats_blocks_in_use(st);
	uint32_t retired_now = kvp_pool_n_retired_ids(w->pool);
	if (in_use != held || in_use + fk + fv + retired_now != ids ||
	    st->n_blocks + retired_now != ids || retired_now > st->n_retired)
		violation(&checker, w->log,
		          "in use %" PRIu64 " (models hold %" PRIu64
		          ") + free K %zu + V %zu + retired ids %u (retired ever %" PRIu64
		          ") != created %u (managed %" PRIu64 ")",
		          in_use, held, fk, fv, retired_now, st->n_retired, ids, st->n_blocks);
	checked(w, 3, before);
}

/* 4: every counter agrees with the harness's own count; the peak is possible. */
static void check_counters(st_world *w, const kvp_stats *st, uint32_t ids)
{
	uint64_t before = checker.violations;
	st_counts c;
	st_total(w, &c);
	if (st->n_allocations != c.allocated || st->n_frees != c.freed ||
	    st->n_stale_frees != c.stale_frees || st->n_exhausted != c.exhausted ||
	    st->n_retired != c.retired ||
	    st->n_grown != st->n_blocks + st->n_retired - w->initial_blocks)
		violation(&checker, w->log,
		          "stats disagree (pool/harness): allocations %" PRIu64 "/%" PRIu64
		          " frees %" PRIu64 "/%" PRIu64 " stale %" PRIu64 "/%" PRIu64
		          " exhausted %" PRIu64 "/%" PRIu64 " retired %" PRIu64 "/%" PRIu64
		          " grown %" PRIu64 "/%u",
		          st->n_allocations, c.allocated, st->n_frees, c.freed, st->n_stale_frees,
		          c.stale_frees, st->n_exhausted, c.exhausted, st->n_retired, c.retired,
		          st->n_grown,
		          (uint32_t)(st->n_blocks + st->n_retired - w->initial_blocks));
	/* No more blocks than the growth cap can ever be in use at once. */
	uint64_t in_use = kvp_stats_blocks_in_use(st);
	uint64_t cap = w->max_blocks ? w->max_blocks : ids;
	if (st->peak_blocks_in_use < in_use || st->peak_blocks_in_use > cap)
		violation(&checker, w->log,
		          "peak_blocks_in_use %" PRIu64 " is impossible: in use now %" PRIu64
		          ", at most %" PRIu64 " blocks can ever be in use (growth cap)",
		          st->peak_blocks_in_use, in_use, cap);
	checked(w, 4, before);
}

/* 5: contested owners were all released by their winners. */
static void check_contested(st_world *w)
{
	uint64_t before = checker.violations;
	for (unsigned j = 0; j < ST_SHARED; j++) {
		st_owner o = {.id = SHARED_BASE + j};
		check_blocks_for(w, &checker, &o, false);
	}
	checked(w, 5, before);
}

uint64_t st_check(st_world *w)
{
	uint64_t start = checker.violations;
	uint32_t ids = kvp_pool_n_ids(w->pool);
	uint64_t held = check_lists(w);
	check_single_holder(w, ids);
	check_held(w);
	kvp_stats st;
	if (kvp_pool_stats(w->pool, &st) != KVP_OK) {
		violation(&checker, w->log, "kvp_pool_stats failed");
		memset(&st, 0, sizeof st);
	}
	check_conservation(w, &st, ids, held);
	check_counters(w, &st, ids);
	check_contested(w);
	return checker.violations - start;
}

uint64_t st_drain_check(st_world *w)
{
	uint64_t before = checker.violations;
	for (int si = 0; si < 2; si++) {
		kvp_stats a, b;
		kvp_pool_stats(w->pool, &a);
		uint32_t ids = kvp_pool_n_ids(w->pool);
		size_t nf = kvp_n_free(w->pool, (kvp_stream)si);
		if (nf == 0 || nf > UINT32_MAX / w->block_size)
			continue;
		kvp_ref *refs = malloc(nf * sizeof *refs);
		if (refs == NULL)
			continue;
		size_t n = 0;
		int rc = kvp_allocate(w->pool, (kvp_stream)si, (uint32_t)nf * w->block_size,
		                      DRAIN_OWNER, KVP_FP16, refs, nf, &n);
		kvp_pool_stats(w->pool, &b);
		if (rc != KVP_OK)
			violation(&checker, w->log,
			          "stream %d: %zu blocks counted free, but taking them all at once "
			          "failed: %s",
			          si, nf, kvp_strerror(rc));
		else if (b.n_grown != a.n_grown || kvp_pool_n_ids(w->pool) != ids)
			violation(
			    &checker, w->log,
			    "stream %d: taking the %zu free blocks had to grow the pool (free "
			    "blocks lost in some cache)",
			    si, nf);
		if (rc == KVP_OK) {
			w->mainc.allocated += n;
			if (kvp_free_all(w->pool, DRAIN_OWNER) != KVP_OK)
				violation(&checker, w->log,
				          "kvp_free_all of the drain owner failed");
			else
				w->mainc.freed += n;
		} else if (rc == KVP_EEXHAUSTED) {
			w->mainc.exhausted++;
		}
		free(refs);
	}
	return checked(w, 6, before);
}

/* Make room under the growth cap: retire every free block (counted as retired). */
static void retire_free(st_world *w)
{
	for (int si = 0; si < 2; si++) {
		uint32_t retired = 0;
		if (kvp_shrink(w->pool, (kvp_stream)si, 0, &retired) == KVP_OK)
			w->mainc.retired += retired;
		else
			violation(&checker, w->log, "kvp_shrink to 0 free failed");
	}
}

/* A growth that failed with ENOMEM must have left the pool as it was (@a). */
static void check_unchanged(st_world *w, const kvp_stats *a, uint32_t ids, size_t nf)
{
	kvp_stats b;
	st_owner probe = {.id = PROBE_OWNER};
	kvp_pool_stats(w->pool, &b);
	w->probe_enomem++;
	if (b.n_allocations != a->n_allocations || b.n_frees != a->n_frees ||
	    b.n_grown != a->n_grown || b.n_blocks != a->n_blocks ||
	    b.n_exhausted != a->n_exhausted || kvp_pool_n_ids(w->pool) != ids ||
	    kvp_n_free(w->pool, KVP_K) != nf)
		violation(&checker, w->log,
		          "a failed growth (ENOMEM) changed the pool: allocations %" PRIu64
		          "->%" PRIu64 " grown %" PRIu64 "->%" PRIu64 " managed %" PRIu64
		          "->%" PRIu64 " created %u->%u free K %zu->%zu",
		          a->n_allocations, b.n_allocations, a->n_grown, b.n_grown, a->n_blocks,
		          b.n_blocks, ids, kvp_pool_n_ids(w->pool), nf, kvp_n_free(w->pool, KVP_K));
	check_blocks_for(w, &checker, &probe, false);
}

uint64_t st_fault_probe(st_world *w)
{
	uint64_t before = checker.violations;
	kvp_stats a;
	if (kvp_pool_n_ids(w->pool) >= w->max_ids)
		return 0;
	retire_free(w);
	kvp_pool_stats(w->pool, &a);
	uint32_t ids = kvp_pool_n_ids(w->pool);
	size_t nf = kvp_n_free(w->pool, KVP_K);
	/* Growth reuses retired ids first (no memory needed for those): ask for
	 * one segment of ids more than free + retired, so it must make new
	 * block metadata. */
	size_t reuse = kvp_pool_n_retired_ids(w->pool);
	size_t need = nf + reuse + 1025;
	if (a.n_blocks + reuse + 1025 > w->max_blocks || need > UINT32_MAX / w->block_size)
		return 0;
	kvp_ref *refs = malloc(need * sizeof *refs);
	if (refs == NULL)
		return 0;
	size_t n = 0;
	kvpi_fault_inject(0, -1);
	int rc = kvp_allocate(w->pool, KVP_K, (uint32_t)(need * w->block_size), PROBE_OWNER,
	                      KVP_FP16, refs, need, &n);
	kvpi_fault_inject(0, 0);
	if (rc == KVP_OK) {
		/* The pool found memory it did not need to ask for: legal, just no probe. */
		w->mainc.allocated += n;
		if (kvp_free_all(w->pool, PROBE_OWNER) == KVP_OK)
			w->mainc.freed += n;
		else
			violation(&checker, w->log, "kvp_free_all of the probe owner failed");
	} else if (rc != KVP_ENOMEM) {
		violation(&checker, w->log,
		          "growth with the system allocator failing returned %s, not %s",
		          kvp_strerror(rc), kvp_strerror(KVP_ENOMEM));
	} else {
		check_unchanged(w, &a, ids, nf);
	}
	free(refs);
	return checked(w, 8, before);
}

void st_release_all(st_world *w)
{
	uint64_t before = checker.violations;
	for (unsigned i = 0; i < w->n_slots; i++) {
		st_slot *s = &w->slots[i];
		for (unsigned k = 0; k <= ST_OWNERS; k++) {
			st_owner *o = k < ST_OWNERS ? &s->owners[k] : &s->eph;
			if (!active(o))
				continue;
			if (kvp_free_all(w->pool, o->id) != KVP_OK) {
				violation(&checker, w->log, "final kvp_free_all failed");
				continue;
			}
			w->mainc.freed += o->n;
			o->n = 0;
			o->registered = false;
		}
		for (size_t j = 0; j < s->n_raw; j++) {
			if (kvp_free_block(w->pool, s->raw[j].ref) != KVP_OK)
				violation(&checker, w->log, "final kvp_free_block failed");
			else
				w->mainc.freed++;
		}
		s->n_raw = 0;
	}
	kvp_stats st;
	kvp_pool_stats(w->pool, &st);
	size_t fk = kvp_n_free(w->pool, KVP_K), fv = kvp_n_free(w->pool, KVP_V);
	if (kvp_stats_blocks_in_use(&st) != 0 || fk + fv != st.n_blocks)
		violation(&checker, w->log,
		          "at the end: in use %" PRIu64 ", free K %zu + V %zu != managed %" PRIu64,
		          kvp_stats_blocks_in_use(&st), fk, fv, st.n_blocks);
	checked(w, 7, before);
}

uint64_t st_violations(const st_world *w)
{
	uint64_t v = checker.violations;
	for (unsigned i = 0; i < w->n_slots; i++)
		v += w->slots[i].violations;
	return v;
}

const char *st_first_violation(const st_world *w)
{
	for (unsigned i = 0; i < w->n_slots; i++) {
		if (w->slots[i].violations)
			return w->slots[i].first_violation;
	}
	return checker.violations ? checker.first_violation : "";
}
