"""RemoteTier over kvp_remote (include/kvpool/remote.h): a storage's published
blocks shared through Redis.

    from kvpool import BlockPoolAllocator, BlockStorage, PoolConfig, RemoteTier

    pool = BlockPoolAllocator(PoolConfig(block_size=16, n_blocks=256, prefix_cache=True))
    k = BlockStorage(pool, head_dim=128)
    tier = RemoteTier(k, "redis://127.0.0.1:6379", key_namespace="llama3")
    tier.publish(block, key)          # publish locally, queue for Redis
    blocks = tier.fetch("k", keys[len(matched):], owner=7)

docs/REMOTE.md gives the design, the value format and the failure
behaviour.  Every call releases the GIL (ctypes.CDLL); fetch waits at most
about two request timeouts, publish never waits on the network.
"""

from __future__ import annotations

import ctypes
import weakref
from typing import Optional

from . import _lib
from ._handle import Handle
from .errors import InvalidArgumentError, check
from .pool import STREAM_NAMES, Block, format_to_c, owner_to_c, to_int
from .prefix import key_to_c
from .storage import BlockStorage

fn = _lib.fn


class RemoteTier:
    """A Redis server attached to a BlockStorage's blocks (kvp_remote_create).

    ``url``: ``redis://[user:password@]host[:port][/db]`` or
    ``unix:///path``.  Keyword arguments set the config fields of
    kvpool/remote.h (``timeout_ms`` 50, ``write_timeout_ms`` 500,
    ``queue_cap`` 4096, ``expire_s`` 0, ``backoff_min_ms`` 10,
    ``backoff_max_ms`` 1000, ``max_fetch`` 256, ``fetch_conns`` 4,
    ``copy_rows`` False, ``writer_owner`` 2**64-1).  A server that does not
    answer is no error here: the tier connects when a call needs it.
    Raises ValueError (InvalidArgumentError) for a bad URL or config or a
    pool without the prefix cache, NotSupportedError for a library built
    without hiredis.  Keeps the storage and pool alive while it lives.
    """

    _FIELDS = ("timeout_ms", "write_timeout_ms", "queue_cap", "expire_s", "backoff_min_ms",
               "backoff_max_ms", "max_fetch", "fetch_conns")

    def __init__(self, storage: BlockStorage, url: str, key_namespace: str = "kvp", **config):
        if not isinstance(storage, BlockStorage):
            raise TypeError(f"storage must be a BlockStorage, not {type(storage).__name__}")
        if not isinstance(url, str) or not isinstance(key_namespace, str):
            raise TypeError("url and key_namespace must be str")
        c = _lib.RemoteConfigC()
        check(fn.kvp_remote_config_init(ctypes.byref(c)), "RemoteTier")
        self._url = url.encode()
        self._ns = key_namespace.encode()
        c.url = self._url
        c.key_namespace = self._ns
        for name, value in config.items():
            if name in self._FIELDS:
                setattr(c, name, to_int(value, name, 0, _lib.UINT32_MAX))
            elif name == "copy_rows":
                c.copy_rows = bool(value)
            elif name == "writer_owner":
                c.writer_owner = owner_to_c(value)
            else:
                raise TypeError(f"RemoteTier: unknown config field {name!r}")
        self.storage = storage
        self.url = url
        self.key_namespace = key_namespace
        ptr = ctypes.c_void_p()
        with storage._handle.use() as s:
            check(fn.kvp_remote_create(s, ctypes.byref(c), ctypes.byref(ptr)),
                  f"RemoteTier({url!r})")
        self._handle = Handle(ptr.value, fn.kvp_remote_destroy, "RemoteTier",
                              parents=(storage._handle,))
        self._finalizer = weakref.finalize(self, self._handle.close)

    def close(self) -> None:
        """Stop the writer (queued writes are dropped: flush first) and free the tier."""
        self._finalizer()

    def __enter__(self) -> "RemoteTier":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def publish(self, block: Block, key) -> None:
        """``pool.publish(block, key)``, then queue the block for Redis (a full
        queue drops it, counted in ``stats["writes_dropped"]``).  Raises as
        BlockPoolAllocator.publish does."""
        ref = self.storage._ref(block)
        k = key_to_c(key)
        with self._handle.use() as r:
            check(fn.kvp_remote_publish(r, ref, k), f"RemoteTier.publish(block {block.block_id})")

    def fetch(self, stream: str, keys, owner: int, format: str = "fp16") -> list:
        """Blocks for ``keys`` (PrefixKeys, in sequence order) from Redis:
        one MGET, stopping at the first key that is missing or whose value
        fails a check; each block returned is published locally and held
        by ``owner``, as ``match_prefix`` returns them.  Raises
        RemoteUnavailableError (a ConnectionError) when Redis did not answer
        in time; nothing is taken then."""
        pool = self.storage.pool
        if pool is None:
            raise InvalidArgumentError("RemoteTier.fetch: the pool is closed")
        s = pool._stream(stream)
        o = owner_to_c(owner)
        f = format_to_c(format)
        ks = [key_to_c(k, f"keys[{i}]") for i, k in enumerate(keys)]
        n = len(ks)
        arr = (_lib.HashC * max(n, 1))(*ks)
        refs = (ctypes.c_uint64 * max(n, 1))()
        got = ctypes.c_size_t()
        with self._handle.use() as r:
            check(fn.kvp_remote_fetch(r, s, f, arr, n, o, refs, n, ctypes.byref(got)),
                  "RemoteTier.fetch")
        name = STREAM_NAMES[s]
        return [Block._live(pool, refs[i], name, format) for i in range(got.value)]

    def flush(self, timeout_ms: int = 5000) -> bool:
        """Wait until every block queued so far was written (or failed or
        skipped); False when ``timeout_ms`` ran out first."""
        t = to_int(timeout_ms, "timeout_ms", 0, _lib.UINT32_MAX)
        with self._handle.use() as r:
            rc = fn.kvp_remote_flush(r, t)
        if rc == _lib.KVP_EREMOTE:
            return False
        check(rc, "RemoteTier.flush")
        return True

    @property
    def stats(self) -> dict:
        """The tier's counters (kvp_remote_stats) as a dict; ``fetch_latency``
        holds the histogram's bucket counts (100 us .. 100 ms, then +Inf)."""
        st = _lib.RemoteStatsC()
        with self._handle.use() as r:
            check(fn.kvp_remote_get_stats(r, ctypes.byref(st)), "RemoteTier.stats")
        d = {f: getattr(st, f) for f in _lib.REMOTE_STAT_FIELDS}
        d["fetch_latency"] = list(st.lat_count)
        d["fetch_latency_sum_us"] = st.lat_sum_us
        return d

    def to_prometheus(self, prefix: Optional[str] = None) -> str:
        """The tier's Prometheus text (kvp_remote_to_prometheus)."""
        p = prefix.encode() if prefix is not None else None
        need = ctypes.c_size_t()
        with self._handle.use() as r:
            for cap in (8192, 65536):
                buf = ctypes.create_string_buffer(cap)
                rc = fn.kvp_remote_to_prometheus(r, p, buf, cap, ctypes.byref(need))
                if rc != _lib.KVP_ERANGE:
                    break
        check(rc, "RemoteTier.to_prometheus")
        return buf.value.decode()

    def __repr__(self) -> str:
        return f"RemoteTier({self.url!r}, key_namespace={self.key_namespace!r})"
