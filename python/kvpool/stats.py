"""AllocationStats: a snapshot of a pool's counters (struct kvp_stats)."""

from __future__ import annotations

import ctypes
import dataclasses
from dataclasses import dataclass

from . import _lib
from .errors import check


@dataclass(repr=False)
class AllocationStats:
    """The pool's counters at one instant (``pool.stats``, ``pool.history``).

    A plain value: reading ``pool.stats`` takes a fresh snapshot each time
    (kvp_pool_stats), and a snapshot never changes after it was taken.  The
    methods compute through the C library's own helpers, so Python and C
    report the same figures.

    ``repr()`` / ``str()`` print the stats line of kvp_stats_format
    (include/kvpool/stats.h), e.g.
    ``AllocationStats(in_use=3/64, allocations=3, frees=0, reused=0,
    exhausted=0, grown=0, retired=0, peak=3, fragmentation=0.016)``.
    """

    n_blocks: int  # blocks the pool manages now
    n_allocations: int = 0  # blocks handed out, cumulative
    n_frees: int = 0  # blocks returned, cumulative
    n_reused: int = 0  # allocations served by a block freed before
    n_exhausted: int = 0  # allocate calls that failed for want of blocks
    n_grown: int = 0  # blocks added by growth
    n_retired: int = 0  # blocks removed by shrink
    peak_blocks_in_use: int = 0  # high-water mark of blocks in use
    n_not_full: int = 0  # blocks in use whose n_used < block_size
    n_stale_frees: int = 0  # frees skipped: already free or stale handle
    n_cached: int = 0  # prefix cache: published blocks nobody holds, still findable
    n_prefix_queries: int = 0  # prefix cache: keys asked for by match calls
    n_prefix_hits: int = 0  # prefix cache: blocks matched
    n_evictions: int = 0  # prefix cache: cached blocks evicted

    @classmethod
    def _from_c(cls, s: _lib.StatsC) -> "AllocationStats":
        return cls(*(getattr(s, name) for name in _lib.STATS_FIELDS))

    def _to_c(self) -> _lib.StatsC:
        return _lib.StatsC(*(int(getattr(self, name)) for name in _lib.STATS_FIELDS))

    def blocks_in_use(self) -> int:
        """Blocks in use: n_allocations - n_frees."""
        return _lib.fn.kvp_stats_blocks_in_use(ctypes.byref(self._to_c()))

    def fragmentation(self) -> float:
        """Fraction of managed blocks that are in use but not full (n_not_full / n_blocks)."""
        return _lib.fn.kvp_stats_fragmentation(ctypes.byref(self._to_c()))

    def snapshot(self) -> "AllocationStats":
        """A detached copy."""
        return dataclasses.replace(self)

    def to_prometheus(self, prefix: str | None = None) -> str:
        """Prometheus text exposition of this snapshot (kvp_stats_to_prometheus).

        Gauges ``<prefix>_blocks_in_use``, ``_blocks_managed``,
        ``_fragmentation``, ``_peak_blocks_in_use``; counters
        ``<prefix>_allocations_total``, ``_frees_total``, ``_reused_total``,
        ``_exhausted_total``, ``_grown_total``, ``_retired_total``,
        ``_stale_frees_total``; each with ``# HELP`` and ``# TYPE`` lines.
        ``prefix=None`` means ``"kvpool_block_pool"``; an invalid metric
        name prefix raises ValueError.
        """
        s = self._to_c()
        p = None if prefix is None else prefix.encode()
        need = ctypes.c_size_t(0)
        cap = 2048
        while True:
            buf = ctypes.create_string_buffer(cap)
            rc = _lib.fn.kvp_stats_to_prometheus(ctypes.byref(s), p, buf, cap, ctypes.byref(need))
            if rc == _lib.KVP_ERANGE and need.value + 1 > cap:
                cap = need.value + 1
                continue
            check(rc, "AllocationStats.to_prometheus")
            return buf.raw[: need.value].decode()

    def __repr__(self) -> str:
        s = self._to_c()
        cap = 256
        while True:
            buf = ctypes.create_string_buffer(cap)
            n = _lib.fn.kvp_stats_format(ctypes.byref(s), buf, cap)
            if n == _lib.KVP_ERANGE and cap < 1 << 16:
                cap *= 4
                continue
            check(n, "AllocationStats.__repr__")
            return buf.raw[:n].decode()

    __str__ = __repr__
