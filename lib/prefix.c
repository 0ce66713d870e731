/*
 * lib/prefix.c - the public prefix-cache calls (kvpool/prefix.h).
 */
#include <kvpool/prefix.h>

#include "lib/pool_internal.h"

int kvp_prefix_match(kvp_pool *p, kvp_stream stream, kvp_format format, const kvp_hash *keys,
                     size_t n_keys, kvp_owner owner, kvp_ref *refs, size_t refs_cap,
                     size_t *n_matched)
{
	(void)stream, (void)format, (void)keys, (void)n_keys, (void)owner, (void)refs,
	    (void)refs_cap;
	if (n_matched)
		*n_matched = 0;
	if (!p || !p->prefix)
		return KVP_EINVAL;
	return KVP_EINVAL;
}

int kvp_prefix_publish(kvp_pool *p, kvp_ref ref, kvp_hash key)
{
	(void)ref, (void)key;
	if (!p || !p->prefix)
		return KVP_EINVAL;
	return KVP_EINVAL;
}

int kvp_free_owned(kvp_pool *p, kvp_owner owner, const kvp_ref *refs, size_t n)
{
	(void)owner, (void)refs, (void)n;
	if (!p || !p->prefix)
		return KVP_EINVAL;
	return KVP_EINVAL;
}

size_t kvp_prefix_reset(kvp_pool *p)
{
	if (!p || !p->prefix)
		return 0;
	return 0;
}
