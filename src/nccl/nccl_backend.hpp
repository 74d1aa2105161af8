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
//
// NOTE [nccl abort]
// Aborting a group (Group::abort, the liveness watcher, shrink(); NOTE [group abort]) stops its
// communicator, so that NCCL's own in-flight collectives (the fallback path) return: a hook on
// the group's abort state (and its ancestors') marks the Comm stopping at once and a thread of
// its own then calls
//   - ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT) where the loaded NCCL has it (NOTE [optional
//     NCCL entry points]): in-flight ops end, the communicator stays valid for destroy and
//     shrink. The revoked Comm is kept (parked, by group name) for a shrink of its group;
//   - else ncclCommAbort(comm) for a communicator symmem made (NCCL frees it; symmem never
//     touches it again). A handed-in communicator is not aborted (ncclCommAbort would free the
//     caller's object): the log says so, and its owner decides.
// The hook never waits for NCCL (it runs under the abort state's mutex, maybe on the liveness
// watcher's thread). Allocations of an aborted group free their buffers without deregistering
// their windows (deregistration is collective: the dead peer would never come); ncclCommDestroy
// (revoked) or ncclCommAbort released them.
// Shrink: the first nccl allocation of a group made by shrink() builds its communicator with
// ncclCommShrink(parent's, excluded ranks) when every survivor holds the parent group's
// communicator (live or revoked, not aborted) and the loaded NCCL has ncclCommShrink (the ranks
// agree on that through the store first), else with a new communicator; the log says which and
// why (SYMMEM_DEBUG=INFO).

#include <condition_variable>
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
  // NOTE [nccl abort]. live -> stopping (the abort hook) -> revoked | aborted | live (a
  // handed-in communicator that could not be revoked: left to its owner).
  enum class State { live, stopping, revoked, aborted };
  std::mutex state_mu;
  std::condition_variable state_cv;
  State state = State::live;
  bool stop_requested = false;  // the hook ran (state may be back to live: nothing was possible)
  State current() {
    std::lock_guard<std::mutex> lock(state_mu);
    return state;
  }
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
  // The communicator comm_for() would return without creating or confirming one, or null.
  std::shared_ptr<Comm> existing_comm(const Group& group, int device);

 private:
  // The group's communicator (handed in, else made by symmem and still alive), or null; mu_ held.
  std::shared_ptr<Comm> known_comm_locked(const Group& group) const;
  std::shared_ptr<Comm> create_comm(const Group& group, int device, const char* op);
  // The communicator of the group `group` was shrunk from, when this rank can shrink it (NOTE
  // [nccl abort]); null, with the reason in *why, otherwise.
  std::shared_ptr<Comm> shrinkable_parent(const Group& group, int device, std::string* why);
  // Sets up a Comm around a new communicator `comm` of `group` (LSA team, symmetric support).
  std::shared_ptr<Comm> wrap_comm(const Group& group, int device, ncclComm_t comm, const char* op);
  // ncclCommShrink of `parent` (the communicator of the group `group` was shrunk from) without
  // the ranks shrink() excluded; collective over `group`.
  ncclComm_t shrink_comm(const Group& group, Comm& parent, ncclConfig_t* config, const char* op);
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
