/*
 * kvpool/status.h - status codes returned by every fallible kvpool call.
 *
 * Every function that can fail returns int: KVP_OK (0) or one of the
 * negative kvp_status values below.  A failing call leaves no partial
 * effect behind.  kvp_strerror() is thread-safe and never fails.
 */
#ifndef KVPOOL_STATUS_H
#define KVPOOL_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kvp_status {
	KVP_OK = 0,
	KVP_EINVAL = -1,     /* bad argument or configuration */
	KVP_EEXHAUSTED = -2, /* not enough free blocks, and growth cannot cover the gap */
	KVP_EOWNER = -3,     /* owner id already active */
	KVP_ENOMEM = -4,     /* the system allocator failed */
	KVP_ERANGE = -5,     /* write past a block's end, or an output array too small */
	KVP_ENOENT = -6,     /* unknown owner, or a block id never handed out or retired */
	KVP_EEXIST = -7,     /* another block is already published under that prefix key */
	KVP_EREMOTE = -8,    /* the remote tier did not answer in time, or is unreachable */
	KVP_ENOTSUP = -9,    /* the library was built without this feature (the remote tier) */
} kvp_status;

/**
 * kvp_strerror - a static, human-readable name for a status code
 * @status: a kvp_status value (or any int)
 *
 * Returns a string with static storage duration, "unknown status" for values
 * that are not kvp_status codes.  Thread-safe, wait-free.
 */
const char *kvp_strerror(int status);

#ifdef __cplusplus
}
#endif
#endif /* KVPOOL_STATUS_H */
