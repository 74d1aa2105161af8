#!/usr/bin/env python3
"""Compare symmem's GPU all-reduce with torch's symmetric-memory all-reduces (and NCCL).

Run on the GPU machine, under MPS when several ranks share one GPU (see ../shared/GPU.md and
scripts/gpu-check.sh). For each world size N (default 2 and 4) it starts N processes:

  * torch: torch.multiprocessing workers, a gloo process group (store only: NCCL refuses two
    ranks on one GPU), TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES=1, a symm_mem buffer of bf16
    zeros, timing torch.ops.symm_mem.one_shot_all_reduce (out of place) and
    two_shot_all_reduce_ (in place) with CUDA events, eager and inside a CUDA graph;
  * symmem: `symmem-run -n N -- <build>/bench/gpu_allreduce_bench` (in place on a symmetric
    buffer, zero copy, the same timing method), algorithms auto, one_shot and two_shot;
  * with at least N GPUs, also torch.distributed all_reduce over NCCL, one process per GPU.

The metric is the median GPU time per call (us). The HBM roofline of the one-GPU setting counts
the bytes every rank moves in an in-place all-reduce (read its share from every rank and write
the result to every rank: 2 x bytes per rank, all ranks on the same HBM) at ~4.1 TB/s.
Prints one table and writes <out>/torch_compare.{json,md}.

usage: torch_compare.py [--out DIR (default <build>/torch_compare)] [--quick] [--build DIR (default $SYMMEM_BUILD_DIR or ./build)] [--np 2,4] [--sizes B,...]
                        [--iters N] [--repeats N] [--skip-torch] [--skip-symmem] [--warmup S]

Before the first measurement it keeps every GPU busy for --warmup seconds (default 2; 0: none) in
a child process, so that the first rows are not timed on a GPU that was idle (after a build they
ran up to 2x slow).
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import time

HBM_BYTES_PER_S = 4.1e12
FULL_SIZES = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]
QUICK_SIZES = [4 << 10, 256 << 10, 4 << 20, 16 << 20, 64 << 20]
SAFE_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "NVSHMEM_DISABLE_NVLS": "1",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES": "1",
}


def kernel_times(prof, calls):
    """(GPU us per call, launches per call, name) of each kernel or copy that a torch.profiler
    run of `calls` calls recorded, longest first (bench/moe_compare.py --profile, host_cost.py)."""
    rows = []
    for ev in prof.key_averages():
        us = getattr(ev, "device_time_total", None) or getattr(ev, "cuda_time_total", 0)
        if us > 0:
            rows.append((us / calls, ev.count / calls, ev.key))
    return sorted(rows, reverse=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def human(n):
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"


WARMUP = """
import sys, time, torch
for d in range(torch.cuda.device_count()):
    torch.cuda.set_device(d)
    a = torch.randn(4096, 4096, device=d, dtype=torch.bfloat16)
    end = time.time() + float(sys.argv[1]) / torch.cuda.device_count()
    while time.time() < end:
        for _ in range(20):
            a @ a
        torch.cuda.synchronize()
"""


def warm_up(seconds):
    """Keeps the GPUs busy for `seconds` (matmuls in a child process, whose context is gone when
    it exits), so that the first timed row does not meet a GPU that was idle: the first rows
    after a build ran up to 2x slow without it. A failed warm-up is reported, not fatal."""
    if seconds <= 0:
        return
    t = time.time()
    try:
        rc = subprocess.run([sys.executable, "-c", WARMUP, str(seconds)],
                            timeout=60 + seconds).returncode
        how = "" if rc == 0 else f" (failed: exit code {rc})"
    except subprocess.TimeoutExpired:
        how = " (cut: it ran past its timeout)"
    print(f"GPU warm-up: {time.time() - t:.1f} s{how}")


# ---- torch workers --------------------------------------------------------------------------
def _time_gpu(torch, fn, iters, repeats, graph, barrier, stream):
    """Median per-call GPU time in us of fn(), eager or replayed from one CUDA graph."""
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    g = None
    if graph:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=stream):
            for _ in range(iters):
                fn()
        g.replay()
        torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(repeats):
        barrier()
        with torch.cuda.stream(stream):
            start.record(stream)
            if g is not None:
                g.replay()
            else:
                for _ in range(iters):
                    fn()
            end.record(stream)
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1000.0 / iters)
    samples.sort()
    return samples[len(samples) // 2]


def torch_worker(rank, world, port, sizes, iters, repeats, backend, out_path):
    os.environ.update(SAFE_ENV)
    import torch
    import torch.distributed as dist

    ndev = torch.cuda.device_count()
    dev = rank % ndev
    torch.cuda.set_device(dev)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, device_id=torch.device("cuda", dev)
                            if backend == "nccl" else None)
    results = []
    stream = torch.cuda.Stream()
    barrier = dist.barrier
    try:
        if backend == "gloo":
            import torch.distributed._symmetric_memory as symm_mem

            group_name = dist.group.WORLD.group_name
            if hasattr(symm_mem, "enable_symm_mem_for_group"):
                try:
                    symm_mem.enable_symm_mem_for_group(group_name)
                except Exception:  # newer torch: not needed
                    pass
            max_numel = max(sizes) // 2
            buf = symm_mem.empty(max_numel, dtype=torch.bfloat16, device=f"cuda:{dev}")
            symm_mem.rendezvous(buf, group_name)
            buf.zero_()
            for nbytes in sizes:
                t = buf[: nbytes // 2]
                ops = {
                    "one_shot": lambda: torch.ops.symm_mem.one_shot_all_reduce(t, "sum", group_name),
                    "two_shot": lambda: torch.ops.symm_mem.two_shot_all_reduce_(t, "sum", group_name),
                }
                for algo, fn in ops.items():
                    for mode in ("eager", "graph"):
                        try:
                            us = _time_gpu(torch, fn, iters, repeats, mode == "graph", barrier,
                                           stream)
                        except Exception as e:  # noqa: BLE001 - report and continue
                            us = None
                            if rank == 0:
                                print(f"torch {algo} {mode} {nbytes}: {e}", file=sys.stderr)
                        results.append({"impl": "torch", "algo": algo, "mode": mode,
                                        "world": world, "bytes": nbytes, "us": us})
        else:
            t0 = torch.zeros(max(sizes) // 2, dtype=torch.bfloat16, device=f"cuda:{dev}")
            for nbytes in sizes:
                t = t0[: nbytes // 2]
                for mode in ("eager", "graph"):
                    us = _time_gpu(torch, lambda: dist.all_reduce(t), iters, repeats,
                                   mode == "graph", barrier, stream)
                    results.append({"impl": "nccl", "algo": "ring/tree", "mode": mode,
                                    "world": world, "bytes": nbytes, "us": us})
    finally:
        if rank == 0:
            with open(out_path, "w") as f:
                json.dump(results, f)
        dist.barrier()
        dist.destroy_process_group()


def run_torch(world, sizes, iters, repeats, backend, out_dir, timeout):
    import torch.multiprocessing as mp

    out_path = os.path.join(out_dir, f"torch_{backend}_n{world}.json")
    if os.path.exists(out_path):
        os.remove(out_path)
    ctx = mp.get_context("spawn")
    port = free_port()
    procs = [ctx.Process(target=torch_worker,
                         args=(r, world, port, sizes, iters, repeats, backend, out_path))
             for r in range(world)]
    for p in procs:
        p.start()
    deadline = time.time() + timeout
    for p in procs:
        p.join(max(1.0, deadline - time.time()))
    for p in procs:
        if p.is_alive():
            p.kill()
            print(f"torch {backend} N={world}: timed out after {timeout} s", file=sys.stderr)
    if not os.path.exists(out_path):
        return []
    with open(out_path) as f:
        return json.load(f)


# ---- symmem --------------------------------------------------------------------------------------
def run_symmem(world, sizes, iters, repeats, build, out_dir, timeout):
    bench = os.path.join(build, "bench", "gpu_allreduce_bench")
    runner = os.path.join(build, "tools", "run", "symmem-run")
    for path in (bench, runner):
        if not os.path.exists(path):
            print(f"symmem: {path} is missing (build with CUDA and tests on)", file=sys.stderr)
            return []
    env = dict(os.environ, **SAFE_ENV)
    env.update({"SYMMEM_BACKEND": "cuda", "SYMMEM_ALLOW_SHARED_GPU": "1",
                "SYMMEM_TIMEOUT_MS": "60000"})
    cmd = [runner, "-n", str(world), "--", bench, "--sizes", ",".join(map(str, sizes)),
           "--iters", str(iters), "--repeats", str(repeats)]
    log = os.path.join(out_dir, f"symmem_n{world}.log")
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        out, err, rc = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err, rc = f"timed out after {timeout} s", -1
    with open(log, "w") as f:
        f.write(" ".join(cmd) + "\n" + out + "\n--- stderr ---\n" + err)
    if rc != 0:
        print(f"symmem N={world}: exit code {rc}, see {log}", file=sys.stderr)
    results = []
    for line in out.splitlines():
        i = line.find("{")
        if i < 0:
            continue
        try:
            results.append(json.loads(line[i:]))
        except json.JSONDecodeError:
            pass
    return results


# ---- table -------------------------------------------------------------------------------------------
def roofline_us(nbytes, world):
    return 2.0 * nbytes * world / HBM_BYTES_PER_S * 1e6


def target_note(nbytes, mode, speedup, roof_frac):
    """Issue #19's GPU targets: never slower than torch's best; <= 256 KiB in graphs at most half
    its time; >= 16 MiB at least 1.5x; 64 MiB at 85% of the HBM roofline."""
    notes = []
    if speedup is not None:
        notes.append("ok" if speedup >= 1.0 else "MISS(slower)")
    if nbytes <= (256 << 10) and mode == "graph" and speedup is not None:
        notes.append("ok" if speedup >= 2.0 else "MISS(<=256K:2x)")
    if nbytes >= (16 << 20) and speedup is not None:
        notes.append("ok" if speedup >= 1.5 else "MISS(>=16M:1.5x)")
    if nbytes == (64 << 20) and roof_frac is not None:
        notes.append("ok" if roof_frac >= 0.85 else "MISS(64M:85%roof)")
    if not notes:
        return "-"
    missed = [n for n in notes if n != "ok"]
    return ",".join(missed) if missed else "ok"


def make_table(results, worlds, sizes, one_gpu):
    def get(impl, algo, mode, world, nbytes):
        for r in results:
            if (r.get("impl") == impl and r.get("algo") == algo and r.get("mode") == mode
                    and r.get("world") == world and r.get("bytes") == nbytes
                    and r.get("us") is not None):
                return r["us"]
        return None

    def fmt(v):
        return f"{v:8.1f}" if v is not None else "       -"

    head = ("| N | mode  |    bytes | torch 1sh | torch 2sh |  nccl | symmem auto | symmem 1sh | "
            "symmem 2sh | speedup vs best torch | roofline us | auto % roof | targets |")
    rows = [head, "|" + "---|" * 13]
    for world in worlds:
        for mode in ("eager", "graph"):
            for nbytes in sizes:
                t1 = get("torch", "one_shot", mode, world, nbytes)
                t2 = get("torch", "two_shot", mode, world, nbytes)
                nc = get("nccl", "ring/tree", mode, world, nbytes)
                sa = get("symmem", "auto", mode, world, nbytes)
                s1 = get("symmem", "one_shot", mode, world, nbytes)
                s2 = get("symmem", "two_shot", mode, world, nbytes)
                best_t = min([v for v in (t1, t2) if v is not None], default=None)
                speedup = best_t / sa if best_t and sa else None
                roof = roofline_us(nbytes, world) if one_gpu else None
                frac = roof / sa if roof and sa else None
                rows.append(
                    f"| {world} | {mode:5} | {human(nbytes):>8} | {fmt(t1)} | {fmt(t2)} | {fmt(nc)} |"
                    f" {fmt(sa)} | {fmt(s1)} | {fmt(s2)} | "
                    f"{(f'{speedup:5.2f}x' if speedup else '-'):>7} | {fmt(roof)} | "
                    f"{(f'{100 * frac:5.1f}%' if frac else '-'):>6} | "
                    f"{target_note(nbytes, mode, speedup, frac)} |")
    return "\n".join(rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("SYMMEM_TORCH_COMPARE_OUT", ""),
                    help="output folder (default: <build>/torch_compare)")
    ap.add_argument("--quick", action="store_true", help="5 sizes, fewer repeats (< ~3 min)")
    ap.add_argument("--build", default=os.environ.get("SYMMEM_BUILD_DIR") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "build"))
    ap.add_argument("--np", default="2,4")
    ap.add_argument("--sizes", default="")
    ap.add_argument("--iters", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=0)
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--skip-symmem", action="store_true")
    ap.add_argument("--timeout", type=int, default=120, help="seconds per run")
    ap.add_argument("--warmup", type=float, default=2.0,
                    help="seconds of GPU work before the first measurement (0: none)")
    args = ap.parse_args()
    if not args.out:
        args.out = os.path.join(args.build, "torch_compare")

    os.makedirs(args.out, exist_ok=True)
    sizes = ([int(s) for s in args.sizes.split(",") if s] if args.sizes
             else (QUICK_SIZES if args.quick else FULL_SIZES))
    iters = args.iters or (10 if args.quick else 20)
    repeats = args.repeats or 5
    worlds = [int(n) for n in args.np.split(",") if n]
    os.environ.update(SAFE_ENV)

    ngpu = 0
    have_torch = False
    try:
        import torch
        have_torch = True
        ngpu = torch.cuda.device_count()
    except ImportError:
        print("torch is not importable: symmem numbers only", file=sys.stderr)
    if ngpu == 0:
        try:
            out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
            ngpu = len([ln for ln in out.stdout.splitlines() if ln.startswith("GPU")])
        except OSError:
            ngpu = 0
    mps = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "")
    mps_note = mps or "(not set: kernels of different processes may time-slice; timings mean nothing)"
    print(f"GPUs: {ngpu}; MPS pipe dir: {mps_note}; sizes {sizes}; iters {iters} x repeats {repeats}")

    if have_torch and ngpu > 0:
        warm_up(args.warmup)
    results = []
    for world in worlds:
        if not args.skip_symmem:
            t = time.time()
            results += run_symmem(world, sizes, iters, repeats, args.build, args.out, args.timeout)
            print(f"symmem N={world}: {time.time() - t:.0f} s")
        if have_torch and not args.skip_torch:
            t = time.time()
            results += run_torch(world, sizes, iters, repeats, "gloo", args.out, args.timeout)
            print(f"torch symm_mem N={world}: {time.time() - t:.0f} s")
            if ngpu >= world:
                results += run_torch(world, sizes, iters, repeats, "nccl", args.out, args.timeout)

    one_gpu = ngpu == 1
    table = make_table(results, worlds, sizes, one_gpu)
    wrong = [r for r in results if r.get("impl") == "symmem" and r.get("correct") is False]
    summary = (f"symmem all-reduce vs torch symm_mem (bf16, median us per call; speedup = best "
               f"torch time / symmem auto time; roofline = 2 x bytes x N / {HBM_BYTES_PER_S / 1e12}"
               f" TB/s{'' if one_gpu else ': only for one shared GPU'})")
    with open(os.path.join(args.out, "torch_compare.json"), "w") as f:
        json.dump({"gpus": ngpu, "mps": bool(mps), "sizes": sizes, "results": results}, f,
                  indent=1)
    with open(os.path.join(args.out, "torch_compare.md"), "w") as f:
        f.write(summary + "\n\n" + table + "\n")
    print(summary)
    print(table)
    if wrong:
        print(f"WRONG RESULTS from symmem: {wrong}", file=sys.stderr)
        return 1
    if not any(r.get("impl") == "symmem" for r in results) and not args.skip_symmem:
        print("no symmem results (see the logs in --out)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
