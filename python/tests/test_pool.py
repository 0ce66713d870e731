"""BlockPoolAllocator and Block: every documented behaviour of the Python API."""

import gc

import pytest

import kvpool
from kvpool import Block, BlockPoolAllocator, BlockPoolExhaustedError, PoolConfig

# --- allocate ------------------------------------------------------------------------


def test_allocate_hands_out_ceil_blocks_all_full_but_the_last(make_pool):
    pool = make_pool(block_size=16, n_blocks=64)
    blocks = pool.allocate(stream="k", n_tokens=40, owner=1)
    assert [b.n_used for b in blocks] == [16, 16, 8]
    assert all(b.owner == 1 and b.stream == "k" and b.format == "fp16" for b in blocks)
    assert all(b.ever_allocated and b.in_use for b in blocks)


def test_allocate_exact_multiple_fills_every_block(make_pool):
    pool = make_pool(block_size=4, n_blocks=16, separate_kv=False)
    blocks = pool.allocate(stream="kv", n_tokens=8, owner=1)
    assert [b.n_used for b in blocks] == [4, 4]


def test_allocate_positional_arguments_and_format(make_pool):
    pool = make_pool(block_size=4, n_blocks=8, separate_kv=False)
    (b,) = pool.allocate("kv", 3, 7, "int2")
    assert (b.owner, b.n_used, b.format) == (7, 3, "int2")


def test_blocks_of_different_formats_share_a_pool(make_pool):
    pool = make_pool(block_size=4, n_blocks=16, separate_kv=False)
    for fmt in kvpool.FORMATS:
        (b,) = pool.allocate(stream="kv", n_tokens=1, owner=1, format=fmt)
        assert b.format == fmt
    assert sorted(kvpool.FORMATS) == sorted("fp32 fp16 bf16 int8 int4 int2 int1".split())


def test_repeated_allocate_extends_the_owner_in_allocation_order(make_pool):
    pool = make_pool(block_size=4, n_blocks=16)
    first = pool.allocate(stream="k", n_tokens=8, owner=3)
    second = pool.allocate(stream="v", n_tokens=4, owner=3)
    assert pool.blocks_for(3) == first + second
    assert [b.block_id for b in pool.blocks_for(owner=3)] == [b.block_id for b in first + second]


def test_block_ids_are_dense_and_unique_across_streams(make_pool):
    pool = make_pool(block_size=1, n_blocks=64)
    k = pool.allocate(stream="k", n_tokens=32, owner=1)
    v = pool.allocate(stream="v", n_tokens=32, owner=2)
    ids_k = {b.block_id for b in k}
    ids_v = {b.block_id for b in v}
    assert ids_k.isdisjoint(ids_v)
    assert ids_k | ids_v == set(range(64))
    assert pool.n_ids == 64


def test_stream_is_ignored_without_separate_kv(make_pool):
    pool = make_pool(block_size=4, n_blocks=8, separate_kv=False)
    bk = pool.allocate(stream="k", n_tokens=4, owner=1)
    bv = pool.allocate(stream="v", n_tokens=4, owner=1)
    assert bk[0].stream == bv[0].stream == "kv"
    assert pool.n_free("k") == pool.n_free("v") == pool.n_free("kv") == 6


@pytest.mark.parametrize("n_tokens", [0, -1])
def test_allocate_rejects_non_positive_n_tokens(make_pool, n_tokens):
    pool = make_pool(block_size=4, n_blocks=4, separate_kv=False)
    with pytest.raises(ValueError):
        pool.allocate(stream="kv", n_tokens=n_tokens, owner=1)


def test_allocate_rejects_kv_stream_with_separate_kv(make_pool):
    pool = make_pool(block_size=4, n_blocks=8)
    with pytest.raises(ValueError):
        pool.allocate(stream="kv", n_tokens=1, owner=1)
    with pytest.raises(ValueError):
        pool.n_free("kv")


@pytest.mark.parametrize("separate_kv", [True, False])
def test_unknown_stream_name_is_rejected(make_pool, separate_kv):
    pool = make_pool(block_size=4, n_blocks=8, separate_kv=separate_kv)
    with pytest.raises(ValueError):
        pool.allocate(stream="x", n_tokens=1, owner=1)
    with pytest.raises(TypeError):
        pool.allocate(stream=0, n_tokens=1, owner=1)


def test_allocate_rejects_unknown_format(make_pool):
    pool = make_pool(block_size=4, n_blocks=8)
    with pytest.raises(ValueError):
        pool.allocate(stream="k", n_tokens=1, owner=1, format="fp8")
    assert pool.n_free("k") == 4


def test_owner_ids_cover_the_signed_64_bit_range(make_pool):
    pool = make_pool(block_size=4, n_blocks=16)
    for owner in (0, -1, 2**63 - 1, -(2**63)):
        (b,) = pool.allocate(stream="k", n_tokens=1, owner=owner)
        assert b.owner == owner
        assert pool.blocks_for(owner) == [b]
    for bad in (2**63, -(2**63) - 1):
        with pytest.raises(ValueError):
            pool.allocate(stream="k", n_tokens=1, owner=bad)
    with pytest.raises(TypeError):
        pool.allocate(stream="k", n_tokens=1, owner="req-1")


# --- exhaustion and growth -----------------------------------------------------------


def test_exhaustion_raises_and_hands_out_nothing(make_pool):
    pool = make_pool(block_size=4, n_blocks=2, separate_kv=False)
    with pytest.raises(BlockPoolExhaustedError):
        pool.allocate(stream="kv", n_tokens=100, owner=1)
    assert pool.n_free("kv") == 2
    assert pool.blocks_for(owner=1) == []
    assert pool.stats.n_exhausted == 1


def test_exhausted_is_a_kvpool_error_with_the_status(make_pool):
    pool = make_pool(block_size=4, n_blocks=2)
    with pytest.raises(kvpool.KVPoolError) as ei:
        pool.allocate(stream="k", n_tokens=5, owner=1)
    assert isinstance(ei.value, BlockPoolExhaustedError)
    assert ei.value.status == -2


def test_streams_never_borrow_from_each_other(make_pool):
    pool = make_pool(block_size=4, n_blocks=8)
    pool.allocate(stream="k", n_tokens=16, owner=1)
    assert pool.n_free("k") == 0
    with pytest.raises(BlockPoolExhaustedError):
        pool.allocate(stream="k", n_tokens=1, owner=1)
    assert pool.n_free("v") == 4
    assert len(pool.allocate(stream="v", n_tokens=16, owner=1)) == 4


def test_grow_on_exhaustion_grows_by_the_shortfall(make_pool):
    pool = make_pool(block_size=4, n_blocks=2, separate_kv=False, grow_on_exhaustion=True)
    blocks = pool.allocate(stream="kv", n_tokens=16, owner=1)
    assert len(blocks) == 4
    s = pool.stats
    assert (s.n_grown, s.n_blocks, s.n_exhausted) == (2, 4, 0)
    assert pool.n_free("kv") == 0


def test_growth_respects_max_blocks_all_or_nothing(make_pool):
    pool = make_pool(
        block_size=4, n_blocks=2, separate_kv=False, grow_on_exhaustion=True, max_blocks=3
    )
    with pytest.raises(BlockPoolExhaustedError):
        pool.allocate(stream="kv", n_tokens=16, owner=1)  # needs 4, the cap allows 3
    assert pool.blocks_for(owner=1) == []
    assert pool.stats.n_exhausted == 1
    assert len(pool.allocate(stream="kv", n_tokens=12, owner=1)) == 3  # exactly the cap
    assert pool.stats.n_blocks == 3


def test_growth_only_grows_the_exhausted_stream(make_pool):
    pool = make_pool(block_size=4, n_blocks=8, grow_on_exhaustion=True)
    assert len(pool.allocate(stream="k", n_tokens=100, owner=1)) == 25
    assert pool.n_free("v") == 4
    assert pool.stats.n_grown == 21


# --- free, free_all, blocks_for, n_free --------------------------------------------


def test_free_returns_blocks_and_the_views_show_it(make_pool):
    pool = make_pool(block_size=4, n_blocks=4, separate_kv=False)
    blocks = pool.allocate(stream="kv", n_tokens=16, owner=1)
    assert pool.n_free(stream="kv") == 0
    pool.free(blocks)
    assert pool.n_free(stream="kv") == 4
    for b in blocks:
        assert b.owner is None and b.n_used == 0 and not b.in_use
        assert b.ever_allocated and not b.is_stale
    assert pool.blocks_for(1) == []


def test_free_is_idempotent_and_counts_stale_frees(make_pool):
    pool = make_pool(block_size=4, n_blocks=4, separate_kv=False)
    blocks = pool.allocate(stream="kv", n_tokens=8, owner=1)
    pool.free(blocks)
    pool.free(blocks)
    pool.free(blocks[0])  # a single Block is accepted too
    s = pool.stats
    assert pool.n_free("kv") == 4
    assert (s.n_frees, s.n_stale_frees) == (2, 3)


def test_free_of_nothing_is_fine(make_pool):
    pool = make_pool(block_size=4, n_blocks=4)
    pool.free([])
    pool.free(iter(()))


def test_free_rejects_blocks_of_another_pool_or_made_by_hand(make_pool):
    a = make_pool(block_size=4, n_blocks=4)
    b = make_pool(block_size=4, n_blocks=4)
    blocks = a.allocate(stream="k", n_tokens=4, owner=1)
    with pytest.raises(ValueError):
        b.free(blocks)
    with pytest.raises(ValueError):
        a.free([Block(block_id=0)])
    with pytest.raises(TypeError):
        a.free([0])
    assert blocks[0].owner == 1


def test_free_of_an_id_never_created_is_not_found_and_frees_nothing(make_pool):
    pool = make_pool(block_size=4, n_blocks=4)
    good = pool.allocate(stream="k", n_tokens=4, owner=1)
    forged = Block._live(pool, 1000, "k", "fp16")  # an id the pool never created
    with pytest.raises(kvpool.NotFoundError) as ei:
        pool.free(good + [forged])
    assert isinstance(ei.value, LookupError)
    assert good[0].owner == 1  # all or nothing


def test_free_all_frees_only_that_owner(make_pool):
    pool = make_pool(block_size=4, n_blocks=8, separate_kv=False)
    pool.allocate(stream="kv", n_tokens=4, owner=1)
    kept = pool.allocate(stream="kv", n_tokens=4, owner=2)
    pool.free_all(owner=1)
    assert pool.n_free("kv") == 7
    assert pool.blocks_for(owner=1) == []
    assert pool.blocks_for(owner=2) == kept


def test_free_all_and_release_owner_of_unknown_owner_do_nothing(make_pool):
    pool = make_pool(block_size=4, n_blocks=8)
    pool.free_all(owner=42)
    pool.release_owner(42)
    assert pool.stats.n_frees == 0
    assert pool.blocks_for(42) == []


def test_freed_blocks_are_reused_last_freed_first(make_pool):
    pool = make_pool(block_size=4, n_blocks=8, separate_kv=False, thread_cache=0)
    b = pool.allocate(stream="kv", n_tokens=12, owner=1)
    pool.free([b[1]])
    assert pool.allocate(stream="kv", n_tokens=1, owner=2)[0].block_id == b[1].block_id
    pool.free([b[0]])
    pool.free([b[2]])
    assert pool.allocate(stream="kv", n_tokens=1, owner=2)[0].block_id == b[2].block_id


def test_same_blocks_reused_across_requests(make_pool):
    pool = make_pool(block_size=4, n_blocks=4, separate_kv=False)
    first = pool.allocate(stream="kv", n_tokens=16, owner=1)
    assert pool.stats.n_reused == 0
    pool.free_all(owner=1)
    second = pool.allocate(stream="kv", n_tokens=16, owner=2)
    assert {b.block_id for b in first} == {b.block_id for b in second}
    assert pool.stats.n_reused == 4


# --- stale handles -------------------------------------------------------------------


def test_a_stale_handle_cannot_touch_the_new_checkout(make_pool):
    pool = make_pool(block_size=4, n_blocks=2, separate_kv=False)
    (old,) = pool.allocate(stream="kv", n_tokens=4, owner=1)
    pool.free([old])
    new = [b for b in pool.allocate(stream="kv", n_tokens=8, owner=2) if b.block_id == old.block_id]
    assert len(new) == 1
    new = new[0]
    assert old.is_stale and not new.is_stale
    assert old != new and old.ref != new.ref
    assert (old.owner, old.n_used, old.in_use) == (None, 0, False)
    pool.free([old])  # skipped: the block now belongs to owner 2
    assert new.owner == 2 and new.in_use
    with pytest.raises(kvpool.NotFoundError):
        old.n_used = 1
    assert new.n_used == 4


# --- Block -------------------------------------------------------------------------------


def test_block_n_used_can_be_set_within_the_block(make_pool):
    pool = make_pool(block_size=4, n_blocks=4)
    (b,) = pool.allocate(stream="k", n_tokens=1, owner=1)
    b.n_used = 4
    assert b.n_used == 4
    assert pool.stats.n_not_full == 0
    with pytest.raises(kvpool.OutOfRangeError) as ei:
        b.n_used = 5
    assert isinstance(ei.value, ValueError)
    assert b.n_used == 4
    pool.free([b])
    with pytest.raises(kvpool.NotFoundError):
        b.n_used = 1  # not in use any more


def test_detached_block_has_the_seeds_defaults():
    b = Block(block_id=0)
    assert (b.block_id, b.stream, b.format, b.n_used, b.owner, b.ever_allocated) == (
        0,
        "kv",
        "fp16",
        0,
        None,
        False,
    )
    assert b.pool is None and b.ref is None and not b.in_use
    b.n_used = 3
    assert b.n_used == 3
    assert Block(block_id=1, owner=5) == Block(block_id=1, owner=5)
    assert "Block(block_id=0" in repr(b)


def test_live_blocks_are_hashable_and_compare_by_checkout(make_pool):
    pool = make_pool(block_size=4, n_blocks=8)
    blocks = pool.allocate(stream="k", n_tokens=16, owner=1)
    assert len(set(blocks) | set(pool.blocks_for(1))) == 4
    assert repr(blocks[0]) == (
        f"Block(block_id={blocks[0].block_id}, stream='k', format='fp16', n_used=4, "
        "owner=1, ever_allocated=True)"
    )


# --- owners ----------------------------------------------------------------------------


def test_owner_new_gives_fresh_ids_that_work_as_owners(make_pool):
    pool = make_pool(block_size=4, n_blocks=8, separate_kv=False)
    ids = {pool.owner_new() for _ in range(100)}
    assert len(ids) == 100
    a, b = sorted(ids)[:2]
    pool.allocate(stream="kv", n_tokens=8, owner=a)
    pool.allocate(stream="kv", n_tokens=4, owner=b)
    assert len(pool.blocks_for(a)) == 2 and len(pool.blocks_for(b)) == 1
    pool.free_all(a)
    pool.free_all(b)
    assert pool.n_free("kv") == 8


def test_register_owner_detects_a_collision(make_pool):
    pool = make_pool(block_size=4, n_blocks=8)
    pool.register_owner(1)
    with pytest.raises(kvpool.OwnerAlreadyActiveError):
        pool.register_owner(1)
    pool.release_owner(1)
    pool.register_owner(1)


def test_allocate_continues_a_registered_owner_which_stays_reserved(make_pool):
    pool = make_pool(block_size=4, n_blocks=8, separate_kv=False)
    pool.register_owner(1)
    pool.allocate(stream="kv", n_tokens=4, owner=1)
    assert len(pool.allocate(stream="kv", n_tokens=4, owner=1)) == 1
    with pytest.raises(kvpool.OwnerAlreadyActiveError):
        pool.register_owner(1)


def test_an_owner_holding_blocks_is_active(make_pool):
    pool = make_pool(block_size=4, n_blocks=8)
    pool.allocate(stream="k", n_tokens=4, owner=5)
    with pytest.raises(kvpool.OwnerAlreadyActiveError):
        pool.register_owner(5)
    pool.release_owner(5)  # frees nothing; the owner stays active while it holds blocks
    assert len(pool.blocks_for(5)) == 1
    with pytest.raises(kvpool.OwnerAlreadyActiveError):
        pool.register_owner(5)
    pool.free_all(5)
    pool.register_owner(5)


def test_owner_reusable_after_free_all(make_pool):
    pool = make_pool(block_size=4, n_blocks=8, separate_kv=False)
    pool.allocate(stream="kv", n_tokens=4, owner=1)
    pool.free_all(owner=1)
    assert len(pool.allocate(stream="kv", n_tokens=4, owner=1)) == 1


def test_failed_allocation_leaves_no_owner_behind(make_pool):
    pool = make_pool(block_size=4, n_blocks=2, separate_kv=False)
    with pytest.raises(BlockPoolExhaustedError):
        pool.allocate(stream="kv", n_tokens=100, owner=1)
    pool.release_owner(1)
    pool.register_owner(1)


# --- shrink ------------------------------------------------------------------------------


def test_shrink_retires_only_free_blocks(make_pool):
    pool = make_pool(block_size=4, n_blocks=8, separate_kv=False)
    pool.allocate(stream="kv", n_tokens=4, owner=1)
    assert pool.shrink(stream="kv", target_free=2) == 5
    assert pool.n_free("kv") == 2
    s = pool.stats
    assert (s.n_blocks, s.n_retired, s.blocks_in_use()) == (3, 5, 1)


def test_shrink_never_touches_blocks_in_use(make_pool):
    pool = make_pool(block_size=4, n_blocks=4, separate_kv=False)
    blocks = pool.allocate(stream="kv", n_tokens=16, owner=1)
    assert pool.shrink(stream="kv", target_free=0) == 0
    assert all(b.owner == 1 for b in blocks)
    pool.free(blocks)
    assert pool.n_free("kv") == 4


def test_shrink_below_target_is_a_no_op_and_negative_target_is_rejected(make_pool):
    pool = make_pool(block_size=4, n_blocks=4, separate_kv=False)
    assert pool.shrink(stream="kv", target_free=10) == 0
    with pytest.raises(ValueError):
        pool.shrink(stream="kv", target_free=-1)
    assert pool.n_free("kv") == 4


def test_shrink_one_stream_and_retired_handles_go_stale(make_pool):
    pool = make_pool(block_size=4, n_blocks=8)
    blocks = pool.allocate(stream="k", n_tokens=4, owner=1)
    pool.free(blocks)
    assert pool.shrink("k", 0) == 4
    assert pool.n_free("k") == 0 and pool.n_free("v") == 4
    assert blocks[0].is_stale
    with pytest.raises(BlockPoolExhaustedError):
        pool.allocate(stream="k", n_tokens=1, owner=1)


# --- lifetime ------------------------------------------------------------------------------


def test_closed_pool_refuses_calls():
    pool = BlockPoolAllocator(PoolConfig(block_size=4, n_blocks=4))
    (b,) = pool.allocate(stream="k", n_tokens=1, owner=1)
    pool.close()
    pool.close()  # idempotent
    assert pool.closed
    with pytest.raises(ValueError):
        pool.allocate(stream="k", n_tokens=1, owner=1)
    with pytest.raises(ValueError):
        b.owner
    assert repr(pool) == "BlockPoolAllocator(closed)"


def test_with_statement_closes_the_pool():
    with BlockPoolAllocator(PoolConfig(block_size=4, n_blocks=4)) as pool:
        pool.allocate(stream="k", n_tokens=1, owner=1)
    assert pool.closed


def test_blocks_keep_their_pool_alive():
    blocks = BlockPoolAllocator(PoolConfig(block_size=4, n_blocks=4)).allocate(
        stream="k", n_tokens=8, owner=9
    )
    gc.collect()
    assert [b.owner for b in blocks] == [9, 9]
    pool = blocks[0].pool
    del blocks
    pool.close()


def test_repr_shows_the_stats(make_pool):
    pool = make_pool(block_size=16, n_blocks=64)
    assert repr(pool) == f"BlockPoolAllocator({pool.stats!r})"
