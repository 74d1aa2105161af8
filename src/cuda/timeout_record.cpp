#include "cuda/timeout_record.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "core/abort.hpp"
#include "core/group_impl.hpp"
#include "core/log.hpp"
#include "core/timeout.hpp"
#include "core/wait_report.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/cuda_ops.hpp"
#include "cuda/kernels/kernels.hpp"
#include "symmem/device_handle.hpp"
#include "symmem/env.hpp"

namespace symmem::cuda {
namespace {

std::mutex g_mu;
std::atomic<int32_t*> g_record{nullptr};
std::atomic<int32_t*> g_progress{nullptr};

constexpr size_t kProgressBytes = sizeof(int32_t) * 4 * kProgressSlots;

// Pinned, host-mapped, portable, zeroed; never freed (kernels may still reference it at exit).
int32_t* host_mapped(size_t bytes, const char* what) {
  void* host = nullptr;
  SYMMEM_CUDART_CHECK(what, -1,
                      cudaHostAlloc(&host, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
  void* dev = nullptr;
  SYMMEM_CUDART_CHECK(what, -1, cudaHostGetDevicePointer(&dev, host, 0));
  SYMMEM_CHECK(what, -1, dev == host, ErrorCode::Internal,
               "host-mapped memory has different host and device addresses (no unified "
               "addressing?)");
  auto* rec = static_cast<int32_t*>(host);
  for (size_t i = 0; i < bytes / sizeof(int32_t); ++i) {
    reinterpret_cast<volatile int32_t*>(rec)[i] = 0;
  }
  return rec;
}

// Ranks noted in the progress record by waits of `rank` (any group of this process).
std::vector<int> noted_peers(int rank) {
  std::vector<int> peers;
  int32_t* r = g_progress.load(std::memory_order_acquire);
  if (r == nullptr) return peers;
  const volatile int32_t* v = r;
  for (int i = 0; i < kProgressSlots; ++i) {
    if (v[4 * i] != 1) continue;
    std::atomic_thread_fence(std::memory_order_acquire);
    if (v[4 * i + 1] == rank) peers.push_back(static_cast<int>(v[4 * i + 3]));
  }
  return peers;
}

}  // namespace

int32_t* timeout_record() {
  int32_t* r = g_record.load(std::memory_order_acquire);
  if (r != nullptr) return r;
  std::lock_guard<std::mutex> lock(g_mu);
  r = g_record.load(std::memory_order_relaxed);
  if (r != nullptr) return r;
  int32_t* rec = host_mapped(64, "timeout record");
  g_record.store(rec, std::memory_order_release);
  return rec;  // never freed: kernels of any allocation may still reference it at exit
}

int32_t* progress_record() {
  int32_t* r = g_progress.load(std::memory_order_acquire);
  if (r != nullptr) return r;
  std::lock_guard<std::mutex> lock(g_mu);
  r = g_progress.load(std::memory_order_relaxed);
  if (r != nullptr) return r;
  r = host_mapped(kProgressBytes, "wait progress record");
  g_progress.store(r, std::memory_order_release);
  return r;
}

uint64_t progress_after_ns(Millis timeout) {
  int64_t s = 0;
  try {
    s = env::wait_report_s();
  } catch (...) {
    return 0;  // a bad value: reported by env::validate_all(), the reports are off
  }
  if (s <= 0) return 0;
  const int64_t ms = detail::resolve_timeout(timeout).count();
  if (s * 1000 >= ms) return 0;
  // Half the interval: the note is in place when the host's first line is due.
  return static_cast<uint64_t>(s) * 500000000ull;
}

void synchronize_and_raise(std::string_view op, int rank, cudaStream_t stream, Millis timeout,
                           const std::string& what, int32_t abort_slot) {
  const auto start = detail::Clock::now();
  const Millis resolved = detail::resolve_timeout(timeout);
  detail::WaitReport report(what, detail::Subsys::GPU, rank, start, detail::deadline_for(resolved),
                            resolved);
  cudaError_t e = cudaSuccess;
  if (!report.enabled()) {
    e = cudaStreamSynchronize(stream);
  } else {
    // Poll: yielding for the first millisecond (a short wait costs what a blocking
    // synchronisation costs), then sleeping 100 us, backing off to 2 ms.
    auto nap = std::chrono::microseconds(100);
    while ((e = cudaStreamQuery(stream)) == cudaErrorNotReady) {
      const auto now = detail::Clock::now();
      if (report.due(now)) {
        const std::vector<int> peers = noted_peers(rank);
        if (peers.empty()) {
          report.text(
              "the GPU (no wait of this rank noted yet: earlier work on the stream, "
              "or a collective kernel, which does not name its peers)");
        } else {
          report.ranks(peers, -1, -1);
        }
      }
      if (now - start < std::chrono::milliseconds(1)) {
        std::this_thread::yield();
        continue;
      }
      std::this_thread::sleep_for(nap);
      nap = std::min<std::chrono::microseconds>(nap * 2, std::chrono::microseconds(2000));
    }
  }
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // clear a non-sticky error; a sticky one stays with the context
    throw_cudart_error(op, rank, "cudaStreamSynchronize", e, SYMMEM_WHERE);
  }
  raise_device_timeout(op, rank, abort_slot);
  cuda_raise_op_error(op, rank, abort_slot);  // NOTE [device-detected errors] in cuda_ops.cu
}

bool device_timeout_pending() noexcept {
  int32_t* r = g_record.load(std::memory_order_acquire);
  if (r == nullptr) return false;
  return reinterpret_cast<volatile int32_t*>(r)[0] != 0;
}

namespace {

std::atomic<int32_t*> g_abort_table{nullptr};
// Per slot: the abort state it belongs to (for the reason), guarded by g_mu.
std::vector<std::weak_ptr<detail::AbortState>>& abort_owners() {
  static auto* v = new std::vector<std::weak_ptr<detail::AbortState>>;  // immortal
  return *v;
}

// NOTE [orphan stop flags]: the registered allocations, by id, and a stream per device for the
// stores. Immortal (an abort may come while statics are destroyed).
struct OrphanEntry {
  int32_t slot = -1;  // the group's abort slot
  int device = -1;
  std::weak_ptr<Group::Impl> group;
  std::vector<int32_t*> flags;  // per group rank
};
struct OrphanRegistry {
  std::mutex mu;
  uint64_t next_id = 1;
  std::map<uint64_t, OrphanEntry> entries;
  std::map<int, cudaStream_t> streams;  // per device, non-blocking
};
OrphanRegistry& orphans() {
  static auto* r = new OrphanRegistry;
  return *r;
}

// Relaxes this thread's stream-capture mode for the scope: the stores may be issued while
// another thread captures a graph.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() { (void)cudaThreadExchangeStreamCaptureMode(&mode_); }
  ~RelaxedCaptureMode() { (void)cudaThreadExchangeStreamCaptureMode(&mode_); }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

// Stores 1 into the flags of the ranks `gone` of `e` on R's stream of its device (R.mu held; the
// caller restores the current device and clears a CUDA error). Returns how many were stored.
int store_flags(OrphanRegistry& R, const OrphanEntry& e, const std::vector<int>& gone) {
  if (cudaSetDevice(e.device) != cudaSuccess) return 0;
  cudaStream_t& st = R.streams[e.device];
  if (st == nullptr && cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess) {
    st = nullptr;
    return 0;
  }
  int stored = 0;
  for (int r : gone) {
    if (r < 0 || r >= static_cast<int>(e.flags.size()) || e.flags[r] == nullptr) continue;
    if (cudaMemsetAsync(e.flags[r], 1, sizeof(int32_t), st) == cudaSuccess) ++stored;
  }
  return stored;
}

// The abort hook's second half (NOTE [orphan stop flags]): flags the gone ranks of the group with
// abort slot `slot` in each of its registered allocations. Runs under the abort state's mutex;
// never throws, never waits for the GPU.
void stop_orphans(int32_t slot) noexcept {
  try {
    OrphanRegistry& R = orphans();
    // Declared before the lock: the group (if this was its last reference) goes after the lock
    // is released, since its destruction may free allocations, which unregister here.
    std::shared_ptr<Group::Impl> g;
    std::lock_guard<std::mutex> lock(R.mu);
    std::vector<int> gone;
    bool looked = false;
    int stored = 0, allocations = 0;
    int prev = -1;
    const bool have_prev = cudaGetDevice(&prev) == cudaSuccess;
    RelaxedCaptureMode relaxed;
    for (auto& [id, e] : R.entries) {
      (void)id;
      if (e.slot != slot) continue;
      if (!looked) {
        looked = true;
        g = e.group.lock();
        if (g) gone = detail::gone_local_ranks(*g);
      }
      if (gone.empty()) break;
      const int n = store_flags(R, e, gone);
      stored += n;
      allocations += n > 0 ? 1 : 0;
    }
    (void)cudaGetLastError();  // a failed store is not the next op's error
    if (have_prev) (void)cudaSetDevice(prev);
    if (stored > 0 && g) {
      std::ostringstream ranks;
      for (size_t i = 0; i < gone.size(); ++i) ranks << (i ? "," : "") << gone[i];
      SYMMEM_LOG(INFO, GPU) << "rank " << g->rank << ": group " << g->name
                            << " aborted: set the orphan stop flags of gone rank(s) " << ranks.str()
                            << " in " << allocations
                            << " allocation(s), so kernels they left running stop";
    }
  } catch (...) {
  }
}

}  // namespace

uint64_t register_orphan_flags(const Group& group, int device, std::vector<int32_t*> flags) {
  const AbortSlot a = abort_slot(group);
  if (a.slot < 0 || !group.valid()) return 0;
  OrphanRegistry& R = orphans();
  std::lock_guard<std::mutex> lock(R.mu);
  const uint64_t id = R.next_id++;
  R.entries[id] = OrphanEntry{a.slot, device, group.impl(), std::move(flags)};
  return id;
}

void unregister_orphan_flags(uint64_t id) noexcept {
  if (id == 0) return;
  try {
    OrphanRegistry& R = orphans();
    std::shared_ptr<Group::Impl> g;  // goes after the lock (see stop_orphans)
    std::lock_guard<std::mutex> lock(R.mu);
    auto it = R.entries.find(id);
    if (it == R.entries.end()) return;
    // An aborted group's allocation flags the ranks gone by now once more: one that died after
    // the abort (the hook ran once) may have left a kernel on this memory too.
    g = it->second.group.lock();
    if (g && detail::aborted_state(g->abort.get()) != nullptr) {
      const std::vector<int> gone = detail::gone_local_ranks(*g);
      if (!gone.empty()) {
        int prev = -1;
        const bool have_prev = cudaGetDevice(&prev) == cudaSuccess;
        RelaxedCaptureMode relaxed;
        (void)store_flags(R, it->second, gone);
        (void)cudaGetLastError();
        if (have_prev) (void)cudaSetDevice(prev);
      }
    }
    R.entries.erase(it);
  } catch (...) {
  }
}

AbortSlot abort_slot(const Group& group) {
  if (!group.valid()) return {};
  const std::shared_ptr<detail::AbortState>& st = group.impl()->abort;
  int slot = st->device_slot.load(std::memory_order_acquire);
  int32_t* table = g_abort_table.load(std::memory_order_acquire);
  if (slot >= 0 && table != nullptr) return {table + slot, slot};
  {
    std::lock_guard<std::mutex> lock(g_mu);
    table = g_abort_table.load(std::memory_order_relaxed);
    if (table == nullptr) {
      table = host_mapped(sizeof(int32_t) * kAbortSlots, "abort table");
      g_abort_table.store(table, std::memory_order_release);
    }
    slot = st->device_slot.load(std::memory_order_relaxed);
    if (slot < 0) {
      auto& owners = abort_owners();
      if (owners.size() >= static_cast<size_t>(kAbortSlots)) {
        if (owners.size() == static_cast<size_t>(kAbortSlots)) {
          owners.emplace_back();  // say it once
          SYMMEM_LOG(WARN, GPU) << "group " << group.name() << ": the abort table's " << kAbortSlots
                                << " slots are taken: GPU waits of later groups are ended by "
                                   "their deadline only, not by abort()";
        }
        return {};
      }
      slot = static_cast<int>(owners.size());
      owners.push_back(st);
      st->device_slot.store(slot, std::memory_order_release);
    }
  }
  int32_t* word = table + slot;
  // Hooks outside g_mu (a hook may run at once, and set_aborted holds the state's mutex).
  for (detail::AbortState* s = st.get(); s != nullptr; s = s->parent.get()) {
    detail::add_abort_hook(*s, [word, slot] {
      *reinterpret_cast<volatile int32_t*>(word) = 1;
      stop_orphans(slot);  // NOTE [orphan stop flags]
    });
  }
  detail::watch_peer_liveness(group);
  return {word, slot};
}

void raise_device_timeout(std::string_view op, int rank, int32_t current_slot) {
  int32_t* r = g_record.load(std::memory_order_acquire);
  if (r == nullptr) return;
  volatile int32_t* v = r;
  const int32_t flag = v[0];
  if (flag == 0) return;
  std::atomic_thread_fence(std::memory_order_acquire);
  const int32_t who = v[1], channel = v[2], peer = v[3];
  v[1] = 0;
  v[2] = 0;
  v[3] = 0;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  v[0] = 0;
  if (flag >= kDeviceAbortFlagBase) {
    const int32_t slot = flag - kDeviceAbortFlagBase;
    std::shared_ptr<detail::AbortState> st;
    {
      std::lock_guard<std::mutex> lock(g_mu);
      auto& owners = abort_owners();
      if (slot >= 0 && static_cast<size_t>(slot) < owners.size()) st = owners[slot].lock();
    }
    const detail::AbortState* a = st ? detail::aborted_state(st.get()) : nullptr;
    if (current_slot >= 0 && slot != current_slot) {
      SYMMEM_LOG(WARN, GPU) << "rank " << rank << ": a GPU wait of another group ("
                            << (st ? st->group_name : std::string("gone"))
                            << ") was ended by its abort; not this op's error";
      return;
    }
    std::ostringstream os;
    os << "device-side wait ended by the abort of its group (rank " << who << " waited on channel "
       << channel << " for rank " << peer << "): " << (a ? a->reason : std::string("aborted"));
    throw_error(a ? a->code : ErrorCode::Aborted, op, rank, os.str());
  }
  std::ostringstream os;
  if (channel == kernels::kRefuseChannel) {
    os << "device-side wait timed out: rank " << who << " refused an op's arguments and waited for "
       << "rank " << peer << " to start the same op (NOTE [refused ops]), which it did not before "
       << "the deadline (SYMMEM_TIMEOUT_MS or the call's timeout): did that rank skip the op, or "
          "throw before its kernel without telling? The group's GPU ops are out of step: use a "
          "new group";
    throw_error(ErrorCode::Timeout, op, rank, os.str());
  }
  os << "device-side wait timed out: rank " << who << " waited on channel " << channel
     << " for rank " << peer << " (signal pad slot " << channel << " * world_size + " << peer
     << "); the peer did not reach the matching put_signal/wait_signal/barrier before the "
        "deadline (SYMMEM_TIMEOUT_MS or the call's timeout). The kernel returned without "
        "finishing; this allocation's signal pad may hold a stale signal";
  throw_error(ErrorCode::Timeout, op, rank, os.str());
}

uint64_t timeout_to_ns(Millis timeout) {
  // resolve_timeout clamps to kMaxTimeout (ten years), far below 2^64 ns.
  const int64_t ms = detail::resolve_timeout(timeout).count();
  return ms <= 0 ? 1 : static_cast<uint64_t>(ms) * 1000000ull;
}

}  // namespace symmem::cuda
