"""PooledKVCache and build_pooled_caches over kvp_kvcache."""

import math
import threading

import numpy as np
import pytest

import kvpool
from kvpool import BlockPoolAllocator, PoolConfig, PooledKVCache, build_pooled_caches

H, D = 2, 8  # kv heads, head dim


@pytest.fixture
def pool():
    p = BlockPoolAllocator(PoolConfig(block_size=4, n_blocks=64))
    yield p
    p.close()


def rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def reference_attend(q, k, v, scale):
    """q (n_heads, D); k, v (H, T, D) -> (n_heads, D), grouped-query heads."""
    group = q.shape[0] // k.shape[0]
    out = np.empty_like(q, dtype=np.float64)
    for h in range(q.shape[0]):
        kh, vh = k[h // group].astype(np.float64), v[h // group].astype(np.float64)
        s = scale * (kh @ q[h].astype(np.float64))
        w = np.exp(s - s.max())
        out[h] = (w / w.sum()) @ vh
    return out


def test_gather_is_bit_identical_to_the_appended_rows_fp32(pool):
    rng = np.random.default_rng(0)
    with PooledKVCache(pool, owner=1, n_layers=2, format="fp32") as c:
        ks, vs = [], []
        for n in (3, 1, 6, 4):
            k, v = rand(rng, n, H, D), rand(rng, n, H, D)
            c.append(k, v, layer=1)
            ks.append(k)
            vs.append(v)
        gk, gv = c.gather(1)
        assert gk.shape == (H, 14, D)
        assert np.array_equal(gk, np.concatenate(ks).transpose(1, 0, 2))
        assert np.array_equal(gv, np.concatenate(vs).transpose(1, 0, 2))
        assert (c.length(1), c.length(0), len(c)) == (14, 0, 0)


def test_attend_matches_naive_attention(pool):
    rng = np.random.default_rng(1)
    with PooledKVCache(pool, owner=1, format="fp32") as c:
        k, v = rand(rng, 13, H, D), rand(rng, 13, H, D)
        c.append(k, v)
        q = rand(rng, 4, D)  # 4 query heads over 2 kv heads
        got = c.attend(q)
        want = reference_attend(q, k.transpose(1, 0, 2), v.transpose(1, 0, 2), 1 / math.sqrt(D))
        assert got.shape == (4, D)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        got2 = c.attend(q, scale=0.5)
        want2 = reference_attend(q, k.transpose(1, 0, 2), v.transpose(1, 0, 2), 0.5)
        np.testing.assert_allclose(got2, want2, rtol=1e-5, atol=1e-6)
        with pytest.raises(ValueError):
            c.attend(rand(rng, 3, D))  # 3 heads: not a multiple of 2 kv heads


def test_blocks_are_checked_out_per_block_not_per_token(pool):
    rng = np.random.default_rng(2)
    with PooledKVCache(pool, owner=9, n_kv_heads=H, head_dim=D) as c:
        for t in range(1, 11):
            c.append(rand(rng, H, D), rand(rng, H, D))  # one token: (n_kv_heads, head_dim)
            assert c.n_blocks_held() == 2 * math.ceil(t / 4)
        assert len(pool.blocks_for(9)) == c.n_blocks_held() == 6
        assert pool.stats.n_allocations == 6


def test_release_returns_every_block_and_the_cache_stays_usable(pool):
    rng = np.random.default_rng(3)
    free0 = pool.n_free("k") + pool.n_free("v")
    c = PooledKVCache(pool, owner=5, n_layers=3)
    for layer in range(3):
        c.append(rand(rng, 5, H, D), rand(rng, 5, H, D), layer=layer)
    assert c.n_blocks_held() == 3 * 2 * 2
    c.release()
    assert c.n_blocks_held() == 0 and len(c) == 0
    assert pool.n_free("k") + pool.n_free("v") == free0
    c.append(rand(rng, 1, H, D), rand(rng, 1, H, D))
    assert len(c) == 1
    c.close()
    assert pool.n_free("k") + pool.n_free("v") == free0
    pool.register_owner(5)  # close unregistered the owner


def test_next_request_reuses_blocks_and_buffers(pool):
    rng = np.random.default_rng(4)
    first = PooledKVCache(pool, owner=1)
    first.append(rand(rng, 8, H, D), rand(rng, 8, H, D))
    store = pool._shared_storage(H * D)
    resident = store.resident_bytes()
    first.close()
    reused = pool.stats.n_reused
    second = PooledKVCache(pool, owner=2)
    k, v = rand(rng, 8, H, D), rand(rng, 8, H, D)
    second.append(k, v)
    assert pool.stats.n_reused == reused + 4
    assert store.resident_bytes() == resident  # no new buffer for the reused blocks
    gk, _ = second.gather()
    np.testing.assert_allclose(gk, k.transpose(1, 0, 2), rtol=2**-10)  # fp16 default
    second.close()


def test_trim_across_block_boundaries(pool):
    rng = np.random.default_rng(5)
    with PooledKVCache(pool, owner=1, n_layers=2, format="fp32") as c:
        k, v = rand(rng, 10, H, D), rand(rng, 10, H, D)
        c.append(k, v, layer=0)
        c.append(k[:6], v[:6], layer=1)
        assert c.n_blocks_held() == 2 * 3 + 2 * 2
        assert c.trim(5) == 5
        assert (c.length(0), c.length(1)) == (5, 1)
        assert c.n_blocks_held() == 2 * 2 + 2 * 1
        gk, _ = c.gather(0)
        assert np.array_equal(gk, k[:5].transpose(1, 0, 2))
        assert c.trim(100) == 5
        assert c.n_blocks_held() == 0
        assert c.trim(0) == 0


def test_one_cache_per_owner(pool):
    c = PooledKVCache(pool, owner=3, n_kv_heads=H, head_dim=D)
    with pytest.raises(kvpool.OwnerAlreadyActiveError):
        PooledKVCache(pool, owner=3, n_kv_heads=H, head_dim=D)
    c.close()
    PooledKVCache(pool, owner=3, n_kv_heads=H, head_dim=D).close()


def test_exhaustion_during_append_changes_nothing():
    with BlockPoolAllocator(PoolConfig(block_size=4, n_blocks=4)) as pool:
        rng = np.random.default_rng(6)
        c = PooledKVCache(pool, owner=1)
        c.append(rand(rng, 4, H, D), rand(rng, 4, H, D))
        with pytest.raises(kvpool.BlockPoolExhaustedError):
            c.append(rand(rng, 9, H, D), rand(rng, 9, H, D))
        assert len(c) == 4 and c.n_blocks_held() == 2
        c.close()


def test_arguments_are_checked(pool):
    rng = np.random.default_rng(7)
    c = PooledKVCache(pool, owner=1, n_layers=2)
    assert len(c) == 0 and c.n_blocks_held() == 0 and c.trim(3) == 0
    with pytest.raises(ValueError):
        c.gather()  # nothing appended: dims unknown
    c.append(rand(rng, 2, H, D), rand(rng, 2, H, D))
    with pytest.raises(ValueError):
        c.append(rand(rng, 2, H, D + 1), rand(rng, 2, H, D + 1))  # dims fixed by the first append
    with pytest.raises(ValueError):
        c.append(rand(rng, 2, H, D), rand(rng, 3, H, D))
    with pytest.raises(ValueError):
        c.append(rand(rng, 2, H, D), rand(rng, 2, H, D), layer=2)
    with pytest.raises(ValueError):
        c.append(rand(rng, D), rand(rng, D))
    with pytest.raises(ValueError):
        PooledKVCache(pool, owner=2, n_layers=0)
    with pytest.raises(ValueError):
        PooledKVCache(pool, owner=2, n_kv_heads=H)
    with pytest.raises(ValueError):
        PooledKVCache(pool, owner=2, format="int2", n_kv_heads=H, head_dim=D)  # no codec
    with pytest.raises(TypeError):
        PooledKVCache(None, owner=2)
    c.close()
    with pytest.raises(ValueError):
        c.append(rand(rng, 1, H, D), rand(rng, 1, H, D))


def test_explicit_storages(pool):
    k_store = kvpool.BlockStorage(pool, head_dim=H * D)
    v_store = kvpool.BlockStorage(pool, head_dim=H * D)
    rng = np.random.default_rng(8)
    kw = dict(n_kv_heads=H, head_dim=D)
    with PooledKVCache(pool, 1, k_storage=k_store, v_storage=v_store, **kw) as c:
        c.append(rand(rng, 4, H, D), rand(rng, 4, H, D))
        assert k_store.resident_bytes() > 0 and v_store.resident_bytes() > 0
    wrong = kvpool.BlockStorage(pool, head_dim=D)
    with pytest.raises(ValueError):
        PooledKVCache(pool, 2, k_storage=wrong, v_storage=wrong, **kw)
    with pytest.raises(ValueError):
        PooledKVCache(pool, 2, k_storage=k_store)


def test_build_pooled_caches_gives_one_cache_per_layer_under_one_owner(pool):
    rng = np.random.default_rng(9)
    caches = build_pooled_caches(4, pool, owner=77)
    assert len(caches) == 4
    for i, layer in enumerate(caches):
        layer.append(rand(rng, 1 + i, H, D), rand(rng, 1 + i, H, D))
    assert [len(layer) for layer in caches] == [1, 2, 3, 4]
    assert [layer.offset for layer in caches] == [1, 2, 3, 4]
    assert all(b.owner == 77 for b in pool.blocks_for(77))
    assert caches[0].n_blocks_held() == 8 == len(pool.blocks_for(77))
    out = caches[2].attend(rand(rng, H, D))
    assert out.shape == (H, D)
    k, v = caches[3].gather()
    assert k.shape == (H, 4, D)
    caches[1].release()  # the whole request, as the Python API promises
    assert pool.blocks_for(77) == []
    assert all(len(layer) == 0 for layer in caches)
    caches[0].cache.close()


def test_threads_each_run_their_own_request_on_one_pool():
    pool = BlockPoolAllocator(PoolConfig(block_size=8, n_blocks=512))
    errors = []

    def worker(t):
        rng = np.random.default_rng(100 + t)
        for r in range(6):
            caches = build_pooled_caches(2, pool, owner=t * 1000 + r, format="fp32")
            ks, vs = [], []
            for _ in range(3):
                n = int(rng.integers(1, 20))
                k, v = rand(rng, n, H, D), rand(rng, n, H, D)
                caches[1].append(k, v)
                ks.append(k)
                vs.append(v)
            k = np.concatenate(ks).transpose(1, 0, 2)
            v = np.concatenate(vs).transpose(1, 0, 2)
            q = rand(rng, 2 * H, D)
            want = reference_attend(q, k, v, 1 / math.sqrt(D))
            if not np.allclose(caches[1].attend(q), want, rtol=1e-5, atol=1e-6):
                errors.append((t, r))
            caches[0].cache.close()

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    assert pool.n_free("k") + pool.n_free("v") == 512
    pool.close()


# --- the wrapper form of the Python API ----------------------------------------------------


class RecordingCache:
    def __init__(self):
        self.keys, self.values, self.resets = [], [], 0

    def append_key(self, k):
        self.keys.append(k)

    def append_value(self, v):
        self.values.append(v)

    def attend(self, q):
        return ("attended", len(self.keys), q)

    def memory_bytes(self):
        return 8 * len(self.keys)

    def reset(self):
        self.keys, self.values = [], []
        self.resets += 1


def test_seed_form_makes_an_accounting_wrapper(pool):
    inner = RecordingCache()
    c = PooledKVCache(inner, pool, owner=12, format="int2")
    assert isinstance(c, kvpool.AccountedKVCache)
    assert isinstance(PooledKVCache(inner=inner, pool=pool), kvpool.AccountedKVCache)
    for t in range(9):  # block_size 4: 3 K and 3 V blocks
        c.append_key(t)
        assert c.n_blocks_held() == (t // 4 + 1) + (t + 3) // 4  # K blocks + V blocks
        c.append_value(-t)
    assert inner.keys == list(range(9)) and inner.values == [-t for t in range(9)]
    assert len(c) == 9 and c.n_blocks_held() == 6 and c.memory_bytes() == 72
    assert c.attend("q") == ("attended", 9, "q")
    blocks = pool.blocks_for(12)
    assert [(b.stream, b.n_used, b.format) for b in blocks] == [
        ("k", 4, "int2"), ("v", 4, "int2"), ("k", 4, "int2"),
        ("v", 4, "int2"), ("k", 1, "int2"), ("v", 1, "int2"),
    ]
    assert pool.stats.n_not_full == 2
    c.reset()
    assert inner.resets == 1 and c.n_blocks_held() == 0 and pool.blocks_for(12) == []


def test_seed_form_default_owner_and_exhaustion():
    with BlockPoolAllocator(PoolConfig(block_size=2, n_blocks=2)) as pool:
        inner = RecordingCache()
        c = PooledKVCache(inner, pool)  # the Python API's default owner, -1
        assert c.owner == -1
        c.append(1, 1)
        c.append(2, 2)
        assert [b.owner for b in pool.blocks_for(-1)] == [-1, -1]
        with pytest.raises(kvpool.BlockPoolExhaustedError):
            c.append_key(3)
        assert inner.keys == [1, 2]  # nothing appended without a block
        c.release()
        assert pool.n_free("k") == pool.n_free("v") == 1
        with pytest.raises(TypeError):
            kvpool.AccountedKVCache(inner, "pool")
