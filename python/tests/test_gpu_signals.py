"""On the GPU (cuda backend), under symmem-run -n 2, issue #23: NVSHMEM-style signals
(signal_op set/add, wait_until with each comparison and a timeout, on the null stream and on a
stream) and the dtypes that are only moved (uint8, int8, bool, int16, complex64 through
all_gather, all_to_all, broadcast, put and get). Skipped without torch, without a GPU, or with
another number of ranks."""

import os
import time

import pytest

if "SYMMEM_WORLD_SIZE" not in os.environ and "WORLD_SIZE" not in os.environ:
    pytest.skip("not launched by symmem-run (no SYMMEM_WORLD_SIZE)", allow_module_level=True)
torch = pytest.importorskip("torch", reason="torch is not installed")

import symmem  # noqa: E402
from gpu_group import gpu_group  # noqa: E402


@pytest.fixture(scope="module")
def g():
    return gpu_group(torch, world_size=2)


def fresh(g):
    return g.split(list(range(g.world_size)))


# ---- signals ---------------------------------------------------------------------------------

def test_signal_op_and_wait_until_null_stream(g):
    f = fresh(g)
    n, r = f.world_size, f.rank
    nxt, prv = (r + 1) % n, (r - 1) % n
    b = symmem.empty((1024,), dtype="float32", device="cuda", group=f)
    t = torch.from_dlpack(b)
    t.fill_(r + 1)  # written before the signal: visible to the next rank once it sees it
    torch.cuda.synchronize()
    b.signal_op(nxt, 100 + r, 7)  # null stream: synchronous
    assert b.wait_until(100 + prv, "eq", 7, timeout=30) == 7
    assert torch.equal(torch.from_dlpack(b.peer(prv)), torch.full_like(t, prv + 1))
    b.signal_op(nxt, 200 + r, 5, op="add")
    b.signal_op(nxt, 200 + r, 5, op="add")
    assert b.wait_until(200 + prv, "ge", 10, timeout=30) == 10
    assert b.wait_until(200 + prv, "gt", 9) == 10
    assert b.wait_until(200 + prv, "ne", 0) == 10
    b.signal_op(r, 300, 3)  # this rank's own pad
    assert b.wait_until(300, "lt", 4) == 3
    assert b.wait_until(300, "le", 3) == 3
    # A wrapping add: 0xffffffff + 2 == 1.
    b.signal_op(r, 301, 0xFFFFFFFF, op="set")
    b.signal_op(r, 301, 2, op="add")
    assert b.wait_until(301, "eq", 1) == 1
    f.store_barrier()


def test_wait_until_timeout_names_slot_comparison_and_value(g):
    f = fresh(g)
    b = symmem.empty((1024,), dtype="float32", device="cuda", group=f)
    b.signal_op(f.rank, 400, 2)
    t0 = time.monotonic()
    with pytest.raises(symmem.Timeout) as e:
        b.wait_until(400, "gt", 5, timeout=0.5)  # null stream: raised by the call
    assert time.monotonic() - t0 >= 0.4
    msg = str(e.value)
    assert f"rank {f.rank}" in msg and "slot 400" in msg and "gt 5" in msg and "holds 2" in msg, msg
    assert isinstance(e.value, TimeoutError)
    # timeout 0: checks once.
    with pytest.raises(symmem.Timeout, match="slot 401"):
        b.wait_until(401, "eq", 1, timeout=0)
    # The process still works: a satisfied wait, a barrier and an all-reduce.
    assert b.wait_until(400, "eq", 2, timeout=5) == 2
    x = torch.from_dlpack(b)
    x.fill_(1.0)
    symmem.all_reduce(x, op="sum")
    torch.cuda.synchronize()
    assert torch.equal(x, torch.full_like(x, float(f.world_size)))
    f.store_barrier()


def test_signals_on_a_stream(g):
    f = fresh(g)
    n, r = f.world_size, f.rank
    nxt, prv = (r + 1) % n, (r - 1) % n
    b = symmem.empty((4096,), dtype="int32", device="cuda", group=f)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        x = torch.from_dlpack(b)
        x.fill_(10 * r + 3)
    b.signal_op(nxt, 500 + r, 1, op="add", stream=s)  # after the fill on the stream
    assert b.wait_until(500 + prv, "eq", 1, timeout=30, stream=s) == 0  # enqueued: 0
    with torch.cuda.stream(s):
        got = torch.from_dlpack(b.peer(prv)).clone()  # ordered after the wait
    s.synchronize()
    assert torch.equal(got, torch.full_like(got, 10 * prv + 3))
    # A wait on a stream that times out is raised by the next call, naming the slot in the
    # timeout record's terms (channel slot / world_size, peer slot % world_size).
    slot = 7 * n + 1
    b.wait_until(slot, "eq", 99, timeout=0.3, stream=s)
    s.synchronize()
    with pytest.raises(symmem.Timeout) as e:
        b.signal_op(r, 600, 1)
    assert "channel 7 for rank 1" in str(e.value), str(e.value)
    f.store_barrier()


def test_signal_op_bad_arguments(g):
    f = fresh(g)
    b = symmem.empty((16,), dtype="float32", device="cuda", group=f)
    with pytest.raises(symmem.InvalidArgument, match="slot"):
        b.signal_op(0, 1 << 30, 1)
    with pytest.raises(symmem.InvalidArgument, match="cmp"):
        b.wait_until(1, "gte", 1)
    with pytest.raises(symmem.InvalidArgument, match="peer"):
        b.signal_op(f.world_size, 1, 1)
    f.store_barrier()


# ---- dtypes that are only moved --------------------------------------------------------------

BYTE_DTYPES = ["uint8", "int8", "bool", "int16", "complex64"]


def vals(dtype, n, seed):
    """n values of `dtype` that depend on `seed`, on the GPU."""
    k = torch.arange(n, device="cuda", dtype=torch.int64) * 7 + seed * 13
    d = getattr(torch, dtype)
    if dtype == "bool":
        return k % 3 == 0
    if dtype.startswith("complex"):
        return torch.complex((k % 101).float(), (k % 37).float()).to(d)
    return (k % 97).to(d)


@pytest.mark.parametrize("dtype", BYTE_DTYPES)
@pytest.mark.parametrize("count", [3, 5000, 300001])
def test_moved_only_dtypes(g, dtype, count):
    n, r = g.world_size, g.rank
    send = vals(dtype, count, r)
    recv = torch.empty((n, count), dtype=send.dtype, device="cuda")
    symmem.all_gather(send, recv, group=g)
    torch.cuda.synchronize()
    for q in range(n):
        assert torch.equal(recv[q], vals(dtype, count, q)), (dtype, q)
    a2a_send = torch.cat([vals(dtype, count, r * n + p) for p in range(n)])
    a2a_recv = torch.empty_like(a2a_send)
    symmem.all_to_all(a2a_send, a2a_recv, group=g)
    torch.cuda.synchronize()
    for q in range(n):
        assert torch.equal(a2a_recv[count * q:count * (q + 1)], vals(dtype, count, q * n + r))
    for root in range(n):
        x = vals(dtype, count, r + 50)
        symmem.broadcast(x, root=root, group=g)
        torch.cuda.synchronize()
        assert torch.equal(x, vals(dtype, count, root + 50)), (dtype, root)
    # put / get with a signal, in symmetric memory of the dtype.
    b = symmem.empty((count,), dtype=dtype, device="cuda", group=g)
    bt = torch.from_dlpack(b)
    assert bt.dtype == send.dtype
    b.barrier()
    right, left = (r + 1) % n, (r - 1) % n
    symmem.put(b, vals(dtype, count, r + 90), right, signal=True, channel=3)
    b.wait_signal(left, channel=3, timeout=30)
    torch.cuda.synchronize()
    assert torch.equal(bt, vals(dtype, count, left + 90))
    got = torch.zeros_like(bt)
    b.barrier()
    symmem.get(b, got, right)
    torch.cuda.synchronize()
    assert torch.equal(got, vals(dtype, count, r + 90))  # what this rank put there
    b.barrier()
    del bt, b


def test_reduction_of_a_moved_only_dtype_names_the_ops(g):
    x = torch.zeros(16, dtype=torch.uint8, device="cuda")
    with pytest.raises(symmem.Unsupported) as e:
        symmem.all_reduce(x, op="sum", group=g)
    msg = str(e.value)
    assert "uint8" in msg and "all_gather" in msg and "broadcast" in msg, msg
