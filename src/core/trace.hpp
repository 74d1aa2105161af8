#pragma once

// The flight recorder (internal): per group, a ring of the most recent ops; its dumps; the
// per-op metrics file.
//
// NOTE [flight recorder]
// Every group whose process runs with SYMMEM_TRACE_BUFFER > 0 (or SYMMEM_TRACE_FILE set) owns a
// FlightRecorder, made with the group. It keeps the last SYMMEM_TRACE_BUFFER ops of the group in
// a ring allocated once (calloc: pages are touched only as the ring fills); recording an op
// allocates nothing and takes no lock:
//   - the group's collectives (every op of ops.hpp but put/get), its barrier op and its user
//     allocations ("alloc"; workspaces are internal and not recorded) take the next `seq`
//     (1-based, one atomic add). Every rank makes the same collective calls in the same order,
//     so every rank numbers them alike;
//   - one-sided ops (put, get) are recorded in the ring but take no number of their own: their
//     entry carries the seq of the group's latest collective and "one_sided": true, and they
//     move neither last_enqueued nor last_completed, so the numbering stays the same on ranks
//     that make different numbers of one-sided calls;
//   - each entry is written by the thread running the op, under a per-entry sequence lock
//     (`version` odd while being written); a dump copies entries without stopping anyone and
//     retries an entry caught mid-write.
// States: host ops are synchronous (enqueued at the call, started once the arguments are
// agreed and the backend runs, completed or failed when the call returns). GPU ops (device
// cuda:k) are "enqueued" when launched: the host does not wait for them. NOTE [device timestamps]
// says how they become started/completed.
//
// Dumps (SYMMEM_TRACE_DIR set; format: docs/debugging.md, "Flight-recorder dump format"): the
// process writes DIR/rank<R>.json (R: its global rank) with every live group's ring
//   - when an op, barrier or allocation fails with Timeout or PeerFailure (after recording the
//     failure, before the error leaves the library), reason "timeout" / "peer_failure";
//   - on SIGUSR1 (the handler only writes a byte to a pipe; a dumper thread writes the file),
//     reason "signal". The handler is installed only when SYMMEM_TRACE_DIR is set and SIGUSR1
//     has its default action (a program's own handler is left alone);
//   - when the process's root group is destroyed, or at exit if a group is still alive then,
//     reason "exit", unless the process already wrote a failure dump (that file is kept: its
//     reason and error say what went wrong; the rings were frozen by the failure anyway).
// A dump never throws and never waits more than ~100 ms: up to 30 for the GPU backends' flush
// of device times (NOTE [device timestamps]), the rest for the registry of recorders; it writes
// rank<R>.json.tmp and renames it.
//
// NOTE [device timestamps]
// A recorder with a ring also owns `times`, one DeviceTimes (symmem/backend.hpp) per ring slot,
// in page-aligned host memory. A GPU op gets its entry's slot, zeroed, in OpArgs::device_times
// (not during CUDA graph capture: a replayed kernel would write into a slot reused by later
// ops). The cuda backend (and the nccl backend on its LSA path, which runs the same kernels)
// registers the ring once (cudaHostRegister, mapped), measures once per GPU the offset of
// %globaltimer to CLOCK_REALTIME, stores it in the slot with armed = 1, and passes the slot to
// the kernel (SyncArgs::times): block 0 writes start when it begins. The last block to finish
// parks end in the workspace's control region (device memory) with the slot's address, and the
// next kernel on that workspace moves it into the slot as it starts: a store to host memory
// at a kernel's end would hold its completion for the PCIe write (measured: about 0.25 us per
// op on an H200), one at its start is done long before the kernel ends. A workspace replaced by
// a larger one hands its parked end to the new one. So an op's end reaches the host when the
// group's next GPU op starts; for the last op of all, the backend registers a flush
// (add_device_times_flush) that copies the parked ends on a stream of its own, beside a kernel
// that may be stuck. The recorder calls it, bounded, before a dump and before the metrics lines
// of a group's end and of the exit. Nothing waits for the times otherwise: a dump reads the
// slots it copies (read lazily), and an armed entry becomes "started" (start written) or
// "completed" (an end not before its start: a slot reused after the ring wrapped may first get
// an older op's end) with start_ns / end_ns on the host clock; last_completed then counts the
// GPU's progress too. With SYMMEM_TRACE_FILE set, the group's next ops (and the group's end,
// and the exit) write the metrics lines of the GPU ops whose end has arrived, with the
// device's start-to-end time as "us". A kernel whose wait times out sets armed = 2: the entry
// is "failed" ("a wait of its GPU kernel timed out") and gets no metrics line; a kernel still
// waiting is "started", which is what a user looking for the stuck op wants to see. The slot is
// armed only where a kernel taking SyncArgs is launched (get_ws in cuda_ops.cu): ops that
// launch none (count 0, put/get and world size 1 copies, NCCL's own collectives, nvshmem) stay
// "enqueued" and have no metrics line. Once a ring was handed to a backend it is never
// unmapped (a registered range must not be freed under CUDA).
//
// NOTE [nvtx ranges]
// With an NVTX tool attached (NVTX_INJECTION64_PATH set: nsys, or the test's injection library)
// and NVTX3 headers at build time (SYMMEM_HAVE_NVTX), every group gets a recorder (capacity 0
// when SYMMEM_TRACE_BUFFER is 0) and each recorded op, barrier and allocation is one range in
// NVTX domain "symmem", pushed when the backend starts it and popped when the call returns. Its
// message is "<op> key=value ..." with bytes, dtype, count, redop, algo, backend, device, group
// and seq (the fields the op has); its payload is the byte count (uint64). The GPU backends'
// kernel launches are nested ranges "kernel <name>" (KernelRange), the group rendezvous
// "group_create rendezvous" and "group_split rendezvous" (NvtxRange). Without a tool nothing is
// formatted: the cost is one load of a cached flag per op. Without the headers the ranges are
// compiled out (nvtx_compiled() false).
//
// The failed entry's "waiting_for" comes from a WaitNote: the waits that time out or find a
// dead peer (CPU pad syncs, host backend signal waits, store exchanges) note the ranks they
// waited for just before they throw; TraceScope::failed() takes the note made by its thread
// since the op began.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "symmem/backend.hpp"
#include "symmem/error.hpp"
#include "symmem/export.hpp"
#include "symmem/types.hpp"

namespace symmem::detail {

// ---- NVTX (NOTE [nvtx ranges]) ---------------------------------------------------------------
SYMMEM_API bool nvtx_compiled() noexcept;  // built with the NVTX3 headers
SYMMEM_API bool nvtx_enabled() noexcept;   // compiled and a tool is attached (cached)
// A range in domain "symmem" with `message` (copied by NVTX) while alive; nothing without a tool.
class SYMMEM_API NvtxRange {
 public:
  explicit NvtxRange(const char* message, uint64_t payload = 0) noexcept;
  ~NvtxRange();
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;

 private:
  bool on_ = false;
};
// A GPU kernel launch: range "kernel <name> blocks=<n>".
class SYMMEM_API KernelRange {
 public:
  KernelRange(const char* name, int blocks) noexcept;
  ~KernelRange();
  KernelRange(const KernelRange&) = delete;
  KernelRange& operator=(const KernelRange&) = delete;

 private:
  bool on_ = false;
};

// ---- wait notes -------------------------------------------------------------------------------
inline constexpr int kWaitNoteRanks = 16;

// Called by a wait right before it throws Timeout/PeerFailure: the ranks it was waiting for.
// `global`: the ranks are global ranks; else ranks of the group the wait belongs to (the
// recorder maps them). Never throws; keeps at most kWaitNoteRanks ranks.
SYMMEM_API void note_waiting_for(const int* ranks, int n, bool global) noexcept;
inline void note_waiting_for(const std::vector<int>& ranks, bool global) noexcept {
  note_waiting_for(ranks.data(), static_cast<int>(ranks.size()), global);
}

// ---- entries ----------------------------------------------------------------------------------
enum class TraceState : uint8_t { enqueued, started, completed, failed };
inline constexpr int kTraceAlloc = -2;  // TraceOp::op of an allocation rendezvous ("alloc")
inline constexpr size_t kTraceErrorBytes = 240;

// What the op path knows of an op when it is called.
struct TraceOp {
  int op = 0;  // an OpKind value, or kTraceAlloc
  int dtype = -1;
  int redop = -1;
  int algo = -1;
  int root = -1;
  uint64_t count = 0;
  bool one_sided = false;
};

struct TraceEntry {
  std::atomic<uint32_t> version;  // sequence lock: odd while the owner writes the entry
  TraceState state;
  uint8_t one_sided;
  uint8_t n_waiting;
  uint8_t device_type;  // DeviceType
  int32_t op;
  int32_t dtype, redop, algo, root;
  int32_t device_index;
  uint64_t seq;
  uint64_t count, bytes, stream;
  int64_t enqueue_ns, start_ns, end_ns;  // ticks (NOTE [recorder clock], trace.cpp); 0: not yet
  char backend[16];
  int32_t waiting_for[kWaitNoteRanks];  // global ranks
  char error[kTraceErrorBytes];
};

// A plain copy of an entry, as a dump reads it.
struct TraceEntryCopy {  // times in CLOCK_REALTIME ns (0: none)
  TraceState state;
  bool one_sided;
  int n_waiting;
  int device_type, device_index;
  int op, dtype, redop, algo, root;
  uint64_t seq, count, bytes, stream;
  int64_t enqueue_ns, start_ns, end_ns;
  char backend[16];
  int32_t waiting_for[kWaitNoteRanks];
  char error[kTraceErrorBytes];
};

class FlightRecorder;

// ---- the op path's handle on one recorded op --------------------------------------------------
// begin() at the call, start() when the backend is about to run, then completed() (host ops),
// launched() (GPU ops) or failed(). With no recorder every call is a no-op.
class SYMMEM_API TraceScope {
 public:
  explicit TraceScope(FlightRecorder* rec) noexcept : rec_(rec) {}
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

  bool active() const noexcept { return rec_ != nullptr; }
  void begin(const TraceOp& op) noexcept {
    if (rec_) begin_(op);
  }
  // The arguments are agreed and the backend runs now. `backend`: its name (copied); `count`:
  // elements as the op's count rule has them (all_to_all_v's is known only now); `bytes`: the
  // message size (metrics' algbw); `synchronous`: the host waits for the op (host ops and
  // allocations; GPU ops are only enqueued, and stay "enqueued").
  void start(const std::string& backend, Device device, const void* stream, uint64_t count,
             uint64_t bytes, bool synchronous) noexcept {
    if (rec_) start_(backend.c_str(), device, stream, count, bytes, synchronous);
  }
  void completed() noexcept {
    if (rec_) finish_(true);
  }
  // A GPU op was enqueued on its stream (NOTE [device timestamps]).
  void launched() noexcept {
    if (rec_) finish_(false);
  }
  // Records the failure; on Timeout/PeerFailure also dumps (SYMMEM_TRACE_DIR set).
  void failed(const Error& e) noexcept {
    if (rec_) failed_(e.code(), e.what());
  }
  void failed(const char* what) noexcept {
    if (rec_) failed_(ErrorCode::Internal, what);
  }
  // After start() of a GPU op: its device-times slot and the ring holding it (null: none).
  DeviceTimes* device_times() const noexcept { return times_; }
  void* device_times_ring() const noexcept;
  size_t device_times_ring_bytes() const noexcept;
  // The entry's backend/device when the op failed before start() (no-op after it).
  void set_backend(const std::string& backend, Device device) noexcept {
    if (rec_ && e_) set_backend_(backend.c_str(), device);
  }
  // The algorithm the backend ran (it resolves Algo::automatic), before completed()/launched().
  void set_algo(int algo) noexcept {
    if (rec_ && e_) set_algo_(algo);
  }

 private:
  void begin_(const TraceOp& op) noexcept;
  void start_(const char* backend, Device device, const void* stream, uint64_t count,
              uint64_t bytes, bool synchronous) noexcept;
  void finish_(bool completed) noexcept;
  void set_algo_(int algo) noexcept;
  void failed_(ErrorCode code, const char* what) noexcept;
  void set_backend_(const char* backend, Device device) noexcept;

  void nvtx_push_(const char* backend, Device device, uint64_t count, uint64_t bytes) noexcept;

  FlightRecorder* rec_;
  TraceEntry* e_ = nullptr;
  TraceOp op_{};                  // as begun (the NVTX message)
  DeviceTimes* times_ = nullptr;  // a GPU op's device-times slot
  bool nvtx_ = false;             // a range is pushed (NOTE [nvtx ranges])
  uint64_t seq_ = 0;
  int64_t begin_ns_ = 0;
  bool one_sided_ = false;
  bool started_ = false;
};

// ---- the recorder ---------------------------------------------------------------------------
struct TraceGroupInfo {
  std::string name;
  int rank = -1;
  int world_size = 0;
  std::vector<int> global_ranks;
  int root_world_size = 0;  // world size of the process's root group (the dump's world_size)
};

// A recorder for a new group, registered for dumps; null when SYMMEM_TRACE_BUFFER is 0 and
// SYMMEM_TRACE_FILE unset. Reads the settings (may throw InvalidArgument on a bad value).
SYMMEM_API std::unique_ptr<FlightRecorder> make_flight_recorder(TraceGroupInfo info);

class SYMMEM_API FlightRecorder {
 public:
  FlightRecorder(TraceGroupInfo info, size_t capacity);
  ~FlightRecorder();  // unregisters; waits for a dump in progress
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  const TraceGroupInfo& info() const noexcept { return info_; }
  size_t capacity() const noexcept { return capacity_; }
  uint64_t last_enqueued() const noexcept { return seq_.load(std::memory_order_relaxed); }
  uint64_t last_completed() const noexcept { return completed_.load(std::memory_order_relaxed); }
  // The ring's entries, oldest first (at most capacity()).
  std::vector<TraceEntryCopy> entries() const;
  // Writes the metrics lines of GPU ops whose kernels have ended since the last call, oldest
  // first, stopping at the first one still running (NOTE [device timestamps]).
  void report_gpu_metrics(int fd) noexcept;

 private:
  friend class TraceScope;
  TraceEntry* slot(uint64_t n) noexcept { return &ring_[n % capacity_]; }
  DeviceTimes* times_for(const TraceEntry* e) noexcept;  // the entry's slot, zeroed, handed out

  TraceGroupInfo info_;
  size_t capacity_;
  TraceEntry* ring_ = nullptr;    // capacity_ entries (none when 0)
  DeviceTimes* times_ = nullptr;  // capacity_ slots, page-aligned (NOTE [device timestamps])
  size_t times_bytes_ = 0;
  std::atomic<bool> times_handed_{false};  // given to a backend: never unmapped
  std::atomic<uint64_t> seq_{0};           // last seq handed out
  std::atomic<uint64_t> slots_{0};         // entries ever written
  std::atomic<uint64_t> completed_{0};     // highest completed seq
  std::atomic<uint64_t> gpu_metrics_{0};   // slots before it: GPU metrics lines done
  std::atomic<bool> reporting_{false};     // a thread runs report_gpu_metrics
};

// Writes DIR/rank<R>.json now (SYMMEM_TRACE_DIR set; else nothing). `reason`: one of the
// format's reasons; `error`: the error text or null. Never throws; false when nothing was
// written.
SYMMEM_API bool dump_flight_recorders(const char* reason, const char* error) noexcept;
// The same for a failure ("timeout", "peer_failure", "abort"): once one is written, the exit
// dump does not overwrite it (the state at the failure is what symmem-trace must read).
SYMMEM_API bool dump_flight_recorders_on_failure(const char* reason, const char* error) noexcept;

// The dump as it would be written (for tests): the JSON text.
SYMMEM_API std::string flight_recorder_json(const char* reason, const char* error);

// A GPU backend's flush of the device times still in device memory (NOTE [device timestamps]):
// waits at most `wait_ms`, never throws. Up to 4 are kept (one per plugin); a repeat is ignored.
using DeviceTimesFlush = void (*)(int wait_ms) noexcept;
SYMMEM_API void add_device_times_flush(DeviceTimesFlush flush) noexcept;

// The root group of the process is going away: the exit dump (NOTE [flight recorder]).
SYMMEM_API void flight_recorder_exit_dump() noexcept;

// Forgets that a failure dump was written and closes the metrics file (tests only).
SYMMEM_API void reset_trace_for_testing() noexcept;

}  // namespace symmem::detail
