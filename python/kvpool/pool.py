"""PoolConfig, Block and BlockPoolAllocator over kvp_pool (include/kvpool/pool.h)."""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import operator
import threading
import weakref
from dataclasses import dataclass
from typing import Iterable, Optional

from . import _lib
from ._handle import Handle
from .errors import InvalidArgumentError, check
from .prefix import key_to_c
from .stats import AllocationStats, check_metric_prefix

fn = _lib.fn

STREAMS = {"k": _lib.KVP_K, "v": _lib.KVP_V, "kv": _lib.KVP_KV}
STREAM_NAMES = {v: k for k, v in STREAMS.items()}
FORMATS = {fn.kvp_format_name(i).decode(): i for i in range(_lib.KVP_N_FORMATS)}
FORMAT_NAMES = {v: k for k, v in FORMATS.items()}

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
U64 = 1 << 64


# --- argument conversion (shared by every module of the package) ---------------


def to_int(value, name: str, lo: int, hi: int) -> int:
    """``value`` as an int in [lo, hi]: TypeError for a non-integer (bools
    included), InvalidArgumentError (a ValueError) when out of range."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, not bool")
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, not {type(value).__name__}") from None
    if not lo <= v <= hi:
        raise InvalidArgumentError(f"{name} must be in [{lo}, {hi}], got {v}")
    return v


def owner_to_c(owner) -> int:
    """An owner id: any int in the signed 64-bit range, stored as its
    two's-complement uint64 (so the default owner -1 of the Python API round-trips)."""
    return to_int(owner, "owner", INT64_MIN, INT64_MAX) % U64


def owner_from_c(u: int) -> int:
    return u - U64 if u > INT64_MAX else u


def format_to_c(format) -> int:
    if not isinstance(format, str):
        raise TypeError(f"format must be a str, not {type(format).__name__}")
    if "\x00" in format:  # C would read only up to the NUL
        raise InvalidArgumentError(f"format {format!r} contains a NUL character")
    out = ctypes.c_int()
    if fn.kvp_format_parse(format.encode(), ctypes.byref(out)) != _lib.KVP_OK:
        raise InvalidArgumentError(
            f"format {format!r} is not one of {', '.join(FORMATS)}", _lib.KVP_EINVAL)
    return out.value


def _check_bool(value, name: str) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, not {type(value).__name__}")


# --- PoolConfig -------------------------------------------------------------------


@dataclass
class PoolConfig:
    """Sizing and behaviour of a pool (struct kvp_pool_config).

    block_size: token slots per block, 1..65535.
    n_blocks: blocks the pool manages initially, all streams together; with
        separate_kv they are split between K and V (K takes the odd one), so
        at least 2.
    separate_kv: K and V draw from independent free lists (streams "k", "v");
        else one list (stream "kv") backs both and the stream argument of
        allocate / n_free / shrink is ignored.
    grow_on_exhaustion: an allocate that finds too few free blocks grows the
        stream by the shortfall instead of failing, within max_blocks.
    max_blocks: cap on the blocks managed once grown; None is unbounded.
    thread_cache: per-thread cached free blocks per stream; None is the
        library's default, 0 none.  (Added to the compatible API.)
    history_len: snapshots kept in ``pool.history``.  (Added to the compatible API.)
    prefix_cache: blocks shared by content across requests (kvpool/prefix.h):
        ``publish``, ``publish_many``, ``match_prefix``, ``free_owned``,
        ``reset_prefix_cache``.
        Off by default; the pool then behaves exactly as without it.

    Bad values raise ValueError (InvalidArgumentError), values of the wrong
    type TypeError, when the config is made and again when a pool is made
    from it.
    """

    block_size: int = 16
    n_blocks: int = 1024
    separate_kv: bool = True
    grow_on_exhaustion: bool = False
    max_blocks: Optional[int] = None
    thread_cache: Optional[int] = None
    history_len: int = 256
    prefix_cache: bool = False

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ValueError/TypeError unless every field is acceptable."""
        to_int(self.block_size, "PoolConfig.block_size", 1, _lib.KVP_MAX_BLOCK_SIZE)
        to_int(self.n_blocks, "PoolConfig.n_blocks", 1, _lib.KVP_MAX_BLOCKS)
        _check_bool(self.separate_kv, "PoolConfig.separate_kv")
        _check_bool(self.grow_on_exhaustion, "PoolConfig.grow_on_exhaustion")
        if self.separate_kv and self.n_blocks < 2:
            raise InvalidArgumentError(
                "PoolConfig: separate_kv needs n_blocks >= 2 (one for each of K and V), "
                f"got {self.n_blocks}"
            )
        if self.max_blocks is not None:
            to_int(self.max_blocks, "PoolConfig.max_blocks", self.n_blocks, _lib.KVP_MAX_BLOCKS)
        if self.thread_cache is not None:
            to_int(self.thread_cache, "PoolConfig.thread_cache", 0, _lib.KVP_MAX_THREAD_CACHE)
        to_int(self.history_len, "PoolConfig.history_len", 0, _lib.UINT32_MAX)
        _check_bool(self.prefix_cache, "PoolConfig.prefix_cache")

    def _to_c(self) -> _lib.PoolConfigC:
        c = _lib.PoolConfigC()
        fn.kvp_pool_config_init(ctypes.byref(c))
        c.block_size = self.block_size
        c.n_blocks = self.n_blocks
        c.separate_kv = self.separate_kv
        c.grow_on_exhaustion = self.grow_on_exhaustion
        c.max_blocks = self.max_blocks or 0
        if self.thread_cache is not None:
            c.thread_cache = self.thread_cache
        c.history_len = self.history_len
        c.prefix_cache = self.prefix_cache
        return c


# --- Block --------------------------------------------------------------------------


class Block:
    """One fixed-size block handed out by a pool.

    A Block returned by ``allocate`` or ``blocks_for`` is a *live view* of
    one checkout of the block: a handle (``ref``: the block id plus its
    generation) whose fields are read from the pool (kvp_block_get) each time
    they are read.  So ``owner`` becomes None and ``n_used`` 0 as soon as the
    block is freed - by ``free``, ``free_all`` or another thread - as the
    shared Block objects of the earlier Python implementation did.

    Once the block has been handed out again the handle is *stale*
    (``is_stale``): it describes a checkout that has ended, so ``owner`` is
    None, ``n_used`` 0, ``in_use`` False, and ``format`` the last value read;
    it can no longer change the block (freeing it again is skipped, setting
    ``n_used`` raises NotFoundError), which is what makes a stale handle safe.

    ``block_id`` and ``stream`` never change: ids are stable for the pool's
    life and unique across streams, so they index block tables and storage.

    ``Block(block_id, ...)`` made by hand is a detached plain record with the
    dataclass defaults of the Python API; pools reject it.
    """

    __slots__ = ("_pool", "_ref", "_block_id", "_stream", "_format", "_n_used", "_owner", "_ever")

    def __init__(
        self,
        block_id: int,
        stream: str = "kv",
        format: str = "fp16",
        n_used: int = 0,
        owner: Optional[int] = None,
        ever_allocated: bool = False,
    ):
        self._pool = None
        self._ref = None
        self._block_id = block_id
        self._stream = stream
        self._format = format
        self._n_used = n_used
        self._owner = owner
        self._ever = ever_allocated

    @classmethod
    def _live(
        cls, pool: "BlockPoolAllocator", ref: int, stream: Optional[str], format: Optional[str]
    ) -> "Block":
        b = cls.__new__(cls)
        b._pool = pool
        b._ref = ref
        b._block_id = ref & 0xFFFFFFFF
        b._stream = stream
        b._format = format
        b._n_used = b._owner = b._ever = None
        return b

    def _info(self) -> Optional[_lib.BlockInfoC]:
        """The block's description, or None when this handle is stale."""
        info = _lib.BlockInfoC()
        with self._pool._handle.use() as p:
            rc = fn.kvp_block_get(p, self._ref, ctypes.byref(info))
        if rc == _lib.KVP_ENOENT:
            return None
        check(rc, "Block")
        self._stream = STREAM_NAMES.get(info.stream, self._stream)
        self._format = FORMAT_NAMES.get(info.format, self._format)
        return info

    @property
    def block_id(self) -> int:
        return self._block_id

    @property
    def ref(self) -> Optional[int]:
        """The C handle (kvp_ref: id in the low 32 bits, generation above); None if detached."""
        return self._ref

    @property
    def pool(self) -> Optional["BlockPoolAllocator"]:
        return self._pool

    @property
    def stream(self) -> Optional[str]:
        """"k", "v", or "kv" for a pool without separate_kv."""
        if self._pool is not None and self._stream is None:
            self._info()
        return self._stream

    @property
    def format(self) -> Optional[str]:
        if self._pool is not None:
            self._info()
        return self._format

    @property
    def in_use(self) -> bool:
        if self._pool is None:
            return self._owner is not None
        info = self._info()
        return bool(info is not None and info.in_use)

    @property
    def is_stale(self) -> bool:
        """True once the block was handed out again (or retired) after this checkout."""
        return self._pool is not None and self._info() is None

    @property
    def owner(self) -> Optional[int]:
        """The owner the block is checked out to; None when free."""
        if self._pool is None:
            return self._owner
        info = self._info()
        return owner_from_c(info.owner) if info is not None and info.in_use else None

    @property
    def n_used(self) -> int:
        """Token slots occupied (<= block_size); 0 when free."""
        if self._pool is None:
            return self._n_used
        info = self._info()
        return info.n_used if info is not None and info.in_use else 0

    @n_used.setter
    def n_used(self, value: int) -> None:
        if self._pool is None:
            self._n_used = value
            return
        n = to_int(value, "n_used", 0, _lib.UINT32_MAX)
        with self._pool._handle.use() as p:
            check(fn.kvp_block_set_used(p, self._ref, n), f"Block {self._block_id}: set n_used")

    @property
    def n_holders(self) -> int:
        """Owners holding the block (prefix cache: several may); 0 when free."""
        if self._pool is None:
            return 0 if self._owner is None else 1
        info = self._info()
        return info.n_holders if info is not None and info.in_use else 0

    @property
    def published(self) -> bool:
        """True while the block is published under a prefix key (in use or
        cached); False for a stale handle."""
        if self._pool is None:
            return False
        info = self._info()
        return bool(info is not None and info.published)

    @property
    def ever_allocated(self) -> bool:
        if self._pool is None:
            return self._ever
        info = self._info()
        return True if info is None else bool(info.ever_allocated)

    def __eq__(self, other):
        if not isinstance(other, Block):
            return NotImplemented
        if self._pool is not None or other._pool is not None:
            return self._pool is other._pool and self._ref == other._ref
        return self._fields() == other._fields()

    def __hash__(self):
        return hash((self._block_id, self._ref))

    def _fields(self):
        if self._pool is None:
            return (self._block_id, self._stream, self._format, self._n_used, self._owner,
                    self._ever)
        info = self._info()
        if info is None:
            return (self._block_id, self._stream, self._format, 0, None, True)
        owner = owner_from_c(info.owner) if info.in_use else None
        return (self._block_id, self._stream, self._format,
                info.n_used if info.in_use else 0, owner, bool(info.ever_allocated))

    def __repr__(self) -> str:
        bid, stream, fmt, n_used, owner, ever = self._fields()
        return (
            f"Block(block_id={bid}, stream={stream!r}, format={fmt!r}, n_used={n_used}, "
            f"owner={owner!r}, ever_allocated={ever})"
        )


def _close_pool(handle: Handle, dependents: dict) -> None:
    for obj in list(dependents.values()):
        obj.close()
    handle.close()


# --- BlockPoolAllocator ----------------------------------------------------------------


class BlockPoolAllocator:
    """A pool of fixed-size KV-cache token blocks (kvp_pool).

    Every method is thread-safe and releases the GIL while it runs in C, so
    Python threads sharing one pool allocate and free concurrently.  The C
    pool is destroyed by ``close()``, at the end of a ``with`` block, or when
    the allocator is garbage-collected - and never while a call, a Block
    read, a BlockStorage or a PooledKVCache still uses it.
    """

    def __init__(self, config: Optional[PoolConfig] = None):
        cfg = dataclasses.replace(config) if config is not None else PoolConfig()
        c = cfg._to_c()
        ptr = ctypes.c_void_p()
        check(fn.kvp_pool_create(ctypes.byref(c), ctypes.byref(ptr)), "BlockPoolAllocator")
        self._handle = Handle(ptr.value, fn.kvp_pool_destroy, "BlockPoolAllocator")
        # Objects the layers above keep with this pool (_dependent), such as
        # the storages its PooledKVCaches share.  They hold the pool's Handle,
        # not this object, so the pool can be collected; the finalizer closes
        # them, then the pool.
        self._dependents: dict = {}
        self._dependents_lock = threading.Lock()
        self._finalizer = weakref.finalize(self, _close_pool, self._handle, self._dependents)
        self.config = cfg

    # -- lifetime
    def close(self) -> None:
        """Destroy the pool once nothing uses it any more (idempotent)."""
        self._finalizer()

    @property
    def closed(self) -> bool:
        return self._handle.closed

    def __enter__(self) -> "BlockPoolAllocator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- arguments
    def _stream(self, stream) -> int:
        if not isinstance(stream, str):
            raise TypeError(f"stream must be a str, not {type(stream).__name__}")
        s = STREAMS.get(stream)
        if s is None:
            raise InvalidArgumentError(f"stream must be 'k', 'v' or 'kv', got {stream!r}")
        if not self.config.separate_kv:
            return _lib.KVP_KV
        if s == _lib.KVP_KV:
            raise InvalidArgumentError("stream must be 'k' or 'v' when separate_kv=True, got 'kv'")
        return s

    def _refs(self, blocks: Iterable[Block]):
        refs = []
        for b in blocks:
            if not isinstance(b, Block):
                raise TypeError(f"expected Block, got {type(b).__name__}")
            if b._pool is not self:
                raise InvalidArgumentError(f"block {b.block_id} was not handed out by this pool")
            refs.append(b._ref)
        return (ctypes.c_uint64 * len(refs))(*refs), len(refs)

    # -- the compatible Python API
    def allocate(self, stream: str, n_tokens: int, owner: int, format: str = "fp16") -> list:
        """Hand ``ceil(n_tokens / block_size)`` blocks of ``stream`` to ``owner``.

        All or nothing.  Each block's n_used is the slots it holds (all full
        but the last).  Repeated calls for an active owner extend it.

        Raises BlockPoolExhaustedError when too few blocks are free and growth
        cannot cover the gap (nothing is handed out; a request for more
        blocks than the pool manages, or than its growth cap, never sizes an
        array by ``n_tokens``: it is exhausted like any other, and refused
        without asking the C library when that bound is above 2**20 blocks,
        then not counted in ``stats.n_exhausted``); ValueError for
        n_tokens < 1, a stream not valid for the pool, an unknown format.
        """
        s = self._stream(stream)
        n = to_int(n_tokens, "n_tokens", 1, _lib.UINT32_MAX)
        o = owner_to_c(owner)
        f = format_to_c(format)
        cap = -(-n // self.config.block_size)
        possible = self._blocks_possible()
        if cap > possible:
            # More blocks than the pool could ever hand out: no array sized by
            # a client-controlled n_tokens.  Ask C for just one block more
            # than possible, which is as sure to be exhausted and counted in
            # the stats like the original request; beyond 2**20 blocks refuse
            # here.
            if possible >= 1 << 20:
                check(_lib.KVP_EEXHAUSTED, "allocate")
            cap = possible + 1
            n = cap * self.config.block_size
        while True:
            refs = (ctypes.c_uint64 * cap)()
            got = ctypes.c_size_t()
            with self._handle.use() as p:
                rc = fn.kvp_allocate(p, s, n, o, f, refs, cap, ctypes.byref(got))
            if rc == _lib.KVP_ERANGE and got.value > cap:
                cap = got.value
                continue
            check(rc, "allocate")
            name = STREAM_NAMES[s]
            return [Block._live(self, refs[i], name, format) for i in range(got.value)]

    def _blocks_possible(self) -> int:
        """Most blocks one allocate could get now: the blocks the pool
        manages (all streams; the C side's figure), or its growth cap.  Never
        below what a stream could give, so no false exhaustion."""
        if self.config.grow_on_exhaustion:
            return self.config.max_blocks or _lib.KVP_MAX_BLOCKS
        s = _lib.StatsC()
        with self._handle.use() as p:
            check(fn.kvp_pool_stats(p, ctypes.byref(s)), "allocate")
        return s.n_blocks

    def free(self, blocks: Iterable[Block]) -> None:
        """Return blocks to their stream's free list.

        Idempotent: a block already free, or a stale handle, is skipped (and
        counted in ``stats.n_stale_frees``).  Raises ValueError for a block
        of another pool, NotFoundError for an id the pool never created
        (then nothing is freed).
        """
        if isinstance(blocks, Block):
            blocks = [blocks]
        refs, n = self._refs(blocks)
        if n == 0:
            return
        with self._handle.use() as p:
            check(fn.kvp_free(p, refs, n), "free")

    def free_all(self, owner: int) -> None:
        """Free every block checked out to ``owner`` and release the owner.
        An owner that is not active is left alone (no error)."""
        o = owner_to_c(owner)
        with self._handle.use() as p:
            rc = fn.kvp_free_all(p, o)
        if rc != _lib.KVP_ENOENT:
            check(rc, "free_all")

    def blocks_for(self, owner: int) -> list:
        """The blocks checked out to ``owner``, in allocation order ([] if none)."""
        o = owner_to_c(owner)
        cap = 16
        while True:
            refs = (ctypes.c_uint64 * cap)()
            n = ctypes.c_size_t()
            with self._handle.use() as p:
                rc = fn.kvp_blocks_for(p, o, refs, cap, ctypes.byref(n))
            if rc == _lib.KVP_ENOENT:
                return []
            if rc == _lib.KVP_ERANGE:
                cap = max(n.value, 2 * cap)  # it may grow again meanwhile: retry
                continue
            check(rc, "blocks_for")
            return [Block._live(self, refs[i], None, None) for i in range(n.value)]

    def n_free(self, stream: str = "k") -> int:
        """Free blocks of ``stream``, those parked in per-thread caches included."""
        s = self._stream(stream)
        with self._handle.use() as p:
            return fn.kvp_n_free(p, s)

    def owner_new(self) -> int:
        """A fresh owner id, homed at the calling thread: owners a thread
        makes here and ends with free_all on the same thread do not slow
        down other threads doing the same.  The id (a negative int: the
        Python API's owners are signed) is not registered; no two calls on
        one pool return the same id."""
        o = ctypes.c_uint64()
        with self._handle.use() as p:
            check(fn.kvp_owner_new(p, ctypes.byref(o)), "owner_new")
        return owner_from_c(o.value)

    def register_owner(self, owner: int) -> None:
        """Reserve ``owner``; OwnerAlreadyActiveError if it is already active
        (registered, or holding blocks).  Of several threads registering one
        id at once exactly one succeeds."""
        o = owner_to_c(owner)
        with self._handle.use() as p:
            check(fn.kvp_register_owner(p, o), f"register_owner({owner})")

    def release_owner(self, owner: int) -> None:
        """Undo register_owner; frees nothing.  An owner that is not active is
        left alone (no error)."""
        o = owner_to_c(owner)
        with self._handle.use() as p:
            rc = fn.kvp_release_owner(p, o)
        if rc != _lib.KVP_ENOENT:
            check(rc, "release_owner")

    def shrink(self, stream: str, target_free: int) -> int:
        """Retire free blocks of ``stream`` until ``target_free`` are left;
        returns how many were retired.  Blocks in use are never touched."""
        s = self._stream(stream)
        t = to_int(target_free, "target_free", 0, _lib.UINT32_MAX)
        retired = ctypes.c_uint32()
        with self._handle.use() as p:
            check(fn.kvp_shrink(p, s, t, ctypes.byref(retired)), "shrink")
        return retired.value

    # -- prefix cache (PoolConfig.prefix_cache; kvpool/prefix.h)
    def match_prefix(self, stream: str, keys, owner: int, format: str = "fp16") -> list:
        """Take holds on the published blocks of ``keys`` (PrefixKeys, in
        sequence order) for ``owner``; returns the matched Blocks, a prefix
        of ``keys`` (the lookup stops at the first key not found; [] when
        none matched).  Only blocks of ``format`` match.  A block the owner
        already holds is returned again without a second hold.  Matched
        blocks are full and follow the owner's earlier ones in
        ``blocks_for``.  Raises ValueError when the pool has no prefix cache.
        """
        s = self._stream(stream)
        o = owner_to_c(owner)
        f = format_to_c(format)
        ks = [key_to_c(k, f"keys[{i}]") for i, k in enumerate(keys)]
        n = len(ks)
        arr = (_lib.HashC * n)(*ks)
        refs = (ctypes.c_uint64 * max(n, 1))()
        got = ctypes.c_size_t()
        with self._handle.use() as p:
            check(fn.kvp_prefix_match(p, s, f, arr, n, o, refs, n, ctypes.byref(got)),
                  "match_prefix")
        name = STREAM_NAMES[s]
        return [Block._live(self, refs[i], name, format) for i in range(got.value)]

    def publish(self, block: Block, key) -> None:
        """Make a full block, in use and not yet published, findable under
        ``key`` (a PrefixKey).  Its rows are fixed from then on.  Raises
        PrefixKeyExistsError when another block of the stream is published
        under ``key`` (this one stays unpublished), NotFoundError for a stale
        handle, ValueError when the block is free, not full or already
        published, or the pool has no prefix cache."""
        refs, _ = self._refs([block])
        k = key_to_c(key)
        with self._handle.use() as p:
            check(fn.kvp_prefix_publish(p, refs[0], k), f"publish block {block.block_id}")

    def publish_many(self, blocks: Iterable[Block], keys) -> list:
        """``publish`` for many blocks in one call: ``keys[i]`` is the key of
        ``blocks[i]``.  Each block is published or not on its own, in order.
        Returns one bool per block: True when it was published, False when
        another block of its stream already had the key (it stays
        unpublished; within the batch the first block with a key wins).
        Every block is tried; then, if any failed for another reason, the
        first such failure is raised (NotFoundError for a stale handle,
        ValueError for a block free, not full or already published).  Raises
        ValueError, publishing nothing, when the lengths differ or the pool
        has no prefix cache."""
        blocks = list(blocks)
        ks = [key_to_c(k, f"keys[{i}]") for i, k in enumerate(keys)]
        if len(ks) != len(blocks):
            raise ValueError(f"publish_many: {len(blocks)} blocks but {len(ks)} keys")
        n = len(blocks)
        if n == 0:
            return []
        refs, _ = self._refs(blocks)
        arr = (_lib.HashC * n)(*ks)
        status = (ctypes.c_int * n)()
        done = ctypes.c_size_t()
        with self._handle.use() as p:
            check(fn.kvp_prefix_publish_many(p, refs, arr, n, status, ctypes.byref(done)),
                  "publish_many")
        for i in range(n):
            if status[i] not in (0, _lib.KVP_EEXIST):
                check(status[i], f"publish_many: block {blocks[i].block_id} (keys[{i}])")
        return [status[i] == 0 for i in range(n)]

    def free_owned(self, owner: int, blocks: Iterable[Block]) -> None:
        """Drop ``owner``'s hold on each block; a block whose last hold goes is
        freed (cached if published).  Blocks stale, free or not held by
        ``owner`` are skipped (counted in ``stats.n_stale_frees``).  Raises
        NotFoundError for an id the pool never created (nothing is freed),
        ValueError when the pool has no prefix cache."""
        if isinstance(blocks, Block):
            blocks = [blocks]
        o = owner_to_c(owner)
        refs, n = self._refs(blocks)
        with self._handle.use() as p:
            check(fn.kvp_free_owned(p, o, refs, n), "free_owned")

    def reset_prefix_cache(self) -> int:
        """Forget every key: evict cached blocks, unpublish held ones (they
        stay held).  Returns the number of blocks evicted or unpublished (0
        without a prefix cache)."""
        with self._handle.use() as p:
            return fn.kvp_prefix_reset(p)

    @property
    def stats(self) -> AllocationStats:
        """A fresh snapshot of the pool's counters, taken on each access.

        Besides the counters it carries what the pool's Prometheus text
        shows: blocks managed, free and in use per stream (``streams``), the
        configuration (``config``) and the library's version (``version``),
        so that ``stats.to_prometheus()`` writes the same families as
        ``pool.to_prometheus(prefix=...)``."""
        s = _lib.StatsC()
        streams = {}
        with self._handle.use() as p:
            check(fn.kvp_pool_stats(p, ctypes.byref(s)), "stats")
            names = ("k", "v") if self.config.separate_kv else ("kv",)
            for name in names:
                st = STREAMS[name]
                managed = fn.kvp_pool_n_managed(p, st)
                free = fn.kvp_n_free(p, st)
                streams[name] = {"managed": managed, "free": free,
                                 "in_use": max(managed - free, 0)}
        out = AllocationStats._from_c(s)
        out.streams = streams
        out.config = self._config_labels()
        out.version = _lib.version()
        return out

    def _config_labels(self) -> dict:
        c = self.config
        unbounded = not c.max_blocks or c.max_blocks >= _lib.KVP_MAX_BLOCKS
        return {"block_size": str(c.block_size), "n_blocks": str(c.n_blocks),
                "max_blocks": "unbounded" if unbounded else str(c.max_blocks),
                "prefix_cache": "true" if c.prefix_cache else "false"}

    def to_prometheus(self, name: str = "default", prefix: Optional[str] = None) -> str:
        """The pool's Prometheus text exposition, read live.

        By default the families are the ``kvpool_*`` ones of
        ``kvp_pools_to_prometheus`` with the label ``pool=name``: counters,
        gauges, per-stream ``kvpool_stream_blocks_in_use`` /
        ``_free{stream=...}``, ``kvpool_config_info{block_size, n_blocks,
        max_blocks, prefix_cache}``, the sampled
        ``kvpool_allocate_duration_seconds`` histogram and
        ``kvpool_build_info{version}``.  Several pools in one scrape:
        :func:`kvpool.to_prometheus`.  With ``prefix`` the older form of
        ``kvp_pool_to_prometheus``: the pool's figures under
        ``<prefix>_*`` names, no pool label.  An invalid prefix raises
        InvalidArgumentError."""
        if prefix is not None:
            pb = check_metric_prefix(prefix).encode()
            with self._handle.use() as p:
                return _lib.text_call(
                    lambda b, cap, n: fn.kvp_pool_to_prometheus(p, pb, b, cap, n),
                    "to_prometheus")
        return to_prometheus({name: self})

    def dump(self, json: bool = False) -> str:
        """kvp_pool_dump's report of the pool: several lines for people, or
        with ``json=True`` one JSON object on one line."""
        flags = 1 if json else 0  # KVP_DUMP_JSON
        with self._handle.use() as p:
            return _lib.memstream_call(lambda f: fn.kvp_pool_dump(p, f, flags), "dump")

    @property
    def history(self) -> tuple:
        """Recorded snapshots, oldest first (newest last), at most
        ``config.history_len``.  The pool records one at its first mutating
        call, at every growth, shrink and exhausted allocate, and once every
        65536 mutating calls of each thread (KVP_HISTORY_EVERY)."""
        cap = self.config.history_len
        if cap == 0:
            return ()
        arr = (_lib.StatsC * cap)()
        with self._handle.use() as p:
            n = fn.kvp_pool_history(p, arr, cap)
        return tuple(AllocationStats._from_c(arr[i]) for i in range(n))

    @property
    def n_ids(self) -> int:
        """Blocks ever created: every block id is below this."""
        with self._handle.use() as p:
            return fn.kvp_pool_n_ids(p)

    def _dependent(self, key, make):
        """The object a layer above keeps with this pool under ``key``, made
        by ``make()`` at the first call; the pool closes it (its ``close()``)
        just before itself.  The layers above keep what they share per pool
        here, so this module needs to know none of them (storage.py's
        ``_shared_storage`` is one)."""
        with self._dependents_lock:
            obj = self._dependents.get(key)
            if obj is None:
                obj = self._dependents[key] = make()
            return obj

    def __repr__(self) -> str:
        if self.closed:
            return "BlockPoolAllocator(closed)"
        return f"BlockPoolAllocator({self.stats!r})"


def to_prometheus(pools) -> str:
    """Prometheus text of several pools in one exposition
    (kvp_pools_to_prometheus): each ``kvpool_*`` family once, a sample per
    pool told apart by the label ``pool``.  ``pools`` maps each pool's label
    value (a str, distinct) to its BlockPoolAllocator; a list of pools is
    labelled by position ("0", "1", ...)."""
    items = list(pools.items()) if hasattr(pools, "items") else [(str(i), p) for i, p in
                                                                 enumerate(pools)]
    if not items:
        raise InvalidArgumentError("to_prometheus: no pools")
    for name, pool in items:
        if not isinstance(name, str):
            raise TypeError(f"a pool's label must be a str, not {type(name).__name__}")
        if "\0" in name:  # C would read it cut short at the NUL
            raise InvalidArgumentError(f"to_prometheus: a pool's label holds a NUL: {name!r}")
        if not isinstance(pool, BlockPoolAllocator):
            raise TypeError(f"expected BlockPoolAllocator, got {type(pool).__name__}")
    if len({name for name, _ in items}) != len(items):
        raise InvalidArgumentError("to_prometheus: two pools with the same label")
    n = len(items)
    names = (ctypes.c_char_p * n)(*(name.encode() for name, _ in items))
    with contextlib.ExitStack() as stack:
        ptrs = (ctypes.c_void_p * n)(*(stack.enter_context(pool._handle.use())
                                       for _, pool in items))
        return _lib.text_call(
            lambda b, cap, ln: fn.kvp_pools_to_prometheus(ptrs, names, n, b, cap, ln),
            "to_prometheus")
