"""Finding, loading and declaring libkvpool.so (ctypes).

Where the library comes from, first match wins (python/README.md):

1. ``$KVPOOL_LIBRARY`` (or its older name ``$KVPOOL_LIB``): the path of the
   shared object, or of a directory holding ``libkvpool.so.0`` or
   ``libkvpool.so``.  If it is set and wrong, the import fails naming it.
2. The install prefix:
   a. ``kvpool/libkvpool.so.0`` or ``kvpool/libkvpool.so``, a copy shipped
      inside the package (a wheel that bundles the library);
   b. the library directory recorded when the package was built by pip
      (``kvpool/_build_config.py``: ``$KVPOOL_PREFIX/lib`` or
      ``pkg-config --variable=libdir kvpool`` at build time);
   c. the prefix the package lives in: a package at
      ``DIR/lib/pythonX.Y/site-packages/kvpool`` (or ``dist-packages``, or
      ``DIR/lib/python3/...``) loads ``DIR/lib/libkvpool.so.0``, where
      ``tools/install.sh --prefix DIR`` puts the library;
   d. in a source tree, ``python/kvpool`` loads the tree's
      ``bazel-bin/tools/libkvpool.so``;
   e. Bazel runfiles: ``$RUNFILES_DIR`` / ``$TEST_SRCDIR`` +
      ``kvpool/tools/libkvpool.so``;
   f. the interpreter's own prefix (``sys.prefix/lib``: a virtual
      environment used as the install prefix) and ``/usr/local/lib``, the
      default prefix of ``cmake --install`` and ``tools/install.sh`` (found
      even before ``ldconfig`` has run).
3. The system's loader: ``libkvpool.so.0`` by name (``LD_LIBRARY_PATH``, the
   ``ldconfig`` cache, the default directories), then
   ``ctypes.util.find_library("kvpool")``.

The package-relative candidates come before the system search on purpose: a
package installed under a prefix should use the library of that same prefix,
not another version that happens to be in the linker's cache.

A sanitizer build of the library (``bazel build --config=asan|tsan`` leaves
one in ``bazel-bin``) cannot be loaded by an ordinary interpreter: it needs
the sanitizer runtime in the executable.  Such a candidate is skipped, and if
nothing else loads, the ImportError says which command builds the plain one.

The library is opened with :class:`ctypes.CDLL`, never ``ctypes.PyDLL``:
every call through a CDLL function releases the GIL for the duration of the
foreign call and takes it back afterwards, so Python threads calling kvpool
run in C at the same time.  ``tests/test_threads.py`` checks that every
declared function has that calling convention.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from ctypes import (
    POINTER,
    Structure,
    c_bool,
    c_char_p,
    c_double,
    c_float,
    c_int,
    c_size_t,
    c_uint32,
    c_uint64,
    c_void_p,
)
from pathlib import Path

LIBNAME = "libkvpool.so"
SONAME = "libkvpool.so.0"
ENV_VARS = ("KVPOOL_LIBRARY", "KVPOOL_LIB")  # the first set one counts

# --- constants mirrored from include/kvpool/*.h --------------------------------

KVP_OK = 0
KVP_EINVAL = -1
KVP_EEXHAUSTED = -2
KVP_EOWNER = -3
KVP_ENOMEM = -4
KVP_ERANGE = -5
KVP_ENOENT = -6
KVP_EEXIST = -7
KVP_EREMOTE = -8
KVP_ENOTSUP = -9

KVP_K, KVP_V, KVP_KV = 0, 1, 2
KVP_N_FORMATS = 7
KVP_MAX_BLOCK_SIZE = 65535
KVP_MAX_BLOCKS = 0x7FFFFFFF
KVP_MAX_THREAD_CACHE = 1048576

UINT32_MAX = 0xFFFFFFFF


class PoolConfigC(Structure):
    """struct kvp_pool_config"""

    _fields_ = [
        ("block_size", c_uint32),
        ("n_blocks", c_uint32),
        ("separate_kv", c_bool),
        ("grow_on_exhaustion", c_bool),
        ("max_blocks", c_uint32),
        ("thread_cache", c_uint32),
        ("history_len", c_uint32),
        ("prefix_cache", c_bool),
    ]


class BlockInfoC(Structure):
    """struct kvp_block_info"""

    _fields_ = [
        ("id", c_uint32),
        ("stream", c_int),
        ("format", c_int),
        ("n_used", c_uint32),
        ("owner", c_uint64),
        ("in_use", c_bool),
        ("ever_allocated", c_bool),
        ("n_holders", c_uint32),
        ("published", c_bool),
    ]


STATS_FIELDS = (
    "n_blocks",
    "n_allocations",
    "n_frees",
    "n_reused",
    "n_exhausted",
    "n_grown",
    "n_retired",
    "peak_blocks_in_use",
    "n_not_full",
    "n_stale_frees",
    "n_cached",
    "n_prefix_queries",
    "n_prefix_hits",
    "n_evictions",
)


class StatsC(Structure):
    """struct kvp_stats"""

    _fields_ = [(name, c_uint64) for name in STATS_FIELDS]


class HashC(Structure):
    """struct kvp_hash (kvpool/prefix.h)"""

    _fields_ = [("lo", c_uint64), ("hi", c_uint64)]


class RemoteConfigC(Structure):
    """struct kvp_remote_config (kvpool/remote.h)"""

    _fields_ = [
        ("url", c_char_p),
        ("key_namespace", c_char_p),
        ("timeout_ms", c_uint32),
        ("write_timeout_ms", c_uint32),
        ("queue_cap", c_uint32),
        ("expire_s", c_uint32),
        ("backoff_min_ms", c_uint32),
        ("backoff_max_ms", c_uint32),
        ("max_fetch", c_uint32),
        ("fetch_conns", c_uint32),
        ("copy_rows", c_bool),
        ("writer_owner", c_uint64),
    ]


KVP_REMOTE_LAT_BUCKETS = 10
REMOTE_STAT_FIELDS = (
    "hits", "misses", "corrupt", "errors", "fetches", "bytes_read", "bytes_written",
    "writes_queued", "writes_dropped", "writes_failed", "writes_skipped", "writes_done",
    "reconnects", "queue_depth",
)


class RemoteStatsC(Structure):
    """struct kvp_remote_stats (kvpool/remote.h)"""

    _fields_ = [(f, c_uint64) for f in REMOTE_STAT_FIELDS] + [
        ("lat_count", c_uint64 * (KVP_REMOTE_LAT_BUCKETS + 1)),
        ("lat_sum_us", c_uint64),
    ]


class KVCacheConfigC(Structure):
    """struct kvp_kvcache_config"""

    _fields_ = [
        ("n_layers", c_uint32),
        ("n_kv_heads", c_uint32),
        ("head_dim", c_uint32),
        ("format", c_int),
        ("owner", c_uint64),
    ]


P = POINTER
c_uint64_p = P(c_uint64)
c_float_p = P(c_float)

# name: (restype, argtypes).  Every function the package calls is here.
PROTOTYPES = {
    # status.h
    "kvp_strerror": (c_char_p, [c_int]),
    # pool.h
    "kvp_format_name": (c_char_p, [c_int]),
    "kvp_format_parse": (c_int, [c_char_p, P(c_int)]),
    "kvp_pool_config_init": (None, [P(PoolConfigC)]),
    "kvp_pool_create": (c_int, [P(PoolConfigC), P(c_void_p)]),
    "kvp_pool_destroy": (None, [c_void_p]),
    "kvp_allocate": (
        c_int,
        [c_void_p, c_int, c_uint32, c_uint64, c_int, c_uint64_p, c_size_t, P(c_size_t)],
    ),
    "kvp_free": (c_int, [c_void_p, c_uint64_p, c_size_t]),
    "kvp_free_all": (c_int, [c_void_p, c_uint64]),
    "kvp_blocks_for": (c_int, [c_void_p, c_uint64, c_uint64_p, c_size_t, P(c_size_t)]),
    "kvp_n_free": (c_size_t, [c_void_p, c_int]),
    "kvp_owner_new": (c_int, [c_void_p, P(c_uint64)]),
    "kvp_register_owner": (c_int, [c_void_p, c_uint64]),
    "kvp_release_owner": (c_int, [c_void_p, c_uint64]),
    "kvp_shrink": (c_int, [c_void_p, c_int, c_uint32, P(c_uint32)]),
    "kvp_block_get": (c_int, [c_void_p, c_uint64, P(BlockInfoC)]),
    "kvp_block_set_used": (c_int, [c_void_p, c_uint64, c_uint32]),
    "kvp_pool_block_size": (c_uint32, [c_void_p]),
    "kvp_pool_separate_kv": (c_bool, [c_void_p]),
    "kvp_pool_n_ids": (c_uint32, [c_void_p]),
    # stats.h
    "kvp_pool_stats": (c_int, [c_void_p, P(StatsC)]),
    "kvp_pool_history": (c_size_t, [c_void_p, P(StatsC), c_size_t]),
    "kvp_stats_blocks_in_use": (c_uint64, [P(StatsC)]),
    "kvp_stats_fragmentation": (c_double, [P(StatsC)]),
    "kvp_stats_format": (c_int, [P(StatsC), c_char_p, c_size_t]),
    "kvp_stats_to_prometheus": (
        c_int,
        [P(StatsC), c_char_p, c_char_p, c_size_t, P(c_size_t)],
    ),
    # report.h
    "kvp_pool_n_managed": (c_size_t, [c_void_p, c_int]),
    "kvp_pool_to_prometheus": (c_int, [c_void_p, c_char_p, c_char_p, c_size_t, P(c_size_t)]),
    "kvp_pools_to_prometheus": (
        c_int,
        [P(c_void_p), P(c_char_p), c_size_t, c_char_p, c_size_t, P(c_size_t)],
    ),
    "kvp_pool_dump": (c_int, [c_void_p, c_void_p, c_uint32]),
    # prefix.h
    "kvp_prefix_hash": (c_int, [P(HashC), c_uint64, c_void_p, c_size_t, P(HashC)]),
    "kvp_prefix_match": (
        c_int,
        [c_void_p, c_int, c_int, P(HashC), c_size_t, c_uint64, c_uint64_p, c_size_t, P(c_size_t)],
    ),
    "kvp_prefix_publish": (c_int, [c_void_p, c_uint64, HashC]),
    "kvp_prefix_publish_many": (
        c_int,
        [c_void_p, c_uint64_p, P(HashC), c_size_t, P(c_int), P(c_size_t)],
    ),
    "kvp_free_owned": (c_int, [c_void_p, c_uint64, c_uint64_p, c_size_t]),
    "kvp_prefix_reset": (c_size_t, [c_void_p]),
    # storage.h
    "kvp_storage_create": (c_int, [c_void_p, c_uint32, c_void_p, P(c_void_p)]),
    "kvp_storage_destroy": (None, [c_void_p]),
    "kvp_storage_write": (c_int, [c_void_p, c_uint64, c_uint32, c_float_p, c_uint32]),
    "kvp_storage_read_f32": (
        c_int,
        [c_void_p, c_uint64, c_float_p, c_uint32, P(c_uint32)],
    ),
    "kvp_storage_resident_bytes": (c_size_t, [c_void_p]),
    "kvp_storage_release": (c_int, [c_void_p, c_uint64]),
    # remote.h
    "kvp_remote_config_init": (c_int, [P(RemoteConfigC)]),
    "kvp_remote_create": (c_int, [c_void_p, P(RemoteConfigC), P(c_void_p)]),
    "kvp_remote_destroy": (None, [c_void_p]),
    "kvp_remote_publish": (c_int, [c_void_p, c_uint64, HashC]),
    "kvp_remote_fetch": (
        c_int,
        [c_void_p, c_int, c_int, P(HashC), c_size_t, c_uint64, c_uint64_p, c_size_t, P(c_size_t)],
    ),
    "kvp_remote_flush": (c_int, [c_void_p, c_uint32]),
    "kvp_remote_get_stats": (c_int, [c_void_p, P(RemoteStatsC)]),
    "kvp_remote_to_prometheus": (
        c_int,
        [c_void_p, c_char_p, c_char_p, c_size_t, P(c_size_t)],
    ),
    # kvcache.h
    "kvp_kvcache_create": (
        c_int,
        [c_void_p, c_void_p, c_void_p, P(KVCacheConfigC), P(c_void_p)],
    ),
    "kvp_kvcache_destroy": (None, [c_void_p]),
    "kvp_kvcache_append": (c_int, [c_void_p, c_uint32, c_float_p, c_float_p, c_uint32]),
    "kvp_kvcache_len": (c_uint32, [c_void_p, c_uint32]),
    "kvp_kvcache_gather": (c_int, [c_void_p, c_uint32, c_float_p, c_float_p]),
    "kvp_kvcache_trim": (c_int, [c_void_p, c_uint32]),
    "kvp_kvcache_attend": (
        c_int,
        [c_void_p, c_uint32, c_float_p, c_uint32, c_float, c_float_p],
    ),
    "kvp_kvcache_blocks_held": (c_size_t, [c_void_p]),
    "kvp_kvcache_release": (None, [c_void_p]),
}


def _in_dir(d: Path) -> list[Path]:
    return [d / SONAME, d / LIBNAME]


def _recorded_libdir() -> list[Path]:
    try:
        from . import _build_config  # written by setup.py when pip builds the package
    except ImportError:
        return []
    libdir = getattr(_build_config, "LIBDIR", None)
    return _in_dir(Path(libdir)) if libdir else []


def _package_candidates() -> list[Path]:
    here = Path(os.path.abspath(__file__)).parent  # .../kvpool (symlinks kept)
    out = [here / SONAME, here / LIBNAME]
    out += _recorded_libdir()
    # DIR/lib/python3[.X]/{dist,site}-packages/kvpool -> DIR/lib/libkvpool.so.0
    if len(here.parents) >= 3 and here.parents[1].name.startswith("python3"):
        out += _in_dir(here.parents[2])
    # a source tree: <repo>/python/kvpool -> <repo>/bazel-bin/tools/libkvpool.so
    out.append(here.parents[1] / "bazel-bin" / "tools" / LIBNAME)
    return out


def _runfiles_candidates() -> list[Path]:
    out = []
    for var in ("RUNFILES_DIR", "TEST_SRCDIR"):
        root = os.environ.get(var)
        if root:
            out.append(Path(root) / "kvpool" / "tools" / LIBNAME)
    return out


def _prefix_candidates() -> list[Path]:
    return _in_dir(Path(sys.prefix) / "lib") + _in_dir(Path("/usr/local/lib"))


def _env_setting() -> tuple[str, str] | None:
    for var in ENV_VARS:
        val = os.environ.get(var)
        if val:
            return var, val
    return None


def candidates() -> list[str]:
    """Every place the loader looks, in order (see the module docstring)."""
    out: list[str] = []
    env = _env_setting()
    if env:
        p = Path(env[1])
        if p.is_dir():
            out.append(str(next((c for c in _in_dir(p) if c.exists()), p / SONAME)))
        else:
            out.append(str(p))
    seen = set(out)
    for p in _package_candidates() + _runfiles_candidates() + _prefix_candidates():
        if str(p) not in seen:
            seen.add(str(p))
            out.append(str(p))
    out.append(SONAME)  # the system's loader, by name
    found = ctypes.util.find_library("kvpool")
    if found and found != SONAME:
        out.append(found)
    return out


SANITIZERS = {
    "__tsan": "ThreadSanitizer (--config=tsan)",
    "__asan": "AddressSanitizer (--config=asan)",
    "__ubsan": "UndefinedBehaviorSanitizer (--config=asan)",
    "__sanitizer": "sanitizer",
}


def sanitizer_of(error: str) -> str | None:
    """Which sanitizer a failed load's message shows the library was built with."""
    if "undefined symbol" not in error:
        return None
    for prefix, name in SANITIZERS.items():
        if "undefined symbol: " + prefix in error:
            return name
    return None


PLAIN_BUILD_HINT = (
    "build the plain library with `bazel build //tools:libkvpool.so` (no --config), "
    "or install it with `tools/install.sh --prefix DIR`, "
    "then set KVPOOL_LIBRARY to its path if it is not found by itself"
)


def _load() -> tuple[ctypes.CDLL, str]:
    tried = []
    sanitized = []
    env = _env_setting()
    for i, cand in enumerate(candidates()):
        explicit = i == 0 and env is not None
        is_path = os.sep in cand
        if is_path and not os.path.exists(cand):
            tried.append(f"{cand} (absent)")
            if explicit:
                break  # an explicit KVPOOL_LIBRARY that is wrong is an error, not a hint
            continue
        try:
            return ctypes.CDLL(cand), cand
        except OSError as e:
            san = sanitizer_of(str(e))
            if san:
                sanitized.append(f"{cand} is a {san} build, which this Python cannot load")
            tried.append(f"{cand} ({e})")
            if explicit:
                break
    msg = "kvpool: cannot load libkvpool.so"
    if sanitized:
        msg += ": " + "; ".join(sanitized) + "; " + PLAIN_BUILD_HINT + "."
    elif env:
        msg += f"; {env[0]}={env[1]} does not name a loadable library."
    else:
        msg += (
            ": not found. Install it (`cmake -B build && cmake --build build && "
            "cmake --install build`, or `tools/install.sh --prefix DIR`), then reinstall "
            "this package (`pip install ./python`) so that it records where the library is; "
            "or set KVPOOL_LIBRARY to the path of libkvpool.so.0."
        )
    raise ImportError(msg + " Looked in, in order: " + "; ".join(tried))


lib, path = _load()


class _Functions:
    """The declared kvp_* functions, resolved on first use.

    Resolution is lazy so that a library built before a part existed (say,
    storage) still serves the parts it has; a missing symbol is reported by
    name when it is first needed.
    """

    def __getattr__(self, name: str):
        try:
            restype, argtypes = PROTOTYPES[name]
        except KeyError:
            raise AttributeError(name) from None
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise NotImplementedError(f"{path} does not define {name}") from None
        fn.restype = restype
        fn.argtypes = argtypes
        setattr(self, name, fn)
        return fn


fn = _Functions()


def declared_functions() -> dict:
    """Every declared function the library defines, resolved (for tests)."""
    out = {}
    for name in PROTOTYPES:
        try:
            out[name] = getattr(fn, name)
        except NotImplementedError:
            pass
    return out


def version() -> str:
    """The library's kvp_version(); "0.0.0" for a library older than that function."""
    try:
        f = lib.kvp_version
    except AttributeError:
        return "0.0.0"
    f.restype = c_char_p
    f.argtypes = []
    return f().decode()


def text_call(call, what: str, cap: int = 4096) -> str:
    """The text a kvp_*_to_prometheus-style function writes: ``call(buf, cap,
    byref(len))`` is retried with the length it asked for."""
    from .errors import check

    need = c_size_t(0)
    while True:
        buf = ctypes.create_string_buffer(cap)
        rc = call(buf, cap, ctypes.byref(need))
        if rc == KVP_ERANGE and need.value + 1 > cap:
            cap = need.value + 1
            continue
        check(rc, what)
        return buf.raw[: need.value].decode()


_libc = None


def memstream_call(call, what: str) -> str:
    """What ``call(FILE *)`` writes, through the C library's open_memstream."""
    global _libc
    from .errors import check

    if _libc is None:
        libc = ctypes.CDLL(None)
        libc.open_memstream.restype = c_void_p
        libc.open_memstream.argtypes = [P(c_void_p), P(c_size_t)]
        libc.fclose.argtypes = [c_void_p]
        libc.free.argtypes = [c_void_p]
        _libc = libc
    ptr, size = c_void_p(), c_size_t()
    f = _libc.open_memstream(ctypes.byref(ptr), ctypes.byref(size))
    if not f:
        raise MemoryError(f"{what}: open_memstream failed")
    try:
        rc = call(f)
    finally:
        _libc.fclose(f)  # sets ptr and size
    try:
        check(rc, what)
        return ctypes.string_at(ptr, size.value).decode() if ptr.value else ""
    finally:
        _libc.free(ptr)
