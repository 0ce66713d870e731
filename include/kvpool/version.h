/*
 * kvpool/version.h - the library's version, at compile time and at run time.
 *
 * KVP_VERSION_* describe the headers a program was compiled against;
 * kvp_version() returns the version of the library it runs with.  The two
 * differ when a program built against one release loads another
 * libkvpool.so.0 (same ABI, KVPOOL_0 symbol version).
 *
 * This header is the one place the version is written.  CMakeLists.txt,
 * tools/install.sh (kvpool.pc, the CMake package, the .so's file name) and
 * the tests read KVP_VERSION from here; python/pyproject.toml repeats it
 * and python/tests/test_loading.py fails when the two disagree.  The
 * string must stay the MAJOR.MINOR.PATCH macros spelled out.
 *
 * Synchronization: kvp_version is pure and thread-safe.
 */
#ifndef KVPOOL_VERSION_H
#define KVPOOL_VERSION_H

#ifdef __cplusplus
extern "C" {
#endif

#define KVP_VERSION_MAJOR 0
#define KVP_VERSION_MINOR 2
#define KVP_VERSION_PATCH 0
#define KVP_VERSION       "0.2.0"
/* One comparable number: MAJOR * 10000 + MINOR * 100 + PATCH. */
#define KVP_VERSION_NUMBER (KVP_VERSION_MAJOR * 10000 + KVP_VERSION_MINOR * 100 + KVP_VERSION_PATCH)

/**
 * kvp_version - the version of the running library
 *
 * Returns a static string "MAJOR.MINOR.PATCH", equal to KVP_VERSION of the
 * headers the library was built from.  Never NULL.  Thread-safe, pure.
 */
const char *kvp_version(void);

#ifdef __cplusplus
}
#endif
#endif /* KVPOOL_VERSION_H */
