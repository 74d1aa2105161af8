#!/usr/bin/env bash
# Times symmem's GPU all-reduce (bench/gpu_allreduce_bench, in place, eager and graph) with each
# SYMMEM_GPU_BLOCKS_PER_SM value, and torch's symmetric-memory all-reduces at the same sizes in
# the same run (bench/torch_compare.py --skip-symmem), for N ranks sharing the GPU(s) under MPS
# (start MPS first, as scripts/gpu-check.sh does). The evidence behind the blocks-per-SM entry of
# the tuning table (docs/performance.md, "Blocks per SM").
#   bash bench/blocks_sweep.sh BUILD OUTDIR [N,N] [sizes] [blocks,blocks]
set -u
BUILD=$(cd "${1:?usage: blocks_sweep.sh BUILD OUTDIR [np] [sizes] [blocks]}" && pwd)
OUT=${2:?OUTDIR}
NPS=${3:-2,4}
SIZES=${4:-1048576,4194304,16777216,67108864}
BLOCKS=${5:-1,2}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export SYMMEM_ALLOW_SHARED_GPU=1
rc=0
for n in ${NPS//,/ }; do
  for b in ${BLOCKS//,/ }; do
    echo "== N=$n SYMMEM_GPU_BLOCKS_PER_SM=$b"
    SYMMEM_GPU_BLOCKS_PER_SM=$b timeout 120 "$BUILD/tools/run/symmem-run" -n "$n" -- \
      "$BUILD/bench/gpu_allreduce_bench" --sizes "$SIZES" --algos auto,two_shot \
      --modes eager,graph | sed "s/^/blocks=$b /" | tee -a "$OUT/symmem.txt" || rc=1
  done
done
python3 "$ROOT/bench/torch_compare.py" --build "$BUILD" --np "$NPS" --sizes "$SIZES" \
  --skip-symmem --out "$OUT/torch" > "$OUT/torch.txt" 2>&1 || rc=1
tail -30 "$OUT/torch.txt"
exit $rc
