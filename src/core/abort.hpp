#pragma once

// NOTE [group abort]
// Every group has an AbortState; a group made by split() links to its parent's, so aborting a
// group aborts the groups split from it (a group made by shrink() or grow() starts a new chain:
// its parent is aborted by design). Group::abort(reason) sets the flag once (idempotent: the
// first reason stays) and is safe from any thread; it takes a mutex, so a signal handler must
// defer it (set a flag, call abort() from a thread). It is local to this process: peers learn
// of it as they learn of any rank that stops taking part (their waits time out, or see its
// process end), or because they abort too.
// Who checks: every op and allocation at entry (before touching anything), and every CPU wait of
// an op in its sleeping phase (PadSync, the host backend's signal waits, store exchanges), at
// least every 50 ms. So an in-flight op returns within ~70 ms (the 20 ms yield phase plus one
// sleep slice) with ErrorCode::Aborted, and so does every later one. A check is one acquire
// load per link of the chain (a root group has one).

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "symmem/error.hpp"
#include "symmem/export.hpp"

namespace symmem {
class Group;
namespace detail {

struct AbortState {
  std::atomic<bool> set{false};
  std::mutex mu;           // serialises abort(); `reason` is written once, before `set`
  std::string reason;      // "group g0 was aborted by rank 1: <why>"
  std::string group_name;  // of the group this state belongs to
  ErrorCode code = ErrorCode::Aborted;  // PeerFailure when the liveness watcher set it
  std::shared_ptr<AbortState> parent;   // split(): the parent's state; else null
  // Run once when the state is set (under mu; they must not wait): backends stop their
  // device-side waits here (NOTE [device abort] and NOTE [orphan stop flags] in
  // src/cuda/timeout_record.hpp) and their communicators (NOTE [nccl abort] in
  // src/nccl/nccl_backend.hpp).
  std::vector<std::function<void()>> hooks;
  // The device abort slot of this group (NOTE [device abort] in src/cuda/timeout_record.hpp);
  // -1 until the cuda backend gives it one.
  std::atomic<int> device_slot{-1};
};

// The first aborted state along the chain from `s`, or nullptr when none is aborted.
inline const AbortState* aborted_state(const AbortState* s) noexcept {
  for (; s != nullptr; s = s->parent.get()) {
    if (s->set.load(std::memory_order_acquire)) return s;
  }
  return nullptr;
}

// Throws s.code (Aborted, or PeerFailure from the liveness watcher): "<op>: rank <rank>: <reason>".
[[noreturn]] SYMMEM_API void throw_aborted(const AbortState& s, std::string_view op, int rank);

inline void check_not_aborted(const AbortState* s, std::string_view op, int rank) {
  if (const AbortState* a = aborted_state(s)) throw_aborted(*a, op, rank);
}

// The abort state of `group` (never null for a valid group; null for an invalid one).
SYMMEM_API std::shared_ptr<AbortState> abort_state(const Group& group) noexcept;

// Sets `s` (first call wins) and runs its hooks; returns false when it was set already.
SYMMEM_API bool set_aborted(AbortState& s, const std::string& reason,
                            ErrorCode code = ErrorCode::Aborted) noexcept;

// Runs `hook` when `s` is set: now if it is set already, else from set_aborted().
SYMMEM_API void add_abort_hook(AbortState& s, std::function<void()> hook);

// NOTE [liveness watcher]
// A GPU op that waits on a dead peer spins in a kernel: no host wait polls a pidfd for it. So the
// backends that run kernels register each group they run on here (idempotent); a thread of the
// process (started on first use) looks every 50 ms whether a rank of a registered group on this
// machine has exited (NOTE [failed ranks] in group.cpp) and then sets the group's abort state
// with ErrorCode::PeerFailure, naming the rank: its kernels return within about a millisecond
// (NOTE [device abort]) and its ops raise PeerFailure. SYMMEM_ABORT_ON_PEER_FAILURE=0 turns it
// off (a GPU wait on a dead peer then lasts until its deadline). Once the process exits (an
// atexit handler registered when the thread starts, so after the CUDA runtime's own) the thread
// acts no more, and an action under way finishes before exit goes on: peers that finished first
// must not make it call a backend's hooks, which use CUDA, while the runtime is torn down (a
// rank crashed at exit that way in gpu_streams_np4 once).
SYMMEM_API void watch_peer_liveness(const Group& group);

}  // namespace detail
}  // namespace symmem
