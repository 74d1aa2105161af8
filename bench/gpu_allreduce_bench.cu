// Times symmem::all_reduce on GPU buffers with CUDA events, eager and CUDA-graph captured, the
// way bench/torch_compare.py times torch's symmetric-memory all-reduces: in place on a
// symmetric buffer (zero copy), median GPU time per call over several repeats. Every rank runs
// it under symmem-run; rank 0 prints one JSON object per line:
//   {"impl":"symmem","algo":"auto","mode":"eager","world":4,"bytes":4096,"dtype":"bf16",
//    "us":12.3,"correct":true}
// Before timing each (size, algo) it checks the result once (every rank contributes rank+1, so
// the sum is world*(world+1)/2, exact in bf16 for the world sizes used). Exits 1 when a check
// fails. Baseline rows first: launch_baseline (host cost of a bare launch), flag_floor (a graph
// of one-flag-round-trip kernels: the floor of a small collective, per polling load) and, with a
// size >= 16 MiB, copy_baseline.
//
// usage: gpu_allreduce_bench [--sizes B,B,...] [--dtype bf16|f16|f32] [--algos
// auto,one_shot,two_shot]
//                            [--modes eager,graph] [--iters N] [--repeats N] [--pointer]
//   --pointer: use the pointer form with ordinary (cudaMalloc) send/recv instead (staged copies).

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "bench_cuda.hpp"
#include "symmem/symmem.hpp"

namespace {

using symmem::bench::split;

__global__ void empty_kernel() {}

// The floor of a small collective in a graph (issue #19): one launch that does one flag round
// trip with every peer and nothing else. Thread p stores this launch's epoch into slot `rank` of
// peer p's flags (a release store at system scope) and polls slot p of its own until peer p's
// epoch arrives: ld.volatile (what the LL kernels poll with) or ld.acquire.sys. The epoch is a
// per-rank device counter, so a graph replays the same launch.
template <bool kAcquire>
__global__ void flag_round_trip_kernel(uint64_t* const* peers, int rank, int world,
                                       uint64_t* epoch) {
  const uint64_t e = *epoch + 1;
  const int p = static_cast<int>(threadIdx.x);
  if (p < world) {
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(peers[p] + rank), "l"(e) : "memory");
    const uint64_t* mine = peers[rank] + p;
    uint64_t v = 0;
    do {
      if constexpr (kAcquire) {
        asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(mine) : "memory");
      } else {
        asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(v) : "l"(mine) : "memory");
      }
    } while (v < e);
  }
  __syncthreads();
  if (threadIdx.x == 0) *epoch = e;
}

struct Options {
  std::vector<size_t> sizes = {4096,     16384,    65536,     262144,
                               1u << 20, 4u << 20, 16u << 20, 64u << 20};
  symmem::DType dtype = symmem::DType::bf16;
  std::vector<symmem::Algo> algos = {symmem::Algo::automatic, symmem::Algo::one_shot,
                                     symmem::Algo::two_shot};
  std::vector<std::string> modes = {"eager", "graph"};
  int iters = 20;
  int repeats = 5;
  bool pointer = false;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--sizes") {
      o.sizes.clear();
      for (auto& s : split(next())) o.sizes.push_back(std::stoull(s));
    } else if (a == "--dtype") {
      o.dtype = symmem::parse_dtype(next());
    } else if (a == "--algos") {
      o.algos.clear();
      for (auto& s : split(next())) o.algos.push_back(symmem::parse_algo(s));
    } else if (a == "--modes") {
      o.modes = split(next());
    } else if (a == "--iters") {
      o.iters = std::stoi(next());
    } else if (a == "--repeats") {
      o.repeats = std::stoi(next());
    } else if (a == "--pointer") {
      o.pointer = true;
    } else {
      std::fprintf(stderr, "unknown argument %s (see the comment at the top of %s)\n", a.c_str(),
                   __FILE__);
      std::exit(2);
    }
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    std::fprintf(stderr, "no GPU\n");
    return 77;
  }
  try {
    symmem::Group g = symmem::Group::from_env();
    const int rank = g.rank(), world = g.world_size();
    const int dev = g.local_rank() % ndev;
    BENCH_CUDA(cudaSetDevice(dev));
    const size_t es = symmem::dtype_size(o.dtype);
    const size_t max_bytes = *std::max_element(o.sizes.begin(), o.sizes.end());
    symmem::AllocOptions ao;
    ao.backend = "cuda";
    auto buf = symmem::allocate(g, max_bytes, symmem::Device::cuda(dev), ao);
    void* send = nullptr;
    void* recv = nullptr;
    if (o.pointer) {
      BENCH_CUDA(cudaMalloc(&send, max_bytes));
      BENCH_CUDA(cudaMalloc(&recv, max_bytes));
    }
    cudaStream_t s;
    BENCH_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t e0, e1;
    BENCH_CUDA(cudaEventCreate(&e0));
    BENCH_CUDA(cudaEventCreate(&e1));
    {
      // Baseline: the host cost of one bare kernel launch on this stream in this setting (MPS
      // adds to it), to read host_us of the eager rows against.
      for (int i = 0; i < 100; ++i) empty_kernel<<<1, 32, 0, s>>>();
      BENCH_CUDA(cudaStreamSynchronize(s));
      const int n = 1000;
      const auto h0 = std::chrono::steady_clock::now();
      for (int i = 0; i < n; ++i) empty_kernel<<<1, 32, 0, s>>>();
      const double host_us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - h0).count() /
          n;
      BENCH_CUDA(cudaStreamSynchronize(s));
      if (rank == 0) {
        std::printf("{\"impl\":\"launch_baseline\",\"world\":%d,\"host_us\":%.3f}\n", world,
                    host_us);
      }
    }
    {
      // The floor of a small graph-launched collective: a graph of --iters launches of one
      // flag round trip with every peer (flag_round_trip_kernel), median us per launch, for
      // each polling load. The LL rows' graph times read against it.
      auto flags = symmem::allocate(g, 64 * sizeof(uint64_t), symmem::Device::cuda(dev), ao);
      std::vector<uint64_t*> ptrs(world);
      for (int p = 0; p < world; ++p) ptrs[p] = static_cast<uint64_t*>(flags.ptr(p));
      uint64_t** dptrs = nullptr;
      uint64_t* epoch = nullptr;
      BENCH_CUDA(cudaMalloc(&dptrs, sizeof(uint64_t*) * world));
      BENCH_CUDA(cudaMalloc(&epoch, sizeof(uint64_t)));
      BENCH_CUDA(cudaMemset(epoch, 0, sizeof(uint64_t)));
      BENCH_CUDA(cudaMemset(flags.ptr(rank), 0, 64 * sizeof(uint64_t)));
      BENCH_CUDA(cudaMemcpy(dptrs, ptrs.data(), sizeof(uint64_t*) * world, cudaMemcpyHostToDevice));
      BENCH_CUDA(cudaDeviceSynchronize());
      symmem::OpOptions bo;
      bo.stream = s;
      bo.device = symmem::Device::cuda(dev);
      symmem::barrier(g, bo);
      for (const bool acquire : {false, true}) {
        auto launch = [&] {
          if (acquire) {
            flag_round_trip_kernel<true><<<1, 32, 0, s>>>(dptrs, rank, world, epoch);
          } else {
            flag_round_trip_kernel<false><<<1, 32, 0, s>>>(dptrs, rank, world, epoch);
          }
        };
        for (int i = 0; i < 10; ++i) launch();
        cudaGraph_t graph = nullptr;
        cudaGraphExec_t exec = nullptr;
        BENCH_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        for (int i = 0; i < o.iters; ++i) launch();
        BENCH_CUDA(cudaStreamEndCapture(s, &graph));
        BENCH_CUDA(cudaGraphInstantiate(&exec, graph, 0));
        BENCH_CUDA(cudaGraphLaunch(exec, s));
        std::vector<double> t;
        for (int rep = 0; rep < o.repeats; ++rep) {
          symmem::barrier(g, bo);
          BENCH_CUDA(cudaEventRecord(e0, s));
          BENCH_CUDA(cudaGraphLaunch(exec, s));
          BENCH_CUDA(cudaEventRecord(e1, s));
          BENCH_CUDA(cudaStreamSynchronize(s));
          float ms = 0;
          BENCH_CUDA(cudaEventElapsedTime(&ms, e0, e1));
          t.push_back(1000.0 * ms / o.iters);
        }
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
        std::sort(t.begin(), t.end());
        if (rank == 0) {
          std::printf(
              "{\"impl\":\"flag_floor\",\"load\":\"%s\",\"mode\":\"graph\",\"world\":%d,"
              "\"us\":%.3f}\n",
              acquire ? "ld.acquire.sys" : "ld.volatile", world, t[t.size() / 2]);
        }
      }
      BENCH_CUDA(cudaStreamSynchronize(s));
      BENCH_CUDA(cudaFree(dptrs));
      BENCH_CUDA(cudaFree(epoch));
      g.store_barrier();  // nobody polls the flags any more when they go
    }
    if (max_bytes >= (16u << 20)) {
      // Achievable HBM rate here: every rank copies max_bytes device to device at the same
      // time (N processes share the GPU like the all-reduce does); counts read + written bytes.
      void *a = nullptr, *b = nullptr;
      BENCH_CUDA(cudaMalloc(&a, max_bytes));
      BENCH_CUDA(cudaMalloc(&b, max_bytes));
      BENCH_CUDA(cudaMemcpyAsync(b, a, max_bytes, cudaMemcpyDeviceToDevice, s));
      symmem::OpOptions bo;
      bo.stream = s;
      bo.device = symmem::Device::cuda(dev);
      std::vector<double> t;
      for (int rep = 0; rep < 5; ++rep) {
        symmem::barrier(g, bo);
        BENCH_CUDA(cudaEventRecord(e0, s));
        for (int i = 0; i < 5; ++i) {
          BENCH_CUDA(cudaMemcpyAsync(b, a, max_bytes, cudaMemcpyDeviceToDevice, s));
        }
        BENCH_CUDA(cudaEventRecord(e1, s));
        BENCH_CUDA(cudaStreamSynchronize(s));
        float ms = 0;
        BENCH_CUDA(cudaEventElapsedTime(&ms, e0, e1));
        t.push_back(1000.0 * ms / 5);
      }
      std::sort(t.begin(), t.end());
      const double us = t[t.size() / 2];
      if (rank == 0) {
        std::printf(
            "{\"impl\":\"copy_baseline\",\"world\":%d,\"bytes\":%zu,\"us\":%.3f,"
            "\"all_ranks_tbps\":%.3f}\n",
            world, max_bytes, us, 2.0 * static_cast<double>(max_bytes) * world / us / 1e6);
      }
      BENCH_CUDA(cudaFree(a));
      BENCH_CUDA(cudaFree(b));
    }
    bool all_ok = true;
    for (size_t bytes : o.sizes) {
      const size_t count = bytes / es;
      void* data = o.pointer ? send : buf.ptr(rank);
      for (symmem::Algo algo : o.algos) {
        symmem::OpOptions opt;
        opt.stream = s;
        opt.algo = algo;
        opt.device = symmem::Device::cuda(dev);
        auto op = [&] {
          if (o.pointer) {
            symmem::all_reduce(send, recv, count, o.dtype, symmem::ReduceOp::sum, g, opt);
          } else {
            symmem::all_reduce(buf, count, o.dtype, symmem::ReduceOp::sum, opt);
          }
        };
        // Check once: every element of rank r is r+1.
        // The library's conversions (NOTE [dtype table]): exact for these small integers.
        std::vector<unsigned char> host(bytes);
        std::vector<float> h32(count, static_cast<float>(rank + 1));
        symmem::convert_from_f32(o.dtype, h32.data(), host.data(), count);
        BENCH_CUDA(cudaMemcpy(data, host.data(), bytes, cudaMemcpyHostToDevice));
        BENCH_CUDA(cudaDeviceSynchronize());  // pageable copies may return before the DMA lands
        op();
        BENCH_CUDA(cudaStreamSynchronize(s));
        const void* out = o.pointer ? recv : buf.ptr(rank);
        const float want = static_cast<float>(world * (world + 1) / 2);
        size_t wrong = 0;
        BENCH_CUDA(cudaMemcpy(host.data(), out, bytes, cudaMemcpyDeviceToHost));
        symmem::convert_to_f32(o.dtype, host.data(), h32.data(), count);
        for (float v : h32) wrong += v != want;
        all_ok = all_ok && wrong == 0;
        BENCH_CUDA(cudaMemset(data, 0, bytes));  // zeros stay zeros: steady timing
        for (const std::string& mode : o.modes) {
          cudaGraphExec_t exec = nullptr;
          cudaGraph_t graph = nullptr;
          for (int w = 0; w < 3; ++w) op();  // warm up (workspace, code paths)
          if (mode == "graph") {
            BENCH_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
            for (int i = 0; i < o.iters; ++i) op();
            BENCH_CUDA(cudaStreamEndCapture(s, &graph));
            BENCH_CUDA(cudaGraphInstantiate(&exec, graph, 0));
            BENCH_CUDA(cudaGraphLaunch(exec, s));  // upload
          }
          BENCH_CUDA(cudaStreamSynchronize(s));
          std::vector<double> per_call, host_per_call;
          for (int rep = 0; rep < o.repeats; ++rep) {
            symmem::barrier(g, opt);  // line the ranks up on the device
            BENCH_CUDA(cudaEventRecord(e0, s));
            const auto h0 = std::chrono::steady_clock::now();
            if (exec != nullptr) {
              BENCH_CUDA(cudaGraphLaunch(exec, s));
            } else {
              for (int i = 0; i < o.iters; ++i) op();
            }
            // Host time to enqueue the calls: when it exceeds the GPU time per call, eager
            // timings measure the host path, not the kernels.
            host_per_call.push_back(
                std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - h0)
                    .count() /
                o.iters);
            BENCH_CUDA(cudaEventRecord(e1, s));
            BENCH_CUDA(cudaStreamSynchronize(s));
            float ms = 0;
            BENCH_CUDA(cudaEventElapsedTime(&ms, e0, e1));
            per_call.push_back(1000.0 * ms / o.iters);
          }
          if (exec != nullptr) {
            cudaGraphExecDestroy(exec);
            cudaGraphDestroy(graph);
          }
          std::sort(per_call.begin(), per_call.end());
          std::sort(host_per_call.begin(), host_per_call.end());
          const double us = per_call[per_call.size() / 2];
          const double host_us = host_per_call[host_per_call.size() / 2];
          if (rank == 0) {
            std::printf(
                "{\"impl\":\"symmem\",\"algo\":\"%s\",\"mode\":\"%s\",\"world\":%d,\"bytes\":%zu,"
                "\"dtype\":\"%s\",\"us\":%.3f,\"host_us\":%.3f,\"correct\":%s,\"form\":\"%s\"}\n",
                symmem::to_string(algo), mode.c_str(), world, bytes, symmem::to_string(o.dtype), us,
                host_us, wrong == 0 ? "true" : "false", o.pointer ? "pointer" : "symmetric");
            std::fflush(stdout);
          }
        }
      }
    }
    g.store_barrier();
    return all_ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_allreduce_bench: %s\n", e.what());
    return 1;
  }
}
