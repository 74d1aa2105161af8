// MoE dispatch and combine kernels (src/core/moe_device.hpp states what each computes; NOTE [moe
// exchange] in src/core/moe.cpp how the core uses them). The exchange itself is the group's
// all_to_all_v; these kernels only gather rows into packs and out of them, and sum the rows that
// come back.

#include <cuda_runtime.h>

#include <cstdint>

#include "core/float_convert.hpp"
#include "cuda/cuda_moe.hpp"

namespace symmem::cuda {
namespace {

using detail::MoeCombineArgs;
using detail::MoeGatherArgs;

constexpr int kMoeThreads = 256;
constexpr int64_t kMoeMaxBlocks = 4096;

// The widest access (16, 8, 4, 2 or 1 bytes) that every address and size allows.
int width_of(const detail::MoeSegment& s) {
  const auto bits = reinterpret_cast<uintptr_t>(s.src) | reinterpret_cast<uintptr_t>(s.dst) |
                    static_cast<uintptr_t>(s.src_stride) | static_cast<uintptr_t>(s.dst_stride) |
                    static_cast<uintptr_t>(s.bytes);
  for (int w = 16; w > 1; w /= 2)
    if (bits % static_cast<uintptr_t>(w) == 0) return w;
  return 1;
}

struct GatherParams {
  MoeGatherArgs a;
  int width[2] = {1, 1};
};

template <typename V>
__device__ __forceinline__ void copy_row(char* dst, const char* src, int64_t bytes) {
  const int64_t n = bytes / static_cast<int64_t>(sizeof(V));
  auto* d = reinterpret_cast<V*>(dst);
  const auto* s = reinterpret_cast<const V*>(src);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) d[i] = s[i];
}

__device__ __forceinline__ void copy_bytes(char* dst, const char* src, int64_t bytes, int width) {
  switch (width) {
    case 16:
      copy_row<uint4>(dst, src, bytes);
      break;
    case 8:
      copy_row<uint2>(dst, src, bytes);
      break;
    case 4:
      copy_row<uint32_t>(dst, src, bytes);
      break;
    case 2:
      copy_row<uint16_t>(dst, src, bytes);
      break;
    default:
      copy_row<uint8_t>(dst, src, bytes);
      break;
  }
}

__global__ void __launch_bounds__(kMoeThreads) moe_gather_kernel(const GatherParams p) {
  const MoeGatherArgs& a = p.a;
  if (blockIdx.x == 0)
    for (int i = threadIdx.x; i < a.count_n; i += blockDim.x)
      a.count_out[i] = a.count_in[i] * a.count_scale;
  for (int64_t i = blockIdx.x; i < a.rows; i += gridDim.x) {
    const int64_t from = a.index != nullptr ? a.index[i] : i;
    if (from < 0) continue;
    for (int s = 0; s < a.segments; ++s) {
      const detail::MoeSegment& g = a.seg[s];
      copy_bytes(g.dst + i * g.dst_stride, g.src + from * g.src_stride, g.bytes, p.width[s]);
    }
  }
}

// Element h of a row of dtype T as f32, and f32 rounded to T (the host's conversions,
// core/float_convert.hpp, so host and device round alike).
template <int kDType>
__device__ __forceinline__ float load_f32(const char* row, int64_t h) {
  if constexpr (kDType == 0) {
    return reinterpret_cast<const float*>(row)[h];
  } else if constexpr (kDType == 2) {
    return fp::f16_to_f32(reinterpret_cast<const uint16_t*>(row)[h]);
  } else {
    return fp::bf16_to_f32(reinterpret_cast<const uint16_t*>(row)[h]);
  }
}
template <int kDType>
__device__ __forceinline__ void store_f32(char* row, int64_t h, float v) {
  if constexpr (kDType == 0) {
    reinterpret_cast<float*>(row)[h] = v;
  } else if constexpr (kDType == 2) {
    reinterpret_cast<uint16_t*>(row)[h] = fp::f32_to_f16(v);
  } else {
    reinterpret_cast<uint16_t*>(row)[h] = fp::f32_to_bf16(v);
  }
}

// One block per token (grid-stride); its slots' rows and weights are read once into shared
// memory; each thread sums its elements over the slots in ascending order.
template <int kDType>
__global__ void __launch_bounds__(kMoeThreads) moe_combine_kernel(const MoeCombineArgs a) {
  extern __shared__ int64_t moe_shared[];
  const int k = a.topk;
  int64_t* rows = moe_shared;
  auto* w = reinterpret_cast<float*>(moe_shared + k);
  constexpr int64_t es = kDType == 0 ? 4 : 2;
  for (int64_t t = blockIdx.x; t < a.tokens; t += gridDim.x) {
    __syncthreads();  // the previous token's slots are no longer read
    for (int j = threadIdx.x; j < k; j += blockDim.x) {
      rows[j] = a.slot_row[t * k + j];
      w[j] = a.weights[t * k + j];
    }
    __syncthreads();
    char* out = a.out + t * a.hidden * es;
    for (int64_t h = threadIdx.x; h < a.hidden; h += blockDim.x) {
      float acc = 0.0f;
      for (int j = 0; j < k; ++j) {
        const int64_t r = rows[j];
        if (r < 0) continue;
        acc = __fadd_rn(acc, __fmul_rn(w[j], load_f32<kDType>(a.rows + r * a.row_stride, h)));
      }
      store_f32<kDType>(out, h, acc);
    }
  }
}

}  // namespace

int launch_moe_gather(const MoeGatherArgs& a, void* stream) {
  if (a.rows <= 0 && a.count_n <= 0) return 0;
  GatherParams p;
  p.a = a;
  for (int s = 0; s < a.segments && s < 2; ++s) p.width[s] = width_of(a.seg[s]);
  const int64_t blocks = a.rows < 1 ? 1 : (a.rows < kMoeMaxBlocks ? a.rows : kMoeMaxBlocks);
  moe_gather_kernel<<<static_cast<unsigned>(blocks), kMoeThreads, 0,
                      static_cast<cudaStream_t>(stream)>>>(p);
  return static_cast<int>(cudaGetLastError());
}

int launch_moe_combine(const MoeCombineArgs& a, void* stream) {
  if (a.tokens <= 0) return 0;
  const int64_t blocks = a.tokens < kMoeMaxBlocks ? a.tokens : kMoeMaxBlocks;
  const size_t shared = static_cast<size_t>(a.topk) * (sizeof(int64_t) + sizeof(float));
  auto s = static_cast<cudaStream_t>(stream);
  const auto g = static_cast<unsigned>(blocks);
  switch (a.dtype) {
    case 0:
      moe_combine_kernel<0><<<g, kMoeThreads, shared, s>>>(a);
      break;
    case 2:
      moe_combine_kernel<2><<<g, kMoeThreads, shared, s>>>(a);
      break;
    case 3:
      moe_combine_kernel<3><<<g, kMoeThreads, shared, s>>>(a);
      break;
    default:
      return static_cast<int>(cudaErrorInvalidValue);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace symmem::cuda
