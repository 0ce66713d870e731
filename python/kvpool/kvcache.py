"""PooledKVCache and build_pooled_caches over kvp_kvcache (include/kvpool/kvcache.h).

The earlier Python implementation's PooledKVCache wrapped another cache and only mirrored its growth
in the pool; here the K/V rows themselves live in pool blocks (through two
BlockStorage objects), and ``attend`` reads them in place.
"""

from __future__ import annotations

import ctypes
import math
import threading
import weakref
from typing import Optional

from . import _lib
from ._handle import Handle
from ._numpy import np
from .errors import InvalidArgumentError, check
from .pool import BlockPoolAllocator, format_to_c, owner_to_c, to_int
from .storage import BlockStorage, as_f32, f32_ptr

fn = _lib.fn


class PooledKVCache:
    """One request's paged KV cache: per layer, K and V rows in pool blocks.

    ``PooledKVCache(pool, owner, n_layers=1, n_kv_heads=None, head_dim=None,
    format="fp16", k_storage=None, v_storage=None)``

    Every layer's blocks are checked out to ``owner`` (one owner per request,
    unique among the caches alive at once, as in the Python API).  A block is
    taken from the pool only when the layer's previous block is full, and
    ``release()`` returns every block of every layer in one call.

    ``n_kv_heads`` and ``head_dim`` may be left out: the first ``append``
    fixes them from its arrays.  Without explicit storages the cache keeps
    its K and V rows in the BlockStorage its pool keeps for that row width
    (n_kv_heads * head_dim), shared by every cache of the pool, so a new
    request reuses the buffers of the blocks it draws.  Explicit storages
    must be of the same pool with ``head_dim == n_kv_heads * head_dim``;
    ``k_storage`` and ``v_storage`` may be one object.

    The cache registers ``owner`` with the pool when it is made (first
    append, if the dims are left out): an owner already active raises
    OwnerAlreadyActiveError.  The owner stays registered until the cache is
    closed.  Do not free the cache's blocks behind its back (``free_all``
    of its owner): use ``release()``.  If it happens anyway, ``append``,
    ``gather`` and ``attend`` raise NotFoundError (the C cache checks its
    blocks before it reads them) until ``release()``.

    Arrays: ``k``, ``v`` are (n_tokens, n_kv_heads, head_dim), or
    (n_kv_heads, head_dim) for one token; ``gather`` returns two
    (n_kv_heads, len, head_dim) arrays; ``attend`` takes q of shape
    (n_heads, head_dim) with n_heads a multiple of n_kv_heads and returns
    (n_heads, head_dim).  Everything is float32 (converted on the way in).

    Every call takes the cache's lock, so threads sharing one cache are
    serialized (``gather`` sizes its arrays under the lock, from the length
    the C call sees); many caches may share a pool across threads.  ``close()`` (or garbage collection) releases its
    blocks and frees it.

    The wrapper form, ``PooledKVCache(inner, pool, owner=..., format=...)``
    with another cache as first argument, makes an :class:`AccountedKVCache`
    instead: the compatible wrapper, which keeps the rows in ``inner`` and only
    checks blocks out of the pool in step with its appends.
    """

    def __new__(cls, *args, **kwargs):
        if cls is PooledKVCache and _seed_form(args, kwargs):
            return AccountedKVCache(*args, **kwargs)  # not a PooledKVCache: no __init__
        return super().__new__(cls)

    def __init__(
        self,
        pool: BlockPoolAllocator,
        owner: int,
        n_layers: int = 1,
        n_kv_heads: Optional[int] = None,
        head_dim: Optional[int] = None,
        format: str = "fp16",
        k_storage: Optional[BlockStorage] = None,
        v_storage: Optional[BlockStorage] = None,
    ):
        if not isinstance(pool, BlockPoolAllocator):
            raise TypeError(f"pool must be a BlockPoolAllocator, not {type(pool).__name__}")
        self.pool = pool
        self.owner = owner
        self._owner_c = owner_to_c(owner)
        self.n_layers = to_int(n_layers, "n_layers", 1, _lib.UINT32_MAX)
        self.format = format
        self._format_c = format_to_c(format)
        if (k_storage is None) != (v_storage is None):
            raise InvalidArgumentError("give both k_storage and v_storage, or neither")
        self._storages = (k_storage, v_storage)
        self.n_kv_heads: Optional[int] = None
        self.head_dim: Optional[int] = None
        self._handle: Optional[Handle] = None
        self._finalizer = None
        self._lock = threading.Lock()
        if (n_kv_heads is None) != (head_dim is None):
            raise InvalidArgumentError("give both n_kv_heads and head_dim, or neither")
        if n_kv_heads is not None:
            self._create(n_kv_heads, head_dim)

    # -- lifetime
    def _create(self, n_kv_heads, head_dim) -> None:
        h = to_int(n_kv_heads, "n_kv_heads", 1, _lib.UINT32_MAX)
        d = to_int(head_dim, "head_dim", 1, _lib.UINT32_MAX)
        with self._lock:
            if self._handle is not None:
                return
            ks, vs = self._storages
            if ks is None:
                ks = vs = self.pool._shared_storage(h * d)
            for st in {id(ks): ks, id(vs): vs}.values():
                if not isinstance(st, BlockStorage):
                    raise TypeError(f"storage must be a BlockStorage, not {type(st).__name__}")
                if st._pool_handle is not self.pool._handle:
                    raise InvalidArgumentError("storage belongs to another pool")
                if st.head_dim != h * d:
                    raise InvalidArgumentError(
                        f"storage rows are {st.head_dim} wide; this cache needs "
                        f"n_kv_heads * head_dim = {h * d}"
                    )
            cfg = _lib.KVCacheConfigC(self.n_layers, h, d, self._format_c, self._owner_c)
            out = ctypes.c_void_p()
            with self.pool._handle.use() as p, ks._handle.use() as kp, vs._handle.use() as vp:
                rc = fn.kvp_kvcache_create(p, kp, vp, ctypes.byref(cfg), ctypes.byref(out))
            check(rc, "PooledKVCache")
            self._storages = (ks, vs)
            self.n_kv_heads, self.head_dim = h, d
            self._handle = Handle(
                out.value,
                fn.kvp_kvcache_destroy,
                "PooledKVCache",
                parents=(self.pool._handle, ks._handle, vs._handle),  # vs may be ks: twice is fine
            )
            self._finalizer = weakref.finalize(self, self._handle.close)

    def close(self) -> None:
        """Return every block to the pool and free the cache (idempotent)."""
        if self._finalizer is not None:
            self._finalizer()

    def __enter__(self) -> "PooledKVCache":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- arguments
    def _layer(self, layer) -> int:
        return to_int(layer, "layer", 0, self.n_layers - 1)

    # -- the cache
    def append(self, k, v, layer: int = 0) -> None:
        """Append tokens' keys and values to ``layer``."""
        li = self._layer(layer)
        ka = np.ascontiguousarray(k, dtype=np.float32)
        va = np.ascontiguousarray(v, dtype=np.float32)
        if ka.ndim not in (2, 3):
            raise InvalidArgumentError(
                f"k must be (n_tokens, n_kv_heads, head_dim) or (n_kv_heads, head_dim), "
                f"got shape {ka.shape}"
            )
        if va.shape != ka.shape:
            raise InvalidArgumentError(f"v has shape {va.shape}, k {ka.shape}")
        if self._handle is None:
            self._create(ka.shape[-2], ka.shape[-1])
        tail = (self.n_kv_heads, self.head_dim)
        ka = as_f32(ka, tail, "k")
        va = as_f32(va, tail, "v")
        n = ka.shape[0] if ka.ndim == 3 else 1
        if n == 0:
            return
        with self._lock, self._handle.use() as c:
            rc = fn.kvp_kvcache_append(c, li, f32_ptr(ka), f32_ptr(va), n)
        check(rc, f"PooledKVCache.append(layer {li}, {n} tokens)")

    def length(self, layer: int = 0) -> int:
        """Tokens held by ``layer``."""
        li = self._layer(layer)
        if self._handle is None:
            return 0
        with self._lock, self._handle.use() as c:
            return fn.kvp_kvcache_len(c, li)

    def __len__(self) -> int:
        return self.length(0)

    def gather(self, layer: int = 0):
        """``(k, v)``: ``layer``'s rows as two (n_kv_heads, len, head_dim) arrays."""
        li = self._layer(layer)
        if self._handle is None:
            raise InvalidArgumentError("PooledKVCache.gather: nothing appended yet")
        with self._lock, self._handle.use() as c:
            n = fn.kvp_kvcache_len(c, li)
            k = np.empty((self.n_kv_heads, n, self.head_dim), dtype=np.float32)
            v = np.empty_like(k)
            rc = fn.kvp_kvcache_gather(c, li, f32_ptr(k), f32_ptr(v))
        check(rc, f"PooledKVCache.gather(layer {li})")
        return k, v

    def attend(self, q, layer: int = 0, scale: Optional[float] = None) -> np.ndarray:
        """One decode step of scaled dot-product attention over ``layer``,
        reading the blocks in place.  ``scale`` defaults to 1/sqrt(head_dim)."""
        li = self._layer(layer)
        if self._handle is None:
            raise InvalidArgumentError("PooledKVCache.attend: nothing appended yet")
        qa = as_f32(q, (self.head_dim,), "q").reshape(-1, self.head_dim)
        n_heads = qa.shape[0]
        s = 1.0 / math.sqrt(self.head_dim) if scale is None else float(scale)
        out = np.empty_like(qa)
        with self._lock, self._handle.use() as c:
            rc = fn.kvp_kvcache_attend(c, li, f32_ptr(qa), n_heads, s, f32_ptr(out))
        check(rc, f"PooledKVCache.attend(layer {li}, {n_heads} heads)")
        return out

    def trim(self, n: int) -> int:
        """Remove the last ``min(n, len)`` tokens of every layer, returning
        blocks that become empty; returns the tokens removed from layer 0."""
        t = to_int(n, "n", 0, _lib.UINT32_MAX)
        if self._handle is None:
            return 0
        with self._lock, self._handle.use() as c:
            before = fn.kvp_kvcache_len(c, 0)
            check(fn.kvp_kvcache_trim(c, t), "PooledKVCache.trim")
        return min(t, before)

    def n_blocks_held(self) -> int:
        """K + V blocks held by every layer of this cache."""
        if self._handle is None:
            return 0
        with self._lock, self._handle.use() as c:
            return fn.kvp_kvcache_blocks_held(c)

    def release(self) -> None:
        """Return every block of every layer to the pool (the cache stays usable)."""
        if self._handle is None:
            return
        with self._lock, self._handle.use() as c:
            fn.kvp_kvcache_release(c)

    def layer(self, i: int) -> "PooledKVCacheLayer":
        """A one-layer view of this cache (what build_pooled_caches returns)."""
        return PooledKVCacheLayer(self, self._layer(i))

    def __repr__(self) -> str:
        return (
            f"PooledKVCache(owner={self.owner}, n_layers={self.n_layers}, "
            f"format={self.format!r}, blocks={self.n_blocks_held()})"
        )


class PooledKVCacheLayer:
    """One layer of a PooledKVCache, the per-layer object that
    build_pooled_caches hands to a model.

    ``append``, ``attend``, ``gather``, ``len()`` and ``offset`` act on this
    layer.  ``release()`` and ``n_blocks_held()`` act on the whole request,
    as in the Python API, where every layer's blocks belong to the one owner and
    release on any layer frees them all.  Trimming is done on the request
    (``layer.cache.trim(n)``), since it applies to every layer at once.
    """

    def __init__(self, cache: PooledKVCache, layer: int):
        self.cache = cache
        self.index = layer

    @property
    def owner(self) -> int:
        return self.cache.owner

    def append(self, k, v) -> None:
        self.cache.append(k, v, self.index)

    def attend(self, q, scale: Optional[float] = None) -> np.ndarray:
        return self.cache.attend(q, self.index, scale)

    def gather(self):
        return self.cache.gather(self.index)

    def __len__(self) -> int:
        return self.cache.length(self.index)

    @property
    def offset(self) -> int:
        return self.cache.length(self.index)

    def release(self) -> None:
        self.cache.release()

    def n_blocks_held(self) -> int:
        return self.cache.n_blocks_held()

    def __repr__(self) -> str:
        return f"PooledKVCacheLayer(owner={self.owner}, layer={self.index}, len={len(self)})"


def _seed_form(args, kwargs) -> bool:
    """PooledKVCache(inner, pool, ...): a pool second, and not first."""
    first = args[0] if args else kwargs.get("inner")
    second = args[1] if len(args) > 1 else kwargs.get("pool")
    return not isinstance(first, BlockPoolAllocator) and isinstance(second, BlockPoolAllocator)


class AccountedKVCache:
    """The compatible PooledKVCache wrapper: another cache keeps the rows, the
    pool keeps the accounting.

    ``AccountedKVCache(inner, pool, owner=-1, format="fp16")`` (also made by
    ``PooledKVCache(inner, pool, ...)``).  ``inner`` is any cache with
    ``append_key(k)``, ``append_value(v)``, ``attend(q)`` and, for the
    methods that delegate to them, ``memory_bytes()`` and ``reset()``.  One
    K block (stream "k") and one V block (stream "v") are checked out
    whenever the previous one is full, never per token; each block's n_used
    follows the appends; ``release()`` returns every block in one
    ``pool.free_all(owner)``.  ``format`` is a tag recorded on the blocks
    (any kvpool format name, int2 and int1 included).
    """

    def __init__(self, inner, pool: BlockPoolAllocator, owner: int = -1, format: str = "fp16"):
        if not isinstance(pool, BlockPoolAllocator):
            raise TypeError(f"pool must be a BlockPoolAllocator, not {type(pool).__name__}")
        owner_to_c(owner)
        format_to_c(format)
        self._inner = inner
        self._pool = pool
        self._owner = owner
        self._format = format
        self._blocks = {"k": [], "v": []}
        self._used = {"k": 0, "v": 0}
        self._n_tokens = 0

    @property
    def owner(self) -> int:
        return self._owner

    def _take_slot(self, stream: str) -> None:
        blocks = self._blocks[stream]
        if not blocks or self._used[stream] == self._pool.config.block_size:
            blocks += self._pool.allocate(
                stream=stream, n_tokens=1, owner=self._owner, format=self._format
            )
            self._used[stream] = 0

    def _filled_slot(self, stream: str) -> None:
        self._used[stream] += 1
        self._blocks[stream][-1].n_used = self._used[stream]

    def append_key(self, k) -> None:
        self._take_slot("k")
        self._inner.append_key(k)
        self._filled_slot("k")

    def append_value(self, v) -> None:
        self._take_slot("v")
        self._inner.append_value(v)
        self._filled_slot("v")
        self._n_tokens += 1

    def append(self, k, v) -> None:
        self.append_key(k)
        self.append_value(v)

    def attend(self, q):
        return self._inner.attend(q)

    def memory_bytes(self) -> int:
        return self._inner.memory_bytes()

    def release(self) -> None:
        """Return every block this cache holds to the pool."""
        self._pool.free_all(owner=self._owner)
        self._blocks = {"k": [], "v": []}
        self._used = {"k": 0, "v": 0}

    def n_blocks_held(self) -> int:
        """K + V blocks checked out to this cache."""
        return len(self._blocks["k"]) + len(self._blocks["v"])

    def reset(self) -> None:
        """Release every block and clear the inner cache."""
        self.release()
        self._inner.reset()

    def __len__(self) -> int:
        return self._n_tokens

    def __repr__(self) -> str:
        return (
            f"PooledKVCache(inner={self._inner!r}, owner={self._owner}, "
            f"blocks={self.n_blocks_held()})"
        )


def build_pooled_caches(
    n_layers: int,
    pool: BlockPoolAllocator,
    owner: int,
    n_kv_heads: Optional[int] = None,
    head_dim: Optional[int] = None,
    format: str = "fp16",
) -> list:
    """One cache per layer for one request: the layer views of a single
    PooledKVCache whose blocks all belong to ``owner``.  Calling
    ``release()`` on any of them returns every layer's blocks."""
    cache = PooledKVCache(
        pool, owner, n_layers=n_layers, n_kv_heads=n_kv_heads, head_dim=head_dim, format=format
    )
    return [cache.layer(i) for i in range(cache.n_layers)]
