#!/usr/bin/env python3
"""Compare symmem-bench's small all-reduce under symmem-run and under Open MPI's mpirun.

Runs `symmem-bench --backend host -b SIZE -e SIZE` RUNS times under each launcher on this machine
(the launchers alternate, so that noise from other programs falls on both alike), reads each
run's time(us) (the mean per iteration) and its iterations' median and max from --json, and
prints a table of the median and the spread of each launcher, with the machine's load average
before and after.

    bench/launcher_compare.py                      # build/ of this checkout, 2 ranks, 10 runs
    bench/launcher_compare.py --build build --runs 10 --np 2 --unbound --check

symmem-run binds each rank to a core of its own by default (--bind-to, docs/launching.md);
mpirun (Open MPI) binds to a core by default for 2 ranks. --unbound adds both launchers without
binding (symmem-run --bind-to none, mpirun --bind-to none) for reference. --check exits 1 unless
symmem-run's median is within 1.2x of mpirun's and no symmem-run run is more than 3x its median.
"""

import argparse
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile


def free_port_pair():
    """A port P with P and P + 1 free now (rank 0 hosts symmem's store at MASTER_PORT + 1), drawn
    below Linux's ephemeral range so that outgoing connections do not take P + 1 meanwhile."""
    for _ in range(200):
        p = random.randrange(20000, 32000)
        try:
            with socket.socket() as b, socket.socket() as c:
                b.bind(("127.0.0.1", p))
                c.bind(("127.0.0.1", p + 1))
            return p
        except OSError:
            continue
    raise RuntimeError("no free pair of ports")


def load():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def clean_env():
    """This environment without any launcher's variables (the script may itself run under one)."""
    drop = ("SYMMEM_", "OMPI_", "PMIX_", "SLURM_")
    keep = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
              "MASTER_PORT"):
        keep.pop(k, None)
    return keep


def launch_cmd(kind, args, bench_args):
    if kind.startswith("symmem-run"):
        cmd = [args.symmem_run, "-n", str(args.np)]
        if kind.endswith("none"):
            cmd += ["--bind-to", "none"]
        return cmd + ["--", args.symmem_bench] + bench_args
    port = free_port_pair()
    cmd = [args.mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(args.np),
           "-x", "MASTER_ADDR=127.0.0.1", "-x", f"MASTER_PORT={port}"]
    if kind.endswith("none"):
        cmd += ["--bind-to", "none"]
    return cmd + [args.symmem_bench] + bench_args


def one_run(kind, args):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "row.json")
        bench_args = ["--backend", "host", "-b", str(args.size), "-e", str(args.size),
                      "--json", out] + args.bench_args
        cmd = launch_cmd(kind, args, bench_args)
        p = subprocess.run(cmd, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=args.timeout)
        if p.returncode != 0 or not os.path.exists(out):
            raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout}{p.stderr}")
        with open(out) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        if len(rows) != 1 or rows[0].get("wrong", 0) != 0:
            raise RuntimeError(f"unexpected rows from {' '.join(cmd)}: {rows}")
        return rows[0]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(here, "..", "build"),
                    help="build directory holding tools/run/symmem-run, tools/bench/symmem-bench")
    ap.add_argument("--runs", type=int, default=10, help="runs per launcher (default 10)")
    ap.add_argument("--np", type=int, default=2, help="ranks (default 2)")
    ap.add_argument("--size", type=int, default=4096, help="bytes per rank (default 4096)")
    ap.add_argument("--mpirun", default=shutil.which("mpirun") or "mpirun")
    ap.add_argument("--unbound", action="store_true",
                    help="also run both launchers with --bind-to none")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 unless symmem-run's median <= 1.2x mpirun's and every "
                         "symmem-run run <= 3x its median")
    ap.add_argument("--timeout", type=float, default=120, help="seconds per run")
    ap.add_argument("bench_args", nargs="*", help="more symmem-bench arguments (after --)")
    args = ap.parse_args()
    args.symmem_run = os.path.join(args.build, "tools", "run", "symmem-run")
    args.symmem_bench = os.path.join(args.build, "tools", "bench", "symmem-bench")
    for p in (args.symmem_run, args.symmem_bench):
        if not os.access(p, os.X_OK):
            sys.exit(f"launcher_compare: {p} not found; build first (cmake --build {args.build})")
    kinds = ["symmem-run", "mpirun"]
    if shutil.which(args.mpirun) is None:
        print(f"launcher_compare: {args.mpirun} not found: symmem-run only", file=sys.stderr)
        kinds = ["symmem-run"]
    if args.unbound:
        kinds += [k + " --bind-to none" for k in kinds]

    load_before = load()
    rows = {k: [] for k in kinds}
    for _ in range(args.runs):
        for k in kinds:
            rows[k].append(one_run(k, args))
    times = {k: [r["time_us"] for r in v] for k, v in rows.items()}
    load_after = load()

    print(f"# symmem-bench --backend host -b {args.size} -e {args.size}, {args.np} ranks, "
          f"{args.runs} runs per launcher (alternating), time(us) = each run's mean per "
          f"iteration")
    print(f"# {os.cpu_count()} CPUs; load average before: {load_before}, after: {load_after}")
    print()
    print("| launcher | median (us) | min (us) | max (us) | max / median | "
          "iteration median (us) | slowest iteration (us) | runs (us) |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for k in kinds:
        t = times[k]
        med = statistics.median(t)
        it_med = statistics.median(r["time_median_us"] for r in rows[k])
        it_max = max(r["time_max_us"] for r in rows[k])
        print(f"| {k} | {med:.2f} | {min(t):.2f} | {max(t):.2f} | {max(t) / med:.2f} | "
              f"{it_med:.2f} | {it_max:.1f} | " + " ".join(f"{x:.2f}" for x in t) + " |")
    print()
    print("# median, min, max: over the runs' time(us). iteration median: the median over runs of")
    print("# each run's median iteration; slowest iteration: the slowest single iteration of any")
    print("# run (one slow iteration of 20 lifts a run's mean: noise, not the launcher)")
    if "mpirun" in times:
        ratio = statistics.median(times["symmem-run"]) / statistics.median(times["mpirun"])
        worst = max(times["symmem-run"]) / statistics.median(times["symmem-run"])
        ok = ratio <= 1.2 and worst <= 3.0
        print()
        print(f"# symmem-run median / mpirun median = {ratio:.2f} (want <= 1.2); "
              f"symmem-run's slowest run / its median = {worst:.2f} (want <= 3): "
              f"{'PASS' if ok else 'FAIL'}")
        if args.check and not ok:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
