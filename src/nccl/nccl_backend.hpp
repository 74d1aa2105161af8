#pragma once

// The nccl backend (plugin libsymmem_nccl.so).
//
// Memory: ncclMemAlloc'ed buffer + signal pad in one allocation, registered as an NCCL symmetric
// window (ncclCommWindowRegister(..., NCCL_WIN_COLL_SYMMETRIC)). Peers in this rank's LSA team
// (load/store accessible: one host, P2P) are addressed through the window's LSA pointers, which
// go into the same DeviceHandle tables the cuda backend builds, so the peer-pointer kernels of
// the cuda backend (cuda_run_op) and symmem's device-side signals run unchanged. Peers outside
// the LSA team have direct_access() == false; ops then fall back to NCCL's own collectives.
//
// Communicators: one per group, made from the group (rank 0's ncclUniqueId travels through the
// group's store) or handed in with use_nccl_comm() (not owned). Subgroups get their own
// communicator through their own store keys: ncclCommSplit would need every rank of the parent
// to call it, while Group::split() is called by the members only.

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "nccl/nccl_lsa.hpp"
#include "symmem/backend.hpp"

namespace symmem::nccl {

struct DevComm;  // an ncclDevComm (nccl_devcomm.cu)

// One NCCL communicator serving one symmem group.
struct Comm {
  ncclComm_t comm = nullptr;
  bool owned = false;  // false: handed in by use_nccl_comm(); never destroyed here
  int device = -1;
  int rank = 0;
  int world = 0;
  LsaTeam lsa;
  bool all_lsa = false;              // every rank of the group is in this rank's LSA team
  bool symmetric_confirmed = false;  // ncclDevCommCreate succeeded once
  bool confirm_tried = false;
  // NOTE [one-rank communicators]
  // NCCL 2.28 can refuse a one-rank communicator the device communicator, as seen on the H200
  // machine: 2.28.3 (the system's; with MPS and without) says "Communicator does not support
  // symmetric memory!" (symmetric support needs CUMEM and all-direct P2P among the local
  // ranks), 2.28.9 (torch's wheel; without MPS) says "GIN not supported.". With one rank there
  // is no peer to reach, so that case is served without the window: the buffer still comes from
  // ncclMemAlloc, its own pointer fills the tables and the signals use symmem's device
  // primitives on it, like every other rank count. With two or more ranks a missing capability
  // is BackendUnavailable.
  bool single_rank() const { return world == 1; }
  bool no_window() const { return single_rank() && !symmetric_confirmed; }
  std::string group_name;
  ~Comm();
};

class NcclBackend final : public Backend {
 public:
  NcclBackend();
  ~NcclBackend() override;
  const char* name() const override { return "nccl"; }
  bool can_serve(const Group& group, Device device, std::string* why) const override;
  std::shared_ptr<BackendMemory> allocate(const Group& group, const RendezvousInfo& info) override;
  void run(const OpArgs& args) override;
  void* extension(const std::string& name) override;

  // use_nccl_comm(): registers a user communicator for `group` (validated, not owned).
  void use_comm(const Group& group, ncclComm_t comm);
  // The communicator of `group` on `device`, created collectively on first use.
  std::shared_ptr<Comm> comm_for(const Group& group, int device, const char* op);

 private:
  std::shared_ptr<Comm> create_comm(const Group& group, int device, const char* op);
  // Throws BackendUnavailable when NCCL gives no symmetric support (or, for a one-rank
  // communicator, logs why and leaves c.symmetric_confirmed false; see the NOTE above).
  void confirm_symmetric(Comm& c, const char* op);
  void run_nccl_fallback(const OpArgs& args, Comm& c);

  std::mutex mu_;
  // By group name. Handed-in communicators stay registered; symmem's own live as long as an
  // allocation of the group holds them (the last one freed destroys the communicator).
  std::map<std::string, std::shared_ptr<Comm>> user_comms_;
  std::map<std::string, std::weak_ptr<Comm>> own_comms_;
};

// Creates (then destroys) an ncclDevComm with lsaBarrierCount = 1: proves symmetric support.
ncclResult_t dev_comm_create(ncclComm_t comm, DevComm** out);
void dev_comm_destroy(ncclComm_t comm, DevComm* dc) noexcept;

}  // namespace symmem::nccl
