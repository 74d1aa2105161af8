#!/usr/bin/env bash
# Side-by-side comparison of symmem (host backend) and Open MPI on this machine, same sizes, same
# run, plus single-core memcpy bandwidth for the roofline.
#
#   bash bench/mpi_compare.sh [-n RANKS] [-b MIN] [-e MAX] [-f FACTOR] [-i ITERS] [-w WARMUP]
#                             [--ops "all_reduce all_gather ..."] [--mem sym|plain] [--build DIR]
#                             [--mpi-best]
#
# --mpi-best: all_reduce also runs Open MPI with --mca coll_tuned_use_dynamic_rules 1 --mca
# coll_tuned_allreduce_algorithm N for N = 1..6, and MPI's columns show, per size, the fastest
# of those runs and the default one (mean time; the "MPI alg" column names it, "d" = default).
#
# Needs a build of symmem-run and symmem-bench (cmake -S . -B build -G Ninja && ninja -C build
# symmem-run symmem-bench) and Open MPI (openmpi-bin, libopenmpi-dev). Columns:
#   symmem/MPI time(us) (mean over the iterations, slowest rank), ratio = MPI time / symmem time
#   (>1: symmem faster), the same three for the median iteration (each iteration timed alone,
#   of the slowest rank), algbw of both in GB/s, and symmem's algbw as a percentage of memcpy
#   bandwidth at that size.
set -euo pipefail
cd "$(dirname "$0")/.."
NP=2 MIN=4K MAX=64M FACTOR=4 ITERS=20 WARMUP=5 MEM=sym BUILD=build MPI_BEST=0
OPS="all_reduce reduce_scatter all_gather all_to_all broadcast"
while [ $# -gt 0 ]; do
  case "$1" in
    -n) NP=$2; shift 2 ;;
    -b) MIN=$2; shift 2 ;;
    -e) MAX=$2; shift 2 ;;
    -f) FACTOR=$2; shift 2 ;;
    -i) ITERS=$2; shift 2 ;;
    -w) WARMUP=$2; shift 2 ;;
    --ops) OPS=$2; shift 2 ;;
    --mem) MEM=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    --mpi-best) MPI_BEST=1; shift ;;
    -h|--help) sed -n 2,12p "$0"; exit 0 ;;
    *) echo "mpi_compare.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
for t in "$BUILD/tools/run/symmem-run" "$BUILD/tools/bench/symmem-bench"; do
  [ -x "$t" ] || { echo "mpi_compare.sh: $t is missing; build it first" >&2; exit 2; }
done
command -v mpicc >/dev/null && command -v mpirun >/dev/null ||
  { echo "mpi_compare.sh: Open MPI is missing (apt-get install -y openmpi-bin libopenmpi-dev)" >&2; exit 2; }

OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
mpicc -O2 -o "$OUT/mpi_bench" bench/mpi_bench.c
MPIRUN=(mpirun -n "$NP" --oversubscribe --bind-to none)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)

"$OUT/mpi_bench" --memcpy -b "$MIN" -e "$MAX" -f "$FACTOR" -n "$ITERS" -w "$WARMUP" > "$OUT/memcpy.txt"
for op in $OPS; do
  "$BUILD/tools/run/symmem-run" -n "$NP" -- "$BUILD/tools/bench/symmem-bench" --op "$op" \
    -b "$MIN" -e "$MAX" -f "$FACTOR" -n "$ITERS" -w "$WARMUP" --mem "$MEM" \
    --json "$OUT/symmem_$op.json" > "$OUT/symmem_$op.log" 2>&1 ||
    { cat "$OUT/symmem_$op.log" >&2; echo "mpi_compare.sh: symmem-bench failed ($op)" >&2; exit 1; }
  ALGS=(d)
  [ "$MPI_BEST" = 1 ] && [ "$op" = all_reduce ] && ALGS=(d 1 2 3 4 5 6)
  for alg in "${ALGS[@]}"; do
    MCA=()
    [ "$alg" != d ] && MCA=(--mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm "$alg")
    "${MPIRUN[@]}" "${MCA[@]}" "$OUT/mpi_bench" --op "$op" -b "$MIN" -e "$MAX" -f "$FACTOR" \
      -n "$ITERS" -w "$WARMUP" > "$OUT/mpi_${op}_$alg.txt" 2> "$OUT/mpi_$op.err" ||
      { cat "$OUT/mpi_$op.err" >&2; echo "mpi_compare.sh: mpi_bench failed ($op, algorithm $alg)" >&2; exit 1; }
  done
done

python3 - "$OUT" "$NP" "$MEM" $OPS <<'PY'
import json, sys, os
out, np, mem, ops = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
memcpy = {}
for line in open(os.path.join(out, "memcpy.txt")):
    _, b, t, bw = line.split()
    memcpy[int(b)] = float(bw)
print(f"# symmem (host backend, {mem} memory) vs Open MPI, {np} ranks, f32 (sum for reductions)")
print(f"# memcpy = single-core memcpy bandwidth of the same size (bytes copied / time)")
hdr = f"{'op':<15}{'size':>10} {'symmem us':>11}{'MPI us':>11}{'ratio':>8} {'sym med':>9}{'MPI med':>9}{'ratio':>7} {'symmem GB/s':>12}{'MPI GB/s':>10}{'memcpy GB/s':>12}{'% memcpy':>9} {'MPI alg':>7}"
print(hdr)
for op in ops:
    mpi, alg = {}, {}  # per size: the fastest MPI run (mean time) and its algorithm
    for name in sorted(os.listdir(out)):
        if not (name.startswith(f"mpi_{op}_") and name.endswith(".txt")):
            continue
        a = name[len(f"mpi_{op}_"):-4]
        for line in open(os.path.join(out, name)):
            f = line.split()
            if len(f) == 5 and f[0] == op:
                b = int(f[1])
                if b not in mpi or float(f[2]) < mpi[b][0]:
                    mpi[b], alg[b] = (float(f[2]), float(f[3]), float(f[4])), a
    for line in open(os.path.join(out, f"symmem_{op}.json")):
        r = json.loads(line)
        b = r["bytes"]
        if r["wrong"] != 0:
            print(f"{op:<15}{b:>10} WRONG RESULTS: {r['wrong']}")
            continue
        m = mpi.get(b)
        mc = memcpy.get(min(memcpy, key=lambda k: abs(k - b))) if memcpy else 0
        mt, mb, mm = (m if m else (float("nan"),) * 3)
        ratio = mt / r["time_us"] if m else float("nan")
        sm = r.get("time_median_us", float("nan"))
        mratio = mm / sm if m and sm > 0 else float("nan")
        pct = 100 * r["algbw_gbps"] / mc if mc else float("nan")
        size = f"{b // 1048576}M" if b >= 1048576 and b % 1048576 == 0 else (f"{b // 1024}K" if b >= 1024 and b % 1024 == 0 else str(b))
        print(f"{op:<15}{size:>10} {r['time_us']:>11.2f}{mt:>11.2f}{ratio:>8.2f} {sm:>9.2f}{mm:>9.2f}{mratio:>7.2f} {r['algbw_gbps']:>12.3f}{mb:>10.3f}{mc:>12.2f}{pct:>8.0f}% {alg.get(b, '-'):>7}")
PY
