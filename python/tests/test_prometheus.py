"""Pool.to_prometheus, kvpool.to_prometheus (several pools, one family set
told apart by pool=), Pool.dump and what pool.stats carries."""

import json
import re
import shutil
import subprocess

import pytest

import kvpool

needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None,
                                    reason="promtool (package prometheus) absent")


def promtool(text):
    r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def lines(text):
    return text.splitlines()


@needs_promtool
def test_one_pool_carries_stream_config_histogram_and_build_families(make_pool):
    pool = make_pool(block_size=16, n_blocks=64, grow_on_exhaustion=True, max_blocks=128)
    pool.allocate(stream="k", n_tokens=40, owner=1)
    text = pool.to_prometheus()
    promtool(text)
    got = lines(text)
    assert 'kvpool_blocks_in_use{pool="default"} 3' in got
    assert 'kvpool_stream_blocks_in_use{pool="default",stream="k"} 3' in got
    assert 'kvpool_stream_blocks_free{pool="default",stream="v"} 32' in got
    assert ('kvpool_config_info{pool="default",block_size="16",n_blocks="64",'
            'max_blocks="128",prefix_cache="false"} 1') in got
    assert "# TYPE kvpool_allocate_duration_seconds histogram" in got
    assert f'kvpool_build_info{{version="{kvpool.__version__}"}} 1' in got


@needs_promtool
def test_two_pools_one_set_of_families_told_apart_by_pool(make_pool):
    a = make_pool(block_size=16, n_blocks=64)
    b = make_pool(block_size=32, n_blocks=16, separate_kv=False, prefix_cache=True)
    a.allocate(stream="v", n_tokens=20, owner=1)
    text = kvpool.to_prometheus({"target": a, "draft": b})
    promtool(text)
    types = [ln for ln in lines(text) if ln.startswith("# TYPE ")]
    assert len(types) == len(set(types))  # each family once
    samples = [ln for ln in lines(text) if not ln.startswith("#")]
    pools = {m.group(1) for ln in samples for m in [re.search(r'pool="([^"]*)"', ln)] if m}
    assert pools == {"target", "draft"}
    assert all('pool="' in ln for ln in samples if not ln.startswith("kvpool_build_info"))
    assert 'kvpool_blocks_in_use{pool="target"} 2' in samples
    assert ('kvpool_config_info{pool="draft",block_size="32",n_blocks="16",'
            'max_blocks="unbounded",prefix_cache="true"} 1') in samples
    with pytest.raises(kvpool.InvalidArgumentError):
        kvpool.to_prometheus({})
    with pytest.raises(TypeError):
        kvpool.to_prometheus({"x": object()})
    # A NUL would cut the label short in C: "x\0a" and "x\0b" would both be "x".
    with pytest.raises(kvpool.InvalidArgumentError, match="NUL"):
        kvpool.to_prometheus({"x\0a": a, "x\0b": b})


def test_histogram_counts_one_call_in_1024_per_thread(make_pool):
    import threading

    pool = make_pool(block_size=16, n_blocks=64)

    def work():  # a fresh thread: its sample counter starts at 0
        for _ in range(1024 * 3):
            pool.allocate(stream="k", n_tokens=16, owner=5)
            pool.free_all(5)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    text = pool.to_prometheus(name="p")
    assert 'kvpool_allocate_duration_seconds_count{pool="p"} 3' in lines(text)


@needs_promtool
def test_stats_carries_the_same_families_as_the_prefix_form(make_pool):
    pool = make_pool(block_size=16, n_blocks=64)
    pool.allocate(stream="k", n_tokens=40, owner=1)
    s = pool.stats
    assert s.streams == {"k": {"managed": 32, "free": 29, "in_use": 3},
                         "v": {"managed": 32, "free": 32, "in_use": 0}}
    assert s.config == {"block_size": "16", "n_blocks": "64", "max_blocks": "unbounded",
                        "prefix_cache": "false"}
    assert s.version == kvpool.__version__
    for prefix in (None, "app"):
        text = s.to_prometheus(prefix)
        assert text == pool.to_prometheus(prefix=prefix or "kvpool_block_pool")
        promtool(text)
    assert 'app_stream_blocks_in_use{stream="k"} 3' in lines(s.to_prometheus("app"))
    # A snapshot from history has none of it: just kvp_stats_to_prometheus.
    assert "stream_blocks" not in pool.history[-1].to_prometheus()


def test_a_bad_prefix_says_what_a_metric_name_is(make_pool):
    pool = make_pool(block_size=16, n_blocks=8)
    for call in (lambda: pool.to_prometheus(prefix="9lives"),
                 lambda: pool.stats.to_prometheus("a-b")):
        with pytest.raises(kvpool.InvalidArgumentError, match=r"\[a-zA-Z_:\]\[a-zA-Z0-9_:\]\*"):
            call()


def test_dump_text_and_json(make_pool):
    pool = make_pool(block_size=16, n_blocks=64, grow_on_exhaustion=True)
    pool.allocate(stream="v", n_tokens=40, owner=1)
    text = pool.dump()
    assert text.startswith(f"kvpool {kvpool.__version__} pool report\n")
    assert "  growth            on, max_blocks unbounded\n" in text
    assert "  blocks in use     3 (k 0, v 3), peak 3\n" in text
    d = json.loads(pool.dump(json=True))
    assert d["blocks_in_use"] == 3 and d["max_blocks"] is None
    assert d["streams"]["v"] == {"managed": 32, "in_use": 3, "free": 29}


def test_errors_name_the_valid_formats(make_pool):
    pool = make_pool(block_size=16, n_blocks=8)
    with pytest.raises(kvpool.InvalidArgumentError, match="not one of fp32, fp16, bf16"):
        pool.allocate(stream="k", n_tokens=4, owner=1, format="fp8")
