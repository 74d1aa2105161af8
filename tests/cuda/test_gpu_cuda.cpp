// GPU tests of the cuda backend, run by every rank under symmem-run (ctest label gpu), with
// SYMMEM_BACKEND=cuda. Each rank uses GPU local_rank % device_count; several ranks on one GPU
// need SYMMEM_ALLOW_SHARED_GPU=1 (and MPS for concurrency, see scripts/gpu-check.sh).
// Without a GPU every rank exits 77 (skipped) with the reason.

#include <cuda_runtime_api.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "gpu_kernels.hpp"
#include "gpu_test_main.hpp"
#include "gpu_test_util.hpp"
#include "symmem/symmem.hpp"
#include "test_util.hpp"

namespace symmem::test {
namespace {

Group g_group;
int g_device = 0;

#define CUDART_OK(call)                                                                        \
  do {                                                                                         \
    const cudaError_t cudart_ok_e_ = (call);                                                   \
    ASSERT_EQ(cudart_ok_e_, cudaSuccess) << #call << ": " << cudaGetErrorString(cudart_ok_e_); \
  } while (0)

SymmetricMemory alloc_on(const Group& g, size_t bytes) {
  AllocOptions opt;
  opt.backend = "cuda";
  return allocate(g, bytes, Device::cuda(g_device), opt);
}

struct DeviceInt {
  int* p = nullptr;
  DeviceInt() {
    cudaMalloc(reinterpret_cast<void**>(&p), sizeof(int));
    cudaMemset(p, 0, sizeof(int));
    cudaDeviceSynchronize();  // the memset must not land after a kernel on a non-blocking stream
  }
  ~DeviceInt() { cudaFree(p); }
  int get() const {
    int v = -1;
    cudaMemcpy(&v, p, sizeof(int), cudaMemcpyDeviceToHost);
    return v;
  }
};

TEST(CudaBackend, AllocationBasics) {
  auto buf = alloc_on(g_group, 3 * 4096 + 12);
  EXPECT_EQ(buf.backend(), "cuda");
  EXPECT_EQ(buf.world_size(), g_group.world_size());
  EXPECT_EQ(buf.size(), 3u * 4096 + 12);
  EXPECT_TRUE(buf.device() == Device::cuda(g_device));
  for (int p = 0; p < buf.world_size(); ++p) {
    EXPECT_NE(buf.ptr(p), nullptr) << "peer " << p;
    EXPECT_NE(buf.signal_pad(p), nullptr) << "peer " << p;
    EXPECT_TRUE(buf.direct_access(p));
  }
  EXPECT_NE(buf.ptrs_device(), nullptr);
  // Pads are zero at rest.
  std::vector<uint32_t> pad(buf.signal_pad_bytes() / 4, 7);
  CUDART_OK(
      cudaMemcpy(pad.data(), buf.signal_pad(buf.rank()), pad.size() * 4, cudaMemcpyDeviceToHost));
  EXPECT_EQ(std::count(pad.begin(), pad.end(), 0u), static_cast<long>(pad.size()));
  DeviceHandle h = buf.device_handle();
  EXPECT_EQ(h.rank, g_group.rank());
  EXPECT_EQ(h.world_size, g_group.world_size());
  EXPECT_GE(h.num_channels, 1u);
  EXPECT_NE(h.timeout_record, nullptr);
  // Every rank has read its resting pad before any barrier flag can land in it.
  g_group.store_barrier();
  buf.barrier();
}

// Every rank copies (cudaMemcpy through ptr(peer)) its pattern into its chunk of every peer's
// buffer; after a barrier each rank finds every peer's pattern in its own buffer.
TEST(CudaBackend, PeerWritesVisibleToEveryPeer) {
  const int world = g_group.world_size(), rank = g_group.rank();
  const size_t chunk = (1 << 20) + 4;  // uint32 per rank, odd size on purpose
  auto buf = alloc_on(g_group, chunk * 4 * world);
  Stream s;
  std::vector<uint32_t> mine(chunk);
  for (size_t i = 0; i < chunk; ++i) mine[i] = static_cast<uint32_t>(rank * 1000003u + i);
  for (int p = 0; p < world; ++p) {
    auto* dst = static_cast<uint32_t*>(buf.ptr(p)) + rank * chunk;
    CUDART_OK(cudaMemcpyAsync(dst, mine.data(), chunk * 4, cudaMemcpyHostToDevice, s.get()));
  }
  buf.barrier(0, Millis(-1), s);
  std::vector<uint32_t> got(chunk * world);
  CUDART_OK(
      cudaMemcpyAsync(got.data(), buf.ptr(rank), got.size() * 4, cudaMemcpyDeviceToHost, s.get()));
  CUDART_OK(cudaStreamSynchronize(s.get()));
  for (int src = 0; src < world; ++src) {
    size_t wrong = 0;
    for (size_t i = 0; i < chunk; ++i) {
      wrong += got[src * chunk + i] != static_cast<uint32_t>(src * 1000003u + i);
    }
    EXPECT_EQ(wrong, 0u) << "words from rank " << src << " wrong in rank " << rank << "'s buffer";
  }
  buf.barrier(1);  // nobody frees while a peer still reads
}

// A user-style kernel (device API only) pushes into every peer and barriers, many rounds, at
// block, warp and thread scope.
TEST(CudaBackend, DeviceBarrierRoundsAllScopes) {
  const int world = g_group.world_size();
  const size_t slot_vecs = 64;
  auto buf = alloc_on(g_group, slot_vecs * 16 * world);
  const int channels = std::min<int>(buf.num_channels(), 8);
  Stream s;
  for (Scope scope : {Scope::block, Scope::warp, Scope::thread}) {
    DeviceInt errors;
    CUDART_OK(launch_push_barrier_check(buf.device_handle(), scope, 200, channels, slot_vecs,
                                        errors.p, s.get()));
    CUDART_OK(cudaStreamSynchronize(s.get()));
    EXPECT_EQ(errors.get(), 0) << "scope " << static_cast<int>(scope)
                               << " (>= 1000000: a device-side timeout)";
  }
  buf.barrier();  // raises a recorded timeout, if any
}

TEST(CudaBackend, DeviceSignalRingManyRoundsAndChannels) {
  auto buf = alloc_on(g_group, 4096);
  const int pairs = std::max(1, std::min<int>(buf.num_channels() / 2, 16));
  Stream s;
  for (Scope scope : {Scope::block, Scope::warp, Scope::thread}) {
    DeviceInt errors;
    CUDART_OK(launch_signal_ring(buf.device_handle(), scope, 300, pairs, errors.p, s.get()));
    CUDART_OK(cudaStreamSynchronize(s.get()));
    EXPECT_EQ(errors.get(), 0) << "scope " << static_cast<int>(scope);
  }
  buf.barrier();
}

// Host API: put_signal/wait_signal on a stream over many rounds and channels, data carried by
// cudaMemcpyAsync on the same stream and acknowledged on a second channel.
TEST(CudaBackend, HostSignalsManyRoundsAndChannels) {
  const int world = g_group.world_size(), rank = g_group.rank();
  const int next = (rank + 1) % world, prev = (rank + world - 1) % world;
  auto buf = alloc_on(g_group, 256);
  const int pairs = std::max(1, std::min<int>(buf.num_channels() / 2, 8));
  Stream s;
  uint32_t* host = nullptr;
  CUDART_OK(cudaMallocHost(reinterpret_cast<void**>(&host), 2 * sizeof(uint32_t)));
  int wrong = 0;
  for (int round = 1; round <= 60; ++round) {
    const int c = round % pairs;
    host[0] = static_cast<uint32_t>(round * 256 + rank);
    CUDART_OK(cudaMemcpyAsync(buf.ptr(next), &host[0], 4, cudaMemcpyHostToDevice, s.get()));
    buf.put_signal(next, 2 * c, Millis(-1), s);
    buf.wait_signal(prev, 2 * c, Millis(-1), s);
    CUDART_OK(cudaMemcpyAsync(&host[1], buf.ptr(rank), 4, cudaMemcpyDeviceToHost, s.get()));
    buf.put_signal(prev, 2 * c + 1, Millis(-1), s);
    buf.wait_signal(next, 2 * c + 1, Millis(-1), s);
    CUDART_OK(cudaStreamSynchronize(s.get()));
    wrong += host[1] != static_cast<uint32_t>(round * 256 + prev);
  }
  EXPECT_EQ(wrong, 0);
  cudaFreeHost(host);
  buf.barrier();
}

TEST(CudaBackend, HostBarrierRounds) {
  auto buf = alloc_on(g_group, 4096);
  Stream s;
  for (int round = 0; round < 300; ++round) {
    buf.barrier(round % buf.num_channels(), Millis(-1), s);
  }
  CUDART_OK(cudaStreamSynchronize(s.get()));
  for (int round = 0; round < 20; ++round) buf.barrier(round % buf.num_channels());  // null stream
}

TEST(CudaBackend, BarrierInCudaGraph) {
  auto buf = alloc_on(g_group, 4096);
  const int world = g_group.world_size(), rank = g_group.rank();
  Stream s;
  buf.barrier(0, Millis(-1), s);  // warm-up outside capture
  cudaGraph_t graph = nullptr;
  CUDART_OK(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeGlobal));
  buf.barrier(1, Millis(-1), s);
  buf.put_signal((rank + 1) % world, 2, Millis(-1), s);
  buf.wait_signal((rank + world - 1) % world, 2, Millis(-1), s);
  buf.barrier(3, Millis(-1), s);
  CUDART_OK(cudaStreamEndCapture(s.get(), &graph));
  cudaGraphExec_t exec = nullptr;
  CUDART_OK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 50; ++i) CUDART_OK(cudaGraphLaunch(exec, s.get()));
  CUDART_OK(cudaStreamSynchronize(s.get()));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  buf.barrier();  // raises a timeout recorded during the replays, if any
}

// A view has its own pointer table: device writes through the view land at the offset.
TEST(CudaBackend, ViewsHaveOffsetTables) {
  const int world = g_group.world_size(), rank = g_group.rank();
  const size_t slot_vecs = 16, view_bytes = slot_vecs * 16 * world, offset = 8192;
  auto buf = alloc_on(g_group, offset + view_bytes + 4096);
  Stream s;
  CUDART_OK(cudaMemsetAsync(buf.ptr(rank), 0xff, buf.size(), s.get()));
  buf.barrier(0, Millis(-1), s);
  auto v = buf.view(offset, view_bytes);
  DeviceHandle hv = v.device_handle();
  EXPECT_EQ(hv.size, view_bytes);
  DeviceInt errors;
  CUDART_OK(launch_push_barrier_check(hv, Scope::block, 3, 2, slot_vecs, errors.p, s.get()));
  CUDART_OK(cudaStreamSynchronize(s.get()));
  EXPECT_EQ(errors.get(), 0);
  EXPECT_EQ(static_cast<char*>(v.ptr(rank)), static_cast<char*>(buf.ptr(rank)) + offset);
  // Bytes before the view are untouched.
  std::vector<unsigned char> head(offset);
  CUDART_OK(cudaMemcpy(head.data(), buf.ptr(rank), offset, cudaMemcpyDeviceToHost));
  EXPECT_EQ(std::count(head.begin(), head.end(), 0xff), static_cast<long>(offset));
  // The same view asked twice gives the same table (cached).
  EXPECT_EQ(buf.view(offset, view_bytes).device_handle().buffers, hv.buffers);
  buf.barrier();
}

TEST(CudaBackend, SubgroupWorks) {
  const int world = g_group.world_size(), rank = g_group.rank();
  std::vector<int> members;
  for (int r = rank % 2; r < world; r += 2) members.push_back(r);  // evens and odds
  Group sub = g_group.split(members);
  ASSERT_EQ(sub.world_size(), static_cast<int>(members.size()));
  auto buf = alloc_on(sub, 64 * 16 * sub.world_size());
  EXPECT_EQ(buf.world_size(), sub.world_size());
  Stream s;
  DeviceInt errors;
  CUDART_OK(launch_push_barrier_check(buf.device_handle(), Scope::block, 50,
                                      std::min(4, buf.num_channels()), 64, errors.p, s.get()));
  CUDART_OK(cudaStreamSynchronize(s.get()));
  EXPECT_EQ(errors.get(), 0);
  buf.barrier();
  buf.free();
  g_group.store_barrier();
}

TEST(CudaBackend, AllocateFreeCyclesLeakNothing) {
  const size_t bytes = 48u << 20;
  {
    auto warm = alloc_on(g_group, bytes);
    (void)warm.view(4096, 4096 * 2).device_handle();  // the runtime's small-allocation pool
    warm.barrier();
    warm.free();
  }
  g_group.store_barrier();
  size_t free0 = 0, total = 0;
  CUDART_OK(cudaMemGetInfo(&free0, &total));
  g_group.store_barrier();
  for (int i = 0; i < 20; ++i) {
    auto buf = alloc_on(g_group, bytes + i * 4096);
    DeviceHandle h = buf.view(4096, 4096 * 2).device_handle();  // a view table too
    (void)h;
    buf.barrier();
    buf.free();
  }
  g_group.store_barrier();
  size_t free1 = 0;
  CUDART_OK(cudaMemGetInfo(&free1, &total));
  g_group.store_barrier();
  const long long diff = static_cast<long long>(free0) - static_cast<long long>(free1);
  // One leaked cycle would be >= 48 MiB * world on this GPU; allow the runtimes' small pools.
  EXPECT_LE(diff, 16ll << 20) << "device free memory went from " << free0 << " to " << free1
                              << " over 20 allocate/free cycles of " << bytes << " bytes";
}

TEST(CudaBackend, TimeoutNamesRankAndChannel) {
  const int world = g_group.world_size(), rank = g_group.rank();
  auto buf = alloc_on(g_group, 4096);
  const int channel = std::min(3, buf.num_channels() - 1);
  const int src = world > 1 ? 1 : 0;
  if (rank == 0) {
    // Synchronous (null stream): raised by the call itself.
    expect_error([&] { buf.wait_signal(src, channel, Millis(300)); }, ErrorCode::Timeout,
                 {"rank 0", ("channel " + std::to_string(channel)).c_str(),
                  ("for rank " + std::to_string(src)).c_str()});
    // Asynchronous: the kernel returns, the next symmem call raises.
    Stream s;
    buf.wait_signal(src, channel, Millis(300), s);
    CUDART_OK(cudaStreamSynchronize(s.get()));
    expect_error([&] { buf.put_signal(0, 0, Millis(-1), s); }, ErrorCode::Timeout,
                 {"rank 0", ("channel " + std::to_string(channel)).c_str()});
    CUDART_OK(cudaStreamSynchronize(s.get()));
  }
  g_group.store_barrier();
  // Still usable: pads are clean (nobody signalled the channel that timed out).
  buf.barrier();
  buf.barrier(channel);
}

// issue #17: a GPU barrier that times out raises Timeout naming rank, channel and peer (null
// stream: at the call; explicit stream: at the next symmem call), and the process stays usable.
TEST(CudaBackend, BarrierTimeoutRaisesAndProcessStaysUsable) {
  const int world = g_group.world_size(), rank = g_group.rank();
  if (world < 2) GTEST_SKIP() << "needs 2 ranks (rank 1 skips the barrier)";
  std::vector<int> all(world);
  std::iota(all.begin(), all.end(), 0);
  size_t free0 = 0, free1 = 0, total = 0;
  {
    Group fresh = g_group.split(all);
    auto buf = alloc_on(fresh, 4096);
    const int channel = std::min(3, buf.num_channels() - 1);
    const std::string ch = "channel " + std::to_string(channel);
    CUDART_OK(cudaDeviceSynchronize());
    CUDART_OK(cudaMemGetInfo(&free0, &total));
    if (rank == 0) {
      const auto t0 = std::chrono::steady_clock::now();
      expect_error([&] { buf.barrier(channel, Millis(1000)); }, ErrorCode::Timeout,
                   {"barrier: rank 0", ch.c_str(), "for rank 1"});
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      EXPECT_GE(secs, 0.9);
      EXPECT_LT(secs, 20.0);
      // Explicit stream: the call returns; the kernel leaves at its deadline (the slot of rank
      // 1 still holds the first barrier's signal, so its put_signal waits); the next call
      // raises.
      Stream s;
      buf.barrier(channel, Millis(1000), s);
      CUDART_OK(cudaStreamSynchronize(s.get()));
      expect_error([&] { buf.put_signal(0, 0, Millis(-1), s); }, ErrorCode::Timeout,
                   {"rank 0", ch.c_str(), "for rank 1"});
      CUDART_OK(cudaStreamSynchronize(s.get()));
      CUDART_OK(cudaGetLastError());  // no sticky error: the kernels returned, none trapped
    }
    fresh.store_barrier();
    buf.free();
    CUDART_OK(cudaDeviceSynchronize());
  }
  // A new group and allocation work on every rank: a barrier and an all-reduce.
  Group next = g_group.split(all);
  auto buf = alloc_on(next, 4096);
  buf.barrier(3 % buf.num_channels());
  std::vector<float> ones(1024, 1.0f), got(1024, 0.0f);
  auto* p = static_cast<float*>(buf.ptr(next.rank()));
  CUDART_OK(cudaMemcpy(p, ones.data(), 4096, cudaMemcpyHostToDevice));
  OpOptions o;
  o.device = Device::cuda(g_device);
  all_reduce(p, p, 1024, DType::f32, ReduceOp::sum, next, o);
  CUDART_OK(cudaDeviceSynchronize());
  CUDART_OK(cudaMemcpy(got.data(), p, 4096, cudaMemcpyDeviceToHost));
  EXPECT_EQ(got[0], static_cast<float>(world));
  EXPECT_EQ(got[1023], static_cast<float>(world));
  buf.free();
  CUDART_OK(cudaDeviceSynchronize());
  CUDART_OK(cudaMemGetInfo(&free1, &total));
  // The timed-out kernels left nothing behind (the new group's workspace is the one addition).
  EXPECT_LE(static_cast<long long>(free0) - static_cast<long long>(free1), 64ll << 20);
  next.store_barrier();
}

// issue #22: a GPU barrier on the null stream that waits longer than SYMMEM_WAIT_REPORT_S logs
// the host waits' WARN line naming the peer. Run by gpu_cuda_wait_report_np2 with
// SYMMEM_WAIT_REPORT_S=2 and SYMMEM_DEBUG_FILE=/tmp/symmem-gpu-wait-report-%p.log.
TEST(CudaWaitReport, GpuBarrierNamesTheMissingPeer) {
  const int world = g_group.world_size(), rank = g_group.rank();
  const char* every = std::getenv("SYMMEM_WAIT_REPORT_S");
  const char* file = std::getenv("SYMMEM_DEBUG_FILE");
  if (every == nullptr || std::string(every) != "2" || file == nullptr ||
      std::string(file).find("%p") == std::string::npos) {
    GTEST_SKIP() << "run by gpu_cuda_wait_report_np2 (SYMMEM_WAIT_REPORT_S=2, SYMMEM_DEBUG_FILE "
                    "with %p)";
  }
  if (world < 2) GTEST_SKIP() << "needs 2 ranks";
  std::vector<int> all(world);
  std::iota(all.begin(), all.end(), 0);
  Group fresh = g_group.split(all);
  auto buf = alloc_on(fresh, 4096);
  const int channel = std::min(2, buf.num_channels() - 1);
  if (rank == 0) {
    expect_error([&] { buf.barrier(channel, Millis(5000)); }, ErrorCode::Timeout,
                 {"rank 0", "for rank 1"});
    std::string path(file);
    path.replace(path.find("%p"), 2, std::to_string(getpid()));
    std::FILE* f = std::fopen(path.c_str(), "r");
    ASSERT_NE(f, nullptr) << path;
    std::vector<std::string> lines;
    char line[4096];
    while (std::fgets(line, sizeof(line), f) != nullptr) {
      std::string l(line);
      if (l.find(" symmem WARN GPU barrier (GPU, channel " + std::to_string(channel) + ")") !=
          std::string::npos) {
        lines.push_back(l);
      }
    }
    std::fclose(f);
    ASSERT_GE(lines.size(), 2u) << "expected wait reports at 2 s and 4 s in " << path;
    for (const auto& l : lines) {
      EXPECT_NE(l.find("rank 0 has waited "), std::string::npos) << l;
      EXPECT_NE(l.find(" for rank 1; "), std::string::npos) << l;
      EXPECT_NE(l.find(" left of the 5.0 s timeout"), std::string::npos) << l;
    }
  }
  fresh.store_barrier();
}

TEST(CudaBackend, MismatchedSizesCaught) {
  const int world = g_group.world_size(), rank = g_group.rank();
  if (world < 2) GTEST_SKIP() << "needs 2 or more ranks";
  expect_error([&] { alloc_on(g_group, 4096 * (rank + 1)); }, ErrorCode::InvalidArgument, {"rank"});
  g_group.store_barrier();
  auto ok = alloc_on(g_group, 4096);  // the group is still usable
  ok.barrier();
}

}  // namespace
}  // namespace symmem::test

int main(int argc, char** argv) {
  return symmem::test::gpu_test_main(argc, argv, symmem::test::g_group, symmem::test::g_device);
}
