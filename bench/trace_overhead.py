#!/usr/bin/env python3
"""Cost of the flight recorder (issue #18): the same benchmark with the recorder off
(SYMMEM_TRACE_BUFFER=0) and on (the default 2000; optionally with SYMMEM_TRACE_DIR), runs
alternating, medians over the runs, and the difference per op. --no-device-times adds the
recorder on with SYMMEM_TRACE_DEVICE_TIMES=0 (GPU modes: the host side alone).

  host:  bench/trace_overhead.py --build build host [--np 2]
         symmem-bench --op all_reduce on the host backend (time per op, CPU clock)
  cuda-bench: bench/trace_overhead.py --build build cuda-bench [--np 2]
         symmem-bench --op all_reduce --dtype bf16 on the cuda backend (time per op, CUDA events)
  cuda:  bench/trace_overhead.py --build build cuda [--np 2]
         bench/gpu_allreduce_bench (eager): GPU time per call (CUDA events) and host enqueue
         time per call (host_us), bf16
  callgrind (one process): bench/trace_overhead.py --build build callgrind
         instructions per one-rank host all_reduce of 16 floats (3000 minus 1000 calls,
         deterministic) and wall-clock ns per call of the same loop

Prints a Markdown table: size, off, on, on - off (and the ratio)."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

MODES = {"off": {"SYMMEM_TRACE_BUFFER": "0"}, "on": {"SYMMEM_TRACE_BUFFER": "2000"},
         # The recorder without the kernels' device times (SYMMEM_TRACE_DEVICE_TIMES=0): what
         # the host side costs alone.
         "on-nodt": {"SYMMEM_TRACE_BUFFER": "2000", "SYMMEM_TRACE_DEVICE_TIMES": "0"}}


def run(cmd, env_extra, timeout=300):
    env = dict(os.environ, **env_extra)
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return r.stdout


def host_once(a, mode, sizes, backend="host", extra=()):
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as f:
        run([a.run, "-n", str(a.np), "--", a.bench_exe, "--backend", backend, "--op", "all_reduce",
             "-b", str(min(sizes)), "-e", str(max(sizes)), "-f", "4", "-n", str(a.iters), "-w", "50",
             *extra, "--json", f.name], dict(MODES[mode], SYMMEM_ALLOW_SHARED_GPU="1"))
        rows = [json.loads(l) for l in open(f.name) if l.strip()]
    return {r["bytes"]: {"us": r["time_median_us"]} for r in rows}


def cuda_bench_once(a, mode, sizes):
    return host_once(a, mode, sizes, "cuda", ("--dtype", "bf16"))


def cuda_once(a, mode, sizes):
    out = run([a.run, "-n", str(a.np), "--", a.gpu_bench, "--sizes", ",".join(map(str, sizes)),
               "--dtype", "bf16", "--algos", "auto", "--modes", "eager", "--iters", str(a.iters),
               "--repeats", "5"], dict(MODES[mode], SYMMEM_ALLOW_SHARED_GPU="1"))
    res = {}
    for line in out.splitlines():
        line = line.split("] ", 1)[-1]
        if line.startswith("{") and '"impl":"symmem"' in line:
            r = json.loads(line)
            res[r["bytes"]] = {"us": r["us"], "host_us": r["host_us"]}
    return res


CALLGRIND_SRC = r'''
#include <cstdlib>
#include <symmem/symmem.hpp>
int main(int argc, char** argv) {
  const int n = std::atoi(argv[1]);
  auto g = symmem::Group::create(std::make_shared<symmem::HashStore>(), 0, 1);
  auto buf = symmem::allocate(g, 64, symmem::Device::cpu());
  for (int i = 0; i < n; ++i) symmem::all_reduce(buf, 16, symmem::DType::f32, symmem::ReduceOp::sum);
  return 0;
}
'''


def callgrind(a):
    d = tempfile.mkdtemp(prefix="symmem-trace-cg-")
    src, exe = os.path.join(d, "loop.cpp"), os.path.join(d, "loop")
    open(src, "w").write(CALLGRIND_SRC)
    inc = [f"-I{a.source}/include", f"-I{a.build}/include"]
    subprocess.run(["g++", "-O2", "-std=c++20", *inc, src, "-o", exe, f"-L{a.build}", "-lsymmem",
                    f"-Wl,-rpath,{a.build}"], check=True)
    res = {}
    for mode in ("off", "on"):
        counts = {}
        for n in (1000, 3000):
            out = os.path.join(d, f"cg.{mode}.{n}")
            subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", exe,
                            str(n)], env=dict(os.environ, **MODES[mode]), capture_output=True,
                           check=True)
            total = [l for l in open(out) if l.startswith("summary:")][0].split()[1]
            counts[n] = int(total)
        res[mode] = (counts[3000] - counts[1000]) / 2000
    # Wall clock of the same loop, natively: 2,000,000 calls, best of 5 alternating runs.
    import time
    wall = {"off": [], "on": []}
    n = 2000000
    for i in range(5):
        for mode in (("off", "on") if i % 2 == 0 else ("on", "off")):
            t0 = time.perf_counter()
            subprocess.run([exe, str(n)], env=dict(os.environ, **MODES[mode]), check=True)
            wall[mode].append((time.perf_counter() - t0) * 1e9 / n)
    print("| recorder | instructions / call (callgrind) | ns / call (best of 5, 2M calls) |")
    print("|---|---|---|")
    for mode in ("off", "on"):
        print(f"| {mode} | {res[mode]:.0f} | {min(wall[mode]):.1f} |")
    print(f"| on - off | {res['on'] - res['off']:.0f} | {min(wall['on']) - min(wall['off']):.1f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["host", "cuda", "cuda-bench", "callgrind"])
    ap.add_argument("--build", default="build")
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--runs", type=int, default=6, help="runs per mode, alternating")
    ap.add_argument("--iters", type=int, default=500)
    ap.add_argument("--sizes", default="4096,65536,1048576")
    ap.add_argument("--no-device-times", action="store_true",
                    help="also the recorder on with SYMMEM_TRACE_DEVICE_TIMES=0 (GPU modes)")
    a = ap.parse_args()
    a.build = os.path.abspath(a.build)
    a.source = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    a.run = os.path.join(a.build, "tools", "run", "symmem-run")
    a.bench_exe = os.path.join(a.build, "tools", "bench", "symmem-bench")
    a.gpu_bench = os.path.join(a.build, "bench", "gpu_allreduce_bench")
    if a.what == "callgrind":
        return callgrind(a)
    sizes = [int(s) for s in a.sizes.split(",")]
    once = {"host": host_once, "cuda": cuda_once, "cuda-bench": cuda_bench_once}[a.what]
    modes = ["off", "on"] + (["on-nodt"] if a.no_device_times else [])
    runs = {m: [] for m in modes}
    for i in range(a.runs):
        for mode in (modes if i % 2 == 0 else modes[::-1]):
            runs[mode].append(once(a, mode, sizes))
    keys = ["us"] + (["host_us"] if a.what == "cuda" else [])
    print(f"{a.what}, {a.np} ranks, median of {a.runs} alternating runs per mode "
          f"({a.iters} iterations each)\n")
    nodt = "on-nodt" in modes
    print("| bytes | metric | recorder off | recorder on | on - off (us) | on / off |" +
          (" on, no device times | that - off (us) |" if nodt else ""))
    print("|---|---|---|---|---|---|" + ("---|---|" if nodt else ""))
    for b in sorted(runs["off"][0]):
        for k in keys:
            med = {m: statistics.median(r[b][k] for r in runs[m] if b in r) for m in modes}
            off, on = med["off"], med["on"]
            row = f"| {b} | {k} | {off:.3f} | {on:.3f} | {on - off:+.3f} | {on / off:.3f} |"
            if nodt:
                row += f" {med['on-nodt']:.3f} | {med['on-nodt'] - off:+.3f} |"
            print(row)


if __name__ == "__main__":
    main()
