"""numpy, imported the first time an array is needed.

The block pool (BlockPoolAllocator, Block, AllocationStats) works without
numpy; BlockStorage and the KV caches exchange numpy arrays.  ``np`` here
stands for the numpy module and imports it on first use, so ``import
kvpool`` never needs it, and code that does need it gets an error saying
what to install instead of a bare "No module named 'numpy'".
"""

from __future__ import annotations

import sys


def _missing(what: str) -> ModuleNotFoundError:
    return ModuleNotFoundError(
        f"kvpool: {what} needs numpy, which this Python ({sys.executable}) does not have. "
        "Install it (Debian: apt install python3-numpy; pip: pip install numpy, or "
        "pip install './python[numpy]'). The block pool (BlockPoolAllocator) works without it.",
        name="numpy",
    )


def require(what: str = "this kvpool feature"):
    """The numpy module, or ModuleNotFoundError naming @what and how to get numpy."""
    try:
        import numpy
    except ModuleNotFoundError as e:
        if e.name != "numpy":
            raise
        raise _missing(what) from None
    return numpy


class _LazyNumpy:
    """Attribute access goes to numpy, imported on the first access."""

    __slots__ = ()

    def __getattr__(self, name: str):
        return getattr(require("BlockStorage and the KV caches (numpy arrays)"), name)


np = _LazyNumpy()
