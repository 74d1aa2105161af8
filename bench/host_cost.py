#!/usr/bin/env python3
"""Host time per call of symmem's Python paths, and where it goes (cProfile).

symm_mem_compare.py times calls with CUDA events back to back; when the host takes longer to
issue a call than the GPU takes to run it, those times are the host's. This script measures the
host side alone: it issues --calls calls of each variant without synchronising (few enough that
the launch queue never fills), then synchronises, and reports microseconds per call. Variants, on
one tensor in symmem memory:

  raw        symmem.all_reduce(t, group=g)               (the module's own API, in place)
  fn         symm_mem.one_shot_all_reduce(t, "sum", gn)  (the drop-in's Python function)
  op         torch.ops.symm_mem.one_shot_all_reduce(...) (through torch's dispatcher)
  a2av       symm_mem.all_to_all_vdev(...)               (the drop-in, counts on the device)
  empty_op   torch.empty_like(t)                         (torch's own floor for one tensor op)

Then rank 0 prints cProfile's top entries for the `op` and `a2av` variants (Python frames only:
the C++ inside one binding call shows as that call).

    bench/host_cost.py --build build-gpu --np 2            # GPU machine (ranks share the GPU)
    bench/host_cost.py --build build --np 2 --device cpu   # host backend
"""

import argparse
import cProfile
import io
import os
import pstats
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_compare import SAFE_ENV, kernel_times  # noqa: E402


def worker(args):
    import torch
    import torch.distributed as dist

    import symmem
    import symmem.torch.symm_mem as symm_mem

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    cuda = args.device == "cuda"
    if cuda:
        device = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group("gloo")
    gn = dist.group.WORLD.group_name
    g = symm_mem.group_from_process_group(dist.group.WORLD) \
        if hasattr(symm_mem, "group_from_process_group") else None
    n = args.elems
    t = symm_mem.empty(n, dtype=torch.bfloat16, device=device)
    t.fill_(1)
    symm_mem.rendezvous(t, gn)
    rows = 64
    a_in = symm_mem.empty(rows * world, dtype=torch.bfloat16, device=device).fill_(rank)
    a_out = symm_mem.empty(rows * world * 2, dtype=torch.bfloat16, device=device)
    splits = symm_mem.empty(world, dtype=torch.int64, device=device).fill_(rows)
    so = symm_mem.empty((2, world), dtype=torch.int64, device=device)

    def sync():
        if cuda:
            torch.cuda.synchronize()
        dist.barrier()

    variants = {
        "raw": lambda: symmem.all_reduce(t, group=g),
        "fn": lambda: symm_mem.one_shot_all_reduce(t, "sum", gn),
        "op": lambda: torch.ops.symm_mem.one_shot_all_reduce(t, "sum", gn),
        "a2av": lambda: symm_mem.all_to_all_vdev(a_in, a_out, splits, so, gn),
        "empty_op": lambda: torch.empty_like(t),
    }
    rows_out = []
    for name, fn in variants.items():
        for _ in range(args.warmup):
            fn()
        sync()
        best = None
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            for _ in range(args.calls):
                fn()
            host = (time.perf_counter() - t0) / args.calls * 1e6
            sync()
            best = host if best is None else min(best, host)
        rows_out.append((name, best))
    profiles = {}
    for name in ("op", "a2av"):
        fn = variants[name]
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(args.calls):
            fn()
        pr.disable()
        sync()
        st = pstats.Stats(pr, stream=io.StringIO()).stats
        top = sorted(st.items(), key=lambda kv: -kv[1][2])[:16]
        profiles[name] = "\n".join(
            f"  {tt / args.calls * 1e6:8.2f} {ct / args.calls * 1e6:8.2f}  {nc / args.calls:4.1f}  "
            f"{os.path.basename(f)}:{line}({fname})"
            for (f, line, fname), (_, nc, tt, ct, _) in top)
    kernels = {}
    if cuda:  # what each call puts on the GPU: kernels and copies, their time per call
        from torch.profiler import ProfilerActivity, profile
        for name in ("raw", "op", "a2av"):
            fn = variants[name]
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(50):
                    fn()
                torch.cuda.synchronize()
            sync()
            kernels[name] = kernel_times(prof, 50)
    if rank == 0:
        for name, rows in kernels.items():
            print(f"GPU work per call of {name}: us, launches per call, what")
            for us, count, key in rows:
                print(f"  {us:8.2f} {count:4.1f}  {key[:100]}")
        print(f"host us per call (best of {args.repeats} x {args.calls} calls, no sync between), "
              f"{world} ranks, {device}, {n} bf16")
        for name, us in rows_out:
            print(f"  {name:10s} {us:8.2f}")
        for name, text in profiles.items():
            print(f"\n== cProfile, {args.calls} calls of {name}: us per call in the function "
                  "itself, with what it calls, calls per call ==")
            print(text)
    dist.destroy_process_group()
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--build", default=os.environ.get("SYMMEM_BUILD_DIR") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "build"))
    ap.add_argument("--elems", type=int, default=2048)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=20)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    env = dict(os.environ, **SAFE_ENV)
    env.setdefault("SYMMEM_ALLOW_SHARED_GPU", "1")
    if args.device == "cpu":
        env["SYMMEM_BACKEND"] = "host"
    pypath = os.path.join(os.path.abspath(args.build), "python")
    env["PYTHONPATH"] = pypath + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc-per-node={args.np}", os.path.abspath(__file__), "--worker",
           "--device", args.device, "--elems", str(args.elems), "--calls", str(args.calls),
           "--repeats", str(args.repeats), "--warmup", str(args.warmup)]
    return subprocess.call(cmd, env=env)


if __name__ == "__main__":
    sys.exit(main())
