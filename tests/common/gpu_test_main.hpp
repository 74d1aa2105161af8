#pragma once

// main() of a multi-process GPU test binary (run by every rank under symmem-run): reports
// SKIPPED and exits 77 without a GPU, makes the group from the environment, picks the GPU by
// local rank, runs the tests, then lines the ranks up once more so that none exits (and tears
// down memory its peers still map) while another is still testing.

#include <cuda_runtime_api.h>

#include <cstdio>
#include <exception>
#include <string>

#include "symmem/symmem.hpp"
#include "test_util.hpp"

namespace symmem::test {

inline int gpu_test_main(int argc, char** argv, Group& group, int& device) {
  ::testing::InitGoogleTest(&argc, argv);
  std::string why;
  if (!have_gpu(&why)) {
    std::printf("SKIPPED: %s\n", why.c_str());
    return kSkipExitCode;
  }
  try {
    group = Group::from_env();
    const int count = gpu_count();
    device = group.local_rank() % count;
    if (cudaSetDevice(device) != cudaSuccess) {
      std::fprintf(stderr, "cudaSetDevice(%d) failed\n", device);
      return 1;
    }
    std::printf("rank %d/%d: GPU %d of %d\n", group.rank(), group.world_size(), device, count);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "setup failed: %s\n", e.what());
    return 1;
  }
  int rc = RUN_ALL_TESTS();
  try {
    group.store_barrier();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "final barrier failed: %s\n", e.what());
    rc = rc ? rc : 1;
  }
  return rc;
}

}  // namespace symmem::test
