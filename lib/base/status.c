/*
 * lib/base/status.c - status strings and format names: pure tables.
 */
#include <kvpool/pool.h>
#include <kvpool/status.h>

#include <string.h>

const char *kvp_strerror(int status)
{
	switch (status) {
	case KVP_OK:
		return "ok";
	case KVP_EINVAL:
		return "invalid argument";
	case KVP_EEXHAUSTED:
		return "block pool exhausted";
	case KVP_EOWNER:
		return "owner already active";
	case KVP_ENOMEM:
		return "out of memory";
	case KVP_ERANGE:
		return "out of range";
	case KVP_ENOENT:
		return "no such owner or block";
	case KVP_EEXIST:
		return "prefix key already published";
	case KVP_EREMOTE:
		return "remote tier unavailable";
	case KVP_ENOTSUP:
		return "not supported by this build";
	default:
		return "unknown status";
	}
}

static const char *const format_names[KVP_N_FORMATS] = {
    "fp32", "fp16", "bf16", "int8", "int4", "int2", "int1",
};

const char *kvp_format_name(kvp_format f)
{
	if ((unsigned)f >= KVP_N_FORMATS)
		return NULL;
	return format_names[f];
}

int kvp_format_parse(const char *name, kvp_format *out)
{
	if (!name || !out)
		return KVP_EINVAL;
	for (int i = 0; i < KVP_N_FORMATS; i++) {
		if (strcmp(name, format_names[i]) == 0) {
			*out = (kvp_format)i;
			return KVP_OK;
		}
	}
	return KVP_EINVAL;
}
