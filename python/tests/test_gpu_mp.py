"""GPU waits that time out, under symmem-run -n 2 on the cuda backend (issues #17 and #24): a
Timeout naming rank, channel and peer, on the null stream from the call itself and on an
explicit stream from the next call; argument errors found on the device (all_to_all_v's counts,
a peer that refused its arguments) raised by the next synchronising call or the error query;
afterwards the process still works (a new group's barrier and all-reduce). Skipped without
torch, without a GPU, or with another number of ranks."""

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


def assert_names(err, channel=None):
    msg = str(err)
    assert "rank 0" in msg and "timed out" in msg and "for rank 1" in msg, msg
    if channel is not None:
        assert f"channel {channel}" in msg, msg


def assert_usable(g):
    # A new group: barrier and all-reduce on the GPU, checked.
    n = fresh(g)
    x = torch.from_dlpack(symmem.empty((4096,), dtype="float32", device="cuda", group=n))
    x.fill_(n.rank + 1)
    symmem.barrier(group=n, device="cuda")
    symmem.all_reduce(x, op="sum")
    torch.cuda.synchronize()
    assert torch.equal(x, torch.full_like(x, 3.0))
    n.store_barrier()


def test_array_barrier_timeout_null_and_explicit_stream(g):
    f = fresh(g)
    a = symmem.empty((1024,), dtype="float32", device="cuda", group=f)
    if f.rank == 0:
        t0 = time.monotonic()
        with pytest.raises(symmem.Timeout) as e:
            a.barrier(channel=3, timeout=1.0)  # null stream: raised by the call
        assert time.monotonic() - t0 >= 0.9
        assert isinstance(e.value, TimeoutError)
        assert_names(e.value, 3)
        s = torch.cuda.Stream()
        a.barrier(channel=3, timeout=1.0, stream=s)  # enqueued; the kernel leaves at its deadline
        s.synchronize()
        with pytest.raises(symmem.Timeout) as e:
            a.barrier(channel=4, timeout=1.0, stream=s)  # raised before it launches anything
        assert_names(e.value, 3)
        torch.cuda.synchronize()
    f.store_barrier()
    del a
    assert_usable(g)


def test_wait_signal_and_unconsumed_put_signal_time_out(g):
    f = fresh(g)
    a = symmem.empty((1024,), dtype="float32", device="cuda", group=f)
    if f.rank == 0:
        with pytest.raises(symmem.Timeout) as e:
            a.wait_signal(1, channel=2, timeout=0.5)
        assert_names(e.value, 2)
        a.put_signal(1, channel=5, timeout=0.5)  # nobody consumes it
        with pytest.raises(symmem.Timeout) as e:
            a.put_signal(1, channel=5, timeout=0.5)
        assert_names(e.value, 5)
    f.store_barrier()
    del a
    assert_usable(g)


def test_lone_group_barrier_times_out(g):
    f = fresh(g)
    symmem.barrier(group=f, device="cuda")  # every rank: the group's workspace is set up
    torch.cuda.synchronize()
    f.store_barrier()
    if f.rank == 0:
        t0 = time.monotonic()
        with pytest.raises(symmem.Timeout) as e:
            symmem.barrier(group=f, device="cuda", timeout=1.0)  # null stream: synchronous
        assert time.monotonic() - t0 >= 0.9
        assert_names(e.value)
    f.store_barrier()
    assert_usable(g)


def test_lone_group_barrier_on_a_stream_raises_at_the_next_op(g):
    f = fresh(g)
    symmem.barrier(group=f, device="cuda")
    torch.cuda.synchronize()
    f.store_barrier()
    if f.rank == 0:
        s = torch.cuda.Stream()
        symmem.barrier(group=f, device="cuda", timeout=1.0, stream=s)  # returns at once
        s.synchronize()
        with pytest.raises(symmem.Timeout) as e:
            symmem.barrier(group=f, device="cuda", timeout=1.0, stream=s)
        assert_names(e.value)
    f.store_barrier()
    assert_usable(g)


def test_all_to_all_v_capacity_one_short_raises_on_every_rank(g):
    # Issue #24: in the MoE style (counts are outputs) a receiver whose capacity is one element
    # short killed the process. Every rank sees the whole count matrix on the device, so every
    # rank raises InvalidArgument (rank 0 of its own 'recv_capacity', rank 1 naming rank 0) at
    # its next synchronising call -- a group barrier on the null stream, after its own work -- or
    # from the error query; never from an asynchronous op. Nothing is written, and the process
    # stays usable.
    f = fresh(g)
    n, r = f.world_size, f.rank
    counts = torch.full((n,), 4, dtype=torch.int64, device="cuda")
    send = torch.arange(4 * n, dtype=torch.float32, device="cuda")
    cap = 4 * n - 1 if r == 0 else 4 * n
    recv = torch.full((cap,), -1.0, device="cuda")
    rc = torch.zeros(n, dtype=torch.int64, device="cuda")
    ro = torch.zeros(n, dtype=torch.int64, device="cuda")
    symmem.all_to_all_v(send, counts, recv, rc, ro, group=f)
    torch.cuda.synchronize()
    with pytest.raises(symmem.InvalidArgument) as e:
        symmem.barrier(group=f, device="cuda")  # the null stream: synchronous
    msg = str(e.value)
    assert "recv_capacity" in msg and "rank 0" in msg, msg
    assert (recv == -1.0).all() and (rc == 0).all()
    f.check_async_error()  # raised once
    # Again, raised by the error query once the stream is synchronised; an asynchronous op on a
    # stream in between raises nothing (its peer launched it too).
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        symmem.all_to_all_v(send, counts, recv, rc, ro, group=f)
        symmem.barrier(group=f, device="cuda", stream=s)
    s.synchronize()
    with pytest.raises(symmem.InvalidArgument) as e:
        f.check_async_error()
    assert "recv_capacity" in str(e.value) and "rank 0" in str(e.value), str(e.value)
    assert (recv == -1.0).all() and (rc == 0).all()
    symmem.barrier(group=f, device="cuda")
    torch.cuda.synchronize()
    f.store_barrier()
    assert_usable(g)


def test_refused_op_is_reported_on_every_rank(g):
    # Issue #24 item 3 (NOTE [refused ops]): rank 1 alone passes a bad argument. It raises at the
    # call; its peer's op, enqueued already, learns of it on the device: no rank writes its
    # output, the peer raises InvalidArgument naming rank 1 once it synchronised (error query),
    # and the group stays in step. At an LL size and at a barrier-kernel size (2 MiB).
    f = fresh(g)
    n, r = f.world_size, f.rank
    for count in (1000, 512 * 1024):
        x = torch.ones(count, device="cuda")
        out = torch.empty(count, device="cuda")
        buf = torch.empty(count * n + 1, device="cuda")
        # Both ops once on every rank: the workspace is large enough (a refusal never grows it).
        symmem.all_reduce(x, out=out, group=f)
        symmem.all_gather(x, buf[:count * n], group=f)
        torch.cuda.synchronize()
        out.fill_(-1.0)
        buf.fill_(-1.0)
        torch.cuda.synchronize()
        cases = [
            # rank 1: a zero timeout
            ("all_reduce", "timeout",
             lambda bad: symmem.all_reduce(x, out=out, group=f, timeout=0 if bad else None)),
            # rank 1: a send that overlaps recv without being the in-place form
            ("all_gather", "recv",
             lambda bad: symmem.all_gather(buf[1:count + 1] if bad else x, buf[:count * n],
                                           group=f)),
        ]
        for op, arg, run in cases:
            if r == 1:
                with pytest.raises(symmem.InvalidArgument) as e:
                    run(True)
                assert f"'{arg}'" in str(e.value) and "rank 1" in str(e.value), str(e.value)
                torch.cuda.synchronize()
                f.check_async_error()  # nothing more for the refusing rank
            else:
                run(False)  # enqueued: its kernel meets rank 1's refusal
                torch.cuda.synchronize()
                with pytest.raises(symmem.InvalidArgument) as e:
                    f.check_async_error()
                msg = str(e.value)
                assert f"rank {r}" in msg and "rank 1" in msg and "refused" in msg, msg
                assert op in msg, msg
                f.check_async_error()  # raised once
            assert (out == -1.0).all() and (buf == -1.0).all(), (op, count)
            # The group is in step: the next all_reduce is correct.
            y = torch.full((count,), float(r + 1), device="cuda")
            symmem.all_reduce(y, out=out, group=f)
            torch.cuda.synchronize()
            f.check_async_error()
            assert (out == n * (n + 1) / 2).all()
            out.fill_(-1.0)
            torch.cuda.synchronize()
    f.store_barrier()
    assert_usable(g)


def test_check_async_error_reports_a_timeout_on_a_stream(g):
    # Issue #24 item 4: the error query of stream-ordered ops. A lone barrier on a stream returns
    # at once; once the stream is synchronised the group's query raises its Timeout (once), so
    # the next op does not.
    f = fresh(g)
    symmem.barrier(group=f, device="cuda")
    torch.cuda.synchronize()
    f.store_barrier()
    f.check_async_error()  # nothing pending
    if f.rank == 0:
        s = torch.cuda.Stream()
        symmem.barrier(group=f, device="cuda", timeout=1.0, stream=s)  # returns at once
        s.synchronize()
        with pytest.raises(symmem.Timeout) as e:
            f.check_async_error()
        assert_names(e.value)
        f.check_async_error()  # raised once
    f.store_barrier()
    assert_usable(g)
