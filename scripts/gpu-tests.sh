#!/usr/bin/env bash
# Runs the named gpu-labelled ctest tests of a GPU build one at a time, each under a fresh MPS
# daemon (a test that kills or crashes a client can leave MPS unusable for the next), inside a
# time budget, and prints one row per test: status, seconds, and rank 0's per-case counts
# (gtest's PASSED/SKIPPED/FAILED, pytest's "N passed, M skipped"). Made for short GPU sessions:
# build first, then run what a note asks for, e.g.
#   GPU_CHECK_ONLY="configure build exports" bash scripts/gpu-check.sh /tmp/gc
#   GPU_TESTS_BUDGET_S=420 bash scripts/gpu-tests.sh "$OUT/tests" ops_suite_py_cuda_np2 gpu_recovery_np4
# A test's ctest TIMEOUT applies, cut to what is left of the budget (a test cut by the budget
# says so). Logs: OUTDIR/<test>.log (ctest -V: every rank's output) and OUTDIR/summary.txt.
# MPS is left as it was found (scripts/lib/mps.sh): a daemon that ran before runs again after.
# Knobs: GPU_CHECK_BUILD_DIR (default build-gpu), GPU_TESTS_BUDGET_S (default 540).
# Exit status: 0 when every test passed or skipped, else 1.
set -u
OUT=${1:?usage: bash scripts/gpu-tests.sh OUTDIR TEST...}
shift
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${GPU_CHECK_BUILD_DIR:-$ROOT/build-gpu}
BUDGET=${GPU_TESTS_BUDGET_S:-540}
# shellcheck source=lib/ctest-rows.sh
source "$ROOT/scripts/lib/ctest-rows.sh"
[ -d "$BUILD" ] || { echo "gpu-tests: no build at $BUILD (run gpu-check.sh's build first)"; exit 1; }

export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
# shellcheck source=lib/mps.sh
source "$ROOT/scripts/lib/mps.sh"
trap mps_leave_as_found EXIT

start=$(date +%s)
failed=0
: > "$OUT/summary.txt"
for t in "$@"; do
  left=$((BUDGET - ($(date +%s) - start)))
  if ((left < 20)); then
    echo "$t|NOTRUN|0|no time left in the ${BUDGET}s budget" | tee -a "$OUT/summary.txt"
    failed=1
    continue
  fi
  mps_restart
  t0=$(date +%s)
  # ctest's own --timeout does not cut a test that sets TIMEOUT; the outer one does (its output
  # is then lost, which the row says).
  (cd "$BUILD" && timeout --kill-after=10 $((left - 5)) ctest -L gpu -R "^${t}\$" -V -j1) \
    > "$OUT/$t.log" 2>&1
  rc=$?
  rows=$(ctest_rows "$OUT/$t.log" "")
  if [ -z "$rows" ]; then
    if ((rc == 124 || rc == 137)); then
      rows="$t|CUT|$(($(date +%s) - t0))|the budget ended it; last lines in $t.log"
    else
      rows="$t|NOTFOUND|0|no gpu-labelled test of that name in $BUILD (ctest rc $rc)"
    fi
  fi
  echo "$rows" | tee -a "$OUT/summary.txt"
  case "$rows" in *"|Passed|"* | *"|Skipped|"*) ;; *) failed=1 ;; esac
done
exit $failed
