/*
 * lib/prefix/prefix_mode.c - the prefix cache as a mode of the pool, and
 * kvp_pool_create, which puts it on.
 *
 * The pool (lib/pool) knows the layer above it only through the table of
 * struct kvpi_pool_mode; this file fills that table with the prefix
 * layer's calls.  kvp_pool_create lives here, in the layer that may add a
 * mode: it makes a plain pool (kvpi_pool_create) and, when the config asks
 * for the prefix cache, attaches the prefix state before anyone else can
 * see the pool.  lib/pool therefore includes nothing of lib/prefix
 * (tools/check_layers.sh holds it to that).
 */
#include "lib/prefix/prefix_internal.h"

static uint64_t mode_n_cached(struct kvp_pool *p, int si)
{
	return kvpi_pfx_n_cached(p->prefix, si);
}

static int mode_extend(struct kvp_pool *p, uint32_t n_ids)
{
	return kvpi_pfx_extend(p->prefix, n_ids);
}

static const struct kvpi_pool_mode prefix_mode = {
    .allocate = kvpi_pfx_allocate,
    .alloc_block = kvpi_pfx_alloc_block,
    .free = kvpi_pfx_free,
    .free_all = kvpi_pfx_free_all,
    .shrink = kvpi_pfx_shrink,
    .block_get = kvpi_pfx_block_get,
    .n_cached = mode_n_cached,
    .extend = mode_extend,
    .destroy = kvpi_pfx_destroy,
};

int kvp_pool_create(const kvp_pool_config *cfg, kvp_pool **out)
{
	kvp_pool_config def;
	if (!out)
		return KVP_EINVAL;
	*out = NULL;
	if (!cfg) {
		kvp_pool_config_init(&def);
		cfg = &def;
	}
	struct kvp_pool *p;
	int rc = kvpi_pool_create(cfg, &p);
	if (rc != KVP_OK)
		return rc;
	if (cfg->prefix_cache) {
		/* Set first: a create that fails half-way is undone by the
		 * mode's destroy, which takes any partial state. */
		p->mode = &prefix_mode;
		if (kvpi_pfx_create(p, cfg) != 0) {
			kvpi_pool_discard(p);
			return KVP_ENOMEM;
		}
	}
	*out = p;
	return KVP_OK;
}
