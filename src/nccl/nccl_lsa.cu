// LSA pointers of an NCCL symmetric window. ncclGetLsaPointer is a device function (it reads the
// window's device-side descriptor), so a one-thread kernel gathers the pointers of every peer in
// this rank's LSA team into a device array; the host copies them back for ptr(peer).

#include <nccl.h>
#include <nccl_device.h>

#include "nccl/nccl_lsa.hpp"

namespace symmem::nccl {
namespace {

__global__ void lsa_pointers_kernel(ncclWindow_t win, LsaTeam team, int world, int my_rank,
                                    void** out) {
  for (int p = threadIdx.x; p < world; p += blockDim.x) {
    int idx = team.index_of(my_rank, p);
    out[p] = idx < 0 ? nullptr : ncclGetLsaPointer(win, 0, idx);
  }
}

}  // namespace

LsaTeam lsa_team(ncclComm_t comm) {
  ncclTeam_t t = ncclTeamLsa(comm);
  return LsaTeam{t.nRanks, t.rank, t.stride};
}

cudaError_t launch_lsa_pointers(ncclWindow_t win, const LsaTeam& team, int world, int my_rank,
                                void** out_device, cudaStream_t stream) {
  lsa_pointers_kernel<<<1, 128, 0, stream>>>(win, team, world, my_rank, out_device);
  return cudaGetLastError();
}

}  // namespace symmem::nccl
