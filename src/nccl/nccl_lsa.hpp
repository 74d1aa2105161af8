#pragma once

// The LSA ("load/store accessible") team of an NCCL communicator and the pointers of a window in
// it. NCCL 2.28: the LSA team holds the ranks this GPU reaches with loads and stores (one host,
// NVLink/PCIe P2P); world rank p belongs to it when (p - my_rank) is a multiple of its stride and
// its team index lsa.rank + (p - my_rank) / stride lies in [0, nRanks).

#include <cuda_runtime_api.h>
#include <nccl.h>

namespace symmem::nccl {

struct LsaTeam {
  int n_ranks = 0;
  int rank = 0;    // this rank's index in the team
  int stride = 1;  // world-rank distance between consecutive members
  // Team index of world rank `peer` seen from world rank `my_rank`, or -1 when not a member.
  __host__ __device__ int index_of(int my_rank, int peer) const {
    int d = peer - my_rank;
    if (stride <= 0 || d % stride != 0) return -1;
    int idx = rank + d / stride;
    return (idx >= 0 && idx < n_ranks) ? idx : -1;
  }
};

LsaTeam lsa_team(ncclComm_t comm);

// Writes world_size pointers (this window at offset 0 in each peer; nullptr outside the LSA team)
// into out_device, a device array, on `stream`.
cudaError_t launch_lsa_pointers(ncclWindow_t win, const LsaTeam& team, int world, int my_rank,
                                void** out_device, cudaStream_t stream);

}  // namespace symmem::nccl
