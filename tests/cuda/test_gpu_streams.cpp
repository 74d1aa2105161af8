// Ops of one group from several CUDA streams and threads (NOTE [stream order] in
// src/cuda/cuda_ops.cu; docs/design.md, "Concurrency"): they must give the right results and
// never hang, with no synchronisation between them by the caller. Run by every rank under
// symmem-run with SYMMEM_BACKEND=cuda (ctest label gpu, NP 2 and 4); without a GPU every rank
// exits 77 (skipped).
//
// Every op reads ordinary device memory (staged through the group's workspace, which all ops of
// the group share) and writes its own output, so an op that overlapped another on the device
// would corrupt the workspace or wait on the wrong epoch: a wrong value or a timeout. Sizes
// alternate between the LL path and the barrier kernels.

#include <cuda_runtime_api.h>

#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gpu_test_main.hpp"
#include "gpu_test_util.hpp"
#include "symmem/symmem.hpp"
#include "test_util.hpp"

namespace symmem::test {
namespace {

Group g_group;
int g_device = 0;
constexpr Millis kTimeout{60000};

OpOptions opts(cudaStream_t s) {
  OpOptions o;
  o.stream = s;
  o.timeout = kTimeout;
  o.device = Device::cuda(g_device);
  return o;
}

// Elements of op i: small (LL one-shot) and larger (barrier kernels) in turn.
size_t count_of(int i) {
  return i % 2 == 0 ? 1024 : 96 * 1024 + 16 * static_cast<size_t>(i);
}

// Input element j of op i on `rank`: small integers, so the f32 sums are exact.
float input(int rank, int i, size_t j) {
  return static_cast<float>((rank + 1) * (i + 1) + static_cast<int>(j % 7));
}

// The inputs and outputs of `n` ops, each op in its own slices of two device buffers.
class Ops {
 public:
  explicit Ops(int n) : n_(n) {
    size_t total = 0;
    for (int i = 0; i < n; ++i) {
      offsets_.push_back(total);
      total += count_of(i);
    }
    total_ = total;
    std::vector<float> host(total);
    for (int i = 0; i < n; ++i) {
      for (size_t j = 0; j < count_of(i); ++j) host[offsets_[i] + j] = input(g_group.rank(), i, j);
    }
    cudaMalloc(reinterpret_cast<void**>(&send_), total * sizeof(float));
    cudaMalloc(reinterpret_cast<void**>(&recv_), total * sizeof(float));
    cudaMemcpy(send_, host.data(), total * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemset(recv_, 0, total * sizeof(float));
    cudaDeviceSynchronize();  // the legacy stream's fill before any op's stream runs
  }
  ~Ops() {
    cudaFree(send_);
    cudaFree(recv_);
  }
  Ops(const Ops&) = delete;
  Ops& operator=(const Ops&) = delete;

  void run(int i, cudaStream_t s) const {
    all_reduce(send_ + offsets_[i], recv_ + offsets_[i], count_of(i), DType::f32, ReduceOp::sum,
               g_group, opts(s));
  }

  // After every op's stream was synchronised: op i's output must be the sum over the ranks.
  void check(const std::vector<int>& done) const {
    std::vector<float> host(total_);
    ASSERT_EQ(cudaMemcpy(host.data(), recv_, total_ * sizeof(float), cudaMemcpyDeviceToHost),
              cudaSuccess);
    const int world = g_group.world_size();
    for (int i : done) {
      for (size_t j = 0; j < count_of(i); ++j) {
        float want = 0;
        for (int r = 0; r < world; ++r) want += input(r, i, j);
        ASSERT_EQ(host[offsets_[i] + j], want)
            << "op " << i << " element " << j << " on rank " << g_group.rank();
      }
    }
  }

  int size() const { return n_; }

 private:
  int n_;
  size_t total_ = 0;
  std::vector<size_t> offsets_;
  float* send_ = nullptr;
  float* recv_ = nullptr;
};

std::vector<int> all_of(int n) {
  std::vector<int> v;
  for (int i = 0; i < n; ++i) v.push_back(i);
  return v;
}

// One thread, ops alternating between two streams, no synchronisation in between.
TEST(GpuStreams, TwoStreamsOneThread) {
  Stream a, b;
  Ops ops(24);
  for (int i = 0; i < ops.size(); ++i) ops.run(i, i % 2 == 0 ? a.get() : b.get());
  CUDA_OK(cudaStreamSynchronize(a.get()));
  CUDA_OK(cudaStreamSynchronize(b.get()));
  ops.check(all_of(ops.size()));
}

// Three streams in a rotating pattern, including the legacy default stream.
TEST(GpuStreams, ThreeStreamsWithTheDefaultStream) {
  Stream a, b;
  const cudaStream_t streams[3] = {a.get(), nullptr, b.get()};
  Ops ops(18);
  for (int i = 0; i < ops.size(); ++i) ops.run(i, streams[(i * 2) % 3]);
  CUDA_OK(cudaDeviceSynchronize());
  ops.check(all_of(ops.size()));
}

// Two threads with a stream each take turns (every rank issues the ops in one order, as
// collectives need); neither synchronises its stream before the other's next op.
TEST(GpuStreams, TwoThreadsTwoStreams) {
  Ops ops(24);
  std::mutex mu;
  std::condition_variable cv;
  int next = 0;
  std::string failure[2];
  auto worker = [&](int t) {
    cudaSetDevice(g_device);  // a new thread starts on device 0
    Stream s;
    for (int i = t; i < ops.size(); i += 2) {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return next == i; });
      try {
        ops.run(i, s.get());
      } catch (const std::exception& e) {
        failure[t] = e.what();
      }
      ++next;
      cv.notify_all();
    }
    if (cudaStreamSynchronize(s.get()) != cudaSuccess && failure[t].empty()) {
      failure[t] = "cudaStreamSynchronize failed";
    }
  };
  std::thread t0(worker, 0), t1(worker, 1);
  t0.join();
  t1.join();
  EXPECT_EQ(failure[0], "");
  EXPECT_EQ(failure[1], "");
  ops.check(all_of(ops.size()));
}

// Warm up on one stream, capture the same op on another (as torch.cuda.graph does on its side
// stream), replay it, then go on eagerly on the first stream.
TEST(GpuStreams, CaptureOnASideStreamAfterEagerOps) {
  Stream a, side;
  Ops ops(4);
  ops.run(0, a.get());
  ops.run(1, a.get());
  cudaGraph_t graph = nullptr;
  CUDA_OK(cudaStreamBeginCapture(side.get(), cudaStreamCaptureModeThreadLocal));
  ops.run(2, side.get());
  CUDA_OK(cudaStreamEndCapture(side.get(), &graph));
  cudaGraphExec_t exec = nullptr;
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  // A graph is launched after the group's eager ops (the caller's part: nothing can wait inside
  // the capture for work outside it, NOTE [stream order]); its replay is ordered by its stream.
  CUDA_OK(cudaStreamSynchronize(a.get()));
  CUDA_OK(cudaGraphLaunch(exec, side.get()));
  CUDA_OK(cudaStreamSynchronize(side.get()));
  ops.run(3, a.get());
  CUDA_OK(cudaStreamSynchronize(a.get()));
  ops.check(all_of(4));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

// Two streams of one capture (b forked from a): the second op waits for the first inside the
// graph; replayed twice.
TEST(GpuStreams, TwoStreamsInOneCapture) {
  Stream a, b;
  Ops ops(4);
  ops.run(3, a.get());  // warm up: the workspace is large enough before the capture
  CUDA_OK(cudaStreamSynchronize(a.get()));
  cudaEvent_t fork = nullptr, join = nullptr;
  CUDA_OK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CUDA_OK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  cudaGraph_t graph = nullptr;
  CUDA_OK(cudaStreamBeginCapture(a.get(), cudaStreamCaptureModeThreadLocal));
  CUDA_OK(cudaEventRecord(fork, a.get()));
  CUDA_OK(cudaStreamWaitEvent(b.get(), fork, 0));
  ops.run(1, a.get());
  ops.run(2, b.get());
  CUDA_OK(cudaEventRecord(join, b.get()));
  CUDA_OK(cudaStreamWaitEvent(a.get(), join, 0));
  CUDA_OK(cudaStreamEndCapture(a.get(), &graph));
  cudaGraphExec_t exec = nullptr;
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  for (int k = 0; k < 2; ++k) CUDA_OK(cudaGraphLaunch(exec, a.get()));
  CUDA_OK(cudaStreamSynchronize(a.get()));
  ops.check({1, 2, 3});
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaEventDestroy(fork);
  cudaEventDestroy(join);
}

}  // namespace
}  // namespace symmem::test

int main(int argc, char** argv) {
  return symmem::test::gpu_test_main(argc, argv, symmem::test::g_group, symmem::test::g_device);
}
