// ncclDevComm creation, kept in a CUDA translation unit because ncclDevComm's definition lives
// in NCCL's device headers.

#include <nccl.h>
#include <nccl_device.h>

#include <new>

#include "nccl/nccl_backend.hpp"

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
