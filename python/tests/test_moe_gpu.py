"""MoE dispatch and combine on CUDA tensors (symmem.moe_* and the symmem.torch ops) under
symmem-run, bitwise against the same calls on CPU tensors (the host implementation, itself
checked against a reference by test_moe.py). Skipped without torch or without a GPU."""

import os

import numpy as np
import pytest

if "SYMMEM_WORLD_SIZE" not in os.environ:
    pytest.skip("not launched by symmem-run (no SYMMEM_WORLD_SIZE)", allow_module_level=True)
torch = pytest.importorskip("torch", reason="torch is not installed")

import symmem  # noqa: E402
from gpu_group import gpu_group  # noqa: E402


@pytest.fixture(scope="module")
def g():
    return gpu_group(torch)


def routing(me, tokens, k, experts, seed, drop=0.0):
    rng = np.random.default_rng(seed * 1000 + me)
    idx = np.stack([rng.permutation(experts)[:k] for _ in range(tokens)]) if tokens else \
        np.zeros((0, k), np.int64)
    if drop:
        idx[rng.random(idx.shape) < drop] = -1
    return torch.from_numpy(idx.astype(np.int64))


def randn(shape, seed, dtype):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=gen).to(dtype)


@pytest.mark.parametrize("mode", ["normal", "low_latency"])
@pytest.mark.parametrize("idx_on", ["cuda", "cpu"])
def test_functions_match_the_host(g, mode, idx_on):
    me, w = g.rank, g.world_size
    local, k, h = 4, 3, 256
    t = 0 if me == 1 else 20 + me
    max_tokens = 20 + w if mode == "low_latency" else 0
    idx = routing(me, t, k, local * w, seed=3, drop=0.2)
    x = randn((t, h), 10 + me, torch.bfloat16)
    wts = randn((t, k), 20 + me, torch.float32)

    def run(dev, idx_dev):
        layout = symmem.moe_layout(idx.to(idx_dev), local * w, mode=mode, max_tokens=max_tokens,
                                   group=g, device=dev)
        recv = torch.full(layout.recv_shape(h), 7.0, dtype=torch.bfloat16, device=dev)
        symmem.moe_dispatch(x.to(dev), layout, recv)
        y = (recv.float() * 3 - 1).to(torch.bfloat16)
        out = torch.empty((t, h), dtype=torch.bfloat16, device=dev)
        symmem.moe_combine(y, layout, wts.to(dev), out)
        return layout, recv.cpu(), out.cpu()

    hl, hr, ho = run("cpu", "cpu")
    gl, gr, go = run("cuda", idx_on)
    torch.cuda.synchronize()
    assert gl.row_source == hl.row_source and gl.expert_counts == hl.expert_counts
    assert torch.equal(gr.view(torch.int16), hr.view(torch.int16))
    assert torch.equal(go.view(torch.int16), ho.view(torch.int16))


def test_torch_ops_fp8_match_the_host(g):
    import symmem.torch as st

    me, w = g.rank, g.world_size
    local, k, h = 2, 2, 384
    t = 9 + 2 * me
    idx = routing(me, t, k, local * w, seed=4)
    x = randn((t, h), 30 + me, torch.float32).to(torch.float8_e4m3fn)
    scales = randn((t, h // 128), 40 + me, torch.float32)
    wts = randn((t, k), 50 + me, torch.float32)
    res = {}
    for dev in ("cpu", "cuda"):
        recv, counts, handle, rs = st.moe_dispatch(x.to(dev), idx.to(dev), local * w,
                                                   x_scales=scales.to(dev))
        assert recv.device.type == dev
        y = (recv.float() * 0.5).to(torch.float16)
        out = st.moe_combine(y, handle, wts.to(dev))
        res[dev] = (recv.cpu(), rs.cpu(), counts.cpu(), out.cpu())
    torch.cuda.synchronize()
    for a, b in zip(res["cpu"], res["cuda"]):
        assert a.shape == b.shape
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def test_device_layout_replays_new_routing_from_a_graph(g):
    """moe_layout(device_layout=True): routed on the GPU at every dispatch, so a CUDA graph of
    dispatch + combine replayed after new routing was copied into topk_idx gives the results of
    the new routing (against the CPU, bitwise)."""
    me, w = g.rank, g.world_size
    local, k, h = 4, 3, 256
    t = 16 + me
    max_tokens = 16 + w
    x = randn((t, h), 60 + me, torch.bfloat16)
    wts = randn((t, k), 70 + me, torch.float32)
    routes = [routing(me, t, k, local * w, seed=s, drop=0.1) for s in (8, 9)]

    def host(idx):
        layout = symmem.moe_layout(idx, local * w, mode="low_latency", max_tokens=max_tokens,
                                   group=g, device="cpu")
        recv = torch.full(layout.recv_shape(h), 7.0, dtype=torch.bfloat16)
        symmem.moe_dispatch(x, layout, recv)
        y = (recv.float() * 3 - 1).to(torch.bfloat16)
        out = torch.empty((t, h), dtype=torch.bfloat16)
        symmem.moe_combine(y, layout, wts, out)
        return recv, out

    d_idx = routes[0].cuda()
    layout = symmem.moe_layout(d_idx, local * w, mode="low_latency", max_tokens=max_tokens,
                               group=g, device="cuda", device_layout=True)
    assert layout.device_layout and layout.expert_counts_ptr != 0
    d_x, d_w = x.cuda(), wts.cuda()
    recv = torch.full(layout.recv_shape(h), 7.0, dtype=torch.bfloat16, device="cuda")
    y = torch.empty_like(recv)
    out = torch.empty((t, h), dtype=torch.bfloat16, device="cuda")

    def step():
        symmem.moe_dispatch(d_x, layout, recv)
        y.copy_((recv.float() * 3 - 1).to(torch.bfloat16))
        symmem.moe_combine(y, layout, d_w, out)

    step()  # eager: also grows the exchange buffers before the capture
    torch.cuda.synchronize()
    hr, ho = host(routes[0])
    assert torch.equal(recv.cpu().view(torch.int16), hr.view(torch.int16))
    assert torch.equal(out.cpu().view(torch.int16), ho.view(torch.int16))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        step()
    for idx in routes:
        d_idx.copy_(idx)
        recv.fill_(7.0)
        graph.replay()
        torch.cuda.synchronize()
        hr, ho = host(idx)
        assert torch.equal(recv.cpu().view(torch.int16), hr.view(torch.int16))
        assert torch.equal(out.cpu().view(torch.int16), ho.view(torch.int16))
