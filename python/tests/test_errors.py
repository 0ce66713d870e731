"""Every exception: its place in the hierarchy, its C status, and a real call raising it."""

import ctypes

import pytest

import kvpool
from kvpool import _lib, errors

MAPPING = [
    (-1, kvpool.InvalidArgumentError, (ValueError,)),
    (-2, kvpool.BlockPoolExhaustedError, ()),
    (-3, kvpool.OwnerAlreadyActiveError, ()),
    (-4, kvpool.KVPoolMemoryError, (MemoryError,)),
    (-5, kvpool.OutOfRangeError, (ValueError, kvpool.InvalidArgumentError)),
    (-6, kvpool.NotFoundError, (LookupError,)),
    (-7, kvpool.PrefixKeyExistsError, ()),
]


@pytest.mark.parametrize("status,cls,also", MAPPING)
def test_each_status_maps_to_its_exception(status, cls, also):
    e = errors.error_for(status, "what")
    assert type(e) is cls
    assert isinstance(e, kvpool.KVPoolError)
    for base in also:
        assert isinstance(e, base)
    assert e.status == status
    assert str(e) == "what: " + kvpool.strerror(status)
    with pytest.raises(cls):
        errors.check(status, "what")


def test_status_codes_match_the_header():
    assert (_lib.KVP_OK, _lib.KVP_EINVAL, _lib.KVP_EEXHAUSTED, _lib.KVP_EOWNER) == (0, -1, -2, -3)
    assert (_lib.KVP_ENOMEM, _lib.KVP_ERANGE, _lib.KVP_ENOENT) == (-4, -5, -6)
    assert kvpool.strerror(0) != kvpool.strerror(-1)


def test_unknown_status_is_the_base_class_and_success_passes_through():
    e = errors.error_for(-99, "x")
    assert type(e) is kvpool.KVPoolError and e.status == -99
    assert errors.check(0, "x") == 0
    assert errors.check(7, "x") == 7


def test_seed_exceptions_derive_from_kvpool_error():
    for cls in (kvpool.BlockPoolExhaustedError, kvpool.OwnerAlreadyActiveError):
        assert issubclass(cls, kvpool.KVPoolError)
        assert not issubclass(cls, ValueError)


def test_enomem_from_the_system_allocator():
    inject = _lib.lib.kvpi_fault_inject
    inject.argtypes = [ctypes.c_long, ctypes.c_long]
    inject.restype = None
    inject(0, -1)  # fail every system allocation until reset
    try:
        with pytest.raises(kvpool.KVPoolMemoryError) as ei:
            kvpool.BlockPoolAllocator(kvpool.PoolConfig(block_size=4, n_blocks=8))
    finally:
        inject(0, 0)
    assert isinstance(ei.value, MemoryError)
    assert ei.value.status == _lib.KVP_ENOMEM
    with kvpool.BlockPoolAllocator(kvpool.PoolConfig(block_size=4, n_blocks=8)) as pool:
        assert pool.n_free("k") == 4


def test_errors_raised_by_real_calls(make_pool):
    pool = make_pool(block_size=4, n_blocks=2)
    with pytest.raises(kvpool.InvalidArgumentError):  # checked by the binding
        pool.allocate(stream="k", n_tokens=0, owner=1)
    with pytest.raises(kvpool.InvalidArgumentError) as ei:  # checked by C
        pool.stats.to_prometheus(prefix="bad prefix")
    assert ei.value.status == _lib.KVP_EINVAL
    (b,) = pool.allocate(stream="k", n_tokens=1, owner=1)
    with pytest.raises(kvpool.OutOfRangeError) as ei:
        b.n_used = 5
    assert ei.value.status == _lib.KVP_ERANGE
    with pytest.raises(kvpool.BlockPoolExhaustedError):
        pool.allocate(stream="k", n_tokens=1, owner=2)
    with pytest.raises(kvpool.OwnerAlreadyActiveError) as ei:
        pool.register_owner(1)
    assert ei.value.status == _lib.KVP_EOWNER
    pool.free([b])
    with pytest.raises(kvpool.NotFoundError) as ei:
        b.n_used = 1
    assert ei.value.status == _lib.KVP_ENOENT
