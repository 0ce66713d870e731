"""Lifetime of the C objects behind the Python wrappers.

A C object (pool, storage, kvcache) is destroyed exactly once, and only when
nothing can still use it:

- its wrapper was closed (``close()``, the end of a ``with`` block, or the
  wrapper being garbage-collected),
- no call into C on it is in flight in any thread, and
- no dependent C object is alive (a storage or kvcache keeps its pool alive,
  a kvcache keeps its two storages alive).

So closing a pool while another thread is inside ``allocate`` defers the
``kvp_pool_destroy`` to the end of that call, and garbage collection may
finalize a pool and its storage in either order.  Calls made after
``close()`` raise :class:`~kvpool.errors.InvalidArgumentError` (a
``ValueError``, as for a closed file).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

from .errors import InvalidArgumentError


class Handle:
    """Owns one C pointer; counts its users (calls in flight and dependents)."""

    __slots__ = ("_ptr", "_destroy", "_what", "_lock", "_users", "_closed", "_parents")

    def __init__(self, ptr: int, destroy, what: str, parents: tuple["Handle", ...] = ()):
        self._ptr = ptr
        self._destroy = destroy
        self._what = what
        self._lock = threading.Lock()
        self._users = 0
        self._closed = False
        self._parents = parents
        for p in parents:
            p._acquire()

    @property
    def closed(self) -> bool:
        return self._closed

    def _acquire(self) -> int:
        with self._lock:
            if self._closed:
                raise InvalidArgumentError(f"{self._what} is closed")
            self._users += 1
            return self._ptr

    def _release(self) -> None:
        with self._lock:
            self._users -= 1
            doomed = self._closed and self._users == 0 and self._ptr is not None
            if doomed:
                ptr, self._ptr = self._ptr, None
        if doomed:
            self._finish(ptr)

    def _finish(self, ptr: int) -> None:
        self._destroy(ptr)
        for p in self._parents:
            p._release()

    @contextmanager
    def use(self):
        """``with handle.use() as ptr:`` - the pointer, valid for the block."""
        ptr = self._acquire()
        try:
            yield ptr
        finally:
            self._release()

    def close(self) -> None:
        """Ask for destruction; it happens when the last user is gone.  Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            doomed = self._users == 0 and self._ptr is not None
            if doomed:
                ptr, self._ptr = self._ptr, None
        if doomed:
            self._finish(ptr)
