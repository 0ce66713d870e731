/*
 * lib/remote/remote_off.c - the remote tier's functions in a build without hiredis.
 *
 * A build that defines KVP_NO_HIREDIS (one that has no libhiredis to link)
 * keeps every public function of kvpool/remote.h, so programs link the
 * same way: kvp_remote_create says KVP_ENOTSUP and no tier ever exists.
 */
#include "lib/remote/remote_internal.h"

#include <string.h>

#ifdef KVP_NO_HIREDIS

int kvp_remote_create(kvp_storage *storage, const kvp_remote_config *c, kvp_remote **out)
{
	if (storage == NULL || c == NULL || out == NULL)
		return KVP_EINVAL;
	return KVP_ENOTSUP;
}

void kvp_remote_destroy(kvp_remote *r)
{
	(void)r;
}

int kvp_remote_publish(kvp_remote *r, kvp_ref ref, kvp_hash key)
{
	(void)r, (void)ref, (void)key;
	return KVP_EINVAL;
}

int kvp_remote_fetch(kvp_remote *r, kvp_stream stream, kvp_format format, const kvp_hash *keys,
                     size_t n_keys, kvp_owner owner, kvp_ref *refs, size_t refs_cap,
                     size_t *n_fetched)
{
	(void)r, (void)stream, (void)format, (void)keys, (void)n_keys, (void)owner, (void)refs,
	    (void)refs_cap;
	if (n_fetched != NULL)
		*n_fetched = 0;
	return KVP_EINVAL;
}

int kvp_remote_flush(kvp_remote *r, uint32_t timeout_ms)
{
	(void)r, (void)timeout_ms;
	return KVP_EINVAL;
}

int kvp_remote_get_stats(kvp_remote *r, kvp_remote_stats *out)
{
	(void)r, (void)out;
	return KVP_EINVAL;
}

int kvp_remote_to_prometheus(kvp_remote *r, const char *prefix, char *buf, size_t cap, size_t *len)
{
	(void)r, (void)prefix, (void)buf, (void)cap, (void)len;
	return KVP_EINVAL;
}

#endif /* KVP_NO_HIREDIS */
