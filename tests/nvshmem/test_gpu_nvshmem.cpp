// The nvshmem backend's GPU tests (label gpu): the shared suite, run through symmem-run with 1,
// 2 and 4 ranks. Skipped (exit 77, every rank) without a GPU, and when ranks share a GPU without
// MPS: NVSHMEM runs several PEs on one GPU only in full MPG mode, which needs an MPS daemon and
// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (sum over the PEs <= 100), else teams and collectives fail.

#include <cstdio>
#include <cstdlib>

#include <unistd.h>

#include "gpu_backend_suite.hpp"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  std::string why;
  if (!symmem::test::have_gpu(&why)) {
    std::printf("SKIPPED: %s\n", why.c_str());
    return symmem::test::kSkipExitCode;
  }
  auto& e = symmem::gputest::suite_env();
  e.group = symmem::Group::from_env();
  const int gpus = symmem::test::gpu_count();
  if (e.group.local_world_size() > gpus) {
    const char* pipe = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
    const std::string control = std::string(pipe ? pipe : "/tmp/nvidia-mps") + "/control";
    const bool mps = ::access(control.c_str(), F_OK) == 0;
    const bool pct = std::getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") != nullptr;
    if (!mps || !pct) {
      std::printf(
          "SKIPPED: %d ranks share %d GPU(s): NVSHMEM runs several PEs on one GPU only under an "
          "MPS daemon (%s: %s) with CUDA_MPS_ACTIVE_THREAD_PERCENTAGE set (%s); "
          "scripts/gpu-check.sh starts MPS\n",
          e.group.local_world_size(), gpus, control.c_str(), mps ? "found" : "missing",
          pct ? "set" : "unset");
      return symmem::test::kSkipExitCode;
    }
  }
  e.device = symmem::Device::cuda(e.group.local_rank() % gpus);
  e.backend = "nvshmem";
  if (cudaSetDevice(e.device.index) != cudaSuccess) {
    std::printf("cudaSetDevice(%d) failed\n", e.device.index);
    return 1;
  }
  symmem::select_backend("nvshmem");
  return RUN_ALL_TESTS();
}
