#pragma once

// Internal state behind symmem::Group handles, and the helpers group.cpp and group_env.cpp share.

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/abort.hpp"
#include "core/exchange.hpp"
#include "core/memory_registry.hpp"
#include "core/trace.hpp"
#include "symmem/error.hpp"
#include "symmem/group.hpp"
#include "symmem/store.hpp"

namespace symmem {
namespace detail {
// A process of this or another machine, as a rank's join record names it (NOTE [failed ranks]
// in group.cpp).
struct ProcessIdent {
  std::string machine;  // hostname/boot id/pid namespace: where `pid` names that process
  long pid = 0;
  std::string started;  // start time of the process (field 22 of /proc/<pid>/stat)
};
}  // namespace detail

struct Group::Impl {
  // Declared first so it is destroyed last: the store client below may be connected to it.
  std::shared_ptr<TcpStoreServer> server;
  std::shared_ptr<Store> store;
  std::string name;
  int rank = -1;
  int world_size = 0;
  int local_rank = -1;
  int local_world_size = 0;
  Millis timeout{0};
  std::vector<std::string> host_ids;  // per group rank
  std::vector<int> global_ranks;      // per group rank
  bool single_host = true;
  // Root group of a job whose store is hosted by rank 0: on destruction every rank checks out
  // ("<name>/exit/<rank>") and rank 0 waits (bounded) for the others before its server stops.
  bool checkout_on_exit = false;
  // Root group of more than one rank: its claim on its rank (NOTE [rank claims] in group.cpp),
  // released on destruction. Empty when none.
  std::string claim_key;
  Bytes claim_value;

  std::mutex barrier_mutex;                  // serialises store_barrier() calls
  std::unique_ptr<StoreExchange> barrier_x;  // split() rendezvous + store_barrier(); "<name>/b"
  std::mutex split_mutex;                    // guards split_calls, shrink_calls, grow_calls
  std::map<std::string, int> split_calls;    // per member list: how often split() ran
  std::map<std::string, int> shrink_calls;   // per excluded list: how often shrink() ran
  int grow_calls = 0;
  // NOTE [group abort] (core/abort.hpp); a split() group's links to its parent's.
  std::shared_ptr<detail::AbortState> abort = std::make_shared<detail::AbortState>();
  std::vector<detail::ProcessIdent> procs;  // per group rank (NOTE [failed ranks] in group.cpp)
  // A group made by shrink() or grow(): per rank of the group it came from, its rank here (-1:
  // excluded). Empty otherwise.
  std::vector<int> rank_map;
  // A group made by shrink(): the name of the group it was shrunk from (the nccl backend builds
  // its communicator with ncclCommShrink of that group's); empty otherwise.
  std::string shrunk_from;
  // The device of the group's most recent user allocation (workspaces excluded), the device of
  // ops and barriers given none (ops.hpp): -2 none yet, -1 the CPU, k >= 0 cuda:k.
  std::atomic<int> last_alloc_device{-2};
  // Collectives issued on this group by this rank: the op sequence number of the next one
  // (ops.cpp; every rank counts alike, so a rank in another op shows as out of step).
  std::atomic<uint64_t> op_seq{0};
  // The collective this process is running on this group, or null (NOTE [one thread per group]
  // in ops.cpp).
  std::atomic<const char*> busy_op{nullptr};
  // The group's flight recorder (NOTE [flight recorder] in core/trace.hpp); null when off.
  std::unique_ptr<detail::FlightRecorder> recorder;
  // Moves each time group_workspace() replaces one of the group's workspaces (memory.cpp).
  std::atomic<uint64_t> workspace_generation{0};
  // NOTE [op fast path] (ops.cpp): what the collectives look up on every call, kept for the
  // next one. Only the thread that holds busy_op touches these.
  struct OpCache {
    BufferCache buffers;
    // The agreement's last CPU workspace. Held strongly: a workspace's allocation does not own
    // its group, so this makes no cycle; declared last in Impl, it goes first.
    SymmetricMemory cpu_workspace;
    uint64_t cpu_workspace_generation = 0;
    std::vector<const void*> descs;   // per rank: its descriptor of the op being agreed
    std::vector<const void*> inputs;  // per rank: scratch of the inline all-reduce
  } op_cache;

  ~Impl();
};

namespace detail {

// NOTE [job abort key]
// Whoever finds that the job cannot go on sets this key in the job's store to a line saying why:
// a launcher that sees a rank die (symmem-run: "rank 2 killed by signal 9 (Killed) (reported by
// symmem-run)"), or a process that finds its rank claimed by another process (NOTE [rank
// claims] in group.cpp), whose line starts with kJobAbortInvalidPrefix. Waits that poll the key
// fail fast instead of running into their timeout: with InvalidArgument after a line with that
// prefix (the job was started wrongly), else with PeerFailure; errors from Group operations
// include the line.
inline constexpr const char* kJobAbortKey = "symmem/abort";
// Every rank failure a launcher saw, in order: a comma-separated list of ranks ("2,0"; a rank
// restarted and failed again appears again). symmem-run writes it beside kJobAbortKey. A group
// made by shrink() tolerates the failures of the ranks it excluded (AbortAwareStore).
inline constexpr const char* kJobFailedKey = "symmem/failed";
inline constexpr const char* kJobAbortInvalidPrefix = "invalid job: ";

// The reason stored at kJobAbortKey, or "" when the key is absent or the store cannot answer.
// Never blocks beyond one store round trip; never throws.
SYMMEM_API std::string job_abort_reason(Store& store) noexcept;

// Per rank, how many failures the launcher reported at kJobFailedKey (empty when none or when the
// store cannot answer). Never throws.
SYMMEM_API std::map<int, int> job_failed_counts(Store& store) noexcept;

// job_abort_reason(), or "" when `store` is an AbortAwareStore that tolerates every failure
// reported so far (a group made by shrink()). Never throws.
SYMMEM_API std::string effective_abort_reason(Store& store) noexcept;

// What an error should say about a non-empty abort `reason`, and its code: "the launcher
// reports: <reason>" (PeerFailure), or the reason without kJobAbortInvalidPrefix
// (InvalidArgument).
SYMMEM_API std::string job_abort_text(const std::string& reason, ErrorCode* code);

// The ranks of `g` other than its own whose process ran on this machine and is provably gone
// (NOTE [failed ranks] in group.cpp): /proc reads only, no store. Never throws (empty on error).
SYMMEM_API std::vector<int> gone_local_ranks(const Group::Impl& g) noexcept;

// A rank claim (NOTE [rank claims] in group.cpp) as process `pid` of this machine would write
// it; tests plant one to stand for another process.
SYMMEM_API Bytes rank_claim_value(long pid);

// This process's host identity: `override_id` if non-empty, else SYMMEM_HOST_ID, else
// "<hostname>/<boot id>".
SYMMEM_API std::string host_identity(const std::string& override_id);

// Builds a group over `store` (collective over all `world_size` ranks). Exchanges host ids and
// checks the launcher's local rank/size in `options` against them. `server` (may be null) is
// kept alive by the group and its subgroups.
// `launcher` (from_env's LaunchSettings::launcher; empty for Group::create) picks hints in errors.
std::shared_ptr<Group::Impl> make_root_group(std::shared_ptr<Store> store, int rank, int world_size,
                                             const GroupOptions& options,
                                             std::shared_ptr<TcpStoreServer> server,
                                             bool checkout_on_exit,
                                             const std::string& launcher = "");

// Group::rejoin() over the job's `store` (NOTE [grow tickets] in group.cpp); `launcher_rank`
// becomes the new member's global rank.
Group join_grown_group(std::shared_ptr<Store> store, int launcher_rank,
                       const GroupOptions& options);

}  // namespace detail
}  // namespace symmem
