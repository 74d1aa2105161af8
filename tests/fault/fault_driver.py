#!/usr/bin/env python3
"""Fault injection on the host backend: each trial starts a job of N ranks under symmem-run,
kills one random rank with SIGKILL at a random moment (during group rendezvous, an allocation
rendezvous, a collective or a barrier), and checks that

  * every surviving rank ends with PeerFailure or Timeout, within the configured timeout plus a
    margin, and says so (FAULT-RESULT line);
  * symmem-run exits non-zero with a summary line naming the killed rank;
  * nothing is left behind: no socket or socket directory under the job's SYMMEM_SOCKET_DIR,
    no process of the job, no new file in /dev/shm.

It prints the distribution of time-to-error (kill -> error, CLOCK_MONOTONIC) and exits non-zero
on any failed trial.
"""
import argparse
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

MODES = ["startup", "rendezvous", "collective", "barrier"]


def children_of(pid):
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1].split()[0] != "Z"
    except OSError:
        return False


def leftovers(sock_dir, pids, shm_before):
    """What a finished job left behind: files in its socket dir, live processes, new /dev/shm
    files. Removes the (empty) socket dir."""
    problems = []
    left = [os.path.join(root, n) for root, dirs, files in os.walk(sock_dir) for n in dirs + files]
    if left:
        problems.append(f"left behind in the socket dir: {left}")
    for pid in pids:
        if pid and alive(pid):
            problems.append(f"process {pid} still alive")
    shm_after = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    if shm_after - shm_before:
        problems.append(f"new files in /dev/shm: {sorted(shm_after - shm_before)}")
    try:
        os.rmdir(sock_dir)
    except OSError:
        pass
    return problems


def run_trial(args, trial, rng):
    mode = MODES[trial % len(MODES)]
    victim = rng.randrange(args.ranks)
    sock_dir = tempfile.mkdtemp(prefix="symmem-fault-")
    env = dict(os.environ)
    env.update({
        "SYMMEM_TIMEOUT_MS": str(args.timeout_ms),
        "SYMMEM_SOCKET_DIR": sock_dir,
        "SYMMEM_BACKEND": "host",
    })
    shm_before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    worker_mode = "barrier" if mode == "startup" else mode
    cmd = [args.run, "-n", str(args.ranks), "--fail-grace", str(args.timeout_ms / 1000 + 10),
           "--timeout", str(args.timeout_ms / 1000 + 30), "--", args.worker, worker_mode,
           str(args.seconds)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines, errs = [], []
    ready = {}
    ready_event = threading.Event()

    def read_out():
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            m = re.search(r"READY rank=(\d+) pid=(\d+)", line)
            if m:
                ready[int(m.group(1))] = int(m.group(2))
                if len(ready) == args.ranks:
                    ready_event.set()

    def read_err():
        for line in proc.stderr:
            errs.append(line.rstrip("\n"))

    t_out = threading.Thread(target=read_out, daemon=True)
    t_err = threading.Thread(target=read_err, daemon=True)
    t_out.start()
    t_err.start()

    problems = []
    kill_ns = None
    victim_pid = None
    if mode == "startup":
        # Kill during the group rendezvous: as soon as the rank's process exists.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and victim_pid is None:
            kids = sorted(children_of(proc.pid))
            if len(kids) == args.ranks:
                victim_pid = kids[victim]  # ranks are started in order
            time.sleep(0.001)
        time.sleep(rng.uniform(0.0, 0.05))
    else:
        if not ready_event.wait(30):
            problems.append("ranks never became ready")
        else:
            victim_pid = ready.get(victim)
            time.sleep(rng.uniform(0.02, 0.6))
    if victim_pid is not None:
        kill_ns = time.monotonic_ns()
        try:
            os.kill(victim_pid, signal.SIGKILL)
        except ProcessLookupError:
            problems.append(f"victim pid {victim_pid} was already gone")
    try:
        rc = proc.wait(timeout=args.timeout_ms / 1000 + 60)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = proc.wait()
        problems.append("symmem-run did not exit")
    t_out.join(5)
    t_err.join(5)

    times = []
    results = {}
    for line in lines:
        m = re.search(r"FAULT-RESULT rank=(-?\d+) code=(\w+) mono_ns=(\d+) what=(.*)", line)
        if m:
            results[int(m.group(1))] = (m.group(2), int(m.group(3)), m.group(4))
    limit_ns = (args.timeout_ms + args.margin_ms) * 1_000_000
    survivors = [r for r in range(args.ranks) if r != victim]
    for r in survivors:
        if r not in results:
            if any(f"FAULT-DONE rank={r}" in l for l in lines):
                problems.append(f"rank {r} finished without noticing the fault")
            else:
                problems.append(f"rank {r} printed no FAULT-RESULT")
            continue
        code, t, what = results[r]
        if code not in ("PeerFailure", "Timeout"):
            problems.append(f"rank {r} failed with {code}: {what}")
        if kill_ns is not None:
            dt = t - kill_ns
            times.append(dt / 1e6)
            if dt > limit_ns:
                problems.append(f"rank {r} took {dt / 1e6:.0f} ms (> timeout + margin)")
    if rc == 0:
        problems.append("symmem-run exited 0")
    if not any(re.search(rf"symmem-run: rank {victim} .*(signal 9|Killed)", e) for e in errs):
        problems.append(f"no symmem-run summary naming rank {victim}: {errs[-3:]}")
    problems += leftovers(sock_dir, [victim_pid] + list(ready.values()), shm_before)
    return {"trial": trial, "mode": mode, "victim": victim, "rc": rc, "times_ms": times,
            "codes": sorted({v[0] for v in results.values()}), "problems": problems,
            "stderr_tail": errs[-5:] if problems else []}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--run", required=True, help="path to symmem-run")
    ap.add_argument("--worker", required=True, help="path to symmem_fault_worker")
    ap.add_argument("--trials", type=int, default=50)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--timeout-ms", type=int, default=10000)
    ap.add_argument("--margin-ms", type=int, default=3000)
    ap.add_argument("--seconds", type=float, default=30.0, help="how long each rank loops")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--json", help="write per-trial results here")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else int(time.time())
    rng = random.Random(seed)
    print(f"fault injection: {args.trials} trials, {args.ranks} ranks, timeout {args.timeout_ms} ms,"
          f" seed {seed}", flush=True)
    results = []
    failed = 0
    for t in range(args.trials):
        r = run_trial(args, t, rng)
        results.append(r)
        status = "ok" if not r["problems"] else "FAIL"
        failed += bool(r["problems"])
        ts = ", ".join(f"{x:.0f}" for x in r["times_ms"])
        print(f"trial {t:3d} {r['mode']:10s} kill rank {r['victim']}: {status}  codes={r['codes']}"
              f" time-to-error ms=[{ts}]", flush=True)
        for p in r["problems"]:
            print(f"    problem: {p}", flush=True)
        for e in r["stderr_tail"]:
            print(f"    stderr: {e}", flush=True)
    all_times = [x for r in results for x in r["times_ms"]]
    if all_times:
        q = statistics.quantiles(all_times, n=20) if len(all_times) > 1 else all_times * 19
        print(f"time-to-error over {len(all_times)} survivor reports: min {min(all_times):.0f} ms,"
              f" median {statistics.median(all_times):.0f} ms, p95 {q[18]:.0f} ms,"
              f" max {max(all_times):.0f} ms (timeout {args.timeout_ms} ms)")
    by_mode = {}
    for r in results:
        by_mode.setdefault(r["mode"], []).extend(r["times_ms"])
    for m, ts in by_mode.items():
        if ts:
            print(f"  {m:10s}: median {statistics.median(ts):.0f} ms, max {max(ts):.0f} ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"seed": seed, "results": results}, f, indent=1)
    print(f"{args.trials - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
