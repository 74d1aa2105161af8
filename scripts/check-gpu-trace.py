#!/usr/bin/env python3
"""Checks the flight-recorder dumps of a GPU run (issue #18, NOTE [device timestamps]):

  check-gpu-trace.py DIR --ranks N [--trace-tool PATH] [--perfetto OUT.json] [--metrics FILE]

- DIR holds rank0.json .. rank<N-1>.json, each with GPU entries (device "cuda:k");
- every rank has GPU entries completed by their kernel's device times: start_ns <= end_ns,
  durations under 10 s, start_ns after the host enqueue minus the clock calibration's slack
  (5 ms) and end_ns before the dump's time;
- symmem-trace DIR exits 0 (no rank behind) and --perfetto writes JSON with one process
  track per rank and complete slices ("ph": "X") on each, nested or apart on every thread
  track (Perfetto does not draw slices that overlap without nesting);
- with --metrics FILE (the run's SYMMEM_TRACE_FILE): every GPU entry with device times has its
  metrics line, whose "us" is that entry's device end - start (allocations, which the host
  waits for: end - enqueue);
- an exit dump has no GPU entry left "started" (every kernel's end reached its slot).
Prints per rank the number of GPU entries, how many carry device times, and the median device
duration per op and size. Exit 1 on any failure."""
import argparse
import collections
import json
import os
import statistics
import subprocess
import sys


def overlaps(slices):
    """Slices of one thread track that overlap without nesting (Perfetto leaves them out)."""
    out = []
    tracks = collections.defaultdict(list)
    for e in slices:
        tracks[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"], e["name"]))
    for key, v in tracks.items():
        v.sort(key=lambda x: (x[0], -x[1]))
        stack = []
        for b, f, name in v:
            while stack and stack[-1][1] <= b:
                stack.pop()
            if stack and f > stack[-1][1] + 1e-3:
                out.append(f"track {key}: {name} [{b}, {f}] overlaps {stack[-1][2]} "
                           f"[{stack[-1][0]}, {stack[-1][1]}] without nesting")
            stack.append((b, f, name))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--trace-tool",
                    default=os.path.join(os.path.dirname(__file__), "..", "tools", "trace",
                                         "symmem-trace"))
    ap.add_argument("--perfetto", default=None)
    ap.add_argument("--metrics", default=None)
    a = ap.parse_args()
    metrics = {}
    if a.metrics:
        for line in open(a.metrics):
            m = json.loads(line)
            metrics[(m["rank"], m["group"], m["seq"])] = m
    bad = []
    durations = collections.defaultdict(list)
    for r in range(a.ranks):
        path = os.path.join(a.dir, f"rank{r}.json")
        if not os.path.exists(path):
            bad.append(f"{path} missing")
            continue
        d = json.load(open(path))
        gpu = [e for g in d["groups"] for e in g["entries"] if e["device"].startswith("cuda")]
        timed = [e for e in gpu if e["start_ns"] and e["end_ns"]]
        for e in timed:
            if not (e["start_ns"] <= e["end_ns"] and e["end_ns"] - e["start_ns"] < 10e9):
                bad.append(f"rank {r} seq {e['seq']}: start {e['start_ns']} end {e['end_ns']}")
            if e["start_ns"] < e["enqueue_ns"] - 5e6 or e["end_ns"] > d["time_ns"]:
                bad.append(f"rank {r} seq {e['seq']}: device times outside [enqueue - 5 ms, dump]:"
                           f" enqueue {e['enqueue_ns']} start {e['start_ns']} end {e['end_ns']}"
                           f" dump {d['time_ns']}")
            if e["state"] != "completed":
                bad.append(f"rank {r} seq {e['seq']}: device times but state {e['state']}")
            durations[(e["op"], e["bytes"])].append((e["end_ns"] - e["start_ns"]) / 1e3)
        if a.metrics:
            group_of = {id(e): g["name"] for g in d["groups"] for e in g["entries"]}
            missing = 0
            for e in timed:
                m = metrics.get((r, group_of[id(e)], e["seq"]))
                if m is None:
                    missing += 1
                    continue
                # Host-timed allocations: the line converts one tick difference with the
                # tick rate fitted when it is written, the dump two absolute times with the rate
                # fitted at the dump (NOTE [recorder clock]). The two rates differ by a clock
                # pair's read jitter over the time since the anchor, relatively up to about
                # 1e-4 early in a run: 12 ns apart on a 5.6 ms allocation was seen on an H100.
                # Hence 10 ns plus 2e-4 of an allocation's duration. Kernels' times are the
                # device's own ns in both: 10 ns.
                alloc = e["op"] == "alloc"
                dur = (e["end_ns"] - (e["enqueue_ns"] if alloc else e["start_ns"])) / 1e3
                tolerance = 0.01 + (2e-4 * dur if alloc else 0)
                if abs(m["us"] - dur) > tolerance or m["backend"] != "cuda" or \
                        m["op"] != e["op"] or m["bytes"] != e["bytes"]:
                    bad.append(f"rank {r} seq {e['seq']}: metrics line {m} does not match the"
                               f" dump's entry {e}")
            print(f"rank {r}: {len(timed) - missing} of {len(timed)} timed GPU entries have"
                  f" their metrics line")
            if missing:
                bad.append(f"rank {r}: {missing} timed GPU entries without a metrics line")
        # At exit every kernel has ended, the last one's end included (it is parked in device
        # memory until the recorder's flush: NOTE [device timestamps]).
        running = [e["seq"] for e in gpu if e["state"] == "started"]
        if d["reason"] == "exit" and running:
            bad.append(f"rank {r}: exit dump with GPU entries still 'started': seq {running[:10]}")
        lag = [(e["start_ns"] - e["enqueue_ns"]) / 1e3 for e in timed]
        print(f"rank {r}: reason {d['reason']}, {len(gpu)} GPU entries, {len(timed)} with device "
              f"start/end" + (f", enqueue->device start median {statistics.median(lag):.1f} us"
                              if lag else ""))
        if not timed:
            bad.append(f"rank {r}: no GPU entry carries device times")
    print("\nmedian device time per op (all ranks):")
    for (op, b), v in sorted(durations.items()):
        print(f"  {op:16s} {b:>10d} B  {statistics.median(v):9.2f} us  ({len(v)} entries)")
    t = subprocess.run([sys.executable, a.trace_tool, a.dir], capture_output=True, text=True)
    print("\nsymmem-trace:", t.stdout.splitlines()[0] if t.stdout else t.stderr[-500:])
    if t.returncode != 0:
        bad.append(f"symmem-trace exited {t.returncode}")
    if a.perfetto:
        t = subprocess.run([sys.executable, a.trace_tool, a.dir, "--perfetto", a.perfetto],
                           capture_output=True, text=True)
        try:
            ev = json.load(open(a.perfetto))["traceEvents"]
        except Exception as e:  # noqa: BLE001
            bad.append(f"perfetto output unreadable: {e}; {t.stderr[-500:]}")
            ev = []
        slices = [e for e in ev if e.get("ph") == "X"]
        pids = sorted({e["pid"] for e in slices})
        print(f"perfetto: {len(ev)} events, {len(slices)} slices on {len(pids)} process tracks")
        if len(pids) != a.ranks:
            bad.append(f"perfetto: slices on {len(pids)} tracks, expected {a.ranks}")
        bad += [f"perfetto: {x}" for x in overlaps(slices)[:5]]
    for b in bad[:20]:
        print("FAIL:", b)
    print("RESULT:", "FAILED" if bad else "PASSED")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
