"""AllocationStats, pool.stats, pool.history and the Prometheus export."""

import shutil
import subprocess

import pytest

from kvpool import AllocationStats, BlockPoolAllocator, BlockPoolExhaustedError, PoolConfig

SEED_LINE = (
    "AllocationStats(in_use=3/64, allocations=3, frees=0, reused=0, exhausted=0, "
    "grown=0, retired=0, peak=3, fragmentation=0.016)"
)


def test_the_seeds_example_prints_the_seeds_line(capsys):
    pool = BlockPoolAllocator(PoolConfig(block_size=16, n_blocks=64))
    pool.allocate(stream="k", n_tokens=40, owner=1)
    print(pool.stats)
    assert capsys.readouterr().out == SEED_LINE + "\n"
    assert repr(pool.stats) == str(pool.stats) == SEED_LINE
    pool.close()


def test_counters_follow_allocate_and_free(make_pool):
    pool = make_pool(block_size=4, n_blocks=8, separate_kv=False)
    pool.allocate(stream="kv", n_tokens=16, owner=1)
    s = pool.stats
    assert (s.n_allocations, s.n_frees, s.blocks_in_use(), s.peak_blocks_in_use) == (4, 0, 4, 4)
    pool.free_all(owner=1)
    pool.allocate(stream="kv", n_tokens=4, owner=2)
    s = pool.stats
    assert (s.n_allocations, s.n_frees, s.blocks_in_use(), s.peak_blocks_in_use) == (5, 4, 1, 4)
    assert s.n_reused == 1


def test_fragmentation_counts_partly_used_blocks(make_pool):
    pool = make_pool(block_size=4, n_blocks=4, separate_kv=False)
    pool.allocate(stream="kv", n_tokens=8, owner=1)
    assert pool.stats.fragmentation() == 0.0
    pool.allocate(stream="kv", n_tokens=1, owner=2)
    s = pool.stats
    assert s.n_not_full == 1
    assert s.fragmentation() == pytest.approx(1 / 4)


def test_stats_is_a_fresh_snapshot_on_each_read(make_pool):
    pool = make_pool(block_size=4, n_blocks=8)
    before = pool.stats
    pool.allocate(stream="k", n_tokens=4, owner=1)
    assert before.n_allocations == 0
    assert pool.stats.n_allocations == 1


def test_standalone_stats_and_detached_snapshot():
    stats = AllocationStats(n_blocks=4, n_allocations=2)
    assert repr(stats) == (
        "AllocationStats(in_use=2/4, allocations=2, frees=0, reused=0, exhausted=0, "
        "grown=0, retired=0, peak=0, fragmentation=0.000)"
    )
    snap = stats.snapshot()
    stats.n_allocations = 99
    assert snap.n_allocations == 2
    assert snap == AllocationStats(n_blocks=4, n_allocations=2)
    assert AllocationStats(n_blocks=0).fragmentation() == 0.0


def test_prometheus_text(make_pool):
    pool = make_pool(block_size=4, n_blocks=8, separate_kv=False)
    pool.allocate(stream="kv", n_tokens=4, owner=1)
    text = pool.stats.to_prometheus()
    lines = text.splitlines()
    assert "kvpool_block_pool_blocks_in_use 1" in lines
    assert "kvpool_block_pool_blocks_managed 8" in lines
    assert "kvpool_block_pool_allocations_total 1" in lines
    assert "# TYPE kvpool_block_pool_allocations_total counter" in lines
    assert "# TYPE kvpool_block_pool_blocks_in_use gauge" in lines
    assert text.endswith("\n")


def test_prometheus_custom_and_invalid_prefix():
    text = AllocationStats(n_blocks=1).to_prometheus(prefix="my_pool")
    assert "my_pool_blocks_in_use 0" in text.splitlines()
    assert "kvpool_block_pool" not in text
    with pytest.raises(ValueError):
        AllocationStats(n_blocks=1).to_prometheus(prefix="9 not a metric name")


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (package prometheus) absent")
def test_prometheus_text_passes_promtool(make_pool):
    pool = make_pool(block_size=4, n_blocks=8)
    pool.allocate(stream="k", n_tokens=5, owner=1)
    r = subprocess.run(
        ["promtool", "check", "metrics"],
        input=pool.stats.to_prometheus(),
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_history_records_first_mutation_exhaustion_growth_and_shrink(make_pool):
    pool = make_pool(block_size=4, n_blocks=4, separate_kv=False, grow_on_exhaustion=True,
                     max_blocks=6)
    assert pool.history == ()
    pool.allocate(stream="kv", n_tokens=4, owner=1)  # first mutating call
    assert len(pool.history) == 1
    pool.allocate(stream="kv", n_tokens=16, owner=1)  # grows by 1
    assert len(pool.history) == 2
    with pytest.raises(BlockPoolExhaustedError):
        pool.allocate(stream="kv", n_tokens=100, owner=1)
    assert len(pool.history) == 3
    pool.free_all(1)
    pool.shrink("kv", 0)
    h = pool.history
    assert len(h) == 4
    assert h[-1].n_retired == 5  # newest last: the 4 blocks and the 1 grown
    assert h[0].n_allocations == 1


def test_history_snapshots_do_not_move(make_pool):
    pool = make_pool(block_size=4, n_blocks=8, separate_kv=False)
    pool.allocate(stream="kv", n_tokens=4, owner=1)
    snap = pool.history[-1]
    pool.allocate(stream="kv", n_tokens=4, owner=2)
    assert snap.n_allocations == 1
    assert pool.stats.n_allocations == 2


def test_history_is_bounded_keeping_the_newest(make_pool):
    pool = make_pool(block_size=4, n_blocks=2, history_len=3)
    for _ in range(5):
        with pytest.raises(BlockPoolExhaustedError):
            pool.allocate(stream="k", n_tokens=100, owner=1)
    h = pool.history
    assert len(h) == 3
    assert [s.n_exhausted for s in h] == [3, 4, 5]


def test_history_can_be_turned_off(make_pool):
    pool = make_pool(block_size=4, n_blocks=2, history_len=0)
    pool.allocate(stream="k", n_tokens=1, owner=1)
    assert pool.history == ()
