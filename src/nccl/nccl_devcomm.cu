// ncclDevComm creation, kept in a CUDA translation unit because ncclDevComm's definition lives
// in NCCL's device headers.

#include <nccl.h>
#include <nccl_device.h>

#include <new>

#include "nccl/nccl_backend.hpp"
#include "nccl/nccl_library.hpp"

namespace symmem::nccl {

struct DevComm {
  ncclDevComm_t dev_comm;
};

ncclResult_t dev_comm_create(ncclComm_t comm, DevComm** out) {
  *out = nullptr;
  ncclDevCommRequirements_t reqs{};
  reqs.lsaBarrierCount = 1;
  auto* dc = new (std::nothrow) DevComm{};
  if (dc == nullptr) return ncclSystemError;
  ncclResult_t r = ncclDevCommCreate(comm, &reqs, &dc->dev_comm);
  if (r != ncclSuccess) {
    delete dc;
    return r;
  }
  *out = dc;
  return ncclSuccess;
}

void dev_comm_destroy(ncclComm_t comm, DevComm* dc) noexcept {
  if (dc == nullptr) return;
  (void)ncclDevCommDestroy(comm, &dc->dev_comm);
  delete dc;
}

}  // namespace symmem::nccl

// The device-header NCCL entry points the plugin calls, forwarding to the chosen NCCL like the
// nccl.h ones in nccl_library.cpp (NOTE [which NCCL]; hidden, they bind inside the plugin).
extern "C" {
ncclResult_t ncclDevCommCreate(ncclComm_t comm, ncclDevCommRequirements_t const* reqs,
                               ncclDevComm_t* out) {
  static const auto fn =
      reinterpret_cast<decltype(&ncclDevCommCreate)>(symmem::nccl::symbol("ncclDevCommCreate"));
  return fn != nullptr ? fn(comm, reqs, out) : ncclSystemError;
}
ncclResult_t ncclDevCommDestroy(ncclComm_t comm, ncclDevComm_t const* dev_comm) {
  static const auto fn =
      reinterpret_cast<decltype(&ncclDevCommDestroy)>(symmem::nccl::symbol("ncclDevCommDestroy"));
  return fn != nullptr ? fn(comm, dev_comm) : ncclSystemError;
}
ncclTeam_t ncclTeamLsa(ncclComm_t comm) {
  static const auto fn =
      reinterpret_cast<ncclTeam_t (*)(ncclComm_t)>(symmem::nccl::symbol("ncclTeamLsa"));
  return fn != nullptr ? fn(comm) : ncclTeam_t{};
}
}  // extern "C"
