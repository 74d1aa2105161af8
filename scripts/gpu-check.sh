#!/usr/bin/env bash
# GPU check: build with CUDA (sm_90), run every GPU test with 1, 2 and 4 ranks sharing the GPU
# under an MPS daemon (and one rank per GPU where there are several), run the GPU benchmarks
# that exist (symmem-bench --backend cuda|nccl|nvshmem, bench/torch_compare.py), write full logs
# to OUTDIR and print a short summary table last.
#
#   bash scripts/gpu-check.sh OUTDIR          (from the repository root, on the GPU machine)
#
# Rules of that machine (shared/GPU.md): NVLink multicast stays off, MPS is started here and
# stopped at the end, nothing touches clocks/compute mode. Every step has a timeout and the
# whole script keeps inside GPU_CHECK_BUDGET_S (default 540 s); a failing step does not stop
# the others. Exit status: 0 when every step passed, 1 otherwise.
# Knobs: GPU_CHECK_BUILD_DIR (default build-gpu), GPU_CHECK_BUDGET_S, GPU_CHECK_JOBS (16),
# GPU_CHECK_SKIP (space-separated step-name prefixes to skip, e.g. "ctest_gpu_other bench_"),
# GPU_CHECK_ONLY (space-separated step-name prefixes: run only those steps; mps_start always
# runs). Every step together needs more than one 10-minute call: on a machine that stays warm
# between calls (the build directory is kept), run it in three parts:
#   GPU_CHECK_ONLY="configure build exports ctest_gpu_cuda example ctest_gpu_suite"
#   GPU_CHECK_ONLY="ctest_gpu_moe ctest_gpu_other cuda_one_rank"
#   GPU_CHECK_ONLY="torch_compare symm_mem_compare bench_ trace_ tune_ moe_compare moe_pdl"
# Order: configure, build, MPS, ctest_gpu_cuda, example, ctest_gpu_suite, ctest_gpu_moe,
# ctest_gpu_other, one rank per GPU, torch_compare, symmem-bench (bench_cuda_moe, moe_compare and
# tune_cuda among them; the budget cuts from the end: raise GPU_CHECK_BUDGET_S or use
# GPU_CHECK_SKIP to run all of it in one call).
set -u -o pipefail

OUT=${1:?usage: bash scripts/gpu-check.sh OUTDIR}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
BUILD=${GPU_CHECK_BUILD_DIR:-$ROOT/build-gpu}
BUDGET=${GPU_CHECK_BUDGET_S:-540}
JOBS=${GPU_CHECK_JOBS:-16}
T0=$(date +%s)

export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
unset SYMMEM_ALLOW_SHARED_GPU
[ -d /usr/local/cuda/bin ] && export PATH=/usr/local/cuda/bin:$PATH

ROWS=()       # "step|status|seconds|detail"
FAILED=0

elapsed() { echo $(( $(date +%s) - T0 )); }
remaining() { echo $(( BUDGET - $(elapsed) )); }

# run_step NAME LIMIT_S CMD...: runs CMD with its output in $OUT/NAME.log, bounded by LIMIT_S and
# by the remaining budget; records PASS / FAIL(rc) / TIMEOUT / NOTRUN.
run_step() {
  local name=$1 limit=$2
  shift 2
  local pat
  for pat in ${GPU_CHECK_SKIP:-}; do
    if [[ $name == $pat* ]]; then
      ROWS+=("$name|skipped|0|GPU_CHECK_SKIP")
      STEP_DETAIL=""
      return 0
    fi
  done
  if [ -n "${GPU_CHECK_ONLY:-}" ] && [ "$name" != mps_start ]; then
    local wanted=0
    for pat in $GPU_CHECK_ONLY; do [[ $name == $pat* ]] && wanted=1; done
    if (( ! wanted )); then
      STEP_DETAIL=""
      return 0  # not part of this call (not listed in the summary)
    fi
  fi
  local left
  left=$(( $(remaining) - 10 ))
  (( left < limit )) && limit=$left
  if (( limit < 5 )); then
    ROWS+=("$name|NOTRUN|0|no time left in the ${BUDGET}s budget")
    FAILED=1
    return 1
  fi
  local t0 rc status
  t0=$(date +%s)
  echo ">>> [$(elapsed)s] $name (limit ${limit}s): $*" | tee -a "$OUT/steps.log"
  timeout --kill-after=10 "$limit" "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  if (( rc == 0 )); then
    status=PASS
  elif (( rc == 77 )); then
    status=SKIP  # every rank skipped, with its reason in the log
    STEP_DETAIL="$(grep -m1 -oE 'SKIPPED: .*' "$OUT/$name.log" | cut -c1-100)"
  elif (( rc == 124 || rc == 137 )); then
    status=TIMEOUT
    FAILED=1
  else
    status="FAIL(rc=$rc)"
    FAILED=1
  fi
  ROWS+=("$name|$status|$(( $(date +%s) - t0 ))|${STEP_DETAIL:-}")
  STEP_DETAIL=""
  echo "<<< $name: $status" | tee -a "$OUT/steps.log"
  return $rc
}

# ---- environment ---------------------------------------------------------------------------
{
  echo "date: $(date -u)"; echo "host: $(hostname)"; echo "root: $ROOT"; echo "build: $BUILD"
  echo "--- nvidia-smi -L"; nvidia-smi -L 2>&1
  echo "--- nvidia-smi"; nvidia-smi 2>&1
  echo "--- nvcc --version"; nvcc --version 2>&1
  echo "--- cmake --version"; cmake --version 2>&1 | head -1
  echo "--- ninja --version"; ninja --version 2>&1
  echo "--- nproc"; nproc
  echo "--- python"; python3 -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
  echo "--- git"; git -C "$ROOT" log --oneline -3 2>&1; git -C "$ROOT" status --short 2>&1 | head -20
  echo "--- env"; env | grep -E '^(CUDA|NCCL|NVSHMEM|TORCH_SYMM|SYMMEM)' | sort
} > "$OUT/env.log" 2>&1
echo "== symmem gpu-check: $(date -u)"
nvidia-smi -L 2>&1 | sed 's/^/   /'
nvcc --version 2>&1 | tail -2 | sed 's/^/   /'
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
NGPU=${NGPU:-0}
echo "   GPUs: $NGPU; logs: $OUT"

# ---- configure and build ---------------------------------------------------------------------
CMAKE_ARGS=(-S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSYMMEM_WERROR=ON
            "-DCMAKE_CUDA_ARCHITECTURES=90-real;90-virtual" -DSYMMEM_WITH_CUDA=ON
            -DSYMMEM_BUILD_TESTS=ON)
if python3 -c 'import nvidia.nvshmem' > /dev/null 2>&1; then
  echo "   NVSHMEM wheel: present (the nvshmem plugin is built if SymmemGpu.cmake finds it)"
else
  echo "   NVSHMEM wheel: absent"
fi
if [ ! -f /usr/local/cuda/include/nccl.h ] && [ -z "${NCCL_HOME:-}" ]; then
  NCCL_WHEEL=$(python3 -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null || true)
  if [ -n "$NCCL_WHEEL" ] && [ -f "$NCCL_WHEEL/include/nccl.h" ]; then
    export NCCL_HOME=$NCCL_WHEEL
    echo "   NCCL: from the wheel at $NCCL_HOME"
  fi
fi
if [ -f "$ROOT/python/CMakeLists.txt" ] && python3 -c 'import nanobind' > /dev/null 2>&1; then
  CMAKE_ARGS+=(-DSYMMEM_BUILD_PYTHON=ON)
fi
if ! run_step configure 120 cmake "${CMAKE_ARGS[@]}"; then
  if [[ " ${CMAKE_ARGS[*]} " == *" -DSYMMEM_BUILD_PYTHON=ON "* ]]; then
    # Keep the C++ build and the tests going without the Python package.
    run_step configure_without_python 120 cmake "${CMAKE_ARGS[@]}" -DSYMMEM_BUILD_PYTHON=OFF
  fi
fi
grep -E '^-- symmem' "$OUT/configure.log" | sed 's/^/   /'
STEP_DETAIL="ninja -j$JOBS -k 0"
run_step build 330 ninja -C "$BUILD" -j "$JOBS" -k 0
grep -E '^FAILED|error:' "$OUT/build.log" | head -10 | sed 's/^/   /'
STEP_DETAIL="no static-library code exported (NOTE [private static libraries])"
run_step exports 30 bash "$ROOT/scripts/check-exports.sh" "$BUILD"

# Built executables (not the copies the install test puts under tests/install/).
find_exe() {
  find "$BUILD" -path '*/tests/install' -prune -o -type f -name "$1" -perm -u+x -print 2>/dev/null |
    head -1
}
SYMMEM_RUN=$(find_exe symmem-run)
SYMMEM_BENCH=$(find_exe symmem-bench)
TEST_GPU_CUDA=$(find_exe test_gpu_cuda)
EXAMPLE=$(find_exe symmem_example_device_kernel)

# ---- MPS ---------------------------------------------------------------------------------------
# shellcheck source=lib/mps.sh
source "$ROOT/scripts/lib/mps.sh"  # MPS is left as it was found
trap mps_leave_as_found EXIT
mps_quit 5  # a daemon left by an earlier run: the checks start a fresh one
sleep 1
if STEP_DETAIL="nvidia-cuda-mps-control -d" run_step mps_start 20 nvidia-cuda-mps-control -d; then
  sleep 1
else
  echo "   MPS did not start: tests still run (correctness), timings mean nothing"
fi

# ---- GPU tests (ctest label gpu: 1, 2 and 4 ranks on the GPU) ----------------------------------
# ctest_rows / case_counts: per-test summary rows of a ctest -V log (shared with gpu-tests.sh).
# shellcheck source=lib/ctest-rows.sh
source "$ROOT/scripts/lib/ctest-rows.sh"
if [ -d "$BUILD" ]; then
  (cd "$BUILD" && ctest -N -L gpu > "$OUT/ctest_list.log" 2>&1)
  # The cuda backend's plugin and memory tests first (tests/cuda: test_cuda_plugin, gpu_cuda_*),
  # then every other gpu-labelled test (the collectives gpu_ops_* of tests/cuda among them).
  CUDA_TESTS='^(gpu_cuda_|test_cuda_plugin$)'
  STEP_DETAIL="tests/cuda: cuda backend plugin and memory, 1/2/4 ranks" \
    run_step ctest_gpu_cuda 240 bash -c "cd '$BUILD' && ctest -L gpu -R '$CUDA_TESTS' -V -j1"
  while IFS= read -r row; do [ -n "$row" ] && ROWS+=("$row"); done < <(ctest_rows "$OUT/ctest_gpu_cuda.log" "  ")
  # The example (a user kernel on the device API) before the other issues' tests.
  if [ -n "$SYMMEM_RUN" ] && [ -n "$EXAMPLE" ]; then
    STEP_DETAIL="examples/device_kernel.cu, 2 ranks" \
      run_step example_device_kernel 60 env SYMMEM_ALLOW_SHARED_GPU=1 SYMMEM_BACKEND=cuda \
      SYMMEM_TIMEOUT_MS=30000 "$SYMMEM_RUN" -n 2 -- "$EXAMPLE"
  fi
  # The backend-independent op suite (tests/ops/test_ops_mp.cpp, NOTE [backend suites]) on cuda,
  # nvshmem and nccl with 2 and 4 ranks: the cases the host backend passes in CI, in GPU memory.
  SUITE_TESTS='^ops_suite_'
  STEP_DETAIL="the op suite of CI on the GPU backends (ops_suite_{cuda,nvshmem,nccl}_np{2,4})" \
    run_step ctest_gpu_suite 300 bash -c "cd '$BUILD' && ctest -L gpu -R '$SUITE_TESTS' -V -j1"
  while IFS= read -r row; do [ -n "$row" ] && ROWS+=("$row"); done < <(ctest_rows "$OUT/ctest_gpu_suite.log" "  ")
  # MoE dispatch/combine on GPU memory (issue #20): C++ and Python, bitwise against the host.
  MOE_TESTS='^(gpu_moe_|python_moe_gpu_)'
  STEP_DETAIL="MoE on the GPU vs the host implementation, 1/2/4 ranks (C++), 2/4 (torch)" \
    run_step ctest_gpu_moe 200 bash -c "cd '$BUILD' && ctest -L gpu -R '$MOE_TESTS' -V -j1"
  while IFS= read -r row; do [ -n "$row" ] && ROWS+=("$row"); done < <(ctest_rows "$OUT/ctest_gpu_moe.log" "  ")
  STEP_DETAIL="every other gpu-labelled test (gpu_ops, nccl, nvshmem, python...)" \
    run_step ctest_gpu_other 300 bash -c "cd '$BUILD' && ctest -L gpu -E '$CUDA_TESTS|$SUITE_TESTS|$MOE_TESTS' -V -j1"
  while IFS= read -r row; do [ -n "$row" ] && ROWS+=("$row"); done < <(ctest_rows "$OUT/ctest_gpu_other.log" "  ")
fi

# ---- one rank per GPU (only where there are several) ------------------------------------------
if (( NGPU > 1 )) && [ -n "$SYMMEM_RUN" ] && [ -n "$TEST_GPU_CUDA" ]; then
  STEP_DETAIL="$NGPU ranks, one per GPU, SYMMEM_BACKEND=cuda" \
    run_step cuda_one_rank_per_gpu 180 env SYMMEM_BACKEND=cuda SYMMEM_TIMEOUT_MS=60000 \
    "$SYMMEM_RUN" -n "$NGPU" -- "$TEST_GPU_CUDA"
fi

# ---- torch comparison (bench/torch_compare.py of the GPU collectives) ------------------------
if [ -f "$ROOT/bench/torch_compare.py" ]; then
  STEP_DETAIL="bench/torch_compare.py --quick (N=2,4, bf16, eager + graphs)" \
    run_step torch_compare 200 env SYMMEM_BUILD_DIR="$BUILD" \
    python3 "$ROOT/bench/torch_compare.py" --quick --build "$BUILD" --out "$OUT/torch_compare"
  [ -f "$OUT/torch_compare/torch_compare.md" ] && cp "$OUT/torch_compare/torch_compare.md" "$OUT/"
else
  ROWS+=("torch_compare|absent|0|bench/torch_compare.py not in this tree")
fi

# ---- torch's symm_mem module vs symmem's (bench/symm_mem_compare.py: one program, two imports) --
if [ -f "$ROOT/bench/symm_mem_compare.py" ]; then
  STEP_DETAIL="bench/symm_mem_compare.py --quick (N=2, bf16, same results + us per op and size)" \
    run_step symm_mem_compare 150 env SYMMEM_BUILD_DIR="$BUILD" \
    python3 "$ROOT/bench/symm_mem_compare.py" --quick --np 2 --build "$BUILD" \
    --out "$OUT/symm_mem_compare"
  [ -f "$OUT/symm_mem_compare/symm_mem_compare.md" ] && cp "$OUT/symm_mem_compare/symm_mem_compare.md" "$OUT/"
else
  ROWS+=("symm_mem_compare|absent|0|bench/symm_mem_compare.py not in this tree")
fi

# ---- benchmarks ----------------------------------------------------------------------------------
if [ -n "$SYMMEM_RUN" ] && [ -n "$SYMMEM_BENCH" ]; then
  "$SYMMEM_BENCH" --help > "$OUT/bench_help.log" 2>&1
  for np in 2 4; do
    STEP_DETAIL="all_reduce bf16 4 KiB..64 MiB, $np ranks" \
      run_step "bench_cuda_all_reduce_np$np" 90 env SYMMEM_ALLOW_SHARED_GPU=1 \
      SYMMEM_TIMEOUT_MS=60000 "$SYMMEM_RUN" -n "$np" -- "$SYMMEM_BENCH" --backend cuda \
      --op all_reduce --dtype bf16 -b 4096 -e 67108864 -f 4 --json "$OUT/bench_cuda_all_reduce_np$np.jsonl"
  done
  STEP_DETAIL="--op all (every op), bf16, 4 ranks, 4 KiB..4 MiB" \
    run_step bench_cuda_all_ops 120 env SYMMEM_ALLOW_SHARED_GPU=1 SYMMEM_TIMEOUT_MS=30000 \
    "$SYMMEM_RUN" -n 4 -- "$SYMMEM_BENCH" --backend cuda --op all --dtype bf16 \
    -b 4096 -e 4194304 -f 4 --json "$OUT/bench_cuda_all_ops.jsonl"
  # MoE (issue #20), DeepEP shapes: hidden 7168, top-8, 256 experts over 4 ranks; decode (128
  # tokens per rank, low_latency) and prefill (4096, normal), bf16 and fp8 dispatch, bf16 combine;
  # each run verified against the exact answer (symmem-bench exits non-zero when wrong).
  STEP_DETAIL="moe_dispatch/combine, 4 ranks, H 7168, top-8, 256 experts, 128 ll + 4096 normal" \
    run_step bench_cuda_moe 240 env SYMMEM_ALLOW_SHARED_GPU=1 SYMMEM_TIMEOUT_MS=60000 bash -c \
    "set -e; for spec in '128 ll' '4096 normal'; do set -- \$spec
       for op in 'moe_dispatch' 'moe_dispatch --fp8' 'moe_combine'; do
         '$SYMMEM_RUN' -n 4 -- '$SYMMEM_BENCH' --backend cuda --op \$op --tokens \$1 --mode \$2 \
           --hidden 7168 --topk 8 --experts 256 -n 10 -w 2
       done
     done"
  if [ -f "$ROOT/bench/moe_compare.py" ]; then
    STEP_DETAIL="bench/moe_compare.py: torch all_to_all_vdev_2d vs symmem dispatch vs all_to_all" \
      run_step moe_compare 200 env SYMMEM_BUILD_DIR="$BUILD" python3 "$ROOT/bench/moe_compare.py" \
      --build "$BUILD" --np 4 --out "$OUT/moe_compare"
    [ -f "$OUT/moe_compare/moe_compare.md" ] && cp "$OUT/moe_compare/moe_compare.md" "$OUT/"
    # torch's all_to_all_vdev_2d takes at most 16 experts per rank (its NUM_TILES; 256 experts
    # over 4 ranks are refused): the same comparison at 64 experts, where both run.
    STEP_DETAIL="bench/moe_compare.py --experts 64 (16 a rank: torch's all_to_all_vdev_2d limit)" \
      run_step moe_compare_e64 200 env SYMMEM_BUILD_DIR="$BUILD" python3 \
      "$ROOT/bench/moe_compare.py" --build "$BUILD" --np 4 --experts 64 --out "$OUT/moe_compare_e64"
    [ -f "$OUT/moe_compare_e64/moe_compare.md" ] &&
      cp "$OUT/moe_compare_e64/moe_compare.md" "$OUT/moe_compare_e64.md"
    # SYMMEM_MOE_PDL=0 (on by default; NOTE [moe programmatic launch]): the low-latency MoE tests
    # on the plain-launch path, then the decode dispatch and combine with programmatic launch off
    # and on, alternated, twice.
    STEP_DETAIL="SYMMEM_MOE_PDL=0: gpu_moe tests, then moe_compare --tokens 128 off/on x2" \
      run_step moe_pdl 200 bash -c \
      "set -e; cd '$BUILD' && SYMMEM_MOE_PDL=0 ctest -L gpu -R '^gpu_moe_np[24]\$' -j1 --output-on-failure
       for run in 1 2; do for pdl in 0 1; do
         SYMMEM_MOE_PDL=\$pdl SYMMEM_BUILD_DIR='$BUILD' python3 '$ROOT/bench/moe_compare.py' \
           --build '$BUILD' --np 4 --experts 64 --tokens 128 --skip-torch \
           --out '$OUT/moe_pdl/'\$run-\$pdl
         cp '$OUT/moe_pdl/'\$run-\$pdl/moe_compare.md '$OUT/moe_pdl_'\$run-\$pdl.md
       done; done"
  fi
  STEP_DETAIL="--op all, fp8 e4m3 and e5m2 (odd sizes), 4 ranks, 1 B..4 MiB" \
    run_step bench_cuda_fp8 90 env SYMMEM_ALLOW_SHARED_GPU=1 SYMMEM_TIMEOUT_MS=30000 bash -c \
    "'$SYMMEM_RUN' -n 4 -- '$SYMMEM_BENCH' --backend cuda --op all --dtype float8_e4m3fn \
       -b 1 -e 4194304 -f 8 --json '$OUT/bench_cuda_fp8_e4m3.jsonl' &&
     '$SYMMEM_RUN' -n 4 -- '$SYMMEM_BENCH' --backend cuda --op all_reduce --dtype float8_e5m2 \
       --redop avg -b 1 -e 4194304 -f 8 --json '$OUT/bench_cuda_fp8_e5m2.jsonl'"
  # i32, i64, f64 on the cuda kernels: every op checked exactly, odd element counts (sizes 24 B
  # x 7^k: partial 8- and 16-byte units), LL and barrier paths; plus f64 avg and i64 max.
  STEP_DETAIL="--op all, i32 i64 f64 (odd counts) + f64 avg + i64 max, 2 ranks, 24 B..2.7 MiB" \
    run_step bench_cuda_int_f64 90 env SYMMEM_ALLOW_SHARED_GPU=1 SYMMEM_TIMEOUT_MS=30000 bash -c \
    "for dt in i32 i64 f64; do
       '$SYMMEM_RUN' -n 2 -- '$SYMMEM_BENCH' --backend cuda --op all --dtype \$dt -b 24 -e 4194304 \
         -f 7 -n 5 -w 1 --json '$OUT/bench_cuda_'\$dt'.jsonl' || exit 1
     done &&
     '$SYMMEM_RUN' -n 2 -- '$SYMMEM_BENCH' --backend cuda --op all_reduce --dtype f64 --redop avg \
       -b 24 -e 4194304 -f 7 -n 5 -w 1 --json '$OUT/bench_cuda_f64_avg.jsonl' &&
     '$SYMMEM_RUN' -n 2 -- '$SYMMEM_BENCH' --backend cuda --op all_reduce --dtype i64 --redop max \
       -b 24 -e 4194304 -f 7 -n 5 -w 1 --json '$OUT/bench_cuda_i64_max.jsonl'"
  # The dtypes that are only moved (issue #23: uint8, int8, bool, int16, complex64, and
  # complex128 for elements wider than the LL path's 8-byte units) through every data-movement op
  # on the cuda kernels, checked exactly (the reductions print "skipped": those dtypes are moved,
  # not reduced); LL, barrier and odd tails. test_gpu_ops covers every moved-only row.
  STEP_DETAIL="--op all, u8 i8 b8 i16 c64 c128 (moved only), 2 ranks, 21 B..2.4 MiB" \
    run_step bench_cuda_moved_dtypes 120 env SYMMEM_ALLOW_SHARED_GPU=1 SYMMEM_TIMEOUT_MS=30000 \
    bash -c "for dt in u8 i8 b8 i16 c64 c128; do
       '$SYMMEM_RUN' -n 2 -- '$SYMMEM_BENCH' --backend cuda --op all --dtype \$dt -b 21 -e 4194304 \
         -f 7 -n 3 -w 1 --json '$OUT/bench_cuda_'\$dt'.jsonl' || exit 1
     done"
  # The flight recorder on the GPU (issue #18): 4 ranks, every op, dumps at exit with the
  # kernels' device times; symmem-trace and its Perfetto timeline; the recorder's cost.
  STEP_DETAIL="--op all bf16, 4 ranks, --trace: device times, symmem-trace, Perfetto" \
    run_step trace_cuda_np4 120 bash -c \
    "env SYMMEM_ALLOW_SHARED_GPU=1 SYMMEM_TIMEOUT_MS=30000 \
       SYMMEM_TRACE_FILE='$OUT/trace_np4.metrics.jsonl' '$SYMMEM_RUN' -n 4 -- '$SYMMEM_BENCH' \
       --backend cuda --op all --dtype bf16 -b 4096 -e 4194304 -f 32 --trace '$OUT/trace_np4' &&
     python3 '$ROOT/scripts/check-gpu-trace.py' '$OUT/trace_np4' --ranks 4 \
       --trace-tool '$ROOT/tools/trace/symmem-trace' --perfetto '$OUT/trace_np4.perfetto.json' \
       --metrics '$OUT/trace_np4.metrics.jsonl'"
  if [ -x "$BUILD/bench/gpu_allreduce_bench" ]; then
    STEP_DETAIL="bench/trace_overhead.py cuda: SYMMEM_TRACE_BUFFER 0 vs 2000, 2 ranks, eager" \
      run_step trace_overhead_cuda 120 python3 "$ROOT/bench/trace_overhead.py" --build "$BUILD" \
      cuda --np 2 --runs 4 --iters 200 --sizes 4096,262144,4194304
  fi
  # symmem-tune on the cuda backend (issue #19): the LL crossover and the two-shot's blocks per
  # SM share for 2..4 ranks under MPS into a tuning file, then auto with that file against auto
  # with the built-in table, alternated (bf16 all_reduce; compare the time_median_us columns of
  # the two JSON files per size).
  SYMMEM_TUNE="$BUILD/tools/tune/symmem-tune"
  if [ -x "$SYMMEM_TUNE" ]; then
    STEP_DETAIL="symmem-tune --backend cuda, 4 ranks (2..4), then auto: tuned vs built-in" \
      run_step tune_cuda 150 bash -c \
      "env SYMMEM_ALLOW_SHARED_GPU=1 SYMMEM_TIMEOUT_MS=60000 '$SYMMEM_RUN' -n 4 -- '$SYMMEM_TUNE' \
         --backend cuda --out '$OUT/tuning_cuda.json' --min-bytes 4K --max-bytes 64M -n 20 &&
       for run in 1 2; do
         for mode in builtin tuned; do
           f=; [ \$mode = tuned ] && f='$OUT/tuning_cuda.json'
           env SYMMEM_TUNING_FILE=\$f SYMMEM_ALLOW_SHARED_GPU=1 SYMMEM_TIMEOUT_MS=60000 \
             '$SYMMEM_RUN' -n 4 -- '$SYMMEM_BENCH' --backend cuda --op all_reduce --dtype bf16 \
             -b 4096 -e 67108864 -f 2 -n 50 --json '$OUT/tune_auto_'\$mode\$run'.jsonl' || exit 1
         done
       done"
  fi
  # The other GPU backends, every op (issues 8 and 9). NCCL refuses two ranks on one GPU, so
  # its multi-rank run needs several GPUs; NVSHMEM PEs share the GPU in full MPG mode (MPS with
  # CUDA_MPS_ACTIVE_THREAD_PERCENTAGE summing to <= 100 over the PEs, GPU.md).
  PLUGIN_BENCH=(--op all --dtype bf16 -b 4096 -e 16777216 -f 4)
  NCCL_NP=1
  (( NGPU > 1 )) && NCCL_NP=$NGPU
  STEP_DETAIL="--op all, bf16, $NCCL_NP rank(s), one per GPU" \
    run_step "bench_nccl_np$NCCL_NP" 90 env SYMMEM_TIMEOUT_MS=60000 "$SYMMEM_RUN" -n "$NCCL_NP" -- \
    "$SYMMEM_BENCH" --backend nccl "${PLUGIN_BENCH[@]}" --json "$OUT/bench_nccl_np$NCCL_NP.jsonl"
  for np in 1 2 4; do
    STEP_DETAIL="--op all, bf16, $np PE(s), MPS $((100 / np))%" \
      run_step "bench_nvshmem_np$np" 90 env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$((100 / np)) \
      SYMMEM_TIMEOUT_MS=60000 "$SYMMEM_RUN" -n "$np" -- "$SYMMEM_BENCH" --backend nvshmem \
      "${PLUGIN_BENCH[@]}" --json "$OUT/bench_nvshmem_np$np.jsonl"
  done
else
  ROWS+=("bench (symmem-bench)|absent|0|symmem-bench or symmem-run not built")
fi
# ---- stop MPS, summary ---------------------------------------------------------------------------
mps_leave_as_found
trap - EXIT
{
  echo
  echo "== symmem gpu-check summary ($(elapsed)s of ${BUDGET}s budget, GPUs: $NGPU, logs: $OUT)"
  printf '%-34s %-14s %7s  %s\n' STEP STATUS SECONDS DETAIL
  for row in "${ROWS[@]}"; do
    IFS='|' read -r a b c d <<< "$row"
    printf '%-34s %-14s %7s  %s\n' "$a" "$b" "$c" "$d"
  done
  if (( FAILED )); then echo "RESULT: FAILED (see the logs above)"; else echo "RESULT: PASSED"; fi
} | tee "$OUT/summary.txt"
exit $FAILED
