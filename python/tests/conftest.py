"""pytest setup: import the package from this source tree (python/kvpool).

Run by Bazel through run_pytest.py (which sets KVPOOL_LIB to the library it
built), or by hand from the repository root:

    bazel build //tools:libkvpool_testing.so
    KVPOOL_LIB=bazel-bin/tools/libkvpool_testing.so python3 -m pytest python/tests
"""

import os
import sys

import pytest

PKG_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if PKG_ROOT not in sys.path:
    sys.path.insert(0, PKG_ROOT)

import kvpool  # noqa: E402


@pytest.fixture
def make_pool():
    """make_pool(**PoolConfig fields) -> BlockPoolAllocator, closed after the test."""
    pools = []

    def make(**kw):
        p = kvpool.BlockPoolAllocator(kvpool.PoolConfig(**kw))
        pools.append(p)
        return p

    yield make
    for p in pools:
        p.close()
