#!/usr/bin/env python3
"""Tests of symmem-trace on synthetic dumps (format version 1, written here as the recorder
would) and, where a build provides them, on dumps of a real symmem-bench --trace run.

The tool under test is $SYMMEM_TRACE_TOOL (ctest: the build tree's copy), else the source
tree's tools/trace/symmem-trace. Run directly (python3 test_symmem_trace.py) or under pytest;
exit 77 (skipped) when pytest is missing or nothing ran but skips.
"""
import json
import math
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.normpath(os.path.join(HERE, "..", ".."))
TOOL = os.environ.get("SYMMEM_TRACE_TOOL") or os.path.join(SOURCE, "tools", "trace",
                                                            "symmem-trace")

try:
    import pytest
except ImportError:  # run directly without pytest: skipped, never passed
    pytest = None

T0 = 1733280000000000000  # CLOCK_REALTIME ns


# ---- synthetic dumps ----------------------------------------------------------------------------


def entry(seq, state="completed", op="all_reduce", dtype="bf16", count=1048576, device="cpu",
          stream=0, waiting_for=None, error=None, **kw):
    t = T0 + seq * 1000000
    e = {
        "seq": seq, "op": op, "dtype": dtype, "count": count,
        "bytes": None if count is None else count * 2,
        "redop": "sum" if op in ("all_reduce", "reduce_scatter") else None,
        "root": -1, "algo": "auto", "backend": "host", "device": device, "stream": stream,
        "state": state, "enqueue_ns": t,
        "start_ns": None if state == "enqueued" else t + 100,
        "end_ns": t + 50000 if state == "completed" else None,
        "error": error, "waiting_for": waiting_for or [],
    }
    if state == "failed" and error is None:
        e["error"] = "timed out after 2000 ms"
    e.update(kw)
    return e


def group(entries, members, me, name="g0", last_completed=None):
    seqs = [e["seq"] for e in entries]
    done = [e["seq"] for e in entries if e["state"] == "completed"]
    return {
        "name": name, "rank": members.index(me), "world_size": len(members),
        "global_ranks": members, "backend": "host",
        "last_enqueued": max(seqs) if seqs else 0,
        "last_completed": (max(done) if done else 0) if last_completed is None
        else last_completed,
        "entries": entries,
    }


def dump(rank, world, groups, reason="timeout", error=None, time_ns=None):
    return {
        "format": "symmem-trace", "version": 1, "rank": rank, "world_size": world,
        "host": "node1", "pid": 1000 + rank, "reason": reason,
        "time_ns": time_ns or T0 + 10 ** 10, "error": error, "buffer": 2000, "groups": groups,
    }


def write(dir_, dumps):
    for d in dumps:
        with open(os.path.join(dir_, f"rank{d['rank']}.json"), "w") as f:
            json.dump(d, f, indent=1)


def run(dir_, *args):
    p = subprocess.run([sys.executable, TOOL, str(dir_), *args], capture_output=True, text=True,
                       timeout=60)
    return p.returncode, p.stdout, p.stderr


def completed(n, **kw):
    return [entry(s, **kw) for s in range(1, n + 1)]


def put(after, i, state="completed", op="put", nbytes=4096, **kw):
    """The i-th one-sided op after numbered op `after`: it carries that seq and "one_sided"."""
    t = T0 + after * 1000000 + 100000 + i * 10000  # after the collective's 50 us, 5 us long
    e = entry(after, state, op=op, dtype=None, count=nbytes, one_sided=True, redop=None,
              enqueue_ns=t, start_ns=None if state == "enqueued" else t + 100,
              end_ns=t + 5000 if state == "completed" else None, **kw)
    e["bytes"] = nbytes
    return e


# ---- the rank behind ----------------------------------------------------------------------------


def test_stopped_rank_without_dump(tmp_path):
    """Ranks 0 and 1 timed out at seq 50 waiting for rank 2, which left no dump (SIGSTOP)."""
    members = [0, 1, 2]
    write(tmp_path, [dump(r, 3, [group(completed(49) + [entry(50, "failed", waiting_for=[2])],
                                       members, r)])
                     for r in (0, 1)])
    rc, out, err = run(tmp_path)
    first = out.splitlines()[0]
    assert first == ("rank 2 is behind: group g0 seq 50 all_reduce (bf16, 1048576 elements) "
                     "reached by ranks 0,1, not by rank 2 (no dump from rank 2: stopped or "
                     "killed?)"), out
    assert rc == 1, (rc, out, err)
    assert "no dump" in out.split("\n", 1)[1]  # the table's row of rank 2


def test_stopped_rank_without_waiting_for(tmp_path):
    """No failed wait names anyone: the member without a dump is behind (its peers are stuck)."""
    members = [0, 1, 2]
    write(tmp_path, [dump(r, 3, [group(completed(49) + [entry(50, "started")], members, r)],
                          reason="signal") for r in (0, 1)])
    rc, out, _ = run(tmp_path)
    assert out.splitlines()[0].startswith("rank 2 is behind: group g0 seq 50 all_reduce"), out
    assert "no dump from rank 2" in out.splitlines()[0]
    assert rc == 1


def test_waiting_for_picks_among_missing(tmp_path):
    """Ranks 2 and 3 left no dump; the failed waits name rank 3 only."""
    members = [0, 1, 2, 3]
    write(tmp_path, [dump(r, 4, [group(completed(9) + [entry(10, "failed", waiting_for=[3])],
                                       members, r)]) for r in (0, 1)])
    rc, out, _ = run(tmp_path)
    first = out.splitlines()[0]
    assert first.startswith("rank 3 is behind: group g0 seq 10 all_reduce"), out
    assert "reached by ranks 0,1, not by rank 3" in first
    assert rc == 1


def test_behind_rank_that_dumped(tmp_path):
    """Rank 2 dumped: its seq 1841 was enqueued and never started; its peers timed out on it."""
    members = [0, 1, 2]
    dumps = [dump(r, 3, [group(completed(1840) + [entry(1841, "failed", waiting_for=[2])],
                               members, r)]) for r in (0, 1)]
    dumps.append(dump(2, 3, [group(completed(1840) + [entry(1841, "enqueued")], members, 2)],
                      reason="signal"))
    write(tmp_path, dumps)
    rc, out, _ = run(tmp_path)
    assert out.splitlines()[0] == ("rank 2 is behind: group g0 seq 1841 all_reduce (bf16, "
                                   "1048576 elements) enqueued, never started"), out
    assert rc == 1


def test_lowest_last_completed_without_waits(tmp_path):
    """No waiting_for at all: the rank with the lowest last_completed is behind."""
    members = [0, 1, 2]
    dumps = [dump(r, 3, [group(completed(30) + [entry(31, "started")], members, r)],
                  reason="request") for r in (0, 1)]
    dumps.append(dump(2, 3, [group(completed(29), members, 2)], reason="request"))
    write(tmp_path, dumps)
    rc, out, _ = run(tmp_path)
    first = out.splitlines()[0]
    assert first.startswith("rank 2 is behind: group g0 seq 30 all_reduce"), out
    assert "reached by ranks 0,1, not by rank 2" in first
    assert rc == 1


def test_gpu_rank_that_launched_fewer(tmp_path):
    """GPU ops stay 'enqueued' (the host cannot see completion): fewer launches is behind."""
    members = [0, 1]
    gpu = dict(state="enqueued", device="cuda:0", stream=0x7f00)
    dumps = [dump(0, 2, [group([entry(s, **gpu) for s in range(1, 21)], members, 0)]),
             dump(1, 2, [group([entry(s, **gpu) for s in range(1, 18)], members, 1)])]
    write(tmp_path, dumps)
    rc, out, _ = run(tmp_path)
    first = out.splitlines()[0]
    assert first.startswith("rank 1 is behind: group g0 seq 18 all_reduce"), out
    assert "reached by rank 0, not by rank 1" in first
    assert rc == 1


def test_second_group(tmp_path):
    """Two groups: the hang of the split group {1,2} is reported with its own name."""
    world = [0, 1, 2]
    sub = [1, 2]
    dumps = [dump(0, 3, [group(completed(5), world, 0)], reason="exit")]
    dumps.append(dump(1, 3, [group(completed(5), world, 1),
                             group(completed(2, op="barrier", dtype=None, count=None)
                                   + [entry(3, "failed", op="barrier", dtype=None, count=None,
                                            waiting_for=[2])], sub, 1, name="g1")]))
    write(tmp_path, dumps)
    rc, out, _ = run(tmp_path)
    first = out.splitlines()[0]
    assert first == ("rank 2 is behind: group g1 seq 3 barrier reached by rank 1, not by rank 2 "
                     "(no dump from rank 2: stopped or killed?)"), out
    assert "group g0:" in out and "group g1:" in out
    assert rc == 1


# ---- disagreements ------------------------------------------------------------------------------


def test_count_disagreement(tmp_path):
    """Rank 1 passed count 2048 where ranks 0 and 2 passed 1024: every rank failed at seq 12."""
    members = [0, 1, 2]
    dumps = []
    for r in members:
        n = 2048 if r == 1 else 1024
        dumps.append(dump(r, 3, [group(completed(11, count=1024)
                                       + [entry(12, "failed", count=n, error="arguments differ")],
                                       members, r)]))
    write(tmp_path, dumps)
    rc, out, _ = run(tmp_path)
    want = "disagreement: group g0 seq 12 all_reduce: count 1024 on ranks 0,2 but 2048 on rank 1"
    assert out.splitlines()[0].startswith(want), out
    assert rc == 1


def test_disagreement_named_with_the_rank_behind(tmp_path):
    """The ranks disagree at the seq where rank 2 is behind: the first line says both."""
    members = [0, 1, 2]
    dumps = [dump(r, 3, [group(completed(6) + [entry(7, "failed", dtype="f32", count=1024,
                                                     waiting_for=[2])], members, r)])
             for r in (0, 1)]
    dumps.append(dump(2, 3, [group(completed(6) + [entry(7, "started", dtype="bf16", count=1024)],
                                   members, 2)]))
    write(tmp_path, dumps)
    rc, out, _ = run(tmp_path)
    first = out.splitlines()[0]
    assert first.startswith("rank 2 is behind: group g0 seq 7 all_reduce"), out
    assert "dtype f32 on ranks 0,1 but bf16 on rank 2" in first
    assert rc == 1


def test_op_disagreement_in_history(tmp_path):
    """An op name that differs at a completed seq is still reported (exit 1)."""
    members = [0, 1]
    dumps = [dump(0, 2, [group(completed(4), members, 0)], reason="exit"),
             dump(1, 2, [group(completed(2) + [entry(3, op="broadcast")] + [entry(4)], members,
                               1)], reason="exit")]
    write(tmp_path, dumps)
    rc, out, _ = run(tmp_path)
    assert "disagreement: group g0 seq 3: op all_reduce on rank 0 but broadcast on rank 1" in out
    assert rc == 1


def test_all_to_all_v_counts_may_differ(tmp_path):
    """all_to_all_v's count (recv capacity) is not among what the ranks must pass alike."""
    members = [0, 1]
    write(tmp_path, [dump(r, 2, [group(completed(3, op="all_to_all_v", count=100 + r), members,
                                       r)], reason="exit") for r in members])
    rc, out, _ = run(tmp_path)
    assert "disagreement" not in out, out
    assert rc == 0


def test_dtype_disagreement_everywhere_failed(tmp_path):
    """Rank 0 passed f32 where rank 1 passed bf16; both failed at seq 5, nobody waits for anyone."""
    members = [0, 1]
    write(tmp_path, [dump(r, 2, [group(completed(4) + [
        entry(5, "failed", dtype="f32" if r == 0 else "bf16", error="arguments differ")],
        members, r)]) for r in members])
    rc, out, _ = run(tmp_path)
    first = out.splitlines()[0]
    assert first.startswith("disagreement: group g0 seq 5 all_reduce: dtype "), out
    assert "f32 on rank 0" in first and "bf16 on rank 1" in first, first
    assert "failed on ranks 0,1: arguments differ" in first, first
    assert rc == 1


def test_root_disagreement(tmp_path):
    """broadcast seq 3: root 0 on ranks 0,1, root 2 on rank 2; ranks 0,1 wait for rank 2."""
    members = [0, 1, 2]
    dumps = []
    for r in members:
        bc = dict(op="broadcast", count=256, dtype="f32", root=2 if r == 2 else 0)
        last = entry(3, "started" if r == 2 else "failed",
                     waiting_for=[] if r == 2 else [2], **bc)
        dumps.append(dump(r, 3, [group(completed(2, **bc) + [last], members, r)]))
    write(tmp_path, dumps)
    rc, out, _ = run(tmp_path)
    first = out.splitlines()[0]
    assert first.startswith("rank 2 is behind: group g0 seq 3 broadcast (f32, 256 elements, "
                            "root 0)"), out
    assert first.endswith("arguments disagree there: root 0 on ranks 0,1 but 2 on rank 2"), first
    assert "disagreement: group g0 seq 3 broadcast: root 0 on ranks 0,1 but 2 on rank 2" in out
    assert rc == 1


def test_algo_disagreement_in_history(tmp_path):
    """all_reduce seq 2 with algo one_shot on rank 0, two_shot on rank 1 (both completed)."""
    members = [0, 1]
    write(tmp_path, [dump(r, 2, [group(completed(1) + [
        entry(2, algo="one_shot" if r == 0 else "two_shot")] + [entry(3)], members, r)],
        reason="exit") for r in members])
    rc, out, _ = run(tmp_path)
    assert out.splitlines()[0] == ("disagreement: group g0 seq 2 all_reduce: algo one_shot on "
                                   "rank 0 but two_shot on rank 1"), out
    assert rc == 1


# ---- one-sided ops (put/get: "one_sided": true, no seq of their own) ----------------------------


def test_one_sided_entries_do_not_number(tmp_path):
    """Rank 0 made three puts and a get after seq 5, rank 1 none: the collectives still line up
    (same seq, same arguments) and nothing is wrong."""
    members = [0, 1]
    r0 = completed(5) + [put(5, 0), put(5, 1), put(5, 2, op="get")] + \
        [entry(s) for s in range(6, 11)]
    write(tmp_path, [dump(0, 2, [group(r0, members, 0, last_completed=10)], reason="exit"),
                     dump(1, 2, [group(completed(10), members, 1)], reason="exit")])
    rc, out, err = run(tmp_path)
    assert out.splitlines()[0] == "no rank is behind: group g0: ranks 0,1 completed seq 10", out
    assert "disagreement" not in out, out
    assert rc == 0, (out, err)


def test_one_sided_at_the_hang_is_not_the_collective(tmp_path):
    """Rank 1's newest entries are puts carrying seq 9 (its last collective); ranks 0,1 failed at
    seq 9 and no wait names anyone. The (completed) puts must not stand for rank 1's seq 9
    all_reduce: rank 1 is as stuck as rank 0, and rank 2 (no dump) is behind."""
    members = [0, 1, 2]
    dumps = [dump(0, 3, [group(completed(8) + [entry(9, "failed")], members, 0)]),
             dump(1, 3, [group(completed(8) + [entry(9, "failed"),
                                                 put(9, 0), put(9, 1)], members, 1,
                                 last_completed=8)])]
    write(tmp_path, dumps)
    rc, out, _ = run(tmp_path)
    first = out.splitlines()[0]
    assert first == ("rank 2 is behind: group g0 seq 9 all_reduce (bf16, 1048576 elements) "
                     "reached by ranks 0,1, not by rank 2 (no dump from rank 2: stopped or "
                     "killed?)"), out
    assert "disagreement" not in out, out
    assert rc == 1


def test_behind_rank_stuck_in_a_put(tmp_path):
    """Rank 2 completed seq 9, then hangs in a put (started); ranks 0,1 time out at seq 10."""
    members = [0, 1, 2]
    dumps = [dump(r, 3, [group(completed(9) + [entry(10, "failed", waiting_for=[2])], members, r)])
             for r in (0, 1)]
    dumps.append(dump(2, 3, [group(completed(9) + [put(9, 0), put(9, 1, state="started")],
                                   members, 2, last_completed=9)], reason="signal"))
    write(tmp_path, dumps)
    rc, out, _ = run(tmp_path)
    first = out.splitlines()[0]
    assert first.startswith("rank 2 is behind: group g0 seq 10 all_reduce (bf16, 1048576 "
                            "elements) reached by ranks 0,1, not by rank 2 (its newest op: seq 9 "
                            "all_reduce, completed)"), out
    assert first.endswith("; it is in one-sided put (4096 bytes) after seq 9, started, never "
                          "completed"), first
    row2 = [ln for ln in out.splitlines() if ln.startswith("  2 ")]
    assert row2 and row2[0].endswith("seq 9 all_reduce (bf16, 1048576 elements) completed; then "
                                     "one-sided put (4096 bytes) started, never completed"), out
    assert rc == 1


def test_failed_one_sided_is_not_ok(tmp_path):
    """Every collective completed, but rank 0's get from rank 1 failed: exit 1, named."""
    members = [0, 1]
    r0 = completed(5) + [put(5, 0, op="get", state="failed", error="peer 1 died",
                             waiting_for=[1])]
    write(tmp_path, [dump(0, 2, [group(r0, members, 0, last_completed=5)], reason="peer_failure"),
                     dump(1, 2, [group(completed(5), members, 1)], reason="exit")])
    rc, out, _ = run(tmp_path)
    assert out.splitlines()[0] == ("no rank is behind, but group g0 one-sided get (4096 bytes) "
                                   "after seq 5 failed on rank 0: peer 1 died (waiting for "
                                   "rank 1)"), out
    assert rc == 1


def test_one_sided_must_be_a_bool(tmp_path):
    e = put(1, 0)
    e["one_sided"] = 1
    write(tmp_path, [dump(0, 1, [group(completed(1) + [e], [0], 0)], reason="exit")])
    rc, _, err = run(tmp_path)
    assert rc == 2 and "rank0.json" in err and "one_sided" in err, err


# ---- nothing wrong ------------------------------------------------------------------------------


def test_everything_completed(tmp_path):
    members = [0, 1, 2]
    write(tmp_path, [dump(r, 3, [group(completed(120), members, r)], reason="exit")
                     for r in members])
    rc, out, err = run(tmp_path)
    assert out.splitlines()[0].startswith("no rank is behind: "), out
    assert "completed seq 120" in out.splitlines()[0]
    assert rc == 0, (out, err)


def test_failed_everywhere_is_not_ok(tmp_path):
    """Every rank failed at the same op and no wait names anyone: nobody is behind, exit 1."""
    members = [0, 1]
    write(tmp_path, [dump(r, 2, [group(completed(3) + [entry(4, "failed")], members, r)])
                     for r in members])
    rc, out, _ = run(tmp_path)
    assert out.splitlines()[0].startswith("no rank is behind, but group g0 seq 4 all_reduce"), out
    assert rc == 1


# ---- bad input ----------------------------------------------------------------------------------


def test_unparsable_file(tmp_path):
    members = [0, 1]
    write(tmp_path, [dump(0, 2, [group(completed(3), members, 0)], reason="exit")])
    (tmp_path / "rank1.json").write_text('{"format": "symmem-trace", "version": 1, "ra')
    rc, out, err = run(tmp_path)
    assert rc == 2, (rc, out, err)
    assert str(tmp_path / "rank1.json") in err, err


def test_no_dumps(tmp_path):
    (tmp_path / "rank0.json.tmp").write_text("{")
    rc, _, err = run(tmp_path)
    assert rc == 2
    assert "no dumps" in err and str(tmp_path) in err, err


def test_empty_directory(tmp_path):
    rc, out, err = run(tmp_path)
    assert rc == 2, (rc, out, err)
    assert out == "" and f"symmem-trace: {tmp_path}: no dumps (rank<R>.json)" in err, err


def test_not_a_dump(tmp_path):
    (tmp_path / "rank0.json").write_text('{"format": "chrome", "traceEvents": []}')
    rc, _, err = run(tmp_path)
    assert rc == 2 and "rank0.json" in err and "not a symmem-trace dump" in err, err
    (tmp_path / "rank0.json").write_text("[1, 2]")
    rc, _, err = run(tmp_path)
    assert rc == 2 and "rank0.json" in err and "not a JSON object" in err, err
    (tmp_path / "rank0.json").write_text("")
    rc, _, err = run(tmp_path)
    assert rc == 2 and "rank0.json" in err and "cannot read it as JSON" in err, err


def test_missing_directory(tmp_path):
    rc, _, err = run(tmp_path / "nope")
    assert rc == 2 and "nope" in err, err


def test_wrong_version_and_fields(tmp_path):
    d = dump(0, 1, [group(completed(1), [0], 0)])
    d["version"] = 2
    write(tmp_path, [d])
    rc, _, err = run(tmp_path)
    assert rc == 2 and "rank0.json" in err and "version 2" in err, err
    d["version"] = 1
    del d["groups"][0]["entries"][0]["seq"]
    write(tmp_path, [d])
    rc, _, err = run(tmp_path)
    assert rc == 2 and "rank0.json" in err and "'seq'" in err, err


def test_rank_mismatch(tmp_path):
    d = dump(1, 2, [group(completed(1), [0, 1], 1)])
    with open(tmp_path / "rank0.json", "w") as f:
        json.dump(d, f)
    rc, _, err = run(tmp_path)
    assert rc == 2 and "rank0.json" in err, err


# ---- Perfetto -----------------------------------------------------------------------------------


def _strict_json(path):
    def no_constant(name):
        raise ValueError(f"non-standard JSON constant {name}")

    with open(path) as f:
        return json.load(f, parse_constant=no_constant)


def check_trace_events(trace):
    """What Perfetto's and chrome://tracing's JSON importers need, checked strictly. Returns
    {pid: process name}."""
    assert isinstance(trace, dict) and isinstance(trace.get("traceEvents"), list)
    procs, threads, used = {}, {}, set()
    for ev in trace["traceEvents"]:
        assert isinstance(ev, dict), ev
        for key in ("ph", "pid", "tid", "ts"):
            assert key in ev, (key, ev)
        assert isinstance(ev["ph"], str) and ev["ph"] in ("X", "i", "M"), ev
        assert isinstance(ev["pid"], int) and isinstance(ev["tid"], int), ev
        assert isinstance(ev["ts"], (int, float)) and math.isfinite(ev["ts"]), ev
        assert ev["ts"] >= 0, ev
        assert isinstance(ev.get("name"), str) and ev["name"], ev
        if "args" in ev:
            assert isinstance(ev["args"], dict), ev
        if ev["ph"] == "M":
            assert ev["name"] in ("process_name", "thread_name", "process_sort_index",
                                  "thread_sort_index"), ev
            if ev["name"] == "process_name":
                assert isinstance(ev["args"]["name"], str) and ev["args"]["name"], ev
                assert ev["pid"] not in procs, ("two names for one process", ev)
                procs[ev["pid"]] = ev["args"]["name"]
            if ev["name"] == "thread_name":
                assert isinstance(ev["args"]["name"], str) and ev["args"]["name"], ev
                threads[(ev["pid"], ev["tid"])] = ev["args"]["name"]
            continue
        if ev["ph"] == "X":
            assert isinstance(ev.get("dur"), (int, float)) and math.isfinite(ev["dur"]), ev
            assert ev["dur"] >= 0, ev
        if ev["ph"] == "i":
            assert ev.get("s", "t") in ("t", "p", "g"), ev
        used.add((ev["pid"], ev["tid"]))
    for pid, tid in used:
        assert pid in procs, f"events of pid {pid} without a process_name"
        assert (pid, tid) in threads, f"events of pid {pid} tid {tid} without a thread_name"
    # Slices of one thread must nest (the importers drop or misplace overlapping ones).
    by_thread = {}
    for ev in trace["traceEvents"]:
        if ev["ph"] == "X":
            span = (ev["ts"], ev["ts"] + ev["dur"])
            by_thread.setdefault((ev["pid"], ev["tid"]), []).append(span)
    for spans in by_thread.values():
        stack = []
        for b, e in sorted(spans, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1] <= b:
                stack.pop()
            assert not stack or e <= stack[-1] + 1e-3, ("overlapping slices", b, e, stack)
            stack.append(e)
    return procs


def test_perfetto_output(tmp_path):
    """Three ranks dumped (host ops), one did not; a GPU stream on rank 0."""
    members = [0, 1, 2, 3]
    dumps = []
    for r in (0, 1, 2):
        ents = completed(9) + [entry(10, "failed", waiting_for=[3])]
        groups = [group(ents, members, r)]
        if r == 1:  # two puts after seq 9 on the same (cpu) track
            ents = completed(9) + [put(9, 0), put(9, 1)] + [entry(10, "failed", waiting_for=[3])]
            groups = [group(ents, members, r, last_completed=9)]
        if r in (0, 1):  # g1 = {0, 1}, launched on a GPU stream
            gpu = [entry(s, "enqueued", device="cuda:0", stream=0x5500) for s in range(1, 5)]
            groups.append(group(gpu, [0, 1], r, name="g1"))
        dumps.append(dump(r, 4, groups))
    write(tmp_path, dumps)
    out_json = tmp_path / "out" / "trace.json"
    out_json.parent.mkdir()
    rc, out, err = run(tmp_path, "--perfetto", str(out_json))
    assert rc == 1, (rc, out, err)
    assert out.splitlines()[0].startswith("rank 3 is behind: group g0 seq 10"), out
    trace = _strict_json(out_json)
    procs = check_trace_events(trace)
    assert procs == {0: "rank 0", 1: "rank 1", 2: "rank 2", 3: "rank 3 (no dump)"}, procs
    evs = trace["traceEvents"]
    # One process track per rank that dumped, with its slices; each entry is an event.
    for r in (0, 1, 2):
        xs = [e for e in evs if e["pid"] == r and e["ph"] == "X"]
        assert len(xs) >= 10, (r, len(xs))
        assert any(e["args"].get("open_until_dump") and e["args"]["seq"] == 10 for e in xs)
        assert all(e["args"]["group"] for e in xs)
    threads = {e["args"]["name"] for e in evs if e["ph"] == "M" and e["name"] == "thread_name"
               and e["pid"] == 0}
    assert threads == {"cpu", "cuda:0 stream 0x5500"}, threads
    # The GPU entries have no end: the newest is open until the dump, the others are instants.
    gpu = [e for e in evs if e["pid"] == 0 and e.get("cat") == "g1"]
    assert sum(1 for e in gpu if e["ph"] == "X") == 1
    assert sum(1 for e in gpu if e["ph"] == "i" and e["args"].get("no_end")) == 3
    done = [e for e in evs if e["ph"] == "X" and e["args"].get("state") == "completed"
            and not e["args"].get("one_sided")]
    assert done and all(e["dur"] == 50.0 for e in done)  # (end_ns - enqueue_ns) / 1000
    # The slices carry the entry's arguments.
    s5 = [e for e in evs if e["pid"] == 2 and e["ph"] == "X" and e["args"].get("seq") == 5]
    assert len(s5) == 1 and s5[0]["name"] == "all_reduce g0#5", s5
    args = s5[0]["args"]
    assert (args["op"], args["dtype"], args["count"], args["state"], args["group"]) == \
        ("all_reduce", "bf16", 1048576, "completed", "g0"), args
    # One-sided entries: their own slices, named as such, not numbered as the collective.
    ones = [e for e in evs if e["pid"] == 1 and e.get("args", {}).get("one_sided")]
    assert [e["name"] for e in ones] == ["put g0 (one-sided, after #9)"] * 2, ones
    assert all(e["ph"] == "X" and e["dur"] == 5.0 for e in ones), ones
    # One track per rank and stream: rank 1 has the cpu and the GPU stream tracks, rank 2 cpu.
    tracks = {(e["pid"], e["tid"]) for e in evs if e["ph"] == "X"}
    assert len([t for t in tracks if t[0] == 1]) == 2 and len([t for t in tracks if t[0] == 2]) == 1


def test_perfetto_gpu_slices_are_device_times(tmp_path):
    """Launches queue ahead of the GPU: each kernel's slice is its device start to end (nested or
    apart on its track, as Perfetto needs), with the time in the queue in its args."""
    ents = []
    for s in range(1, 6):  # all enqueued at once, run back to back on the GPU
        ents.append(entry(s, "completed", device="cuda:0", stream=0x5500, enqueue_ns=T0 + s,
                          start_ns=T0 + s * 100000, end_ns=T0 + s * 100000 + 90000))
    ents.append(entry(6, "started", device="cuda:0", stream=0x5500, enqueue_ns=T0 + 6,
                      start_ns=T0 + 600000))
    write(tmp_path, [dump(0, 1, [group(ents, [0], 0)], reason="signal", time_ns=T0 + 700000)])
    out_json = tmp_path / "trace.json"
    rc, out, err = run(tmp_path, "--perfetto", str(out_json))
    evs = _strict_json(out_json)["traceEvents"]
    xs = sorted((e for e in evs if e["ph"] == "X"), key=lambda e: e["ts"])
    assert [e["args"]["seq"] for e in xs] == [1, 2, 3, 4, 5, 6], xs
    for a_, b_ in zip(xs, xs[1:]):
        assert a_["ts"] + a_["dur"] <= b_["ts"], (a_, b_)
    assert xs[0]["dur"] == 90.0 and xs[0]["args"]["queued_us"] == 99.999, xs[0]
    assert xs[-1]["args"].get("open_until_dump") and xs[-1]["dur"] == 100.0, xs[-1]


def test_perfetto_unwritable(tmp_path):
    write(tmp_path, [dump(0, 1, [group(completed(2), [0], 0)], reason="exit")])
    rc, _, err = run(tmp_path, "--perfetto", str(tmp_path / "no" / "such" / "dir.json"))
    assert rc == 2 and "dir.json" in err, err


# ---- the real thing -----------------------------------------------------------------------------


def test_runs_as_a_program():
    """The tool (ctest: the build tree's copy) runs by itself: executable, with its #! line."""
    assert os.access(TOOL, os.X_OK), f"{TOOL} is not executable"
    p = subprocess.run([TOOL, "--help"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.startswith("usage: symmem-trace"), p.stdout + p.stderr


def test_help():
    p = subprocess.run([sys.executable, TOOL, "--help"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0 and "--perfetto" in p.stdout


def test_bench_trace_dumps(tmp_path):
    """symmem-bench --trace DIR under symmem-run: every rank dumps at exit and symmem-trace finds
    nothing wrong. Needs the build's tools (SYMMEM_RUN, SYMMEM_BENCH) and the recorder."""
    run_tool, bench = os.environ.get("SYMMEM_RUN"), os.environ.get("SYMMEM_BENCH")
    if not (run_tool and bench and os.path.exists(run_tool) and os.path.exists(bench)):
        pytest.skip("SYMMEM_RUN / SYMMEM_BENCH not set (ctest sets them)")
    d = tmp_path / "trace"
    env = dict(os.environ, SYMMEM_BACKEND="host")
    p = subprocess.run([run_tool, "-n", "2", "--timeout", "60", "--", bench, "--trace", str(d),
                        "-b", "4K", "-e", "64K", "-n", "3", "-w", "1"], capture_output=True,
                       text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert d.is_dir(), "symmem-bench --trace did not create the directory"
    if not any(d.iterdir()):
        pytest.skip("no dumps written: this build has no flight recorder (SYMMEM_TRACE_DIR)")
    rc, out, err = run(d, "--perfetto", str(tmp_path / "bench.json"))
    assert rc == 0, (out, err)
    assert out.splitlines()[0].startswith("no rank is behind"), out
    assert sorted(os.listdir(d)) == ["rank0.json", "rank1.json"]
    procs = check_trace_events(_strict_json(tmp_path / "bench.json"))
    assert procs == {0: "rank 0", 1: "rank 1"}


if __name__ == "__main__":
    if pytest is None:
        print("SKIPPED: pytest is not installed (pip install pytest)")
        sys.exit(77)
    # conftest.py beside this file applies the python tests' rule: exit 77 when every test was
    # skipped (never a pass).
    sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "-rs", __file__] + sys.argv[1:]))
