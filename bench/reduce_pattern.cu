// The memory traffic of the GPU two-shot all-reduce without its synchronisation, in one process:
// what the reduce-and-push phase of N ranks costs when nothing else does (no barriers, no MPS,
// no arrival skew), and what limits it under Nsight Compute (kernel replay works here, where the
// real collective's cross-process waits cannot be replayed).
//
// N "ranks" are N pairs of buffers (in[r], out[r], `bytes` each) on this GPU. One kernel launch
// runs every rank's share at once: grid (blocks per rank, N), block (b, r) doing what block b of
// rank r does between the two-shot's barriers, with the same device code (src/cuda/kernels/
// reduce.cu's reduce_range, included here). Variants, each timed with CUDA events (median of
// --repeats runs of --iters launches):
//   copy:        rank r copies in[r] to out[r] through the same loop (one input, one output):
//                the bytes of the all-reduce (read N x bytes, write N x bytes) as a plain copy;
//   two_shot:    rank r reduces shard r of every in[p] and stores it into every out[p]
//                (read N x bytes, write N x bytes): the real kernel's middle phase;
//   reduce_only: the same reduction, stored only into out[r] (read N x bytes, write bytes);
//   push_only:   rank r reads shard r of in[r] and stores it into every out[p] (read bytes,
//                write N x bytes);
//   two_shot_u1, two_shot_u4: two_shot with 1 or 4 units per thread per step (the kernel's
//                choice is 2 for N <= 4, 1 for N = 8: kUnitsInFlight in reduce.cu);
//   two_shot_t1024: two_shot with 1024 threads per block and 1 unit per thread per step, the
//                shape of torch's two-shot (the same units per block as two_shot's 512 x 2);
//   two_shot_cs: two_shot with streaming stores (st.global.cs: evict first);
//   memcpy:      cudaMemcpyAsync of in[r] to out[r] for every r (the driver's copy kernels; not
//                in the default list);
//   two_shot_bulk: two_shot whose loads are TMA bulk copies (cp.async.bulk, sm_90) of 8 KiB
//                tiles of every peer's shard into shared memory, several tiles in flight per
//                block (an mbarrier per stage), reduced from shared memory and stored into every
//                out[p] with ordinary 16-byte stores: more bytes in flight per SM without the
//                registers that more units per thread take;
//   two_shot_bulk_st: the same, and the reduced tile is written back with bulk copies from
//                shared memory to every out[p] as well. On an H100 both lost 4-10% to two_shot
//                (docs/performance.md, "TMA bulk copies"), so the kernel does not use them.
// Rows (JSON, one per line): variant, world, bytes, blocks (per rank), us, bytes moved, TB/s, and
// for the two_shot variants their share of copy's rate. Their output is checked (out zeroed, one
// launch; every in[p] holds p + 1, so every element of every out must be N (N + 1) / 2): exit
// status 1 when it is not.
//
// usage: reduce_pattern [--worlds 2,4] [--sizes B,...] [--blocks-per-sm 1,2] [--variants ...]
//                       [--iters 20] [--repeats 5] [--grid sms|collective]
// --grid: blocks per rank. sms (the default): the rank's share of the SMs times --blocks-per-sm,
// at every size. collective: what the two-shot all-reduce launches for that size (one block per
// kThreads x kReduceUnitsPerThread units of the rank's shard, at most the sms grid), so that a
// small size runs the collective's few blocks: 16 per rank for 1 MiB with 4 ranks.
//
// Under ncu, profile one launch of one variant, e.g.
//   ncu --kernel-name regex:pattern --launch-skip 3 --launch-count 1 --section SpeedOfLight
//       --section MemoryWorkloadAnalysis --section WarpStateStats
//       reduce_pattern --worlds 4 --sizes 67108864 --variants two_shot --iters 5 --repeats 1

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "bench_cuda.hpp"
#include "cuda/kernels/reduce.cu"  // reduce_range and share (anonymous namespace there)

namespace {

namespace K = symmem::cuda::kernels;

enum class Variant : int {
  copy = 0,
  two_shot = 1,
  reduce_only = 2,
  push_only = 3,
  two_shot_u1 = 4,
  two_shot_u4 = 5,
  two_shot_cs = 6,
  memcpy = 7,
  two_shot_bulk = 8,
  two_shot_bulk_st = 9,
  two_shot_t1024 = 10
};
const char* const kVariantNames[] = {
    "copy",        "two_shot", "reduce_only",   "push_only",        "two_shot_u1",   "two_shot_u4",
    "two_shot_cs", "memcpy",   "two_shot_bulk", "two_shot_bulk_st", "two_shot_t1024"};
constexpr bool is_two_shot(Variant v) {
  return v == Variant::two_shot || v == Variant::two_shot_u1 || v == Variant::two_shot_u4 ||
         v == Variant::two_shot_cs || v == Variant::two_shot_bulk ||
         v == Variant::two_shot_bulk_st || v == Variant::two_shot_t1024;
}
// Threads per block of a variant.
constexpr int threads_of(Variant v) {
  return v == Variant::two_shot_t1024 ? 1024 : K::kThreads;
}

__device__ __forceinline__ void st_v4_cs(void* addr, uint4 v) {
  asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(addr), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w)
               : "memory");
}

struct PatternArgs {
  K::PeerPtrs in, out;
  int64_t count = 0;  // bf16 elements per buffer
};

constexpr K::KType kType = K::KType::bf16;

// Block (b, r): rank r's block b of the variant.
template <int kN, Variant kV>
__global__ void __launch_bounds__(threads_of(kV), K::kThreads * 2 / threads_of(kV))
    pattern_kernel(const PatternArgs a) {
  constexpr int64_t kPer = 8;  // bf16 per 16-byte unit
  const int r = static_cast<int>(blockIdx.y);
  const int64_t G = gridDim.x, b = blockIdx.x;
  const int64_t units = (a.count + kPer - 1) / kPer;
  auto no_elem = [](int64_t, float) {};  // counts here are whole units
  if constexpr (kV == Variant::copy || kV == Variant::push_only) {
    K::PeerPtrs one;
    one.inl[0] = K::peer(a.in, r);
    const K::Range range =
        kV == Variant::copy ? K::share(units, 1, 0, G, b) : K::share(units, kN, r, G, b);
    auto emit = [&](int64_t u, uint4 y) {
      if constexpr (kV == Variant::copy) {
        K::dev::st_v4(K::peer(a.out, r) + u * 16, y);
      } else {
#pragma unroll
        for (int p = 0; p < kN; ++p) K::dev::st_v4(K::peer(a.out, p) + u * 16, y);
      }
    };
    K::reduce_range<kType, 1>(one, 1, 0, K::KRed::sum, range, a.count, emit, no_elem);
  } else {
    auto emit = [&](int64_t u, uint4 y) {
      if constexpr (kV == Variant::reduce_only) {
        K::dev::st_v4(K::peer(a.out, r) + u * 16, y);
      } else if constexpr (kV == Variant::two_shot_cs) {
#pragma unroll
        for (int p = 0; p < kN; ++p) st_v4_cs(K::peer(a.out, p) + u * 16, y);
      } else {
#pragma unroll
        for (int p = 0; p < kN; ++p) K::dev::st_v4(K::peer(a.out, p) + u * 16, y);
      }
    };
    constexpr int kU = kV == Variant::two_shot_u1 || kV == Variant::two_shot_t1024 ? 1
                       : kV == Variant::two_shot_u4                                ? 4
                                                    : K::kUnitsInFlight<kN>;
    K::reduce_range<kType, kN, kU>(a.in, kN, 0, K::KRed::sum, K::share(units, kN, r, G, b), a.count,
                                   emit, no_elem);
  }
}

// ---- the TMA variants (two_shot_bulk, two_shot_bulk_st) ---------------------------------------
// NOTE [bulk two-shot]
// Block (b, r) walks its share of shard r in tiles of kTile bytes. Stage s of kStages holds one
// tile of every peer's input (kN x kTile bytes) and, for bulk stores, the reduced tile. Thread 0
// arms the stage's mbarrier with the tile's byte count and issues one cp.async.bulk per peer;
// every thread waits on the mbarrier's phase, reduces its units from shared memory in rank order
// (the same Vec arithmetic as reduce_full_units, so the bits are the kernel's), and stores. After
// a __syncthreads (nobody reads the stage any more) thread 0 refills the stage with the tile
// kStages ahead, so kStages x kN x kTile bytes are in flight per block while it reduces.
constexpr int64_t kTile = 8192;  // bytes per peer per tile: 512 units, one per thread

template <int kN>
inline constexpr int kBulkStages = (192 * 1024) / ((kN + 1) * kTile) < 4
                                       ? static_cast<int>((192 * 1024) / ((kN + 1) * kTile))
                                       : 4;
template <int kN>
inline constexpr size_t kBulkSmem = static_cast<size_t>(kBulkStages<kN>) * (kN + 1) * kTile +
                                    8 * static_cast<size_t>(kBulkStages<kN>);

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

template <int kN, bool kBulkStore>
__global__ void __launch_bounds__(K::kThreads, 1) bulk_kernel(const PatternArgs a) {
  constexpr int kS = kBulkStages<kN>;
  constexpr int64_t kTileUnits = kTile / 16;
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* in_buf = smem;                                   // [kS][kN][kTile]
  unsigned char* out_buf = smem + kS * kN * kTile;                // [kS][kTile]
  auto* bar = reinterpret_cast<uint64_t*>(out_buf + kS * kTile);  // [kS]
  const int r = static_cast<int>(blockIdx.y);
  const int64_t units = a.count / 8;  // whole units (the bench's counts are)
  const K::Range range = K::share(units, kN, r, gridDim.x, blockIdx.x);
  const int64_t tiles = (range.hi - range.lo + kTileUnits - 1) / kTileUnits;
  auto tile_units = [&](int64_t t) {
    const int64_t left = range.hi - (range.lo + t * kTileUnits);
    return left < kTileUnits ? left : kTileUnits;
  };
  auto issue = [&](int64_t t) {  // thread 0: tile t into its stage
    const int s = static_cast<int>(t % kS);
    const uint32_t bytes = static_cast<uint32_t>(tile_units(t) * 16);
    const uint32_t b = smem_addr(&bar[s]);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(bytes * kN)
                 : "memory");
    const int64_t off = (range.lo + t * kTileUnits) * 16;
#pragma unroll
    for (int p = 0; p < kN; ++p) {
      asm volatile(
          "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, "
          "[%3];" ::"r"(smem_addr(in_buf + (s * kN + p) * kTile)),
          "l"(K::peer(a.in, p) + off), "r"(bytes), "r"(b)
          : "memory");
    }
  };
  if (threadIdx.x == 0) {
    for (int s = 0; s < kS; ++s)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&bar[s])) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x == 0)
    for (int64_t t = 0; t < tiles && t < kS; ++t) issue(t);
  for (int64_t t = 0; t < tiles; ++t) {
    const int s = static_cast<int>(t % kS);
    const uint32_t parity = static_cast<uint32_t>((t / kS) & 1);
    const uint32_t b = smem_addr(&bar[s]);
    uint32_t done = 0;
    while (!done) {
      asm volatile(
          "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; "
          "selp.u32 %0, 1, 0, p; }"
          : "=r"(done)
          : "r"(b), "r"(parity)
          : "memory");
    }
    if constexpr (kBulkStore) {
      // The stores of tile t - kS read this stage's out_buf: done before it is rewritten.
      if (threadIdx.x == 0 && t >= kS)
        asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(kS - 1) : "memory");
      __syncthreads();
    }
    const int64_t n = tile_units(t);
    const int64_t base = (range.lo + t * kTileUnits) * 16;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      K::Vec<kType, 16> acc;
      acc.load(reinterpret_cast<const uint4*>(in_buf + (s * kN) * kTile)[i]);
#pragma unroll
      for (int p = 1; p < kN; ++p)
        acc.combine_with(K::KRed::sum,
                         reinterpret_cast<const uint4*>(in_buf + (s * kN + p) * kTile)[i]);
      uint4 y;
      acc.store(K::KRed::sum, kN, y);
      if constexpr (kBulkStore) {
        reinterpret_cast<uint4*>(out_buf + s * kTile)[i] = y;
      } else {
#pragma unroll
        for (int p = 0; p < kN; ++p) K::dev::st_v4(K::peer(a.out, p) + base + i * 16, y);
      }
    }
    if constexpr (kBulkStore) asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();  // the stage's inputs are read (and its output written)
    if (threadIdx.x == 0) {
      if constexpr (kBulkStore) {
#pragma unroll
        for (int p = 0; p < kN; ++p) {
          asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(
                           K::peer(a.out, p) + base),
                       "r"(smem_addr(out_buf + s * kTile)), "r"(static_cast<uint32_t>(n * 16))
                       : "memory");
        }
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
      }
      if (t + kS < tiles) issue(t + kS);
    }
  }
  if constexpr (kBulkStore) {
    if (threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  }
}

template <int kN, bool kBulkStore>
void launch_bulk(const PatternArgs& a, int blocks, cudaStream_t s) {
  static bool attr = false;
  if (!attr) {
    BENCH_CUDA(cudaFuncSetAttribute(bulk_kernel<kN, kBulkStore>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(kBulkSmem<kN>)));
    attr = true;
  }
  const dim3 grid(static_cast<unsigned>(blocks), kN);
  bulk_kernel<kN, kBulkStore><<<grid, K::kThreads, kBulkSmem<kN>, s>>>(a);
}

__global__ void fill_kernel(__nv_bfloat16* p, int64_t n, float v) {
  const __nv_bfloat16 x = __float2bfloat16(v);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    p[i] = x;
}

// Elements of out that differ from `want` (counted on the device).
__global__ void count_bad_kernel(const __nv_bfloat16* p, int64_t n, float want,
                                 unsigned long long* bad) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    if (__bfloat162float(p[i]) != want) atomicAdd(bad, 1ull);
}

// pattern_kernel<kN, kV> with the block size its launch bounds name.
template <int kN, Variant kV>
void launch_pattern(const PatternArgs& a, dim3 grid, cudaStream_t s) {
  pattern_kernel<kN, kV><<<grid, threads_of(kV), 0, s>>>(a);
}

template <int kN>
void launch(Variant v, const PatternArgs& a, int blocks, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>(blocks), kN);
  switch (v) {
    case Variant::copy:
      launch_pattern<kN, Variant::copy>(a, grid, s);
      break;
    case Variant::two_shot:
      launch_pattern<kN, Variant::two_shot>(a, grid, s);
      break;
    case Variant::reduce_only:
      launch_pattern<kN, Variant::reduce_only>(a, grid, s);
      break;
    case Variant::push_only:
      launch_pattern<kN, Variant::push_only>(a, grid, s);
      break;
    case Variant::two_shot_u1:
      launch_pattern<kN, Variant::two_shot_u1>(a, grid, s);
      break;
    case Variant::two_shot_u4:
      launch_pattern<kN, Variant::two_shot_u4>(a, grid, s);
      break;
    case Variant::two_shot_cs:
      launch_pattern<kN, Variant::two_shot_cs>(a, grid, s);
      break;
    case Variant::two_shot_t1024:
      launch_pattern<kN, Variant::two_shot_t1024>(a, grid, s);
      break;
    case Variant::two_shot_bulk:
      launch_bulk<kN, false>(a, blocks, s);
      break;
    case Variant::two_shot_bulk_st:
      launch_bulk<kN, true>(a, blocks, s);
      break;
    case Variant::memcpy:  // launch_world's
      break;
  }
}

void launch_world(int world, Variant v, const PatternArgs& a, int blocks, cudaStream_t s) {
  if (v == Variant::memcpy) {  // the driver's copy of the same bytes, rank by rank
    for (int p = 0; p < world; ++p)
      BENCH_CUDA(
          cudaMemcpyAsync(a.out.inl[p], a.in.inl[p], a.count * 2, cudaMemcpyDeviceToDevice, s));
    return;
  }
  switch (world) {
    case 2:
      launch<2>(v, a, blocks, s);
      break;
    case 4:
      launch<4>(v, a, blocks, s);
      break;
    case 8:
      launch<8>(v, a, blocks, s);
      break;
    default:
      std::fprintf(stderr, "reduce_pattern: --worlds takes 2, 4 or 8 (got %d)\n", world);
      std::exit(2);
  }
  BENCH_CUDA(cudaGetLastError());
}

// Bytes a variant reads plus writes, over all ranks.
double moved(Variant v, int world, double bytes) {
  switch (v) {
    case Variant::copy:
    case Variant::memcpy:
    case Variant::two_shot:
    case Variant::two_shot_u1:
    case Variant::two_shot_u4:
    case Variant::two_shot_cs:
    case Variant::two_shot_bulk:
    case Variant::two_shot_bulk_st:
    case Variant::two_shot_t1024:
      return 2.0 * world * bytes;
    case Variant::reduce_only:
      return (world + 1.0) * bytes;
    case Variant::push_only:
      return (1.0 + world) * bytes;
  }
  return 0;
}

using symmem::bench::split;

std::vector<long long> numbers(const char* flag, const std::string& s) {
  std::vector<long long> out;
  for (const std::string& x : split(s)) {
    char* end = nullptr;
    const long long v = std::strtoll(x.c_str(), &end, 10);
    if (end == x.c_str() || *end != '\0' || v <= 0) {
      std::fprintf(stderr, "reduce_pattern: %s takes positive integers (got '%s')\n", flag,
                   x.c_str());
      std::exit(2);
    }
    out.push_back(v);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<long long> worlds = {2, 4}, sizes = {1 << 20, 16 << 20, 64 << 20}, per_sm = {1};
  std::vector<Variant> variants = {
      Variant::copy,        Variant::two_shot,      Variant::reduce_only,
      Variant::push_only,   Variant::two_shot_u1,   Variant::two_shot_u4,
      Variant::two_shot_cs, Variant::two_shot_bulk, Variant::two_shot_bulk_st};
  int iters = 20, repeats = 5;
  bool collective_grid = false;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "reduce_pattern: %s needs a value\n", f.c_str());
      return 2;
    }
    const std::string v = argv[++i];
    if (f == "--worlds") {
      worlds = numbers("--worlds", v);
    } else if (f == "--sizes") {
      sizes = numbers("--sizes", v);
    } else if (f == "--blocks-per-sm") {
      per_sm = numbers("--blocks-per-sm", v);
    } else if (f == "--iters") {
      iters = static_cast<int>(numbers("--iters", v).at(0));
    } else if (f == "--repeats") {
      repeats = static_cast<int>(numbers("--repeats", v).at(0));
    } else if (f == "--grid") {
      if (v != "sms" && v != "collective") {
        std::fprintf(stderr, "reduce_pattern: --grid must be sms or collective, not '%s'\n",
                     v.c_str());
        return 2;
      }
      collective_grid = v == "collective";
    } else if (f == "--variants") {
      variants.clear();
      for (const std::string& name : split(v)) {
        const auto* it = std::find_if(std::begin(kVariantNames), std::end(kVariantNames),
                                      [&](const char* n) { return name == n; });
        if (it == std::end(kVariantNames)) {
          std::fprintf(stderr, "reduce_pattern: unknown variant '%s'\n", name.c_str());
          return 2;
        }
        variants.push_back(static_cast<Variant>(it - std::begin(kVariantNames)));
      }
    } else {
      std::fprintf(stderr, "reduce_pattern: unknown flag %s\n", f.c_str());
      return 2;
    }
  }
  int sms = 0;
  BENCH_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaStream_t s = nullptr;
  BENCH_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  BENCH_CUDA(cudaEventCreate(&e0));
  BENCH_CUDA(cudaEventCreate(&e1));
  unsigned long long* bad = nullptr;
  BENCH_CUDA(cudaMalloc(&bad, sizeof(*bad)));
  int failed = 0;
  for (const long long world : worlds) {
    for (const long long bytes : sizes) {
      const int64_t count = bytes / 2 / 8 * 8;  // whole 16-byte units
      std::vector<char*> in(world), out(world);
      PatternArgs a;
      a.count = count;
      for (int p = 0; p < world; ++p) {
        BENCH_CUDA(cudaMalloc(&in[p], count * 2));
        BENCH_CUDA(cudaMalloc(&out[p], count * 2));
        fill_kernel<<<1024, 256, 0, s>>>(reinterpret_cast<__nv_bfloat16*>(in[p]), count,
                                         static_cast<float>(p + 1));
        a.in.inl[p] = in[p];
        a.out.inl[p] = out[p];
      }
      double copy_tbs = 0;
      for (const long long bps : per_sm) {
        // As the collective launches it: the ranks sharing this GPU share its SMs.
        const long long sms_grid = std::clamp<long long>(sms * bps / world, 1, K::kMaxBlocks);
        // cuda_ops.cu's two-shot: blocks_for(shard units, kThreads x kReduceUnitsPerThread).
        const long long shard_units = ((bytes + 15) / 16 + world - 1) / world;
        const long long per_block = static_cast<long long>(K::kThreads) * K::kReduceUnitsPerThread;
        const int blocks = static_cast<int>(
            collective_grid
                ? std::clamp<long long>((shard_units + per_block - 1) / per_block, 1, sms_grid)
                : sms_grid);
        for (const Variant v : variants) {
          for (int w = 0; w < 3; ++w) launch_world(static_cast<int>(world), v, a, blocks, s);
          std::vector<float> us;
          for (int r = 0; r < repeats; ++r) {
            BENCH_CUDA(cudaEventRecord(e0, s));
            for (int it = 0; it < iters; ++it)
              launch_world(static_cast<int>(world), v, a, blocks, s);
            BENCH_CUDA(cudaEventRecord(e1, s));
            BENCH_CUDA(cudaEventSynchronize(e1));
            float ms = 0;
            BENCH_CUDA(cudaEventElapsedTime(&ms, e0, e1));
            us.push_back(ms * 1000.0f / static_cast<float>(iters));
          }
          std::sort(us.begin(), us.end());
          const double t = us[us.size() / 2];
          const double m = moved(v, static_cast<int>(world), static_cast<double>(count) * 2);
          const double tbs = m / (t * 1e-6) / 1e12;
          if (v == Variant::copy) copy_tbs = tbs;
          bool ok = true;
          if (is_two_shot(v)) {
            for (int p = 0; p < world; ++p) BENCH_CUDA(cudaMemsetAsync(out[p], 0, count * 2, s));
            launch_world(static_cast<int>(world), v, a, blocks, s);
            const float want = static_cast<float>(world * (world + 1) / 2);
            for (int p = 0; p < world; ++p) {
              BENCH_CUDA(cudaMemsetAsync(bad, 0, sizeof(*bad), s));
              count_bad_kernel<<<1024, 256, 0, s>>>(reinterpret_cast<__nv_bfloat16*>(out[p]), count,
                                                    want, bad);
              unsigned long long n = 0;
              BENCH_CUDA(cudaMemcpyAsync(&n, bad, sizeof(n), cudaMemcpyDeviceToHost, s));
              BENCH_CUDA(cudaStreamSynchronize(s));
              ok = ok && n == 0;
            }
            failed += ok ? 0 : 1;
          }
          std::printf(
              "{\"variant\":\"%s\",\"world\":%lld,\"bytes\":%lld,\"blocks_per_sm\":%lld,"
              "\"blocks\":%d,\"us\":%.2f,\"moved_bytes\":%.0f,\"tbs\":%.3f",
              kVariantNames[static_cast<int>(v)], world, bytes, bps, blocks, t, m, tbs);
          if (is_two_shot(v) && copy_tbs > 0) std::printf(",\"of_copy\":%.3f", tbs / copy_tbs);
          if (is_two_shot(v)) std::printf(",\"correct\":%s", ok ? "true" : "false");
          std::printf("}\n");
          std::fflush(stdout);
        }
      }
      for (int p = 0; p < world; ++p) {
        BENCH_CUDA(cudaFree(in[p]));
        BENCH_CUDA(cudaFree(out[p]));
      }
    }
  }
  BENCH_CUDA(cudaFree(bad));
  return failed == 0 ? 0 : 1;
}
