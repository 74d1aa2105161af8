// The GPU collectives of the cuda backend (and of nccl/nvshmem where peers are reachable):
// chooses the algorithm, the zero-copy or staged buffers and the grid, then enqueues one kernel
// of src/cuda/kernels/ on the op's stream. Nothing here synchronises the stream or allocates
// device memory during CUDA graph capture.
//
// NOTE [zero-copy agreement]
// The core does not make GPU ranks agree on their arguments (their ops are asynchronous), so
// each rank decides alone whether its send/recv lie in symmetric memory. A kernel that reads
// or writes peers' user buffers needs every rank to have decided the same way, at the same
// offset of the same allocation: every barrier kernel publishes {alloc id, offset} of what it
// uses zero-copy and checks at its first barrier that all ranks published the same (a tag of it
// rides on every barrier flag; NOTE [barrier flags] in kernels/common.cuh). On a
// mismatch no rank moves data and the op error record is set; the next synchronising call or
// Group::check_async_error() throws InvalidArgument naming the rank that differs (NOTE
// [device-detected errors]). Pass the same kind of buffer on every rank (symmetric at the same
// offset, or ordinary memory everywhere). The same descriptor check carries a refused op to
// the barrier kernels (NOTE [refused ops] in kernels/refuse.cu).
//
// NOTE [stream order]
// Every kernel of a group's workspace reads the workspace epoch when it starts and the last of
// its blocks advances it (kernels.hpp), and its blocks meet the peers' on the workspace's flags
// and LL buffers. The ops of one group must therefore run one after the other on the device.
// The host parts of a group's ops already run one at a time in a process (NOTE [one thread per
// group] in core/ops.cpp); this orders their kernels too, whatever streams they come on:
//   - after each collective or barrier of a group, an event (one per group, no timing) is
//     recorded on its stream, and the stream and its capture sequence are noted;
//   - an op on another stream (or in another capture state) first orders itself after that
//     event: an eager op after an eager one makes its stream wait for the event
//     (cudaStreamWaitEvent: the device waits, the host does not); an op being captured after an
//     eager one calls nothing (no synchronising call is permitted inside a capture, and a graph
//     cannot depend on work outside it): the caller launches the graph after that op, on its
//     stream or after synchronising it, as for any graph; an op
//     captured in the same capture sequence as the previous one (another stream forked into it)
//     waits for the event inside the graph; after an op captured in another sequence nothing is
//     done (that op runs when its graph is launched, which the caller orders, as for any graph).
// So ops of one group may come from several streams and threads; they are never interleaved on
// the device and never wait on each other in a cycle. The fast path (the same stream again) is a
// comparison and one cudaEventRecord.
//
// NOTE [device-detected errors]
// Some argument errors are found by the kernels: all_to_all_v's counts live in device memory,
// so their checks (capacity, negative counts, MPI-style count agreement) run on the device;
// the barrier kernels compare zero-copy descriptors (NOTE [zero-copy agreement]); and a peer's
// refusal reaches the kernels that wait for it (NOTE [refused ops] in kernels/refuse.cu). They
// fill a host-mapped op error record (a device record, NOTE [device records] in
// symmem/device/sync.cuh, like the timeout record); nothing moves, and all_to_all_v's errors are
// recorded alike by every rank (NOTE [all_to_all_v]). The record is raised, as the host backend's
// error of the same op would be, by the calls that synchronise after their own work -- the
// group barrier and SymmetricMemory::barrier/put_signal/wait_signal on the null stream
// (synchronize_and_raise), nvshmem's synchronous ops -- and by Group::check_async_error()
// (synchronise the stream first). Never by an asynchronous op before it launches: ranks read the
// record at different moments, so one rank could throw (launching nothing) while its peer
// launched, and the peer's kernel would wait for nothing. (Device-side timeouts are still raised
// before the next launch: a timed-out group is out of step anyway.)
// Each group has its own record: the process's records are a table with one per abort slot
// (NOTE [device abort] in timeout_record.hpp) and one shared by groups without a slot (past the
// table's last), so a synchronising call of one group never raises, nor clears, what the device
// found in another group's op.

#include "cuda/cuda_ops.hpp"

#include <cuda_runtime_api.h>

#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/check.hpp"
#include "core/log.hpp"
#include "core/trace.hpp"
#include "core/tuning.hpp"
#include "cuda/kernels/kernels.hpp"
#include "cuda/kernels/tuning.hpp"
#include "cuda/timeout_record.hpp"
#include "symmem/env.hpp"
#include "symmem/error.hpp"
#include "symmem/op_table.hpp"

namespace K = symmem::cuda::kernels;
using symmem::Algo;
using symmem::DType;
using symmem::ErrorCode;
using symmem::OpArgs;
using symmem::OpKind;
using symmem::SymmetricMemory;

namespace {

[[noreturn]] void throw_cuda(const char* op, int rank, const char* call, cudaError_t e) {
  symmem::throw_error(
      ErrorCode::Cuda, op, rank,
      std::string(call) + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}
#define SYMMEM_GK_CHECK(c, call)                                                        \
  do {                                                                                  \
    cudaError_t symmem_gk_e_ = (call);                                                  \
    if (symmem_gk_e_ != cudaSuccess) throw_cuda((c).op, (c).rank, #call, symmem_gk_e_); \
  } while (0)

size_t align_up(size_t v, size_t a) {
  return (v + a - 1) / a * a;
}
bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}

class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&prev_) == cudaSuccess && prev_ != device) {
      cudaSetDevice(device);
    } else {
      prev_ = -1;
    }
  }
  ~DeviceGuard() {
    if (prev_ >= 0) cudaSetDevice(prev_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = -1;
};

// ---- process-wide state --------------------------------------------------------------------
struct WsState {
  std::weak_ptr<symmem::BackendMemory> mem;
  int32_t* timeout_record = nullptr;
  const int32_t* orphan_flag = nullptr;  // NOTE [orphan stop flags]; null on other backends
  char* local = nullptr;                 // this rank's workspace (its control region), on `device`
  int device = -1;
};

struct Process {
  std::mutex mu;
  // Host-mapped op error records, K::kOpErrorRecordInts each: [slot] for the group of that
  // abort slot, [kAbortSlots] for groups without one (NOTE [device-detected errors]).
  int32_t* op_error = nullptr;
  std::unordered_map<const symmem::BackendMemory*, WsState> ws;
  // The latest workspace seen per group (Group::Impl), to refuse growth during capture before
  // the core would try to allocate.
  // Also what a refused op (NOTE [refused ops]) needs of it, so that it takes no part in an
  // allocation: the peers' control and LL regions, the records and the device.
  struct GroupWs {
    std::weak_ptr<symmem::BackendMemory> mem;
    size_t bytes = 0;
    char* local = nullptr;
    K::PeerPtrs ctrl, ll;
    int32_t* timeout_record = nullptr;
    const int32_t* orphan_flag = nullptr;
    int device = -1;
  };
  std::unordered_map<const void*, GroupWs> group_ws;
  // NOTE [stream order]: per group (Group::Impl), where its last op went. Entries of groups that
  // are gone are erased when a new group's first op comes (references to the others stay
  // valid); one found for a new group at a gone group's address is reset.
  struct GroupOrder {
    std::weak_ptr<symmem::Group::Impl> group;
    cudaEvent_t event = nullptr;  // on `device`; recorded after the group's last op
    int device = -1;
    bool recorded = false;
    unsigned long long stream_id = 0;   // of the last op's stream (cudaStreamGetId: never reused)
    unsigned long long capture_id = 0;  // its capture sequence, 0: eager
  };
  std::unordered_map<const void*, GroupOrder> order;
  std::unordered_map<int, int> sm_count;  // per device
  int device_count = 0;
  // NOTE [device timestamps]: the recorders' rings registered here (host pointer -> device
  // address minus host pointer, kNoTimes when registration failed; and the ring's bytes) and
  // each GPU's offset of %globaltimer to CLOCK_REALTIME (kNoTimes: calibration failed).
  struct TimesRing {
    int64_t delta = 0;
    size_t bytes = 0;
  };
  std::unordered_map<const void*, TimesRing> times_rings;
  std::unordered_map<int, int64_t> clock_offset;
  // flush_parked_ends' copies: one non-blocking stream per device, pinned pairs, one at a time.
  std::mutex flush_mu;
  std::unordered_map<int, cudaStream_t> flush_streams;
  uint64_t* flush_buf = nullptr;  // 2 * flush_cap words, cudaHostAlloc
  size_t flush_cap = 0;
  bool flush_pending = false;  // a copy that timed out may still land in flush_buf
};
constexpr int64_t kNoTimes = INT64_MIN;
Process& proc() {
  static Process* p = new Process;  // never destroyed: kernels may reference its memory at exit
  return *p;
}

constexpr size_t kWidestElement = 16;  // bytes: complex128, the widest row of the dtype table

// One op call.
struct Call {
  const OpArgs& a;
  const char* op;
  int rank;
  int world;
  cudaStream_t stream;
  size_t es;
  uint64_t timeout_ns;
  int max_blocks;
  bool capturing;
  unsigned long long capture_id;   // of the capture sequence when capturing, else 0
  unsigned long long stream_id;    // cudaStreamGetId (unique in the process; NOTE [stream order])
  int sms = 0, ranks_per_gpu = 1;  // what max_blocks was made of (the SMs' share of each rank)
  // The op's kernel was enqueued (check_launch): from then on it is not refused (NOTE [refused
  // ops] in kernels/refuse.cu).
  mutable bool launched = false;
};

const char* op_error_name(K::OpErrorCode code) {
  switch (code) {
    case K::OpErrorCode::capacity:
      return "capacity";
    case K::OpErrorCode::count_mismatch:
      return "count_mismatch";
    case K::OpErrorCode::negative_count:
      return "negative_count";
    case K::OpErrorCode::zero_copy_mismatch:
      return "zero_copy_mismatch";
    case K::OpErrorCode::peer_refused:
      return "peer_refused";
    default:
      return "unknown";
  }
}

// The op error record of the group with abort slot `slot` (-1: none) in the table at `table`.
int32_t* op_error_record(int32_t* table, int32_t slot) {
  if (table == nullptr) return nullptr;
  const bool own = slot >= 0 && slot < symmem::cuda::kAbortSlots;
  return table + static_cast<size_t>(own ? slot : symmem::cuda::kAbortSlots) *
                     static_cast<size_t>(K::kOpErrorRecordInts);
}

}  // namespace

// Raises (and clears) a device-detected error of an earlier op of the group with abort slot
// `abort_slot` (NOTE [device-detected errors]).
void cuda_raise_op_error(std::string_view op, int rank, int32_t abort_slot) {
  int32_t* rec = op_error_record(proc().op_error, abort_slot);
  if (rec == nullptr) return;
  volatile int32_t* v = rec;
  if (v[0] != 1) return;
  std::atomic_thread_fence(std::memory_order_acquire);  // the payload was written before [0]
  const auto code = static_cast<K::OpErrorCode>(v[1]);
  const int who = v[2];
  const int peer = v[3];
  const int64_t va =
      static_cast<int64_t>(static_cast<uint64_t>(static_cast<uint32_t>(v[4])) |
                           (static_cast<uint64_t>(static_cast<uint32_t>(v[5])) << 32));
  const int64_t vb =
      static_cast<int64_t>(static_cast<uint64_t>(static_cast<uint32_t>(v[6])) |
                           (static_cast<uint64_t>(static_cast<uint32_t>(v[7])) << 32));
  for (int i = 1; i < K::kOpErrorRecordInts; ++i) v[i] = 0;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  v[0] = 0;
  if (code == K::OpErrorCode::peer_refused) {
    // NOTE [refused ops]: `who` threw its own error (ErrorCode vb) at the call; its peers raise
    // this one, of the same code, as the host agreement's peers do.
    const bool known_op = va >= 0 && va < static_cast<int64_t>(OpKind::kCount);
    const std::string refused = known_op ? symmem::to_string(static_cast<OpKind>(va)) : "an op";
    const ErrorCode ec = vb >= static_cast<int64_t>(ErrorCode::InvalidArgument) &&
                                 vb <= static_cast<int64_t>(ErrorCode::Aborted)
                             ? static_cast<ErrorCode>(vb)
                             : ErrorCode::InvalidArgument;
    symmem::throw_error(ec, op, rank,
                        "an earlier GPU op was refused by rank " + std::to_string(who) + ": " +
                            refused + ": rank " + std::to_string(who) +
                            " refused its arguments to this op (its own error names the "
                            "argument); no rank moved any data");
  }
  std::ostringstream os;
  os << "an earlier GPU op failed a device-side check (" << op_error_name(code) << ") on rank "
     << who << ": ";
  // all_to_all_v's errors are recorded by every rank, naming the rank at fault (`who`; NOTE
  // [all_to_all_v]): the culprit hears of its argument, the others of the culprit, as on host.
  const std::string by = "rank " + std::to_string(who) + "'s ";
  switch (code) {
    case K::OpErrorCode::capacity:
      os << "all_to_all_v: " << (who == rank ? std::string() : by)
         << "argument 'recv_capacity' = " << vb << " elements, but the ranks send " << va
         << " elements to "
         << (who == rank ? std::string("this rank") : "rank " + std::to_string(who))
         << "; no rank moved any data";
      break;
    case K::OpErrorCode::count_mismatch:
      if (who == rank) {
        os << "all_to_all_v: argument 'recv_counts' [" << peer << "] = " << vb << " but rank "
           << peer << " sends " << va << " elements to this rank";
      } else if (peer == rank) {
        os << "all_to_all_v: argument 'send_counts' [" << who << "] = " << va << " but rank " << who
           << " expects " << vb << " elements from this rank";
      } else {
        os << "all_to_all_v: ranks " << peer << " and " << who << " disagree: rank " << peer
           << " sends " << va << " elements to rank " << who << ", which expects " << vb;
      }
      os << "; no rank moved any data";
      break;
    case K::OpErrorCode::negative_count:
      os << "all_to_all_v: " << (who == rank ? std::string() : by) << "argument 'send_counts' ["
         << peer << "] = " << va << " is negative; no rank moved any data";
      break;
    case K::OpErrorCode::zero_copy_mismatch:
      os << "rank " << peer << " passed " << ((va & 1) ? "'recv'" : "'send'") << " as "
         << ((va >> 32) < 0 ? std::string("ordinary memory")
                            : "symmetric allocation #" + std::to_string(va >> 32) + " at offset " +
                                  std::to_string(vb))
         << ", differently from this rank: every rank must pass symmetric buffers at the same "
            "offset of the same allocation, or ordinary memory on every rank; no data moved";
      break;
    default:
      os << "code " << static_cast<int>(code);
  }
  symmem::throw_error(ErrorCode::InvalidArgument, op, rank, os.str());
}

namespace {

int sm_count(const Call& c, int device) {
  Process& P = proc();
  std::lock_guard<std::mutex> lock(P.mu);
  auto it = P.sm_count.find(device);
  if (it != P.sm_count.end()) return it->second;
  int n = 0;
  SYMMEM_GK_CHECK(c, cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
  if (P.device_count == 0) SYMMEM_GK_CHECK(c, cudaGetDeviceCount(&P.device_count));
  P.sm_count[device] = n;
  return n;
}

// Blocks per rank with `per_sm` 512-thread blocks per SM share: the GPU's SMs shared by the ranks
// on it (NOTE in kernels/tuning.hpp).
int blocks_per_rank(const Call& c, int per_sm) {
  return std::clamp(c.sms * per_sm / c.ranks_per_gpu, 1, K::kMaxBlocks);
}

Call make_call(const OpArgs& a) {
  const int rank = a.group->rank();
  const int world = a.group->world_size();
  Call c{a,
         symmem::to_string(a.kind),
         rank,
         world,
         static_cast<cudaStream_t>(a.stream),
         1,
         0,
         1,
         false,
         0,
         0};
  const bool typed = a.kind != OpKind::put && a.kind != OpKind::get && a.kind != OpKind::barrier;
  if (typed) {
    // An unknown dtype is refused by ktype(); until then (and for a refused op's workspace
    // size, NOTE [refused ops]) it counts as the widest.
    const symmem::DTypeInfo* t = symmem::find_dtype(a.dtype);
    c.es = t != nullptr ? t->size : kWidestElement;
  }
  c.timeout_ns = symmem::cuda::timeout_to_ns(a.timeout);  // resolved by the core, never 0
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long capture_id = 0;
  SYMMEM_GK_CHECK(c, cudaStreamGetCaptureInfo(c.stream, &status, &capture_id));
  c.capturing = status != cudaStreamCaptureStatusNone;
  c.capture_id = c.capturing ? capture_id : 0;
  if (c.capturing) {
    // cudaStreamGetId is refused inside a capture (seen on the H100); a captured stream cannot be
    // destroyed before its capture ends, so its handle names it for the capture's duration (bit
    // 63 keeps these apart from cudaStreamGetId's ids; NOTE [stream order]).
    c.stream_id =
        static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(c.stream)) | (1ull << 63);
  } else {
    SYMMEM_GK_CHECK(c, cudaStreamGetId(c.stream, &c.stream_id));
  }
  // Ranks sharing one GPU share its SMs (NOTE in tuning.hpp).
  const int sms = sm_count(c, a.device.index);
  const int devices = std::max(1, proc().device_count);
  const int local = std::max(1, a.group->local_world_size());
  const int per_gpu = std::max(1, (local + devices - 1) / devices);
  static const int per_sm =
      static_cast<int>(symmem::env::gpu_blocks_per_sm().value_or(K::kBlocksPerSm));
  c.sms = sms;
  c.ranks_per_gpu = per_gpu;
  c.max_blocks = blocks_per_rank(c, per_sm);
  return c;
}

int64_t realtime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// CLOCK_REALTIME minus %globaltimer on this GPU: a one-thread kernel on a private stream reads
// the timer between two host clock reads (best of 5; error within half the round trip, a few
// microseconds). kNoTimes when it cannot be measured within 1 s (a GPU full of waiting kernels).
int64_t measure_clock_offset() {
  uint64_t* h = nullptr;
  if (cudaHostAlloc(reinterpret_cast<void**>(&h), sizeof(uint64_t), cudaHostAllocMapped) !=
      cudaSuccess) {
    cudaGetLastError();
    return kNoTimes;
  }
  uint64_t* d = nullptr;
  cudaStream_t st = nullptr;
  int64_t best = kNoTimes, best_rtt = INT64_MAX;
  if (cudaHostGetDevicePointer(reinterpret_cast<void**>(&d), h, 0) == cudaSuccess &&
      cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) == cudaSuccess) {
    for (int i = 0; i < 5; ++i) {
      *reinterpret_cast<volatile uint64_t*>(h) = 0;
      const int64_t t0 = realtime_ns();
      if (K::launch_read_globaltimer(d, st) != 0) break;
      cudaError_t q = cudaErrorNotReady;
      while ((q = cudaStreamQuery(st)) == cudaErrorNotReady && realtime_ns() - t0 < 1000000000) {
      }
      const int64_t t1 = realtime_ns();
      if (q != cudaSuccess) break;
      const uint64_t g = *reinterpret_cast<volatile uint64_t*>(h);
      if (g != 0 && t1 - t0 < best_rtt) {
        best_rtt = t1 - t0;
        best = t0 + (t1 - t0) / 2 - static_cast<int64_t>(g);
      }
    }
  }
  cudaGetLastError();
  if (st != nullptr) {
    if (cudaStreamQuery(st) == cudaSuccess) {
      cudaStreamDestroy(st);
      cudaFreeHost(h);
    }  // else: left to finish (and leaked) rather than freed under a pending kernel
  } else {
    cudaFreeHost(h);
  }
  return best;
}

// The recorder's flush (NOTE [device timestamps] in core/trace.hpp): copies every live
// workspace's parked end {slot's end as a device address, end ns} to the host and stores each
// into its slot. The copies run on a non-blocking stream of their own, beside a kernel that may
// be stuck; at most `wait_ms` in all, for the lock and the copies. Never throws.
void flush_parked_ends(int wait_ms) noexcept {
  Process& P = proc();
  const int64_t deadline = realtime_ns() + static_cast<int64_t>(wait_ms) * 1000000;
  std::unique_lock<std::mutex> flush(P.flush_mu, std::defer_lock);
  while (!flush.try_lock()) {
    if (realtime_ns() > deadline) return;
    std::this_thread::yield();
  }
  struct Src {
    std::shared_ptr<symmem::BackendMemory> mem;  // alive during the copy
    const char* pair;
    int device;
  };
  std::vector<Src> srcs;
  std::vector<std::pair<const char*, Process::TimesRing>> rings;
  try {
    std::unique_lock<std::mutex> lock(P.mu, std::defer_lock);
    while (!lock.try_lock()) {
      if (realtime_ns() > deadline) return;
      std::this_thread::yield();
    }
    for (auto& [key, ws] : P.ws) {
      (void)key;
      if (auto m = ws.mem.lock(); m != nullptr && ws.local != nullptr && ws.device >= 0) {
        srcs.push_back(Src{std::move(m), ws.local + K::kCtrlParkedEndOffset, ws.device});
      }
    }
    for (const auto& [ring, r] : P.times_rings) {
      if (r.delta != kNoTimes) rings.emplace_back(static_cast<const char*>(ring), r);
    }
    if (srcs.empty() || rings.empty()) return;
    if (P.flush_pending) {  // the last flush gave up on a copy: is it done now?
      for (auto& [d, st] : P.flush_streams) {
        (void)d;
        if (cudaStreamQuery(st) == cudaErrorNotReady) return;
      }
      P.flush_pending = false;
    }
    if (P.flush_cap < srcs.size()) {
      void* h = nullptr;
      const size_t cap = std::max<size_t>(srcs.size(), 16);
      if (cudaHostAlloc(&h, cap * 2 * sizeof(uint64_t), cudaHostAllocPortable) != cudaSuccess) {
        cudaGetLastError();
        return;
      }
      cudaFreeHost(P.flush_buf);
      P.flush_buf = static_cast<uint64_t*>(h);
      P.flush_cap = cap;
    }
    lock.unlock();
    int prev = -1;
    cudaGetDevice(&prev);
    std::vector<cudaStream_t> used;
    for (size_t i = 0; i < srcs.size(); ++i) {
      P.flush_buf[2 * i] = 0;
      if (cudaSetDevice(srcs[i].device) != cudaSuccess) continue;
      cudaStream_t& st = P.flush_streams[srcs[i].device];
      if (st == nullptr && cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess) {
        st = nullptr;
        continue;
      }
      if (cudaMemcpyAsync(P.flush_buf + 2 * i, srcs[i].pair, 2 * sizeof(uint64_t),
                          cudaMemcpyDeviceToHost, st) == cudaSuccess &&
          std::find(used.begin(), used.end(), st) == used.end()) {
        used.push_back(st);
      }
    }
    if (prev >= 0) cudaSetDevice(prev);
    for (cudaStream_t st : used) {
      cudaError_t q = cudaErrorNotReady;
      while ((q = cudaStreamQuery(st)) == cudaErrorNotReady && realtime_ns() < deadline) {
        std::this_thread::yield();
      }
      if (q == cudaErrorNotReady) {
        P.flush_pending = true;
        cudaGetLastError();
        return;
      }
    }
    cudaGetLastError();
    for (size_t i = 0; i < srcs.size(); ++i) {
      const uint64_t to = P.flush_buf[2 * i], end = P.flush_buf[2 * i + 1];
      if (to == 0) continue;
      for (const auto& [ring, r] : rings) {  // the slot's host address, in a registered ring
        const char* host = reinterpret_cast<const char*>(to) - r.delta;
        if (host >= ring && host + sizeof(uint64_t) <= ring + r.bytes) {
          *reinterpret_cast<volatile uint64_t*>(const_cast<char*>(host)) = end;
          break;
        }
      }
    }
  } catch (...) {
  }
}

// The op's device-times slot as the kernel's address, armed, or null (NOTE [device timestamps]
// in core/trace.hpp). Not during capture: a graph replays into a slot later ops reuse.
uint64_t* arm_device_times(const Call& c) {
  symmem::DeviceTimes* t = c.a.device_times;
  if (t == nullptr || c.capturing || c.a.device_times_ring == nullptr) return nullptr;
  // The last ring and GPU this thread saw (a handed-out ring is never unmapped, so its address
  // keeps its registration): no lock and no lookup on the op path after the first op.
  // One thread_local (in a plugin each is a __tls_get_addr call).
  struct Last {
    const void* ring = nullptr;
    int device = -1;
    int64_t delta = kNoTimes, offset = kNoTimes;
  };
  thread_local Last last;
  int64_t delta = kNoTimes, offset = kNoTimes;
  if (last.ring == c.a.device_times_ring && last.device == c.a.device.index) {
    delta = last.delta;
    offset = last.offset;
  } else {
    Process& P = proc();
    std::lock_guard<std::mutex> lock(P.mu);
    auto r = P.times_rings.find(c.a.device_times_ring);
    if (r == P.times_rings.end()) {
      int64_t dl = kNoTimes;
      void* dptr = nullptr;
      if (cudaHostRegister(c.a.device_times_ring, c.a.device_times_ring_bytes,
                           cudaHostRegisterMapped | cudaHostRegisterPortable) == cudaSuccess &&
          cudaHostGetDevicePointer(&dptr, c.a.device_times_ring, 0) == cudaSuccess) {
        dl = static_cast<char*>(dptr) - static_cast<char*>(c.a.device_times_ring);
        symmem::detail::add_device_times_flush(&flush_parked_ends);
      } else {
        SYMMEM_LOG(INFO, INIT) << "flight recorder: cannot register its device-times ring ("
                               << cudaGetErrorString(cudaGetLastError())
                               << "); GPU ops stay 'enqueued' in dumps";
      }
      r = P.times_rings
              .emplace(c.a.device_times_ring, Process::TimesRing{dl, c.a.device_times_ring_bytes})
              .first;
    }
    delta = r->second.delta;
    auto o = P.clock_offset.find(c.a.device.index);
    if (o == P.clock_offset.end()) {
      o = P.clock_offset.emplace(c.a.device.index, measure_clock_offset()).first;
    }
    offset = o->second;
    last = Last{c.a.device_times_ring, c.a.device.index, delta, offset};
  }
  if (delta == kNoTimes || offset == kNoTimes) return nullptr;
  t->offset = offset;
  t->armed = 1;
  return reinterpret_cast<uint64_t*>(reinterpret_cast<char*>(t) + delta);
}

// Blocks for `work` items at `per_block` each, at most `cap` (0: the call's max_blocks).
int blocks_for(const Call& c, int64_t work, int64_t per_block, int cap = 0) {
  int64_t b = (work + per_block - 1) / per_block;
  return static_cast<int>(std::clamp<int64_t>(b, 1, cap > 0 ? cap : c.max_blocks));
}

void check_launch(const Call& c, int err, const char* what) {
  if (err != 0) throw_cuda(c.op, c.rank, what, static_cast<cudaError_t>(err));
  c.launched = true;
}

// Kernel names of the NVTX launch ranges (NOTE [nvtx ranges] in core/trace.hpp).
const char* kernel_name(K::ReduceMode m) {
  switch (m) {
    case K::ReduceMode::two_shot:
      return "reduce_two_shot";
    case K::ReduceMode::one_shot:
      return "reduce_one_shot";
    case K::ReduceMode::reduce_scatter:
      return "reduce_scatter";
  }
  return "reduce";
}
const char* kernel_name(K::MoveMode m) {
  switch (m) {
    case K::MoveMode::all_gather:
      return "move_all_gather";
    case K::MoveMode::all_to_all:
      return "move_all_to_all";
    case K::MoveMode::broadcast:
      return "move_broadcast";
    case K::MoveMode::barrier:
      return "move_barrier";
  }
  return "move";
}

K::PeerPtrs peers_of(const Call& c, const SymmetricMemory& m, int64_t offset) {
  K::PeerPtrs t;
  if (c.world <= K::kMaxInlinePeers) {
    for (int p = 0; p < c.world; ++p) {
      void* q = m.ptr(p);
      if (q == nullptr) {
        symmem::throw_error(ErrorCode::Unsupported, c.op, c.rank,
                            "rank " + std::to_string(p) +
                                "'s memory is not directly addressable from this rank; the "
                                "peer-pointer GPU collectives need every peer reachable");
      }
      t.inl[p] = static_cast<char*>(q) + offset;
    }
  } else {
    t.table = reinterpret_cast<char* const*>(m.ptrs_device());
    t.delta = offset;
    if (t.table == nullptr) {
      symmem::throw_error(ErrorCode::Unsupported, c.op, c.rank,
                          "the backend gives no device pointer table for this buffer");
    }
  }
  return t;
}

// The op's send or recv buffer used in place (it lies in symmetric memory): the peers'
// addresses at the same offset, after publishing {allocation, offset} in the descriptor slot of
// that side (desc[0..1] send, desc[2..3] recv; NOTE [zero-copy agreement]).
enum class Side { send, recv };
K::PeerPtrs zero_copy(const Call& c, K::SyncArgs& sync, Side side) {
  const bool recv = side == Side::recv;
  const SymmetricMemory& view = recv ? c.a.recv_sym : c.a.send_sym;
  const void* p = recv ? c.a.recv : c.a.send;
  const int64_t delta = static_cast<const char*>(p) - static_cast<const char*>(view.ptr(c.rank));
  sync.desc[recv ? 2 : 0] = static_cast<int64_t>(view.alloc_id());
  sync.desc[recv ? 3 : 1] = static_cast<int64_t>(view.offset()) + delta;
  return peers_of(c, view, delta);
}

// The group's workspace for this op, initialised on first use (NOTE [workspace layout]).
struct Ws {
  SymmetricMemory mem;
  K::WsLayout L;
  K::SyncArgs sync;
  char* local = nullptr;  // this rank's base
  K::PeerPtrs at(const Call& c, size_t offset) const { return peers_of(c, mem, offset); }
  char* data() const { return local + L.data_offset; }
};

[[noreturn]] void throw_warm_up(const Call& c, size_t bytes) {
  symmem::throw_invalid_argument(
      c.op, c.rank, "stream",
      "is being captured into a CUDA graph, but this op needs the group's GPU workspace to be "
      "set up or grown (to " +
          std::to_string(bytes) +
          " bytes), which cannot happen during capture: run the same ops once before capturing "
          "(warm up)");
}

Ws get_ws(const Call& c, size_t data_bytes) {
  Ws w;
  w.L = K::ws_layout(c.world);
  const size_t need = w.L.data_offset + data_bytes;
  Process& P = proc();
  const void* gkey = c.a.group->impl().get();
  // The group's latest workspace, looked up once: during capture it must be large enough
  // already; one about to be replaced by a larger one is kept until its parked end (NOTE [device
  // timestamps]) is carried into the new one below (its destructor synchronises the device).
  std::shared_ptr<symmem::BackendMemory> old_ws;
  char* old_local = nullptr;
  {
    std::lock_guard<std::mutex> lock(P.mu);
    auto it = P.group_ws.find(gkey);
    const bool known = it != P.group_ws.end();
    if (c.capturing && (!known || it->second.mem.expired() || it->second.bytes < need)) {
      throw_warm_up(c, need);
    }
    if (known && it->second.bytes < need) {
      old_ws = it->second.mem.lock();
      old_local = it->second.local;
    }
  }
  w.mem = c.a.workspace(need);
  w.local = static_cast<char*>(w.mem.ptr(c.rank));
  const auto& bm = w.mem.backend_memory();
  int32_t* trec = nullptr;
  const int32_t* orphan = nullptr;
  {
    std::unique_lock<std::mutex> lock(P.mu);
    auto it = P.ws.find(bm.get());
    if (it != P.ws.end() && it->second.mem.lock() == bm) {
      trec = it->second.timeout_record;
      orphan = it->second.orphan_flag;
    } else {
      if (c.capturing) throw_warm_up(c, need);
      if (P.op_error == nullptr) {
        constexpr size_t bytes =
            (symmem::cuda::kAbortSlots + 1) * K::kOpErrorRecordInts * sizeof(int32_t);
        void* h = nullptr;
        SYMMEM_GK_CHECK(c, cudaHostAlloc(&h, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
        std::memset(h, 0, bytes);
        P.op_error = static_cast<int32_t*>(h);
      }
      for (auto e = P.ws.begin(); e != P.ws.end();) {
        e = e->second.mem.expired() ? P.ws.erase(e) : std::next(e);
      }
      const symmem::DeviceHandle h = w.mem.device_handle();
      trec = h.timeout_record;
      orphan = h.orphan_flag;
      lock.unlock();
      // Zero the control and LL regions, then make sure every rank did before anyone writes.
      SYMMEM_GK_CHECK(c, cudaMemsetAsync(w.local, 0, w.L.data_offset, c.stream));
      if (old_ws != nullptr && old_ws != bm && old_local != nullptr) {
        SYMMEM_GK_CHECK(
            c,
            cudaMemcpyAsync(w.local + K::kCtrlParkedEndOffset, old_local + K::kCtrlParkedEndOffset,
                            2 * sizeof(uint64_t), cudaMemcpyDeviceToDevice, c.stream));
      }
      w.mem.barrier(0, c.a.timeout, c.a.stream);
      lock.lock();
      P.ws[bm.get()] = WsState{bm, trec, orphan, w.local, c.a.device.index};
    }
    w.sync.ctrl = peers_of(c, w.mem, 0);
    auto& g = P.group_ws[gkey];
    if (g.mem.lock() != bm) {
      g = Process::GroupWs{bm,   0,      w.local,         w.sync.ctrl, w.at(c, w.L.ll_offset),
                           trec, orphan, c.a.device.index};
    }
    g.bytes = std::max(g.bytes, w.mem.size());
  }
  w.sync.rank = c.rank;
  w.sync.world = c.world;
  w.sync.timeout_ns = c.timeout_ns;
  w.sync.timeout_record = trec;
  // NOTE [device abort] (timeout_record.hpp)
  const symmem::cuda::AbortSlot abort =
      c.a.group != nullptr ? symmem::cuda::abort_slot(*c.a.group) : symmem::cuda::AbortSlot{};
  w.sync.error_record = op_error_record(P.op_error, abort.slot);
  w.sync.abort_word = abort.word;
  w.sync.abort_slot = abort.slot;
  w.sync.orphan_flag = orphan;  // NOTE [orphan stop flags]
  w.sync.desc_offset = static_cast<uint32_t>(w.L.desc_offset);
  w.sync.op_kind = static_cast<int32_t>(c.a.kind);
  // Armed here, where a kernel that writes them is about to be launched: an op that launches none
  // (count 0, world size 1 copies) leaves its slot unarmed, so metrics lines do not wait on it.
  w.sync.times = arm_device_times(c);
  return w;
}

// The kernel type of an op's elements (NOTE [GPU dtypes] in cuda/gpu_rules.hpp). Reductions
// compute in the dtype, so they need a row with gpu 1 (the backends' rules refuse the others
// before this; checked again here). Ops that only move data take any row: the LL gather path is
// the only one that takes a type, and only for its element size, so a row without a kernel type
// runs as the kernel type of the same size, and an element wider than 8 bytes (complex128) as
// `units` 8-byte elements each.
struct KernelType {
  K::KType type;
  int64_t units = 1;  // kernel elements per element of the dtype
};
KernelType ktype(const Call& c) {
  const symmem::DTypeInfo& t = symmem::dtype_info(c.a.dtype);
  if (t.gpu_reduce) return {static_cast<K::KType>(c.a.dtype)};
  if (symmem::op_info(c.a.kind).reduces()) {
    symmem::throw_error(ErrorCode::Unsupported, c.op, c.rank,
                        std::string("the cuda kernels have no ") + c.op + " for dtype " +
                            t.short_name +
                            " (they move it but do not reduce it; the host "
                            "backend reduces it where its row says so)");
  }
  switch (t.size) {
    case 1:
      return {K::KType::f8e4m3};
    case 2:
      return {K::KType::f16};
    case 4:
      return {K::KType::i32};
    default:
      if (t.size % 8 == 0) return {K::KType::i64, static_cast<int64_t>(t.size / 8)};
      break;
  }
  symmem::throw_error(ErrorCode::Internal, c.op, c.rank,
                      std::string("dtype ") + t.short_name + " has an element size (" +
                          std::to_string(t.size) + " bytes) the cuda kernels cannot move");
}

size_t builtin_ll_threshold(int world) {
  for (const auto& t : K::kLLThresholds) {
    if (t.world == world) return t.ll_max_bytes;
  }
  for (const auto& t : K::kLLThresholds) {
    if (t.world == 0) return t.ll_max_bytes;
  }
  return 0;
}

// The tuning file's cuda entry `key` for this call's world size on this machine (the plugin's
// signature for the call's group and device), or nullopt.
std::optional<int64_t> tuned(const Call& c, const char* key) {
  char sig[512];
  const int n = cuda_tuning_signature(*c.a.group, c.a.device.index, sig, sizeof sig);
  if (n <= 0 || static_cast<size_t>(n) >= sizeof sig) return std::nullopt;
  return symmem::tuning::lookup("cuda", key, c.world, sig);
}

// The tuning file's `key` for this machine and c.world ranks, kept by the caller (one
// thread_local TunedEntry per key) until the world size or tuning::generation() moves:
// tuning::lookup takes a lock, and symmem-tune moves the generation with each override it
// measures. The cuda twin of tuning::host_value.
struct TunedEntry {
  explicit TunedEntry(const char* k) : key(k) {}
  const char* key;
  uint64_t gen = ~uint64_t{0};
  int world = -1;
  std::optional<int64_t> value;
};

std::optional<int64_t> tuned_entry(const Call& c, TunedEntry& e) {
  const uint64_t gen = symmem::tuning::generation();
  if (e.gen != gen || e.world != c.world) {
    e.value = tuned(c, e.key);
    e.gen = gen;
    e.world = c.world;
  }
  return e.value;
}

// The LL crossover of Algo::automatic: SYMMEM_GPU_LL_MAX_BYTES, else the tuning file's entry
// for this machine (symmem-tune), else the built-in table (NOTE [all-reduce tuning]). A
// process's groups of one size are taken to share GPUs alike.
size_t ll_threshold(const Call& c) {
  static const int64_t forced = symmem::env::gpu_ll_max_bytes().value_or(-1);
  if (forced >= 0) return static_cast<size_t>(forced);
  thread_local TunedEntry e("ll_max_bytes");
  const auto v = tuned_entry(c, e);
  return v && *v >= 0 ? static_cast<size_t>(*v) : builtin_ll_threshold(c.world);
}

// The two-shot all_reduce's blocks per SM share for a message of `bytes` (NOTE [two-shot
// blocks] in kernels/tuning.hpp): SYMMEM_GPU_BLOCKS_PER_SM decides every kernel when set (it is
// in c.max_blocks already); else the tuning file's "two_shot.blocks_per_sm" for this world size
// from "two_shot.blocks_min_bytes" up; else c.max_blocks (kBlocksPerSm).
int two_shot_max_blocks(const Call& c, size_t bytes) {
  static const bool forced = symmem::env::gpu_blocks_per_sm().has_value();
  if (forced) return c.max_blocks;
  thread_local TunedEntry per_sm("two_shot.blocks_per_sm"), from("two_shot.blocks_min_bytes");
  const auto n = tuned_entry(c, per_sm);
  if (!n || *n < 1 || *n > K::kMaxBlocksPerSm) return c.max_blocks;
  const auto min_bytes = tuned_entry(c, from);
  if (min_bytes && *min_bytes > 0 && bytes < static_cast<size_t>(*min_bytes)) return c.max_blocks;
  return blocks_per_rank(c, static_cast<int>(*n));
}

void copy_async(const Call& c, void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
  K::CopyArgs k;
  k.dst = static_cast<char*>(dst);
  k.src = static_cast<const char*>(src);
  k.bytes = static_cast<int64_t>(bytes);
  const int blocks = blocks_for(c, k.bytes, 16 * K::kThreads * 4);
  symmem::detail::KernelRange range("copy", blocks);  // NOTE [nvtx ranges]
  check_launch(c, K::launch_copy(k, blocks, c.stream), "launch_copy");
}

// ---- LL one-shot family ---------------------------------------------------------------------
void run_ll(const Call& c, const void* send, void* recv, size_t count, int64_t send_stride,
            int64_t recv_stride, bool reduce) {
  Ws w = get_ws(c, 0);
  K::LLArgs k;
  k.sync = w.sync;
  k.ll = w.at(c, w.L.ll_offset);
  k.slot_bytes = w.L.ll_slot_bytes;
  k.send = static_cast<const char*>(send);
  k.recv = static_cast<char*>(recv);
  const KernelType kt = ktype(c);
  k.count = static_cast<int64_t>(count) * kt.units;
  k.send_stride = send_stride;
  k.recv_stride = recv_stride;
  k.reduce = reduce;
  k.red = static_cast<K::KRed>(c.a.redop);
  const int64_t units = static_cast<int64_t>((count * c.es + 7) / 8);
  const int blocks = blocks_for(c, units, K::kThreads);
  symmem::detail::KernelRange range(reduce ? "ll_reduce" : "ll_gather",
                                    blocks);  // NOTE [nvtx ranges]
  check_launch(c, K::launch_ll(k, kt.type, blocks, c.stream), "launch_ll");
}

bool ll_fits(const Call& c, size_t piece_bytes, bool forced) {
  const size_t cap = K::ws_layout(c.world).ll_capacity();
  return piece_bytes <= (forced ? cap : std::min(cap, ll_threshold(c)));
}

// The op's piece in bytes (count elements), or SIZE_MAX when it overflows (only a refused op's
// count can: the core checks the others).
size_t piece_bytes(const Call& c) {
  size_t n = 0;
  if (__builtin_mul_overflow(c.a.count, c.es, &n) || n > (size_t{1} << 48)) return SIZE_MAX;
  return n;
}

// Whether the op takes the LL one-shot (NOTE [all-reduce tuning]); the same answer on every rank
// for the same arguments.
bool ll_path(const Call& c) {
  const size_t n = piece_bytes(c);
  switch (c.a.kind) {
    case OpKind::all_reduce:
      return c.a.algo != Algo::two_shot && ll_fits(c, n, c.a.algo == Algo::one_shot);
    case OpKind::reduce_scatter:
    case OpKind::all_gather:
    case OpKind::all_to_all:
      return ll_fits(c, n, false);
    default:
      return false;
  }
}

// What the op asks of the workspace's data area, in bytes (`ll`: ll_path(c)): a function of the
// arguments every rank passes alike, never of this rank's zero-copy decisions, since growth is
// collective (all_to_all_v's zero copy is the exception: its staging area is this rank's own).
// SIZE_MAX when it overflows.
size_t ws_data_bytes(const Call& c, bool ll) {
  const size_t n = piece_bytes(c);
  const size_t world = static_cast<size_t>(c.world);
  if (n == SIZE_MAX) return SIZE_MAX;
  switch (c.a.kind) {
    case OpKind::all_reduce:
      return ll ? 0 : 2 * align_up(n, 256);  // [in staging][out staging / one-shot staging]
    case OpKind::reduce_scatter:
      return ll ? 0 : align_up(n, 16) * world;
    case OpKind::all_gather:
      return ll ? 0 : align_up(n, 256);
    case OpKind::all_to_all:
      return ll ? 0 : align_up(n * world, 256);
    case OpKind::broadcast:
      return align_up(n, 256);
    case OpKind::all_to_all_v: {
      size_t cap = 0;
      if (__builtin_mul_overflow(c.a.recv_capacity, c.es, &cap) || cap > (size_t{1} << 48))
        return SIZE_MAX;
      return c.a.recv_sym.valid() ? 0 : align_up(cap, 256);  // zero copy: no staging area
    }
    case OpKind::barrier:
    case OpKind::put:
    case OpKind::get:
    case OpKind::kCount:
      break;
  }
  return 0;
}

// ---- all_reduce --------------------------------------------------------------------------------
void all_reduce(const Call& c) {
  const OpArgs& a = c.a;
  const size_t bytes = a.count * c.es;
  const bool in_place = a.send == a.recv;
  if (ll_path(c)) {
    if (a.chosen_algo) *a.chosen_algo = Algo::one_shot;  // the LL one-shot
    run_ll(c, a.send, a.recv, a.count, 0, 0, true);
    return;
  }
  const bool two_shot = a.algo != Algo::one_shot;
  if (a.chosen_algo) *a.chosen_algo = two_shot ? Algo::two_shot : Algo::one_shot;
  const bool zc_in = a.send_sym.valid() && aligned16(a.send);
  const bool zc_out = two_shot && a.recv_sym.valid() && aligned16(a.recv) && (!in_place || zc_in);
  const size_t region = align_up(bytes, 256);
  // Data region: [in staging][out staging / one-shot staging] (ws_data_bytes).
  const size_t in_at = 0;
  const size_t out_at = region;
  const bool stage_out = two_shot ? (zc_in && !zc_out && !in_place) : (zc_in && in_place);
  Ws w = get_ws(c, ws_data_bytes(c, false));
  K::ReduceArgs k;
  k.sync = w.sync;
  k.mode = two_shot ? K::ReduceMode::two_shot : K::ReduceMode::one_shot;
  k.red = static_cast<K::KRed>(a.redop);
  k.count = static_cast<int64_t>(a.count);
  if (zc_in) {
    k.in = zero_copy(c, k.sync, Side::send);
  } else {
    k.in = w.at(c, w.L.data_offset + in_at);
    k.copy_in = static_cast<const char*>(a.send);
  }
  if (two_shot) {
    if (zc_out) {
      k.out = zero_copy(c, k.sync, Side::recv);
    } else if (zc_in && in_place) {
      k.out = k.in;  // in place on the symmetric buffer (zc_out covers it; kept for clarity)
    } else if (!zc_in) {
      k.out = k.in;  // reduce in place in the staging area, then copy out
      k.copy_out_src = w.data() + in_at;
      k.copy_out_dst = static_cast<char*>(a.recv);
    } else {
      k.out = w.at(c, w.L.data_offset + out_at);
      k.copy_out_src = w.data() + out_at;
      k.copy_out_dst = static_cast<char*>(a.recv);
    }
  } else if (stage_out) {
    k.direct_out = w.data() + out_at;
    k.copy_out_src = w.data() + out_at;
    k.copy_out_dst = static_cast<char*>(a.recv);
  } else {
    k.direct_out = static_cast<char*>(a.recv);
  }
  const int64_t units = static_cast<int64_t>((bytes + 15) / 16);
  const int64_t per_rank = two_shot ? (units + c.world - 1) / c.world : units;
  const int blocks = blocks_for(c, per_rank, K::kThreads * K::kReduceUnitsPerThread,
                                two_shot ? two_shot_max_blocks(c, bytes) : 0);
  symmem::detail::KernelRange range(kernel_name(k.mode), blocks);  // NOTE [nvtx ranges]
  check_launch(c, K::launch_reduce(k, ktype(c).type, blocks, c.stream), "launch_reduce");
}

// ---- reduce_scatter ----------------------------------------------------------------------------
void reduce_scatter(const Call& c) {
  const OpArgs& a = c.a;
  const size_t n = a.count * c.es;  // per-rank block
  if (ll_path(c)) {
    run_ll(c, a.send, a.recv, a.count, static_cast<int64_t>(n), 0, true);
    return;
  }
  const bool zc_in = a.send_sym.valid() && aligned16(a.send) && n % 16 == 0;
  const size_t stride = zc_in ? n : align_up(n, 16);
  Ws w = get_ws(c, ws_data_bytes(c, false));
  K::ReduceArgs k;
  k.sync = w.sync;
  k.mode = K::ReduceMode::reduce_scatter;
  k.red = static_cast<K::KRed>(a.redop);
  k.count = static_cast<int64_t>(a.count);
  k.in_stride = static_cast<int64_t>(stride);
  if (zc_in) {
    k.in = zero_copy(c, k.sync, Side::send);
  } else {
    k.in = w.at(c, w.L.data_offset);
    k.copy_in = static_cast<const char*>(a.send);
  }
  k.direct_out = static_cast<char*>(a.recv);
  const int64_t units = static_cast<int64_t>((n + 15) / 16);
  const int blocks = blocks_for(c, units, K::kThreads * K::kReduceUnitsPerThread);
  symmem::detail::KernelRange range(kernel_name(k.mode), blocks);  // NOTE [nvtx ranges]
  check_launch(c, K::launch_reduce(k, ktype(c).type, blocks, c.stream), "launch_reduce");
}

// ---- all_gather / all_to_all / broadcast / barrier
// -------------------------------------------------
void all_gather(const Call& c) {
  const OpArgs& a = c.a;
  const size_t n = a.count * c.es;
  if (ll_path(c)) {
    run_ll(c, a.send, a.recv, a.count, 0, static_cast<int64_t>(n), false);
    return;
  }
  const bool zc_in = a.send_sym.valid();
  Ws w = get_ws(c, ws_data_bytes(c, false));
  K::MoveArgs k;
  k.sync = w.sync;
  k.mode = K::MoveMode::all_gather;
  if (zc_in) {
    k.src = zero_copy(c, k.sync, Side::send);
  } else {
    k.src = w.at(c, w.L.data_offset);
    k.copy_in = static_cast<const char*>(a.send);
  }
  k.local_in = static_cast<const char*>(a.send);
  k.local_out = static_cast<char*>(a.recv);
  k.bytes = static_cast<int64_t>(n);
  const int64_t units = static_cast<int64_t>((n + 15) / 16) * c.world;
  const int blocks = blocks_for(c, units, K::kThreads * 4);
  symmem::detail::KernelRange range(kernel_name(k.mode), blocks);  // NOTE [nvtx ranges]
  check_launch(c, K::launch_move(k, blocks, c.stream), "launch_move");
}

void all_to_all(const Call& c) {
  const OpArgs& a = c.a;
  const size_t n = a.count * c.es;
  const size_t total = n * c.world;
  if (ll_path(c)) {
    run_ll(c, a.send, a.recv, a.count, static_cast<int64_t>(n), static_cast<int64_t>(n), false);
    return;
  }
  const char* s0 = static_cast<const char*>(a.send);
  const char* r0 = static_cast<const char*>(a.recv);
  const bool overlap = s0 < r0 + total && r0 < s0 + total;
  const bool zc_out = a.recv_sym.valid() && !overlap;
  Ws w = get_ws(c, ws_data_bytes(c, false));
  K::MoveArgs k;
  k.sync = w.sync;
  k.mode = K::MoveMode::all_to_all;
  if (zc_out) {
    k.dst = zero_copy(c, k.sync, Side::recv);
  } else {
    k.dst = w.at(c, w.L.data_offset);
    k.copy_out_src = w.data();
  }
  k.local_in = s0;
  k.local_out = static_cast<char*>(a.recv);
  k.bytes = static_cast<int64_t>(n);
  const int64_t units = static_cast<int64_t>((n + 15) / 16) * c.world;
  const int blocks = blocks_for(c, units, K::kThreads * 4);
  symmem::detail::KernelRange range(kernel_name(k.mode), blocks);  // NOTE [nvtx ranges]
  check_launch(c, K::launch_move(k, blocks, c.stream), "launch_move");
}

void broadcast(const Call& c) {
  const OpArgs& a = c.a;
  const size_t n = a.count * c.es;
  // Only the root's send is meaningful, so the source is always the root's workspace.
  Ws w = get_ws(c, ws_data_bytes(c, false));
  K::MoveArgs k;
  k.sync = w.sync;
  k.mode = K::MoveMode::broadcast;
  k.root = a.root;
  k.src = w.at(c, w.L.data_offset);
  if (c.rank == a.root) {
    k.copy_in = static_cast<const char*>(a.send);
    k.local_in = static_cast<const char*>(a.send);
  }
  k.local_out = static_cast<char*>(a.recv);
  k.bytes = static_cast<int64_t>(n);
  const int64_t units = static_cast<int64_t>((n + 15) / 16);
  const int blocks = blocks_for(c, units, K::kThreads * 4);
  symmem::detail::KernelRange range(kernel_name(k.mode), blocks);  // NOTE [nvtx ranges]
  check_launch(c, K::launch_move(k, blocks, c.stream), "launch_move");
}

void barrier(const Call& c) {
  Ws w = get_ws(c, ws_data_bytes(c, false));
  K::MoveArgs k;
  k.sync = w.sync;
  k.mode = K::MoveMode::barrier;
  symmem::detail::KernelRange range(kernel_name(k.mode), 1);  // NOTE [nvtx ranges]
  check_launch(c, K::launch_move(k, 1, c.stream), "launch_move");
}

// ---- all_to_all_v ------------------------------------------------------------------------------
void all_to_all_v(const Call& c) {
  const OpArgs& a = c.a;
  const size_t cap_bytes = a.recv_capacity * c.es;
  const bool zc_out = a.recv_sym.valid();
  Ws w = get_ws(c, ws_data_bytes(c, false));
  K::AllToAllVArgs k;
  k.sync = w.sync;
  k.matrix_local = reinterpret_cast<int64_t*>(w.local + w.L.matrix_offset);
  k.matrix = w.at(c, w.L.matrix_offset);
  if (zc_out) {
    k.dst = zero_copy(c, k.sync, Side::recv);
  } else {
    k.dst = w.at(c, w.L.data_offset);
    k.copy_out_src = w.data();
  }
  k.send = static_cast<const char*>(a.send);
  k.send_counts = a.send_counts;
  k.recv_counts = a.recv_counts;
  k.recv_offsets = a.recv_offsets;
  k.recv = static_cast<char*>(a.recv);
  k.capacity = static_cast<int64_t>(a.recv_capacity);
  k.elem_size = static_cast<int>(c.es);
  k.counts_known = a.recv_counts_known;
  const int64_t units = static_cast<int64_t>((cap_bytes + 15) / 16);
  const int blocks = blocks_for(c, units, K::kThreads * 4);
  symmem::detail::KernelRange range("all_to_all_v", blocks);  // NOTE [nvtx ranges]
  check_launch(c, K::launch_all_to_all_v(k, blocks, c.stream), "launch_all_to_all_v");
}

// ---- world size 1 ------------------------------------------------------------------------------
void run_single(const Call& c) {
  const OpArgs& a = c.a;
  const size_t n = a.count * c.es;
  switch (a.kind) {
    case OpKind::all_reduce:
    case OpKind::reduce_scatter:
    case OpKind::all_gather:
    case OpKind::all_to_all:
    case OpKind::broadcast:
      copy_async(c, a.recv, a.send, n);  // avg over one rank and min/max are exact copies
      return;
    case OpKind::all_to_all_v:
      all_to_all_v(c);  // the device-side checks and count outputs are the same
      return;
    case OpKind::barrier:
      return;
    case OpKind::put:  // handled before (no `default`: -Wswitch names a new op's missing case)
    case OpKind::get:
    case OpKind::kCount:
      break;
  }
}

// Relaxes this thread's stream-capture mode for the scope (a host wait on an event while
// another stream captures).
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() { (void)cudaThreadExchangeStreamCaptureMode(&mode_); }
  ~RelaxedCaptureMode() { (void)cudaThreadExchangeStreamCaptureMode(&mode_); }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

// NOTE [stream order]: orders this op after the group's last one; returns the group's entry for
// note_launched(). Only the thread running the group's op touches the entry (NOTE [one thread
// per group]); the map itself is guarded by P.mu.
Process::GroupOrder& order_after_last(const Call& c) {
  Process& P = proc();
  const auto& impl = c.a.group->impl();
  Process::GroupOrder* o = nullptr;
  {
    std::lock_guard<std::mutex> lock(P.mu);
    auto it = P.order.find(impl.get());
    if (it == P.order.end()) {
      // A group's first op: entries of groups that are gone go (no op of theirs can be running:
      // an op holds its group), with their events.
      RelaxedCaptureMode relaxed;
      for (auto e = P.order.begin(); e != P.order.end();) {
        if (!e->second.group.expired()) {
          ++e;
          continue;
        }
        if (e->second.event != nullptr) (void)cudaEventDestroy(e->second.event);
        e = P.order.erase(e);
      }
      it = P.order.emplace(impl.get(), Process::GroupOrder{}).first;
    }
    o = &it->second;
  }
  if (o->group.owner_before(impl) || impl.owner_before(o->group) || o->group.expired()) {
    o->group = impl;  // a new group at this address: no previous op
    o->recorded = false;
  }
  if (!o->recorded || (o->stream_id == c.stream_id && o->capture_id == c.capture_id)) return *o;
  if (o->capture_id == 0) {
    // Captured after an eager op: nothing is called inside the capture (a graph cannot depend
    // on work outside it); the caller launches the graph after that op, as for any graph.
    if (!c.capturing) SYMMEM_GK_CHECK(c, cudaStreamWaitEvent(c.stream, o->event, 0));
  } else if (c.capturing && c.capture_id == o->capture_id) {
    SYMMEM_GK_CHECK(c, cudaStreamWaitEvent(c.stream, o->event, 0));
  }
  return *o;
}

// NOTE [stream order]: records the group's event after the op just enqueued on c.stream.
void note_launched(const Call& c, Process::GroupOrder& o) {
  if (o.event == nullptr || o.device != c.a.device.index) {
    if (o.event != nullptr) (void)cudaEventDestroy(o.event);  // released once it completes
    o.event = nullptr;
    o.recorded = false;
    RelaxedCaptureMode relaxed;
    SYMMEM_GK_CHECK(c, cudaEventCreateWithFlags(&o.event, cudaEventDisableTiming));
    o.device = c.a.device.index;
  }
  SYMMEM_GK_CHECK(c, cudaEventRecord(o.event, c.stream));
  o.recorded = true;
  o.stream_id = c.stream_id;
  o.capture_id = c.capture_id;
}

void dispatch(const Call& c) {
  const OpArgs& a = c.a;
  if (c.world == 1 && a.kind != OpKind::all_to_all_v) {
    run_single(c);
    return;
  }
  switch (a.kind) {
    case OpKind::all_reduce:
      return all_reduce(c);
    case OpKind::reduce_scatter:
      return reduce_scatter(c);
    case OpKind::all_gather:
      return all_gather(c);
    case OpKind::all_to_all:
      return all_to_all(c);
    case OpKind::all_to_all_v:
      return all_to_all_v(c);
    case OpKind::broadcast:
      return broadcast(c);
    case OpKind::barrier:
      return barrier(c);
    case OpKind::put:  // handled by cuda_run_op (no `default`: -Wswitch names a missing case)
    case OpKind::get:
    case OpKind::kCount:
      break;
  }
  symmem::throw_error(ErrorCode::Internal, c.op, c.rank, "unknown op kind");
}

// A collective or barrier of a GPU group, after make_call: this rank's checks, then its kernel.
void run_collective(const Call& c) {
  const OpArgs& a = c.a;
  if (a.kind != OpKind::barrier) {
    (void)ktype(c);  // dtype first
    // The core checks alignment too; a misaligned element access would be a sticky device fault.
    auto aligned = [&](const void* p) { return reinterpret_cast<uintptr_t>(p) % c.es == 0; };
    if (!aligned(a.send)) {
      symmem::throw_invalid_argument(
          c.op, c.rank, "send",
          "is not aligned to its element size (" + std::to_string(c.es) + " bytes)");
    }
    if (!aligned(a.recv)) {
      symmem::throw_invalid_argument(
          c.op, c.rank, "recv",
          "is not aligned to its element size (" + std::to_string(c.es) + " bytes)");
    }
  }
  if (a.kind != OpKind::barrier && a.kind != OpKind::all_to_all_v && a.count == 0) return;
  Process::GroupOrder& order = order_after_last(c);  // NOTE [stream order]
  try {
    dispatch(c);
  } catch (...) {
    // What was enqueued before the failure (a workspace's zeroing, say) still orders the next op.
    try {
      note_launched(c, order);
    } catch (...) {
    }
    throw;
  }
  note_launched(c, order);
}

// NOTE [refused ops] (kernels/refuse.cu): enqueues the refuse kernel in place of the op's, when
// the peers' kernels will meet it; `code` is this rank's error; `route` (may be null), asked once
// the group's workspace is known to exist, says whether the backend runs the op on these
// kernels. Never throws (the caller throws its own error next); does nothing when it cannot
// help.
void refuse(const Call& c, ErrorCode code, bool (*route)(const OpArgs&) = nullptr) noexcept {
  try {
    const OpArgs& a = c.a;
    if (c.launched || c.capturing || c.world <= 1) return;
    if (code == ErrorCode::Timeout || code == ErrorCode::Aborted || code == ErrorCode::PeerFailure)
      return;  // the group is broken or going: nothing to keep in step
    if (a.group == nullptr || !a.group->valid() || a.group->aborted()) return;
    switch (a.kind) {
      case OpKind::all_reduce:
      case OpKind::reduce_scatter:
      case OpKind::all_gather:
      case OpKind::all_to_all:
      case OpKind::broadcast:
        if (a.count == 0) return;  // the peers launch nothing (their count is this one)
        break;
      case OpKind::all_to_all_v:
      case OpKind::barrier:
        break;
      case OpKind::put:
      case OpKind::get:
      case OpKind::kCount:
        return;
    }
    // Without the op's count (symmem::refuse() from a caller that did not know it) the peers'
    // op is taken to fit the workspace there is.
    const size_t data = a.count == symmem::kRefusedCountUnknown ? 0 : ws_data_bytes(c, ll_path(c));
    if (data == SIZE_MAX) return;
    const K::WsLayout L = K::ws_layout(c.world);
    // The group's workspace as it is: the peers' kernels use this one when it is large enough
    // for the op; a larger one would be a collective allocation.
    Process& P = proc();
    Process::GroupWs g;
    std::shared_ptr<symmem::BackendMemory> alive;  // during the launch
    auto look = [&] {
      std::lock_guard<std::mutex> lock(P.mu);
      auto it = P.group_ws.find(a.group->impl().get());
      if (it == P.group_ws.end()) return false;
      alive = it->second.mem.lock();
      g = it->second;
      return true;
    };
    if (!look()) return;
    if (alive == nullptr) {
      // The group's workspace was replaced by an op that these kernels did not run (nvshmem's
      // staged ops grow it): the peers' op takes up the current one, zeroing its control region
      // and meeting in its first-use barrier (get_ws), and so does this rank, without growing it
      // (it asks for the control region only), before it signals.
      (void)get_ws(c, 0);
      if (!look()) return;
    }
    if (alive == nullptr || g.device != a.device.index || g.bytes < L.data_offset + data) return;
    if (route != nullptr && !route(a)) return;  // the peers do not run these kernels for it
    K::RefuseArgs k;
    k.sync.ctrl = g.ctrl;
    k.sync.rank = c.rank;
    k.sync.world = c.world;
    k.sync.timeout_ns = c.timeout_ns;
    k.sync.timeout_record = g.timeout_record;
    const symmem::cuda::AbortSlot abort = symmem::cuda::abort_slot(*a.group);
    k.sync.abort_word = abort.word;
    k.sync.abort_slot = abort.slot;
    k.sync.orphan_flag = g.orphan_flag;
    k.sync.op_kind = static_cast<int32_t>(a.kind);
    k.sync.desc[0] = K::kDescRefused;
    k.sync.desc[1] = static_cast<int64_t>(code);
    k.sync.desc_offset = static_cast<uint32_t>(L.desc_offset);
    k.ll = g.ll;
    k.slot_bytes = L.ll_slot_bytes;
    k.code = static_cast<int>(code);
    const int64_t packets = static_cast<int64_t>(L.ll_slot_bytes / 16) * (c.world - 1);
    const int blocks = blocks_for(c, packets, K::kThreads * 8);
    Process::GroupOrder& order = order_after_last(c);  // NOTE [stream order]
    int err = 0;
    {
      symmem::detail::KernelRange range("refuse", blocks);  // NOTE [nvtx ranges]
      err = K::launch_refuse(k, blocks, c.stream);
    }
    note_launched(c, order);
    if (err != 0) {
      SYMMEM_LOG(WARN, COLL) << "rank " << c.rank << ": " << c.op
                             << ": could not tell the peers of the refused op ("
                             << cudaGetErrorName(static_cast<cudaError_t>(err))
                             << "); their kernel waits until its deadline";
    }
  } catch (...) {
  }
}

}  // namespace

int cuda_tuning_signature(const symmem::Group& group, int device, char* buf, size_t len) {
  static std::mutex mu;
  static std::unordered_map<int, std::string> base;  // per device: all but ranks_per_gpu
  static int gpus = 0;
  std::string sig;
  int devices = 1;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = base.find(device);
    if (it == base.end()) {
      cudaDeviceProp prop{};
      int count = 0;
      if (cudaGetDeviceProperties(&prop, device) != cudaSuccess ||
          cudaGetDeviceCount(&count) != cudaSuccess)
        return -1;
      std::string name = prop.name;
      for (char& ch : name)
        if (ch == ';' || ch == '"') ch = ' ';
      std::ostringstream os;
      os << "gpu=" << name << ";sms=" << prop.multiProcessorCount << ";gpus=" << count << ";p2p=";
      for (int i = 0; i < count; ++i) {
        for (int j = i + 1; j < count; ++j) {
          int access = 0, perf = 0;
          (void)cudaDeviceGetP2PAttribute(&access, cudaDevP2PAttrAccessSupported, i, j);
          (void)cudaDeviceGetP2PAttribute(&perf, cudaDevP2PAttrPerformanceRank, i, j);
          os << i << j << ":" << access << "/" << perf << ",";
        }
      }
      it = base.emplace(device, os.str()).first;
      (void)cudaGetLastError();  // a refused P2P query leaves no sticky error behind
      gpus = count;
    }
    sig = it->second;
    devices = std::max(1, gpus);
  }
  const int local = std::max(1, group.valid() ? group.local_world_size() : 1);
  sig += ";ranks_per_gpu=" + std::to_string((local + devices - 1) / devices);
  if (buf != nullptr && len > 0) {
    const size_t n = std::min(sig.size(), len - 1);
    std::memcpy(buf, sig.data(), n);
    buf[n] = '\0';
  }
  return static_cast<int>(sig.size());
}

void cuda_raise_async_errors(const symmem::Group& group, const char* op) {
  const int rank = group.valid() ? group.rank() : -1;
  const int32_t slot = symmem::cuda::abort_slot(group).slot;
  symmem::cuda::raise_device_timeout(op, rank, slot);
  cuda_raise_op_error(op, rank, slot);
}

void cuda_run_op(const OpArgs& a) {
  const char* op = symmem::to_string(a.kind);
  const int rank = a.group != nullptr ? a.group->rank() : -1;
  if (a.group == nullptr) symmem::throw_invalid_argument(op, rank, "group", "is null");
  DeviceGuard guard(a.device.index);
  // Device-found errors of earlier ops are not raised here: ranks read the record at different
  // moments, so one could throw (launching nothing) while its peer launched (NOTE
  // [device-detected errors]).
  Call c = make_call(a);  // a failure here leaves the stream's state unknown: nothing is refused
  if (a.kind == OpKind::put || a.kind == OpKind::get) {
    char* remote = static_cast<char*>(a.target.ptr(a.root));
    if (remote == nullptr) {
      symmem::throw_error(ErrorCode::Unsupported, op, rank,
                          "rank " + std::to_string(a.root) +
                              "'s part of the buffer is not "
                              "directly addressable from this rank (backend " +
                              a.target.backend() + "); the nvshmem backend reaches such peers");
    }
    remote += a.target_offset;
    if (a.kind == OpKind::put) {
      copy_async(c, remote, a.send, a.count);
    } else {
      copy_async(c, a.recv, remote, a.count);
    }
    if (a.signal) a.target.put_signal(a.root, a.channel, a.timeout, a.stream);
    return;
  }
  try {
    run_collective(c);
  } catch (const symmem::Error& e) {
    refuse(c, e.code());  // NOTE [refused ops]: unless the op's kernel was launched
    throw;
  }
}

void cuda_refuse_op(const OpArgs& a, ErrorCode code) noexcept {
  cuda_refuse_op_routed(a, code, nullptr);
}

void cuda_refuse_op_routed(const OpArgs& a, ErrorCode code,
                           bool (*route)(const OpArgs& args)) noexcept {
  try {
    if (a.group == nullptr) return;
    DeviceGuard guard(a.device.index);
    const Call c = make_call(a);
    refuse(c, code, route);
  } catch (...) {
  }
}
