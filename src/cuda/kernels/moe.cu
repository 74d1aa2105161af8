// MoE dispatch and combine kernels (src/core/moe_device.hpp states what each computes; NOTE [moe
// exchange] in src/core/moe.cpp how the core uses them). The exchange itself is the group's
// all_to_all_v; these kernels only gather rows into packs and out of them, and sum the rows that
// come back.

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <utility>

#include "core/float_convert.hpp"
#include "cuda/cuda_moe.hpp"
#include "symmem/device/sync.cuh"
#include "symmem/env.hpp"

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

// NOTE [moe programmatic launch]
// A direct low-latency dispatch is three kernels in a row on one stream: the put (fused with the
// route or not), place, unpack; its combine three too: the put, the wait, the sum. Launched
// plainly, each waits for the one before to end, flush and retire before the GPU launches it.
// The kernels after each put are launched with programmatic stream serialization (sm_90): the
// GPU may launch them once every block of the kernel before has called pdl_trigger (or ended),
// and each calls pdl_wait first, which returns when the kernel before has ended and its memory
// is visible. So nothing is read early; only the launch overlaps. The triggers are placed so
// that no block waits early on another process: a put triggers at once (the waiting kernel after
// it is one block), the wait only once every source's signal came (so the blocks after it, which
// may fill the SMs, cannot keep a late rank's put off a GPU that ranks share under MPS).
// On by default where the kernels were compiled for sm_90 or later (pdl_enabled;
// SYMMEM_MOE_PDL=0 turns it off): on one H200 with 4 ranks under MPS the graph-captured decode
// dispatch took 72-75 us against 79-80 us without it, and the MoE GPU tests pass both ways
// (docs/performance.md, MoE). Without the launch attribute a kernel starts after the one before
// has ended: pdl_wait has nothing to wait for, and pdl_trigger no dependent to release.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// SYMMEM_MOE_PDL, for a kernel compiled for sm_90 or later (its PTX version: one JIT-compiled
// from older PTX has its griddepcontrol compiled out, so it must not be launched early). Kept
// per device; every kernel of this file is compiled for the same architectures.
bool pdl_enabled(const void* kernel) {
  static const bool on = env::moe_pdl();
  if (!on) return false;
  constexpr int kMaxDevices = 64;
  static std::atomic<int8_t> known[kMaxDevices] = {};  // 0 unknown, 1 yes, -1 no
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) return false;
  int8_t k = known[dev].load(std::memory_order_relaxed);
  if (k == 0) {
    cudaFuncAttributes fa = {};
    k = cudaFuncGetAttributes(&fa, kernel) == cudaSuccess && fa.ptxVersion >= 90 ? 1 : -1;
    known[dev].store(k, std::memory_order_relaxed);
  }
  return k > 0;
}

// Launches kernel<<<grid, block, shared, s>>>(args...), with programmatic stream serialization
// when `pdl` and pdl_enabled (NOTE [moe programmatic launch]).
template <class... Params, class... Args>
cudaError_t launch_after(bool pdl, void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared,
                         cudaStream_t s, Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t c = {};
  c.gridDim = grid;
  c.blockDim = block;
  c.dynamicSmemBytes = shared;
  c.stream = s;
  c.attrs = attr;
  c.numAttrs = pdl && pdl_enabled(reinterpret_cast<const void*>(kernel)) ? 1 : 0;
  return cudaLaunchKernelEx(&c, kernel, std::forward<Args>(args)...);
}

struct GatherParams {
  MoeGatherArgs a;
  int width[2] = {1, 1};
};

// The block copies `bytes`. kBatch loads in flight per thread before it stores, and then:
// - kAll = false: the rest one vector at a time (a row of 7168 bf16 is 3.5 vectors of 16 bytes
//   per thread, so half the threads copy theirs one by one, each load waiting for the store
//   before it). Fewer registers in the gather kernel (32 against 48 with the predicated loop),
//   so more blocks fit: what the copies of many rows (the exchange's gathers, a prefill's
//   thousands of tokens) want.
// - kAll = true: the last batch too, predicated, so every thread waits on memory once per
//   batch. For the low-latency dispatch's few rows per block (its put and unpack), where each
//   block's wait is on the critical path: on one H100 with 4 ranks under MPS, 128 tokens, the
//   graph-captured dispatch took 77.7-79.8 us against 82.8 (docs/performance.md), while the
//   same loop in the gathers made the 4096-token fp8 dispatch 15-50% slower.
template <typename V, bool kAll>
__device__ __forceinline__ void copy_row(char* dst, const char* src, int64_t bytes) {
  constexpr int kBatch = 4;
  const int64_t n = bytes / static_cast<int64_t>(sizeof(V));
  const int64_t stride = blockDim.x;
  auto* d = reinterpret_cast<V*>(dst);
  const auto* s = reinterpret_cast<const V*>(src);
  int64_t i = threadIdx.x;
  for (; kAll ? i < n : i + (kBatch - 1) * stride < n; i += kBatch * stride) {
    V v[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u)
      if (!kAll || i + u * stride < n) v[u] = s[i + u * stride];
#pragma unroll
    for (int u = 0; u < kBatch; ++u)
      if (!kAll || i + u * stride < n) d[i + u * stride] = v[u];
  }
  if constexpr (!kAll) {
    for (; i < n; i += stride) d[i] = s[i];  // the rest; with kAll the loop above ends at n
  }
}

template <bool kAll = false>
__device__ __forceinline__ void copy_bytes(char* dst, const char* src, int64_t bytes, int width) {
  switch (width) {
    case 16:
      copy_row<uint4, kAll>(dst, src, bytes);
      break;
    case 8:
      copy_row<uint2, kAll>(dst, src, bytes);
      break;
    case 4:
      copy_row<uint32_t, kAll>(dst, src, bytes);
      break;
    case 2:
      copy_row<uint16_t, kAll>(dst, src, bytes);
      break;
    default:
      copy_row<uint8_t, kAll>(dst, src, bytes);
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
      const char* src =
          a.src_rank != nullptr ? static_cast<const char*>(a.peer_src[s][a.src_rank[i]]) : g.src;
      const int64_t to = a.dst_index != nullptr ? a.dst_index[i] : i;
      copy_bytes(g.dst + to * g.dst_stride, src + from * g.src_stride, g.bytes, p.width[s]);
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
  auto* from = reinterpret_cast<const char**>(moe_shared + k);  // each slot's rows
  auto* w = reinterpret_cast<float*>(moe_shared + 2 * k);
  const int64_t step = static_cast<int64_t>(kVec) * E::kSize;  // bytes per thread and pass
  const int64_t n = a.hidden / kVec;
  pdl_wait();  // after a direct combine's wait (NOTE [moe programmatic launch])
  const char* rows_at = a.rows_parity == nullptr ? a.rows : a.rows + *a.rows_parity * a.rows_half;
  for (int64_t t = blockIdx.x; t < a.tokens; t += gridDim.x) {
    __syncthreads();  // the previous token's slots are no longer read
    for (int j = threadIdx.x; j < k; j += blockDim.x) {
      rows[j] = a.slot_row[t * k + j];
      w[j] = a.weights[t * k + j];
      from[j] = a.src_rank == nullptr || rows[j] < 0
                    ? rows_at
                    : static_cast<const char*>(a.peer_rows[a.src_rank[t * k + j]]);
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
        E::load(from[j] + r * a.row_stride + v * step, f);
        for (int i = 0; i < kVec; ++i) acc[i] = __fadd_rn(acc[i], __fmul_rn(w[j], f[i]));
      }
      E::store(out + v * step, acc);
    }
  }
}

template <int kDType>
cudaError_t launch_combine_of(const MoeCombineArgs& a, unsigned blocks, size_t shared,
                              cudaStream_t s) {
  constexpr int64_t size = kDType == 0 ? 4 : 2;
  const bool vec = (a.hidden * size) % 16 == 0 && a.row_stride % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(a.rows) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(a.out) % 16 == 0;
  // rows_parity: after a direct combine's wait kernel, which triggers.
  const bool pdl = a.rows_parity != nullptr;
  if (vec) {
    return launch_after(pdl, moe_combine_kernel<kDType, 16 / size>, dim3(blocks), dim3(kMoeThreads),
                        shared, s, a);
  }
  return launch_after(pdl, moe_combine_kernel<kDType, 1>, dim3(blocks), dim3(kMoeThreads), shared,
                      s, a);
}

// ---- layouts routed on the device (MoeDeviceLayoutArgs; NOTE [moe device layout] in moe.cpp) ---

using detail::MoeDeviceLayoutArgs;
constexpr int kRouteThreads = 1024;

// Entry i of topk_idx as an expert, or -1 (dropped, or outside [0, experts): dropped too).
__device__ __forceinline__ int expert_at(const MoeDeviceLayoutArgs& a, int64_t i) {
  const int64_t v =
      a.idx64 ? static_cast<const int64_t*>(a.topk)[i] : static_cast<const int32_t*>(a.topk)[i];
  return v >= 0 && v < a.experts ? static_cast<int>(v) : -1;
}

// Where a direct dispatch or combine keeps its count of puts (NOTE [moe direct dispatch] in
// src/core/moe.cpp): the last slot of this rank's pad of its scratch, which its signals (channel
// 0) never use.
__device__ __forceinline__ uint32_t* direct_count(const DeviceHandle& h, int rank) {
  return h.signal_pads[rank] + (h.pad_slots - 1);
}

// The copy widths of the layout kernels (chosen on the host, like width_of).
struct LayoutParams {
  MoeDeviceLayoutArgs a;
  int w_row = 1, w_scale = 1;          // x -> pack, x_scales -> pack
  int w_out_row = 1, w_out_scale = 1;  // pack -> recv_x, pack -> recv_scales
  int w_y = 1;                         // y -> combine's pack
};

// Whether token t has an expert on rank r (entries k * t .. k * t + k - 1).
__device__ __forceinline__ bool goes_to(const MoeDeviceLayoutArgs& a, int64_t t, int r) {
  for (int j = 0; j < a.k; ++j) {
    const int e = expert_at(a, t * a.k + j);
    if (e >= 0 && e / a.local == r) return true;
  }
  return false;
}

// An exclusive prefix sum of v[0, n) into out[0, n] (out[n]: the total) by one warp, 32 at a time.
__device__ __forceinline__ void warp_prefix(const int32_t* v, int32_t* out, int n, int lane) {
  int32_t carry = 0;
  for (int b = 0; b < n; b += 32) {
    const int i = b + lane;
    const int32_t x = i < n ? v[i] : 0;
    int32_t inc = x;
    for (int d = 1; d < 32; d <<= 1) {
      const int32_t u = __shfl_up_sync(0xffffffffu, inc, d);
      if (lane >= d) inc += u;
    }
    if (i < n) out[i] = carry + inc - x;
    carry += __shfl_sync(0xffffffffu, inc, 31);
  }
  if (lane == 0) out[n] = carry;
}

// The size of a piece of `tokens` packs (its count block, then the packs), in 4-byte units.
__device__ __forceinline__ int64_t piece_units(const MoeDeviceLayoutArgs& a, int32_t tokens) {
  return (a.cb + static_cast<int64_t>(tokens) * a.pack) / 4;
}

// Thread 0 of the block (all threads may call it), from the tokens to each rank (tok) and the
// exclusive prefix of the entries per expert (ebase, experts + 1): where each rank's piece starts
// in the send pack and its size (send_off, send_units), and the rows combine brings back from
// each rank (back_rows).
__device__ __forceinline__ void write_send_plan(const MoeDeviceLayoutArgs& a, const int32_t* tok,
                                                const int32_t* ebase) {
  if (threadIdx.x != 0) return;
  int64_t off = 0;
  for (int r = 0; r < a.world; ++r) {
    const int64_t units = piece_units(a, tok[r]);
    a.send_off[r] = off;
    a.send_units[r] = units;
    off += units;
    a.back_rows[r] = ebase[(r + 1) * a.local] - ebase[r * a.local];
  }
}

// Column i of a [warps][n] table of counters becomes each warp's start (the exclusive prefix over
// the warps before it); returns the column's total.
__device__ __forceinline__ int32_t starts_over_warps(int32_t* table, int warps, int n, int i) {
  int32_t run = 0;
  for (int v = 0; v < warps; ++v) {
    const int32_t c = table[v * n + i];
    table[v * n + i] = run;
    run += c;
  }
  return run;
}

// One block of W warps; warp w owns a contiguous run of tokens (and so of entries), and shared
// memory holds a counter per (warp, expert) and per (warp, destination rank). Pass 1 counts each
// warp's entries per expert and tokens per destination; pass 2 turns the counts into each warp's
// start (exclusive prefix over warps) and the totals (hist, tok_count); pass 3 walks each warp's
// run 32 entries (tokens) at a time: an entry's index among this rank's entries of its expert is
// its warp's start plus the lanes before it with the same expert (__match_any_sync), so the order
// is (token, slot) as on the host, with O(entries) work in all instead of O(entries x experts)
// on one thread per expert. Then the prefixes (by warp 0, in shared memory: a loop over global
// memory just written costs a cache round trip per step) and each entry's row in what combine
// brings back. Shared memory: route_shape().
__global__ void __launch_bounds__(kRouteThreads) layout_route_kernel(const MoeDeviceLayoutArgs a) {
  extern __shared__ int32_t route_shared[];
  const int tid = threadIdx.x, nt = blockDim.x;
  const int warps = nt / 32, w = tid / 32, lane = tid % 32;
  const unsigned before = (1u << lane) - 1u;
  int32_t* ecnt = route_shared;              // [warps][experts]
  int32_t* rcnt = ecnt + warps * a.experts;  // [warps][world]
  int32_t* ehist = rcnt + warps * a.world;   // [experts]: entries per expert
  int32_t* ebase = ehist + a.experts;        // [experts + 1]: their exclusive prefix
  int32_t* tok = ebase + a.experts + 1;      // [world]: tokens to each rank
  const int64_t n = a.tokens * a.k;
  const int64_t t0 = a.tokens * w / warps, t1 = a.tokens * (w + 1) / warps;
  for (int i = tid; i < warps * (a.experts + a.world); i += nt) route_shared[i] = 0;
  __syncthreads();
  for (int64_t i = t0 * a.k + lane; i < t1 * a.k; i += 32) {
    const int e = expert_at(a, i);
    if (e >= 0) atomicAdd(&ecnt[w * a.experts + e], 1);
  }
  for (int64_t t = t0 + lane; t < t1; t += 32)
    for (int r = 0; r < a.world; ++r)
      if (goes_to(a, t, r)) atomicAdd(&rcnt[w * a.world + r], 1);
  __syncthreads();
  for (int e = tid; e < a.experts; e += nt)
    a.hist[e] = ehist[e] = starts_over_warps(ecnt, warps, a.experts, e);
  for (int r = tid; r < a.world; r += nt)
    a.tok_count[r] = tok[r] = starts_over_warps(rcnt, warps, a.world, r);
  __syncthreads();
  for (int64_t b = t0 * a.k; b < t1 * a.k; b += 32) {
    const int64_t i = b + lane;
    const bool live = i < t1 * a.k;
    const int e = live ? expert_at(a, i) : -1;
    const unsigned same = __match_any_sync(0xffffffffu, e);
    int32_t* c = e >= 0 ? &ecnt[w * a.experts + e] : nullptr;
    const int32_t start = c != nullptr ? *c : 0;
    if (live) a.slot_idx[i] = e >= 0 ? start + __popc(same & before) : -1;
    __syncwarp();
    if (c != nullptr && (same & before) == 0) *c = start + __popc(same);
    __syncwarp();
  }
  for (int64_t b = t0; b < t1; b += 32) {
    const int64_t t = b + lane;
    const bool live = t < t1;
    for (int r = 0; r < a.world; ++r) {
      const bool to = live && goes_to(a, t, r);
      const unsigned ballot = __ballot_sync(0xffffffffu, to);
      const int32_t start = rcnt[w * a.world + r];
      if (live) a.dest_pos[t * a.world + r] = to ? start + __popc(ballot & before) : -1;
      __syncwarp();
      if (lane == 0) rcnt[w * a.world + r] = start + __popc(ballot);
      __syncwarp();
    }
  }
  if (w == 0) warp_prefix(ehist, ebase, a.experts, lane);
  __syncthreads();
  for (int e = tid; e < a.experts; e += nt) a.ebase[e] = ebase[e];
  write_send_plan(a, tok, ebase);
  for (int64_t i = tid; i < n; i += nt) {
    const int e = expert_at(a, i);
    a.slot_row[i] = e < 0 ? -1 : ebase[e] + a.slot_idx[i];
  }
}

// Dynamic shared memory a kernel may take without opting in.
constexpr size_t kDefaultSharedBytes = 48u * 1024u;

// Lets `kernel` take `bytes` of dynamic shared memory when that is above the default (the
// single-block layout kernels with many experts). A CUDA error code, 0 on success.
template <class Kernel>
int allow_shared(Kernel kernel, size_t bytes) {
  if (bytes <= kDefaultSharedBytes) return 0;
  // An error here: more experts than shared memory holds.
  return static_cast<int>(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(bytes)));
}

// The route kernel's warps and shared memory: the totals and prefixes (2 * experts + 1 + world
// int32), then as many warps' counters (experts + world each, up to kRouteThreads / 32 warps) as
// fit in the default 48 KiB; one warp, with the opt-in limit, beyond that.
struct RouteShape {
  int warps = 1;
  size_t shared = 0;
};

RouteShape route_shape(const MoeDeviceLayoutArgs& a) {
  const size_t fixed = static_cast<size_t>(2 * a.experts + 1 + a.world) * sizeof(int32_t);
  const size_t per_warp = static_cast<size_t>(a.experts + a.world) * sizeof(int32_t);
  constexpr size_t limit = kDefaultSharedBytes, most = kRouteThreads / 32;
  const size_t fit = fixed < limit ? (limit - fixed) / (per_warp > 0 ? per_warp : 1) : 0;
  RouteShape s;
  s.warps = static_cast<int>(fit < 1 ? 1 : (fit > most ? most : fit));
  s.shared = fixed + per_warp * static_cast<size_t>(s.warps);
  return s;
}

// The start of piece r: in this rank's send pack, or (direct) this rank's piece in r's area.
__device__ __forceinline__ char* piece_for(const MoeDeviceLayoutArgs& a, int r, bool direct,
                                           int64_t area) {
  return direct ? static_cast<char*>(a.peers.buffers[r]) + area : a.send + a.send_off[r] * 4;
}

// The count blocks {tokens, entries per local expert, entries before the rank's experts} at the
// start of every piece, from tok(r), hist(e) and ebase(e) (this rank's tokens to r, entries of
// expert e, entries of the experts before e). The block's threads share the work.
template <class Tok, class Hist, class Base>
__device__ __forceinline__ void write_count_blocks(const MoeDeviceLayoutArgs& a, bool direct,
                                                   int64_t area, Tok tok, Hist hist, Base ebase) {
  const int64_t n = a.local + 2;
  for (int64_t i = threadIdx.x; i < static_cast<int64_t>(a.world) * n; i += blockDim.x) {
    const int r = static_cast<int>(i / n);
    const int64_t e = i % n;
    int32_t v = static_cast<int32_t>(ebase(r * a.local));
    if (e == 0) v = static_cast<int32_t>(tok(r));
    if (e > 0 && e <= a.local) v = static_cast<int32_t>(hist(r * a.local + e - 1));
    reinterpret_cast<int32_t*>(piece_for(a, r, direct, area))[e] = v;
  }
}

// Token t's pack at place `pos` of piece r, which starts at `piece` (the block's threads share
// it): header {token, the expert ids of its slots on r or -1, their indices}, row, scales.
// expert(j) is slot j's expert (-1: dropped), index(j) its index among this rank's entries of
// that expert.
template <class Expert, class Index>
__device__ __forceinline__ void pack_token(const LayoutParams& p, char* piece, int64_t t, int r,
                                           int32_t pos, Expert expert, Index index) {
  const MoeDeviceLayoutArgs& a = p.a;
  char* dst = piece + a.cb + static_cast<int64_t>(pos) * a.pack;
  auto* h = reinterpret_cast<int32_t*>(dst);
  for (int j = threadIdx.x; j <= 2 * a.k; j += blockDim.x) {
    int32_t v = static_cast<int32_t>(t);
    if (j > 0) {
      const int slot = j <= a.k ? j - 1 : j - 1 - a.k;
      const int e = expert(slot);
      const bool here = e >= 0 && e / a.local == r;
      v = !here ? -1 : (j <= a.k ? e : index(slot));
    }
    h[j] = v;
  }
  copy_bytes<true>(dst + a.header, a.x + t * a.row_bytes, a.row_bytes, p.w_row);
  if (a.scale_bytes > 0)
    copy_bytes<true>(dst + a.header + a.row_bytes, a.x_scales + t * a.scale_bytes, a.scale_bytes,
                     p.w_scale);
}

// After the route kernel: block 0 writes the count blocks; each token's block writes its pack
// into every piece it goes to. Into this rank's send pack, or (direct) into the peers' areas.
__device__ __forceinline__ void pack_pieces(const LayoutParams& p, bool direct, int64_t area) {
  const MoeDeviceLayoutArgs& a = p.a;
  if (blockIdx.x == 0) {
    write_count_blocks(
        a, direct, area, [&](int r) { return a.tok_count[r]; },
        [&](int64_t e) { return a.hist[e]; }, [&](int64_t e) { return a.ebase[e]; });
  }
  for (int64_t t = blockIdx.x; t < a.tokens; t += gridDim.x) {
    for (int r = 0; r < a.world; ++r) {
      const int32_t pos = a.dest_pos[t * a.world + r];
      if (pos < 0) continue;
      pack_token(
          p, piece_for(a, r, direct, area), t, r, pos,
          [&](int j) { return expert_at(a, t * a.k + j); },
          [&](int j) { return a.slot_idx[t * a.k + j]; });
    }
  }
}

__global__ void __launch_bounds__(kMoeThreads) layout_pack_kernel(const LayoutParams p) {
  pack_pieces(p, false, 0);
}

// The last block of a grid to get here (a grid-wide count in *done, reset by that block; each
// block's stores fenced at system scope before it counts) returns true in every thread. All
// threads call it.
__device__ __forceinline__ bool last_block_done(int32_t* done) {
  __shared__ int last;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence_system();
    last = atomicAdd(done, 1) == static_cast<int>(gridDim.x * gridDim.y) - 1 ? 1 : 0;
    if (last != 0) {
      __threadfence_system();  // with the other blocks' fences: their stores come before ours
      *done = 0;               // for the next launch (a later kernel)
    }
  }
  __syncthreads();
  return last != 0;
}

// The end of a direct put kernel (dispatch or combine; all threads call it), which read `count`
// (direct_count) when it began: the last block to finish (a grid-wide count, each block's stores
// fenced at system scope before it counts) moves the count on, after every block read it, records
// the parity of this put for the kernels after it, and signals every rank on channel 0 with
// release order. A signal waits until the peer consumed the previous one (the device API's
// put_signal): a peer at most one put behind. A timeout is recorded for the host.
__device__ __forceinline__ void finish_put(const DeviceHandle& h, int rank, int world,
                                           uint32_t count, int32_t* done, int32_t* parity) {
  if (!last_block_done(done)) return;
  if (threadIdx.x == 0) {
    *direct_count(h, rank) = count + 1;
    *parity = static_cast<int32_t>(count & 1u);
  }
  const device::Deadline deadline = device::Deadline::of(h);
  for (int r = threadIdx.x; r < world; r += blockDim.x)
    (void)device::put_signal<device::MemOrder::release>(h, r, 0, deadline);
}

// A direct dispatch's put (NOTE [moe direct dispatch]): the pieces go straight into this rank's
// piece of every peer's area of this parity, then finish_put.
__global__ void __launch_bounds__(kMoeThreads) layout_put_kernel(const LayoutParams p) {
  const MoeDeviceLayoutArgs& a = p.a;
  pdl_trigger();  // place (NOTE [moe programmatic launch])
  const uint32_t count = *direct_count(a.peers, a.rank);
  pack_pieces(p, true, static_cast<int64_t>(count & 1u) * a.half + a.rank * a.piece);
  finish_put(a.peers, a.rank, a.world, count, a.done, a.parity);
}

// NOTE [moe fused route]
// With few entries (tokens x k <= kFusedEntries, as a decode step has), the route and the pack
// (or the direct put) are one kernel instead of two: the route kernel is one block whose passes
// over topk_idx wait on memory one after another, about a quarter of a low-latency dispatch under
// MPS. Here each block routes the tokens it packs by itself, from all the entries, which are few
// and stay in L2: for token t, slot j with expert e, a pass over every entry counts with warp
// ballots the entries before (t, j) with expert e (its slot_idx) and all entries of the experts
// below e (ebase[e]: slot_row = ebase[e] + slot_idx); a pass over tokens t' < t counts those that
// go to each rank (dest_pos[t][r]). The numbers are those of the route kernel (same order:
// token, then slot), which writes them for combine; this kernel writes them too. The grid's last
// block writes what is per expert or per rank (hist, ebase, tok_count, the send counts,
// back_rows) and the count blocks of every piece. Past kFusedEntries the per-token passes cost
// more than the route kernel saves (O(entries) per token), so the two kernels stay.
constexpr int64_t kFusedEntries = 4096;
constexpr int kFusedMaxWorld = 32;  // a token's ranks are a 32-bit mask

// The ranks token t goes to, as a mask.
__device__ __forceinline__ uint32_t rank_mask(const MoeDeviceLayoutArgs& a, int64_t t) {
  uint32_t m = 0;
  for (int j = 0; j < a.k; ++j) {
    const int e = expert_at(a, t * a.k + j);
    if (e >= 0) m |= 1u << (e / a.local);
  }
  return m;
}

// The fused kernel's shared memory (int32): the last block's hist [experts], ebase [experts + 1]
// and tokens per rank [world]; a token block's slot experts, indices and experts-below counts [k
// each], and per rank [world each] the tokens before it and all tokens.
size_t fused_shared_bytes(const MoeDeviceLayoutArgs& a) {
  const int64_t last = 2 * static_cast<int64_t>(a.experts) + 1 + a.world;
  const int64_t token = 3 * static_cast<int64_t>(a.k) + 2 * static_cast<int64_t>(a.world);
  return static_cast<size_t>(std::max(last, token)) * sizeof(int32_t);
}

// The last block of the fused kernel: the per-expert and per-rank numbers, then the count blocks.
__device__ __forceinline__ void fused_counts(const MoeDeviceLayoutArgs& a, bool direct,
                                             int64_t area, int32_t* sh) {
  const int tid = threadIdx.x, nt = blockDim.x;
  int32_t* hist = sh;                    // [experts]
  int32_t* ebase = hist + a.experts;     // [experts + 1]
  int32_t* tok = ebase + a.experts + 1;  // [world]
  for (int i = tid; i < a.experts; i += nt) hist[i] = 0;
  for (int r = tid; r < a.world; r += nt) tok[r] = 0;
  __syncthreads();
  for (int64_t i = tid; i < a.tokens * a.k; i += nt) {
    const int e = expert_at(a, i);
    if (e >= 0) atomicAdd(&hist[e], 1);
  }
  for (int64_t t = tid; t < a.tokens; t += nt) {
    const uint32_t m = rank_mask(a, t);
    for (int r = 0; r < a.world; ++r)
      if ((m >> r) & 1u) atomicAdd(&tok[r], 1);
  }
  __syncthreads();
  if (tid < 32) warp_prefix(hist, ebase, a.experts, tid);
  __syncthreads();
  for (int e = tid; e < a.experts; e += nt) {
    a.hist[e] = hist[e];
    a.ebase[e] = ebase[e];
  }
  for (int r = tid; r < a.world; r += nt) a.tok_count[r] = tok[r];
  write_send_plan(a, tok, ebase);
  __syncthreads();  // send_off, which piece_for reads for the send pack
  write_count_blocks(
      a, direct, area, [&](int r) { return tok[r]; }, [&](int64_t e) { return hist[e]; },
      [&](int64_t e) { return ebase[e]; });
}

// A token block of the fused kernel: routes token t (NOTE [moe fused route]) and packs it. Into
// the send pack, piece r starts after the pieces before it, so the block also counts every
// rank's tokens (the last block writes send_off for the exchange, too late for this kernel).
__device__ __forceinline__ void fused_token(const LayoutParams& p, bool direct, int64_t area,
                                            int64_t t, int32_t* sh) {
  const MoeDeviceLayoutArgs& a = p.a;
  const int tid = threadIdx.x, nt = blockDim.x, lane = tid % 32, k = a.k;
  int32_t* ej = sh;                   // [k]: slot j's expert, or -1
  int32_t* same = ej + k;             // [k]: entries before (t, j) with that expert
  int32_t* below = same + k;          // [k]: entries of the experts below it
  int32_t* before = below + k;        // [world]: tokens before t that go to rank r
  int32_t* total = before + a.world;  // [world]: all tokens that go to rank r (send pack only)
  for (int j = tid; j < k; j += nt) {
    ej[j] = expert_at(a, t * k + j);
    same[j] = 0;
    below[j] = 0;
  }
  for (int r = tid; r < 2 * a.world; r += nt) before[r] = 0;  // and total
  __syncthreads();
  const int64_t n = a.tokens * k, mine = t * k;
  // Chunks of 32 entries (tokens), one warp each: every lane of a warp takes part in its ballots.
  for (int64_t b = tid - lane; b < n; b += nt) {
    const int64_t i = b + lane;
    const int e = i < n ? expert_at(a, i) : -1;
    for (int j = 0; j < k; ++j) {
      const int x = ej[j];
      if (x < 0) continue;  // the same for the whole warp
      const unsigned eq = __ballot_sync(0xffffffffu, e == x && i < mine + j);
      const unsigned lt = __ballot_sync(0xffffffffu, e >= 0 && e < x);
      if (lane == 0 && eq != 0) atomicAdd(&same[j], __popc(eq));
      if (lane == 0 && lt != 0) atomicAdd(&below[j], __popc(lt));
    }
  }
  // The direct put needs only the tokens before t; the send pack also needs every rank's total.
  const int64_t scan = direct ? t : a.tokens;
  for (int64_t b = tid - lane; b < scan; b += nt) {
    const int64_t u = b + lane;
    const uint32_t m = u < scan ? rank_mask(a, u) : 0u;
    for (int r = 0; r < a.world; ++r) {
      const unsigned to = __ballot_sync(0xffffffffu, (m >> r) & 1u);
      const unsigned early = direct ? to : __ballot_sync(0xffffffffu, ((m >> r) & 1u) && u < t);
      if (lane == 0 && early != 0) atomicAdd(&before[r], __popc(early));
      if (!direct && lane == 0 && to != 0) atomicAdd(&total[r], __popc(to));
    }
  }
  __syncthreads();
  const uint32_t m = rank_mask(a, t);
  for (int r = tid; r < a.world; r += nt)
    a.dest_pos[t * a.world + r] = (m >> r) & 1u ? before[r] : -1;
  for (int j = tid; j < k; j += nt) {
    a.slot_idx[mine + j] = ej[j] >= 0 ? same[j] : -1;
    a.slot_row[mine + j] = ej[j] >= 0 ? below[j] + same[j] : -1;
  }
  for (int r = 0; r < a.world; ++r) {
    if (((m >> r) & 1u) == 0) continue;
    int64_t units = 0;  // where piece r starts in the send pack (the route kernel's send_off)
    for (int q = 0; q < r && !direct; ++q) units += piece_units(a, total[q]);
    char* piece = direct ? piece_for(a, r, true, area) : a.send + units * 4;
    pack_token(
        p, piece, t, r, before[r], [&](int j) { return ej[j]; }, [&](int j) { return same[j]; });
  }
  __syncthreads();  // before the next token's block reuses the shared memory
}

// The fused route and pack (kDirect: and put, then finish_put; NOTE [moe fused route]): blocks
// 0 .. G-2 take the tokens, block G-1 the counts.
template <bool kDirect>
__global__ void __launch_bounds__(kMoeThreads) layout_route_pack_kernel(const LayoutParams p) {
  extern __shared__ int32_t fused_shared[];
  const MoeDeviceLayoutArgs& a = p.a;
  if (kDirect) pdl_trigger();  // place (NOTE [moe programmatic launch])
  const uint32_t count = kDirect ? *direct_count(a.peers, a.rank) : 0u;
  const int64_t area = static_cast<int64_t>(count & 1u) * a.half + a.rank * a.piece;
  if (blockIdx.x == gridDim.x - 1) {
    fused_counts(a, kDirect, area, fused_shared);
  } else {
    for (int64_t t = blockIdx.x; t < a.tokens; t += gridDim.x - 1)
      fused_token(p, kDirect, area, t, fused_shared);
  }
  if (kDirect) finish_put(a.peers, a.rank, a.world, count, a.done, a.parity);
}

// One block, after the exchange: tokens per source, rows per (local expert, source) and where
// they start in the expert's slab, where (source, expert) starts in combine's piece for that
// source, the expert counts. The counts are kept in shared memory ([local][world] int32, then
// world int64 receive offsets: place_shared_bytes), so the loops over them do not wait on global
// memory they just wrote. kDirect: thread s first waits for source s's signal (acquire), and
// the pieces are at fixed places of this parity's area (recv_off is written for unpack).
template <bool kDirect>
__global__ void __launch_bounds__(kRouteThreads) layout_place_kernel(const MoeDeviceLayoutArgs a) {
  extern __shared__ int64_t place_shared[];
  int64_t* off = place_shared;                                     // [world]: recv_off
  auto* got = reinterpret_cast<int32_t*>(place_shared + a.world);  // [world]: a piece came
  int32_t* cnt = got + a.world;                                    // [local][world]
  const int tid = threadIdx.x, nt = blockDim.x;
  const int64_t slab = a.world * a.max_tokens;
  pdl_wait();  // NOTE [moe programmatic launch]
  if (kDirect) {
    const device::Deadline deadline = device::Deadline::of(a.peers);
    const int64_t area = a.parity[0] * a.half;
    for (int s = tid; s < a.world; s += nt) {
      // A timeout is recorded for the host (raised by the next synchronising call); the source
      // then counts as sending nothing.
      const bool ok = device::wait_signal<device::MemOrder::acquire>(a.peers, s, 0, deadline) ==
                      device::Status::ok;
      off[s] = (area + s * a.piece) / 4;
      a.recv_off[s] = off[s];
      const int32_t n = ok ? reinterpret_cast<const int32_t*>(a.recv + off[s] * 4)[0] : 0;
      a.recv_tokens[s] = n >= 0 && n <= a.max_tokens ? n : 0;
      got[s] = ok ? 1 : 0;
    }
  } else {
    for (int s = tid; s < a.world; s += nt) {
      const int64_t bytes = a.recv_units[s] * 4;
      a.recv_tokens[s] = bytes >= a.cb ? (bytes - a.cb) / a.pack : 0;
      off[s] = a.recv_off[s];
      got[s] = bytes >= a.cb ? 1 : 0;
    }
  }
  __syncthreads();
  pdl_trigger();  // unpack: every source has come
  for (int i = tid; i < a.local * a.world; i += nt) {
    const int e = i / a.world, s = i % a.world;
    const auto* block = reinterpret_cast<const int32_t*>(a.recv + off[s] * 4);
    const int32_t c = got[s] ? block[1 + e] : 0;
    if (e == 0) a.back_first[s] = got[s] ? block[1 + a.local] : 0;
    cnt[i] = c;
    a.cnt[i] = c;
  }
  __syncthreads();
  for (int e = tid; e < a.local; e += nt) {
    int64_t run = 0;
    for (int s = 0; s < a.world; ++s) {
      a.base[e * a.world + s] = static_cast<int32_t>(run);
      run += cnt[e * a.world + s];
    }
    a.expert_counts[e] = run < slab ? run : slab;
  }
  for (int s = tid; s < a.world; s += nt) {
    int64_t run = 0;
    for (int e = 0; e < a.local; ++e) {
      a.pre[s * a.local + e] = static_cast<int32_t>(run);
      run += cnt[e * a.world + s];
    }
    a.rows_back[s] = run;
    got[s] = static_cast<int32_t>(run);  // read below, after the barrier
  }
  __syncthreads();
  if (tid == 0) {
    int64_t o = 0;
    for (int s = 0; s < a.world; ++s) {
      a.off_back[s] = o;
      o += got[s];
    }
  }
}

size_t place_shared_bytes(const MoeDeviceLayoutArgs& a) {
  return static_cast<size_t>(a.world) * (sizeof(int64_t) + sizeof(int32_t)) +
         static_cast<size_t>(a.local) * static_cast<size_t>(a.world) * sizeof(int32_t);
}

// A block per received token (source s, index i): its row (and scales) to each of its rows in
// the slabs of this rank's experts.
__global__ void __launch_bounds__(kMoeThreads) layout_unpack_kernel(const LayoutParams p) {
  const MoeDeviceLayoutArgs& a = p.a;
  const int64_t slab = a.world * a.max_tokens;
  pdl_wait();  // NOTE [moe programmatic launch]
  for (int64_t b = blockIdx.x; b < slab; b += gridDim.x) {
    const int64_t s = b / a.max_tokens, i = b % a.max_tokens;
    if (i >= a.recv_tokens[s]) continue;
    const char* src = a.recv + a.recv_off[s] * 4 + a.cb + i * a.pack;
    const auto* h = reinterpret_cast<const int32_t*>(src);
    for (int j = 0; j < a.k; ++j) {
      const int32_t e = h[1 + j] - a.rank * a.local;
      if (h[1 + j] < 0 || e < 0 || e >= a.local) continue;
      const int64_t row = static_cast<int64_t>(a.base[e * a.world + s]) + h[1 + a.k + j];
      if (row < 0 || row >= slab) continue;  // only when an expert's rows overflow its slab
      const int64_t at = e * slab + row;
      copy_bytes<true>(a.recv_x + at * a.row_bytes, src + a.header, a.row_bytes, p.w_out_row);
      if (a.scale_bytes > 0)
        copy_bytes<true>(a.recv_scales + at * a.scale_bytes, src + a.header + a.row_bytes,
                         a.scale_bytes, p.w_out_scale);
    }
  }
}

// Blocks (pair, stripe) for each (source s, local expert e) pair: the rows of y that go back to
// s, in s's order (by expert, then token, slot), stripe y taking rows y, y + stripes, ...; block
// (0, 0) also writes both sides' counts of combine's exchange. A pair's rows are only known on
// the device, so each pair gets the same number of stripes.
__global__ void __launch_bounds__(kMoeThreads) layout_combine_pack_kernel(const LayoutParams p) {
  const MoeDeviceLayoutArgs& a = p.a;
  const int64_t slab = a.world * a.max_tokens;
  if (blockIdx.x == 0 && blockIdx.y == 0) {
    for (int r = threadIdx.x; r < a.world; r += blockDim.x) {
      a.c_send_units[r] = a.rows_back[r] * a.stride / 4;
      a.c_recv_units[r] = a.back_rows[r] * a.stride / 4;
    }
  }
  for (int64_t b = blockIdx.x; b < static_cast<int64_t>(a.world) * a.local; b += gridDim.x) {
    const int64_t s = b / a.local, e = b % a.local;
    const int64_t n = a.cnt[e * a.world + s], first = a.base[e * a.world + s];
    char* dst = a.send + (a.off_back[s] + a.pre[s * a.local + e]) * a.stride;
    for (int64_t i = blockIdx.y; i < n && first + i < slab; i += gridDim.y)
      copy_bytes(dst + i * a.stride, a.y + (e * slab + first + i) * a.y_row_bytes, a.y_row_bytes,
                 p.w_y);
  }
}

// A direct combine (NOTE [moe direct dispatch]): the rows of each (source s, local expert e) pair
// go straight into s's area of this parity, at the rows s expects them (s's entries before this
// rank's experts, then e's place among them), then finish_put.
__global__ void __launch_bounds__(kMoeThreads) layout_combine_put_kernel(const LayoutParams p) {
  const MoeDeviceLayoutArgs& a = p.a;
  const int64_t slab = a.world * a.max_tokens;
  pdl_trigger();  // the wait (NOTE [moe programmatic launch])
  const uint32_t count = *direct_count(a.back_peers, a.rank);
  const int64_t area = static_cast<int64_t>(count & 1u) * a.back_half;
  for (int64_t b = blockIdx.x; b < static_cast<int64_t>(a.world) * a.local; b += gridDim.x) {
    const int64_t s = b / a.local, e = b % a.local;
    const int64_t n = a.cnt[e * a.world + s], first = a.base[e * a.world + s];
    char* dst = static_cast<char*>(a.back_peers.buffers[s]) + area +
                (a.back_first[s] + a.pre[s * a.local + e]) * a.stride;
    for (int64_t i = blockIdx.y; i < n && first + i < slab; i += gridDim.y)
      copy_bytes(dst + i * a.stride, a.y + (e * slab + first + i) * a.y_row_bytes, a.y_row_bytes,
                 p.w_y);
  }
  finish_put(a.back_peers, a.rank, a.world, count, a.back_done, a.back_parity);
}

// One block: thread s waits for source s's combine signal (acquire; a timeout is recorded).
__global__ void __launch_bounds__(kRouteThreads)
    layout_combine_wait_kernel(const MoeDeviceLayoutArgs a) {
  pdl_wait();  // NOTE [moe programmatic launch]
  const device::Deadline deadline = device::Deadline::of(a.back_peers);
  for (int s = threadIdx.x; s < a.world; s += blockDim.x)
    (void)device::wait_signal<device::MemOrder::acquire>(a.back_peers, s, 0, deadline);
  __syncthreads();
  pdl_trigger();  // the sum: every source has come
}

int64_t grid_of(int64_t n) {
  return n < 1 ? 1 : (n < kMoeMaxBlocks ? n : kMoeMaxBlocks);
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
  const size_t shared =
      static_cast<size_t>(a.topk) * (sizeof(int64_t) + sizeof(const char*) + sizeof(float));
  if (a.topk < 1 || shared > 48 * 1024) return static_cast<int>(cudaErrorInvalidValue);
  auto s = static_cast<cudaStream_t>(stream);
  const auto g = static_cast<unsigned>(blocks);
  switch (a.dtype) {
    case 0:
      return static_cast<int>(launch_combine_of<0>(a, g, shared, s));
    case 2:
      return static_cast<int>(launch_combine_of<2>(a, g, shared, s));
    case 3:
      return static_cast<int>(launch_combine_of<3>(a, g, shared, s));
    default:
      return static_cast<int>(cudaErrorInvalidValue);
  }
}

namespace {

// place (through all_to_all_v, or direct), then unpack.
template <bool kDirect>
int launch_place_unpack(const MoeDeviceLayoutArgs& a, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  const size_t place_shared = place_shared_bytes(a);
  if (const int e = allow_shared(layout_place_kernel<kDirect>, place_shared); e != 0) return e;
  // Only after a direct put, which triggers (NOTE [moe programmatic launch]).
  const bool pdl = kDirect;
  cudaError_t e = launch_after(pdl, layout_place_kernel<kDirect>, dim3(1), dim3(kRouteThreads),
                               place_shared, s, a);
  if (e != cudaSuccess) return static_cast<int>(e);
  LayoutParams p;
  p.a = a;
  p.w_out_row = width_of({a.recv, a.pack, a.recv_x, a.row_bytes, a.row_bytes});
  p.w_out_scale = width_of(
      {a.recv + a.header + a.row_bytes, a.pack, a.recv_scales, a.scale_bytes, a.scale_bytes});
  const int64_t slab = static_cast<int64_t>(a.world) * a.max_tokens;
  e = launch_after(pdl, layout_unpack_kernel, dim3(static_cast<unsigned>(grid_of(slab))),
                   dim3(kMoeThreads), 0, s, p);
  return static_cast<int>(e);
}

// route, then pack (into this rank's send pack) or put (direct: into the peers' areas); with few
// entries one fused kernel does both (NOTE [moe fused route]).
template <bool kDirect>
int launch_route_pack(const MoeDeviceLayoutArgs& a, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  LayoutParams p;
  p.a = a;
  // Every piece starts 256-byte aligned in its pack or area, so one width serves every peer.
  char* dst = kDirect ? a.recv : a.send;
  p.w_row = width_of({a.x, a.row_bytes, dst, a.pack, a.row_bytes});
  p.w_scale =
      width_of({a.x_scales, a.scale_bytes, dst + a.header + a.row_bytes, a.pack, a.scale_bytes});
  const size_t fused = fused_shared_bytes(a);
  if (a.tokens * a.k <= kFusedEntries && a.world <= kFusedMaxWorld &&
      fused <= kDefaultSharedBytes) {
    const auto grid = static_cast<unsigned>(std::min<int64_t>(a.tokens, kMoeMaxBlocks - 1) + 1);
    layout_route_pack_kernel<kDirect><<<grid, kMoeThreads, fused, s>>>(p);
    return static_cast<int>(cudaGetLastError());
  }
  const RouteShape shape = route_shape(a);
  if (const int e = allow_shared(layout_route_kernel, shape.shared); e != 0) return e;
  layout_route_kernel<<<1, static_cast<unsigned>(shape.warps * 32), shape.shared, s>>>(a);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return static_cast<int>(e);
  const auto grid = static_cast<unsigned>(grid_of(a.tokens));
  if (kDirect) {
    layout_put_kernel<<<grid, kMoeThreads, 0, s>>>(p);
  } else {
    layout_pack_kernel<<<grid, kMoeThreads, 0, s>>>(p);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int launch_moe_layout_route_pack(const MoeDeviceLayoutArgs& a, void* stream) {
  return launch_route_pack<false>(a, stream);
}

int launch_moe_layout_route_put(const MoeDeviceLayoutArgs& a, void* stream) {
  return launch_route_pack<true>(a, stream);
}

int launch_moe_layout_place(const MoeDeviceLayoutArgs& a, void* stream) {
  return launch_place_unpack<false>(a, stream);
}

int launch_moe_layout_wait_place(const MoeDeviceLayoutArgs& a, void* stream) {
  return launch_place_unpack<true>(a, stream);
}

namespace {

// combine's pack (into this rank's send pack) or put (direct: into the sources' areas, then the
// wait for every rank's rows).
template <bool kDirect>
int launch_combine_pack(const MoeDeviceLayoutArgs& a, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  LayoutParams p;
  p.a = a;
  char* dst = kDirect ? static_cast<char*>(nullptr) : a.send;  // areas: allocation-aligned
  p.w_y = width_of({a.y, a.y_row_bytes, dst, a.stride, a.y_row_bytes});
  const int64_t pairs = static_cast<int64_t>(a.world) * a.local;
  // About 2048 blocks in all: a pair's rows are many at prefill and few at decode.
  const int64_t per_pair = std::max<int64_t>(1, std::min<int64_t>(2048 / pairs, 64));
  const dim3 grid(static_cast<unsigned>(grid_of(pairs)), static_cast<unsigned>(per_pair));
  if (!kDirect) {
    layout_combine_pack_kernel<<<grid, kMoeThreads, 0, s>>>(p);
    return static_cast<int>(cudaGetLastError());
  }
  layout_combine_put_kernel<<<grid, kMoeThreads, 0, s>>>(p);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return static_cast<int>(e);
  return static_cast<int>(
      launch_after(true, layout_combine_wait_kernel, dim3(1), dim3(32), 0, s, a));
}

}  // namespace

int launch_moe_layout_combine_pack(const MoeDeviceLayoutArgs& a, void* stream) {
  return launch_combine_pack<false>(a, stream);
}

int launch_moe_layout_combine_put(const MoeDeviceLayoutArgs& a, void* stream) {
  return launch_combine_pack<true>(a, stream);
}

}  // namespace symmem::cuda
