#!/usr/bin/env python3
"""Flight-recorder scenarios end to end (issue #18): 3 ranks through symmem-run with
SYMMEM_TRACE_DIR, then symmem-trace on the dumps.

  stop:     rank 2 stops (SIGSTOP) before its 50th all_reduce; ranks 0 and 1 time out and dump;
            symmem-trace's first line names rank 2 and that all_reduce's sequence number.
  mismatch: rank 1 passes a different count; every rank refuses the op, the exit dumps show
            it and symmem-trace reports the disagreement.
  ok:       SIGUSR1 dumps; a clean run dumps at exit; symmem-trace finds nobody behind and
            writes a Perfetto timeline with one track per rank; SYMMEM_TRACE_FILE has one
            metrics line per all_reduce of every rank.
  abort:    every rank aborts its group after 10 all_reduces: each dumps with reason "abort"
            and the abort's text, holding its 10 completed all_reduces; the exit dump keeps it;
            the next op fails with Aborted.
  gpu_ok, gpu_stop: ok and stop with the buffer on cuda:0 (the cuda backend, 3 ranks sharing
            one GPU): the dumps carry the kernels' device times, the exit dump has every
            kernel's end (the last one's through the recorder's flush) and a metrics line for
            each all_reduce; a stopped rank is named from the GPU ranks' timeout dumps. Exit 77
            (skipped) when the cuda backend cannot serve.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ALL_REDUCES = 50


SKIP = 77


def run_ranks(args, mode, n, trace_dir, timeout_ms, gpu=False, **extra_env):
    env = dict(os.environ, SYMMEM_TRACE_DIR=str(trace_dir), SYMMEM_TIMEOUT_MS=str(timeout_ms),
               SYMMEM_BACKEND="cuda" if gpu else "host", **extra_env)
    if gpu:
        env["SYMMEM_ALLOW_SHARED_GPU"] = "1"
    env.pop("SYMMEM_TRACE_BUFFER", None)
    if "SYMMEM_TRACE_FILE" not in extra_env:
        env.pop("SYMMEM_TRACE_FILE", None)
    # --fail-grace: the ranks that time out each dump; under load the second's deadline can
    # come a moment after the first rank's exit, which would otherwise stop it before it dumps.
    cmd = [args.run, "-n", "3", "--timeout", "60", "--fail-grace", "5", "--", args.worker, mode,
           str(n)]
    if gpu:
        cmd.append("cuda")
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    if gpu and "skip=" in r.stdout:
        line = next(l for l in r.stdout.splitlines() if "skip=" in l)
        print("SKIP: the cuda backend cannot serve here:", line.split("skip=", 1)[1])
        sys.exit(SKIP)
    return r


def trace(args, trace_dir, *extra):
    r = subprocess.run([sys.executable, args.trace, str(trace_dir), *extra], capture_output=True,
                       text=True, timeout=60)
    return r


def fail(msg, *outputs):
    print("FAIL:", msg)
    for o in outputs:
        print(o)
    sys.exit(1)


def scenario_stop(args, d, gpu=False):
    r = run_ranks(args, "stop", ALL_REDUCES, d, 2000, gpu)
    if r.returncode == 0:
        fail("the run with a stopped rank succeeded", r.stdout, r.stderr)
    files = sorted(p.name for p in d.glob("rank*.json"))
    if "rank2.json" in files or "rank0.json" not in files or "rank1.json" not in files:
        fail(f"expected dumps of ranks 0 and 1 only, found {files}", r.stdout, r.stderr)
    d0 = json.loads((d / "rank0.json").read_text())
    if d0["reason"] not in ("timeout", "peer_failure"):
        fail(f"rank 0 dumped for {d0['reason']!r}", json.dumps(d0)[:2000])
    # The sequence number of the 50th all_reduce (the allocation is numbered too).
    ars = [e for e in d0["groups"][0]["entries"] if e["op"] == "all_reduce"]
    if len(ars) < ALL_REDUCES:
        fail(f"rank 0 recorded {len(ars)} all_reduces, expected {ALL_REDUCES}")
    stuck = ars[ALL_REDUCES - 1]
    if gpu:
        # The kernel's wait timed out (it marks its device-times slot); the host learnt it at a
        # later call. Its predecessor completed on the GPU.
        if stuck["state"] != "failed" or not stuck["start_ns"] or \
                ars[ALL_REDUCES - 2]["state"] != "completed":
            fail(f"rank 0's 49th and 50th all_reduce: {ars[ALL_REDUCES - 2:ALL_REDUCES]}")
    elif stuck["state"] != "failed" or 2 not in stuck["waiting_for"]:
        fail(f"rank 0's 50th all_reduce: {stuck}")
    t = trace(args, d)
    first = t.stdout.splitlines()[0] if t.stdout else ""
    want = f"seq {stuck['seq']}"
    if not first.startswith("rank 2 ") or want not in first or "all_reduce" not in first:
        fail(f"symmem-trace's first line should name rank 2 and {want}: {first!r}", t.stdout,
             t.stderr)
    if t.returncode == 0:
        fail("symmem-trace exited 0 on a hang")
    print("gpu_stop:" if gpu else "stop:", first)


def scenario_mismatch(args, d):
    r = run_ranks(args, "mismatch", 10, d, 5000)
    if r.returncode != 0 or r.stdout.count("refused=InvalidArgument") != 3:
        fail("every rank should refuse the mismatched op and exit cleanly", r.stdout, r.stderr)
    files = sorted(p.name for p in d.glob("rank*.json"))
    if len(files) != 3:
        fail(f"expected 3 dumps, found {files}", r.stdout, r.stderr)
    t = trace(args, d)
    out = t.stdout
    if "disagree" not in out or "count" not in out or "1024" not in out or "512" not in out:
        fail("symmem-trace did not report the count disagreement", out, t.stderr)
    print("mismatch:", out.splitlines()[0])


def scenario_abort(args, d):
    r = run_ranks(args, "abort", 10, d, 5000)
    if r.returncode != 0 or r.stdout.count("after-abort=Aborted") != 3:
        fail("every rank should abort and then get Aborted", r.stdout, r.stderr)
    for rank in range(3):
        dump = json.loads((d / f"rank{rank}.json").read_text())
        if dump["reason"] != "abort" or "flight test abort" not in (dump.get("error") or "") or \
                f"aborted by rank {rank}" not in dump["error"]:
            fail(f"rank {rank}'s dump: reason {dump['reason']!r}, error {dump.get('error')!r}")
        done = [e for e in dump["groups"][0]["entries"]
                if e["op"] == "all_reduce" and e["state"] == "completed"]
        if len(done) != 10:
            fail(f"rank {rank}'s abort dump holds {len(done)} completed all_reduces, not 10")
    print("abort: 3 dumps with reason abort")


def gpu_trace_checks():
    """scripts/check-gpu-trace.py as a module (its Perfetto nesting check)."""
    import importlib.util
    path = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "check-gpu-trace.py"
    spec = importlib.util.spec_from_file_location("check_gpu_trace", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def check_metrics(path, n_ranks, n_ops, backend="host"):
    """SYMMEM_TRACE_FILE: one JSON line per completed all_reduce of every rank (the worker's
    1024 floats), busbw = algbw * 2 (n - 1) / n."""
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    ars = [m for m in lines if m["op"] == "all_reduce"]
    per_rank = {r: [m for m in ars if m["rank"] == r] for r in range(n_ranks)}
    for r, ms in per_rank.items():
        if len(ms) != n_ops:
            fail(f"metrics: rank {r} has {len(ms)} all_reduce lines, expected {n_ops}",
                 path.read_text()[:2000])
        if [m["seq"] for m in ms] != sorted(m["seq"] for m in ms):
            fail(f"metrics: rank {r}'s lines are out of order")
    for m in ars:
        want = m["algbw_GBps"] * 2 * (n_ranks - 1) / n_ranks
        if (m["bytes"] != 4096 or m["dtype"] != "f32" or m["count"] != 1024 or m["us"] <= 0
                or m["backend"] != backend or m["group"] != "g0"
                or abs(m["algbw_GBps"] - 4096 / (m["us"] * 1e3)) > 1e-3 * m["algbw_GBps"] + 1e-4
                or abs(m["busbw_GBps"] - want) > 1e-3 * want + 1e-4):
            fail(f"metrics line wrong: {m}")
    return len(lines)


def scenario_ok(args, d, gpu=False):
    metrics = d / "metrics.jsonl"
    r = run_ranks(args, "ok", 20, d, 5000 if not gpu else 30000, gpu,
                  SYMMEM_TRACE_FILE=str(metrics))
    if r.returncode != 0:
        fail("the clean run failed", r.stdout, r.stderr)
    n_metrics = check_metrics(metrics, 3, 20, "cuda" if gpu else "host")
    if r.stdout.count("SIGNAL-DUMP") != 3:
        fail("SIGUSR1 did not dump on every rank", r.stdout, r.stderr)
    files = sorted(p.name for p in d.glob("rank*.json"))
    if files != ["rank0.json", "rank1.json", "rank2.json"]:
        fail(f"expected an exit dump of every rank, found {files}")
    for f in files:
        j = json.loads((d / f).read_text())
        g = j["groups"][0]
        if j["reason"] != "exit" or g["last_completed"] != g["last_enqueued"]:
            fail(f"{f}: reason {j['reason']}, last_completed {g['last_completed']}, "
                 f"last_enqueued {g['last_enqueued']}")
        ars = [e for e in g["entries"] if e["op"] == "all_reduce"]
        if gpu and not all(e["state"] == "completed" and e["device"] == "cuda:0" and
                           0 < e["start_ns"] <= e["end_ns"] for e in ars):
            fail(f"{f}: GPU all_reduces without device start/end at exit: "
                 f"{[e for e in ars if e['state'] != 'completed'][:3]}")
    t = trace(args, d)
    if t.returncode != 0 or not t.stdout.startswith("no rank is behind"):
        fail("symmem-trace found a problem in a clean run", t.stdout, t.stderr)
    perfetto = d / "timeline.json"
    t = trace(args, d, "--perfetto", str(perfetto))
    events = json.loads(perfetto.read_text())["traceEvents"]
    slices = [e for e in events if e.get("ph") == "X"]
    if len({e["pid"] for e in slices}) != 3 or len(slices) < 3 * 20:
        fail(f"perfetto: {len(slices)} slices on pids {sorted({e['pid'] for e in slices})}")
    bad = gpu_trace_checks().overlaps(slices)
    if bad:
        fail("perfetto: slices overlap without nesting (Perfetto would leave them out)", *bad[:5])
    print("gpu_ok:" if gpu else "ok:", len(slices), "slices,", n_metrics, "metrics lines")


def scenario_gpu_ok(args, d):
    scenario_ok(args, d, gpu=True)


def scenario_gpu_stop(args, d):
    scenario_stop(args, d, gpu=True)
    # symmem-run killed the stopped rank (SIGKILL): give MPS time to tear that client down
    # before the next process opens the GPU (seen on an H200: new clients failed for seconds).
    time.sleep(10)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", required=True)
    ap.add_argument("--worker", required=True)
    ap.add_argument("--trace", required=True, help="the symmem-trace script")
    ap.add_argument("scenarios", nargs="*", default=["stop", "mismatch", "ok", "abort"])
    args = ap.parse_args()
    for s in args.scenarios:
        with tempfile.TemporaryDirectory(prefix=f"symmem-flight-{s}-") as tmp:
            globals()[f"scenario_{s}"](args, pathlib.Path(tmp))
    print("PASS")


if __name__ == "__main__":
    main()
