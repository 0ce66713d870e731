/*
 * lib/base/version.c - the library's version string.
 */
#include <kvpool/version.h>

const char *kvp_version(void)
{
	return KVP_VERSION;
}
