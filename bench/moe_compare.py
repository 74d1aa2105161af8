#!/usr/bin/env python3
"""MoE exchange on the GPU: symmem's dispatch/combine against torch's all_to_all_vdev_2d moving the
same token layout, and against symmem's all_to_all of the same bytes (issue #20's table).

Shapes are DeepEP's: hidden 7168, top-8, 256 experts over the ranks, 128 tokens per rank (decode)
and 4096 (prefill). Routing is seeded (distinct top-k experts per token, uniform); every rank
computes every rank's routing and tokens (small integers, exact in bf16), so each checks what it
received against the exact rows.

The worker runs under torchrun, once per implementation (two processes: torch's op needs its
NVSHMEM backend, chosen before the first allocation):
  --impl torch   torch.ops.symm_mem.all_to_all_vdev_2d: input rows sorted by expert (one row per
                 token and expert, the layout torch's op takes), output grouped by local expert,
                 then source rank: the rows of symmem's recv_x, in the same order.
  --impl symmem  moe_dispatch (normal: with and without moe_layout, and with x in symmetric
                 memory, which the expert ranks then read directly; low_latency routed on the
                 device, replayed from a CUDA graph; fp8 with scales), moe_combine (normal,
                 and with y in symmetric memory, read directly; low_latency under a graph),
                 and all_to_all (zero copy, symmetric buffers) of the bytes one dispatch sends.
Times are the slowest rank's median of CUDA-event times per call. Each rank writes
<out>/<impl>.rank<r>.json (times, whether its rows equal the reference, a SHA-256 of them).

The driver (no --impl) runs both, then prints a markdown table (written to <out>/moe_compare.md)
and checks that torch's and symmem's received rows are identical. Ranks share the GPU when there
are fewer GPUs than ranks (MPS started by scripts/gpu-check.sh; torch's NVSHMEM needs
CUDA_MPS_ACTIVE_THREAD_PERCENTAGE = 100 / N, set here). Exit status: 1 when symmem's run fails or
a result is wrong, 77 without CUDA; a failing torch run is reported, not fatal.

    bench/moe_compare.py --build build-gpu --np 4 --out /tmp/moe_compare     # GPU machine
    bench/moe_compare.py --device cpu --skip-torch --np 2 --tokens 16 --hidden 256 --experts 8
        # symmem's side on the CPU (host backend): a smoke test of this script
"""

import argparse
import hashlib
import json
import os
import signal
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_compare import SAFE_ENV, kernel_times  # noqa: E402  (SAFE_ENV: NVLink multicast off)

IMPLS = ["torch", "symmem"]


# ---- inputs, the same on every rank -------------------------------------------------------------
def routing(torch, r, tokens, k, experts, seed):
    """Rank r's topk_idx [tokens, k]: distinct experts, uniform, seeded."""
    g = torch.Generator().manual_seed(seed * 100003 + r * 7919 + tokens)
    return torch.rand((tokens, experts), generator=g).topk(k, dim=1).indices.to(torch.int64)


def tokens_of(torch, r, tokens, hidden):
    """Rank r's x [tokens, hidden]: integers in [-7, 7], exact in bf16 and e4m3."""
    i = torch.arange(tokens * hidden, dtype=torch.int64).reshape(tokens, hidden)
    return ((i * 7 + r * 13) % 15 - 7).to(torch.float32)


def received_rows(torch, idx_all, me, local):
    """(source, token) of each row `me` receives, grouped by local expert, then source rank,
    token, slot (symmem/moe.hpp's order, and all_to_all_vdev_2d's): a [rows, 2] tensor."""
    per = []
    for s, idx in enumerate(idx_all):
        flat = idx.reshape(-1)
        k = idx.shape[1]
        pos = torch.nonzero((flat // local) == me).reshape(-1)
        key = (flat[pos] % local) * flat.numel() + pos  # by local expert, then (token, slot)
        pos = pos[torch.argsort(key)]
        per.append((flat[pos] % local, torch.stack([torch.full_like(pos, s), pos // k], 1)))
    rows = []
    for e in range(local):
        for ex, st in per:
            rows.append(st[ex == e])
    return torch.cat(rows) if rows else torch.zeros((0, 2), dtype=torch.int64)


def digest(torch, t):
    t = t.contiguous().cpu()
    raw = t.view(torch.uint8) if t.numel() else t
    return hashlib.sha256(raw.numpy().tobytes()).hexdigest()


# ---- the worker (under torchrun) ----------------------------------------------------------------
def worker(args):
    for k, v in SAFE_ENV.items():
        os.environ.setdefault(k, v)
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        print("SKIPPED: no CUDA device")
        return 77
    if cuda:
        ndev = torch.cuda.device_count()
        device = torch.device("cuda", local_rank % ndev)
        torch.cuda.set_device(device)
    else:  # a smoke test of symmem's side on the host backend (no graphs, wall-clock times)
        ndev, device = 0, torch.device("cpu")
    pg = "nccl" if cuda and ndev >= int(os.environ.get("LOCAL_WORLD_SIZE", world)) else "gloo"
    dist.init_process_group(pg, device_id=device if pg == "nccl" else None)
    H, K, E = args.hidden, args.topk, args.experts
    if E % world:
        raise SystemExit(f"--experts {E} is not a multiple of {world} ranks")
    L = E // world
    bf16 = torch.bfloat16
    report = {"impl": args.impl, "rank": rank, "world": world, "device": str(device),
              "results": {}, "timings": {}, "errors": {}, "bytes": {}}

    def settle():
        if cuda:
            torch.cuda.synchronize()
        dist.barrier()

    def median_us(name, fn, graph=False):
        if not cuda:
            samples = []
            for i in range(args.warmup + args.iters):
                t0 = time.perf_counter()
                fn()
                if i >= args.warmup:
                    samples.append((time.perf_counter() - t0) * 1e6)
            settle()
            return statistics.median(samples)
        if graph:  # fn replayed from a CUDA graph, captured after the warm-up
            for _ in range(args.warmup):
                fn()
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, capture_error_mode="thread_local"):
                fn()
            fn = g.replay
        for _ in range(args.warmup):
            fn()
        settle()
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(args.iters)]
        for a, b in ev:
            a.record()
            fn()
            b.record()
        torch.cuda.synchronize()
        settle()
        if args.profile:
            profile(name, fn)
        return statistics.median(a.elapsed_time(b) * 1000.0 for a, b in ev)

    def profile(name, fn):
        """The GPU time of each kernel over --iters more calls (torch.profiler, CUPTI)."""
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as torch_profile
        with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(args.iters):
                fn()
            torch.cuda.synchronize()
        settle()
        report.setdefault("profile", {})[name] = kernel_times(prof, args.iters)[:12]

    def attempt(key, body):
        try:
            body()
        except Exception as e:  # noqa: BLE001 - recorded per case; the others go on
            report["errors"][key] = f"{type(e).__name__}: {e}"
            print(f"{args.impl} rank {rank} {key}: {report['errors'][key]}", file=sys.stderr)

    token_counts = [int(t) for t in args.tokens.split(",")]
    plans = {}
    for T in token_counts:
        idx_all = [routing(torch, r, T, K, E, args.seed) for r in range(world)]
        src = received_rows(torch, idx_all, rank, L)
        xs = torch.stack([tokens_of(torch, r, T, H).to(bf16) for r in range(world)])
        plans[T] = (idx_all, xs[src[:, 0], src[:, 1]].to(device))
        del xs

    try:
        if args.impl == "torch":
            import torch.distributed._symmetric_memory as symm_mem

            symm_mem.set_backend("NVSHMEM")
            name = dist.group.WORLD.group_name
            rows_in = max(T * K for T in token_counts)
            rows_out = max(len(received_rows(torch, plans[T][0], r, L))
                           for T in token_counts for r in range(world))
            with torch.cuda.device(device):
                inp = symm_mem.empty((rows_in, H), dtype=bf16, device=device)
                out = symm_mem.empty((rows_out, H), dtype=bf16, device=device)
                splits = symm_mem.empty(E, dtype=torch.int64, device=device)
                so = symm_mem.empty((2, E), dtype=torch.int64, device=device)
                for t in (inp, out, splits, so):
                    symm_mem.rendezvous(t, name)
                for T in token_counts:
                    key = f"a2av_2d/{T}"

                    def body(T=T, key=key):
                        idx_all, want = plans[T]
                        flat = idx_all[rank].reshape(-1)
                        order = torch.argsort(flat * flat.numel()
                                              + torch.arange(flat.numel()))  # by expert
                        x = tokens_of(torch, rank, T, H)
                        inp[:flat.numel()].copy_(x[order // K].to(bf16))
                        splits.copy_(torch.bincount(flat, minlength=E))
                        out.zero_()
                        settle()

                        def fn():
                            torch.ops.symm_mem.all_to_all_vdev_2d(inp, out, splits, so, name)
                        fn()
                        settle()
                        got = out[:want.shape[0]]
                        report["results"][key] = {"ok": bool(torch.equal(got, want)),
                                                  "sha256": digest(torch, got)}
                        report["bytes"][key] = int(flat.numel() * H * 2)
                        report["timings"][key] = median_us(key, fn)
                    attempt(key, body)
        else:
            import symmem

            g = symmem.Group.from_env()
            dev = f"cuda:{device.index}" if cuda else "cpu"
            for T in token_counts:
                idx_all, want = plans[T]
                idx = idx_all[rank].to(device)
                x = tokens_of(torch, rank, T, H).to(bf16).to(device)
                w = torch.full((T, K), 0.125, dtype=torch.float32, device=device)

                def normal(T=T, idx=idx, x=x, w=w, want=want):
                    layout = symmem.moe_layout(idx, E, group=g, device=dev)
                    recv = torch.zeros(layout.recv_shape(H), dtype=bf16, device=device)
                    symmem.moe_dispatch(x, layout, recv)
                    settle()
                    key = f"dispatch/{T}"
                    report["results"][key] = {"ok": bool(torch.equal(recv, want)),
                                              "sha256": digest(torch, recv)}
                    dest = (idx_all[rank] // L).unsqueeze(-1) == torch.arange(world)
                    sent = int(dest.any(dim=1).sum())  # (token, destination rank) pairs
                    report["bytes"][key] = sent * H * 2
                    report["timings"][key] = median_us(
                        key, lambda: symmem.moe_dispatch(x, layout, recv))

                    # x in symmetric memory (as torch's input is): the expert ranks read the
                    # rows from it (NOTE [moe pull dispatch]; the exchange on the CPU).
                    xs = torch.from_dlpack(symmem.empty((max(T, 1), H), dtype="bfloat16",
                                                        device=dev, group=g))[:T]
                    xs.copy_(x)
                    recv_zc = torch.zeros_like(recv)
                    symmem.moe_dispatch(xs, layout, recv_zc)
                    settle()
                    report["results"][f"dispatch_zc/{T}"] = {
                        "ok": bool(torch.equal(recv_zc, want)), "sha256": digest(torch, recv_zc)}
                    report["bytes"][f"dispatch_zc/{T}"] = sent * H * 2
                    report["timings"][f"dispatch_zc/{T}"] = median_us(
                        f"dispatch_zc/{T}", lambda: symmem.moe_dispatch(xs, layout, recv_zc))

                    def with_layout():
                        lt = symmem.moe_layout(idx, E, group=g, device=dev)
                        symmem.moe_dispatch(x, lt, recv)
                    report["timings"][f"dispatch+layout/{T}"] = median_us(
                        f"dispatch+layout/{T}", with_layout)
                    # fp8 e4m3 with one f32 scale per 128 elements.
                    x8 = x.float().to(torch.float8_e4m3fn)
                    sc = torch.ones((T, H // 128), dtype=torch.float32, device=device)
                    r8 = torch.zeros(layout.recv_shape(H), dtype=torch.float8_e4m3fn,
                                     device=device)
                    rs = torch.zeros((layout.recv_rows, H // 128), dtype=torch.float32,
                                     device=device)
                    symmem.moe_dispatch(x8, layout, r8, x_scales=sc, recv_scales=rs)
                    settle()
                    report["results"][f"dispatch_fp8/{T}"] = {
                        "ok": bool(torch.equal(r8.float(), want.float())),
                        "sha256": digest(torch, r8)}
                    report["timings"][f"dispatch_fp8/{T}"] = median_us(
                        f"dispatch_fp8/{T}",
                        lambda: symmem.moe_dispatch(x8, layout, r8, x_scales=sc, recv_scales=rs))
                    # fp8 with x and its scales in symmetric memory: pulled as the bf16 above
                    # (allocated as bytes, viewed as e4m3).
                    def fp8_pulled(T=T, x8=x8, sc=sc, r8=r8, rs=rs, layout=layout, want=want):
                        x8s = torch.from_dlpack(symmem.empty((max(T, 1), H), dtype="uint8",
                                                             device=dev, group=g))[:T]
                        x8s = x8s.view(torch.float8_e4m3fn)
                        x8s.copy_(x8)
                        scs = torch.from_dlpack(symmem.empty((max(T, 1), H // 128),
                                                             dtype="float32", device=dev,
                                                             group=g))[:T]
                        scs.copy_(sc)
                        r8z, rsz = torch.zeros_like(r8), torch.zeros_like(rs)
                        symmem.moe_dispatch(x8s, layout, r8z, x_scales=scs, recv_scales=rsz)
                        settle()
                        report["results"][f"dispatch_fp8_zc/{T}"] = {
                            "ok": bool(torch.equal(r8z.float(), want.float())
                                       and torch.equal(rsz, rs)),
                            "sha256": digest(torch, r8z)}
                        report["timings"][f"dispatch_fp8_zc/{T}"] = median_us(
                            f"dispatch_fp8_zc/{T}",
                            lambda: symmem.moe_dispatch(x8s, layout, r8z, x_scales=scs,
                                                        recv_scales=rsz))
                    attempt(f"dispatch_fp8_zc/{T}", fp8_pulled)
                    # combine: y = recv, every weight 1/8: out = x * (live slots) / 8, exact.
                    out = torch.empty((T, H), dtype=bf16, device=device)
                    symmem.moe_combine(recv, layout, w, out)
                    settle()
                    key = f"combine/{T}"
                    report["results"][key] = {"ok": bool(torch.equal(out, x * (K * 0.125))),
                                              "sha256": digest(torch, out)}
                    report["timings"][key] = median_us(
                        key, lambda: symmem.moe_combine(recv, layout, w, out))
                    # y in symmetric memory: the token ranks read the rows from the expert
                    # ranks' y (NOTE [moe pull dispatch]); the same size on every rank.
                    most = torch.tensor([recv.shape[0]], dtype=torch.int64,
                                        device=device if pg == "nccl" else "cpu")
                    dist.all_reduce(most, op=dist.ReduceOp.MAX)
                    ys = torch.from_dlpack(symmem.empty((max(int(most.item()), 1), H),
                                                        dtype="bfloat16", device=dev,
                                                        group=g))[:recv.shape[0]]
                    ys.copy_(recv)
                    out_zc = torch.empty((T, H), dtype=bf16, device=device)
                    symmem.moe_combine(ys, layout, w, out_zc)
                    settle()
                    report["results"][f"combine_zc/{T}"] = {
                        "ok": bool(torch.equal(out_zc, out)), "sha256": digest(torch, out_zc)}
                    report["timings"][f"combine_zc/{T}"] = median_us(
                        f"combine_zc/{T}", lambda: symmem.moe_combine(ys, layout, w, out_zc))
                    # all_to_all of the bytes one dispatch sends (the most any rank sends).
                    per_peer = -(-sent * H // (8 * world)) * 8 or 8  # elements, whole 16 B
                    peers = torch.tensor([per_peer], device=device if pg == "nccl" else "cpu")
                    peers = peers.to(torch.int64)
                    dist.all_reduce(peers, op=dist.ReduceOp.MAX)
                    n = int(peers.item()) * world
                    a = torch.from_dlpack(symmem.empty((n,), dtype="bfloat16", device=dev,
                                                       group=g))
                    b = torch.from_dlpack(symmem.empty((n,), dtype="bfloat16", device=dev,
                                                       group=g))
                    a.fill_(1)
                    report["bytes"][f"all_to_all/{T}"] = n * 2
                    report["timings"][f"all_to_all/{T}"] = median_us(
                        f"all_to_all/{T}", lambda: symmem.all_to_all(a, b, group=g))

                def low_latency(T=T, idx=idx, x=x, w=w, want=want):
                    layout = symmem.moe_layout(idx, E, group=g, device=dev,
                                               mode="low_latency", max_tokens=T)
                    recv = torch.zeros(layout.recv_shape(H), dtype=bf16, device=device)
                    symmem.moe_dispatch(x, layout, recv)
                    settle()
                    dense = torch.cat([recv[e, :c] for e, c in
                                       enumerate(layout.expert_counts)])
                    # Routed on the device (what a decode step captures in a graph): the same
                    # rows as the layout routed on the host.
                    kw = {"device_layout": True} if cuda else {}
                    dl = symmem.moe_layout(idx, E, group=g, device=dev, mode="low_latency",
                                           max_tokens=T, **kw)
                    recv2 = torch.zeros_like(recv)
                    symmem.moe_dispatch(x, dl, recv2)
                    settle()
                    report["results"][f"dispatch_ll/{T}"] = {
                        "ok": bool(torch.equal(dense, want)) and bool(torch.equal(recv, recv2)),
                        "sha256": digest(torch, dense)}
                    report["timings"][f"dispatch_ll_graph/{T}"] = median_us(
                        f"dispatch_ll_graph/{T}", lambda: symmem.moe_dispatch(x, dl, recv2),
                        graph=True)
                    out = torch.empty((T, H), dtype=bf16, device=device)
                    report["timings"][f"combine_ll_graph/{T}"] = median_us(
                        f"combine_ll_graph/{T}", lambda: symmem.moe_combine(recv2, dl, w, out),
                        graph=True)
                    settle()
                    report["results"][f"combine_ll/{T}"] = {
                        "ok": bool(torch.equal(out, x * (K * 0.125))),
                        "sha256": digest(torch, out)}

                attempt(f"normal/{T}", normal)
                if T <= args.ll_max_tokens:
                    attempt(f"low_latency/{T}", low_latency)
    except Exception as e:  # noqa: BLE001 - written to the report
        report["errors"]["fatal"] = f"{type(e).__name__}: {e}"
        print(f"{args.impl} rank {rank}: {report['errors']['fatal']}", file=sys.stderr)
    finally:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, f"{args.impl}.rank{rank}.json"), "w") as f:
            json.dump(report, f, indent=1)
    wrong = [k for k, r in report["results"].items() if not r["ok"]]
    try:
        dist.barrier()
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - a failed rank may be gone
        pass
    return 1 if wrong or report["errors"] else 0


# ---- the driver ---------------------------------------------------------------------------------
_child = None


def _stop_child(*_):
    if _child is not None and _child.poll() is None:
        try:
            os.killpg(_child.pid, signal.SIGTERM)
            _child.wait(10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(_child.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def launch(args, impl, env, limit):
    global _child
    log = os.path.join(args.out, f"{impl}.log")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc-per-node={args.np}", os.path.abspath(__file__), "--impl", impl,
           "--out", args.out, "--tokens", args.tokens, "--hidden", str(args.hidden),
           "--topk", str(args.topk), "--experts", str(args.experts), "--iters", str(args.iters),
           "--warmup", str(args.warmup), "--seed", str(args.seed),
           "--ll-max-tokens", str(args.ll_max_tokens), "--device", args.device]
    if args.profile:
        cmd.append("--profile")
    with open(log, "w") as f:
        f.write(" ".join(cmd) + "\n")
        f.flush()
        _child = subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT,
                                  start_new_session=True)
        try:
            rc = _child.wait(limit)
        except subprocess.TimeoutExpired:
            _stop_child()
            rc = None
        _child = None
    return rc, log


def load(args, impl):
    out = []
    for r in range(args.np):
        try:
            with open(os.path.join(args.out, f"{impl}.rank{r}.json")) as f:
                out.append(json.load(f))
        except (OSError, json.JSONDecodeError):
            out.append(None)
    return out


def slowest(reps, key):
    us = [rep["timings"].get(key) for rep in reps if rep]
    return max(us) if us and len(us) == len(reps) and all(u is not None for u in us) else None


def driver(args):
    signal.signal(signal.SIGTERM, lambda s, f: (_stop_child(), sys.exit(128 + s)))
    os.makedirs(args.out, exist_ok=True)
    build = os.path.abspath(args.build)
    base = dict(os.environ, **SAFE_ENV)
    base["PYTHONPATH"] = os.path.join(build, "python") + os.pathsep + base.get("PYTHONPATH", "")
    envs = {
        # NVSHMEM's symmetric heap holds torch's input and output (about 1 GB per PE at 4096
        # tokens of hidden 7168): larger than its default unless the caller set it.
        "torch": dict(base, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=str(100 // args.np),
                      NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME="lo", NVSHMEM_REMOTE_TRANSPORT="none",
                      NVSHMEM_SYMMETRIC_SIZE=base.get("NVSHMEM_SYMMETRIC_SIZE", "3G")),
        "symmem": dict(base, SYMMEM_ALLOW_SHARED_GPU="1", SYMMEM_TIMEOUT_MS="60000"),
    }
    rcs = {}
    for impl in IMPLS:
        if impl == "torch" and args.skip_torch:
            continue
        t0 = time.time()
        rc, log = launch(args, impl, envs[impl], args.timeout)
        rcs[impl] = rc
        print(f"{impl}: exit {rc} after {time.time() - t0:.0f} s (log {log})")
        with open(log) as f:  # torchrun turns a worker's 77 into its own failure
            if rc == 77 or "SKIPPED: no CUDA device" in f.read():
                print("SKIPPED: no CUDA device")
                return 77
    t, s = load(args, "torch"), load(args, "symmem")
    lines = [f"MoE exchange, {args.np} ranks, hidden {args.hidden}, top-{args.topk}, "
             f"{args.experts} experts, bf16 unless noted; slowest rank's median us per call "
             "(GB/s: bytes a rank sends / time)", "",
             "| tokens/rank | torch a2av_2d | symmem dispatch | x symmetric | +layout | fp8 "
             "| fp8 x symmetric | ll graph | combine | y symmetric | ll graph | all_to_all same bytes "
             "| torch / symmem |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    bad = []
    for T in [int(x) for x in args.tokens.split(",")]:
        def cell(reps, key, nbytes_key=None):
            us = slowest(reps, key)
            if us is None:
                return "-"
            b = [rep["bytes"].get(nbytes_key or key) for rep in reps if rep]
            gbs = f" ({max(b) / us / 1e3:.0f} GB/s)" if b and all(b) else ""
            return f"{us:.1f}{gbs}"
        tt = slowest(t, f"a2av_2d/{T}")
        sd = min((u for u in (slowest(s, f"dispatch/{T}"), slowest(s, f"dispatch_zc/{T}"))
                  if u is not None), default=None)  # symmem's better dispatch
        lines.append(
            f"| {T} | {cell(t, f'a2av_2d/{T}')} | {cell(s, f'dispatch/{T}')} "
            f"| {cell(s, f'dispatch_zc/{T}')} | {cell(s, f'dispatch+layout/{T}')} | {cell(s, f'dispatch_fp8/{T}')} "
            f"| {cell(s, f'dispatch_fp8_zc/{T}')} | {cell(s, f'dispatch_ll_graph/{T}')} | {cell(s, f'combine/{T}')} "
            f"| {cell(s, f'combine_zc/{T}')} | {cell(s, f'combine_ll_graph/{T}')} | {cell(s, f'all_to_all/{T}')} "
            f"| {f'{tt / sd:.2f}x' if tt and sd else '-'} |")
        for r in range(args.np):
            tr = t[r]["results"].get(f"a2av_2d/{T}") if t[r] else None
            sr = s[r]["results"].get(f"dispatch/{T}") if s[r] else None
            if tr and sr and tr["sha256"] != sr["sha256"]:
                bad.append(f"tokens {T} rank {r}: torch's rows differ from symmem's")
    for r, rep in enumerate(s):
        if rep is None:
            bad.append(f"symmem rank {r}: no report")
            continue
        bad += [f"symmem rank {r} {k}: WRONG" for k, v in rep["results"].items() if not v["ok"]]
        bad += [f"symmem rank {r} {k}: {v}" for k, v in rep["errors"].items()]
    if args.profile:  # rank 0's kernels per case
        for impl, reps in (("torch", t), ("symmem", s)):
            prof = (reps[0] or {}).get("profile") if reps else None
            if not prof:
                continue
            with open(os.path.join(args.out, f"{impl}.profile.txt"), "w") as f:
                for case, rows in prof.items():
                    f.write(f"== {impl} {case}: rank 0, GPU us per call, launches per call, "
                            "kernel\n")
                    f.writelines(f"  {us:10.1f} {n:5.1f}  {k[:110]}\n" for us, n, k in rows)
            print(f"kernel times: {os.path.join(args.out, impl + '.profile.txt')}")
    notes = []
    for r, rep in enumerate(t):
        if rep:
            notes += [f"torch rank {r} {k}: {v}" for k, v in rep["errors"].items()]
            notes += [f"torch rank {r} {k}: differs from the reference"
                      for k, v in rep["results"].items() if not v["ok"]]
    text = "\n".join(lines + [""] + [f"- {n}" for n in notes + bad]) + "\n"
    print(text)
    with open(os.path.join(args.out, "moe_compare.md"), "w") as f:
        f.write(text)
    return 1 if bad or rcs.get("symmem") != 0 else 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--impl", choices=IMPLS, help="worker mode (under torchrun)")
    p.add_argument("--out", default=None)
    p.add_argument("--build", default=os.environ.get("SYMMEM_BUILD_DIR", "build"))
    p.add_argument("--np", type=int, default=4)
    p.add_argument("--tokens", default="128,4096")
    p.add_argument("--hidden", type=int, default=7168)
    p.add_argument("--topk", type=int, default=8)
    p.add_argument("--experts", type=int, default=256)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--ll-max-tokens", type=int, default=128,
                   help="low_latency runs for token counts up to this (decode)")
    p.add_argument("--timeout", type=float, default=240)
    p.add_argument("--skip-torch", action="store_true")
    p.add_argument("--profile", action="store_true",
                   help="also time each kernel with torch.profiler; rank 0's per-case kernel "
                        "table goes to <out>/<impl>.profile.txt")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                   help="cpu: symmem's side on the host backend, a smoke test (with --skip-torch)")
    args = p.parse_args()
    if args.out is None:
        args.out = os.path.join(args.build, "moe_compare")
    if args.impl:
        return worker(args)
    return driver(args)


if __name__ == "__main__":
    sys.exit(main())
