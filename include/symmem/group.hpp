#pragma once

// A Group is a set of ranks that rendezvous through a Store. It is a cheap, copyable handle.
//
//   auto g = symmem::Group::from_env();   // symmem-run, torchrun, mpirun (Open MPI) or srun
//   g.rank(); g.world_size(); g.local_rank(); g.same_host(peer);
//   auto sub = g.split({0, 2});            // called by ranks 0 and 2 only
//
// from_env() reads, in order: the explicit GroupOptions; SYMMEM_RANK/SYMMEM_WORLD_SIZE/
// SYMMEM_LOCAL_RANK/SYMMEM_LOCAL_WORLD_SIZE/SYMMEM_STORE; torchrun's RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT; Open MPI's OMPI_COMM_WORLD_*;
// Slurm's SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID. Missing or contradictory settings are an
// InvalidArgument error listing what was found and what is missing, with the fix for the
// launcher found; with none of these set at all, from_env() gives a job of one rank (rank 0 of
// 1, in-process store). A rank claimed by two processes fails both (and the others waiting in
// the store) with InvalidArgument at creation. Without a store URL,
// rank 0 hosts a TcpStoreServer at MASTER_ADDR:(MASTER_PORT+1) -- MASTER_PORT itself is left to
// torch.distributed's store -- bound to loopback unless MASTER_ADDR is not a loopback address
// (SYMMEM_STORE_BIND overrides), and keeps it alive while any Group handle of the job lives.
// A world of one rank without any store uses an in-process HashStore. The store() of a
// from_env() group waits in short slices and fails with PeerFailure, naming the rank, as soon as
// the launcher (symmem-run) reports a dead rank in the store (docs/launching.md, "Failures").
//
// Host identity: at creation the ranks exchange host ids (GroupOptions::host_id, else
// SYMMEM_HOST_ID, else hostname + /proc/sys/kernel/random/boot_id) and derive local rank and
// local world size from them; a launcher's LOCAL_RANK/LOCAL_WORLD_SIZE that disagree are an
// InvalidArgument error on every rank.
//
// Ranks: a group's ranks are 0..world_size-1; global_rank(r) maps to the rank in the
// top-level (from_env) group, group_rank(g) maps back (-1 for non-members).

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "symmem/export.hpp"
#include "symmem/store.hpp"

namespace symmem {

struct GroupOptions {
  int rank = -1;  // -1: from the environment
  int world_size = -1;
  int local_rank = -1;
  int local_world_size = -1;
  std::string store_url;            // tcp://host:port or file:///path; empty: from the environment
  std::shared_ptr<Store> store;     // an existing store (wins over store_url)
  std::string token;                // TCP store token; empty: SYMMEM_STORE_TOKEN
  Millis timeout{kDefaultTimeout};  // < 0: SYMMEM_TIMEOUT_MS; 0: InvalidArgument (NOTE
                                    // [timeouts] in store.hpp)
  std::string host_id;              // identity of this rank's host; empty: SYMMEM_HOST_ID, else
                                    // hostname + boot id (tests use it to simulate several hosts)
};

class SYMMEM_API Group {
 public:
  Group();  // an invalid group; valid() is false

  static Group from_env(const GroupOptions& options = {});
  // A group over an existing store with explicit rank/world (tests, frameworks).
  static Group create(std::shared_ptr<Store> store, int rank, int world_size,
                      const GroupOptions& options = {});

  bool valid() const noexcept { return impl_ != nullptr; }
  int rank() const;
  int world_size() const;
  int local_rank() const;                 // among this group's ranks on this host
  int local_world_size() const;           // this group's ranks on this host
  const std::string& host_id() const;     // identity of this rank's host
  bool same_host(int peer) const;         // peer: a rank of this group
  bool single_host() const;               // every rank on one host
  int global_rank(int group_rank) const;  // InvalidArgument when out of range
  int group_rank(int global_rank) const;  // -1 when not a member
  const std::vector<int>& global_ranks() const;
  const std::shared_ptr<Store>& store() const;
  Millis timeout() const;
  // Unique, stable across ranks: the key prefix of this group in the store ("g0", "g0/s0,2#0"...).
  const std::string& name() const;

  // Collective over the listed ranks (ranks of this group, sorted or not, no duplicates); only
  // those ranks call it. The subgroup's ranks follow the sorted order of `ranks`. Every member
  // must call split() with the same set the same number of times (it waits, up to timeout(),
  // until all members arrive); overlapping subgroups are fine. A non-member caller gets
  // InvalidArgument.
  Group split(const std::vector<int>& ranks) const;

  // Barrier over the store (slow path; for setup and teardown, not hot loops).
  void store_barrier() const;

  struct Impl;
  const std::shared_ptr<Impl>& impl() const { return impl_; }
  explicit Group(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace symmem
