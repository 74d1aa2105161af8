"""symmem.torch.symm_mem, PyTorch's symmetric-memory surface on symmem, under torchrun on CPU
tensors (the host backend). The cases follow what torch's own symmetric-memory tests check:
rendezvous and the handle, get_buffer / get_signal_pad with sizes, dtype and offset,
barrier / put_signal / wait_signal, one- and two-shot all-reduce over dtypes and offsets,
reduce_scatter_out, all_to_all_vdev and the 2-D (MoE) forms, subgroups. Written against the names of
torch.distributed._symmetric_memory: only the import line differs."""

import ctypes
import os
import time

import pytest

if "WORLD_SIZE" not in os.environ or "MASTER_ADDR" not in os.environ:
    pytest.skip("not launched by torchrun (no WORLD_SIZE / MASTER_ADDR)", allow_module_level=True)
torch = pytest.importorskip("torch", reason="torch is not installed")

import torch.distributed as dist  # noqa: E402

import symmem  # noqa: E402
import symmem.torch.symm_mem as symm_mem  # noqa: E402  (was: torch.distributed._symmetric_memory)

DEVICE = "cpu"


@pytest.fixture(scope="module", autouse=True)
def world():
    if not dist.is_initialized():
        dist.init_process_group("gloo")
    yield
    dist.barrier()


def rank():
    return dist.get_rank()


def world_size():
    return dist.get_world_size()


def group_name():
    return dist.group.WORLD.group_name


# ---- allocation and rendezvous -------------------------------------------------------------------
def test_empty_shapes_and_defaults():
    a = symm_mem.empty(4, 8, device=DEVICE)
    b = symm_mem.empty((4, 8), dtype=torch.bfloat16, device=DEVICE)
    c = symm_mem.empty([0], dtype=torch.int64, device=DEVICE)
    assert a.shape == (4, 8) and a.dtype == torch.get_default_dtype()
    assert b.shape == (4, 8) and b.dtype == torch.bfloat16
    assert c.numel() == 0
    assert symm_mem.is_symm_mem_tensor(a) and symm_mem.is_symm_mem_tensor(b[1:])
    assert not symm_mem.is_symm_mem_tensor(torch.empty(4))
    with pytest.raises(ValueError, match="size"):
        symm_mem.empty(-1, device=DEVICE)


def test_rendezvous_handle():
    t = symm_mem.empty(64, device=DEVICE)
    hdl = symm_mem.rendezvous(t, group=group_name())
    assert hdl.rank == rank() and hdl.world_size == world_size()
    assert symm_mem.rendezvous(t, dist.group.WORLD) is hdl  # cached, by name or group
    assert len(hdl.buffer_ptrs) == world_size() and len(hdl.signal_pad_ptrs) == world_size()
    assert hdl.buffer_ptrs[rank()] == t.data_ptr()
    assert len(set(hdl.buffer_ptrs)) == world_size()
    assert hdl.buffer_size >= 64 * 4 and hdl.signal_pad_size == symm_mem.get_signal_pad_size()
    assert hdl.offset == 0 and hdl.multicast_ptr == 0
    table = ctypes.string_at(hdl.buffer_ptrs_dev, 8 * world_size())  # CPU: a host array
    assert torch.frombuffer(bytearray(table), dtype=torch.int64).tolist() == hdl.buffer_ptrs
    # A view at an offset rendezvouses to the same allocation, with its offset.
    v = symm_mem.rendezvous(t[16:], group_name())
    assert v.offset == 16 * 4 and v.buffer_ptrs == hdl.buffer_ptrs


def test_rendezvous_bad_input():
    with pytest.raises(ValueError, match="'tensor' is not in symmetric memory"):
        symm_mem.rendezvous(torch.empty(8), group_name())
    t = symm_mem.empty(8, device=DEVICE)
    with pytest.raises(ValueError, match="'group'"):
        symm_mem.rendezvous(t, "no such group")


# ---- get_buffer and get_signal_pad ----------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.uint8])
def test_get_buffer(dtype):
    t = symm_mem.empty(256, dtype=dtype, device=DEVICE)
    hdl = symm_mem.rendezvous(t, group_name())
    t.copy_(torch.arange(256) % 100 + rank())
    hdl.barrier()
    for p in range(world_size()):
        buf = hdl.get_buffer(p, (256,), dtype)
        assert torch.equal(buf, (torch.arange(256) % 100 + p).to(dtype))
        # sizes, another dtype, and an element offset of that dtype
        part = hdl.get_buffer(p, (4, 8), dtype, storage_offset=32)
        assert torch.equal(part.reshape(-1), buf[32:64])
        raw = hdl.get_buffer(p, (16,), torch.uint8, storage_offset=t.element_size() * 8)
        assert torch.equal(raw, buf[8:8 + 16 // t.element_size()].view(torch.uint8))
    if world_size() > 1:  # stores reach the peer
        nxt = (rank() + 1) % world_size()
        hdl.barrier()
        hdl.get_buffer(nxt, (1,), dtype)[0] = 7
        hdl.barrier()
        assert t[0].item() == 7
    with pytest.raises(ValueError, match="'sizes'"):
        hdl.get_buffer(0, (hdl.buffer_size + 1,), torch.uint8)
    with pytest.raises(ValueError, match="'rank'"):
        hdl.get_buffer(world_size(), (1,), dtype)
    hdl.barrier()


def test_get_signal_pad():
    t = symm_mem.empty(16, device=DEVICE)
    hdl = symm_mem.rendezvous(t, group_name())
    whole = hdl.get_signal_pad(rank())
    assert whole.dtype == torch.uint32 and whole.numel() == hdl.signal_pad_size // 4
    assert torch.count_nonzero(whole.view(torch.int32)).item() == 0  # zeroed at allocation
    dist.barrier()  # before any rank signals (the pad barrier would, too)
    nxt = (rank() + 1) % world_size()
    prev = (rank() - 1) % world_size()
    # A window of the peer's pad: 4 int64 at element 100 (away from the barrier's slots).
    hdl.get_signal_pad(nxt, (4,), torch.int64, storage_offset=100).copy_(
        torch.arange(4) + 10 * rank())
    hdl.barrier(channel=1)
    mine = hdl.get_signal_pad(rank(), [4], dtype=torch.int64, storage_offset=100)
    assert mine.tolist() == [10 * prev + i for i in range(4)]
    rest = hdl.get_signal_pad(rank(), dtype=torch.int64, storage_offset=100)
    assert rest.numel() == hdl.signal_pad_size // 8 - 100
    mine.zero_()
    hdl.barrier(channel=1)


# ---- barrier, put_signal, wait_signal ------------------------------------------------------------
def test_barrier_orders_stores():
    t = symm_mem.empty(world_size(), dtype=torch.int32, device=DEVICE)
    hdl = symm_mem.rendezvous(t, group_name())
    for it in range(5):
        for p in range(world_size()):
            hdl.get_buffer(p, (world_size(),), torch.int32)[rank()] = it * 100 + rank()
        hdl.barrier(channel=it % 2)
        assert t.tolist() == [it * 100 + p for p in range(world_size())]
        hdl.barrier(channel=it % 2)


def test_put_signal_wait_signal_ring():
    t = symm_mem.empty(32, dtype=torch.float32, device=DEVICE)
    hdl = symm_mem.rendezvous(t, group_name())
    nxt, prev = (rank() + 1) % world_size(), (rank() - 1) % world_size()
    for channel in (0, 3):
        hdl.get_buffer(nxt, (32,), torch.float32).fill_(rank() + channel)
        hdl.put_signal(nxt, channel=channel)
        hdl.wait_signal(prev, channel=channel, timeout_ms=30000)
        assert torch.all(t == prev + channel)
        hdl.barrier()


def test_module_put_signal_get():
    t = symm_mem.empty(16, dtype=torch.int64, device=DEVICE)
    hdl = symm_mem.rendezvous(t, group_name())
    nxt, prev = (rank() + 1) % world_size(), (rank() - 1) % world_size()
    t.fill_(-1)
    hdl.barrier()
    symm_mem.put_signal(torch.full((16,), rank(), dtype=torch.int64), hdl, nxt)
    symm_mem.wait_signal(hdl, prev)
    assert torch.all(t == prev)
    hdl.barrier()
    got = torch.empty(4, dtype=torch.int64)
    symm_mem.get(got, hdl, nxt, offset=2)
    assert torch.all(got == rank())  # nxt's t holds this rank's value
    hdl.barrier()


def test_wait_signal_times_out():
    t = symm_mem.empty(4, device=DEVICE)
    hdl = symm_mem.rendezvous(t, group_name())
    with pytest.raises(TimeoutError):
        hdl.wait_signal((rank() + 1) % world_size(), channel=5, timeout_ms=200)
    hdl.barrier()


# ---- all-reduce ----------------------------------------------------------------------------------
REDUCE_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32,
                 torch.int64]


def fill(t, salt=0):
    # Small integers: exact in every dtype, so results compare exactly.
    t.copy_((torch.arange(t.numel()).reshape(t.shape) * (rank() + 1) + salt) % 17)


def expected_sum(shape, dtype, salt=0):
    n = torch.arange(torch.Size(shape).numel()).reshape(shape)
    return sum((n * (r + 1) + salt) % 17 for r in range(world_size())).to(dtype)


@pytest.mark.parametrize("dtype", REDUCE_DTYPES)
@pytest.mark.parametrize("shift", [0, 3])
def test_one_shot_all_reduce(dtype, shift):
    t = symm_mem.empty(1024 + 8, dtype=dtype, device=DEVICE).fill_(0)
    symm_mem.rendezvous(t, group_name())
    x = t[shift:shift + 1000]
    fill(x)
    out = torch.ops.symm_mem.one_shot_all_reduce(x, "sum", group_name())
    assert torch.equal(out, expected_sum((1000,), dtype))
    out2 = torch.empty(1000, dtype=dtype)
    r = torch.ops.symm_mem.one_shot_all_reduce_out(x, "sum", group_name(), out2)
    assert r.data_ptr() == out2.data_ptr() and torch.equal(out2, out)
    assert torch.equal(x, expected_sum((1000,), dtype) * 0 + x)  # input untouched
    assert torch.count_nonzero(t[:shift]).item() == 0  # nothing written outside


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_one_shot_all_reduce_copy(dtype):
    buf = symm_mem.empty(4096, dtype=dtype, device=DEVICE)
    symm_mem.rendezvous(buf, group_name())
    local = torch.empty(16, 24, dtype=dtype)
    fill(local, salt=1)
    out = torch.ops.symm_mem.one_shot_all_reduce_copy(buf, local, "sum", group_name())
    assert out.shape == local.shape and torch.equal(out, expected_sum((16, 24), dtype, 1))
    out2 = torch.empty_like(local)
    torch.ops.symm_mem.one_shot_all_reduce_copy_out(buf, local, "sum", group_name(), out2)
    assert torch.equal(out2, out)


@pytest.mark.parametrize("dtype", REDUCE_DTYPES)
@pytest.mark.parametrize("numel,shift", [(0, 0), (1, 0), (1000, 0), (4097, 5)])
def test_two_shot_all_reduce(dtype, numel, shift):
    t = symm_mem.empty(4200, dtype=dtype, device=DEVICE).fill_(0)
    symm_mem.rendezvous(t, group_name())
    x = t[shift:shift + numel]
    fill(x)
    r = torch.ops.symm_mem.two_shot_all_reduce_(x, "sum", group_name())
    assert r.data_ptr() == x.data_ptr()
    assert torch.equal(x, expected_sum((numel,), dtype))
    assert torch.count_nonzero(t[:shift]).item() == 0
    assert torch.count_nonzero(t[shift + numel:]).item() == 0
    fill(x, salt=2)
    out = torch.empty(numel, dtype=dtype)
    torch.ops.symm_mem.two_shot_all_reduce_out(x, "sum", group_name(), out)
    assert torch.equal(out, expected_sum((numel,), dtype, 2))


def test_all_reduce_other_ops():
    t = symm_mem.empty(64, dtype=torch.float32, device=DEVICE)
    symm_mem.rendezvous(t, group_name())
    t.fill_(rank() + 1)
    out = torch.ops.symm_mem.one_shot_all_reduce(t, "max", group_name())
    assert torch.all(out == world_size())
    torch.ops.symm_mem.two_shot_all_reduce_(t, "avg", group_name())
    assert torch.allclose(t, torch.full((64,), (world_size() + 1) / 2))


def test_all_reduce_plain_tensor_input():
    # symmem takes ordinary tensors too (copied through the group's workspace).
    x = torch.full((100,), float(rank() + 1))
    out = torch.ops.symm_mem.one_shot_all_reduce(x, "sum", group_name())
    assert torch.all(out == world_size() * (world_size() + 1) / 2)


def test_all_reduce_bad_input():
    t = symm_mem.empty(64, device=DEVICE)
    with pytest.raises(ValueError, match="'out'"):
        torch.ops.symm_mem.one_shot_all_reduce_out(t, "sum", group_name(), torch.empty(63))
    with pytest.raises(ValueError, match="op"):
        torch.ops.symm_mem.two_shot_all_reduce_(t, "prod", group_name())
    with pytest.raises(ValueError, match="group"):
        torch.ops.symm_mem.two_shot_all_reduce_(t, "sum", "no such group")
    symm_mem.rendezvous(t, group_name()).barrier()


def test_bad_input_on_one_rank_is_named_on_every_rank():
    # NOTE [refused ops]: this module checks some arguments itself, before the op. When such a
    # check fails on rank 1 only, rank 1 raises naming the argument and the other ranks fail the
    # same op naming rank 1, instead of waiting for it until their timeout.
    w, bad = world_size(), rank() == 1
    n = 12 * w
    t = symm_mem.empty(n, device=DEVICE)
    t.fill_(1.0)
    inp = symm_mem.empty(16, dtype=torch.float32, device=DEVICE)
    out = symm_mem.empty(16, dtype=torch.float32, device=DEVICE)
    so = torch.zeros((2, w), dtype=torch.int64)
    cases = [
        ("'out'", lambda: torch.ops.symm_mem.one_shot_all_reduce_out(
            t, "sum", group_name(), torch.empty(n - 1 if bad else n))),
        ("'output'", lambda: torch.ops.symm_mem.reduce_scatter_out(
            t, group_name(), False, torch.empty(12 + 1 if bad else 12))),
        ("'in_splits'", lambda: torch.ops.symm_mem.all_to_all_vdev_2d(
            inp, out, torch.full((w,), -1 if bad else 0, dtype=torch.int64), so, group_name())),
    ]
    for arg, call in cases:
        start = time.monotonic()
        with pytest.raises(symmem.InvalidArgument) as e:
            call()
        assert time.monotonic() - start < 10, arg
        msg = str(e.value)
        assert (arg in msg) if bad else ("rank 1" in msg), msg
    x = torch.full((8,), 1.0)
    assert torch.all(torch.ops.symm_mem.one_shot_all_reduce(x, "sum", group_name()) == w)
    symm_mem.rendezvous(t, group_name()).barrier()


# ---- reduce_scatter_out --------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
@pytest.mark.parametrize("split_last_dim", [False, True])
def test_reduce_scatter_out(dtype, split_last_dim):
    w = world_size()
    t = symm_mem.empty(8 * 12 * w + 16, dtype=dtype, device=DEVICE).fill_(0)
    symm_mem.rendezvous(t, group_name())
    shift = 4
    x = t[shift:shift + 8 * 12 * w]
    x = x.view(8, 12 * w) if split_last_dim else x
    fill(x)
    total = expected_sum(tuple(x.shape), dtype)
    if split_last_dim:
        out = torch.empty(8, 12, dtype=dtype)
        want = total[:, rank() * 12:(rank() + 1) * 12]
    else:
        out = torch.empty(8 * 12, dtype=dtype)
        want = total[rank() * 96:(rank() + 1) * 96]
    r = torch.ops.symm_mem.reduce_scatter_out(x, group_name(), split_last_dim, out)
    assert r.data_ptr() == out.data_ptr()
    assert torch.equal(out, want)
    assert torch.count_nonzero(t[:shift]).item() == 0  # head and tail not written
    assert torch.count_nonzero(t[shift + 8 * 12 * w:]).item() == 0


def test_reduce_scatter_corner_cases():
    w = world_size()
    t = symm_mem.empty(4096, dtype=torch.bfloat16, device=DEVICE).fill_(0)
    symm_mem.rendezvous(t, group_name())
    torch.ops.symm_mem.reduce_scatter_out(t[:0], group_name(), False,
                                          torch.empty(0, dtype=torch.bfloat16))
    if w > 1:
        with pytest.raises(ValueError, match="divisible"):
            torch.ops.symm_mem.reduce_scatter_out(t[:w * 16 + 1], group_name(), False,
                                                  torch.empty(16, dtype=torch.bfloat16))
        with pytest.raises(ValueError, match="divisible"):
            torch.ops.symm_mem.reduce_scatter_out(t[:2 * (w * 4 + 1)].view(2, -1), group_name(),
                                                  True, torch.empty(2, 4, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="'output'"):
        torch.ops.symm_mem.reduce_scatter_out(t[:w * 8], group_name(), False,
                                              torch.empty(9, dtype=torch.bfloat16))
    symm_mem.rendezvous(t, group_name()).barrier()


# ---- all_to_all_vdev -----------------------------------------------------------------------------
@pytest.mark.parametrize("row", [1, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int8, torch.bool, torch.complex64])
def test_all_to_all_vdev(row, dtype):
    w = world_size()
    gen = torch.Generator().manual_seed(1234)  # the same split matrix on every rank
    splits = torch.randint(0, 9, (w, w), generator=gen)  # splits[src][dst], rows
    cap = int(splits.sum(0).max()) + 2
    shape = (lambda n: (n, row) if row > 1 else (n,))
    inp = symm_mem.empty(*shape(int(splits.sum(1).max()) + 1), dtype=dtype, device=DEVICE)
    out = symm_mem.empty(*shape(cap), dtype=dtype, device=DEVICE)
    in_splits = symm_mem.empty(w, dtype=torch.int64, device=DEVICE)
    out_so = symm_mem.empty((2, w), dtype=torch.int64, device=DEVICE)
    for t in (inp, out, in_splits, out_so):
        symm_mem.rendezvous(t, group_name())

    def value(src, i):  # element i of rank src's input (flat)
        return (src * 37 + i) % 101

    def cast(v):
        if dtype == torch.bool:
            return v % 2 == 1
        return v.to(dtype)

    inp.copy_(cast(torch.tensor([value(rank(), i) for i in range(inp.numel())])).view(inp.shape))
    in_splits.copy_(splits[rank()])
    torch.ops.symm_mem.all_to_all_vdev(inp, out, in_splits, out_so, group_name())
    counts = splits[:, rank()]
    assert out_so[0].tolist() == counts.tolist()
    assert out_so[1].tolist() == ([0] + torch.cumsum(counts, 0)[:-1].tolist())
    for src in range(w):
        first = int(splits[src, :rank()].sum())  # the rows src sent before this rank's
        want = [value(src, (first + k) * row + j) for k in range(int(counts[src]))
                for j in range(row)]
        got = out.reshape(-1)[int(out_so[1, src]) * row:][:len(want)]
        assert torch.equal(got, cast(torch.tensor(want, dtype=torch.int64)))


# ---- all_to_all_vdev_2d and _2d_offset (MoE dispatch and combine) --------------------------------
def _layout_2d(got, align):
    """torch's expert-major offsets: got[s][e] rows from rank s for expert e."""
    w, ne = got.shape
    offsets, start = {}, 0
    for e in range(ne):
        pos = start
        for s in range(w):
            offsets[e, s] = pos
            pos += int(got[s, e])
        start += max(-(-(pos - start) // align) * align, align)
    return offsets


@pytest.mark.parametrize("ne,row,align", [(1, 1, None), (3, 2, None), (2, 3, 4)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.uint8])
def test_all_to_all_vdev_2d_round_trip(ne, row, align, dtype):
    w, r = world_size(), rank()
    gen = torch.Generator().manual_seed(99 + ne)
    splits = torch.randint(0, 5, (w, w * ne), generator=gen)  # [src][d * ne + e], rows
    splits[0, :] = 0  # rank 0 sends nothing
    if ne > 1:
        splits[:, ::ne] = 0  # expert 0 of every rank gets nothing: an empty block
    shape = (lambda n: (n, row) if row > 1 else (n,))
    n_in = int(splits.sum(1).max()) + 1
    n_out = int(splits.sum(0).max()) * 1 + ne * (align or 1) * 2 + w * ne * 8
    inp = symm_mem.empty(*shape(n_in), dtype=dtype, device=DEVICE)
    out = symm_mem.empty(*shape(n_out), dtype=dtype, device=DEVICE)
    back = symm_mem.empty(*shape(n_in), dtype=dtype, device=DEVICE)
    in_splits = symm_mem.empty(w * ne, dtype=torch.int64, device=DEVICE)
    out_so = symm_mem.empty((2, w * ne), dtype=torch.int64, device=DEVICE)
    back_so = symm_mem.empty((2, w * ne), dtype=torch.int64, device=DEVICE)
    vals = (torch.arange(inp.numel()) * 7 + r * 1000) % 251
    inp.copy_(vals.to(dtype).view(inp.shape))
    in_splits.copy_(splits[r])
    out.fill_(0)
    torch.ops.symm_mem.all_to_all_vdev_2d(inp, out, in_splits, out_so, group_name(), align)
    got = splits[:, r * ne:(r + 1) * ne]  # [s][e]
    want_off = _layout_2d(got, align or 1)
    for e in range(ne):
        for s in range(w):
            k = e * w + s
            n = int(got[s, e])
            assert int(out_so[0, k]) == n, (e, s)
            assert int(out_so[1, k]) == want_off[e, s], (e, s)
            first = int(splits[s, :r * ne + e].sum())  # rows s sent before this expert's
            src_vals = (torch.arange((first) * row, (first + n) * row) * 7 + s * 1000) % 251
            o = want_off[e, s] * row
            assert torch.equal(out.reshape(-1)[o:o + n * row], src_vals.to(dtype)), (e, s)
    # The way back: the experts' blocks return to their ranks, packed rank-major, which is
    # exactly what each rank sent.
    back.fill_(0)
    torch.ops.symm_mem.all_to_all_vdev_2d_offset(out, back, out_so, back_so, group_name())
    sent = int(splits[r].sum())
    assert torch.equal(back.reshape(-1)[:sent * row], inp.reshape(-1)[:sent * row])
    assert back_so[0].tolist() == splits[r].tolist()
    assert back_so[1].tolist() == (torch.cumsum(splits[r], 0) - splits[r]).tolist()


def test_all_to_all_vdev_2d_bad_input():
    w = world_size()
    inp = symm_mem.empty(16, dtype=torch.float32, device=DEVICE)
    out = symm_mem.empty(16, dtype=torch.float32, device=DEVICE)
    so = torch.zeros((2, w), dtype=torch.int64)
    with pytest.raises(symmem.InvalidArgument, match="in_splits.*multiple of the world size"):
        torch.ops.symm_mem.all_to_all_vdev_2d(inp, out, torch.zeros(w + 1, dtype=torch.int64),
                                              so, group_name())
    with pytest.raises(symmem.InvalidArgument, match="major_align.*positive"):
        torch.ops.symm_mem.all_to_all_vdev_2d(inp, out, torch.zeros(w, dtype=torch.int64), so,
                                              group_name(), 0)
    with pytest.raises(symmem.InvalidArgument, match="out_splits_offsets.*int64 of shape"):
        torch.ops.symm_mem.all_to_all_vdev_2d(inp, out, torch.zeros(w, dtype=torch.int64),
                                              torch.zeros((2, w), dtype=torch.int32), group_name())
    # A layout larger than `out` fails on the rank that receives it, before any data moves;
    # the others then fail in the data exchange (agreement), so every rank raises.
    with pytest.raises(symmem.InvalidArgument):
        torch.ops.symm_mem.all_to_all_vdev_2d(inp, out[:1],
                                              torch.full((w,), 2, dtype=torch.int64), so,
                                              group_name())
    symm_mem.rendezvous(inp, group_name()).barrier()


# ---- one-sided and byte-moving ops ---------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.uint8, torch.int16, torch.bool, torch.complex64])
def test_nvshmem_style_ops(dtype):
    w = world_size()
    t = symm_mem.empty(8 * w, dtype=dtype, device=DEVICE)
    symm_mem.rendezvous(t, group_name())
    src = (torch.arange(8 * w) + rank()) % 2 == 1 if dtype == torch.bool else \
        (torch.arange(8 * w) + 10 * rank()).to(dtype)
    t.copy_(src)
    torch.ops.symm_mem.nvshmem_broadcast(t, w - 1, group_name())
    root = (torch.arange(8 * w) + w - 1) % 2 == 1 if dtype == torch.bool else \
        (torch.arange(8 * w) + 10 * (w - 1)).to(dtype)
    assert torch.equal(t, root)
    out = symm_mem.empty(8 * w, dtype=dtype, device=DEVICE)
    t.copy_(src)
    torch.ops.symm_mem.nvshmem_all_to_all(t, out, group_name())
    for p in range(w):
        peer_src = (torch.arange(8 * w) + p) % 2 == 1 if dtype == torch.bool else \
            (torch.arange(8 * w) + 10 * p).to(dtype)
        assert torch.equal(out[p * 8:(p + 1) * 8], peer_src[rank() * 8:(rank() + 1) * 8])
    hdl = symm_mem.rendezvous(t, group_name())
    hdl.barrier()
    if rank() == 0:  # one reader: a get that every rank ran at once would race with the peer's
        torch.ops.symm_mem.nvshmem_get(t, w - 1)
        assert torch.equal(t, root)  # rank w-1's values
    hdl.barrier()
    if rank() == 0:
        t.copy_(src)
        torch.ops.symm_mem.nvshmem_put(t, w - 1)
    hdl.barrier()
    if rank() == w - 1:
        first = (torch.arange(8 * w)) % 2 == 1 if dtype == torch.bool else \
            torch.arange(8 * w).to(dtype)
        assert torch.equal(t, first)  # rank 0's values
    remote = torch.ops.symm_mem.get_remote_tensors(t, group_name())
    assert len(remote) == w and remote[rank()].data_ptr() == t.data_ptr()
    hdl.barrier()


# ---- subgroups ------------------------------------------------------------------------------------
def test_subgroups():
    w = world_size()
    evens = list(range(0, w, 2))
    odds = list(range(1, w, 2)) or [0]
    g_even = dist.new_group(evens)
    g_odd = dist.new_group(odds) if w > 1 else g_even
    mine = evens if rank() % 2 == 0 else odds
    sub = g_even if rank() % 2 == 0 else g_odd
    t = symm_mem.empty(64, dtype=torch.float32, device=DEVICE)  # over the whole job
    hdl = symm_mem.rendezvous(t, sub)
    assert hdl.world_size == len(mine) and hdl.rank == mine.index(rank())
    t.fill_(rank())
    hdl.barrier()
    for i, r in enumerate(mine):
        assert torch.all(hdl.get_buffer(i, (64,), torch.float32) == r)
    hdl.barrier()
    # Ops over the subgroup, on a tensor of the job's memory (through the workspace).
    out = torch.ops.symm_mem.one_shot_all_reduce(t, "sum", sub.group_name)
    assert torch.all(out == sum(mine))
    # And on a tensor allocated over the subgroup (in place).
    s = symm_mem._allocate(symm_mem._group(sub, "test"), (64,), torch.float32, DEVICE)
    s.fill_(rank() + 1)
    torch.ops.symm_mem.two_shot_all_reduce_(s, "sum", sub.group_name)
    assert torch.all(s == sum(r + 1 for r in mine))
    dist.barrier()


def test_mempool_needs_a_gpu():
    # On a GPU the pool is tested by test_gpu_mempool.py; here the errors name the device.
    with pytest.raises(symmem.InvalidArgument, match="'cpu' is not a CUDA device"):
        symm_mem.get_mem_pool("cpu")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the pool is tested by test_gpu_mempool.py")
    with pytest.raises(symmem.BackendUnavailable, match="device 'cuda'"):
        symm_mem.get_mem_pool("cuda")
    with pytest.raises(symmem.BackendUnavailable, match="device 'cuda:1'"):
        symmem.torch.mempool(None, "cuda:1")
