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

  // ---- failures and recovery (docs/reliability.md, "Recovering from a failed rank") ----------
  // Aborts this group and every group split from it, in this process: every op, barrier,
  // signal wait, allocation and store exchange of theirs in flight returns within 100 ms with
  // ErrorCode::Aborted (message: the reason), and so does every later one. Idempotent (the first
  // reason stays); safe from any thread (a signal handler must defer it: it takes a mutex).
  // Local: it tells no peer. Memory of an aborted group can still be freed.
  void abort(const std::string& reason = "") const;
  bool aborted() const;
  // The error query of stream-ordered GPU ops (docs/design.md, "Stream-ordered errors"; what
  // NCCL's ncclCommGetAsyncError is to a communicator): raises, without waiting, an error that
  // the device found after a GPU op of this process returned -- a wait past its deadline
  // (Timeout), an argument error found on the device (InvalidArgument: all_to_all_v's counts,
  // zero-copy buffers that differ, a peer that refused the op's arguments, naming it), a wait
  // stopped by an abort (the group's Aborted/PeerFailure) -- and this group's abort error;
  // returns when there is none so far. Synchronise the stream first to cover every op enqueued
  // on it. The error is raised once: by this call or a synchronising call (a null-stream
  // barrier), whichever comes first; a timeout also by the next op.
  void check_async_error() const;
  // The ranks of this group (sorted) whose process is known to be gone: a rank on this host
  // whose process ended (or was replaced by another with its pid), or a rank the launcher
  // (symmem-run) reported failed. Not collective; costs a /proc read per local rank and one
  // store round trip.
  std::vector<int> failed_ranks() const;
  // Collective over the ranks of this group not in `excluded` (the survivors; every one passes
  // the same set, e.g. failed_ranks()). Returns their group, ranks renumbered in the old order
  // (rank_map() gives old -> new), and aborts this group (its ops and allocations then raise
  // Aborted saying so). The new group's store waits tolerate the excluded ranks' reported
  // failures; new allocations and every op work on it. A survivor that is also excluded gets
  // InvalidArgument.
  Group shrink(const std::vector<int>& excluded) const;
  // Collective over this group's ranks and `joiners` processes that call Group::rejoin() (in
  // any order, before or after): returns a group of world_size() + joiners ranks, this group's
  // ranks first (unchanged), then the joiners in the order they asked to join. This group stays
  // usable. Waits up to timeout() for the joiners.
  Group grow(int joiners) const;
  // Called by a replacement process (e.g. one that symmem-run --restart-failed started, with
  // SYMMEM_RESTART_COUNT set): joins the next grow() of the job's survivors through the job's
  // store (options as for from_env(); the rank found there becomes the new member's global
  // rank). Waits up to the timeout for a grow().
  static Group rejoin(const GroupOptions& options = {});
  // Whether the launcher started this process again after a failure (SYMMEM_RESTART_COUNT > 0).
  static bool restarted();
  // For a group made by shrink() or grow(): entry r is the rank in this group of rank r of the
  // group it was made from (-1: excluded). Empty for other groups.
  const std::vector<int>& rank_map() const;

  struct Impl;
  const std::shared_ptr<Impl>& impl() const { return impl_; }
  explicit Group(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace symmem
