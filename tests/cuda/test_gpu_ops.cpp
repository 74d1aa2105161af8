// GPU collectives of the cuda backend (src/cuda/cuda_ops.cu, src/cuda/kernels/), run by every
// rank under symmem-run with SYMMEM_BACKEND=cuda (ctest label gpu; NP 1, 2, 4 on one GPU need
// SYMMEM_ALLOW_SHARED_GPU=1 and, for speed, MPS). Without a GPU every rank exits 77 (skipped).
//
// Every rank can compute every rank's input (a hash of rank, index and a per-case seed), so each
// checks its output against the host reference reduction (src/host/reduce.hpp: the same
// fixed rank order, f32 accumulation for f32 and the narrow floats, f64 for f64, wrapping
// integer sums) bit for bit, which also makes every rank's result
// identical; a few cases additionally compare the ranks' outputs with each other through
// symmetric memory.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "gpu_test_main.hpp"
#include "gpu_test_util.hpp"
#include "host/reduce.hpp"
#include "symmem/symmem.hpp"
#include "test_util.hpp"

namespace symmem::test {
namespace {

Group g_group;
int g_device = 0;
constexpr Millis kTimeout{60000};

SymmetricMemory alloc_on(const Group& g, size_t bytes) {
  AllocOptions opt;
  opt.backend = "cuda";
  return allocate(g, bytes, Device::cuda(g_device), opt);
}

// Ordinary device memory (cudaMalloc), with `skew` bytes of misalignment.
class DevBuf {
 public:
  DevBuf(size_t bytes, size_t skew = 0) : skew_(skew) {
    cudaMalloc(&base_, bytes + skew + 16);
    cudaMemset(base_, 0xEE, bytes + skew + 16);
    // cudaMemset may return before it ran, on the legacy stream, which the ops' non-blocking
    // streams do not wait for: without this the fill could land after an op's result.
    cudaDeviceSynchronize();
  }
  ~DevBuf() { cudaFree(base_); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  char* get() const { return static_cast<char*>(base_) + skew_; }

 private:
  void* base_ = nullptr;
  size_t skew_;
};

OpOptions opts(cudaStream_t s, Algo algo = Algo::automatic) {
  OpOptions o;
  o.stream = s;
  o.algo = algo;
  o.timeout = kTimeout;
  o.device = Device::cuda(g_device);
  return o;
}

uint32_t mix(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

// Input element i of `rank` for a case seed: full-mantissa values in [-2, 2), never NaN.
float value(int rank, size_t i, uint32_t seed) {
  uint32_t h = mix(static_cast<uint32_t>(i) * 2654435761u ^ mix(seed * 97u + rank));
  return (static_cast<float>(h >> 8) / 16777216.0f) * 4.0f - 2.0f;
}

// Every dtype the cuda kernels serve (NOTE [dtype table]): every row with gpu = 1 (all of them:
// f32, f64, f16, bf16, i32, i64 and the fp8 types).
std::vector<DType> gpu_dtypes() {
  std::vector<DType> v;
  for (size_t i = 0; i < dtype_table_size(); ++i)
    if (dtype_table()[i].gpu_reduce) v.push_back(dtype_table()[i].dtype);
  return v;
}

// Input element i of `rank` for i32/i64 (every bit pattern: sums of a few ranks overflow and wrap,
// min/max see values that differ in the high or only in the low 32 bits) and f64 (53-bit
// mantissas in [-2, 2): its sums differ from an f32 accumulation's).
uint64_t bits64(int rank, size_t i, uint32_t seed) {
  const uint32_t lo = mix(static_cast<uint32_t>(i) * 2654435761u ^ mix(seed * 97u + rank));
  uint32_t hi = mix(lo ^ 0x9e3779b9u);
  // Every 4th element shares its high word across ranks: min/max must then look at the low word.
  if (i % 4 == 1) hi = mix(static_cast<uint32_t>(i) ^ seed);
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

// The dtypes the cuda backend moves but does not reduce (rows with gpu = 0: uint8, int8, bool,
// int16, uint16/32/64, complex64/128; NOTE [GPU dtypes] in src/cuda/gpu_rules.hpp).
std::vector<DType> moved_only_dtypes() {
  std::vector<DType> v;
  for (size_t i = 0; i < dtype_table_size(); ++i)
    if (!dtype_table()[i].gpu_reduce) v.push_back(dtype_table()[i].dtype);
  return v;
}

std::vector<char> make_input(DType t, int rank, size_t count, uint32_t seed, size_t first = 0) {
  if (!dtype_info(t).gpu_reduce) {
    // Moved only: every byte hashed from (rank, byte index, seed); bool holds 0 or 1.
    const size_t es = dtype_size(t);
    std::vector<char> out(count * es);
    for (size_t b = 0; b < out.size(); ++b) {
      const uint32_t h =
          mix(static_cast<uint32_t>(first * es + b) * 2654435761u ^ mix(seed * 97u + rank));
      out[b] = static_cast<char>(t == DType::b8 ? (h >> 9) & 1 : h >> 8);
    }
    return out;
  }
  if (t == DType::i32 || t == DType::i64 || t == DType::f64) {
    std::vector<char> out(count * dtype_size(t));
    for (size_t i = 0; i < count; ++i) {
      const uint64_t b = bits64(rank, first + i, seed);
      if (t == DType::i32) {
        const uint32_t v = static_cast<uint32_t>(b >> 16);  // mixes the high and low hash words
        std::memcpy(out.data() + 4 * i, &v, 4);
      } else if (t == DType::i64) {
        std::memcpy(out.data() + 8 * i, &b, 8);
      } else {
        const double d = static_cast<double>(b >> 11) / 9007199254740992.0 * 4.0 - 2.0;
        std::memcpy(out.data() + 8 * i, &d, 8);
      }
    }
    return out;
  }
  std::vector<float> f(count);
  for (size_t i = 0; i < count; ++i) f[i] = value(rank, first + i, seed);
  std::vector<char> out(count * dtype_size(t));
  if (t == DType::f32) {
    std::memcpy(out.data(), f.data(), out.size());
  } else {
    convert_from_f32(t, f.data(), out.data(), count);
  }
  return out;
}

std::vector<char> reference(DType t, ReduceOp op, const std::vector<std::vector<char>>& ins,
                            size_t count) {
  std::vector<char> out(count * dtype_size(t));
  std::vector<const void*> p;
  for (const auto& v : ins) p.push_back(v.data());
  host::reduce(out.data(), p.data(), static_cast<int>(ins.size()), count, t, op,
               static_cast<int>(ins.size()));
  return out;
}

std::vector<char> download(const void* d, size_t bytes) {
  std::vector<char> h(bytes);
  EXPECT_EQ(cudaMemcpy(h.data(), d, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}
void upload(void* d, const std::vector<char>& h) {
  EXPECT_EQ(cudaMemcpy(d, h.data(), h.size(), cudaMemcpyHostToDevice), cudaSuccess);
  // NOTE: cudaMemcpy from pageable memory may return before the DMA to the device has landed
  // (CUDA runtime API, "API synchronization behavior"), and the ops run on non-blocking streams
  // in this and the peer processes: without this, a peer can read the tail of a stale input.
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// First differing element, for messages.
std::string first_diff(const std::vector<char>& got, const std::vector<char>& want, size_t es) {
  for (size_t i = 0; i < want.size() && i < got.size(); i += es) {
    if (std::memcmp(got.data() + i, want.data() + i, es) != 0) {
      unsigned long long g = 0, w = 0;  // es <= 8
      std::memcpy(&g, got.data() + i, std::min<size_t>(es, 8));
      std::memcpy(&w, want.data() + i, std::min<size_t>(es, 8));
      char buf[128];
      std::snprintf(buf, sizeof(buf), "element %zu: got 0x%llx, want 0x%llx", i / es, g, w);
      return buf;
    }
  }
  return got.size() == want.size() ? "equal" : "size differs";
}

#define EXPECT_BYTES_EQ(got, want, es, what) \
  EXPECT_TRUE((got) == (want)) << (what) << ": " << first_diff((got), (want), (es))

// Every rank's `bytes` at `d` must be equal (copied through a symmetric buffer).
void expect_same_on_every_rank(const Group& g, const void* d, size_t bytes, cudaStream_t s) {
  auto check = alloc_on(g, std::max<size_t>(bytes, 16));
  EXPECT_EQ(cudaMemcpyAsync(check.ptr(g.rank()), d, bytes, cudaMemcpyDeviceToDevice, s),
            cudaSuccess);
  check.barrier(0, kTimeout, s);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  auto mine = download(check.ptr(g.rank()), bytes);
  for (int p = 0; p < g.world_size(); ++p) {
    auto theirs = download(check.ptr(p), bytes);
    EXPECT_TRUE(mine == theirs) << "rank " << p << " holds other bits than rank " << g.rank();
  }
  check.barrier(0, kTimeout, s);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
}

const char* name(Algo a) {
  return to_string(a);
}

// ---- all_reduce ---------------------------------------------------------------------------------
enum class Kind { ordinary, ordinary_skewed, sym_in_place, sym_out_of_place };
const char* name(Kind k) {
  switch (k) {
    case Kind::ordinary:
      return "ordinary";
    case Kind::ordinary_skewed:
      return "ordinary+skew";
    case Kind::sym_in_place:
      return "symmetric in place";
    case Kind::sym_out_of_place:
      return "symmetric out of place";
  }
  return "?";
}

void check_all_reduce(const Group& g, DType t, ReduceOp op, Algo algo, size_t count, Kind kind,
                      uint32_t seed, bool cross_check = false) {
  SCOPED_TRACE(std::string("all_reduce ") + to_string(t) + " " + to_string(op) + " " + name(algo) +
               " count " + std::to_string(count) + " " + name(kind) + " world " +
               std::to_string(g.world_size()));
  const size_t es = dtype_size(t);
  const size_t bytes = count * es;
  Stream s;
  std::vector<std::vector<char>> ins;
  for (int r = 0; r < g.world_size(); ++r) ins.push_back(make_input(t, r, count, seed));
  const auto want = reference(t, op, ins, count);
  const OpOptions o = opts(s.get(), algo);
  std::vector<char> got;
  if (kind == Kind::ordinary || kind == Kind::ordinary_skewed) {
    const size_t skew = kind == Kind::ordinary_skewed ? es : 0;
    DevBuf send(bytes, skew), recv(bytes, 3 * skew);
    upload(send.get(), ins[g.rank()]);
    all_reduce(send.get(), recv.get(), count, t, op, g, o);
    s.sync();
    got = download(recv.get(), bytes);
    EXPECT_TRUE(download(send.get(), bytes) == ins[g.rank()]) << "send was modified";
    if (cross_check) expect_same_on_every_rank(g, recv.get(), bytes, s.get());
  } else if (kind == Kind::sym_in_place) {
    auto buf = alloc_on(g, bytes + 64);
    upload(buf.ptr(g.rank()), ins[g.rank()]);
    all_reduce(buf, count, t, op, o);
    s.sync();
    got = download(buf.ptr(g.rank()), bytes);
    if (cross_check) expect_same_on_every_rank(g, buf.ptr(g.rank()), bytes, s.get());
  } else {
    auto buf = alloc_on(g, 2 * bytes + 256);
    char* send = static_cast<char*>(buf.ptr(g.rank()));
    char* recv = send + ((bytes + 255) / 256) * 256;
    upload(send, ins[g.rank()]);
    all_reduce(send, recv, count, t, op, g, o);
    s.sync();
    got = download(recv, bytes);
  }
  EXPECT_BYTES_EQ(got, want, es, "result");
}

TEST(GpuOps, AllReduceEveryDtypeAlgoSize) {
  const Algo algos[] = {Algo::automatic, Algo::one_shot, Algo::two_shot};
  const std::vector<DType> types = gpu_dtypes();
  // 1 and 13 elements: tails only; 4099: LL; 70001: LL (one_shot) vs two-shot; 600003: beyond
  // the LL capacity for 4 ranks (barrier one-shot / two-shot).
  const size_t sizes[] = {1, 13, 4099, 70001, 600003};
  const Kind kinds[] = {Kind::ordinary_skewed, Kind::sym_in_place, Kind::sym_out_of_place};
  uint32_t seed = 1;
  for (DType t : types) {
    for (Algo a : algos) {
      for (size_t n : sizes) {
        for (Kind k : kinds) check_all_reduce(g_group, t, ReduceOp::sum, a, n, k, seed++);
      }
    }
  }
}

TEST(GpuOps, AllReduceEveryReduction) {
  const ReduceOp ops[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::min, ReduceOp::max};
  const std::vector<DType> types = gpu_dtypes();
  const Algo algos[] = {Algo::one_shot, Algo::two_shot};
  uint32_t seed = 1000;
  for (DType t : types) {
    for (ReduceOp op : ops) {
      for (Algo a : algos) {
        check_all_reduce(g_group, t, op, a, 37, Kind::ordinary, seed++);
        check_all_reduce(g_group, t, op, a, 100003, Kind::sym_in_place, seed++);
      }
    }
  }
}

// Independent of the host reference: integer sums wrap (two's complement), integer avg is the
// wrapped sum divided by the world size truncating toward zero, f64 accumulates in f64.
template <class T>
std::vector<char> as_bytes(const std::vector<T>& v) {
  std::vector<char> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::vector<char> all_reduce_ordinary(const Group& g, DType t, ReduceOp op, Algo algo,
                                      const std::vector<char>& mine, size_t count) {
  Stream s;
  DevBuf send(mine.size()), recv(mine.size(), dtype_size(t));
  upload(send.get(), mine);
  all_reduce(send.get(), recv.get(), count, t, op, g, opts(s.get(), algo));
  s.sync();
  return download(recv.get(), mine.size());
}

TEST(GpuOps, IntegerSumsWrapAndF64AccumulatesInF64) {
  const Group& g = g_group;
  const int n = g.world_size(), r = g.rank();
  // 13: LL (odd count: a partial 8-byte unit for i32); 70001: LL or barrier one-shot, two-shot;
  // 600003: past the LL capacity (odd: the partial last 16-byte unit of the barrier kernels).
  for (size_t count : {size_t{13}, size_t{70001}, size_t{600003}}) {
    for (Algo algo : {Algo::automatic, Algo::one_shot, Algo::two_shot}) {
      SCOPED_TRACE("count " + std::to_string(count) + " " + name(algo));
      // i64: near INT64_MAX / INT64_MIN, so the sum of two ranks overflows.
      std::vector<int64_t> a64(count), s64(count), v64(count), mn64(count);
      std::vector<int32_t> a32(count), s32(count), v32(count), mx32(count);
      std::vector<double> ad(count), sd(count);
      auto i64_of = [](int q, size_t i) -> int64_t {
        const uint64_t base = (i % 2) ? 0x7ffffffffffff000ull : 0x8000000000000100ull;
        return static_cast<int64_t>(base + (i % 1000) * 3 + static_cast<uint64_t>(q) * 7);
      };
      auto i32_of = [](int q, size_t i) -> int32_t {
        const uint32_t base = (i % 3) ? 0x7ffff000u : 0x80000100u;
        return static_cast<int32_t>(base + static_cast<uint32_t>(i % 777) * 5 + q * 11u);
      };
      // f64: 1 + i * 2^-40 + q * 2^-45, whose sums need more than f32's 24 bits.
      auto f64_of = [](int q, size_t i) {
        return 1.0 + std::ldexp(static_cast<double>(i % 4096), -40) +
               std::ldexp(static_cast<double>(q + 1), -45);
      };
      for (size_t i = 0; i < count; ++i) {
        a64[i] = i64_of(r, i);
        a32[i] = i32_of(r, i);
        ad[i] = f64_of(r, i);
        uint64_t u64 = 0;
        uint32_t u32 = 0;
        double d = 0;
        mn64[i] = i64_of(0, i);
        mx32[i] = i32_of(0, i);
        for (int q = 0; q < n; ++q) {
          u64 += static_cast<uint64_t>(i64_of(q, i));
          u32 += static_cast<uint32_t>(i32_of(q, i));
          d = q == 0 ? f64_of(q, i) : d + f64_of(q, i);
          mn64[i] = std::min(mn64[i], i64_of(q, i));
          mx32[i] = std::max(mx32[i], i32_of(q, i));
        }
        s64[i] = static_cast<int64_t>(u64);
        s32[i] = static_cast<int32_t>(u32);
        v64[i] = s64[i] / n;  // truncates toward zero
        v32[i] = s32[i] / n;
        sd[i] = d;
      }
      EXPECT_BYTES_EQ(all_reduce_ordinary(g, DType::i64, ReduceOp::sum, algo, as_bytes(a64), count),
                      as_bytes(s64), 8, "i64 sum");
      EXPECT_BYTES_EQ(all_reduce_ordinary(g, DType::i64, ReduceOp::avg, algo, as_bytes(a64), count),
                      as_bytes(v64), 8, "i64 avg");
      EXPECT_BYTES_EQ(all_reduce_ordinary(g, DType::i64, ReduceOp::min, algo, as_bytes(a64), count),
                      as_bytes(mn64), 8, "i64 min");
      EXPECT_BYTES_EQ(all_reduce_ordinary(g, DType::i32, ReduceOp::sum, algo, as_bytes(a32), count),
                      as_bytes(s32), 4, "i32 sum");
      EXPECT_BYTES_EQ(all_reduce_ordinary(g, DType::i32, ReduceOp::avg, algo, as_bytes(a32), count),
                      as_bytes(v32), 4, "i32 avg");
      EXPECT_BYTES_EQ(all_reduce_ordinary(g, DType::i32, ReduceOp::max, algo, as_bytes(a32), count),
                      as_bytes(mx32), 4, "i32 max");
      EXPECT_BYTES_EQ(all_reduce_ordinary(g, DType::f64, ReduceOp::sum, algo, as_bytes(ad), count),
                      as_bytes(sd), 8, "f64 sum");
    }
  }
}

TEST(GpuOps, AllReduceBitwiseIdenticalAcrossRanksAndAlgorithms) {
  // The same inputs through LL, barrier one-shot and two-shot give the same bits everywhere.
  for (Algo a : {Algo::one_shot, Algo::two_shot}) {
    check_all_reduce(g_group, DType::bf16, ReduceOp::sum, a, 50001, Kind::ordinary, 77, true);
    check_all_reduce(g_group, DType::f32, ReduceOp::avg, a, 1 << 20, Kind::sym_in_place, 78, true);
    check_all_reduce(g_group, DType::f64, ReduceOp::sum, a, 50001, Kind::ordinary, 79, true);
    check_all_reduce(g_group, DType::i64, ReduceOp::sum, a, 300001, Kind::sym_in_place, 80, true);
    check_all_reduce(g_group, DType::i32, ReduceOp::min, a, 70001, Kind::ordinary, 81, true);
  }
}

TEST(GpuOps, AllReduceLarge) {
  check_all_reduce(g_group, DType::bf16, ReduceOp::sum, Algo::automatic, (16u << 20) / 2 + 3,
                   Kind::sym_in_place, 5, true);
  check_all_reduce(g_group, DType::f32, ReduceOp::sum, Algo::two_shot, (8u << 20) / 4 + 1,
                   Kind::ordinary, 6);
}

TEST(GpuOps, AllReduceGenericWorldSize) {
  // A 3-rank subgroup runs the kernels' generic (non-templated) world-size path.
  if (g_group.world_size() < 3) GTEST_SKIP() << "needs at least 3 ranks";
  std::vector<int> ranks = {0, 1, 2};
  if (g_group.rank() > 2) return;
  Group sub = g_group.split(ranks);
  uint32_t seed = 300;
  for (Algo a : {Algo::one_shot, Algo::two_shot}) {
    for (DType t : {DType::f32, DType::bf16, DType::f64, DType::i64, DType::i32}) {
      check_all_reduce(sub, t, ReduceOp::sum, a, 5, Kind::ordinary, seed++);
      check_all_reduce(sub, t, ReduceOp::max, a, 30011, Kind::sym_in_place, seed++);
      check_all_reduce(sub, t, ReduceOp::avg, a, 700001, Kind::ordinary_skewed, seed++);
    }
  }
}

// ---- reduce_scatter -----------------------------------------------------------------------------
void check_reduce_scatter(DType t, ReduceOp op, size_t rc, bool sym, uint32_t seed) {
  const Group& g = g_group;
  SCOPED_TRACE(std::string("reduce_scatter ") + to_string(t) + " " + to_string(op) +
               " recv_count " + std::to_string(rc) + (sym ? " symmetric send" : " ordinary"));
  const int n = g.world_size();
  const size_t es = dtype_size(t);
  Stream s;
  std::vector<std::vector<char>> ins;
  for (int r = 0; r < n; ++r) ins.push_back(make_input(t, r, rc * n, seed));
  std::vector<std::vector<char>> mine_blocks;
  for (int r = 0; r < n; ++r) {
    mine_blocks.emplace_back(ins[r].begin() + g.rank() * rc * es,
                             ins[r].begin() + (g.rank() + 1) * rc * es);
  }
  const auto want = reference(t, op, mine_blocks, rc);
  DevBuf recv(rc * es, es);  // offset by one element: aligned for the dtype, not to 16 bytes
  if (sym) {
    auto buf = alloc_on(g, rc * n * es);
    upload(buf.ptr(g.rank()), ins[g.rank()]);
    reduce_scatter(buf.ptr(g.rank()), recv.get(), rc, t, op, g, opts(s.get()));
    s.sync();
  } else {
    DevBuf send(rc * n * es, es);
    upload(send.get(), ins[g.rank()]);
    reduce_scatter(send.get(), recv.get(), rc, t, op, g, opts(s.get()));
    s.sync();
  }
  EXPECT_BYTES_EQ(download(recv.get(), rc * es), want, es, "result");
}

TEST(GpuOps, ReduceScatter) {
  uint32_t seed = 2000;
  for (DType t : gpu_dtypes()) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
      for (size_t rc : {size_t{1}, size_t{5}, size_t{3000}, size_t{200001}}) {
        check_reduce_scatter(t, op, rc, false, seed++);
      }
      check_reduce_scatter(t, op, 131072, true, seed++);  // zero copy (16-byte blocks)
      check_reduce_scatter(t, op, 7, true, seed++);       // symmetric, staged (odd blocks)
    }
  }
}

// ---- all_gather / all_to_all / broadcast
// ---------------------------------------------------------
void check_all_gather(DType t, size_t sc, int mode, uint32_t seed) {
  // mode 0: ordinary; 1: symmetric send; 2: in place in ordinary memory.
  const Group& g = g_group;
  SCOPED_TRACE(std::string("all_gather ") + to_string(t) + " send_count " + std::to_string(sc) +
               " mode " + std::to_string(mode));
  const int n = g.world_size();
  const size_t es = dtype_size(t);
  const size_t block = sc * es;
  Stream s;
  std::vector<char> want;
  for (int r = 0; r < n; ++r) {
    auto in = make_input(t, r, sc, seed);
    want.insert(want.end(), in.begin(), in.end());
  }
  const auto mine = make_input(t, g.rank(), sc, seed);
  DevBuf recv(block * n, mode == 2 ? 0 : es);
  if (mode == 0) {
    DevBuf send(block, 2 * es);
    upload(send.get(), mine);
    all_gather(send.get(), recv.get(), sc, t, g, opts(s.get()));
    s.sync();
  } else if (mode == 1) {
    auto buf = alloc_on(g, block + 16);
    upload(buf.ptr(g.rank()), mine);
    all_gather(buf.ptr(g.rank()), recv.get(), sc, t, g, opts(s.get()));
    s.sync();
  } else {
    char* at = recv.get() + g.rank() * block;
    upload(at, mine);
    all_gather(at, recv.get(), sc, t, g, opts(s.get()));
    s.sync();
  }
  EXPECT_BYTES_EQ(download(recv.get(), block * n), want, es, "result");
}

TEST(GpuOps, AllGather) {
  uint32_t seed = 3000;
  for (DType t : gpu_dtypes()) {
    for (size_t sc : {size_t{1}, size_t{3}, size_t{5000}, size_t{300001}}) {
      for (int mode = 0; mode < 3; ++mode) check_all_gather(t, sc, mode, seed++);
    }
  }
}

void check_all_to_all(DType t, size_t c, bool sym_recv, uint32_t seed) {
  const Group& g = g_group;
  SCOPED_TRACE(std::string("all_to_all ") + to_string(t) + " count " + std::to_string(c) +
               (sym_recv ? " symmetric recv" : " ordinary"));
  const int n = g.world_size();
  const size_t es = dtype_size(t);
  const size_t block = c * es;
  Stream s;
  // Rank r's block p is input (r, elements p*c ...).
  std::vector<char> want;
  for (int r = 0; r < n; ++r) {
    auto in = make_input(t, r, c, seed, static_cast<size_t>(g.rank()) * c);
    want.insert(want.end(), in.begin(), in.end());
  }
  const auto mine = make_input(t, g.rank(), c * n, seed);
  DevBuf send(block * n, es);
  upload(send.get(), mine);
  if (sym_recv) {
    auto buf = alloc_on(g, block * n);
    all_to_all(send.get(), buf.ptr(g.rank()), c, t, g, opts(s.get()));
    s.sync();
    EXPECT_BYTES_EQ(download(buf.ptr(g.rank()), block * n), want, es, "result");
  } else {
    DevBuf recv(block * n, 3 * es);
    all_to_all(send.get(), recv.get(), c, t, g, opts(s.get()));
    s.sync();
    EXPECT_BYTES_EQ(download(recv.get(), block * n), want, es, "result");
  }
}

TEST(GpuOps, AllToAll) {
  uint32_t seed = 4000;
  for (DType t : gpu_dtypes()) {
    for (size_t c : {size_t{1}, size_t{7}, size_t{5000}, size_t{150001}}) {
      check_all_to_all(t, c, false, seed++);
      check_all_to_all(t, c, true, seed++);
    }
  }
}

TEST(GpuOps, Broadcast) {
  const Group& g = g_group;
  uint32_t seed = 5000;
  for (DType t : gpu_dtypes()) {
    for (int root = 0; root < g.world_size(); ++root) {
      for (size_t count : {size_t{1}, size_t{999}, size_t{300001}}) {
        SCOPED_TRACE(std::string("broadcast ") + to_string(t) + " root " + std::to_string(root) +
                     " count " + std::to_string(count));
        const size_t es = dtype_size(t);
        const size_t bytes = count * es;
        Stream s;
        const auto want = make_input(t, root, count, seed++);
        DevBuf recv(bytes, es);
        if (g.rank() == root) {
          DevBuf send(bytes, 3 * es);
          upload(send.get(), want);
          broadcast(send.get(), recv.get(), count, t, root, g, opts(s.get()));
          s.sync();
        } else {
          broadcast(nullptr, recv.get(), count, t, root, g, opts(s.get()));
          s.sync();
        }
        EXPECT_BYTES_EQ(download(recv.get(), bytes), want, es, "result");
      }
    }
  }
}

// ---- all_to_all_v
// ---------------------------------------------------------------------------------
int64_t a2av_count(int from, int to, uint32_t seed) {
  return static_cast<int64_t>(mix(seed * 131u + from * 17u + to) % 3000) * (((from + to) % 3) != 0);
}

void check_all_to_all_v(DType t, bool known, bool sym_recv, uint32_t seed) {
  const Group& g = g_group;
  SCOPED_TRACE(std::string("all_to_all_v ") + to_string(t) + (known ? " known" : " moe") +
               (sym_recv ? " symmetric recv" : ""));
  const int n = g.world_size();
  const int r = g.rank();
  const size_t es = dtype_size(t);
  Stream s;
  std::vector<int64_t> send_counts(n), want_counts(n), want_offsets(n);
  int64_t send_total = 0, recv_total = 0;
  for (int p = 0; p < n; ++p) {
    send_counts[p] = a2av_count(r, p, seed);
    send_total += send_counts[p];
    want_counts[p] = a2av_count(p, r, seed);
    want_offsets[p] = recv_total;
    recv_total += want_counts[p];
  }
  // Piece for p: input(r, elements starting at 100000 * p).
  std::vector<char> send_host;
  for (int p = 0; p < n; ++p) {
    auto piece = make_input(t, r, send_counts[p], seed, 100000u * p);
    send_host.insert(send_host.end(), piece.begin(), piece.end());
  }
  std::vector<char> want;
  for (int p = 0; p < n; ++p) {
    auto piece = make_input(t, p, want_counts[p], seed, 100000u * r);
    want.insert(want.end(), piece.begin(), piece.end());
  }
  const size_t capacity = static_cast<size_t>(3000) * n + 5;
  DevBuf send(std::max<size_t>(send_total, 1) * es, es);
  if (send_total > 0) upload(send.get(), send_host);
  DevBuf counts(3 * n * sizeof(int64_t));
  auto* d_send_counts = reinterpret_cast<int64_t*>(counts.get());
  int64_t* d_recv_counts = d_send_counts + n;
  int64_t* d_recv_offsets = d_send_counts + 2 * n;
  std::vector<char> c(reinterpret_cast<char*>(send_counts.data()),
                      reinterpret_cast<char*>(send_counts.data()) + n * sizeof(int64_t));
  upload(d_send_counts, c);
  if (known) {
    std::vector<char> k(reinterpret_cast<char*>(want_counts.data()),
                        reinterpret_cast<char*>(want_counts.data()) + n * sizeof(int64_t));
    upload(d_recv_counts, k);
  }
  AllToAllVOptions o;
  static_cast<OpOptions&>(o) = opts(s.get());
  o.recv_counts_known = known;
  std::vector<char> got;
  if (sym_recv) {
    auto buf = alloc_on(g, capacity * es);
    all_to_all_v(send.get(), d_send_counts, buf.ptr(r), d_recv_counts, d_recv_offsets, capacity, t,
                 g, o);
    s.sync();
    got = download(buf.ptr(r), recv_total * es);
  } else {
    DevBuf recv(capacity * es, 2 * es);
    all_to_all_v(send.get(), d_send_counts, recv.get(), d_recv_counts, d_recv_offsets, capacity, t,
                 g, o);
    s.sync();
    got = download(recv.get(), recv_total * es);
  }
  EXPECT_BYTES_EQ(got, want, es, "received data");
  std::vector<int64_t> rc(n), ro(n);
  auto h = download(d_recv_counts, 2 * n * sizeof(int64_t));
  std::memcpy(rc.data(), h.data(), n * sizeof(int64_t));
  std::memcpy(ro.data(), h.data() + n * sizeof(int64_t), n * sizeof(int64_t));
  EXPECT_EQ(rc, want_counts);
  EXPECT_EQ(ro, want_offsets);
}

TEST(GpuOps, AllToAllV) {
  uint32_t seed = 6000;
  for (DType t : gpu_dtypes()) {
    for (bool known : {false, true}) {
      for (bool sym : {false, true}) check_all_to_all_v(t, known, sym, seed++);
    }
  }
}

TEST(GpuOps, DeviceFoundErrorStaysWithItsGroup) {
  // Each group has its own op error record (NOTE [device-detected errors]): an all_to_all_v
  // capacity error found on the device in `other`'s op is not raised, nor cleared, by this
  // group's synchronising calls; `other`'s own error query raises it.
  const Group& g = g_group;
  const int n = g.world_size();
  std::vector<int> all(n);
  for (int i = 0; i < n; ++i) all[i] = i;
  Group other = g.split(all);
  Stream s;
  std::vector<int64_t> counts(n, 4);
  DevBuf send(4 * n * 4), dc(3 * n * sizeof(int64_t));
  auto* d = reinterpret_cast<int64_t*>(dc.get());
  upload(d, std::vector<char>(reinterpret_cast<char*>(counts.data()),
                              reinterpret_cast<char*>(counts.data()) + n * 8));
  AllToAllVOptions o;
  static_cast<OpOptions&>(o) = opts(s.get());
  const size_t cap = g.rank() == n - 1 ? 4 * n - 1 : 4 * n;  // the last rank is one short
  DevBuf recv(cap * 4);
  barrier(g, opts(s.get()));  // this group's workspace exists before `other` fails
  all_to_all_v(send.get(), d, recv.get(), d + n, d + 2 * n, cap, DType::f32, other, o);
  s.sync();
  barrier(g, opts(nullptr));  // synchronising, this group: nothing of `other` raised
  g.check_async_error();
  const std::string culprit = "rank " + std::to_string(n - 1);
  expect_error([&] { other.check_async_error(); }, ErrorCode::InvalidArgument,
               {"recv_capacity", "all_to_all_v", culprit.c_str()});
  other.check_async_error();  // raised once
  g.store_barrier();
}

TEST(GpuOps, AllToAllVCapacityExceededIsReported) {
  const Group& g = g_group;
  const int n = g.world_size();
  Stream s;
  std::vector<int64_t> counts(n, 10);
  DevBuf send(10 * n * 4), recv(64), dc(2 * n * sizeof(int64_t) + n * sizeof(int64_t));
  auto* d = reinterpret_cast<int64_t*>(dc.get());
  upload(d, std::vector<char>(reinterpret_cast<char*>(counts.data()),
                              reinterpret_cast<char*>(counts.data()) + n * 8));
  AllToAllVOptions o;
  static_cast<OpOptions&>(o) = opts(s.get());
  // Every rank receives 10 * n elements; rank 0 declares room for 10 * n - 1 only.
  const size_t cap = g.rank() == 0 ? 10 * n - 1 : 10 * n;
  DevBuf recv_big(cap * 4);
  all_to_all_v(send.get(), d, recv_big.get(), d + n, d + 2 * n, cap, DType::f32, g, o);
  // An asynchronous op does not raise what the device found earlier (NOTE [device-detected
  // errors]): this barrier on the stream runs on every rank.
  barrier(g, opts(s.get()));
  s.sync();
  // Every rank sees the whole count matrix and raises (NOTE [all_to_all_v]): rank 0 of its own
  // argument, the others naming rank 0; from the error query once the stream is synchronised.
  expect_error([&] { g.check_async_error(); }, ErrorCode::InvalidArgument,
               {"recv_capacity", "all_to_all_v", "rank 0", "no rank moved any data"});
  g.check_async_error();  // raised once
  // The same error from a synchronising call: a group barrier on the null stream raises it after
  // its own work.
  all_to_all_v(send.get(), d, recv_big.get(), d + n, d + 2 * n, cap, DType::f32, g, o);
  s.sync();
  expect_error([&] { barrier(g, opts(nullptr)); }, ErrorCode::InvalidArgument,
               {"recv_capacity", "all_to_all_v", "rank 0", "no rank moved any data"});
  barrier(g, opts(s.get()));
  s.sync();
  g.check_async_error();
  g.store_barrier();
}

// ---- dtypes that are only moved --------------------------------------------------------------
// Every op that moves data takes every dtype on the GPU (issue #23): all_gather (ordinary,
// symmetric, in place), all_to_all, broadcast and all_to_all_v through the same checks as the
// kernels' dtypes, at counts that take the LL path, the barrier kernels and odd tails.
TEST(GpuOps, MovedOnlyDtypes) {
  const Group& g = g_group;
  uint32_t seed = 9000;
  for (DType t : moved_only_dtypes()) {
    // Every moved-only row at a size in each path; the ones issue #23 names at every size.
    const bool named = t == DType::u8 || t == DType::i8 || t == DType::b8 || t == DType::i16 ||
                       t == DType::c64 || t == DType::c128;
    for (size_t c : {size_t{3}, size_t{4099}, size_t{200001}}) {
      if (!named && c == 4099) continue;
      for (int mode = 0; mode < 3; ++mode) check_all_gather(t, c, mode, seed++);
      check_all_to_all(t, c, false, seed++);
      check_all_to_all(t, c, true, seed++);
      for (int root = 0; root < g.world_size(); ++root) {
        SCOPED_TRACE(std::string("broadcast ") + to_string(t) + " root " + std::to_string(root) +
                     " count " + std::to_string(c));
        const size_t es = dtype_size(t);
        Stream s;
        const auto want = make_input(t, root, c, seed++);
        DevBuf recv(c * es, es);
        DevBuf send(c * es, 3 * es);
        if (g.rank() == root) upload(send.get(), want);
        broadcast(g.rank() == root ? send.get() : nullptr, recv.get(), c, t, root, g,
                  opts(s.get()));
        s.sync();
        EXPECT_BYTES_EQ(download(recv.get(), c * es), want, es, "result");
      }
    }
    check_all_to_all_v(t, false, false, seed++);
    check_all_to_all_v(t, true, true, seed++);
  }
}

// put/get move bytes whatever the dtype; a put of a complex64 array at an element offset and a
// get of an int16 one back, checked exactly.
TEST(GpuOps, PutGetMovedOnlyDtypes) {
  const Group& g = g_group;
  const int n = g.world_size();
  const int r = g.rank();
  const int next = (r + 1) % n;
  const int prev = (r + n - 1) % n;
  for (DType t : {DType::c64, DType::i16, DType::u8, DType::b8}) {
    SCOPED_TRACE(std::string("put/get ") + to_string(t));
    const size_t es = dtype_size(t);
    const size_t count = 5001;
    const size_t bytes = count * es;
    Stream s;
    auto buf = alloc_on(g, bytes + 8 * es);
    const auto mine = make_input(t, r, count, 9500);
    DevBuf src(bytes, es);
    upload(src.get(), mine);
    buf.barrier(0, kTimeout, s.get());
    P2POptions po;
    static_cast<OpOptions&>(po) = opts(s.get());
    po.signal = true;
    po.channel = 2;
    put(buf, 3 * es, src.get(), bytes, next, po);
    buf.wait_signal(prev, 2, kTimeout, s.get());
    s.sync();
    EXPECT_BYTES_EQ(download(static_cast<char*>(buf.ptr(r)) + 3 * es, bytes),
                    make_input(t, prev, count, 9500), es, "put data");
    buf.barrier(0, kTimeout, s.get());
    DevBuf dst(bytes, es);
    get(buf, 3 * es, dst.get(), bytes, next, po);
    buf.wait_signal(prev, 2, kTimeout, s.get());
    s.sync();
    EXPECT_BYTES_EQ(download(dst.get(), bytes), mine, es, "get data");
    buf.barrier(0, kTimeout, s.get());
    s.sync();
  }
}

// Reductions keep the gpu column: an all_reduce of uint8 on the GPU is Unsupported, and the
// error names the ops that take uint8 there.
TEST(GpuOps, ReductionOfAMovedOnlyDtypeIsUnsupported) {
  const Group& g = g_group;
  Stream s;
  DevBuf in(16 * 8 * g.world_size()), out(16 * 8 * g.world_size());
  expect_error(
      [&] { all_reduce(in.get(), out.get(), 16, DType::u8, ReduceOp::sum, g, opts(s.get())); },
      ErrorCode::Unsupported, {"all_reduce", "uint8", "all_gather", "broadcast"});
  expect_error(
      [&] { reduce_scatter(in.get(), out.get(), 1, DType::c64, ReduceOp::sum, g, opts(s.get())); },
      ErrorCode::Unsupported, {"reduce_scatter", "complex64", "all_to_all"});
}

// ---- NVSHMEM-style signals (issue #23) ------------------------------------------------------
// signal_op / wait_until on raw pad slots of GPU memory (NOTE [GPU signals] in
// src/cuda/signals.hpp): a ring (each rank signals the next), each comparison, a wrapping add, a
// timeout on the null stream naming slot, comparison and value, and the enqueued forms on a
// stream. Slots from channel 8 on, clear of the channels the other tests use.
TEST(GpuOps, SignalOpAndWaitUntil) {
  const Group& g = g_group;
  const int n = g.world_size();
  const int r = g.rank();
  const int next = (r + 1) % n;
  const int prev = (r + n - 1) % n;
  const size_t base = 8 * static_cast<size_t>(n);
  auto buf = alloc_on(g, 4096);
  // Data written before the signal is visible to the next rank once it sees the signal.
  upload(buf.ptr(r), std::vector<char>(4096, static_cast<char>(r + 1)));
  buf.signal_op(next, base + r, 7, SignalOp::set);  // null stream: synchronous
  EXPECT_EQ(buf.wait_until(base + prev, Cmp::eq, 7, kTimeout), 7u);
  EXPECT_EQ(download(buf.ptr(prev), 4096), std::vector<char>(4096, static_cast<char>(prev + 1)));
  buf.signal_op(next, base + n + r, 5, SignalOp::add);
  buf.signal_op(next, base + n + r, 5, SignalOp::add);
  EXPECT_EQ(buf.wait_until(base + n + prev, Cmp::ge, 10, kTimeout), 10u);
  EXPECT_EQ(buf.wait_until(base + n + prev, Cmp::gt, 9, kTimeout), 10u);
  EXPECT_EQ(buf.wait_until(base + n + prev, Cmp::ne, 0, kTimeout), 10u);
  const size_t own = base + 2 * static_cast<size_t>(n);
  buf.signal_op(r, own, 3, SignalOp::set);
  EXPECT_EQ(buf.wait_until(own, Cmp::lt, 4, kTimeout), 3u);
  EXPECT_EQ(buf.wait_until(own, Cmp::le, 3, kTimeout), 3u);
  buf.signal_op(r, own + 1, 0xFFFFFFFFu, SignalOp::set);
  buf.signal_op(r, own + 1, 2, SignalOp::add);  // wraps
  EXPECT_EQ(buf.wait_until(own + 1, Cmp::eq, 1, kTimeout), 1u);
  const auto t0 = std::chrono::steady_clock::now();
  expect_error([&] { buf.wait_until(own, Cmp::gt, 5, Millis{300}); }, ErrorCode::Timeout,
               {"wait_until", "slot", "gt 5", "holds 3"});
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(250));
  // On a stream: enqueued, ordered with the stream's work; wait_until returns 0.
  Stream s;
  const size_t ring = own + 2;  // after own and own + 1 (at 1 rank base + 3n is own + 1)
  buf.signal_op(next, ring + r, 1, SignalOp::add, s.get());
  EXPECT_EQ(buf.wait_until(ring + prev, Cmp::eq, 1, kTimeout, s.get()), 0u);
  s.sync();
  // A timeout there is raised by the next call of the process.
  buf.wait_until(own, Cmp::eq, 99, Millis{100}, s.get());
  s.sync();
  expect_error([&] { buf.signal_op(r, own, 3, SignalOp::set); }, ErrorCode::Timeout, {"timed out"});
  g.store_barrier();
}

// ---- zero-copy agreement
// ----------------------------------------------------------------------------
TEST(GpuOps, ZeroCopyDisagreementIsReported) {
  const Group& g = g_group;
  if (g.world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  Stream s;
  const size_t count = 1 << 20;  // beyond every LL threshold: a barrier kernel
  auto buf = alloc_on(g, count * 4);
  DevBuf ordinary(count * 4), recv(count * 4);
  const void* send = g.rank() == 0 ? buf.ptr(0) : ordinary.get();
  all_reduce(send, recv.get(), count, DType::f32, ReduceOp::sum, g, opts(s.get(), Algo::two_shot));
  s.sync();
  expect_error([&] { g.check_async_error(); }, ErrorCode::InvalidArgument, {"same offset", "send"});
  barrier(g, opts(s.get()));
  s.sync();
  g.check_async_error();
  g.store_barrier();
}

// ---- refused ops (NOTE [refused ops] in src/cuda/kernels/refuse.cu) --------------------------
// Rank 1 alone passes a bad argument; it throws at the call, the others' kernels (enqueued
// already) learn of it on the device: no rank writes recv, the peers raise InvalidArgument
// naming rank 1 from the error query once their stream is synchronised, and the group goes on
// in step (the next all_reduce is correct). At an LL size and at a barrier-kernel size (2 MiB:
// above the LL capacity of every world size, whatever the tuning says).
void check_all_reduce_after_refusal(const Group& g, Stream& s, size_t count) {
  const int n = g.world_size();
  DevBuf x(count * 4), y(count * 4);
  std::vector<float> ones(count, 1.0f);
  upload(x.get(), std::vector<char>(reinterpret_cast<char*>(ones.data()),
                                    reinterpret_cast<char*>(ones.data()) + count * 4));
  all_reduce(x.get(), y.get(), count, DType::f32, ReduceOp::sum, g, opts(s.get()));
  s.sync();
  g.check_async_error();  // nothing
  std::vector<char> got = download(y.get(), count * 4);
  const float* f = reinterpret_cast<const float*>(got.data());
  EXPECT_EQ(f[0], static_cast<float>(n));
  EXPECT_EQ(f[count - 1], static_cast<float>(n));
}

TEST(GpuOps, RefusedOpIsReportedOnEveryRank) {
  const Group& g = g_group;
  const int n = g.world_size();
  if (n < 2) GTEST_SKIP() << "needs 2 ranks";
  const int r = g.rank();
  const std::string me = "rank " + std::to_string(r);
  Stream s;
  for (size_t count : {size_t{1000}, size_t{512} << 10}) {  // 4000 bytes: LL; 2 MiB: barrier
    SCOPED_TRACE("count " + std::to_string(count));
    const size_t bytes = count * 4;
    DevBuf send(bytes * n), recv(bytes * n + 64);
    // Every rank runs both ops once: the workspace is large enough for them (a refusal never
    // grows it: that is a collective allocation).
    all_reduce(send.get(), recv.get(), count, DType::f32, ReduceOp::sum, g, opts(s.get()));
    all_gather(send.get(), recv.get(), count, DType::f32, g, opts(s.get()));
    s.sync();
    // Every byte of recv is this before and after each refused op.
    const std::vector<char> before(bytes * n + 64, 0x5a);
    upload(recv.get(), before);
    struct Refusal {
      const char* op;
      const char* arg;
      std::function<void(bool bad)> run;
    };
    const Refusal refusals[] = {
        {"all_reduce", "send",  // rank 1: a null send
         [&](bool bad) {
           all_reduce(bad ? nullptr : send.get(), recv.get(), count, DType::f32, ReduceOp::sum, g,
                      opts(s.get()));
         }},
        {"all_gather", "recv",  // rank 1: a recv misaligned for f32
         [&](bool bad) {
           all_gather(send.get(), recv.get() + (bad ? 2 : 0), count, DType::f32, g, opts(s.get()));
         }},
    };
    for (const Refusal& c : refusals) {
      SCOPED_TRACE(c.op);
      if (r == 1) {
        expect_error([&] { c.run(true); }, ErrorCode::InvalidArgument, {c.arg, "rank 1"});
      } else {
        c.run(false);  // enqueued; its kernel meets rank 1's refusal
      }
      s.sync();
      if (r == 1) {
        g.check_async_error();  // the refusing rank has nothing more to raise
      } else {
        expect_error([&] { g.check_async_error(); }, ErrorCode::InvalidArgument,
                     {me.c_str(), "rank 1", "refused", c.op, "no rank moved any data"});
        g.check_async_error();  // raised once
      }
      EXPECT_TRUE(download(recv.get(), before.size()) == before) << "recv was touched";
      check_all_reduce_after_refusal(g, s, count);
    }
  }
  // A refused barrier; then a barrier on the null stream (synchronous) has nothing to raise.
  if (r == 1) {
    OpOptions o = opts(s.get());
    o.timeout = Millis(0);
    expect_error([&] { barrier(g, o); }, ErrorCode::InvalidArgument, {"timeout", "rank 1"});
    s.sync();
  } else {
    barrier(g, opts(s.get()));
    s.sync();
    expect_error([&] { g.check_async_error(); }, ErrorCode::InvalidArgument,
                 {me.c_str(), "rank 1", "refused", "barrier"});
  }
  barrier(g, opts(nullptr));
  g.check_async_error();
  // Refused again, raised this time by the next synchronising call: a barrier on the null
  // stream raises after its own work what the device found before.
  DevBuf x(4000), y(4000);
  if (r == 1) {
    expect_error(
        [&] { all_reduce(x.get(), nullptr, 1000, DType::f32, ReduceOp::sum, g, opts(s.get())); },
        ErrorCode::InvalidArgument, {"recv", "rank 1"});
    s.sync();
    barrier(g, opts(nullptr));
  } else {
    all_reduce(x.get(), y.get(), 1000, DType::f32, ReduceOp::sum, g, opts(s.get()));
    s.sync();
    expect_error([&] { barrier(g, opts(nullptr)); }, ErrorCode::InvalidArgument,
                 {me.c_str(), "rank 1", "refused", "all_reduce"});
  }
  g.check_async_error();
  check_all_reduce_after_refusal(g, s, 1000);
  g.store_barrier();
}

// ---- put / get / barrier
// ------------------------------------------------------------------------------
TEST(GpuOps, PutGetWithSignal) {
  const Group& g = g_group;
  const int n = g.world_size();
  const int r = g.rank();
  const int next = (r + 1) % n;
  const int prev = (r + n - 1) % n;
  Stream s;
  const size_t bytes = 100003;
  auto buf = alloc_on(g, bytes + 64);
  auto mine = make_input(DType::f32, r, bytes / 4 + 1, 7000);
  mine.resize(bytes);
  DevBuf src(bytes, 1);
  upload(src.get(), mine);
  buf.barrier(0, kTimeout, s.get());
  P2POptions po;
  static_cast<OpOptions&>(po) = opts(s.get());
  po.signal = true;
  po.channel = 1;
  put(buf, 5, src.get(), bytes, next, po);  // odd offset, odd length
  buf.wait_signal(prev, 1, kTimeout, s.get());
  s.sync();
  auto want = make_input(DType::f32, prev, bytes / 4 + 1, 7000);
  want.resize(bytes);
  auto got = download(static_cast<char*>(buf.ptr(r)) + 5, bytes);
  EXPECT_BYTES_EQ(got, want, 1, "put data");
  // get: read next's buffer (holding what next's predecessor, this rank, put there).
  buf.barrier(0, kTimeout, s.get());
  DevBuf dst(bytes, 3);
  get(buf, 5, dst.get(), bytes, next, po);
  buf.wait_signal(prev, 1, kTimeout, s.get());
  s.sync();
  EXPECT_BYTES_EQ(download(dst.get(), bytes), mine, 1, "get data");
  buf.barrier(0, kTimeout, s.get());
  s.sync();
}

TEST(GpuOps, BarrierOrdersWrites) {
  const Group& g = g_group;
  Stream s;
  auto buf = alloc_on(g, 4096);
  for (int round = 1; round <= 20; ++round) {
    std::vector<char> v(4, static_cast<char>(round));
    EXPECT_EQ(cudaMemcpyAsync(buf.ptr(g.rank()), v.data(), 4, cudaMemcpyHostToDevice, s.get()),
              cudaSuccess);
    barrier(g, opts(s.get()));
    s.sync();
    for (int p = 0; p < g.world_size(); ++p) {
      EXPECT_EQ(download(buf.ptr(p), 4), v) << "rank " << p << " round " << round;
    }
    barrier(g, opts(s.get()));
  }
  s.sync();
}

// Without OpOptions::device, a raw cudaMalloc pointer goes to the device of the group's most
// recent allocation (ops.hpp), not to the CPU; so does a barrier.
TEST(GpuOps, DeviceFallbackIsTheGroupsLatestAllocation) {
  const Group& g = g_group;
  auto sym = alloc_on(g, 4096);
  const size_t n = 1000;
  DevBuf x(n * sizeof(float));
  std::vector<float> v(n, static_cast<float>(g.rank() + 1));
  CUDA_OK(cudaMemcpy(x.get(), v.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  OpOptions o;
  o.timeout = kTimeout;  // no device, the default stream
  all_reduce(x.get(), x.get(), n, DType::f32, ReduceOp::sum, g, o);
  barrier(g, o);
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<float> got(n);
  CUDA_OK(cudaMemcpy(got.data(), x.get(), n * sizeof(float), cudaMemcpyDeviceToHost));
  const float want = static_cast<float>(g.world_size() * (g.world_size() + 1) / 2);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], want) << "element " << i;
}

// ---- CUDA graphs
// ----------------------------------------------------------------------------------------
TEST(GpuOps, GraphCaptureAndReplay) {
  const Group& g = g_group;
  const int n = g.world_size();
  Stream s;
  const size_t small = 3001, large = 400003;  // LL and two-shot (every world size here)
  auto sym = alloc_on(g, large * 2);
  DevBuf send_small(small * 4), recv_small(small * 4), gathered(small * 4 * n);
  DevBuf send_large(large * 2, 2);
  auto run_ops = [&] {
    all_reduce(send_small.get(), recv_small.get(), small, DType::f32, ReduceOp::sum, g,
               opts(s.get()));
    all_reduce(sym, large, DType::bf16, ReduceOp::sum, opts(s.get(), Algo::two_shot));
    all_gather(send_small.get(), gathered.get(), small, DType::f32, g, opts(s.get()));
    all_reduce(send_large.get(), send_large.get(), large, DType::bf16, ReduceOp::max, g,
               opts(s.get(), Algo::one_shot));
  };
  run_ops();  // warm up: workspace sized and initialised outside capture
  s.sync();
  cudaGraph_t graph = nullptr;
  CUDA_OK(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeThreadLocal));
  try {
    run_ops();
  } catch (const std::exception& e) {
    // End the capture before the buffers' destructors run (they synchronise the device).
    (void)cudaStreamEndCapture(s.get(), &graph);
    if (graph != nullptr) cudaGraphDestroy(graph);
    FAIL() << "an op under capture failed: " << e.what();
  }
  CUDA_OK(cudaStreamEndCapture(s.get(), &graph));
  cudaGraphExec_t exec = nullptr;
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  for (int rep = 0; rep < 4; ++rep) {
    const uint32_t seed = 8000 + rep;
    std::vector<std::vector<char>> a, b, c;
    for (int r = 0; r < n; ++r) {
      a.push_back(make_input(DType::f32, r, small, seed));
      b.push_back(make_input(DType::bf16, r, large, seed + 100));
      c.push_back(make_input(DType::bf16, r, large, seed + 200));
    }
    upload(send_small.get(), a[g.rank()]);
    upload(sym.ptr(g.rank()), b[g.rank()]);
    upload(send_large.get(), c[g.rank()]);
    CUDA_OK(cudaGraphLaunch(exec, s.get()));
    s.sync();
    SCOPED_TRACE("replay " + std::to_string(rep));
    EXPECT_BYTES_EQ(download(recv_small.get(), small * 4),
                    reference(DType::f32, ReduceOp::sum, a, small), 4, "LL all_reduce");
    EXPECT_BYTES_EQ(download(sym.ptr(g.rank()), large * 2),
                    reference(DType::bf16, ReduceOp::sum, b, large), 2, "two-shot all_reduce");
    std::vector<char> ag;
    for (int r = 0; r < n; ++r) ag.insert(ag.end(), a[r].begin(), a[r].end());
    EXPECT_BYTES_EQ(download(gathered.get(), small * 4 * n), ag, 4, "all_gather");
    EXPECT_BYTES_EQ(download(send_large.get(), large * 2),
                    reference(DType::bf16, ReduceOp::max, c, large), 2, "one-shot all_reduce");
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

// ---- bad inputs
// ---------------------------------------------------------------------------------------
TEST(GpuOps, BadInputs) {
  const Group& g = g_group;
  Stream s;
  auto buf = alloc_on(g, 4096);
  DevBuf a(8192), b(8192);
  expect_error([&] { all_reduce(buf, 4096, DType::f32, ReduceOp::sum, opts(s.get())); },
               ErrorCode::InvalidArgument, {"count"});
  expect_error(
      [&] { all_reduce(a.get() + 1, b.get(), 16, DType::bf16, ReduceOp::sum, g, opts(s.get())); },
      ErrorCode::InvalidArgument, {"send"});
  expect_error(  // 8-byte elements: 4-byte aligned is not enough
      [&] { all_reduce(a.get(), b.get() + 4, 16, DType::i64, ReduceOp::sum, g, opts(s.get())); },
      ErrorCode::InvalidArgument, {"recv"});
  expect_error(
      [&] { broadcast(a.get(), b.get(), 16, DType::f32, g.world_size(), g, opts(s.get())); },
      ErrorCode::InvalidArgument, {"root"});
  expect_error(
      [&] { all_reduce(a.get(), a.get() + 4, 16, DType::f32, ReduceOp::sum, g, opts(s.get())); },
      ErrorCode::InvalidArgument, {"overlap"});
  P2POptions po;
  static_cast<OpOptions&>(po) = opts(s.get());
  expect_error([&] { put(buf, 4000, a.get(), 200, 0, po); }, ErrorCode::InvalidArgument, {});
  expect_error([&] { put(buf, 0, a.get(), 16, g.world_size(), po); }, ErrorCode::InvalidArgument,
               {"peer"});
  // Every rank refused the same collectives: their refusals met each other (NOTE [refused
  // ops]), and the group is in step: a collective still works afterwards.
  barrier(g, opts(s.get()));
  s.sync();
}

TEST(GpuOps, DeviceWaitTimesOut) {
  // Rank 0 enters a collective the others skip: its kernel gives up at the deadline, records
  // the failure, and the next op on rank 0 raises Timeout. A fresh group keeps the damage away
  // from the others.
  if (g_group.world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  std::vector<int> all(g_group.world_size());
  for (int i = 0; i < g_group.world_size(); ++i) all[i] = i;
  Group fresh = g_group.split(all);
  Stream s;
  barrier(fresh, opts(s.get()));  // every rank: the workspace is set up
  s.sync();
  fresh.store_barrier();
  if (fresh.rank() == 0) {
    OpOptions o = opts(s.get());
    o.timeout = Millis(300);
    barrier(fresh, o);
    s.sync();  // returns after ~300 ms: the kernel left at its deadline
    expect_error([&] { barrier(fresh, o); }, ErrorCode::Timeout, {"timed out"});
  }
  fresh.store_barrier();
}

TEST(GpuOps, LoneBarrierOnTheNullStreamTimesOut) {
  // issue #24: a group barrier that rank 0 enters alone must end in Timeout. On the null stream
  // the call synchronises and raises itself; then a new group works (no sticky CUDA error).
  if (g_group.world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  std::vector<int> all(g_group.world_size());
  for (int i = 0; i < g_group.world_size(); ++i) all[i] = i;
  {
    Group fresh = g_group.split(all);
    barrier(fresh, opts(nullptr));  // every rank: the workspace is set up (synchronous)
    fresh.store_barrier();
    if (fresh.rank() == 0) {
      OpOptions o = opts(nullptr);
      o.timeout = Millis(1000);
      const auto t0 = std::chrono::steady_clock::now();
      expect_error([&] { barrier(fresh, o); }, ErrorCode::Timeout,
                   {"barrier: rank 0", "timed out", "for rank 1"});
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      EXPECT_GE(s, 0.9) << "raised before the deadline";
      EXPECT_LT(s, 20.0);
      EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    }
    fresh.store_barrier();
  }
  Group next = g_group.split(all);
  DevBuf a(4096);
  std::vector<float> ones(1024, 1.0f), got(1024, 0.0f);
  CUDA_OK(cudaMemcpy(a.get(), ones.data(), 4096, cudaMemcpyHostToDevice));
  all_reduce(a.get(), a.get(), 1024, DType::f32, ReduceOp::sum, next, opts(nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaMemcpy(got.data(), a.get(), 4096, cudaMemcpyDeviceToHost));
  EXPECT_EQ(got[0], static_cast<float>(g_group.world_size()));
  EXPECT_EQ(got[1023], static_cast<float>(g_group.world_size()));
  barrier(next, opts(nullptr));
  next.store_barrier();
}

// Last: a failed capture may leave the fresh group unusable.
TEST(GpuOps, CaptureWithoutWarmUpIsAnError) {
  // A fresh group has no workspace yet: setting it up inside capture is refused.
  if (g_group.world_size() == 1) GTEST_SKIP() << "one rank: ops are plain copies, no workspace";
  std::vector<int> all(g_group.world_size());
  for (int i = 0; i < g_group.world_size(); ++i) all[i] = i;
  Group fresh = g_group.split(all);
  Stream s;
  DevBuf a(4096), b(4096);
  CUDA_OK(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeThreadLocal));
  // Refused by symmem (InvalidArgument, "warm up") or, if the allocation itself touches a
  // capture-unsafe CUDA call first, by CUDA; either way the message names the capture.
  try {
    all_reduce(a.get(), b.get(), 1024, DType::f32, ReduceOp::sum, fresh, opts(s.get()));
    ADD_FAILURE() << "an op that needs a new workspace was accepted during capture";
  } catch (const Error& e) {
    std::string m = e.what();
    std::transform(m.begin(), m.end(), m.begin(),
                   [](unsigned char ch) { return std::tolower(ch); });
    EXPECT_NE(m.find("captur"), std::string::npos) << e.what();
  }
  cudaGraph_t graph = nullptr;
  cudaStreamEndCapture(s.get(), &graph);
  if (graph != nullptr) cudaGraphDestroy(graph);
  cudaGetLastError();
  // Outside capture the same call works.
  DevBuf c(4096);
  upload(c.get(), make_input(DType::f32, fresh.rank(), 1024, 9));
  all_reduce(c.get(), b.get(), 1024, DType::f32, ReduceOp::sum, fresh, opts(s.get()));
  s.sync();
  std::vector<std::vector<char>> ins;
  for (int r = 0; r < fresh.world_size(); ++r) ins.push_back(make_input(DType::f32, r, 1024, 9));
  EXPECT_BYTES_EQ(download(b.get(), 4096), reference(DType::f32, ReduceOp::sum, ins, 1024), 4,
                  "after capture");
  fresh.store_barrier();
}

}  // namespace
}  // namespace symmem::test

int main(int argc, char** argv) {
  return symmem::test::gpu_test_main(argc, argv, symmem::test::g_group, symmem::test::g_device);
}
