"""RemoteTier over kvp_remote, against a real redis-server the test starts on
a free loopback port: publish in one pool, fetch into another, rows equal;
a fetch stops at the first miss; values made wrong are misses; a dead
server is RemoteUnavailableError within the timeout; stats and Prometheus."""

import shutil
import socket
import subprocess
import time

import numpy as np
import pytest

import kvpool
from kvpool import (
    BlockPoolAllocator,
    BlockStorage,
    InvalidArgumentError,
    PoolConfig,
    RemoteTier,
    RemoteUnavailableError,
    prefix_hash,
)

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None,
                                reason="redis-server not installed (tools/setup.sh)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def redis_url():
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--loglevel", "warning"],
        stdout=subprocess.DEVNULL)
    for _ in range(500):
        if subprocess.run(["redis-cli", "-p", str(port), "PING"],
                          capture_output=True).returncode == 0:
            break
        time.sleep(0.01)
    yield f"redis://127.0.0.1:{port}", port
    proc.kill()
    proc.wait()


def side(url, ns, **kw):
    pool = BlockPoolAllocator(PoolConfig(block_size=4, n_blocks=32, prefix_cache=True))
    st = BlockStorage(pool, head_dim=8)
    return pool, st, RemoteTier(st, url, key_namespace=ns, timeout_ms=500, **kw)


def chain(n, salt=5):
    keys, parent = [], None
    for i in range(n):
        parent = prefix_hash(parent, [i, i + 1, i + 2, i + 3], salt=salt)
        keys.append(parent)
    return keys


def publish(pool, st, tier, keys, owner, fmt="fp16", skip=()):
    rng = np.random.default_rng(3)
    rows = []
    for j, k in enumerate(keys):
        (b,) = pool.allocate(stream="k", n_tokens=4, owner=owner, format=fmt)
        r = rng.integers(-512, 512, size=(4, 8)) / 64.0
        st.write(b, 0, r)
        rows.append(st.read(b))
        if j not in skip:
            tier.publish(b, k)
    return rows


@pytest.mark.parametrize("copy_rows", [False, True])
@pytest.mark.parametrize("fmt", ["fp32", "fp16", "bf16", "int8", "int4"])
def test_round_trip(redis_url, fmt, copy_rows):
    url, _ = redis_url
    ns = f"py-{fmt}-{copy_rows}"
    pa, sa, ta = side(url, ns, copy_rows=copy_rows)
    pb, sb, tb = side(url, ns)
    keys = chain(3, salt=len(ns))
    rows = publish(pa, sa, ta, keys, owner=1, fmt=fmt)
    assert ta.flush(5000)
    got = tb.fetch("k", keys, owner=2, format=fmt)
    assert len(got) == 3
    for b, r in zip(got, rows):
        assert b.published and b.n_used == 4
        assert np.array_equal(sb.read(b), r)
    assert tb.stats["hits"] == 3 and ta.stats["writes_done"] == 3
    # a later local match in B finds the fetched blocks
    assert len(pb.match_prefix("k", keys, owner=3, format=fmt)) == 3
    for t in (ta, tb):
        t.close()


def test_fetch_stops_at_first_miss_and_refuses_bad_values(redis_url):
    url, port = redis_url
    pa, sa, ta = side(url, "py-miss")
    pb, sb, tb = side(url, "py-miss")
    keys = chain(5, salt=77)
    publish(pa, sa, ta, keys, owner=1, skip=(2,))
    assert ta.flush(5000)
    assert len(tb.fetch("k", keys, owner=2)) == 2
    assert tb.stats["misses"] == 1
    k = keys[3]
    rkey = f"py-miss:k:{k.hi:016x}{k.lo:016x}"
    subprocess.run(["redis-cli", "-p", str(port), "SETRANGE", rkey, "70", "X"],
                   check=True, capture_output=True)
    assert tb.fetch("k", keys[3:], owner=4) == []
    assert tb.stats["corrupt"] == 1
    assert len(tb.fetch("k", keys[4:], owner=4)) == 1


def test_dead_server_is_unavailable_within_the_timeout():
    pool = BlockPoolAllocator(PoolConfig(block_size=4, n_blocks=8, prefix_cache=True))
    st = BlockStorage(pool, head_dim=8)
    tier = RemoteTier(st, f"redis://127.0.0.1:{free_port()}", timeout_ms=50)
    t = time.monotonic()
    with pytest.raises(RemoteUnavailableError):
        tier.fetch("k", chain(2), owner=1)
    assert time.monotonic() - t < 1.0
    assert tier.stats["errors"] == 1
    assert isinstance(RemoteUnavailableError("x", -8), ConnectionError)


def test_config_errors_and_prometheus(redis_url):
    url, _ = redis_url
    pool = BlockPoolAllocator(PoolConfig(block_size=4, n_blocks=8, prefix_cache=True))
    st = BlockStorage(pool, head_dim=8)
    with pytest.raises(InvalidArgumentError):
        RemoteTier(st, "http://nope")
    with pytest.raises(TypeError):
        RemoteTier(st, url, no_such_field=1)
    plain = BlockPoolAllocator(PoolConfig(block_size=4, n_blocks=8))
    with pytest.raises(InvalidArgumentError):
        RemoteTier(BlockStorage(plain, head_dim=8), url)
    with RemoteTier(st, url, key_namespace="py-prom") as tier:
        text = tier.to_prometheus()
        assert "kvpool_remote_hits_total 0" in text
        assert 'kvpool_remote_fetch_seconds_bucket{le="+Inf"} 0' in text
        assert "my_remote_hits_total" in tier.to_prometheus("my_remote")
    assert kvpool.strerror(-8) == "remote tier unavailable"
