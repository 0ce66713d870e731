"""Hostile and careless use of the binding: each test crashed or misbehaved
before its fix (segfault, writes past an array, 2 GiB allocated for a
request that cannot be served, a format string cut at a NUL, an unclear
error for the 9th storage)."""

import resource
import threading
import time

import numpy as np
import pytest

import kvpool
from kvpool import BlockPoolAllocator, BlockStorage, PoolConfig, PooledKVCache

H, D = 2, 8


def rows(n, seed=0):
    return np.random.default_rng(seed).standard_normal((n, H, D)).astype(np.float32)


def test_cache_blocks_freed_and_retired_behind_its_back_raise(make_pool):
    # Before: SIGSEGV (ASan: heap-use-after-free in kvcache_attend.c).
    pool = make_pool(block_size=4, n_blocks=64)
    cache = PooledKVCache(pool, owner=5, n_kv_heads=H, head_dim=D, format="fp32")
    cache.append(rows(10), rows(10, 1))
    pool.free_all(5)
    pool.shrink("k", 0)
    pool.shrink("v", 0)
    q = np.ones((H, D), np.float32)
    with pytest.raises(kvpool.NotFoundError):
        cache.attend(q)
    with pytest.raises(kvpool.NotFoundError):
        cache.gather()
    with pytest.raises(kvpool.NotFoundError):
        cache.append(rows(1), rows(1))
    cache.release()  # a clean start (the shrunk pool has no block left to append to)
    assert len(cache) == 0 and cache.n_blocks_held() == 0
    cache.close()


def test_one_cache_shared_by_threads_never_overflows_gather(make_pool):
    # Before: gather sized its arrays from a length read before append ran,
    # and the C call wrote past them (segfault or heap corruption).
    pool = make_pool(block_size=16, n_blocks=4096)
    cache = PooledKVCache(pool, owner=6, n_kv_heads=H, head_dim=D, format="fp32")
    cache.append(rows(1), rows(1))
    stop = time.monotonic() + 1.5
    errors = []

    def appender():
        k = rows(200)
        while time.monotonic() < stop:
            try:
                cache.append(k, k)
                if len(cache) > 20000:
                    cache.trim(19000)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)
                return

    def gatherer():
        while time.monotonic() < stop:
            k, v = cache.gather()
            assert k.shape[1] == v.shape[1] >= 1

    ts = [threading.Thread(target=appender), threading.Thread(target=gatherer)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors
    cache.close()


def test_allocate_huge_n_tokens_raises_at_once_without_memory(make_pool):
    # Before: 1.9 s and 2 GiB (block_size 16), or 32 GiB asked (block_size 1),
    # before BlockPoolExhaustedError.
    for bs in (16, 1):
        pool = make_pool(block_size=bs, n_blocks=1024)
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t0 = time.monotonic()
        with pytest.raises(kvpool.BlockPoolExhaustedError):
            pool.allocate("k", 2**32 - 1, 7)
        assert time.monotonic() - t0 < 0.5
        assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0 < 50 * 1024  # KiB
        assert pool.n_free("k") == 512
        assert pool.stats.n_exhausted == 1  # counted like any exhausted request
    # a growth cap bounds it the same way
    pool = make_pool(block_size=1, n_blocks=64, grow_on_exhaustion=True, max_blocks=128)
    with pytest.raises(kvpool.BlockPoolExhaustedError):
        pool.allocate("k", 2**32 - 1, 7)
    # and a request the pool can serve still works
    assert len(pool.allocate("k", 32, 7)) == 32


def test_format_with_nul_is_refused(make_pool):
    pool = make_pool(block_size=4, n_blocks=8)
    with pytest.raises(ValueError, match="NUL"):
        pool.allocate("k", 4, 1, format="fp16\x00junk")
    with pytest.raises(ValueError, match="NUL"):
        PooledKVCache(pool, owner=2, n_kv_heads=H, head_dim=D, format="fp32\x00")


def test_ninth_storage_has_a_clear_error(make_pool):
    pool = make_pool(block_size=4, n_blocks=8)
    stores = [BlockStorage(pool, 4) for _ in range(8)]
    with pytest.raises(kvpool.KVPoolError, match="at most 8 storages"):
        BlockStorage(pool, 4)
    stores.pop().close()
    stores.append(BlockStorage(pool, 4))  # a slot freed is usable again
    for s in stores:
        s.close()
