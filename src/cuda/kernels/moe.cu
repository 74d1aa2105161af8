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

// Elements of dtype kDType (a DType value: 0 f32, 2 f16, 3 bf16) to and from f32 with the host's
// conversions (core/float_convert.hpp), so host and device round alike.
template <int kDType>
__device__ __forceinline__ float to_f32(uint32_t bits) {
  if constexpr (kDType == 0) {
    return __uint_as_float(bits);
  } else if constexpr (kDType == 2) {
    return fp::f16_to_f32(static_cast<uint16_t>(bits));
  } else {
    return fp::bf16_to_f32(static_cast<uint16_t>(bits));
  }
}
template <int kDType>
__device__ __forceinline__ uint32_t from_f32(float v) {
  if constexpr (kDType == 0) {
    return __float_as_uint(v);
  } else if constexpr (kDType == 2) {
    return fp::f32_to_f16(v);
  } else {
    return fp::f32_to_bf16(v);
  }
}

// kVec consecutive elements: one element (kVec = 1, any alignment), or one 16-byte vector.
template <int kDType, int kVec>
struct Elems {
  static constexpr int kSize = kDType == 0 ? 4 : 2;
  static_assert(kVec == 1 || kVec * kSize == 16, "a single element or 16 bytes");
  __device__ __forceinline__ static void load(const char* p, float* f) {
    if constexpr (kVec == 1) {
      f[0] = to_f32<kDType>(kSize == 4 ? *reinterpret_cast<const uint32_t*>(p)
                                       : *reinterpret_cast<const uint16_t*>(p));
    } else {
      const uint4 v = *reinterpret_cast<const uint4*>(p);
      const uint32_t w[4] = {v.x, v.y, v.z, v.w};
      for (int i = 0; i < 4; ++i) {
        if constexpr (kSize == 4) {
          f[i] = to_f32<kDType>(w[i]);
        } else {
          f[2 * i] = to_f32<kDType>(w[i] & 0xffffu);
          f[2 * i + 1] = to_f32<kDType>(w[i] >> 16);
        }
      }
    }
  }
  __device__ __forceinline__ static void store(char* p, const float* f) {
    if constexpr (kVec == 1) {
      if constexpr (kSize == 4) {
        *reinterpret_cast<uint32_t*>(p) = from_f32<kDType>(f[0]);
      } else {
        *reinterpret_cast<uint16_t*>(p) = static_cast<uint16_t>(from_f32<kDType>(f[0]));
      }
    } else {
      uint32_t w[4];
      for (int i = 0; i < 4; ++i) {
        if constexpr (kSize == 4) {
          w[i] = from_f32<kDType>(f[i]);
        } else {
          w[i] = (from_f32<kDType>(f[2 * i]) & 0xffffu) | (from_f32<kDType>(f[2 * i + 1]) << 16);
        }
      }
      *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
    }
  }
};

// One block per token (grid-stride); its slots' rows and weights are read once into shared
// memory; each thread sums kVec consecutive elements over the slots in ascending order, each
// element on its own (the order and roundings of the host's loop).
template <int kDType, int kVec>
__global__ void __launch_bounds__(kMoeThreads) moe_combine_kernel(const MoeCombineArgs a) {
  extern __shared__ int64_t moe_shared[];
  using E = Elems<kDType, kVec>;
  const int k = a.topk;
  int64_t* rows = moe_shared;
  auto* w = reinterpret_cast<float*>(moe_shared + k);
  const int64_t step = static_cast<int64_t>(kVec) * E::kSize;  // bytes per thread and pass
  const int64_t n = a.hidden / kVec;
  for (int64_t t = blockIdx.x; t < a.tokens; t += gridDim.x) {
    __syncthreads();  // the previous token's slots are no longer read
    for (int j = threadIdx.x; j < k; j += blockDim.x) {
      rows[j] = a.slot_row[t * k + j];
      w[j] = a.weights[t * k + j];
    }
    __syncthreads();
    char* out = a.out + t * a.hidden * E::kSize;
    for (int64_t v = threadIdx.x; v < n; v += blockDim.x) {
      float acc[kVec];
      for (int i = 0; i < kVec; ++i) acc[i] = 0.0f;
      for (int j = 0; j < k; ++j) {
        const int64_t r = rows[j];
        if (r < 0) continue;
        float f[kVec];
        E::load(a.rows + r * a.row_stride + v * step, f);
        for (int i = 0; i < kVec; ++i) acc[i] = __fadd_rn(acc[i], __fmul_rn(w[j], f[i]));
      }
      E::store(out + v * step, acc);
    }
  }
}

template <int kDType>
void launch_combine_of(const MoeCombineArgs& a, unsigned blocks, size_t shared, cudaStream_t s) {
  constexpr int64_t size = kDType == 0 ? 4 : 2;
  const bool vec = (a.hidden * size) % 16 == 0 && a.row_stride % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(a.rows) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(a.out) % 16 == 0;
  if (vec) {
    moe_combine_kernel<kDType, 16 / size><<<blocks, kMoeThreads, shared, s>>>(a);
  } else {
    moe_combine_kernel<kDType, 1><<<blocks, kMoeThreads, shared, s>>>(a);
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
  if (a.topk < 1 || shared > 48 * 1024) return static_cast<int>(cudaErrorInvalidValue);
  auto s = static_cast<cudaStream_t>(stream);
  const auto g = static_cast<unsigned>(blocks);
  switch (a.dtype) {
    case 0:
      launch_combine_of<0>(a, g, shared, s);
      break;
    case 2:
      launch_combine_of<2>(a, g, shared, s);
      break;
    case 3:
      launch_combine_of<3>(a, g, shared, s);
      break;
    default:
      return static_cast<int>(cudaErrorInvalidValue);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace symmem::cuda
