#!/usr/bin/env python3
"""Draws a Chrome trace written by `symmem-trace DIR --perfetto OUT.json` as a PNG timeline, in
the manner of the Perfetto UI: one row per process and thread (`rank R` / `cpu`,
`cuda:0 stream 0x0`, ...), one coloured box per complete ("X") slice, coloured by op and
labelled where the box is wide enough, instants ("i") as thin marks, time in ms from the start
of the trace.

  python3 scripts/render-trace-png.py trace.json -o timeline.png
  python3 scripts/render-trace-png.py trace.json -o zoom.png --start-us 403450 --end-us 403890

For places without a browser (docs, CI logs); the Perfetto UI reads the same file. Slices of one
track that overlap without nesting (which symmem-trace does not write, and Perfetto would not
draw) go to extra lanes of the track, so that nothing is hidden.

Needs matplotlib."""
import argparse
import collections
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.patches as mpatches  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

# One colour per op (matplotlib's tab10/tab20 colours); other names get the rest in turn.
OP_COLOURS = {
    "all_reduce": "#1f77b4",
    "reduce_scatter": "#ff7f0e",
    "all_gather": "#2ca02c",
    "all_to_all": "#d62728",
    "all_to_all_v": "#9467bd",
    "broadcast": "#8c564b",
    "barrier": "#7f7f7f",
    "alloc": "#bcbd22",
    "put": "#17becf",
    "get": "#e377c2",
}
SPARE = ["#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2"]


def load(path):
    with open(path) as f:
        obj = json.load(f)
    events = obj["traceEvents"] if isinstance(obj, dict) else obj
    base_ns = obj.get("otherData", {}).get("base_time_ns") if isinstance(obj, dict) else None
    return events, base_ns


def op_of(ev):
    args = ev.get("args") or {}
    return args.get("op") or ev.get("name", "?").split(" ")[0]


def tracks(events):
    """{(pid, tid): label} and their order, from the "M" metadata events."""
    pname, psort, tname, tsort = {}, {}, {}, {}
    for e in events:
        if e.get("ph") != "M":
            continue
        a = e.get("args") or {}
        key = (e.get("pid"), e.get("tid"))
        if e["name"] == "process_name":
            pname[e["pid"]] = a.get("name")
        elif e["name"] == "process_sort_index":
            psort[e["pid"]] = a.get("sort_index", 0)
        elif e["name"] == "thread_name":
            tname[key] = a.get("name")
        elif e["name"] == "thread_sort_index":
            tsort[key] = a.get("sort_index", 0)
    return pname, psort, tname, tsort


def slices_of(events):
    """[(pid, tid, start_us, end_us, name, op)] of the "X" events; [(pid, tid, ts, name)] of
    the instants."""
    out, instants = [], []
    for e in events:
        ph = e.get("ph")
        if ph == "X":
            start, end = e["ts"], e["ts"] + e.get("dur", 0)
            out.append((e["pid"], e["tid"], start, end, e.get("name", "?"), op_of(e)))
        elif ph in ("i", "I"):
            instants.append((e["pid"], e.get("tid", 0), e["ts"], e.get("name", "?")))
    return out, instants


def lanes(slices):
    """Lane of each slice of one track: the first lane free at its start (a slice inside
    another goes one lane down, as Perfetto draws a nested slice one level down)."""
    ends = []
    out = []
    for s in sorted(slices, key=lambda s: (s[2], -(s[3] - s[2]))):
        for i, end in enumerate(ends):
            if end <= s[2]:
                ends[i] = s[3]
                out.append((s, i))
                break
        else:
            ends.append(s[3])
            out.append((s, len(ends) - 1))
    return out, max(len(ends), 1)


def short_name(name):
    """"reduce_scatter g0#101" -> "#101" (the seq), else the first word."""
    head = name.split(" [")[0]
    if "#" in head:
        return "#" + head.rsplit("#", 1)[1].split(" ")[0].rstrip(")")
    return head.split(" ")[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", help="Chrome trace JSON (symmem-trace --perfetto)")
    ap.add_argument("-o", "--output", required=True, help="the PNG to write")
    ap.add_argument("--start-us", type=float, default=None,
                    help="window start, us from the start of the trace (default: first slice)")
    ap.add_argument("--end-us", type=float, default=None,
                    help="window end, us from the start of the trace (default: last slice end)")
    ap.add_argument("--title", default=None)
    ap.add_argument("--width", type=float, default=13.0, help="figure width in inches")
    ap.add_argument("--dpi", type=int, default=110)
    a = ap.parse_args()

    events, _ = load(a.trace)
    pname, psort, tname, tsort = tracks(events)
    slices, instants = slices_of(events)
    if not slices:
        print(f"render-trace-png: {a.trace}: no complete slices", file=sys.stderr)
        return 2
    lo = a.start_us if a.start_us is not None else min(s[2] for s in slices)
    hi = a.end_us if a.end_us is not None else max(s[3] for s in slices)
    if hi <= lo:
        print("render-trace-png: the window is empty (--end-us <= --start-us)", file=sys.stderr)
        return 2
    shown = [s for s in slices if s[3] > lo and s[2] < hi]

    # Rows: every track of the metadata (and any with slices), ranks in sort order.
    keys = set(tname) | {(s[0], s[1]) for s in slices}
    keys = sorted(keys, key=lambda k: (psort.get(k[0], k[0]), k[0], tsort.get(k, k[1]), k[1]))
    by_track = collections.defaultdict(list)
    for s in shown:
        by_track[(s[0], s[1])].append(s)
    lane_h, gap = 1.0, 0.5
    rows = []  # (key, y_top, n_lanes, [(slice, lane)])
    y = 0.0
    for k in keys:
        placed, n = lanes(by_track.get(k, []))
        rows.append((k, y, n, placed))
        y += n * lane_h + gap
    total = y

    colours = dict(OP_COLOURS)
    spare = iter(SPARE * 10)
    for s in shown:
        if s[5] not in colours:
            colours[s[5]] = next(spare)

    height = max(2.5, 0.9 + 0.22 * total)
    fig, ax = plt.subplots(figsize=(a.width, height), dpi=a.dpi)
    fig.subplots_adjust(left=0.17, right=0.99, top=1 - 0.55 / height, bottom=0.75 / height)
    ax.set_xlim(lo / 1e3, hi / 1e3)
    ax.set_ylim(total, -gap / 2)
    fig.canvas.draw()
    axes_px = ax.get_window_extent().width
    px_per_ms = axes_px / ((hi - lo) / 1e3)
    fontsize = 7
    char_px = fontsize * 0.62 * a.dpi / 72.0

    for k, top, n, placed in rows:
        for (pid, tid, s0, s1, name, op), lane in placed:
            x0, x1 = max(s0, lo) / 1e3, min(s1, hi) / 1e3
            yb = top + lane * lane_h + 0.06
            w_px = (x1 - x0) * px_per_ms
            ax.add_patch(mpatches.Rectangle((x0, yb), max(x1 - x0, 0), lane_h - 0.12,
                                            facecolor=colours[op],
                                            edgecolor="white" if w_px > 4 else "none",
                                            linewidth=0.4))
            for text in (name, short_name(name)):
                if len(text) * char_px + 4 <= w_px:
                    ax.text(x0 + 2 / px_per_ms, yb + (lane_h - 0.12) / 2, text, fontsize=fontsize,
                            va="center", ha="left", color="white", clip_on=True)
                    break
    for pid, tid, ts, name in instants:
        if lo <= ts <= hi:
            for k, top, n, _ in rows:
                if k == (pid, tid):
                    ax.plot([ts / 1e3] * 2, [top, top + n * lane_h], color="black", lw=0.8)
                    ax.text(ts / 1e3, top, " " + name, fontsize=fontsize, va="top")

    # Row labels, and a line between ranks.
    ax.set_yticks([top + n * lane_h / 2 for _, top, n, _ in rows])
    ax.set_yticklabels([f"{pname.get(k[0], f'pid {k[0]}')}  {tname.get(k, f'tid {k[1]}')}"
                        for k, _, _, _ in rows], fontsize=8)
    ax.tick_params(axis="y", length=0)
    for i in range(1, len(rows)):
        if rows[i][0][0] != rows[i - 1][0][0]:
            ax.axhline(rows[i][1] - gap / 2, color="#999999", lw=0.6)
    ax.set_xlabel("ms from the start of the trace", fontsize=8)
    ax.tick_params(axis="x", labelsize=8)
    ax.grid(axis="x", color="#dddddd", lw=0.5)
    ax.set_axisbelow(True)
    ops = sorted({s[5] for s in shown}, key=lambda o: list(colours).index(o))
    ax.legend(handles=[mpatches.Patch(color=colours[o], label=o) for o in ops], fontsize=7,
              loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=len(ops), frameon=False)
    if a.title:
        fig.suptitle(a.title, fontsize=9, y=1 - 0.12 / height, va="top")
    fig.savefig(a.output, dpi=a.dpi)
    print(f"render-trace-png: wrote {a.output} ({len(shown)} slices on {len(rows)} tracks, "
          f"{lo / 1e3:.3f}..{hi / 1e3:.3f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
