// Barrier-based reductions over peer pointers: two-shot and one-shot all_reduce, reduce_scatter.
//
// NOTE [reduce kernels]
// Work is split in 16-byte units (2 f64/i64, 4 f32/i32, 8 f16/bf16, 16 fp8); every rank's `in` is
// 16-byte aligned at the same offset, so unit u is one vector load from each rank. Block b of every
// rank handles the same share of units in every phase, so a pairwise block barrier (block b with
// block b of every peer) is all the synchronisation needed:
//   two_shot:  [copy own input share into in[rank]] B1 | reduce share b of shard `rank` (units
//              split evenly over ranks) from every in[p], push the result to every out[p] | B2 |
//              [copy share b of every shard of out[rank] to recv]
//   one_shot:  [copy-in] B1 | reduce share b of all units from every in[p] into the local result
//              | B2 | [copy staged result to recv]
//   reduce_scatter: [copy-in of the world blocks] B1 | reduce share b of block `rank` of every
//              in[p] into recv | B2
// B1 publishes inputs; B2 guarantees every peer finished reading and writing this rank's memory,
// so the next op may reuse it. Elements are combined in rank order 0, 1, ..., world-1 whatever
// rank computes them, so one-shot, two-shot and LL give the same bits.
// The last unit may be partial (fewer than 16 / element size elements; for 8-byte types the one
// element of an odd count): its elements are reduced one by one, one thread each, with the same
// accumulator type and order as the vectorised units.

#include <cuda_runtime.h>

#include "cuda/kernels/common.cuh"

namespace symmem::cuda::kernels {
namespace {

// Units [lo, hi) of a range of `units`, split over `parts` (rank shards) then `blocks`.
struct Range {
  int64_t lo, hi;
};
SYMMEM_DEVICE_INLINE Range share(int64_t units, int64_t parts, int64_t part, int64_t blocks,
                                 int64_t b) {
  const int64_t plo = split_lo(units, parts, part);
  const int64_t len = split_lo(units, parts, part + 1) - plo;
  return Range{plo + split_lo(len, blocks, b), plo + split_lo(len, blocks, b + 1)};
}

SYMMEM_DEVICE_INLINE void copy_units(char* dst, const char* src, Range r, int64_t bytes) {
  int64_t lo = r.lo * 16;
  int64_t hi = r.hi * 16 < bytes ? r.hi * 16 : bytes;
  if (lo < hi) copy_bytes(dst + lo, src + lo, hi - lo, threadIdx.x, blockDim.x);
}

// Units per thread per step of reduce_full_units: kU x kW 16-byte loads in flight (>= 4), within
// 64 registers (launch bounds 512 x 2) without spills on sm_90.
template <int kW>
inline constexpr int kUnitsInFlight = kW <= 4 ? 2 : 1;

// Reduces full units [lo, hi) (offset `base` bytes into every in[p]); `emit(u, y)` stores. kU:
// units per thread per step (bench/reduce_pattern.cu measures others).
template <KType K, int kW, int kU = kUnitsInFlight<kW>, class Emit>
SYMMEM_DEVICE_INLINE void reduce_full_units(const PeerPtrs& in, int world, int64_t base, KRed red,
                                            int64_t lo, int64_t hi, Emit emit) {
  using V16 = Vec<K, 16>;
  if constexpr (kW > 0) {
    // Each warp takes 32 x kU consecutive units per step (kU x 512 contiguous bytes of every
    // peer's buffer).
    const int64_t lane = threadIdx.x & 31;
    const int64_t step = static_cast<int64_t>(blockDim.x) * kU;
    for (int64_t u0 = lo + (threadIdx.x >> 5) * 32 * kU + lane; u0 < hi; u0 += step) {
      uint4 x[kU][kW];
#pragma unroll
      for (int j = 0; j < kU; ++j) {
        const int64_t u = u0 + static_cast<int64_t>(j) * 32;
        if (u < hi) {
#pragma unroll
          for (int p = 0; p < kW; ++p) x[j][p] = dev::ld_v4_cg(peer(in, p) + base + u * 16);
        }
      }
#pragma unroll
      for (int j = 0; j < kU; ++j) {
        const int64_t u = u0 + static_cast<int64_t>(j) * 32;
        if (u < hi) {
          V16 acc;
          acc.load(x[j][0]);
#pragma unroll
          for (int p = 1; p < kW; ++p) acc.combine_with(red, x[j][p]);
          uint4 y;
          acc.store(red, kW, y);
          emit(u, y);
        }
      }
    }
  } else {
    for (int64_t u = lo + threadIdx.x; u < hi; u += blockDim.x) {
      V16 acc;
      acc.load(dev::ld_v4_cg(peer(in, 0) + base + u * 16));
      for (int p = 1; p < world; ++p)
        acc.combine_with(red, dev::ld_v4_cg(peer(in, p) + base + u * 16));
      uint4 y;
      acc.store(red, world, y);
      emit(u, y);
    }
  }
}

// Reduces units [r.lo, r.hi) of a range of `count` elements: full units vectorised, the partial
// last unit element by element. emit(u, y) for full units, emit_elem(byte_offset, f) for the rest.
template <KType K, int kW, int kU = kUnitsInFlight<kW>, class Emit, class EmitElem>
SYMMEM_DEVICE_INLINE void reduce_range(const PeerPtrs& in, int world, int64_t base, KRed red,
                                       Range r, int64_t count, Emit emit, EmitElem emit_elem) {
  constexpr int64_t es = sizeof(typename Elem<K>::T);
  constexpr int64_t kV = 16 / es;
  const int64_t full = count / kV;
  reduce_full_units<K, kW, kU>(in, world, base, red, r.lo, r.hi < full ? r.hi : full, emit);
  if (count % kV != 0 && r.lo <= full && full < r.hi) {
    const int64_t e = full * kV + threadIdx.x;
    if (e < count) emit_elem(e * es, reduce_scalar<K>(in, world, base + e * es, red));
  }
}

template <KType K, int kW>
__global__ void __launch_bounds__(kThreads, 2) reduce_kernel(const ReduceArgs a) {
  using T = typename Elem<K>::T;
  constexpr int64_t es = sizeof(T);
  constexpr int64_t kV = 16 / es;
  const SyncArgs& s = a.sync;
  const int world = kW > 0 ? kW : s.world;
  const int rank = s.rank;
  const uint32_t epoch = read_epoch(s);
  const dev::Deadline deadline = deadline_after(s);
  const int64_t G = gridDim.x;
  const int64_t b = blockIdx.x;
  const int64_t units = (a.count + kV - 1) / kV;
  const int64_t bytes = a.count * es;
  char* my_in = peer(a.in, rank);
  bool ok = true;
  // B1 releases only when this kernel stages data through the workspace (copy-in before it,
  // copy-out after B2): fully zero copy, every input was written by earlier kernels and B1 need
  // not release anything (NOTE [barrier flags]).
  const bool publishes = a.copy_in != nullptr || a.copy_out_dst != nullptr;

  if (a.mode == ReduceMode::two_shot) {
    if (a.copy_in != nullptr) {
      for (int sh = 0; sh < world; ++sh) {
        copy_units(my_in, a.copy_in, share(units, world, sh, G, b), bytes);
      }
    }
    ok = barrier_agree(s, epoch, deadline, publishes);
    if (ok) {
      const PeerPtrs& out = a.out;
      auto emit = [&](int64_t u, uint4 y) {
        if constexpr (kW > 0) {
#pragma unroll
          for (int p = 0; p < kW; ++p) dev::st_v4(peer(out, p) + u * 16, y);
        } else {
          for (int p = 0; p < world; ++p) dev::st_v4(peer(out, p) + u * 16, y);
        }
      };
      auto emit_elem = [&](int64_t off, typename Elem<K>::A f) {
        for (int p = 0; p < world; ++p) store_elem<K>(peer(out, p) + off, f);
      };
      reduce_range<K, kW>(a.in, world, 0, a.red, share(units, world, rank, G, b), a.count, emit,
                          emit_elem);
    }
    ok = ok && block_barrier(s, flag_value(epoch, 2), deadline);
    if (ok && a.copy_out_dst != nullptr) {
      for (int sh = 0; sh < world; ++sh) {
        copy_units(a.copy_out_dst, a.copy_out_src, share(units, world, sh, G, b), bytes);
      }
    }
  } else {
    const bool rs = a.mode == ReduceMode::reduce_scatter;
    const Range mine = share(units, 1, 0, G, b);
    if (a.copy_in != nullptr) {
      if (rs) {
        for (int q = 0; q < world; ++q) {
          copy_units(my_in + q * a.in_stride, a.copy_in + q * bytes, mine, bytes);
        }
      } else {
        copy_units(my_in, a.copy_in, mine, bytes);
      }
    }
    ok = barrier_agree(s, epoch, deadline, publishes);
    if (ok) {
      char* out = a.direct_out;
      auto emit = [&](int64_t u, uint4 y) { store16_any(out + u * 16, y); };
      auto emit_elem = [&](int64_t off, typename Elem<K>::A f) { store_elem<K>(out + off, f); };
      reduce_range<K, kW>(a.in, world, rs ? rank * a.in_stride : 0, a.red, mine, a.count, emit,
                          emit_elem);
    }
    ok = ok && block_barrier(s, flag_value(epoch, 2), deadline);
    if (ok && a.copy_out_dst != nullptr) copy_units(a.copy_out_dst, a.copy_out_src, mine, bytes);
  }
  finish_epoch(s, epoch);
}

}  // namespace

int launch_reduce(const ReduceArgs& a, KType type, int blocks, void* stream) {
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  return dispatch_type_world(type, a.sync.world, [&](auto i) {
    reduce_kernel<decltype(i)::K, decltype(i)::kW><<<blocks, kThreads, 0, st>>>(a);
  });
}

}  // namespace symmem::cuda::kernels
