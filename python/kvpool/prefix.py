"""Prefix-cache keys: PrefixKey and prefix_hash (kvp_prefix_hash, kvpool/prefix.h).

A key is 128 bits, held as the pair (lo, hi) of the C struct kvp_hash.  The
bytes hashed are documented in docs/PREFIX.md, so any language can compute
the same key:

    sha256(b"\\x01" + has_parent + parent.lo, parent.hi, salt as 8-byte LE
           + token bytes), lo = digest[0:8] LE, hi = digest[8:16] LE
"""

from __future__ import annotations

import ctypes
from typing import NamedTuple, Optional

from . import _lib
from .errors import InvalidArgumentError, check

U64_MAX = (1 << 64) - 1


class PrefixKey(NamedTuple):
    """A block's content key: the two halves of the C kvp_hash."""

    lo: int
    hi: int


def key_to_c(key, name: str = "key") -> _lib.HashC:
    """A PrefixKey, or any (lo, hi) pair of ints in [0, 2**64), as struct kvp_hash."""
    try:
        lo, hi = key
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a (lo, hi) pair, not {type(key).__name__}") from None
    for part, v in (("lo", lo), ("hi", hi)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{name}.{part} must be an int, not {type(v).__name__}")
        if not 0 <= v <= U64_MAX:
            raise InvalidArgumentError(f"{name}.{part} must be in [0, 2**64), got {v}")
    return _lib.HashC(lo, hi)


def token_bytes(tokens) -> bytes:
    """The bytes hashed for ``tokens``: a bytes-like object as is, or a
    sequence of ints in [0, 2**32) as little-endian uint32 (the same bytes as
    little-endian int32 for token ids below 2**31)."""
    if isinstance(tokens, (bytes, bytearray, memoryview)):
        return bytes(tokens)
    out = bytearray()
    for t in tokens:
        if isinstance(t, bool) or not isinstance(t, int):
            raise TypeError(f"token ids must be ints, not {type(t).__name__}")
        if not 0 <= t <= 0xFFFFFFFF:
            raise InvalidArgumentError(f"token id must be in [0, 2**32), got {t}")
        out += t.to_bytes(4, "little")
    return bytes(out)


def prefix_hash(parent: Optional[tuple], tokens, salt: int = 0) -> PrefixKey:
    """The content key of one block (kvp_prefix_hash).

    parent: the key of the block before it in its sequence (a PrefixKey or
        (lo, hi) pair), or None for the first block.
    tokens: the block's tokens: bytes-like (hashed as given) or a sequence of
        token ids (hashed as little-endian uint32 each).
    salt: an int in [0, 2**64); tenants with different salts never share.

    Thread-safe; needs no pool.  Raises TypeError / ValueError for bad
    arguments.
    """
    if isinstance(salt, bool) or not isinstance(salt, int):
        raise TypeError(f"salt must be an int, not {type(salt).__name__}")
    if not 0 <= salt <= U64_MAX:
        raise InvalidArgumentError(f"salt must be in [0, 2**64), got {salt}")
    par = None if parent is None else ctypes.byref(key_to_c(parent, "parent"))
    data = token_bytes(tokens)
    buf = ctypes.create_string_buffer(data, len(data)) if data else None
    out = _lib.HashC()
    check(_lib.fn.kvp_prefix_hash(par, salt, buf, len(data), ctypes.byref(out)), "prefix_hash")
    return PrefixKey(out.lo, out.hi)
