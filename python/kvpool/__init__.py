"""kvpool: a block-pool API in Python, backed by the C library libkvpool.so.

The package keeps the API of kvpool's earlier pure-Python implementation
(PoolConfig, BlockPoolAllocator, Block, AllocationStats,
BlockPoolExhaustedError, MLXBlockStorage - here BlockStorage -,
PooledKVCache, build_pooled_caches): the same names, arguments, defaults
and behaviours, so code written against it runs with a changed import.
python/README.md ("Compatibility") lists what that API promised and the
few places where the binding differs.

    from kvpool import BlockPoolAllocator, PoolConfig

    pool = BlockPoolAllocator(PoolConfig(block_size=16, n_blocks=64))
    pool.allocate(stream="k", n_tokens=40, owner=1)
    print(pool.stats)

Every call goes through ctypes.CDLL, which releases the GIL while the C
function runs, so Python threads sharing a pool run concurrently.  See
python/README.md for the API, the examples and how libkvpool.so is found.

numpy is needed only by BlockStorage and the KV caches (imported when they
are first used); ``kvpool.__version__`` is the loaded library's kvp_version().
"""

from . import _lib
from .errors import (
    BlockPoolExhaustedError,
    InvalidArgumentError,
    KVPoolError,
    KVPoolMemoryError,
    NotFoundError,
    OutOfRangeError,
    OwnerAlreadyActiveError,
    PrefixKeyExistsError,
    NotSupportedError,
    RemoteUnavailableError,
    strerror,
)
from .kvcache import AccountedKVCache, PooledKVCache, PooledKVCacheLayer, build_pooled_caches
from .pool import FORMATS, Block, BlockPoolAllocator, PoolConfig, to_prometheus
from .prefix import PrefixKey, prefix_hash
from .stats import AllocationStats
from .storage import BlockStorage
from .remote import RemoteTier

library_path = _lib.path
__version__ = _lib.version()

__all__ = [
    "__version__",
    "AccountedKVCache",
    "AllocationStats",
    "Block",
    "BlockPoolAllocator",
    "BlockPoolExhaustedError",
    "BlockStorage",
    "NotSupportedError",
    "RemoteTier",
    "RemoteUnavailableError",
    "FORMATS",
    "InvalidArgumentError",
    "KVPoolError",
    "KVPoolMemoryError",
    "NotFoundError",
    "OutOfRangeError",
    "OwnerAlreadyActiveError",
    "PoolConfig",
    "PrefixKey",
    "PrefixKeyExistsError",
    "PooledKVCache",
    "PooledKVCacheLayer",
    "build_pooled_caches",
    "library_path",
    "prefix_hash",
    "strerror",
    "to_prometheus",
]
