"""Abort, shrink and grow from Python (docs/reliability.md, "Recovering from a failed rank").
Run under `symmem-run -n 3 --restart-failed 1`: the last rank SIGKILLs itself, the survivors get
PeerFailure, shrink, verify, then grow back with the process symmem-run started again, which
joins through Group.rejoin()."""

import os
import signal
import threading
import time

import numpy as np
import pytest

import symmem

if "SYMMEM_WORLD_SIZE" not in os.environ:
    pytest.skip("not launched by symmem-run (no SYMMEM_WORLD_SIZE)", allow_module_level=True)


def verified_all_reduce(g, rounds=3):
    b = symmem.empty((1000,), dtype="int32", group=g)
    x = np.from_dlpack(b)
    n = g.world_size
    for k in range(rounds):
        x[:] = np.arange(1000, dtype=np.int32) + (g.rank + 1) * (k + 1)
        symmem.all_reduce(b, op="sum", group=g)
        np.testing.assert_array_equal(x, n * np.arange(1000) + (k + 1) * n * (n + 1) // 2)


@pytest.fixture(scope="module")
def g():
    if symmem.Group.restarted():
        return None
    g = symmem.Group.from_env()
    if g.world_size < 3:
        pytest.skip("needs 3 ranks")
    return g


def test_abort_ends_a_wait_and_later_ops(g):
    if g is None:
        pytest.skip("the restarted process only rejoins (test_kill_shrink_grow)")
    sub = g.split(list(range(g.world_size)))
    b = symmem.empty((64,), dtype="float32", group=sub)
    sub.store_barrier()
    timer = threading.Timer(0.2, sub.abort, args=("python test",))
    timer.start()
    t0 = time.monotonic()
    with pytest.raises(symmem.Aborted) as e:
        b.wait_signal((sub.rank + 1) % sub.world_size, channel=1, timeout=30)
    assert time.monotonic() - t0 < 10
    assert "python test" in str(e.value) and f"rank {sub.rank}" in str(e.value)
    assert e.value.code == symmem.ErrorCode.Aborted
    assert sub.aborted and not g.aborted
    with pytest.raises(symmem.Aborted):
        symmem.all_reduce(b, group=sub)
    with pytest.raises(symmem.Aborted):
        symmem.empty((8,), dtype="float32", group=sub)
    sub.abort("again")  # idempotent
    g.store_barrier()


def test_kill_shrink_grow(g):
    if g is None:
        big = symmem.Group.rejoin()
        assert big.world_size == int(os.environ["SYMMEM_WORLD_SIZE"])
        assert big.rank == big.world_size - 1 and big.global_ranks[-1] == int(os.environ["RANK"])
        verified_all_reduce(big)
        return
    n = g.world_size
    victim = n - 1
    b = symmem.empty((1000,), dtype="int32", group=g)
    g.store_barrier()
    if g.rank == victim:
        os.kill(os.getpid(), signal.SIGKILL)
    t0 = time.monotonic()
    with pytest.raises(symmem.PeerFailure):
        while time.monotonic() - t0 < 60:
            symmem.all_reduce(b, group=g)
    assert g.failed_ranks() == [victim]
    s = g.shrink(g.failed_ranks())
    assert s.world_size == n - 1 and s.rank == g.rank
    assert s.rank_map == list(range(n - 1)) + [-1]
    assert symmem.default_group() == s  # shrink() replaced the default group
    assert g.aborted
    with pytest.raises(symmem.Aborted, match="was shrunk into"):
        symmem.all_reduce(b, group=g)
    del b
    verified_all_reduce(s)
    big = s.grow(1)
    assert big.world_size == n and big.rank == s.rank and not s.aborted
    verified_all_reduce(big)
