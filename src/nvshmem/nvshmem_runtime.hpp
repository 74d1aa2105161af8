#pragma once

// The process-wide NVSHMEM state of the nvshmem plugin: initialisation (once per process, one
// PE per rank), PE numbering and teams.
//
// NOTE [nvshmem world]
// NVSHMEM is initialised once per process, by the first nvshmem allocation, over the group of
// that allocation ("the PE world"): PE i is rank i of that group. The bootstrap is NVSHMEM's
// unique-id bootstrap: rank 0 calls nvshmemx_get_uniqueid and the id travels through the
// group's store, so no MPI is needed. nvshmem_malloc is collective over *every* PE, so an
// allocation must be made by every rank of the PE world: a group holding the same ranks in
// another order works (its ops run on an NVSHMEM team made with nvshmemx_team_init), a proper
// subset cannot allocate and gets Unsupported. nvshmem_team_split_strided/_2d are not used
// because they are collective over the parent team while Group::split() is called by the
// members only; nvshmemx_team_init takes a unique id from one member and needs only them.
// NVSHMEM is not finalised: nvshmem_finalize is collective and would hang a process whose
// peers already left; the process exit releases it.

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <nvshmem.h>
#include <nvshmemx.h>

#include "symmem/group.hpp"

namespace symmem::nvshm {

class Runtime {
 public:
  static Runtime& instance();

  // Initialises NVSHMEM over `group` on `device` the first time (collective over `group`);
  // afterwards checks that `group` holds exactly the PE world's ranks (see the NOTE).
  void ensure(const Group& group, int device, const char* op);
  bool initialized() const;
  // False (with the reason) when NVSHMEM is initialised and `group` does not hold exactly the
  // PE world's ranks; true before initialisation.
  bool can_allocate(const Group& group, std::string* why) const;
  int device() const { return device_; }
  int n_pes() const { return static_cast<int>(world_global_ranks_.size()); }

  // PE number of each rank of `group` (group rank -> PE).
  std::vector<int> pes_of(const Group& group, const char* op) const;
  // The team whose team-PE r is group rank r: NVSHMEM_TEAM_WORLD when the order matches,
  // else a team made with nvshmemx_team_init (collective over the group, first call only).
  nvshmem_team_t team_for(const Group& group, const char* op);

 private:
  Runtime() = default;
  void init(const Group& group, int device, const char* op);
  void set_default_env(const Group& group, bool shared_gpu);
  bool is_world_locked(const Group& group, std::string* why) const;  // mu_ held

  mutable std::mutex mu_;
  bool initialized_ = false;
  int device_ = -1;
  std::vector<int> world_global_ranks_;  // PE -> global rank
  std::string world_group_name_;
  std::map<std::string, nvshmem_team_t> teams_;  // group name -> team
};

}  // namespace symmem::nvshm
