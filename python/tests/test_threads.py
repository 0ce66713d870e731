"""Python threads sharing one pool, and the proof that C calls release the GIL."""

import ast
import ctypes
import os
import pathlib
import random
import threading

import pytest

import kvpool
from kvpool import BlockPoolExhaustedError, _lib

N_THREADS = 16


# --- the GIL ---------------------------------------------------------------------------


def test_every_kvpool_function_is_called_without_the_gil():
    # ctypes releases the GIL around a foreign call unless the function
    # carries FUNCFLAG_PYTHONAPI, which only ctypes.PyDLL / pythonapi set.
    assert type(_lib.lib) is ctypes.CDLL
    fns = _lib.declared_functions()
    assert "kvp_allocate" in fns and "kvp_free" in fns and "kvp_pool_stats" in fns
    for name, f in fns.items():
        assert not f._flags_ & ctypes._FUNCFLAG_PYTHONAPI, name


def test_the_package_never_uses_pydll_or_pythonapi():
    # The GIL-holding ctypes entry points: ctypes.PyDLL, ctypes.pythonapi,
    # ctypes.PYFUNCTYPE.  No code of the package names them.
    src = pathlib.Path(kvpool.__file__).parent
    for f in src.glob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            name = next(
                (getattr(node, a) for a in ("attr", "id", "name") if hasattr(node, a)), None
            )
            assert name not in ("PyDLL", "pythonapi", "PYFUNCTYPE"), f.name


def test_a_thread_blocked_in_a_cdll_call_lets_other_threads_run():
    # A thread blocks inside a foreign call (read on an empty pipe) of a
    # ctypes.CDLL, the class kvpool loads its library with.  Only another
    # Python thread can unblock it, by writing to the pipe: if the blocked
    # call held the GIL, that thread could never run and this test would
    # hang (and fail on the test timeout) instead of passing.
    libc = ctypes.CDLL(None)
    assert type(libc) is type(_lib.lib)
    read = libc.read
    read.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
    read.restype = ctypes.c_ssize_t
    r, w = os.pipe()
    buf = ctypes.create_string_buffer(1)
    got = []
    t = threading.Thread(target=lambda: got.append(read(r, buf, 1)))
    t.start()
    os.write(w, b"x")
    t.join()
    os.close(r)
    os.close(w)
    assert got == [1] and buf.raw == b"x"


# --- 16 threads, one pool ---------------------------------------------------------------


class Ledger:
    """What the test thinks is checked out: block id -> owner, under a lock."""

    def __init__(self):
        self.lock = threading.Lock()
        self.owner_of = {}
        self.errors = []

    def take(self, owner, blocks):
        with self.lock:
            for b in blocks:
                if b.block_id in self.owner_of:
                    self.errors.append(
                        f"block {b.block_id} handed to {owner} while held by "
                        f"{self.owner_of[b.block_id]}"
                    )
                self.owner_of[b.block_id] = owner

    def give_back(self, blocks):
        with self.lock:
            for b in blocks:
                del self.owner_of[b.block_id]


def test_sixteen_threads_share_one_pool():
    pool = kvpool.BlockPoolAllocator(
        kvpool.PoolConfig(block_size=4, n_blocks=256, thread_cache=4)
    )
    ledger = Ledger()
    start = threading.Barrier(N_THREADS)
    counts = [dict(alloc=0, free=0, exhausted=0) for _ in range(N_THREADS)]
    held = [dict() for _ in range(N_THREADS)]  # owner -> [Block]

    def worker(t):
        rng = random.Random(1000 + t)
        mine = held[t]
        c = counts[t]
        owners = [t * 100 + i for i in range(3)]
        start.wait()
        for _ in range(150):
            owner = rng.choice(owners)
            op = rng.random()
            if op < 0.55:
                stream = rng.choice("kv")
                before = list(mine.get(owner, []))
                try:
                    got = pool.allocate(stream=stream, n_tokens=rng.randint(1, 24), owner=owner)
                except BlockPoolExhaustedError:
                    c["exhausted"] += 1
                    if pool.blocks_for(owner) != before:  # all or nothing
                        ledger.errors.append(f"owner {owner}: partial allocation")
                    continue
                ledger.take(owner, got)
                mine.setdefault(owner, []).extend(got)
                c["alloc"] += len(got)
                for b in got:
                    if b.owner != owner or b.stream != stream:
                        ledger.errors.append(f"block {b.block_id}: {b!r} not ({owner}, {stream})")
            elif op < 0.75 and mine.get(owner):
                blocks = mine[owner]
                k = rng.randint(1, len(blocks))
                victims, mine[owner] = blocks[:k], blocks[k:]
                ledger.give_back(victims)
                pool.free(victims)
                c["free"] += len(victims)
            elif op < 0.9:
                blocks = mine.pop(owner, [])
                ledger.give_back(blocks)
                pool.free_all(owner)
                c["free"] += len(blocks)
            else:
                if pool.blocks_for(owner) != mine.get(owner, []):
                    ledger.errors.append(f"owner {owner}: blocks_for differs from what it got")

    def observer(stop):
        while not stop.is_set():
            s = pool.stats
            if s.blocks_in_use() > s.n_blocks:
                ledger.errors.append(f"in use above managed: {s!r}")
            pool.n_free("k")
            pool.history

    stop = threading.Event()
    obs = threading.Thread(target=observer, args=(stop,))
    obs.start()
    threads = [threading.Thread(target=worker, args=(t,)) for t in range(N_THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    stop.set()
    obs.join()

    assert ledger.errors == []
    # Every block is with at most one owner, and exactly where the test put it.
    live = {}
    for t in range(N_THREADS):
        for owner, blocks in held[t].items():
            got = pool.blocks_for(owner)
            assert got == blocks
            for b in got:
                assert b.block_id not in live
                live[b.block_id] = owner
    assert live == ledger.owner_of
    # Conservation and counters agree with what the threads did.
    s = pool.stats
    in_use = len(live)
    assert in_use + pool.n_free("k") + pool.n_free("v") == s.n_blocks == 256
    assert s.blocks_in_use() == in_use
    assert s.n_allocations == sum(c["alloc"] for c in counts)
    assert s.n_frees == sum(c["free"] for c in counts)
    assert s.n_exhausted == sum(c["exhausted"] for c in counts)
    assert s.n_stale_frees == 0
    for t in range(N_THREADS):
        for owner in list(held[t]):
            pool.free_all(owner)
    assert pool.n_free("k") + pool.n_free("v") == 256
    pool.close()


def test_threads_racing_for_the_last_blocks_get_all_or_nothing():
    pool = kvpool.BlockPoolAllocator(kvpool.PoolConfig(block_size=4, n_blocks=32, thread_cache=2))
    start = threading.Barrier(N_THREADS)
    results = [None] * N_THREADS

    def worker(t):
        start.wait()
        try:
            results[t] = len(pool.allocate(stream="k", n_tokens=8, owner=t))  # 2 of the 16 K blocks
        except BlockPoolExhaustedError:
            results[t] = 0

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(N_THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert sorted(results) == [0] * 8 + [2] * 8
    for t in range(N_THREADS):
        assert len(pool.blocks_for(t)) == results[t]
    assert pool.n_free("k") == 0
    assert pool.stats.n_exhausted == 8
    pool.close()


@pytest.mark.parametrize("owner", [7, -1])
def test_one_of_sixteen_concurrent_registrations_wins(owner):
    pool = kvpool.BlockPoolAllocator(kvpool.PoolConfig(block_size=4, n_blocks=8))
    start = threading.Barrier(N_THREADS)
    wins = []
    losses = []

    def worker():
        start.wait()
        try:
            pool.register_owner(owner)
            wins.append(1)
        except kvpool.OwnerAlreadyActiveError:
            losses.append(1)

    threads = [threading.Thread(target=worker) for _ in range(N_THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert (len(wins), len(losses)) == (1, N_THREADS - 1)
    pool.close()


def test_close_waits_for_calls_in_flight():
    # Closing from one thread while others allocate never destroys the pool
    # under them: each call either completes or raises ValueError (closed).
    pool = kvpool.BlockPoolAllocator(kvpool.PoolConfig(block_size=4, n_blocks=64))
    start = threading.Barrier(N_THREADS + 1)
    outcomes = []

    def worker(t):
        start.wait()
        for i in range(200):
            try:
                pool.allocate(stream="k", n_tokens=1, owner=t)
                pool.free_all(t)
            except ValueError:
                outcomes.append("closed")
                return
        outcomes.append("done")

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(N_THREADS)]
    for th in threads:
        th.start()
    start.wait()
    pool.close()
    for th in threads:
        th.join()
    assert len(outcomes) == N_THREADS
    assert set(outcomes) <= {"closed", "done"}
