// The nccl backend's GPU tests (label gpu): the shared suite plus use_nccl_comm. Run through
// symmem-run with 1, 2 and 4 ranks. Skipped (exit 77, every rank) without a GPU, and when ranks
// would share a GPU: NCCL refuses two ranks on one GPU ("Duplicate GPU detected").

#include <nccl.h>

#include <cstdio>

#include "gpu_backend_suite.hpp"
#include "symmem/nccl.hpp"

namespace symmem::gputest {

TEST(NcclBackend, UsesAHandedInCommunicator) {
  auto& e = suite_env();
  const int r = e.group.rank(), w = e.group.world_size();
  ncclComm_t comm = nullptr;
  {
    // A group of its own (same ranks), so its communicator is not made by symmem. It, its
    // workspace and its allocations are gone at the end of this scope, before the
    // communicator is destroyed.
    std::vector<int> all(w);
    for (int i = 0; i < w; ++i) all[i] = i;
    Group g = e.group.split(all);
    ncclUniqueId id{};
    const std::string key = "test/nccl/comm-id";
    if (r == 0) {
      ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
      Bytes b(sizeof(id));
      std::memcpy(b.data(), &id, sizeof(id));
      g.store()->set(key, b);
    }
    Bytes b = g.store()->get(key, Millis(60000));
    ASSERT_EQ(b.size(), sizeof(id));
    std::memcpy(&id, b.data(), sizeof(id));
    ASSERT_EQ(ncclCommInitRank(&comm, w, id, r), ncclSuccess);
    use_nccl_comm(g, comm);
    test::expect_error([&] { use_nccl_comm(g, comm); }, ErrorCode::InvalidArgument,
                       {"already has an nccl communicator"});
    {
      auto buf = allocate(g, 4096 * 4, e.device, alloc_opts());
      std::vector<float> v(4096, static_cast<float>(r + 1));
      upload(buf.ptr(r), v, DType::f32);
      all_reduce(buf, 4096, DType::f32, ReduceOp::sum, op_opts());
      SUITE_CUDA(cudaDeviceSynchronize());
      expect_values(download(buf.ptr(r), 4096, DType::f32),
                    std::vector<float>(4096, static_cast<float>(w * (w + 1) / 2)),
                    "all_reduce over a handed-in communicator");
      buf.barrier();
    }
    g.store_barrier();
  }
  // symmem did not take ownership: the communicator is still ours to destroy.
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

TEST(NcclBackend, UseCommChecksArguments) {
  auto& e = suite_env();
  test::expect_error([&] { use_nccl_comm(e.group, nullptr); }, ErrorCode::InvalidArgument,
                     {"nccl_comm"});
}

}  // namespace symmem::gputest

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
  if (e.group.world_size() > 1 && e.group.local_world_size() > gpus) {
    std::printf(
        "SKIPPED: NCCL refuses two ranks on one GPU (\"Duplicate GPU detected\"): %d ranks on "
        "this host, %d GPU(s); the nccl multi-rank tests need one GPU per rank\n",
        e.group.local_world_size(), gpus);
    return symmem::test::kSkipExitCode;
  }
  e.device = symmem::Device::cuda(e.group.local_rank() % gpus);
  e.backend = "nccl";
  if (cudaSetDevice(e.device.index) != cudaSuccess) {
    std::printf("cudaSetDevice(%d) failed\n", e.device.index);
    return 1;
  }
  symmem::select_backend("nccl");
  return RUN_ALL_TESTS();
}
