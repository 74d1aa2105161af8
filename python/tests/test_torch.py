"""symmem.torch in one process: DLPack with torch tensors, the custom ops (eager, fake and under
torch.compile) and a group built from a torch.distributed process group. Skipped without torch."""

import os

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
import numpy as np  # noqa: E402

import symmem  # noqa: E402
import symmem.torch as st  # noqa: E402


@pytest.fixture(scope="module")
def g():
    return symmem.Group.create(symmem.HashStore(), 0, 1)


def test_from_dlpack_zero_copy(g):
    b = symmem.empty((64,), dtype="float32", group=g)
    t = torch.from_dlpack(b)
    assert t.data_ptr() == b.data_ptr() and t.dtype == torch.float32 and t.shape == (64,)
    t.fill_(3)
    assert (np.from_dlpack(b) == 3).all()
    bf = symmem.empty((8,), dtype=torch.bfloat16, group=g)
    assert torch.from_dlpack(bf).dtype == torch.bfloat16


def test_torch_tensor_into_ops(g):
    x = torch.arange(10, dtype=torch.float32)
    symmem.all_reduce(x, group=g)
    assert torch.equal(x, torch.arange(10, dtype=torch.float32))
    t = torch.from_dlpack(symmem.empty((16,), dtype="int64", group=g))
    t.copy_(torch.arange(16))
    symmem.all_reduce(t)  # group found from the symmetric memory under the tensor
    assert torch.equal(t, torch.arange(16))


def test_torch_tensors_that_export_differently_keep_the_protocol(g):
    # NOTE [torch fast path] (python/src/module.cpp): a plain tensor is read through torch's C
    # export; one with autograd, a conjugate or a negative bit, or a subclass, goes through
    # __dlpack__ as before, which refuses what it cannot export as is; the negative bit, which
    # torch's __dlpack__ would drop (values of the opposite sign), is refused by symmem.
    x = torch.arange(6, dtype=torch.float32)
    symmem.all_reduce(x[2:], group=g)  # a view at an offset: the data pointer moves with it
    assert torch.equal(x, torch.arange(6, dtype=torch.float32))
    with pytest.raises(Exception, match="require gradient|requires_grad|detach"):
        symmem.all_reduce(torch.ones(4, requires_grad=True), group=g)
    c = torch.ones(4, dtype=torch.complex64).conj()
    with pytest.raises(Exception, match="conjugate"):
        symmem.all_gather(c, torch.empty(4, dtype=torch.complex64), group=g)
    neg = torch._neg_view(torch.ones(4))  # a view with the negative bit (torch's own helper)
    assert neg.is_neg()
    with pytest.raises(symmem.InvalidArgument, match="'send'.*negative bit.*resolve_neg"):
        symmem.all_gather(neg, torch.empty(4), group=g)
    out = torch.zeros(4)
    symmem.all_gather(neg.resolve_neg(), out, group=g)
    assert torch.equal(out, -torch.ones(4))

    class Sub(torch.Tensor):
        pass

    s = torch.arange(4, dtype=torch.float32).as_subclass(Sub)
    out = torch.zeros(4)
    symmem.all_gather(s, out, group=g)
    assert torch.equal(out, torch.arange(4, dtype=torch.float32))


def test_custom_ops_registered_with_fakes(g):
    for name in ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "all_to_all_v",
                 "broadcast", "put", "get"):
        assert hasattr(torch.ops.symmem, name)
    name = st.register_group(g)
    x = torch.ones(8)
    torch.library.opcheck(torch.ops.symmem.all_reduce.default, (x, "sum", "auto", name),
                          test_utils=("test_schema", "test_faketensor"))


def test_torch_compile_no_graph_break(g):
    name = st.register_group(g)

    def f(x):
        y = x * 2
        torch.ops.symmem.all_reduce(y, "sum", "auto", name)
        return y + 1

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    x = torch.arange(8, dtype=torch.float32)
    assert torch.equal(compiled(x), x * 2 + 1)
    explain = torch._dynamo.explain(f)(x)
    assert explain.graph_break_count == 0


def test_helpers(g):
    t = st.empty((4,), dtype=torch.float32, device="cpu", group=g)
    t.fill_(2)
    assert st.all_reduce(t, group=g) is t and torch.equal(t, torch.full((4,), 2.0))
    recv = torch.zeros(4)
    st.all_gather(t, recv, group=g)
    assert torch.equal(recv, t)


def test_group_from_process_group(tmp_path):
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    store = dist.FileStore(str(tmp_path / "c10d"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        sg = st.group_from_process_group()
        assert sg.rank == 0 and sg.world_size == 1
        assert st.group_from_process_group() is sg
        t = st.empty((8,), dtype=torch.float32, device="cpu", group=sg)
        t.fill_(1)
        st.all_reduce(t, group=sg)
        assert torch.equal(t, torch.ones(8))
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
def test_cuda_tensor_dlpack(g):
    torch.zeros(1, device="cuda:0")  # a current CUDA context (see test_torch_mp.cuda_group)
    try:
        b = symmem.empty((32,), dtype="float32", device="cuda:0", group=g)
    except (symmem.BackendUnavailable, symmem.Unsupported) as e:
        pytest.skip(f"no GPU backend here: {e}")
    t = torch.from_dlpack(b)
    assert t.is_cuda and t.data_ptr() == b.data_ptr()
    t.fill_(4)
    symmem.all_reduce(t)
    torch.cuda.synchronize()
    assert torch.equal(t, torch.full((32,), 4.0, device="cuda"))


def test_custom_ops_and_helpers_come_from_the_op_table(g):
    import inspect

    from torch._subclasses.fake_tensor import FakeTensorMode

    rows = [r for r in symmem.op_table() if r["schema"]]
    assert {r["name"] for r in rows} >= {"all_reduce", "reduce_scatter", "put", "get"}
    for r in rows:
        assert hasattr(torch.ops.symmem, r["name"]) and r["name"] in st.__all__
    assert list(inspect.signature(st.reduce_scatter).parameters) == ["send", "recv", "op", "group"]
    assert inspect.signature(st.all_reduce).parameters["algo"].default == "auto"
    name = st.register_group(g)
    send, recv = torch.ones(4), torch.zeros(4)
    torch.library.opcheck(torch.ops.symmem.reduce_scatter.default, (send, recv, "sum", name),
                          test_utils=("test_schema", "test_faketensor"))
    # The fake kernel checks the row's shape rule at trace time (world_size 1: send == recv).
    with FakeTensorMode():
        with pytest.raises(symmem.InvalidArgument, match="does not fit"):
            torch.ops.symmem.all_gather(torch.empty(3), torch.empty(2), name)
    assert torch.equal(st.all_gather(send, recv, group=g), send)
    out = st.all_to_all_v(send, torch.tensor([4]), recv, torch.zeros(1, dtype=torch.int64),
                          torch.zeros(1, dtype=torch.int64), group=g)
    assert len(out) == 3 and out[1].item() == 4  # the tensors it writes, in schema order


@pytest.mark.parametrize("how", ["object", "name", "default"])
def test_helpers_trace_fullgraph_with_a_group_object_name_or_none(g, how):
    name = st.register_group(g)
    previous = symmem.default_group()
    symmem.set_default_group(g)
    grp = {"object": g, "name": name, "default": None}[how]

    def f(x):
        y = x * 2
        st.all_reduce(y, group=grp)
        out = st.all_gather(y, torch.empty_like(y), group=grp)
        st.broadcast(out, root=0, group=grp)
        return out + 1

    try:
        compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
        x = torch.arange(8, dtype=torch.float32)
        assert torch.equal(compiled(x), x * 2 + 1)
    finally:
        symmem.set_default_group(previous)


def test_empty_defaults_to_torchs_default_device(g):
    t = st.empty((4,), group=g)
    assert t.device == torch.get_default_device() == torch.device("cpu")


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_barrier_traces_fullgraph_and_runs_each_call(g, backend, monkeypatch):
    calls = []
    real = symmem.barrier

    def counting(**kw):
        calls.append(kw["group"])
        return real(**kw)

    monkeypatch.setattr(symmem, "barrier", counting)
    previous = symmem.default_group()
    symmem.set_default_group(g)  # for st.barrier() with no group

    def f(x):
        y = x + 1
        st.barrier(group=g)  # no tensor: kept and ordered as an effectful op
        st.all_reduce(y, group=g)
        st.barrier()
        return y * 2

    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True, backend=backend)
    x = torch.arange(4, dtype=torch.float32)
    for n in (1, 2):
        assert torch.equal(compiled(x), (x + 1) * 2)
        assert len(calls) == 2 * n  # neither barrier was dropped by a graph pass
    symmem.set_default_group(previous)
    assert calls[0] is g and calls[1] is None
