#pragma once

// What the GPU backends serve, as data (NOTE [op table]), shared by the cuda, nccl and nvshmem
// plugins.
//
// NOTE [GPU dtypes]
// Ops that only move data (every row of the op table that is not a reduction) take every row of
// the dtype table: their kernels count bytes (src/cuda/kernels/move.cu, alltoallv.cu, the LL
// gather path, which carries a dtype only for its element size: cuda_ops.cu's ktype()), and so do
// NVSHMEM's putmem/fcollectmem and the nccl plugin's NCCL calls, which move such dtypes as
// ncclUint8. Reductions (all_reduce, reduce_scatter) take the rows whose `gpu` column is 1: the
// CUDA kernels' own arithmetic (NOTE [dtype table]). A refused dtype is therefore Unsupported
// with the right backends named, from these rules alone.

#include <vector>

#include "symmem/op_table.hpp"

namespace symmem::cuda {

// clang-format off
#define SYMMEM_GPU_RULES_IS_R_R 1
#define SYMMEM_GPU_RULES_IS_R_C 0
#define SYMMEM_GPU_RULES_IS_R_P 0
#define SYMMEM_GPU_RULES_IS_R_S 0
#define SYMMEM_GPU_RULES_RED_BIT_(id, count, send, recv, inplace, kind, ...) \
  | (uint32_t{SYMMEM_GPU_RULES_IS_R_##kind} << static_cast<int>(OpKind::id))
// The reductions of the op table (kind R) and every other op.
inline constexpr OpSet kReductionOps{0 SYMMEM_OPS(SYMMEM_GPU_RULES_RED_BIT_)};
inline constexpr OpSet kMoveOps{OpSet::all().bits & ~kReductionOps.bits};
#undef SYMMEM_GPU_RULES_RED_BIT_
#undef SYMMEM_GPU_RULES_IS_R_R
#undef SYMMEM_GPU_RULES_IS_R_C
#undef SYMMEM_GPU_RULES_IS_R_P
#undef SYMMEM_GPU_RULES_IS_R_S
// clang-format on

// The rules of a GPU backend that has a path for `ops` (NOTE [GPU dtypes]).
inline std::vector<OpSupport> gpu_rules(OpSet ops) {
  const DeviceTypeSet gpu = DeviceTypeSet::of(DeviceType::cuda);
  return {{OpSet{ops.bits & kMoveOps.bits}, DTypeSet::all(), gpu},
          {OpSet{ops.bits & kReductionOps.bits}, DTypeSet::gpu_reducible(), gpu}};
}

}  // namespace symmem::cuda
