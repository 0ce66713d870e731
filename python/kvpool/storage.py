"""BlockStorage over kvp_storage (include/kvpool/storage.h), in the place of the
earlier Python implementation's MLXBlockStorage."""

from __future__ import annotations

import ctypes
import weakref
from typing import Optional

from . import _lib, _numpy
from ._handle import Handle
from ._numpy import np
from .errors import InvalidArgumentError, OutOfRangeError, check
from .pool import Block, BlockPoolAllocator, to_int

fn = _lib.fn
KVP_MAX_RETIRE_HOOKS = 8  # include/kvpool/pool.h
_f32p = _lib.c_float_p


def as_f32(values, shape_tail: tuple, name: str) -> np.ndarray:
    """``values`` as a C-contiguous float32 array shaped ``shape_tail`` or ``(n,) + shape_tail``."""
    a = np.ascontiguousarray(values, dtype=np.float32)
    if a.ndim > len(shape_tail) + 1 or a.shape[a.ndim - len(shape_tail):] != shape_tail:
        raise InvalidArgumentError(
            f"{name} must have shape (..., {', '.join(map(str, shape_tail))}), got {a.shape}"
        )
    return a


def f32_ptr(a: np.ndarray):
    return a.ctypes.data_as(_f32p)


class BlockStorage:
    """K or V rows for a pool's blocks: one buffer per block id.

    Each buffer holds ``block_size`` rows of ``head_dim`` values encoded in
    the block's format (fp32, fp16, bf16, int8, int4: the C library encodes
    on write and decodes on read).  A buffer is made on a block's first
    write, reused in place when the pool hands the block out again, and
    replaced only when the block's format changes.

    ``write(block, offset, values)``: values of shape (n, head_dim), or
    (head_dim,) for one row, any numeric dtype (converted to float32 first),
    written at token slots offset .. offset+n-1.  A write past the block's
    end raises ValueError (OutOfRangeError), a stale block NotFoundError.
    The write raises the block's ``n_used`` to cover it.

    ``read(block)``: a new float32 numpy array of shape (block.n_used,
    head_dim), the live rows decoded.  (The earlier Python implementation returned the stored dtype;
    numpy has no bf16 or packed int4, so the binding always decodes.)

    Thread-safe as the C storage is: threads may write and read different
    blocks at once.  Keeps the C pool alive while it lives.
    """

    def __init__(self, pool: BlockPoolAllocator, head_dim: int):
        if not isinstance(pool, BlockPoolAllocator):
            raise TypeError(f"pool must be a BlockPoolAllocator, not {type(pool).__name__}")
        self.head_dim = to_int(head_dim, "head_dim", 1, _lib.UINT32_MAX)
        _numpy.require("BlockStorage")  # every read and write is a numpy array
        self.block_size = pool.config.block_size
        self._pool_ref = weakref.ref(pool)
        self._pool_handle = pool._handle
        ptr = ctypes.c_void_p()
        with pool._handle.use() as p:
            rc = fn.kvp_storage_create(p, self.head_dim, None, ctypes.byref(ptr))
        if rc == _lib.KVP_ERANGE:  # no retire-hook slot left on the pool
            raise OutOfRangeError(
                f"BlockStorage: a pool carries at most {KVP_MAX_RETIRE_HOOKS} storages "
                "and this one has them all; close one first",
                rc,
            )
        check(rc, "BlockStorage")
        self._handle = Handle(
            ptr.value, fn.kvp_storage_destroy, "BlockStorage", parents=(pool._handle,)
        )
        self._finalizer = weakref.finalize(self, self._handle.close)

    @property
    def pool(self) -> Optional[BlockPoolAllocator]:
        return self._pool_ref()

    def close(self) -> None:
        """Destroy the storage (its buffers) once nothing uses it (idempotent)."""
        self._finalizer()

    def __enter__(self) -> "BlockStorage":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _ref(self, block: Block) -> int:
        if not isinstance(block, Block):
            raise TypeError(f"expected Block, got {type(block).__name__}")
        if block._pool is None or block._pool._handle is not self._pool_handle:
            raise InvalidArgumentError(
                f"block {block.block_id} does not belong to this storage's pool"
            )
        return block._ref

    def write(self, block: Block, offset: int, values) -> None:
        ref = self._ref(block)
        off = to_int(offset, "offset", 0, _lib.UINT32_MAX)
        a = as_f32(values, (self.head_dim,), "values").reshape(-1, self.head_dim)
        with self._handle.use() as s:
            rc = fn.kvp_storage_write(s, ref, off, f32_ptr(a), a.shape[0])
        what = f"BlockStorage.write(block {block.block_id}, offset {off}, {a.shape[0]} rows)"
        if rc == _lib.KVP_EINVAL:
            raise InvalidArgumentError(f"{what}: {self._write_refusal(block, a)}", rc)
        check(rc, what)

    @staticmethod
    def _write_refusal(block: Block, a) -> str:
        """Why kvp_storage_write refused (KVP_EINVAL) rows for this block."""
        fmt = block.format
        if fmt in ("int2", "int1"):
            return (f"format {fmt} is a tag only, with no codec: rows can be written to "
                    "fp32, fp16, bf16, int8 and int4 blocks")
        if fmt in ("int8", "int4") and not np.isfinite(a).all():
            return f"format {fmt} cannot hold inf or NaN"
        if block.published:
            return "the block is published under a prefix key: its rows are fixed"
        return "invalid argument"

    def read(self, block: Block) -> np.ndarray:
        ref = self._ref(block)
        out = np.empty((self.block_size, self.head_dim), dtype=np.float32)
        n = ctypes.c_uint32()
        with self._handle.use() as s:
            rc = fn.kvp_storage_read_f32(s, ref, f32_ptr(out), self.block_size, ctypes.byref(n))
        check(rc, f"BlockStorage.read(block {block.block_id})")
        return out[: n.value].copy() if n.value < self.block_size else out

    def resident_bytes(self) -> int:
        """Bytes of the buffers that exist (blocks written at least once and
        not released), not the pool's capacity."""
        with self._handle.use() as s:
            return fn.kvp_storage_resident_bytes(s)

    def release(self, block: Block) -> None:
        """Drop a free block's buffer now instead of keeping it for reuse."""
        ref = self._ref(block)
        with self._handle.use() as s:
            check(fn.kvp_storage_release(s, ref), f"BlockStorage.release(block {block.block_id})")

    def __repr__(self) -> str:
        return f"BlockStorage(head_dim={self.head_dim}, block_size={self.block_size})"


def _shared_storage(pool: BlockPoolAllocator, row_dim: int) -> BlockStorage:
    """The BlockStorage that a pool's PooledKVCaches of one row width share,
    for K and V alike (a pool carries at most 8 storages); closed with the
    pool."""
    return pool._dependent((BlockStorage, row_dim), lambda: BlockStorage(pool, row_dim))


# A method of the pool, attached here, one layer up: pool.py does not know
# this module (the package is layered as the C library: pool, storage, kvcache).
BlockPoolAllocator._shared_storage = _shared_storage
