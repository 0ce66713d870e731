/*
 * lib/remote/remote_url.c - parse the tier's URL.
 *
 * Two forms, the ones redis-cli -u and most clients take:
 * redis://[user:password@]host[:port][/db] and unix:///path[?db=N].  A
 * password alone is written redis://:password@host.  Percent-escapes are
 * not decoded: a password with '@' or ':' belongs in an ACL user without
 * them.  Pure string work, no allocation.
 */
#include "lib/remote/remote_internal.h"

#include <stdlib.h>
#include <string.h>

/* Copy [b, e) into @dst (cap KVPI_REMOTE_STR); false when too long. */
static bool take(char *dst, const char *b, const char *e)
{
	size_t n = (size_t)(e - b);
	if (n >= KVPI_REMOTE_STR)
		return false;
	memcpy(dst, b, n);
	dst[n] = '\0';
	return true;
}

/* A decimal number in [lo, hi] spanning exactly [b, e). */
static bool number(const char *b, const char *e, long lo, long hi, int *out)
{
	long v = 0;
	if (b == e || e - b > 9)
		return false;
	for (const char *p = b; p < e; p++) {
		if (*p < '0' || *p > '9')
			return false;
		v = v * 10 + (*p - '0');
	}
	if (v < lo || v > hi)
		return false;
	*out = (int)v;
	return true;
}

static int parse_unix(const char *p, struct kvpi_remote_endpoint *ep)
{
	const char *q = strchr(p, '?');
	const char *end = q ? q : p + strlen(p);
	if (*p != '/' || end - p < 2 || !take(ep->host, p, end))
		return KVP_EINVAL;
	ep->unix_socket = true;
	if (q != NULL) {
		if (strncmp(q, "?db=", 4) != 0 ||
		    !number(q + 4, q + strlen(q), 0, 1000000, &ep->db))
			return KVP_EINVAL;
	}
	return KVP_OK;
}

static int parse_tcp(const char *p, struct kvpi_remote_endpoint *ep)
{
	const char *end = p + strlen(p);
	const char *slash = strchr(p, '/');
	const char *hostend = slash ? slash : end;
	/* user:password@ - the last '@' before the path ends it */
	const char *at = NULL;
	for (const char *s = p; s < hostend; s++)
		if (*s == '@')
			at = s;
	if (at != NULL) {
		const char *colon = memchr(p, ':', (size_t)(at - p));
		if (colon == NULL)
			return KVP_EINVAL; /* "user@" without a password says nothing */
		if (!take(ep->user, p, colon) || !take(ep->password, colon + 1, at))
			return KVP_EINVAL;
		ep->has_password = true;
		p = at + 1;
	}
	const char *portp = NULL;
	if (*p == '[') { /* [v6]:port */
		const char *rb = memchr(p, ']', (size_t)(hostend - p));
		if (rb == NULL || !take(ep->host, p + 1, rb))
			return KVP_EINVAL;
		if (rb + 1 < hostend) {
			if (rb[1] != ':')
				return KVP_EINVAL;
			portp = rb + 2;
		}
	} else {
		const char *colon = memchr(p, ':', (size_t)(hostend - p));
		if (!take(ep->host, p, colon ? colon : hostend))
			return KVP_EINVAL;
		portp = colon ? colon + 1 : NULL;
	}
	if (ep->host[0] == '\0')
		return KVP_EINVAL;
	ep->port = 6379;
	if (portp != NULL && !number(portp, hostend, 1, 65535, &ep->port))
		return KVP_EINVAL;
	if (slash != NULL && slash + 1 < end && !number(slash + 1, end, 0, 1000000, &ep->db))
		return KVP_EINVAL;
	return KVP_OK;
}

int kvpi_remote_parse_url(const char *url, struct kvpi_remote_endpoint *ep)
{
	if (url == NULL || ep == NULL)
		return KVP_EINVAL;
	memset(ep, 0, sizeof *ep);
	if (strncmp(url, "unix://", 7) == 0)
		return parse_unix(url + 7, ep);
	if (strncmp(url, "redis://", 8) == 0)
		return parse_tcp(url + 8, ep);
	return KVP_EINVAL;
}

/* The defaults (kvpool/remote.h); the same with or without hiredis. */
int kvp_remote_config_init(kvp_remote_config *c)
{
	if (c == NULL)
		return KVP_EINVAL;
	*c = (kvp_remote_config){.url = NULL,
	                         .key_namespace = "kvp",
	                         .timeout_ms = 50,
	                         .write_timeout_ms = 500,
	                         .queue_cap = 4096,
	                         .expire_s = 0,
	                         .backoff_min_ms = 10,
	                         .backoff_max_ms = 1000,
	                         .max_fetch = 256,
	                         .fetch_conns = 4,
	                         .copy_rows = false,
	                         .writer_owner = UINT64_MAX};
	return KVP_OK;
}
