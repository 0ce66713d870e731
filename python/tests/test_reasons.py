"""Errors that say why, and python/README.md's claims about them."""

import numpy as np
import pytest

import kvpool


def test_a_write_to_an_int2_block_says_it_has_no_codec(make_pool):
    pool = make_pool(block_size=16, n_blocks=8)
    storage = kvpool.BlockStorage(pool, 8)
    for fmt in ("int2", "int1"):
        (block,) = pool.allocate(stream="k", n_tokens=4, owner=1, format=fmt)
        with pytest.raises(kvpool.InvalidArgumentError,
                           match=f"format {fmt} is a tag only, with no codec") as ei:
            storage.write(block, 0, np.zeros((4, 8), dtype=np.float32))
        assert ei.value.status == -1  # KVP_EINVAL
        pool.free_all(1)
    storage.close()


def test_inf_in_an_int8_block_is_named(make_pool):
    pool = make_pool(block_size=16, n_blocks=8)
    storage = kvpool.BlockStorage(pool, 8)
    (block,) = pool.allocate(stream="k", n_tokens=4, owner=1, format="int8")
    with pytest.raises(kvpool.InvalidArgumentError, match="int8 cannot hold inf or NaN"):
        storage.write(block, 0, np.full((4, 8), np.inf, dtype=np.float32))
    storage.close()


def test_a_second_cache_of_an_active_owner_raises_when_it_registers(make_pool):
    # python/README.md: made with dims, the second cache raises at once; made
    # without, it raises at its first append.
    pool = make_pool(block_size=16, n_blocks=64)
    first = kvpool.PooledKVCache(pool, owner=7, n_kv_heads=2, head_dim=8)
    with pytest.raises(kvpool.OwnerAlreadyActiveError):
        kvpool.PooledKVCache(pool, owner=7, n_kv_heads=2, head_dim=8)
    later = kvpool.PooledKVCache(pool, owner=7)  # no dims: not registered yet
    x = np.zeros((3, 2, 8), dtype=np.float32)
    with pytest.raises(kvpool.OwnerAlreadyActiveError):
        later.append(x, x)
    first.release()
    later.close()
    first.close()


def test_mlxblockstorage_is_not_exported():
    # python/README.md says so: the earlier name is BlockStorage here.
    assert not hasattr(kvpool, "MLXBlockStorage")
    assert "BlockStorage" in kvpool.__all__
