"""AllocationStats: a snapshot of a pool's counters (struct kvp_stats)."""

from __future__ import annotations

import ctypes
import dataclasses
import re
from dataclasses import dataclass
from typing import Optional

from . import _lib
from .errors import InvalidArgumentError, check


METRIC_PREFIX = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")


def check_metric_prefix(prefix) -> str:
    """``prefix`` if it is a Prometheus metric name, else TypeError or
    InvalidArgumentError saying what a metric name is."""
    if not isinstance(prefix, str):
        raise TypeError(f"prefix must be a str, not {type(prefix).__name__}")
    if not METRIC_PREFIX.match(prefix):
        raise InvalidArgumentError(
            f"prefix {prefix!r} is not a Prometheus metric name: a letter, '_' or ':', "
            "then letters, digits, '_' or ':' ([a-zA-Z_:][a-zA-Z0-9_:]*)", _lib.KVP_EINVAL)
    return prefix


CONFIG_HELP = ("A pool's configuration in labels (max_blocks: the growth cap, or unbounded); "
               "value 1.")


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
    # Set by pool.stats (None for a snapshot from history or made by hand):
    # per stream {"managed", "free", "in_use"}, the configuration's labels of
    # <prefix>_config_info, the library's version.
    streams: Optional[dict] = dataclasses.field(default=None, compare=False)
    config: Optional[dict] = dataclasses.field(default=None, compare=False)
    version: Optional[str] = dataclasses.field(default=None, compare=False)

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
        ``_fragmentation``, ``_usage_ratio``, ``_peak_blocks_in_use``;
        counters ``<prefix>_allocations_total``, ``_frees_total``,
        ``_reused_total``, ``_exhausted_total``, ``_grown_total``,
        ``_retired_total``, ``_stale_frees_total``, and the prefix cache's
        families; each with ``# HELP`` and ``# TYPE`` lines.  A snapshot
        from ``pool.stats`` adds what kvp_pool_to_prometheus adds: per-stream
        ``<prefix>_stream_blocks_in_use`` / ``_stream_blocks_free``,
        ``<prefix>_config_info`` and ``<prefix>_build_info``, the same text
        as ``pool.to_prometheus(prefix=...)`` of a pool at rest.
        ``prefix=None`` means ``"kvpool_block_pool"``; an invalid metric
        name prefix raises InvalidArgumentError naming the rule.
        """
        s = self._to_c()
        p = None if prefix is None else check_metric_prefix(prefix).encode()
        text = _lib.text_call(
            lambda b, cap, n: _lib.fn.kvp_stats_to_prometheus(ctypes.byref(s), p, b, cap, n),
            "AllocationStats.to_prometheus")
        if self.streams is None:
            return text
        pre = prefix or "kvpool_block_pool"
        out = [text]
        out.append(f"# HELP {pre}_stream_blocks_in_use Blocks of a stream handed out and not "
                   f"yet freed.\n# TYPE {pre}_stream_blocks_in_use gauge\n")
        out += [f'{pre}_stream_blocks_in_use{{stream="{k}"}} {v["in_use"]}\n'
                for k, v in self.streams.items()]
        out.append(f"# HELP {pre}_stream_blocks_free Free blocks of a stream, thread caches "
                   f"included.\n# TYPE {pre}_stream_blocks_free gauge\n")
        out += [f'{pre}_stream_blocks_free{{stream="{k}"}} {v["free"]}\n'
                for k, v in self.streams.items()]
        if self.config is not None:
            labels = ",".join(f'{k}="{v}"' for k, v in self.config.items())
            out.append(f"# HELP {pre}_config_info {CONFIG_HELP}\n"
                       f"# TYPE {pre}_config_info gauge\n{pre}_config_info{{{labels}}} 1\n")
        if self.version is not None:
            out.append(f"# HELP {pre}_build_info The kvpool library serving these figures.\n"
                       f"# TYPE {pre}_build_info gauge\n"
                       f'{pre}_build_info{{version="{self.version}"}} 1\n')
        return "".join(out)

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
