// Several ranks on one GPU without SYMMEM_ALLOW_SHARED_GPU: the cuda backend refuses, on every
// rank, with an error naming the variable. Every rank deliberately uses GPU 0. Needs 2+ ranks.

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "symmem/symmem.hpp"
#include "test_util.hpp"

namespace symmem::test {
namespace {

Group g_group;

TEST(CudaBackend, SharedGpuRefusedWithoutVariable) {
  AllocOptions opt;
  opt.backend = "cuda";
  expect_error([&] { allocate(g_group, 4096, Device::cuda(0), opt); }, ErrorCode::InvalidArgument,
               {"SYMMEM_ALLOW_SHARED_GPU=1", "same GPU", "rank"});
  g_group.store_barrier();  // every rank failed in the rendezvous, none is left waiting
}

}  // namespace
}  // namespace symmem::test

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::unsetenv("SYMMEM_ALLOW_SHARED_GPU");
  symmem::env::reset_cache_for_testing();
  std::string why;
  if (!symmem::test::have_gpu(&why)) {
    std::printf("SKIPPED: %s\n", why.c_str());
    return symmem::test::kSkipExitCode;
  }
  try {
    symmem::test::g_group = symmem::Group::from_env();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "setup failed: %s\n", e.what());
    return 1;
  }
  if (symmem::test::g_group.world_size() < 2) {
    std::printf("SKIPPED: needs 2 or more ranks\n");
    return symmem::test::kSkipExitCode;
  }
  cudaSetDevice(0);
  return RUN_ALL_TESTS();
}
