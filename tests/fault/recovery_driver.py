#!/usr/bin/env python3
"""Recovery trials on the host backend (tests/fault/recovery_worker.cpp). Each trial starts a job
of N ranks under symmem-run --keep-going (shrink trials) or --restart-failed 1 (grow trials),
SIGKILLs one random rank at a random moment of a loop of verified all-reduces and all_to_all_v,
and checks that

  * every survivor gets PeerFailure (FAULT-RESULT), calls shrink(), and verifies an all-reduce and
    an all_to_all_v on the N-1 ranks left (RECOVERED);
  * grow trials: the restarted rank rejoins (REJOINED) and every rank verifies again on N ranks
    (GROWN);
  * symmem-run exits 0 (the failure tolerated) within the limit: no hang;
  * nothing is left behind: no socket under the job's SYMMEM_SOCKET_DIR, no process of the job,
    no new file in /dev/shm, no fd of the job's processes (they are all gone).

It prints time to error (kill -> PeerFailure), time to a working shrunk group (kill -> its
verification done) and, for grow trials, time to the whole group again (kill -> verification on
N ranks done), median / p95 / max, and where a survivor's recovery time goes (error -> old memory
freed -> shrink() returned -> first allocation on the shrunk group -> its first verified op ->
verified), and exits non-zero on any failed trial. A worker's last words (RECOVERY-SIGNAL,
RECOVERY-TERMINATE on stderr) are reported as problems, with the C library's own message (glibc's
"free(): invalid pointer" and the like, sent to stderr by LIBC_FATAL_STDERR_) and the first
crashed rank's backtrace, its frames named by addr2line where it is installed (the libraries'
internal functions are hidden from backtrace_symbols).
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fault_driver import leftovers  # noqa: E402


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


FRAME = re.compile(r"(/\S+)\(\+(0x[0-9a-f]+)\)\[0x[0-9a-f]+\]")
LIBC_WORDS = ("free(", "corrupted", "double free", "malloc", "munmap_chunk", "realloc(",
              "stack smashing", "terminate called")


def symbolize(line, cache={}):
    """A backtrace line 'lib(+0xOFF)[0x...]' with addr2line's 'function at file:line' appended."""
    m = FRAME.search(line)
    if not m or not os.path.exists(m.group(1)):
        return line
    key = (m.group(1), m.group(2))
    if key not in cache:
        try:
            out = subprocess.run(["addr2line", "-f", "-C", "-i", "-e", m.group(1), m.group(2)],
                                 capture_output=True, text=True, timeout=20).stdout.split("\n")
            pairs = [f"{out[i]} at {os.path.basename(out[i + 1])}"
                     for i in range(0, len(out) - 1, 2) if out[i] and out[i] != "??"]
            cache[key] = " <- ".join(pairs)
        except (OSError, subprocess.SubprocessError):
            cache[key] = ""
    return f"{line}  [{cache[key]}]" if cache[key] else line


def last_words(errs):
    """The C library's fatal messages and the first crashed rank's stderr from its
    RECOVERY-SIGNAL/-TERMINATE line on (its backtrace), frames named where possible."""
    out = [l for l in errs if any(w in l for w in LIBC_WORDS)]
    for i, line in enumerate(errs):
        m = re.match(r"(\[\d+\] )?.*RECOVERY-(SIGNAL|TERMINATE)", line)
        if m:
            prefix = m.group(1) or ""
            mine = [l for l in errs[i + 1:] if l.startswith(prefix)][:40]
            out += [symbolize(l) for l in mine]
            break
    return out


def run_trial(args, trial, rng, grow):
    victim = rng.randrange(args.ranks)
    sock_dir = tempfile.mkdtemp(prefix="symmem-recovery-")
    env = dict(os.environ)
    env.update({"SYMMEM_TIMEOUT_MS": str(args.timeout_ms), "SYMMEM_SOCKET_DIR": sock_dir,
                "SYMMEM_BACKEND": "host" if args.device == "cpu" else "auto"})
    if args.device == "cuda":
        env["SYMMEM_ALLOW_SHARED_GPU"] = "1"  # ranks may share a GPU (under MPS)
    env.pop("SYMMEM_RESTART_COUNT", None)
    env["LIBC_FATAL_STDERR_"] = "1"  # glibc's fatal messages to stderr, not the terminal
    shm_before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    policy = ["--restart-failed", "1"] if grow else ["--keep-going"]
    limit_s = args.timeout_ms / 1000 + 30
    cmd = [args.run, "-n", str(args.ranks), *policy, "--timeout", str(limit_s), "--",
           args.worker, "grow" if grow else "shrink", str(args.seconds), args.device]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines, errs, ready = [], [], {}
    ready_event = threading.Event()
    pids = set()

    def read_out():
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            m = re.search(r"READY rank=(\d+) pid=(\d+)", line)
            if m:
                ready[int(m.group(1))] = int(m.group(2))
                pids.add(int(m.group(2)))
                if len(ready) == args.ranks:
                    ready_event.set()

    def read_err():
        for line in proc.stderr:
            errs.append(line.rstrip("\n"))

    threads = [threading.Thread(target=f, daemon=True) for f in (read_out, read_err)]
    for t in threads:
        t.start()
    problems = []
    kill_ns = None
    if not ready_event.wait(30):
        problems.append("ranks never became ready")
    else:
        time.sleep(rng.uniform(0.02, 0.5))
        kill_ns = time.monotonic_ns()
        try:
            os.kill(ready[victim], signal.SIGKILL)
        except ProcessLookupError:
            problems.append("the victim was already gone")
    try:
        rc = proc.wait(timeout=limit_s + 30)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = proc.wait()
        problems.append("HANG: symmem-run did not exit")
    for t in threads:
        t.join(5)

    def field(kind, r):
        for line in lines:
            m = re.search(rf"{kind} rank={r} .*mono_ns=(\d+)", line)
            if m:
                return int(m.group(1)), line
        return None, None

    to_error, to_shrunk, to_grown = [], [], []
    phases = {name: [] for name, _, _ in PHASES}
    survivors = [r for r in range(args.ranks) if r != victim]
    for r in survivors:
        t_err, line = field("FAULT-RESULT", r)
        if t_err is None:
            problems.append(f"rank {r} printed no FAULT-RESULT")
            continue
        for name, a, b in PHASES:
            ta, _ = field(a, r)
            tb, _ = field(b, r)
            if ta is not None and tb is not None:
                phases[name].append((tb - ta) / 1e6)
        code = re.search(r"code=(\w+)", line).group(1)
        if code != "PeerFailure":
            problems.append(f"rank {r} failed with {code}: {line[:300]}")
        t_shr, _ = field("SHRUNK", r)
        t_rec, _ = field("RECOVERED", r)
        if args.max_error_ms and kill_ns is not None and (t_err - kill_ns) / 1e6 > args.max_error_ms:
            problems.append(f"rank {r} took {(t_err - kill_ns) / 1e6:.0f} ms to PeerFailure "
                            f"(> {args.max_error_ms} ms)")
        if t_shr is None or t_rec is None:
            problems.append(f"rank {r} did not recover")
        if kill_ns is not None:
            to_error.append((t_err - kill_ns) / 1e6)
            if t_rec is not None:
                to_shrunk.append((t_rec - kill_ns) / 1e6)
        t_grown, _ = field("GROWN", r)
        if grow and t_grown is None:
            problems.append(f"rank {r} did not grow back")
        elif grow and kill_ns is not None:
            to_grown.append((t_grown - kill_ns) / 1e6)
    if grow:
        m = [l for l in lines if re.search(rf"REJOINED rank={victim} .*world={args.ranks}", l)]
        if not m:
            problems.append(f"the restarted rank {victim} did not rejoin")
    for line in lines:
        if "RECOVERY-ERROR" in line or "FAULT-DONE" in line:
            problems.append(line[:400])
    for line in errs:
        if "RECOVERY-SIGNAL" in line or "RECOVERY-TERMINATE" in line:
            problems.append(line[:400])
    if rc != 0:
        problems.append(f"symmem-run exited {rc}")
    problems += leftovers(sock_dir, pids, shm_before)
    return {"trial": trial, "grow": grow, "victim": victim, "rc": rc, "to_error_ms": to_error,
            "to_shrunk_ms": to_shrunk, "to_grown_ms": to_grown, "phases_ms": phases,
            "problems": problems,
            "tail": (lines[-12:] + errs[-12:] + last_words(errs)) if problems else []}


# Where a survivor's recovery time goes: (name, line it starts at, line it ends at).
PHASES = [("error -> old memory freed", "FAULT-RESULT", "FREED"),
          ("freed -> shrink() returned", "FREED", "SHRUNK"),
          ("shrunk -> first allocation", "SHRUNK", "ALLOCATED"),
          ("allocated -> first verified op", "ALLOCATED", "FIRST-OP"),
          ("first op -> verified", "FIRST-OP", "RECOVERED")]


def summary(name, xs):
    if not xs:
        return f"{name}: no samples"
    return (f"{name}: median {statistics.median(xs):.0f} ms, p95 {pct(xs, 95):.0f} ms, "
            f"max {max(xs):.0f} ms ({len(xs)} samples)")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--run", required=True, help="path to symmem-run")
    ap.add_argument("--worker", required=True, help="path to symmem_recovery_worker")
    ap.add_argument("--trials", type=int, default=50, help="shrink trials")
    ap.add_argument("--grow-trials", type=int, default=10)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--timeout-ms", type=int, default=10000)
    ap.add_argument("--seconds", type=float, default=30.0, help="how long each rank loops")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--json", help="write per-trial results here")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="cuda: device memory on the cuda backend (ranks share GPUs; run MPS)")
    ap.add_argument("--max-error-ms", type=float, default=0,
                    help="fail a trial whose time to PeerFailure exceeds this (0: no bound)")
    args = ap.parse_args()
    if args.device == "cuda":
        try:
            import ctypes
            cuda = ctypes.CDLL("libcuda.so.1")
            n = ctypes.c_int(0)
            if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(n)) != 0 or n.value < 1:
                raise OSError("no CUDA device")
        except OSError as e:
            print(f"skipped: no GPU ({e})")
            return 77
    seed = args.seed if args.seed is not None else int(time.time())
    rng = random.Random(seed)
    print(f"recovery ({args.device}): {args.trials} shrink + {args.grow_trials} grow trials, "
          f"{args.ranks} ranks, timeout {args.timeout_ms} ms, seed {seed}", flush=True)
    results = []
    for t in range(args.trials + args.grow_trials):
        grow = t >= args.trials
        r = run_trial(args, t, rng, grow)
        results.append(r)
        status = "ok" if not r["problems"] else "FAIL"
        e = ", ".join(f"{x:.0f}" for x in r["to_error_ms"])
        s = ", ".join(f"{x:.0f}" for x in r["to_shrunk_ms"])
        print(f"trial {t:3d} {'grow' if grow else 'shrink':6s} kill rank {r['victim']}: {status}"
              f"  to-error ms=[{e}] to-shrunk ms=[{s}]", flush=True)
        for p in r["problems"]:
            print(f"    problem: {p}", flush=True)
        for l in r["tail"]:
            print(f"    out: {l}", flush=True)
    failed = sum(bool(r["problems"]) for r in results)
    hangs = sum(any(p.startswith("HANG") for p in r["problems"]) for r in results)
    print(summary("time to error", [x for r in results for x in r["to_error_ms"]]))
    print(summary("time to a working shrunk group", [x for r in results for x in r["to_shrunk_ms"]]))
    print(summary("time to the whole group again (grow trials: restart, rejoin, verify)",
                  [x for r in results for x in r["to_grown_ms"]]))
    print("where a survivor's recovery time goes:")
    for name, _, _ in PHASES:
        print("  " + summary(name, [x for r in results for x in r["phases_ms"][name]]))
    print(f"hangs: {hangs}; failed trials: {failed} of {len(results)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"seed": seed, "trials": results}, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
