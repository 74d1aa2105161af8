#pragma once

// The correctness suite the nccl and nvshmem backends share (the cuda backend's checks: peer
// writes, signals, barrier, timeouts naming rank and channel, mismatched allocations caught
// without a deadlock, subgroups, every op). Included by one test executable per backend, which
// defines main() (skip rules), sets suite_env() and runs every TEST below on every rank.
// Inputs are small integers, so every expected value is exact in f32 and bf16.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "symmem/symmem.hpp"
#include "test_util.hpp"

namespace symmem::gputest {

struct SuiteEnv {
  Group group;
  Device device;
  std::string backend;  // "nccl" | "nvshmem"
};

inline SuiteEnv& suite_env() {
  static SuiteEnv e;
  return e;
}

inline AllocOptions alloc_opts() {
  AllocOptions o;
  o.backend = suite_env().backend;
  return o;
}

inline OpOptions op_opts() {
  OpOptions o;
  o.device = suite_env().device;
  return o;
}

#define SUITE_CUDA(call)                                                   \
  do {                                                                     \
    cudaError_t e_ = (call);                                               \
    ASSERT_EQ(e_, cudaSuccess) << #call << ": " << cudaGetErrorString(e_); \
  } while (0)

// ---- host <-> device helpers ----------------------------------------------------------------

inline uint16_t to_bf16(float f) {  // exact for the small integers used here
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);
}
inline float from_bf16(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline void upload(void* dst, const std::vector<float>& v, DType t) {
  if (t == DType::f32) {
    ASSERT_EQ(cudaMemcpy(dst, v.data(), v.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  } else {
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = to_bf16(v[i]);
    ASSERT_EQ(cudaMemcpy(dst, h.data(), h.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  }
  // A copy from pageable memory may return before its DMA lands; ops run on non-blocking streams.
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

inline std::vector<float> download(const void* src, size_t n, DType t) {
  std::vector<float> v(n);
  if (t == DType::f32) {
    EXPECT_EQ(cudaMemcpy(v.data(), src, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  } else {
    std::vector<uint16_t> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), src, n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    for (size_t i = 0; i < n; ++i) v[i] = from_bf16(h[i]);
  }
  return v;
}

// Counts mismatches and reports the first few.
inline void expect_values(const std::vector<float>& got, const std::vector<float>& want,
                          const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t wrong = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      if (wrong < 5) {
        ADD_FAILURE() << what << ": rank " << suite_env().group.rank() << " element " << i << " is "
                      << got[i] << ", expected " << want[i];
      }
      ++wrong;
    }
  }
  EXPECT_EQ(wrong, 0u) << what << ": " << wrong << " of " << got.size() << " elements wrong";
}

struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) { (void)cudaMalloc(&p, bytes < 16 ? 16 : bytes); }
  ~DeviceBuffer() {
    if (p) (void)cudaFree(p);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// ---- allocation and peers ------------------------------------------------------------------

TEST(GpuBackend, AllocationPeersAndHandle) {
  auto& e = suite_env();
  const int r = e.group.rank(), w = e.group.world_size();
  auto buf = allocate(e.group, 1 << 20, e.device, alloc_opts());
  EXPECT_EQ(buf.backend(), e.backend);
  EXPECT_EQ(buf.size(), size_t{1} << 20);
  ASSERT_NE(buf.ptr(r), nullptr);
  for (int p = 0; p < w; ++p) {
    if (e.group.same_host(p)) {
      EXPECT_TRUE(buf.direct_access(p)) << "peer " << p << " shares this host";
    }
    EXPECT_EQ(buf.direct_access(p), buf.ptr(p) != nullptr);
  }
  EXPECT_NE(buf.ptrs_device(), nullptr);
  DeviceHandle h = buf.device_handle();
  EXPECT_EQ(h.rank, r);
  EXPECT_EQ(h.world_size, w);
  EXPECT_EQ(h.size, size_t{1} << 20);
  EXPECT_GE(h.num_channels, 1u);
  EXPECT_GE(h.pad_slots, h.num_channels * static_cast<uint32_t>(w));
  EXPECT_NE(h.buffers, nullptr);
  EXPECT_NE(h.signal_pads, nullptr);
  // The pad is zero at rest.
  std::vector<uint32_t> pad(h.pad_slots, 7);
  SUITE_CUDA(cudaMemcpy(pad.data(), buf.signal_pad(r), pad.size() * 4, cudaMemcpyDeviceToHost));
  EXPECT_EQ(static_cast<size_t>(std::count(pad.begin(), pad.end(), 0u)), pad.size())
      << "pad slots not zero at rest";  // EXPECT: every rank still reaches the store barrier
  // Bad arguments name themselves.
  test::expect_error([&] { (void)buf.ptr(w); }, ErrorCode::InvalidArgument, {"peer"});
  e.group.store_barrier();  // every rank read its resting pad before a barrier flag can land
  buf.barrier();
}

TEST(GpuBackend, PeerWritesAreVisible) {
  auto& e = suite_env();
  const int r = e.group.rank(), w = e.group.world_size();
  const size_t n = 4096;  // floats per slot
  auto buf = allocate(e.group, n * 4 * w, e.device, alloc_opts());
  // Every rank writes slot r of every peer it can reach with its rank's value.
  std::vector<float> mine(n, static_cast<float>(r + 1));
  for (int p = 0; p < w; ++p) {
    if (!buf.direct_access(p)) continue;
    char* dst = static_cast<char*>(buf.ptr(p)) + r * n * 4;
    SUITE_CUDA(cudaMemcpy(dst, mine.data(), n * 4, cudaMemcpyHostToDevice));
  }
  SUITE_CUDA(cudaDeviceSynchronize());
  buf.barrier();
  for (int p = 0; p < w; ++p) {
    if (!buf.direct_access(p) || !e.group.same_host(p)) continue;
    auto got = download(static_cast<char*>(buf.ptr(r)) + p * n * 4, n, DType::f32);
    expect_values(got, std::vector<float>(n, static_cast<float>(p + 1)),
                  "slot written by rank " + std::to_string(p));
  }
  buf.barrier();
}

// ---- signals, barrier, timeouts ----------------------------------------------------------------

TEST(GpuBackend, SignalsOrderData) {
  auto& e = suite_env();
  const int r = e.group.rank(), w = e.group.world_size();
  const int next = (r + 1) % w, prev = (r + w - 1) % w;
  const size_t n = 1024;
  auto buf = allocate(e.group, n * 4, e.device, alloc_opts());
  cudaStream_t s;
  SUITE_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::vector<float> v(n);
  for (int it = 0; it < 20; ++it) {
    // Data into next's buffer, then a signal to it; prev does the same to us.
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(it * 100 + r);
    if (buf.direct_access(next)) {
      SUITE_CUDA(cudaMemcpyAsync(buf.ptr(next), v.data(), n * 4, cudaMemcpyHostToDevice, s));
    } else {
      DeviceBuffer tmp(n * 4);
      SUITE_CUDA(cudaMemcpy(tmp.p, v.data(), n * 4, cudaMemcpyHostToDevice));
      SUITE_CUDA(cudaDeviceSynchronize());
      P2POptions po;
      po.stream = s;
      po.device = e.device;
      put(buf, 0, tmp.p, n * 4, next, po);
      SUITE_CUDA(cudaStreamSynchronize(s));
    }
    buf.put_signal(next, 1, Millis(-1), s);
    buf.wait_signal(prev, 1, Millis(-1), s);
    SUITE_CUDA(cudaStreamSynchronize(s));
    auto got = download(buf.ptr(r), n, DType::f32);
    expect_values(got, std::vector<float>(n, static_cast<float>(it * 100 + prev)),
                  "iteration " + std::to_string(it));
    buf.barrier(0, Millis(-1), s);  // nobody overwrites before everyone read
    SUITE_CUDA(cudaStreamSynchronize(s));
  }
  SUITE_CUDA(cudaStreamDestroy(s));
}

TEST(GpuBackend, BarrierOnEveryChannel) {
  auto& e = suite_env();
  auto buf = allocate(e.group, 4096, e.device, alloc_opts());
  const int channels = std::min(buf.num_channels(), 8);
  for (int it = 0; it < 10; ++it) {
    for (int ch = 0; ch < channels; ++ch) buf.barrier(ch);
  }
  test::expect_error([&] { buf.barrier(buf.num_channels()); }, ErrorCode::InvalidArgument,
                     {"channel"});
}

TEST(GpuBackend, TimeoutsNameRankAndChannel) {
  auto& e = suite_env();
  const int r = e.group.rank();
  auto buf = allocate(e.group, 4096, e.device, alloc_opts());
  if (r == 0) {
    // Nobody signals rank 0 on channel 2: the wait must end with a Timeout naming both.
    const int src = e.group.world_size() - 1;
    test::expect_error([&] { buf.wait_signal(src, 2, Millis(300)); }, ErrorCode::Timeout,
                       {"rank 0", "channel 2"});
    // A second put_signal on an unconsumed slot waits for it to drain: Timeout too.
    buf.put_signal(0, 3, Millis(300));
    test::expect_error([&] { buf.put_signal(0, 3, Millis(300)); }, ErrorCode::Timeout,
                       {"rank 0", "channel 3"});
  }
  e.group.store_barrier();
}

// ---- mismatched allocations -----------------------------------------------------------------

TEST(GpuBackend, MismatchedAllocationsFailOnEveryRank) {
  auto& e = suite_env();
  const int r = e.group.rank();
  if (e.group.world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  // Different sizes (or, equivalently, one rank allocating out of order): every rank gets
  // InvalidArgument from the agreement check before the backend's collective allocation.
  test::expect_error([&] { (void)allocate(e.group, r == 0 ? 4096 : 8192, e.device, alloc_opts()); },
                     ErrorCode::InvalidArgument, {"allocate"});
}

// ---- subgroups ------------------------------------------------------------------------------

TEST(GpuBackend, Subgroup) {
  auto& e = suite_env();
  const int w = e.group.world_size();
  // The full group listed in reverse order: every backend serves it (nvshmem through a team).
  // Group::split orders a subgroup's ranks by the sorted list, so ranks keep their numbers.
  std::vector<int> rev(w);
  for (int i = 0; i < w; ++i) rev[i] = w - 1 - i;
  Group g = e.group.split(rev);
  EXPECT_EQ(g.rank(), e.group.rank());
  EXPECT_EQ(g.global_rank(g.rank()), e.group.global_rank(e.group.rank()));
  {
    auto buf = allocate(g, 1024 * 4, e.device, alloc_opts());
    buf.barrier();
    std::vector<float> v(1024, static_cast<float>(g.rank() + 1));
    upload(buf.ptr(g.rank()), v, DType::f32);
    all_reduce(buf, 1024, DType::f32, ReduceOp::sum, op_opts());
    SUITE_CUDA(cudaDeviceSynchronize());
    expect_values(download(buf.ptr(g.rank()), 1024, DType::f32),
                  std::vector<float>(1024, static_cast<float>(w * (w + 1) / 2)),
                  "all_reduce on the reversed group");
  }
  if (w < 2) return;
  // A proper subset: ranks 0..w-2.
  std::vector<int> first(w - 1);
  std::iota(first.begin(), first.end(), 0);
  if (e.group.rank() == w - 1) {
    e.group.store_barrier();
    return;
  }
  Group sub = e.group.split(first);
  if (e.backend == "nvshmem") {
    test::expect_error([&] { (void)allocate(sub, 4096, e.device, alloc_opts()); },
                       ErrorCode::Unsupported, {"nvshmem_malloc is collective"});
  } else {
    auto buf = allocate(sub, 1024 * 4, e.device, alloc_opts());
    std::vector<float> v(1024, 1.0f);
    upload(buf.ptr(sub.rank()), v, DType::f32);
    all_reduce(buf, 1024, DType::f32, ReduceOp::sum, op_opts());
    SUITE_CUDA(cudaDeviceSynchronize());
    expect_values(download(buf.ptr(sub.rank()), 1024, DType::f32),
                  std::vector<float>(1024, static_cast<float>(w - 1)), "all_reduce on a subset");
  }
  e.group.store_barrier();
}

// ---- ops --------------------------------------------------------------------------------------

// Dtypes that are only moved (issue #23; NOTE [GPU dtypes] in src/cuda/gpu_rules.hpp):
// all_gather, all_to_all and broadcast move their bytes exactly, through the cuda kernels or the
// backend's own transfers (NCCL as ncclUint8, NVSHMEM putmem/fcollectmem); a reduction of one is
// Unsupported naming the ops that take it.
TEST(GpuBackend, MovedOnlyDtypes) {
  auto& e = suite_env();
  const int r = e.group.rank(), w = e.group.world_size();
  auto byte = [](int rank, size_t i, DType t) {
    const unsigned v = static_cast<unsigned>(rank * 131 + i * 7 + 3);
    return static_cast<unsigned char>(t == DType::b8 ? v & 1 : v & 0xff);
  };
  for (DType t : {DType::u8, DType::i8, DType::b8, DType::i16, DType::c64}) {
    for (size_t n : {size_t{5}, size_t{70001}}) {
      const std::string what = std::string(to_string(t)) + " x " + std::to_string(n);
      const size_t es = dtype_size(t), bytes = n * es;
      DeviceBuffer send(bytes * w), recv(bytes * w);
      std::vector<unsigned char> in(bytes * w), want(bytes * w), got(bytes * w);
      // all_gather: rank r's block is byte(r, i).
      for (size_t i = 0; i < bytes; ++i) in[i] = byte(r, i, t);
      for (int p = 0; p < w; ++p)
        for (size_t i = 0; i < bytes; ++i) want[p * bytes + i] = byte(p, i, t);
      SUITE_CUDA(cudaMemcpy(send.p, in.data(), bytes, cudaMemcpyHostToDevice));
      SUITE_CUDA(cudaDeviceSynchronize());
      all_gather(send.p, recv.p, n, t, e.group, op_opts());
      SUITE_CUDA(cudaDeviceSynchronize());
      SUITE_CUDA(cudaMemcpy(got.data(), recv.p, bytes * w, cudaMemcpyDeviceToHost));
      EXPECT_TRUE(got == want) << "all_gather " << what;
      // all_to_all: block p of rank r is byte(r * w + p, i); block q received is from rank q.
      for (int p = 0; p < w; ++p)
        for (size_t i = 0; i < bytes; ++i) {
          in[p * bytes + i] = byte(r * w + p, i, t);
          want[p * bytes + i] = byte(p * w + r, i, t);
        }
      SUITE_CUDA(cudaMemcpy(send.p, in.data(), bytes * w, cudaMemcpyHostToDevice));
      SUITE_CUDA(cudaDeviceSynchronize());
      all_to_all(send.p, recv.p, n, t, e.group, op_opts());
      SUITE_CUDA(cudaDeviceSynchronize());
      SUITE_CUDA(cudaMemcpy(got.data(), recv.p, bytes * w, cudaMemcpyDeviceToHost));
      EXPECT_TRUE(got == want) << "all_to_all " << what;
      // broadcast from the last rank.
      const int root = w - 1;
      for (size_t i = 0; i < bytes; ++i) in[i] = byte(1000 + root, i, t);
      if (r == root) {
        SUITE_CUDA(cudaMemcpy(send.p, in.data(), bytes, cudaMemcpyHostToDevice));
        SUITE_CUDA(cudaDeviceSynchronize());
      }
      broadcast(send.p, recv.p, n, t, root, e.group, op_opts());
      SUITE_CUDA(cudaDeviceSynchronize());
      got.assign(bytes, 0);
      SUITE_CUDA(cudaMemcpy(got.data(), recv.p, bytes, cudaMemcpyDeviceToHost));
      EXPECT_TRUE(std::equal(got.begin(), got.end(), in.begin())) << "broadcast " << what;
    }
  }
  DeviceBuffer x(64 * w), y(64 * w);
  test::expect_error(
      [&] { all_reduce(x.p, y.p, 16, DType::u8, ReduceOp::sum, e.group, op_opts()); },
      ErrorCode::Unsupported, {"all_reduce", "uint8", "all_gather"});
}

class GpuOps : public ::testing::TestWithParam<std::tuple<DType, size_t>> {};

TEST_P(GpuOps, AllReduce) {
  auto& e = suite_env();
  const auto [t, n] = GetParam();
  const int r = e.group.rank(), w = e.group.world_size();
  auto buf = allocate(e.group, n * dtype_size(t), e.device, alloc_opts());
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min}) {
    std::vector<float> in(n), want(n);
    for (size_t i = 0; i < n; ++i) {
      const float k = static_cast<float>(i % 5 + 1);
      in[i] = static_cast<float>(r + 1) * k;
      const float sum = static_cast<float>(w * (w + 1) / 2) * k;
      want[i] = op == ReduceOp::sum   ? sum
                : op == ReduceOp::avg ? sum / static_cast<float>(w)
                : op == ReduceOp::max ? static_cast<float>(w) * k
                                      : k;
    }
    if (op == ReduceOp::avg && t == DType::bf16) {  // compare at bf16 precision
      for (float& x : want) x = from_bf16(to_bf16(x));
    }
    upload(buf.ptr(r), in, t);
    all_reduce(buf, n, t, op, op_opts());  // symmetric, in place
    SUITE_CUDA(cudaDeviceSynchronize());
    expect_values(download(buf.ptr(r), n, t), want,
                  std::string("all_reduce ") + to_string(op) + " (symmetric)");
    // Pointer form on ordinary memory.
    DeviceBuffer src(n * dtype_size(t)), dst(n * dtype_size(t));
    upload(src.p, in, t);
    all_reduce(src.p, dst.p, n, t, op, e.group, op_opts());
    SUITE_CUDA(cudaDeviceSynchronize());
    expect_values(download(dst.p, n, t), want,
                  std::string("all_reduce ") + to_string(op) + " (ordinary memory)");
  }
}

TEST_P(GpuOps, ReduceScatterAndAllGather) {
  auto& e = suite_env();
  const auto [t, n] = GetParam();
  const int r = e.group.rank(), w = e.group.world_size();
  const size_t es = dtype_size(t);
  DeviceBuffer send(n * w * es), recv(n * es), gathered(n * w * es);
  std::vector<float> in(n * w), want(n);
  for (size_t j = 0; j < n * w; ++j) in[j] = static_cast<float>((r + 1) * (j % 3 + 1));
  for (size_t i = 0; i < n; ++i) {
    want[i] = static_cast<float>(w * (w + 1) / 2 * ((r * n + i) % 3 + 1));
  }
  upload(send.p, in, t);
  reduce_scatter(send.p, recv.p, n, t, ReduceOp::sum, e.group, op_opts());
  SUITE_CUDA(cudaDeviceSynchronize());
  expect_values(download(recv.p, n, t), want, "reduce_scatter sum");

  std::vector<float> mine(n), all(n * w);
  for (size_t i = 0; i < n; ++i) mine[i] = static_cast<float>(r * 8 + i % 8);
  for (int p = 0; p < w; ++p) {
    for (size_t i = 0; i < n; ++i) all[p * n + i] = static_cast<float>(p * 8 + i % 8);
  }
  upload(recv.p, mine, t);
  all_gather(recv.p, gathered.p, n, t, e.group, op_opts());
  SUITE_CUDA(cudaDeviceSynchronize());
  expect_values(download(gathered.p, n * w, t), all, "all_gather");
}

TEST_P(GpuOps, AllToAllAndBroadcast) {
  auto& e = suite_env();
  const auto [t, n] = GetParam();
  const int r = e.group.rank(), w = e.group.world_size();
  const size_t es = dtype_size(t);
  DeviceBuffer send(n * w * es), recv(n * w * es);
  std::vector<float> in(n * w), want(n * w);
  for (int p = 0; p < w; ++p) {
    for (size_t i = 0; i < n; ++i) {
      in[p * n + i] = static_cast<float>(r * 16 + p * 4 + i % 4);    // to peer p
      want[p * n + i] = static_cast<float>(p * 16 + r * 4 + i % 4);  // from peer p
    }
  }
  upload(send.p, in, t);
  all_to_all(send.p, recv.p, n, t, e.group, op_opts());
  SUITE_CUDA(cudaDeviceSynchronize());
  expect_values(download(recv.p, n * w, t), want, "all_to_all");

  const int root = w - 1;
  std::vector<float> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<float>(i % 11 + 1);
  if (r == root) upload(send.p, b, t);
  broadcast(send.p, recv.p, n, t, root, e.group, op_opts());
  SUITE_CUDA(cudaDeviceSynchronize());
  expect_values(download(recv.p, n, t), b, "broadcast from rank " + std::to_string(root));
}

TEST_P(GpuOps, AllToAllV) {
  auto& e = suite_env();
  const auto [t, n] = GetParam();
  const int r = e.group.rank(), w = e.group.world_size();
  const size_t es = dtype_size(t);
  const size_t unit = std::max<size_t>(n / 4, 1);
  auto count = [&](int src, int dst) { return static_cast<int64_t>(((src + dst) % 3 + 1) * unit); };
  std::vector<int64_t> send_counts(w);
  std::vector<float> in;
  for (int p = 0; p < w; ++p) {
    send_counts[p] = count(r, p);
    for (int64_t i = 0; i < send_counts[p]; ++i)
      in.push_back(static_cast<float>(r * 8 + p + i % 2));
  }
  std::vector<float> want;
  std::vector<int64_t> want_counts(w), want_offsets(w);
  for (int p = 0; p < w; ++p) {
    want_counts[p] = count(p, r);
    want_offsets[p] = static_cast<int64_t>(want.size());
    for (int64_t i = 0; i < want_counts[p]; ++i)
      want.push_back(static_cast<float>(p * 8 + r + i % 2));
  }
  const size_t capacity = 3 * unit * w + 16;
  DeviceBuffer send(in.size() * es), recv(capacity * es), d_send_counts(w * 8),
      d_recv_counts(w * 8), d_recv_offsets(w * 8);
  upload(send.p, in, t);
  SUITE_CUDA(cudaMemcpy(d_send_counts.p, send_counts.data(), w * 8, cudaMemcpyHostToDevice));
  SUITE_CUDA(cudaDeviceSynchronize());
  all_to_all_v(send.p, static_cast<const int64_t*>(d_send_counts.p), recv.p,
               static_cast<int64_t*>(d_recv_counts.p), static_cast<int64_t*>(d_recv_offsets.p),
               capacity, t, e.group, AllToAllVOptions{op_opts()});
  SUITE_CUDA(cudaDeviceSynchronize());
  std::vector<int64_t> got_counts(w), got_offsets(w);
  SUITE_CUDA(cudaMemcpy(got_counts.data(), d_recv_counts.p, w * 8, cudaMemcpyDeviceToHost));
  SUITE_CUDA(cudaMemcpy(got_offsets.data(), d_recv_offsets.p, w * 8, cudaMemcpyDeviceToHost));
  EXPECT_EQ(got_counts, want_counts);
  EXPECT_EQ(got_offsets, want_offsets);
  expect_values(download(recv.p, want.size(), t), want, "all_to_all_v data");
}

TEST_P(GpuOps, PutGetWithSignal) {
  auto& e = suite_env();
  const auto [t, n] = GetParam();
  const int r = e.group.rank(), w = e.group.world_size();
  const int next = (r + 1) % w, prev = (r + w - 1) % w;
  const size_t bytes = n * dtype_size(t);
  auto buf = allocate(e.group, bytes * w, e.device, alloc_opts());
  DeviceBuffer local(bytes), back(bytes);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(r * 4 + i % 4);
  upload(local.p, v, t);
  P2POptions po;
  po.device = e.device;
  po.signal = true;
  po.channel = 1;
  put(buf, r * bytes, local.p, bytes, next, po);  // into next's slot r, then its signal
  buf.wait_signal(prev, 1);
  std::vector<float> want(n);
  for (size_t i = 0; i < n; ++i) want[i] = static_cast<float>(prev * 4 + i % 4);
  expect_values(download(static_cast<char*>(buf.ptr(r)) + prev * bytes, n, t), want,
                "put from rank " + std::to_string(prev));
  buf.barrier();
  // get: read next's slot r (what we put there) back.
  P2POptions go;
  go.device = e.device;
  get(buf, r * bytes, back.p, bytes, next, go);
  SUITE_CUDA(cudaDeviceSynchronize());
  expect_values(download(back.p, n, t), v, "get from rank " + std::to_string(next));
  buf.barrier();
  for (int i = 0; i < 5; ++i) barrier(e.group, op_opts());
}

inline std::string ops_param_name(const ::testing::TestParamInfo<GpuOps::ParamType>& info) {
  return std::string(to_string(std::get<0>(info.param))) + "_" +
         std::to_string(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Sizes, GpuOps,
                         ::testing::Combine(::testing::Values(DType::f32, DType::bf16),
                                            ::testing::Values(size_t{1000}, size_t{1} << 18)),
                         ops_param_name);

}  // namespace symmem::gputest
