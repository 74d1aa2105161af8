"""symmem.torch across ranks (under symmem-run): CPU tensors everywhere torch is installed, CUDA
tensors on the cuda backend and a torch.compile'd function calling the custom op where there are
GPUs."""

import os

import pytest

if "SYMMEM_WORLD_SIZE" not in os.environ and "WORLD_SIZE" not in os.environ:
    pytest.skip("not launched by symmem-run (no SYMMEM_WORLD_SIZE)", allow_module_level=True)
torch = pytest.importorskip("torch", reason="torch is not installed")

import symmem  # noqa: E402
import symmem.torch as st  # noqa: E402


@pytest.fixture(scope="module")
def g():
    return symmem.Group.from_env()


def test_cpu_tensors(g):
    n = g.world_size
    t = st.empty((1024,), dtype=torch.float32, device="cpu", group=g)
    t.fill_(g.rank + 1)
    st.all_reduce(t)
    assert torch.equal(t, torch.full((1024,), n * (n + 1) / 2))


def cuda_group(g):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    count = torch.cuda.device_count()
    if count < g.local_world_size and os.environ.get("SYMMEM_ALLOW_SHARED_GPU", "0") in ("0", ""):
        pytest.skip(f"needs {g.local_world_size} CUDA GPUs (or SYMMEM_ALLOW_SHARED_GPU=1)")
    torch.cuda.set_device(g.local_rank % count)
    # Make torch's context current on this thread before symmem allocates: the cuda backend
    # currently fails (CUDA_ERROR_CONTEXT_IS_DESTROYED) when no context is current.
    torch.zeros(1, device="cuda")
    return g


def test_cuda_acceptance(g):
    cuda_group(g)
    n = g.world_size
    x = torch.from_dlpack(symmem.empty((4096,), dtype="bfloat16", device="cuda", group=g))
    assert x.device == torch.device("cuda", torch.cuda.current_device())
    x.fill_(g.rank + 1)
    symmem.all_reduce(x, op="sum")  # on the current stream
    torch.cuda.synchronize()
    assert torch.equal(x, torch.full_like(x, n * (n + 1) / 2))


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_fp8_through_dlpack(g, dtype, device):
    # torch's fp8 dtypes map to symmem's through DLPack, both ways, and reduce like torch rounds:
    # the f32 sum of the inputs (exact here), converted once with torch's own conversion.
    if device == "cuda":
        cuda_group(g)
    tdt = getattr(torch, dtype)
    n, r = g.world_size, g.rank
    t = st.empty((777,), dtype=tdt, device=device, group=g)
    assert t.dtype == tdt
    base = torch.arange(777, dtype=torch.float32, device=device) % 5 * 0.25
    t.copy_((base + r * 0.5).to(tdt))
    symmem.all_reduce(t, op="sum")
    if device == "cuda":
        torch.cuda.synchronize()
    want = sum((base + k * 0.5).to(tdt).float() for k in range(n)).to(tdt)
    assert torch.equal(t.view(torch.uint8), want.view(torch.uint8))
    back = symmem.empty((3,), dtype=dtype, device=device, group=g)
    assert torch.from_dlpack(back).dtype == tdt


def test_cuda_compiled(g):
    cuda_group(g)
    n = g.world_size
    name = st.register_group(g)
    buf = st.empty((2048,), dtype=torch.float32, device="cuda", group=g)

    @torch.compile(fullgraph=True)
    def step(x, w):
        x.copy_(w * 2)
        torch.ops.symmem.all_reduce(x, "sum", "auto", name)
        return x + 1

    w = torch.full((2048,), float(g.rank), device="cuda")
    out = step(buf, w)
    torch.cuda.synchronize()
    assert torch.equal(out, torch.full_like(out, 2 * n * (n - 1) / 2 + 1))
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        buf.fill_(1)
        symmem.all_reduce(buf, stream=s)
    s.synchronize()
    assert torch.equal(buf, torch.full_like(buf, n))


def test_cuda_compiled_helper_with_group_object(g):
    cuda_group(g)
    n = g.world_size
    buf = st.empty((1024,), dtype=torch.bfloat16, device="cuda", group=g)

    @torch.compile(fullgraph=True)
    def step(x, w):
        x.copy_(w + 1)
        st.all_reduce(x, group=g)  # the Group object itself, resolved while tracing
        return x * 2

    out = step(buf, torch.full((1024,), float(g.rank), device="cuda", dtype=torch.bfloat16))
    torch.cuda.synchronize()
    assert torch.equal(out, torch.full_like(out, n * (n + 1)))


def test_cpu_compiled_helper_with_group_object(g):
    # The CPU twin of the CUDA case above, so CI traces it too. backend="eager" is dynamo alone
    # (no C++ compiler for inductor needed): the part that resolves the Group object is dynamo's.
    n = g.world_size
    buf = st.empty((256,), dtype=torch.float32, device="cpu", group=g)

    @torch.compile(fullgraph=True, backend="eager")
    def step(x, w):
        x.copy_(w + 1)
        st.all_reduce(x, group=g)
        st.barrier(group=g, device="cpu")
        return x * 2

    out = step(buf, torch.full((256,), float(g.rank)))
    assert torch.equal(out, torch.full_like(out, n * (n + 1)))
    out = step(buf, torch.full((256,), float(g.rank + 1)))  # the compiled code, run again
    assert torch.equal(out, torch.full_like(out, n * (n + 3)))
