"""BlockStorage (MLXBlockStorage in the earlier Python implementation) over kvp_storage."""

import threading

import numpy as np
import pytest

import kvpool
from kvpool import BlockPoolAllocator, BlockStorage, PoolConfig


@pytest.fixture
def pool():
    p = BlockPoolAllocator(PoolConfig(block_size=4, n_blocks=16))
    yield p
    p.close()


def test_write_then_read_fp32_is_exact(pool):
    st = BlockStorage(pool, head_dim=8)
    (b,) = pool.allocate(stream="k", n_tokens=3, owner=1, format="fp32")
    rows = np.random.default_rng(0).standard_normal((3, 8))
    st.write(b, 0, rows)
    got = st.read(b)
    assert got.dtype == np.float32 and got.shape == (3, 8)
    assert np.array_equal(got, rows.astype(np.float32))


def test_write_at_an_offset_raises_n_used_and_accepts_one_row(pool):
    st = BlockStorage(pool, head_dim=4)
    (b,) = pool.allocate(stream="v", n_tokens=1, owner=1, format="fp32")
    assert b.n_used == 1
    st.write(b, 0, [1, 2, 3, 4])  # one row: shape (head_dim,)
    st.write(b, 2, np.full((1, 4), 7.0))
    assert b.n_used == 3
    got = st.read(b)
    assert got.shape == (3, 4)
    assert got[0].tolist() == [1, 2, 3, 4] and got[2].tolist() == [7, 7, 7, 7]


def test_write_past_the_block_is_a_value_error_and_writes_nothing(pool):
    st = BlockStorage(pool, head_dim=4)
    (b,) = pool.allocate(stream="k", n_tokens=2, owner=1, format="fp32")
    st.write(b, 0, np.zeros((2, 4)))
    with pytest.raises(ValueError) as ei:
        st.write(b, 3, np.ones((2, 4)))
    assert isinstance(ei.value, kvpool.OutOfRangeError)
    assert b.n_used == 2
    assert np.array_equal(st.read(b), np.zeros((2, 4), np.float32))


@pytest.mark.parametrize("shape", [(2, 5), (2, 2, 4), (5,), ()])
def test_rows_of_the_wrong_shape_are_rejected(pool, shape):
    st = BlockStorage(pool, head_dim=4)
    (b,) = pool.allocate(stream="k", n_tokens=4, owner=1)
    with pytest.raises(ValueError):
        st.write(b, 0, np.zeros(shape))


def test_a_block_never_written_reads_no_rows_and_holds_no_memory(pool):
    st = BlockStorage(pool, head_dim=4)
    (b,) = pool.allocate(stream="k", n_tokens=4, owner=1)
    assert st.read(b).shape == (0, 4)
    assert st.resident_bytes() == 0


def test_buffers_are_made_once_and_reused_in_place(pool):
    st = BlockStorage(pool, head_dim=16)
    (b,) = pool.allocate(stream="k", n_tokens=4, owner=1, format="fp16")
    st.write(b, 0, np.ones((4, 16)))
    one = st.resident_bytes()
    assert one > 0
    pool.free([b])
    (again,) = pool.allocate(stream="k", n_tokens=4, owner=2, format="fp16")
    assert again.block_id == b.block_id
    st.write(again, 0, np.full((4, 16), 2.0))
    assert st.resident_bytes() == one  # same buffer, overwritten
    assert np.array_equal(st.read(again), np.full((4, 16), 2.0, np.float32))


def test_format_change_replaces_the_buffer(pool):
    st = BlockStorage(pool, head_dim=64)
    (b,) = pool.allocate(stream="k", n_tokens=4, owner=1, format="fp32")
    st.write(b, 0, np.ones((4, 64)))
    fp32 = st.resident_bytes()
    pool.free([b])
    (b2,) = pool.allocate(stream="k", n_tokens=4, owner=1, format="int8")
    assert b2.block_id == b.block_id
    st.write(b2, 0, np.ones((4, 64)))
    assert 0 < st.resident_bytes() < fp32


# Per-element error bounds of each format (include/kvpool/storage.h).
BOUNDS = {
    "fp16": lambda x, amax: np.abs(x) * 2.0**-11,
    "bf16": lambda x, amax: np.abs(x) * 2.0**-8,
    "int8": lambda x, amax: np.broadcast_to(amax / 254, x.shape),
    "int4": lambda x, amax: np.broadcast_to(amax / 14, x.shape),
}


@pytest.mark.parametrize("fmt", sorted(BOUNDS))
def test_round_trip_within_the_formats_bound(pool, fmt):
    st = BlockStorage(pool, head_dim=32)
    (b,) = pool.allocate(stream="k", n_tokens=4, owner=1, format=fmt)
    x = np.random.default_rng(1).uniform(-3, 3, (4, 32)).astype(np.float32)
    st.write(b, 0, x)
    got = st.read(b)
    amax = np.abs(x).max(axis=1, keepdims=True)
    bound = BOUNDS[fmt](x, amax) * (1 + 1e-6) + 1e-30
    assert np.all(np.abs(got - x) <= bound), fmt


@pytest.mark.parametrize("fmt", ["int2", "int1"])
def test_formats_without_codec_refuse_writes(pool, fmt):
    st = BlockStorage(pool, head_dim=4)
    (b,) = pool.allocate(stream="k", n_tokens=4, owner=1, format=fmt)
    with pytest.raises(ValueError):
        st.write(b, 0, np.zeros((1, 4)))


def test_release_drops_a_free_blocks_buffer(pool):
    st = BlockStorage(pool, head_dim=8)
    (b,) = pool.allocate(stream="k", n_tokens=4, owner=1)
    st.write(b, 0, np.ones((4, 8)))
    with pytest.raises(ValueError):
        st.release(b)  # in use: its holder keeps the buffer
    pool.free([b])
    st.release(b)
    assert st.resident_bytes() == 0
    st.release(b)  # nothing left to drop: fine


def test_stale_and_foreign_blocks_are_refused(pool):
    st = BlockStorage(pool, head_dim=4)
    (b,) = pool.allocate(stream="k", n_tokens=4, owner=1)
    pool.free([b])
    with pytest.raises(kvpool.NotFoundError):
        st.write(b, 0, np.zeros((1, 4)))  # freed: not in use
    with BlockPoolAllocator(PoolConfig(block_size=4, n_blocks=4)) as other:
        (ob,) = other.allocate(stream="k", n_tokens=1, owner=1)
        with pytest.raises(ValueError):
            st.write(ob, 0, np.zeros((1, 4)))
    with pytest.raises(TypeError):
        st.read(0)
    with pytest.raises(ValueError):
        BlockStorage(pool, head_dim=0)
    with pytest.raises(TypeError):
        BlockStorage("pool", head_dim=4)


def test_a_pool_carries_at_most_eight_storages(pool):
    stores = [BlockStorage(pool, head_dim=4) for _ in range(8)]
    with pytest.raises(kvpool.OutOfRangeError):
        BlockStorage(pool, head_dim=4)
    stores.pop().close()
    BlockStorage(pool, head_dim=4).close()
    for s in stores:
        s.close()


def test_storage_keeps_the_c_pool_alive_after_the_pool_closes():
    p = BlockPoolAllocator(PoolConfig(block_size=4, n_blocks=4))
    st = BlockStorage(p, head_dim=4)
    (b,) = p.allocate(stream="k", n_tokens=4, owner=1, format="fp32")
    st.write(b, 0, np.ones((4, 4)))
    p.close()
    with pytest.raises(ValueError):
        p.allocate(stream="k", n_tokens=1, owner=2)  # the wrapper is closed...
    assert st.resident_bytes() > 0  # ...the C pool lives on for the storage
    assert np.array_equal(st.read(b), np.ones((4, 4), np.float32))
    st.close()
    with pytest.raises(ValueError):
        st.resident_bytes()


def test_threads_write_and_read_their_own_blocks():
    pool = BlockPoolAllocator(PoolConfig(block_size=8, n_blocks=64, separate_kv=False))
    st = BlockStorage(pool, head_dim=16)
    errors = []

    def worker(t):
        rng = np.random.default_rng(t)
        for i in range(20):
            blocks = pool.allocate(stream="kv", n_tokens=16, owner=t, format="fp32")
            rows = [rng.standard_normal((8, 16)).astype(np.float32) for _ in blocks]
            for b, r in zip(blocks, rows):
                st.write(b, 0, r)
            for b, r in zip(blocks, rows):
                if not np.array_equal(st.read(b), r):
                    errors.append((t, i, b.block_id))
            pool.free_all(t)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    st.close()
    pool.close()
