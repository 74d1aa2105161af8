"""Multi-rank tests, run on every rank under symmem-run (e.g. `symmem-run -n 2 -- python -m
pytest test_mp.py`). Every rank runs the same tests in the same order. Backend-independent: the
arrays live where SYMMEM_TEST_DEVICE says (suite.py; cpu in CI, cuda in scripts/gpu-check.sh)
and what the backend's op table does not serve is skipped by the table."""

import os
import threading
import time

import numpy as np
import pytest

import symmem
from suite import Suite, skip_module_without_device

if "SYMMEM_WORLD_SIZE" not in os.environ and "WORLD_SIZE" not in os.environ:
    pytest.skip("not launched by symmem-run (no SYMMEM_WORLD_SIZE)", allow_module_level=True)
skip_module_without_device()


@pytest.fixture(scope="module")
def g():
    g = symmem.Group.from_env()
    if g.world_size < 2:
        pytest.skip("needs at least 2 ranks")
    return g


@pytest.fixture(scope="module")
def S(g):
    return Suite(g)


def test_group(g):
    assert symmem.default_group() is g or symmem.default_group().name == g.name
    assert 0 <= g.rank < g.world_size and g.global_ranks == list(range(g.world_size))
    assert g.local_world_size == g.world_size and g.single_host


def test_acceptance(g, S):
    b = S.empty((1024,), dtype="float32")
    S.set(b, g.rank + 1)
    symmem.all_reduce(b, op="sum")
    n = g.world_size
    assert (S.host(b) == n * (n + 1) / 2).all()


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int32", "int64"])
@pytest.mark.parametrize("op", ["sum", "avg", "min", "max"])
def test_all_reduce(g, S, dtype, op):
    n, r = g.world_size, g.rank
    S.require("all_reduce", dtype)
    if op == "avg" and dtype.startswith("int"):
        pytest.skip("avg of integers truncates: checked exactly by the C++ op suite")
    b = S.empty((333,), dtype=dtype)
    vals = np.arange(333) % 7
    S.set(b, vals + r)
    symmem.all_reduce(b, op=op)
    per_rank = [vals + k for k in range(n)]
    want = {"sum": sum(per_rank), "avg": sum(per_rank) / n, "min": per_rank[0],
            "max": per_rank[-1]}[op]
    np.testing.assert_allclose(S.host(b).astype(np.float64), want, rtol=1e-3)


def _fp8_value(code, e, m, ieee):
    """The value of an fp8 code, from the format's definition (NaN/inf codes are not used)."""
    bias = (1 << (e - 1)) - 1
    mag, sign = code & 0x7F, -1.0 if code & 0x80 else 1.0
    exp, man = mag >> m, mag & ((1 << m) - 1)
    v = man * 2.0 ** (1 - bias - m) if exp == 0 else (1 + man / 2 ** m) * 2.0 ** (exp - bias)
    return sign * v


@pytest.mark.parametrize("dtype,e,m,ieee", [("float8_e4m3fn", 4, 3, False),
                                            ("float8_e5m2", 5, 2, True)])
@pytest.mark.parametrize("op", ["sum", "max"])
def test_all_reduce_fp8(g, S, dtype, e, m, ieee, op):
    # Small exact values: every partial sum is exact in f32 and the total is a code of the format,
    # so the one rounding at the end is exact too.
    n, r = g.world_size, g.rank
    S.require("all_reduce", dtype)
    codes = {_fp8_value(c, e, m, ieee): c for c in range(0x7B)}  # finite, non-negative
    b = S.empty((257,), dtype=dtype)
    assert b.dtype == dtype and b.itemsize == 1
    raw = b.handle.array((257,), "uint8")
    mine = [float((i + r) % 4) for i in range(257)]
    S.set(raw, np.array([codes[v] for v in mine], dtype=np.uint8))
    symmem.all_reduce(b, op=op)
    per_rank = [[float((i + k) % 4) for i in range(257)] for k in range(n)]
    want = [sum(col) if op == "sum" else max(col) for col in zip(*per_rank)]
    got = [_fp8_value(int(c), e, m, ieee) for c in S.host(raw)]
    assert got == want


@pytest.mark.parametrize("algo", ["one_shot", "two_shot"])
def test_all_reduce_algos_and_foreign(g, S, algo):
    n, r = g.world_size, g.rank
    b = S.empty((4096,), dtype="float32")
    S.set(b, r)
    symmem.all_reduce(b, algo=algo)
    assert (S.host(b) == n * (n - 1) / 2).all()
    x = S.plain(np.full(1000, r + 1, dtype=np.float32))  # ordinary memory
    symmem.all_reduce(x, algo=algo)
    assert (S.host(x) == n * (n + 1) / 2).all()
    out = S.zeros(1000, np.float32)
    symmem.all_reduce(x, op="max", out=out)
    assert (S.host(out) == n * (n + 1) / 2).all()


def test_bitwise_identical(g, S):
    x = S.plain(np.random.default_rng(g.rank).standard_normal(10000).astype(np.float32))
    symmem.all_reduce(x)
    gathered = S.zeros(10000 * g.world_size, np.float32)
    symmem.all_gather(x, gathered)
    mine, all_ = S.host(x), S.host(gathered)
    for k in range(g.world_size):
        assert all_[k * 10000:(k + 1) * 10000].tobytes() == mine.tobytes()


def test_reduce_scatter(g, S):
    n, r = g.world_size, g.rank
    send = S.empty((n * 50,), dtype="float32")
    S.set(send, np.repeat(np.arange(n), 50) * 10 + r)
    recv = S.zeros(50, np.float32)
    symmem.reduce_scatter(send, recv, op="sum")
    assert (S.host(recv) == n * r * 10 + n * (n - 1) / 2).all()


def test_all_gather(g, S):
    n, r = g.world_size, g.rank
    S.require("all_gather", "int64")
    send = S.plain(np.full(17, r, dtype=np.int64))
    recv = S.empty((n, 17), dtype="int64")
    symmem.all_gather(send, recv)
    assert (S.host(recv) == np.arange(n)[:, None]).all()


def test_all_to_all(g, S):
    n, r = g.world_size, g.rank
    S.require("all_to_all", "int32")
    send = S.plain(np.array([r * 100 + p for p in range(n) for _ in range(3)], dtype=np.int32))
    recv = S.zeros(3 * n, np.int32)
    symmem.all_to_all(send, recv)
    assert list(S.host(recv)) == [p * 100 + r for p in range(n) for _ in range(3)]


def test_all_to_all_v(g, S):
    n, r = g.world_size, g.rank
    # rank r sends p + r + 1 elements of value r * 100 + p to peer p
    counts_h = np.array([p + r + 1 for p in range(n)], dtype=np.int64)
    send = S.plain(np.concatenate([np.full(c, r * 100 + p, dtype=np.float32)
                                   for p, c in enumerate(counts_h)]))
    counts = S.plain(counts_h)  # counts live in the op's memory (the GPU's on GPU backends)
    cap = sum(r + q + 1 for q in range(n)) + 5
    recv = S.plain(np.full(cap, -1, dtype=np.float32))
    rc = S.zeros(n, np.int64)
    ro = S.zeros(n, np.int64)
    symmem.all_to_all_v(send, counts, recv, rc, ro)
    rc_h, ro_h, recv_h = S.host(rc), S.host(ro), S.host(recv)
    assert list(rc_h) == [r + q + 1 for q in range(n)]
    for q in range(n):
        assert (recv_h[ro_h[q]:ro_h[q] + rc_h[q]] == q * 100 + r).all()
    # MPI style: counts known; a disagreement is InvalidArgument
    symmem.all_to_all_v(send, counts, recv, S.plain(rc_h), ro, recv_counts_known=True)
    assert (S.host(recv)[:cap - 5] == recv_h[:cap - 5]).all()


def test_broadcast(g, S):
    n, r = g.world_size, g.rank
    S.require("broadcast", "float64")
    for root in range(n):
        x = S.plain(np.full(64, r, dtype=np.float64))
        symmem.broadcast(x, root=root)
        assert (S.host(x) == root).all()


def test_put_get_signals_and_peer_views(g, S):
    n, r = g.world_size, g.rank
    right, left = (r + 1) % n, (r - 1) % n
    b = S.empty((16,), dtype="int32")
    S.set(b, -1)
    b.barrier()
    symmem.put(b, S.plain(np.full(8, r, dtype=np.int32)), right, offset=8, signal=True,
               channel=1)
    b.wait_signal(left, channel=1, timeout=30)
    mine = S.host(b)
    assert (mine[8:] == left).all() and (mine[:8] == -1).all()
    got = S.zeros(8, np.int32)
    symmem.get(b, got, right, offset=8)
    assert (S.host(got) == r).all()  # right's second half was written by this rank
    # direct loads from a peer's buffer
    S.set(b.handle.array((8,), "int32"), r * 10)
    b.barrier()
    for p in range(n):
        view = b.peer(p)
        assert view.buffer_rank == p and view.data_ptr() == b.ptr(p)
        assert (S.host(view)[:8] == p * 10).all()
    b.barrier()
    # direct store into the right neighbour, then a signal
    S.set(b.handle.array((1,), "int32").peer(right), 1000 + r)
    b.put_signal(right, channel=2)
    b.wait_signal(left, channel=2, timeout=30)
    assert S.host(b)[0] == 1000 + left
    pad = S.host(b.signal_pad())
    assert (pad[n:3 * n] == 0).all()  # channels 1 and 2 consumed (a peer may be in a barrier on 0)
    b.barrier()


def test_split(g, S):
    n, r = g.world_size, g.rank
    members = [0, n - 1]
    refused = None
    if r in members:
        sub = g.split(members)
        assert sub.world_size == 2 and sub.global_rank(sub.rank) == r
        try:
            b = S.empty((8,), dtype="float32", group=sub)
        except symmem.Unsupported as e:
            # The backend's own refusal (nvshmem allocates over every PE only); both members
            # get it, since it depends on the group, not on the rank.
            refused = str(e)
        else:
            S.set(b, r)
            symmem.all_reduce(b)
            assert (S.host(b) == n - 1).all()
    else:
        with pytest.raises(symmem.InvalidArgument):
            g.split(members)
    g.store_barrier()  # every rank, so a refusal on the members does not strand the others
    if refused is not None:
        pytest.skip(f"the backend refuses subgroup memory: {refused}")


def test_gil_released_during_barrier(g):
    ticks = [0]
    stop = [False]

    def run():
        while not stop[0]:
            time.sleep(0.001)
            ticks[0] += 1

    t = threading.Thread(target=run, daemon=True)
    t.start()
    time.sleep(0.02)
    symmem.barrier()
    if g.rank != 0:
        time.sleep(0.5)  # rank 0 waits in the barrier below for ~0.5 s
    before = ticks[0]
    symmem.barrier(timeout=30)
    during = ticks[0] - before
    stop[0] = True
    t.join()
    if g.rank == 0:
        assert during >= 50, f"another thread ran only {during} ticks during a ~0.5 s barrier"


@pytest.mark.parametrize("arg", ["out", "op"])
def test_binding_error_on_one_rank_is_named_on_every_rank(g, S, arg):
    # NOTE [refused ops]: a check of the Python binding (out's dtype, the op's name) that fails
    # on rank 1 only. Rank 1 raises naming 'out'; the others fail the same op naming rank 1 (at the call on
    # the host backend, at the next synchronising call on a GPU backend) instead of waiting for
    # rank 1 until their timeout; nothing is written and the group goes on working.
    n, r = g.world_size, g.rank
    S.require("all_reduce", "float32")
    x = S.plain(np.ones(64, dtype=np.float32))
    bad = r == 1
    out = S.zeros(64, np.float64 if bad and arg == "out" else np.float32)
    op = "bogus" if bad and arg == "op" else "sum"
    start = time.monotonic()
    err = None
    try:
        symmem.all_reduce(x, op=op, out=out, group=g, timeout=30)
    except symmem.InvalidArgument as e:
        err = e
    try:
        S.settle()
    except symmem.InvalidArgument as e:
        assert err is None, f"raised twice: {err} / {e}"
        err = e
    assert err is not None, "no error"
    assert time.monotonic() - start < 15
    msg = str(err)
    assert (f"'{arg}'" in msg) if bad else ("rank 1" in msg), msg
    assert (S.host(out) == 0).all()
    y = S.plain(np.ones(8, dtype=np.float32))
    symmem.all_reduce(y, group=g)
    assert (S.host(y) == n).all()
    g.store_barrier()


@pytest.mark.parametrize("known", [True, False])
def test_refuse_is_named_on_every_rank(g, S, known):
    # symmem.refuse(): a layer's own check failed on rank 1, which refuses the op instead of
    # calling it (with the op's count and dtype, or without: then taken to fit the workspace);
    # the others fail that all_reduce naming rank 1 (at the call on the host backend, at the next
    # synchronising call on a GPU backend) within far less than their timeout.
    n, r = g.world_size, g.rank
    if n < 2:
        pytest.skip("needs 2 ranks")
    S.require("all_reduce", "float32")
    x = S.plain(np.ones(64, dtype=np.float32))
    symmem.all_reduce(S.plain(np.ones(64, dtype=np.float32)), group=g)  # the workspace exists
    S.settle()
    start = time.monotonic()
    err = None
    try:
        if r == 1:
            extra = {"count": 64, "dtype": "float32"} if known else {}
            symmem.refuse("all_reduce", group=g, device=S.device, timeout=30,
                          message="all_reduce: rank 1: the layer's check failed", **extra)
        else:
            symmem.all_reduce(x, group=g, timeout=30)
        S.settle()
    except symmem.InvalidArgument as e:
        err = e
    assert time.monotonic() - start < 15
    if r == 1:
        assert err is None, f"the refusing rank raised from refuse(): {err}"
    else:
        assert err is not None and "rank 1" in str(err), err
        assert (S.host(x) == 1).all()  # nothing was written
    y = S.plain(np.ones(8, dtype=np.float32))
    symmem.all_reduce(y, group=g)
    assert (S.host(y) == n).all()
    g.store_barrier()


def test_size_mismatch_is_invalid_argument(g, S):
    with pytest.raises(symmem.InvalidArgument):
        S.empty((10 + g.rank,), dtype="float32")
    g.store_barrier()


def test_signals_nvshmem_style(g, S):
    # signal_op / wait_until on raw pad slots: a ring, each rank signals the next one.
    b = S.empty((16,), dtype="float32")
    n, r = g.world_size, g.rank
    nxt, prv = (r + 1) % n, (r - 1) % n
    S.set(b, r)  # written before the signal: visible once the next rank sees it
    b.signal_op(nxt, 100 + r, 7)
    assert b.wait_until(100 + prv, "eq", 7, timeout=30) == 7
    assert (S.host(b.peer(prv)) == prv).all()
    b.signal_op(nxt, 200 + r, 5, op="add")
    b.signal_op(nxt, 200 + r, 5, op="add")
    assert b.wait_until(200 + prv, "ge", 10, timeout=30) == 10
    assert b.wait_until(200 + prv, "gt", 9) == 10 and b.wait_until(200 + prv, "ne", 0) == 10
    b.signal_op(r, 300, 3)
    assert b.wait_until(300, "lt", 4) == 3 and b.wait_until(300, "le", 3) == 3
    with pytest.raises(symmem.Timeout, match="slot 301"):
        b.wait_until(301, "eq", 1, timeout=0.2)
    with pytest.raises(symmem.InvalidArgument, match="cmp"):
        b.wait_until(301, "gte", 1)
    with pytest.raises(symmem.InvalidArgument, match="slot"):
        b.signal_op(nxt, 1 << 30, 1)
    g.store_barrier()


BYTE_DTYPES = ["uint8", "int8", "bool", "int16", "uint16", "uint32", "uint64", "complex64",
               "complex128"]


def _vals(dtype, n, seed):
    """n distinct-ish values of `dtype` that depend on `seed`."""
    k = np.arange(n) * 7 + seed * 13
    if dtype == "bool":
        return (k % 3 == 0)
    if dtype.startswith("complex"):
        return (k % 101 + 1j * (k % 37)).astype(dtype)
    return (k % 97).astype(dtype)


@pytest.mark.parametrize("dtype", BYTE_DTYPES)
def test_byte_dtypes_move(g, S, dtype):
    # Dtypes that are moved, never reduced: every data-movement op takes them.
    n, r = g.world_size, g.rank
    for op in ("all_gather", "all_to_all", "broadcast"):
        S.require(op, dtype)
    send = S.plain(_vals(dtype, 11, r))
    recv = S.zeros((n, 11), dtype)
    symmem.all_gather(send, recv)
    recv_h = S.host(recv)
    for q in range(n):
        np.testing.assert_array_equal(recv_h[q], _vals(dtype, 11, q))
    a2a_send = S.plain(np.concatenate([_vals(dtype, 5, r * n + p) for p in range(n)]))
    a2a_recv = S.zeros(5 * n, dtype)
    symmem.all_to_all(a2a_send, a2a_recv)
    a2a_h = S.host(a2a_recv)
    for q in range(n):
        np.testing.assert_array_equal(a2a_h[5 * q:5 * q + 5], _vals(dtype, 5, q * n + r))
    for root in range(n):
        x = S.plain(_vals(dtype, 9, r + 50))
        symmem.broadcast(x, root=root)
        np.testing.assert_array_equal(S.host(x), _vals(dtype, 9, root + 50))
    b = S.empty((8,), dtype=dtype)
    b.barrier()
    right, left = (r + 1) % n, (r - 1) % n
    symmem.put(b, S.plain(_vals(dtype, 8, r + 90)), right, signal=True, channel=3)
    b.wait_signal(left, channel=3, timeout=30)
    np.testing.assert_array_equal(S.host(b), _vals(dtype, 8, left + 90))
    got = S.zeros(8, dtype)
    b.barrier()
    symmem.get(b, got, right)
    np.testing.assert_array_equal(S.host(got), _vals(dtype, 8, r + 90))  # what this rank put
    b.barrier()
    assert not symmem.serves(S.backend, "all_reduce", dtype, S.device)
    with pytest.raises(symmem.Unsupported, match="is taken by all_gather"):
        symmem.all_reduce(b)


def test_signal_pad_sizes_dtype_offset(g, S):
    # torch's get_signal_pad(rank, sizes, dtype, storage_offset): a typed window of a pad.
    b = S.empty((4,), dtype="float32")
    n, r = g.world_size, g.rank
    nxt, prv = (r + 1) % n, (r - 1) % n
    whole = b.signal_pad()
    assert whole.shape == (b.handle.signal_pad_bytes // 4,)
    assert S.host(whole).dtype == np.uint32
    win = b.signal_pad(nxt, sizes=(2, 3), dtype="uint32", offset=500)  # slots 500..505 of nxt
    assert win.shape == (2, 3) and win.is_signal_pad and win.buffer_rank == nxt
    vals = np.arange(6, dtype=np.uint32) + 10 * r + 1
    S.set(b.signal_pad(nxt, sizes=(5,), dtype="uint32", offset=500), vals[:5])
    b.signal_op(nxt, 505, int(vals[5]))  # the last one with release order, after the stores
    assert b.wait_until(505, "eq", 10 * prv + 6, timeout=30) == 10 * prv + 6
    mine = S.host(b.signal_pad(sizes=(6,), offset=500))
    np.testing.assert_array_equal(mine, np.arange(6) + 10 * prv + 1)
    wide = b.signal_pad(sizes=(3,), dtype="uint64", offset=250)  # the same bytes, as uint64
    assert S.host(wide)[0] == (10 * prv + 1) | ((10 * prv + 2) << 32)
    with pytest.raises(symmem.InvalidArgument, match="'sizes'"):
        b.signal_pad(sizes=(b.handle.signal_pad_bytes,), dtype="uint32")
    with pytest.raises(symmem.InvalidArgument, match="'offset'"):
        b.signal_pad(offset=-1)
    g.store_barrier()
    S.set(b.signal_pad(sizes=(6,), offset=500), 0)  # pads are zero at rest
    g.store_barrier()
