"""Exceptions, and the mapping from C status codes to them.

=============  =================================  ==========================
C status       exception                          also an instance of
=============  =================================  ==========================
KVP_EINVAL     InvalidArgumentError               ValueError
KVP_ERANGE     OutOfRangeError                    ValueError (via the above)
KVP_EEXHAUSTED BlockPoolExhaustedError            -
KVP_EOWNER     OwnerAlreadyActiveError            -
KVP_ENOENT     NotFoundError                      LookupError
KVP_ENOMEM     KVPoolMemoryError                  MemoryError
KVP_EEXIST     PrefixKeyExistsError               -
KVP_EREMOTE    RemoteUnavailableError             ConnectionError
KVP_ENOTSUP    NotSupportedError                  -
anything else  KVPoolError                        -
=============  =================================  ==========================

Every exception derives from :class:`KVPoolError`, so ``except KVPoolError``
catches whatever kvpool raises; the second bases keep the Python API's contract
(``ValueError`` for bad arguments, e.g. a write past a block's end).
Arguments the binding rejects before calling C (a stream name that is not
"k", "v" or "kv", a negative count) raise :class:`InvalidArgumentError` too;
arguments of the wrong Python type raise ``TypeError``.

Where the Python API was silent rather than failing, the binding stays
silent instead of raising: ``free_all`` and ``release_owner`` of an owner
that is not active do nothing, and ``blocks_for`` of such an owner is ``[]``.
"""

from __future__ import annotations

from . import _lib


class KVPoolError(Exception):
    """Base of every kvpool exception.  ``status`` is the C status code, or
    None when the binding raised before calling C."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class InvalidArgumentError(KVPoolError, ValueError):
    """A bad argument or configuration (KVP_EINVAL)."""


class OutOfRangeError(InvalidArgumentError):
    """A write past a block's end or a count out of range (KVP_ERANGE)."""


class BlockPoolExhaustedError(KVPoolError):
    """Not enough free blocks, and growth cannot cover the gap (KVP_EEXHAUSTED).
    Nothing was handed out."""


class OwnerAlreadyActiveError(KVPoolError):
    """register_owner of an owner id that is already active (KVP_EOWNER)."""


class NotFoundError(KVPoolError, LookupError):
    """A block that is stale, retired or never existed (KVP_ENOENT)."""


class KVPoolMemoryError(KVPoolError, MemoryError):
    """The system allocator failed (KVP_ENOMEM)."""


class PrefixKeyExistsError(KVPoolError):
    """publish of a key another block of the stream is published under
    (KVP_EEXIST); the block stays unpublished."""


class RemoteUnavailableError(KVPoolError, ConnectionError):
    """The remote tier did not answer in time, or is unreachable (KVP_EREMOTE)."""


class NotSupportedError(KVPoolError):
    """The library was built without the feature, e.g. the remote tier (KVP_ENOTSUP)."""


_BY_STATUS = {
    _lib.KVP_EINVAL: InvalidArgumentError,
    _lib.KVP_ERANGE: OutOfRangeError,
    _lib.KVP_EEXHAUSTED: BlockPoolExhaustedError,
    _lib.KVP_EOWNER: OwnerAlreadyActiveError,
    _lib.KVP_ENOENT: NotFoundError,
    _lib.KVP_ENOMEM: KVPoolMemoryError,
    _lib.KVP_EEXIST: PrefixKeyExistsError,
    _lib.KVP_EREMOTE: RemoteUnavailableError,
    _lib.KVP_ENOTSUP: NotSupportedError,
}


def strerror(status: int) -> str:
    """The library's name for a status code (kvp_strerror)."""
    return _lib.fn.kvp_strerror(status).decode()


def error_for(status: int, what: str) -> KVPoolError:
    """The exception for a failed C call: "<what>: <kvp_strerror>"."""
    cls = _BY_STATUS.get(status, KVPoolError)
    return cls(f"{what}: {strerror(status)}", status)


def check(status: int, what: str) -> int:
    """Raise the mapped exception when ``status`` is negative, else return it."""
    if status < 0:
        raise error_for(status, what)
    return status
