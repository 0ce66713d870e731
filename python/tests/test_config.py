"""PoolConfig: defaults, validation, and how a pool takes its config."""

import dataclasses

import pytest

import kvpool
from kvpool import BlockPoolAllocator, PoolConfig


def test_defaults_are_the_seeds():
    c = PoolConfig()
    assert (c.block_size, c.n_blocks, c.separate_kv, c.grow_on_exhaustion, c.max_blocks) == (
        16,
        1024,
        True,
        False,
        None,
    )
    assert dataclasses.is_dataclass(c)


@pytest.mark.parametrize(
    "kw",
    [
        dict(block_size=0),
        dict(block_size=-1),
        dict(block_size=65536),
        dict(n_blocks=0),
        dict(n_blocks=-5),
        dict(n_blocks=1),  # separate_kv needs one block for each of K and V
        dict(n_blocks=8, max_blocks=4),
        dict(n_blocks=8, max_blocks=0),
        dict(thread_cache=-1),
        dict(thread_cache=1048577),
        dict(history_len=-1),
    ],
)
def test_bad_values_raise_value_error(kw):
    with pytest.raises(ValueError):
        PoolConfig(**kw)
    with pytest.raises(kvpool.InvalidArgumentError):
        PoolConfig(**kw)


@pytest.mark.parametrize(
    "kw",
    [
        dict(block_size="16"),
        dict(block_size=16.0),
        dict(block_size=True),
        dict(n_blocks=None),
        dict(separate_kv=1),
        dict(grow_on_exhaustion="yes"),
        dict(max_blocks=2048.0),
    ],
)
def test_wrong_types_raise_type_error(kw):
    with pytest.raises(TypeError):
        PoolConfig(**kw)


def test_one_block_is_fine_without_separate_kv(make_pool):
    pool = make_pool(n_blocks=1, separate_kv=False)
    assert pool.n_free("kv") == 1


def test_max_blocks_equal_to_n_blocks_is_allowed():
    PoolConfig(n_blocks=8, max_blocks=8)


def test_pool_keeps_its_own_copy_of_the_config(make_pool):
    cfg = PoolConfig(block_size=4, n_blocks=8)
    pool = BlockPoolAllocator(cfg)
    try:
        cfg.block_size = 8  # later edits of the caller's object change nothing
        assert pool.config.block_size == 4
        assert len(pool.allocate(stream="k", n_tokens=8, owner=1)) == 2
    finally:
        pool.close()


def test_pool_revalidates_an_edited_config():
    cfg = PoolConfig()
    cfg.block_size = 0
    with pytest.raises(ValueError):
        BlockPoolAllocator(cfg)


def test_default_config_when_none_given():
    with BlockPoolAllocator() as pool:
        assert pool.config == PoolConfig()
        assert pool.n_free("k") + pool.n_free("v") == 1024
        assert pool.stats.n_blocks == 1024


def test_n_blocks_split_between_k_and_v_k_takes_the_odd_one(make_pool):
    pool = make_pool(n_blocks=7)
    assert (pool.n_free("k"), pool.n_free("v")) == (4, 3)
