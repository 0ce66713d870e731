"""Prefix cache in Python: prefix_hash equals hashlib's SHA-256 of the
documented layout, and the pool's match / publish / free_owned / reset."""

import hashlib
import random
import struct
import threading

import pytest

import kvpool
from kvpool import (
    InvalidArgumentError,
    NotFoundError,
    PrefixKey,
    PrefixKeyExistsError,
    prefix_hash,
)


def reference_key(parent, salt, data):
    """docs/PREFIX.md, computed independently of the C library."""
    plo, phi = parent if parent is not None else (0, 0)
    d = hashlib.sha256(
        bytes([1, 0 if parent is None else 1]) + struct.pack("<QQQ", plo, phi, salt) + data
    ).digest()
    return struct.unpack_from("<QQ", d)


# --- prefix_hash ----------------------------------------------------------------------


def test_prefix_hash_equals_hashlib_over_random_chains():
    rng = random.Random(11)
    for _ in range(50):
        parent = None
        salt = rng.randrange(1 << 64)
        for _ in range(rng.randrange(1, 6)):
            toks = [rng.randrange(1 << 32) for _ in range(rng.randrange(0, 40))]
            got = prefix_hash(parent, toks, salt=salt)
            want = reference_key(parent, salt, b"".join(t.to_bytes(4, "little") for t in toks))
            assert tuple(got) == want
            parent = got


def test_prefix_hash_bytes_are_hashed_as_given():
    data = bytes(range(256)) * 3
    parent = PrefixKey(0x0123456789ABCDEF, 0xFEDCBA9876543210)
    assert tuple(prefix_hash(parent, data, salt=0xDEADBEEFCAFEF00D)) == reference_key(
        parent, 0xDEADBEEFCAFEF00D, data
    )
    assert prefix_hash(None, bytearray(b"ab")) == prefix_hash(None, memoryview(b"ab"))


def test_prefix_hash_token_ids_are_little_endian_uint32():
    assert prefix_hash(None, [1, 2]) == prefix_hash(None, struct.pack("<2I", 1, 2))
    # a known vector (docs/PREFIX.md)
    assert prefix_hash(None, [1, 2, 3, 4]) == (0xC6D366AAC39D8418, 0x55E9C19F744982C3)


def test_prefix_hash_parent_none_differs_from_zero_parent():
    assert prefix_hash(None, b"") != prefix_hash((0, 0), b"")
    assert tuple(prefix_hash((0, 0), b"")) == reference_key((0, 0), 0, b"")


def test_prefix_hash_rejects_bad_arguments():
    with pytest.raises(TypeError):
        prefix_hash(None, [1.5])
    with pytest.raises(ValueError):
        prefix_hash(None, [-1])
    with pytest.raises(ValueError):
        prefix_hash(None, [1 << 32])
    with pytest.raises(ValueError):
        prefix_hash(None, b"", salt=-1)
    with pytest.raises(TypeError):
        prefix_hash(None, b"", salt=True)
    with pytest.raises(TypeError):
        prefix_hash(5, b"")
    with pytest.raises(ValueError):
        prefix_hash((1 << 64, 0), b"")


def test_prefix_hash_from_threads_matches_one_thread():
    keys = [prefix_hash(None, [i] * 16) for i in range(200)]
    bad = []

    def work():
        for i in range(200):
            if prefix_hash(None, [i] * 16) != keys[i]:
                bad.append(i)

    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert bad == []


# --- the pool ------------------------------------------------------------------------


def chain(n, salt=0, base=0):
    keys, parent = [], None
    for i in range(n):
        parent = prefix_hash(parent, [base + i] * 4, salt=salt)
        keys.append(parent)
    return keys


def test_prefix_cache_is_off_by_default_and_a_bool():
    assert kvpool.PoolConfig().prefix_cache is False
    with pytest.raises(TypeError):
        kvpool.PoolConfig(prefix_cache=1)


def test_prefix_calls_refused_without_prefix_cache(make_pool):
    pool = make_pool(block_size=4, n_blocks=8)
    (b,) = pool.allocate("k", 4, owner=1)
    with pytest.raises(InvalidArgumentError):
        pool.publish(b, chain(1)[0])
    with pytest.raises(InvalidArgumentError):
        pool.match_prefix("k", chain(1), owner=2)
    with pytest.raises(InvalidArgumentError):
        pool.free_owned(1, [b])
    assert pool.reset_prefix_cache() == 0
    assert not b.published and b.n_holders == 1


def test_publish_match_share_and_free_owned(make_pool):
    pool = make_pool(block_size=4, n_blocks=16, prefix_cache=True)
    keys = chain(3)
    blocks = pool.allocate("k", 12, owner=1)
    for b, k in zip(blocks, keys):
        pool.publish(b, k)
    assert all(b.published for b in blocks)
    got = pool.match_prefix("k", keys + chain(1, base=99), owner=2)
    assert got == blocks  # the same refs, stops at the unknown fourth key
    assert [b.n_holders for b in blocks] == [2, 2, 2]
    assert all(b.n_used == 4 for b in got)
    assert pool.blocks_for(2) == blocks
    # plain free of a shared block is refused and frees nothing
    with pytest.raises(InvalidArgumentError):
        pool.free(blocks)
    assert [b.n_holders for b in blocks] == [2, 2, 2]
    pool.free_owned(1, blocks)
    assert [b.n_holders for b in blocks] == [1, 1, 1]
    st = pool.stats
    assert st.n_prefix_queries == 4 and st.n_prefix_hits == 3
    pool.free_owned(2, blocks)
    st = pool.stats
    assert st.n_cached == 3 and st.blocks_in_use() == 0
    # cached blocks are still found; a revived block is a new checkout
    again = pool.match_prefix("k", keys, owner=3)
    assert [b.block_id for b in again] == [b.block_id for b in blocks]
    assert all(b.is_stale for b in blocks)
    assert pool.stats.n_cached == 0
    pool.free_all(3)


def test_publish_errors(make_pool):
    pool = make_pool(block_size=4, n_blocks=16, prefix_cache=True)
    key = chain(1)[0]
    a, part = pool.allocate("k", 6, owner=1)
    with pytest.raises(InvalidArgumentError):
        pool.publish(part, chain(1, base=5)[0])  # not full
    pool.publish(a, key)
    with pytest.raises(InvalidArgumentError):
        pool.publish(a, chain(1, base=6)[0])  # already published
    (b,) = pool.allocate("k", 4, owner=2)
    with pytest.raises(PrefixKeyExistsError):
        pool.publish(b, key)
    assert not b.published
    (v,) = pool.allocate("v", 4, owner=2)
    pool.publish(v, key)  # another stream: no clash
    with pytest.raises(TypeError):
        pool.publish(b, 7)
    pool.free_all(2)
    with pytest.raises(InvalidArgumentError):
        pool.publish(b, chain(1, base=7)[0])  # free
    pool.allocate("k", 16, owner=3)  # hands b's block out again: b is stale
    assert b.is_stale
    with pytest.raises(NotFoundError):
        pool.publish(b, chain(1, base=7)[0])


def test_match_separates_streams_and_formats(make_pool):
    pool = make_pool(block_size=4, n_blocks=16, prefix_cache=True)
    keys = chain(2)
    blocks = pool.allocate("k", 8, owner=1, format="fp32")
    for b, k in zip(blocks, keys):
        pool.publish(b, k)
    assert pool.match_prefix("v", keys, owner=2, format="fp32") == []
    assert pool.match_prefix("k", keys, owner=2, format="fp16") == []
    assert pool.match_prefix("k", keys, owner=2, format="fp32") == blocks
    assert pool.match_prefix("k", [], owner=3) == []


def test_reset_prefix_cache_forgets_every_key(make_pool):
    pool = make_pool(block_size=4, n_blocks=16, prefix_cache=True)
    keys = chain(4)
    blocks = pool.allocate("k", 16, owner=1)
    for b, k in zip(blocks, keys):
        pool.publish(b, k)
    pool.free_owned(1, blocks[2:])  # two cached, two held
    assert pool.stats.n_cached == 2
    assert pool.reset_prefix_cache() == 4
    assert pool.stats.n_cached == 0
    assert not blocks[0].published and blocks[0].in_use
    assert pool.match_prefix("k", keys, owner=2) == []
    pool.free_all(1)


def test_eviction_counts_in_stats(make_pool):
    pool = make_pool(block_size=4, n_blocks=8, prefix_cache=True)  # 4 per stream
    keys = chain(4)
    blocks = pool.allocate("k", 16, owner=1)
    for b, k in zip(blocks, keys):
        pool.publish(b, k)
    pool.free_all(1)
    assert pool.n_free("k") == 4 and pool.stats.n_cached == 4
    pool.allocate("k", 4, owner=2)  # no uncached free block: evicts one
    st = pool.stats
    assert st.n_evictions == 1 and st.n_cached == 3
    # cached last block first: the end of the sequence went first
    assert len(pool.match_prefix("k", keys, owner=3)) == 3


def test_storage_refuses_writes_to_published_blocks(make_pool):
    import numpy as np

    pool = make_pool(block_size=2, n_blocks=8, prefix_cache=True)
    st = kvpool.BlockStorage(pool, 4)
    try:
        (b,) = pool.allocate("k", 2, owner=1, format="fp32")
        rows = np.arange(8, dtype=np.float32).reshape(2, 4)
        st.write(b, 0, rows)
        pool.publish(b, chain(1)[0])
        with pytest.raises(InvalidArgumentError):
            st.write(b, 0, rows + 1)
        assert np.array_equal(st.read(b), rows)
    finally:
        st.close()


# --- rows follow the holder (kvpool/storage.h) ------------------------------------------


def _rows(base):
    import numpy as np

    return (np.arange(8, dtype=np.float32) + base).reshape(2, 4)


def test_publishing_an_unwritten_block_shows_zeros_not_the_last_owners_rows(make_pool):
    import numpy as np

    pool = make_pool(block_size=2, n_blocks=8, prefix_cache=True)  # 4 per stream
    st = kvpool.BlockStorage(pool, 4)
    try:
        (a,) = pool.allocate("k", 2, owner=1, format="fp32")
        st.write(a, 0, _rows(1))
        pool.free_all(1)
        mine = [b for b in pool.allocate("k", 8, owner=2, format="fp32") if b.block_id == a.block_id]
        assert len(mine) == 1
        (b,) = mine
        assert np.array_equal(st.read(b), np.zeros((2, 4), np.float32))
        key = chain(1, base=70)[0]
        pool.publish(b, key)
        assert np.array_equal(st.read(b), np.zeros((2, 4), np.float32))
        (c,) = pool.match_prefix("k", [key], owner=3, format="fp32")
        assert np.array_equal(st.read(c), np.zeros((2, 4), np.float32))
        pool.free_all(2)
        pool.free_all(3)
    finally:
        st.close()


def test_after_a_reset_two_holders_cannot_write_and_read_the_published_rows(make_pool):
    import numpy as np

    pool = make_pool(block_size=2, n_blocks=8, prefix_cache=True)
    st = kvpool.BlockStorage(pool, 4)
    try:
        (a,) = pool.allocate("k", 2, owner=1, format="fp32")
        st.write(a, 0, _rows(1))
        key = chain(1, base=80)[0]
        pool.publish(a, key)
        pool.free_all(1)  # cached
        (b,) = pool.match_prefix("k", [key], owner=2, format="fp32")
        (c,) = pool.match_prefix("k", [key], owner=3, format="fp32")
        assert pool.reset_prefix_cache() == 1
        assert not b.published and b.n_holders == 2
        with pytest.raises(InvalidArgumentError):
            st.write(b, 0, _rows(500))
        assert np.array_equal(st.read(c), _rows(1))
        assert np.array_equal(st.read(b), _rows(1))
        pool.free_all(2)
        pool.free_all(3)
    finally:
        st.close()


def test_a_reset_leaves_a_holders_rows_unchanged(make_pool):
    import numpy as np

    pool = make_pool(block_size=2, n_blocks=8, prefix_cache=True)
    st = kvpool.BlockStorage(pool, 4)
    try:
        (a,) = pool.allocate("k", 2, owner=1, format="fp32")
        st.write(a, 0, _rows(1))
        key = chain(1, base=90)[0]
        pool.publish(a, key)
        pool.free_all(1)
        (b,) = pool.match_prefix("k", [key], owner=2, format="fp32")
        assert np.array_equal(st.read(b), _rows(1))
        assert pool.reset_prefix_cache() == 1
        assert np.array_equal(st.read(b), _rows(1))
        pool.free_all(2)
    finally:
        st.close()


def test_publish_many_publishes_each_block_as_publish_would(make_pool):
    pool = make_pool(block_size=4, n_blocks=32, prefix_cache=True)
    keys = chain(4)
    blocks = pool.allocate("k", 16, owner=1)
    (other,) = pool.allocate("k", 4, owner=2)
    pool.publish(other, keys[2])  # keys[2] is taken before the batch
    # keys[1] twice in the batch: the first block wins.
    got = pool.publish_many(blocks, [keys[0], keys[1], keys[2], keys[1]])
    assert got == [True, True, False, False]
    assert [b.published for b in blocks] == [True, True, False, False]
    assert pool.match_prefix("k", keys[:2], owner=3) == blocks[:2]
    assert pool.publish_many([], []) == []
    with pytest.raises(ValueError):
        pool.publish_many(blocks[2:], keys[:1])  # lengths differ
    # A failure other than a taken key is raised after the batch was tried.
    (part,) = pool.allocate("k", 3, owner=4)
    with pytest.raises(InvalidArgumentError):
        pool.publish_many([part, blocks[3]], [chain(1, base=9)[0], keys[3]])
    assert blocks[3].published and not part.published
