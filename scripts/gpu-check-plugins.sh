#!/usr/bin/env bash
# GPU check of the nccl and nvshmem backends: build what they need, run their GPU tests with 1, 2
# and 4 ranks (nvshmem PEs share the GPU under MPS in full MPG mode; nccl multi-rank runs skip on
# a single GPU because NCCL refuses two ranks on one GPU), then symmem-bench --backend nccl /
# nvshmem for every op next to the cuda backend. Full logs go to OUTDIR, a summary table last.
#
#   bash scripts/gpu-check-plugins.sh OUTDIR      (repository root, on the GPU machine)
#
# Reuses the build directory of scripts/gpu-check.sh (GPU_CHECK_BUILD_DIR, default build-gpu).
# Rules of that machine (shared/GPU.md): NVLink multicast off, MPS started here and stopped at
# the end. Every step has a timeout; the whole script keeps inside GPU_CHECK_BUDGET_S (540 s).
# Exit status: 0 when every step passed or was skipped for a stated reason, 1 otherwise.
set -u -o pipefail

OUT=${1:?usage: bash scripts/gpu-check-plugins.sh OUTDIR}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
BUILD=${GPU_CHECK_BUILD_DIR:-$ROOT/build-gpu}
BUDGET=${GPU_CHECK_BUDGET_S:-540}
JOBS=${GPU_CHECK_JOBS:-16}
T0=$(date +%s)

export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export SYMMEM_TIMEOUT_MS=${SYMMEM_TIMEOUT_MS:-60000}
[ -d /usr/local/cuda/bin ] && export PATH=/usr/local/cuda/bin:$PATH

ROWS=()
FAILED=0
elapsed() { echo $(( $(date +%s) - T0 )); }

# run_step NAME LIMIT_S CMD...: output in $OUT/NAME.log; PASS / SKIP(77) / FAIL(rc) / TIMEOUT.
run_step() {
  local name=$1 limit=$2
  shift 2
  local left=$(( BUDGET - $(elapsed) - 10 ))
  (( left < limit )) && limit=$left
  if (( limit < 5 )); then
    ROWS+=("$name|NOTRUN|0|no time left in the ${BUDGET}s budget")
    FAILED=1
    return 1
  fi
  local t0 rc status detail=${STEP_DETAIL:-}
  t0=$(date +%s)
  echo ">>> [$(elapsed)s] $name (limit ${limit}s): $*" | tee -a "$OUT/steps.log"
  timeout --kill-after=10 "$limit" "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  case $rc in
    0) status=PASS ;;
    77) status=SKIP
        detail="$(grep -m1 -oE 'SKIPPED: .*' "$OUT/$name.log" | cut -c1-110)" ;;
    124|137) status=TIMEOUT; FAILED=1 ;;
    *) status="FAIL(rc=$rc)"; FAILED=1 ;;
  esac
  if [ "$status" != SKIP ] && grep -qE '^\[  FAILED  \]' "$OUT/$name.log"; then
    detail="$(grep -cE '^\[  FAILED  \] [A-Za-z]' "$OUT/$name.log") failed gtest line(s); $detail"
  fi
  ROWS+=("$name|$status|$(( $(date +%s) - t0 ))|$detail")
  STEP_DETAIL=""
  echo "<<< $name: $status" | tee -a "$OUT/steps.log"
  return $rc
}

echo "== symmem gpu-check-plugins: $(date -u)"
nvidia-smi -L 2>&1 | sed 's/^/   /'
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
NGPU=${NGPU:-0}

# ---- build ----------------------------------------------------------------------------------------
if [ ! -f /usr/local/cuda/include/nccl.h ] && [ -z "${NCCL_HOME:-}" ]; then
  NCCL_WHEEL=$(python3 -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null || true)
  if [ -n "$NCCL_WHEEL" ] && [ -f "$NCCL_WHEEL/include/nccl.h" ]; then
    export NCCL_HOME=$NCCL_WHEEL
    echo "   NCCL: from the wheel at $NCCL_HOME"
  fi
fi
run_step configure 120 cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CUDA_ARCHITECTURES=90-real;90-virtual" -DSYMMEM_WITH_CUDA=ON -DSYMMEM_BUILD_TESTS=ON
grep -E '^-- symmem' "$OUT/configure.log" | sed 's/^/   /'
TARGETS=()
for t in symmem symmem_cuda symmem_nccl symmem_nvshmem symmem-run symmem-bench test_gpu_nccl \
         test_gpu_nvshmem; do
  ninja -C "$BUILD" -t query "$t" > /dev/null 2>&1 && TARGETS+=("$t")
done
STEP_DETAIL="${TARGETS[*]}"
run_step build 330 ninja -C "$BUILD" -j "$JOBS" -k 0 "${TARGETS[@]}"
grep -E 'FAILED|error' "$OUT/build.log" | head -10 | sed 's/^/   /'

find_exe() { find "$BUILD" -type f -name "$1" -perm -u+x 2>/dev/null | head -1; }
RUN=$(find_exe symmem-run)
BENCH=$(find_exe symmem-bench)
T_NCCL=$(find_exe test_gpu_nccl)
T_NVSHMEM=$(find_exe test_gpu_nvshmem)

# ---- MPS ------------------------------------------------------------------------------------------
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
MPS_UP=0
stop_mps() {
  if (( MPS_UP )); then
    echo quit | timeout 15 nvidia-cuda-mps-control > /dev/null 2>&1
    MPS_UP=0
  fi
}
trap stop_mps EXIT
echo quit | timeout 5 nvidia-cuda-mps-control > /dev/null 2>&1
sleep 1
if STEP_DETAIL="nvidia-cuda-mps-control -d" run_step mps_start 20 nvidia-cuda-mps-control -d; then
  MPS_UP=1
  sleep 1
fi

# ---- tests ----------------------------------------------------------------------------------------
if [ -n "$RUN" ] && [ -n "$T_NCCL" ]; then
  for np in 1 2 4; do
    STEP_DETAIL="$np rank(s)" run_step "nccl_tests_np$np" 150 "$RUN" -n "$np" -- "$T_NCCL"
  done
else
  ROWS+=("nccl_tests|absent|0|test_gpu_nccl or symmem-run not built")
  FAILED=1
fi
if [ -n "$RUN" ] && [ -n "$T_NVSHMEM" ]; then
  for np in 1 2 4; do
    STEP_DETAIL="$np PE(s), MPS $((100 / np))%" \
      run_step "nvshmem_tests_np$np" 150 env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$((100 / np)) \
      "$RUN" -n "$np" -- "$T_NVSHMEM"
  done
else
  ROWS+=("nvshmem_tests|absent|0|test_gpu_nvshmem or symmem-run not built")
  FAILED=1
fi

# ---- benchmarks: every op, bf16, 4 KiB..16 MiB ------------------------------------------------------
BENCH_ARGS=(--op all --dtype bf16 -b 4096 -e 16777216 -f 4)
if [ -n "$RUN" ] && [ -n "$BENCH" ]; then
  STEP_DETAIL="--backend nccl, 1 rank" run_step bench_nccl_np1 60 \
    "$RUN" -n 1 -- "$BENCH" --backend nccl "${BENCH_ARGS[@]}" --json "$OUT/bench_nccl_np1.jsonl"
  if (( NGPU > 1 )); then
    STEP_DETAIL="--backend nccl, $NGPU ranks (one per GPU)" run_step "bench_nccl_np$NGPU" 90 \
      "$RUN" -n "$NGPU" -- "$BENCH" --backend nccl "${BENCH_ARGS[@]}" \
      --json "$OUT/bench_nccl_np$NGPU.jsonl"
  fi
  for np in 1 2 4; do
    STEP_DETAIL="--backend nvshmem, $np PE(s), MPS $((100 / np))%" \
      run_step "bench_nvshmem_np$np" 90 env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$((100 / np)) \
      "$RUN" -n "$np" -- "$BENCH" --backend nvshmem "${BENCH_ARGS[@]}" \
      --json "$OUT/bench_nvshmem_np$np.jsonl"
  done
  for np in 2 4; do
    STEP_DETAIL="--backend cuda (reference), $np ranks" \
      run_step "bench_cuda_np$np" 90 env SYMMEM_ALLOW_SHARED_GPU=1 \
      "$RUN" -n "$np" -- "$BENCH" --backend cuda "${BENCH_ARGS[@]}" \
      --json "$OUT/bench_cuda_np$np.jsonl"
  done
else
  ROWS+=("bench|absent|0|symmem-bench or symmem-run not built")
fi

stop_mps
{
  echo
  echo "== symmem gpu-check-plugins summary ($(elapsed)s of ${BUDGET}s, GPUs: $NGPU, logs: $OUT)"
  printf '%-24s %-12s %7s  %s\n' STEP STATUS SECONDS DETAIL
  for row in "${ROWS[@]}"; do
    IFS='|' read -r a b c d <<< "$row"
    printf '%-24s %-12s %7s  %s\n' "$a" "$b" "$c" "$d"
  done
  if (( FAILED )); then echo "RESULT: FAILED (see the logs above)"; else echo "RESULT: PASSED"; fi
} | tee "$OUT/summary.txt"
exit $FAILED
