#!/usr/bin/env python3
"""Run one torch.distributed._symmetric_memory program on torch and on symmem; compare both.

The worker is written against torch's module only (symm_mem.empty, symm_mem.rendezvous, the
handle's barrier, torch.ops.symm_mem.*); `--impl` picks its import line:

    --impl torch    import torch.distributed._symmetric_memory as symm_mem
    --impl symmem   import symmem.torch.symm_mem as symm_mem

It runs, on bf16 inputs of small integers (exact sums, so results can be compared bitwise),
one_shot_all_reduce, two_shot_all_reduce_ (in place) and reduce_scatter_out (phase "main", the
CUDA backend) and all_to_all_vdev with uneven splits (phase "a2a", after
symm_mem.set_backend("NVSHMEM") where symm_mem.is_nvshmem_available(): torch's op needs that
backend, chosen before the first allocation, hence a process of its own; torch's phase is skipped
with its reason without NVSHMEM). Every rank allocates the same buffers in the same order (symmem's
empty() is collective). Each op and size is checked against a reference computed on the CPU and
timed: the median of per-call times (CUDA events; time.perf_counter on the CPU) over --iters calls
after --warmup. Each rank writes <out>/<impl>/<phase>.rank<r>.json: per op and size a SHA-256 of
the result, its first and last values, whether it equals the reference, and the timing.

The driver (no --impl) runs the worker under torchrun (python3 -m torch.distributed.run
--standalone --nproc-per-node N) once per impl and phase, then compares the JSONs: the results of
both must be bitwise equal per op, size and rank. It prints a markdown table (op | size | torch us
| symmem us | ratio torch/symmem | results; times are the slowest rank's median) and writes it to
<out>/symm_mem_compare.md (all data: <out>/symm_mem_compare.json, logs: <out>/<impl>_<phase>.log).
Ranks share the GPU when there are fewer GPUs than ranks (under MPS on the GPU machine, started by
scripts/gpu-check.sh; SYMMEM_ALLOW_SHARED_GPU=1, TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES=1 and a
gloo process group, as bench/torch_compare.py: NCCL refuses two ranks on one GPU; nccl with a GPU
per rank). A failing torch run is reported and does not fail the comparison; exit status 1 when
symmem's run fails, one of its results is wrong, or the two differ where torch's is not the one
that is wrong (a wrong torch result is a note); 77 (skipped) without CUDA.

    bench/symm_mem_compare.py --quick --np 2 --build build-gpu --out /tmp/smc    # GPU machine
    # symmem's side alone on the CPU (host backend, gloo), a smoke test:
    PYTHONPATH=build/python python3 -m torch.distributed.run --standalone --nproc-per-node 2 \\
        bench/symm_mem_compare.py --impl symmem --device cpu --quick --out /tmp/smc
    # the driver on the CPU (debug: torch's runs fail, symmem's run on the host backend):
    PYTHONPATH=build/python bench/symm_mem_compare.py --device cpu --quick --out /tmp/smc

usage: symm_mem_compare.py [--out DIR (default <build>/symm_mem_compare)] [--quick] [--np N]
                           [--build DIR (default $SYMMEM_BUILD_DIR or ./build)] [--sizes B,...]
                           [--iters N] [--warmup N] [--timeout S] [--budget S] [--skip-torch]
                           [--skip-a2a]
       symm_mem_compare.py --impl torch|symmem [--phase all|main|a2a] ... (the worker, under
                           torchrun; --phase all: both phases in one process, without NVSHMEM)
"""

import argparse
import hashlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_compare import SAFE_ENV, human  # noqa: E402  (the same GPU settings and size labels)

FULL_SIZES = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20]
QUICK_SIZES = [4 << 10, 1 << 20, 16 << 20]
MAIN_OPS = ["one_shot_all_reduce", "two_shot_all_reduce_", "reduce_scatter_out"]
A2A_OPS = ["all_to_all_vdev"]
OPS = MAIN_OPS + A2A_OPS
PHASES = {"main": MAIN_OPS, "a2a": A2A_OPS}
IMPLS = ["torch", "symmem"]


def value(torch, rank, numel, salt):
    """Rank `rank`'s input: integers in [-7, 7], exact in bf16, and so are their sums (|sum| <=
    7 x world size <= 256 up to 36 ranks, in any order of addition)."""
    i = torch.arange(numel, dtype=torch.int64)
    return (i * 7 + rank * 13 + salt) % 15 - 7


def a2a_splits(numel, world):
    """splits[src][dst] (elements) of all_to_all_vdev: uneven, multiples of 64 elements, each
    rank sending `numel` in all; the same on every rank."""
    unit = numel // (4 * world) // 64 * 64
    splits = []
    for src in range(world):
        row = [unit * (1 + (src + dst) % 3) for dst in range(world - 1)]
        splits.append(row + [numel - sum(row)])
    return splits


def digest(torch, t):
    c = t.detach().contiguous().cpu().reshape(-1)
    h = hashlib.sha256(c.view(torch.uint8).numpy() if c.numel() else b"").hexdigest()
    return {"numel": c.numel(), "sha256": h, "head": c[:8].float().tolist(),
            "tail": c[-8:].float().tolist()}


# ---- the worker (under torchrun) -----------------------------------------------------------------
def worker(args):
    for k, v in SAFE_ENV.items():
        os.environ.setdefault(k, v)
    import torch
    import torch.distributed as dist

    if args.impl == "torch":
        import torch.distributed._symmetric_memory as symm_mem
    else:
        import symmem.torch.symm_mem as symm_mem

    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        print("symm_mem_compare.py --impl: run the worker under torchrun (no RANK/WORLD_SIZE)",
              file=sys.stderr)
        return 2
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    if args.device == "cuda":
        if not torch.cuda.is_available():
            print("SKIPPED: no CUDA device (torch.cuda.is_available() is False); --device cpu "
                  "runs symmem's side on the CPU")
            return 77
        ndev = torch.cuda.device_count()
        device = torch.device("cuda", local_rank % ndev)  # cuda:0 for every rank on one GPU
        torch.cuda.set_device(device)
    else:
        ndev = 0
        device = torch.device("cpu")
        if args.impl == "torch":
            print("symm_mem_compare.py: torch's symmetric memory has no CPU backend; --device cpu "
                  "is for --impl symmem", file=sys.stderr)
            return 2
    cuda = device.type == "cuda"
    pg = args.pg
    if pg == "auto":
        pg = "nccl" if cuda and ndev >= local_world else "gloo"
    dist.init_process_group(pg, device_id=device if pg == "nccl" else None)
    group_name = dist.group.WORLD.group_name

    phases = ["main", "a2a"] if args.phase == "all" else [args.phase]
    sizes = [int(s) for s in args.sizes.split(",") if s] if args.sizes else (
        QUICK_SIZES if args.quick else FULL_SIZES)
    iters = args.iters or (20 if args.quick else 100)
    warmup = args.warmup or (5 if args.quick else 10)
    report = {"impl": args.impl, "phase": args.phase, "rank": rank, "world": world,
              "device": str(device), "process_group": pg, "torch": torch.__version__,
              "sizes": sizes, "iters": iters, "warmup": warmup, "backend": None,
              "skipped": {}, "results": {}, "timings": {}, "errors": {}}

    skipped = report["skipped"]

    def sync():
        if cuda:
            torch.cuda.synchronize()

    def settle():  # every rank is done with what came before
        sync()
        dist.barrier()

    def median_us(fn):
        for _ in range(warmup):
            fn()
        settle()
        if cuda:
            events = [tuple(torch.cuda.Event(enable_timing=True) for _ in range(2))
                      for _ in range(iters)]
            for start, end in events:
                start.record()
                fn()
                end.record()
            torch.cuda.synchronize()
            samples = [start.elapsed_time(end) * 1000.0 for start, end in events]
        else:
            samples = []
            for _ in range(iters):
                t0 = time.perf_counter()
                fn()
                samples.append((time.perf_counter() - t0) * 1e6)
        settle()
        return {"median_us": statistics.median(samples), "min_us": min(samples), "iters": iters}

    def check(key, got, want, fn):
        """Records got (after the call) against want, then times fn()."""
        report["results"][key] = dict(digest(torch, got), ok=bool(torch.equal(got.cpu(), want)))
        report["timings"][key] = median_us(fn)

    def attempt(key, body):
        try:
            body()
        except Exception as e:  # noqa: BLE001 - recorded per op and size; the others go on
            report["errors"][key] = f"{type(e).__name__}: {e}"
            if rank == 0:
                print(f"{args.impl} {key}: {report['errors'][key]}", file=sys.stderr)

    def set_backend_name():
        if report["backend"] is None and hasattr(symm_mem, "get_backend"):
            try:
                report["backend"] = symm_mem.get_backend(device)
            except Exception as e:  # noqa: BLE001 - informational
                report["backend"] = f"? ({e})"

    bf16 = torch.bfloat16
    nmax = max(sizes) // 2
    try:
        if cuda:
            # torch's all_to_all_vdev needs the NVSHMEM backend, which is chosen before the first
            # allocation; the other ops run on the CUDA backend (torch's default).
            if args.phase == "a2a" and symm_mem.is_nvshmem_available():
                symm_mem.set_backend("NVSHMEM")
            else:
                # torch's default backend (torch 2.11 on the GPU machine has no "CUDA" to name:
                # "SymmetricMemory does not find allocation backend CUDA")
                if "a2a" in phases and args.impl == "torch":
                    skipped["a2a"] = ("torch's all_to_all_vdev needs the NVSHMEM backend, and "
                                      + ("symm_mem.is_nvshmem_available() is False"
                                         if args.phase == "a2a" else
                                         "--phase all allocates on the CUDA backend"))
        if hasattr(symm_mem, "enable_symm_mem_for_group"):
            try:
                symm_mem.enable_symm_mem_for_group(group_name)  # deprecated in torch; harmless
            except Exception:  # noqa: BLE001 - newer torch: not needed
                pass
        if "main" in phases:
            # One buffer per op, allocated and rendezvoused in the same order on every rank.
            bufs = {op: symm_mem.empty(nmax, dtype=bf16, device=device) for op in MAIN_OPS}
            hdls = {op: symm_mem.rendezvous(bufs[op], group_name) for op in MAIN_OPS}
            set_backend_name()
            for si, nbytes in enumerate(sizes):
                n = nbytes // 2
                inputs = [value(torch, r, n, si) for r in range(world)]
                total = sum(inputs).to(bf16)
                mine = inputs[rank].to(bf16)

                def fill(op):
                    x = bufs[op][:n]
                    x.copy_(mine)
                    settle()
                    hdls[op].barrier(channel=0)
                    return x

                def one_shot():
                    x = fill("one_shot_all_reduce")
                    fn = (lambda: torch.ops.symm_mem.one_shot_all_reduce(x, "sum", group_name))
                    out = fn()
                    settle()
                    check(f"one_shot_all_reduce/{nbytes}", out, total, fn)

                def two_shot():
                    x = fill("two_shot_all_reduce_")
                    fn = (lambda: torch.ops.symm_mem.two_shot_all_reduce_(x, "sum", group_name))
                    fn()
                    settle()
                    report["results"][f"two_shot_all_reduce_/{nbytes}"] = dict(
                        digest(torch, x), ok=bool(torch.equal(x.cpu(), total)))
                    x.zero_()  # in place: timed on zeros, which stay zeros
                    settle()
                    report["timings"][f"two_shot_all_reduce_/{nbytes}"] = median_us(fn)

                def reduce_scatter():
                    x = fill("reduce_scatter_out")
                    block = n // (8 * world) * 8  # whole 16-byte units per rank (torch's rule)
                    x = x[:block * world]
                    out = torch.empty(block, dtype=bf16, device=device)
                    fn = (lambda: torch.ops.symm_mem.reduce_scatter_out(x, group_name, False,
                                                                        out))
                    fn()
                    settle()
                    want = total[rank * block:(rank + 1) * block]
                    check(f"reduce_scatter_out/{nbytes}", out, want, fn)

                attempt(f"one_shot_all_reduce/{nbytes}", one_shot)
                attempt(f"two_shot_all_reduce_/{nbytes}", two_shot)
                attempt(f"reduce_scatter_out/{nbytes}", reduce_scatter)
                settle()

        if "a2a" in phases and "a2a" not in skipped:
            plan = {nbytes: a2a_splits(nbytes // 2, world) for nbytes in sizes}
            cap_out = max(sum(s[src][dst] for src in range(world))
                          for s in plan.values() for dst in range(world))
            inp = symm_mem.empty(nmax, dtype=bf16, device=device)
            out = symm_mem.empty(cap_out, dtype=bf16, device=device)
            in_splits = symm_mem.empty(world, dtype=torch.int64, device=device)
            out_splits_offsets = symm_mem.empty((2, world), dtype=torch.int64, device=device)
            for t in (inp, out, in_splits, out_splits_offsets):
                symm_mem.rendezvous(t, group_name)
            set_backend_name()
            for si, nbytes in enumerate(sizes):
                key = f"all_to_all_vdev/{nbytes}"
                splits = plan[nbytes]

                def a2a():
                    salt = 100 + si
                    inp.copy_(value(torch, rank, nmax, salt).to(bf16))
                    out.zero_()
                    in_splits.copy_(torch.tensor(splits[rank], dtype=torch.int64))
                    settle()
                    fn = (lambda: torch.ops.symm_mem.all_to_all_vdev(
                        inp, out, in_splits, out_splits_offsets, group_name))
                    fn()
                    settle()
                    counts = [splits[src][rank] for src in range(world)]
                    offsets = [sum(counts[:src]) for src in range(world)]
                    parts = []
                    for src in range(world):
                        first = sum(splits[src][:rank])
                        parts.append(value(torch, src, first + counts[src], salt)[first:])
                    want = torch.cat(parts).to(bf16)
                    got = out[:sum(counts)]
                    so = out_splits_offsets.cpu().tolist()
                    report["results"][key] = dict(
                        digest(torch, got), splits_offsets=so,
                        ok=bool(torch.equal(got.cpu(), want)) and so == [counts, offsets])
                    report["timings"][key] = median_us(fn)

                attempt(key, a2a)
                settle()
    except Exception as e:  # noqa: BLE001 - written to the report, then fails the run
        report["errors"]["fatal"] = f"{type(e).__name__}: {e}"
        print(f"{args.impl} rank {rank}: {report['errors']['fatal']}", file=sys.stderr)
    finally:
        if args.out:
            d = os.path.join(args.out, args.impl)
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, f"{args.phase}.rank{rank}.json"), "w") as f:
                json.dump(report, f, indent=1)

    wrong = sorted(k for k, r in report["results"].items() if not r["ok"])
    if rank == 0:
        for key, r in report["results"].items():
            op, nbytes = key.split("/")
            us = report["timings"].get(key, {}).get("median_us")
            print(f"{args.impl} {op:22} {human(int(nbytes)):>8}: "
                  f"{f'{us:10.1f} us' if us is not None else '         - us'}  "
                  f"{'ok' if r['ok'] else 'WRONG'}  {r['sha256'][:16]}")
        for phase, why in skipped.items():
            print(f"{args.impl} phase {phase} skipped: {why}")
        print(f"{args.impl}: backend {report['backend']}, process group {pg}, {world} ranks on "
              f"{device}; rank 0: {len(report['results'])} results, {len(wrong)} wrong, "
              f"{len(report['errors'])} errors")
    try:
        dist.barrier()
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - a rank that failed may be gone
        pass
    return 1 if wrong or report["errors"] else 0


# ---- the driver ----------------------------------------------------------------------------------
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


def _on_signal(signum, _frame):
    _stop_child()
    sys.exit(128 + signum)


def launch(args, impl, phase, env, limit):
    """torchrun of the worker: (exit code or None on timeout, seconds, log path)."""
    global _child
    log = os.path.join(args.out, f"{impl}_{phase}.log")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc-per-node={args.np}", os.path.abspath(__file__), "--impl", impl,
           "--phase", phase, "--out", args.out, "--sizes", ",".join(map(str, args.size_list)),
           "--iters", str(args.iters), "--warmup", str(args.warmup), "--device", args.device]
    t0 = time.time()
    with open(log, "w") as f:
        f.write(" ".join(cmd) + "\n")
        f.flush()
        # A session of its own, so that a timeout ends torchrun and all of its workers.
        _child = subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT,
                                  start_new_session=True)
        try:
            rc = _child.wait(limit)
        except subprocess.TimeoutExpired:
            _stop_child()
            rc = None
        _child = None
    return rc, time.time() - t0, log


def load_reports(out, impl, phase, np):
    reports = []
    for r in range(np):
        path = os.path.join(out, impl, f"{phase}.rank{r}.json")
        try:
            with open(path) as f:
                reports.append(json.load(f))
        except (OSError, json.JSONDecodeError):
            reports.append(None)
    return reports


def excerpt(path, n=15):
    """The worker's own complaints in a torchrun log (before torchrun's summary), else its end."""
    try:
        with open(path) as f:
            lines = f.readlines()[1:]
    except OSError:
        return ""
    agent = re.compile(r"[WEI]\d{4} .*torch/distributed/elastic")  # torchrun's own log lines
    cut = next((i for i, ln in enumerate(lines)
                if agent.match(ln) or (ln.startswith("Traceback") and i + 1 < len(lines)
                                       and "<frozen runpy>" in lines[i + 1])), len(lines))
    mine = lines[:cut]
    return "".join(mine[-n:] if mine else lines[-n:])


def compare(args, runs):
    """(table rows, mismatches, symmem's wrong results, notes) from the reports of both."""
    rows, mismatches, wrong, notes = [], [], [], []
    for phase, ops in PHASES.items():
        if phase not in runs["symmem"] and phase not in runs["torch"]:
            continue
        reps = {impl: load_reports(args.out, impl, phase, args.np) for impl in IMPLS}
        for impl in IMPLS:
            for rep in reps[impl]:
                if rep is not None:
                    for p, why in rep["skipped"].items():
                        note = f"{impl} phase {p} skipped: {why}"
                        if note not in notes:
                            notes.append(note)
        for op in ops:
            for nbytes in args.size_list:
                key = f"{op}/{nbytes}"
                cell = {}
                for impl in IMPLS:
                    res = [rep["results"].get(key) if rep else None for rep in reps[impl]]
                    errs = [rep["errors"].get(key) for rep in reps[impl] if rep]
                    us = [rep["timings"].get(key, {}).get("median_us") for rep in reps[impl]
                          if rep]
                    us = [u for u in us if u is not None]
                    cell[impl] = {"res": res, "err": next((e for e in errs if e), None),
                                  "us": max(us) if len(us) == args.np else None}
                    for r, x in enumerate(res):
                        if x is not None and not x["ok"]:
                            if impl == "symmem":
                                wrong.append(f"{key} rank {r}")
                            else:
                                notes.append(f"torch's {op} {human(nbytes)} rank {r} differs from "
                                             "the reference")
                t, s = cell["torch"], cell["symmem"]
                both = [r for r in range(args.np) if t["res"][r] and s["res"][r]]
                differ = [r for r in both
                          if (t["res"][r]["sha256"], t["res"][r]["numel"],
                              t["res"][r].get("splits_offsets"))
                          != (s["res"][r]["sha256"], s["res"][r]["numel"],
                              s["res"][r].get("splits_offsets"))]
                for r in differ:
                    tr, sr = t["res"][r], s["res"][r]
                    # Where torch's result is the wrong one (symmem's equals the reference), the
                    # difference is torch's to fix: reported, not a failure of symmem's check.
                    torchs_fault = not tr["ok"] and sr["ok"]
                    (notes if torchs_fault else mismatches).append(
                        ("torch's result is wrong, symmem's equals the reference: "
                         if torchs_fault else "")
                        + f"{op} {human(nbytes)} rank {r}: torch {tr['sha256'][:16]} "
                        f"(ok vs reference: {tr['ok']}, head {tr['head'][:4]}) != symmem "
                        f"{sr['sha256'][:16]} (ok: {sr['ok']}, head {sr['head'][:4]})"
                        + (f", splits/offsets {tr.get('splits_offsets')} vs "
                           f"{sr.get('splits_offsets')}" if phase == "a2a" else ""))
                if differ and all(not t["res"][r]["ok"] and s["res"][r]["ok"] for r in differ):
                    verdict = f"torch wrong (rank {','.join(map(str, differ))})"
                elif differ:
                    verdict = f"DIFFER (rank {','.join(map(str, differ))})"
                elif len(both) == args.np:
                    verdict = "identical"
                elif all(s["res"]) and not any(t["res"]):
                    verdict = "torch: " + ("error" if t["err"] else "not run")
                elif all(t["res"]) and not any(s["res"]):
                    verdict = "symmem: " + ("ERROR" if s["err"] else "not run")
                elif not any(t["res"]) and not any(s["res"]):
                    verdict = "neither ran"
                else:
                    verdict = "partial"
                for impl, who in (("symmem", "symmem WRONG"), ("torch", "torch wrong")):
                    if (any(x is not None and not x["ok"] for x in cell[impl]["res"])
                            and not verdict.startswith(who)):
                        verdict += f" ({who} vs reference)"
                ratio = t["us"] / s["us"] if t["us"] and s["us"] else None
                rows.append({"op": op, "bytes": nbytes, "torch_us": t["us"],
                             "symmem_us": s["us"], "ratio": ratio, "results": verdict,
                             "torch_error": t["err"], "symmem_error": s["err"]})
    return rows, mismatches, wrong, notes


def make_table(rows):
    def fmt(v):
        return f"{v:9.1f}" if v is not None else "        -"

    lines = ["| op | size | torch us | symmem us | ratio torch/symmem | results |",
             "|---|---:|---:|---:|---:|---|"]
    for r in rows:
        ratio = f"{r['ratio']:.2f}x" if r["ratio"] else "-"
        lines.append(f"| {r['op']} | {human(r['bytes'])} | {fmt(r['torch_us'])} | "
                     f"{fmt(r['symmem_us'])} | {ratio} | {r['results']} |")
    return "\n".join(lines)


def driver(args):
    try:
        import torch
    except ImportError:
        print("SKIPPED: torch is not installed (the comparison runs torch's symmetric memory)")
        return 77
    if args.device == "cuda" and not torch.cuda.is_available():
        print("SKIPPED: no CUDA device here (torch.cuda.is_available() is False). symmem's side "
              "alone runs on the CPU: python3 -m torch.distributed.run --standalone "
              "--nproc-per-node 2 bench/symm_mem_compare.py --impl symmem --device cpu --quick")
        return 77
    ngpu = torch.cuda.device_count() if args.device == "cuda" else 0  # --device cpu: a test
    args.size_list = ([int(s) for s in args.sizes.split(",") if s] if args.sizes
                      else (QUICK_SIZES if args.quick else FULL_SIZES))
    bad = [s for s in args.size_list if s <= 0 or s % 1024]
    if bad:
        print(f"--sizes: {bad} are not positive multiples of 1024 bytes", file=sys.stderr)
        return 2
    args.iters = args.iters or (20 if args.quick else 100)
    args.warmup = args.warmup or (5 if args.quick else 10)
    timeout = args.timeout or (45 if args.quick else 240)
    budget = args.budget or (135 if args.quick else 0)
    os.makedirs(args.out, exist_ok=True)
    for impl in IMPLS:
        d = os.path.join(args.out, impl)
        if os.path.isdir(d):
            for name in os.listdir(d):
                if name.endswith(".json"):
                    os.remove(os.path.join(d, name))

    pypath = os.path.join(args.build, "python")
    env = dict(os.environ, **SAFE_ENV)
    env.update({"SYMMEM_ALLOW_SHARED_GPU": "1", "SYMMEM_TIMEOUT_MS": "60000",
                "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")})
    if os.path.isdir(os.path.join(pypath, "symmem")):
        env["PYTHONPATH"] = pypath + (os.pathsep + env["PYTHONPATH"]
                                      if env.get("PYTHONPATH") else "")
    else:
        print(f"note: {pypath}/symmem is missing (SYMMEM_BUILD_PYTHON=ON builds it); symmem must "
              "be importable otherwise", file=sys.stderr)
    mps = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "")
    shared = args.device == "cuda" and ngpu < args.np
    a2a_env = dict(env)
    if shared and mps:  # NVSHMEM PEs on one GPU: MPS with thread percentages summing to <= 100
        a2a_env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(100 // args.np)
    mps_note = mps or ("(not set: kernels of different processes may time-slice; timings mean "
                       "nothing)")
    print(f"GPUs: {ngpu}; ranks: {args.np}{' sharing a GPU' if shared else ''}; MPS pipe dir: "
          f"{mps_note}; sizes {args.size_list}; bf16; {args.warmup} warmup + {args.iters} timed "
          "calls")

    plan = [("torch", "main"), ("symmem", "main")]
    if not args.skip_a2a:
        plan += [("torch", "a2a"), ("symmem", "a2a")]
    if args.skip_torch:
        plan = [p for p in plan if p[0] != "torch"]
    t_start = time.time()
    runs = {impl: {} for impl in IMPLS}
    failed = []
    for impl, phase in plan:
        left = budget - (time.time() - t_start) if budget else timeout
        limit = min(timeout, left)
        if budget and left < 10:
            print(f"{impl} {phase}: not run, no time left in the {budget} s budget")
            if impl == "symmem" and phase == "main":
                failed.append(f"symmem {phase}: not run (budget)")
            continue
        rc, secs, log = launch(args, impl, phase, a2a_env if phase == "a2a" else env, limit)
        runs[impl][phase] = rc
        status = f"exit code {rc}" if rc is not None else f"TIMED OUT after {limit:.0f} s"
        print(f"{impl} {phase}: {status}, {secs:.0f} s (log {log})")
        missing = [r for r, rep in enumerate(load_reports(args.out, impl, phase, args.np))
                   if rep is None]
        if rc != 0 or missing:
            what = (f"{impl.upper()}'S RUN FAILED ({phase}): {status}"
                    + (f", no report from rank(s) {missing}" if missing else ""))
            print(what + "; from its log:\n" + excerpt(log), file=sys.stderr)
            if impl == "symmem":
                failed.append(what)
            else:
                print(f"torch's {phase} run failed: "
                      + ("what its ranks reported is still compared" if not missing else
                         "its ops are left out of the comparison")
                      + "; symmem's results are checked against the reference too",
                      file=sys.stderr)

    rows, mismatches, wrong, notes = compare(args, runs)
    table = make_table(rows)
    summary = (f"torch.distributed._symmetric_memory vs symmem.torch.symm_mem, the same program "
               f"(bench/symm_mem_compare.py), {args.np} ranks on {ngpu} GPU(s), bf16; median "
               f"us per call of the slowest rank; ratio > 1: symmem is faster")
    text = summary + "\n\n" + table + "\n" + "".join(f"\n- {n}" for n in notes)
    with open(os.path.join(args.out, "symm_mem_compare.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(args.out, "symm_mem_compare.json"), "w") as f:
        json.dump({"gpus": ngpu, "np": args.np, "mps": bool(mps), "sizes": args.size_list,
                   "runs": runs, "rows": rows, "mismatches": mismatches, "symmem_wrong": wrong,
                   "failed": failed, "notes": notes}, f, indent=1)
    print(text)
    for r in rows:
        for impl in IMPLS:
            if r[f"{impl}_error"]:
                print(f"{impl} {r['op']} {human(r['bytes'])}: {r[f'{impl}_error']}",
                      file=sys.stderr)
    if mismatches:
        print("RESULTS DIFFER between torch and symmem:\n  " + "\n  ".join(mismatches),
              file=sys.stderr)
    if wrong:
        print("WRONG RESULTS from symmem (vs the reference): " + ", ".join(wrong),
              file=sys.stderr)
    if failed:
        print("symmem failed: " + "; ".join(failed), file=sys.stderr)
    if not any(r["results"] == "identical" for r in rows):
        print("note: no op and size ran on both (nothing was compared)", file=sys.stderr)
    return 1 if mismatches or wrong or failed else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--impl", choices=IMPLS, help="run the worker (under torchrun) on this impl")
    ap.add_argument("--phase", choices=["all", "main", "a2a"], default="all",
                    help="worker: main (all-reduces, reduce-scatter), a2a (all_to_all_vdev, "
                         "NVSHMEM backend) or all (both, one process)")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help=argparse.SUPPRESS)
    ap.add_argument("--pg", choices=["auto", "gloo", "nccl"], default="auto",
                    help=argparse.SUPPRESS)
    ap.add_argument("--out", default=os.environ.get("SYMMEM_SYMM_MEM_COMPARE_OUT", ""),
                    help="output folder (default: <build>/symm_mem_compare)")
    ap.add_argument("--quick", action="store_true", help="3 sizes, 20 calls each")
    ap.add_argument("--build", default=os.environ.get("SYMMEM_BUILD_DIR") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "build"))
    ap.add_argument("--np", type=int, default=2, help="ranks (default 2)")
    ap.add_argument("--sizes", default="", help="bytes per rank, comma-separated")
    ap.add_argument("--iters", type=int, default=0, help="timed calls per op and size")
    ap.add_argument("--warmup", type=int, default=0, help="untimed calls before them")
    ap.add_argument("--timeout", type=int, default=0,
                    help="seconds per torchrun (default: quick 45, else 240)")
    ap.add_argument("--budget", type=int, default=0,
                    help="seconds for all runs together (default: quick 135, else none)")
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--skip-a2a", action="store_true")
    args = ap.parse_args()
    if args.impl:
        return worker(args)  # writes its reports only with --out
    args.out = os.path.abspath(args.out or os.path.join(args.build, "symm_mem_compare"))
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    return driver(args)


if __name__ == "__main__":
    sys.exit(main())
