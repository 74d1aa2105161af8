#pragma once

// The interface a backend implements (for backend authors). The core (memory.cpp, ops.cpp)
// validates arguments, checks the rendezvous order/size agreement across ranks, manages views
// and workspaces, then calls into the backend. Backends other than host are plugins: shared
// libraries named libsymmem_<name>.so exporting
//   extern "C" int symmem_plugin_abi_version();            // must return kPluginAbiVersion
//   extern "C" symmem::Backend* symmem_plugin_create();    // new'ed; the core owns it

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "symmem/device_handle.hpp"
#include "symmem/error.hpp"
#include "symmem/export.hpp"
#include "symmem/group.hpp"
#include "symmem/memory.hpp"
#include "symmem/op_table.hpp"
#include "symmem/ops.hpp"
#include "symmem/types.hpp"

namespace symmem {

inline constexpr int kPluginAbiVersion = 5;  // 2: BackendMemory::check_peers_alive; 3: what a
                                             // backend serves is data (OpSupport); 4:
                                             // BackendMemory::signal_op and wait_until; 5:
                                             // OpArgs::chosen_algo

// One allocation, rendezvoused over one group (the whole allocation, not a view).
class SYMMEM_API BackendMemory {
 public:
  virtual ~BackendMemory();
  virtual void* ptr(int peer) const = 0;  // nullptr: not directly addressable
  virtual void* const* ptrs_device() const { return nullptr; }
  virtual uint32_t* signal_pad(int peer) const = 0;  // device pointer on GPU backends
  virtual bool direct_access(int peer) const = 0;
  // `timeout` is resolved by the core (>= 0; 0: do not wait), NOTE [timeouts] in store.hpp.
  virtual void barrier(int channel, Millis timeout, Stream stream) = 0;
  virtual void put_signal(int dst, int channel, Millis timeout, Stream stream) = 0;
  virtual void wait_signal(int src, int channel, Millis timeout, Stream stream) = 0;
  // Handle for [offset, offset+length); GPU backends keep device pointer tables per view.
  virtual DeviceHandle device_handle(size_t offset, size_t length) const;
  // Throws PeerFailure naming `op` and `channel` when a peer of the allocation is known to be
  // gone; called from the core's CPU waits (core/pad_sync.hpp). The default knows nothing.
  virtual void check_peers_alive(const char* op, int channel) const {
    (void)op;
    (void)channel;
  }
  // Whether releasing this memory is a collective step (nvshmem_free, NCCL's window
  // deregistration), which ranks must take in allocation order when free() is called. Memory
  // whose release is local may outlive free() while a DLPack consumer still views it
  // (NOTE [free with live views] in memory.hpp).
  virtual bool release_is_collective() const { return false; }
  // NVSHMEM-style signals on raw pad slots (SymmetricMemory::signal_op / wait_until; the core
  // checks peer, slot and op). The default: Unsupported naming the backends that have them.
  virtual void signal_op(int peer, size_t slot, uint32_t value, SignalOp op, Stream stream);
  virtual uint32_t wait_until(size_t slot, Cmp cmp, uint32_t value, Millis timeout, Stream stream);
};

struct RendezvousInfo {
  uint64_t alloc_id = 0;        // sequence number of this allocation in the group
  size_t bytes = 0;             // buffer bytes per rank (>0)
  size_t signal_pad_bytes = 0;  // pad bytes per rank
  Device device;
  Millis timeout{0};  // resolved (> 0): the group's timeout
};

// A resolved op, after the core's validation. Pointers are in the op's device memory.
// One op's device times (NOTE [device timestamps] in src/core/trace.hpp): host memory that a GPU
// backend registers (mapped) and its kernel writes. All zero when the op is enqueued.
struct DeviceTimes {
  uint64_t start = 0;  // %globaltimer (ns) when the op's kernel started (block 0); 0: not yet
  uint64_t end = 0;    // %globaltimer when its last block finished; 0: not yet
  int64_t offset = 0;  // CLOCK_REALTIME ns minus %globaltimer ns on that GPU (the backend's)
  uint64_t armed = 0;  // 1: the backend launched a kernel that writes start and end
};

struct OpArgs {
  OpKind kind = OpKind::barrier;
  const Group* group = nullptr;
  Device device;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;  // all_reduce: elements; reduce_scatter: recv elements; all_gather: send
                     // elements; all_to_all: elements per peer; broadcast: elements; put/get: bytes
  DType dtype = DType::f32;
  ReduceOp redop = ReduceOp::sum;
  Algo algo = Algo::automatic;  // SYMMEM_ALGO already applied; the backend resolves automatic
  Algo* chosen_algo = nullptr;  // where it writes the algorithm it ran (the flight recorder's)
  int root = -1;                // broadcast root; put/get peer
  // all_to_all_v
  const int64_t* send_counts = nullptr;
  int64_t* recv_counts = nullptr;
  int64_t* recv_offsets = nullptr;
  size_t recv_capacity = 0;
  bool recv_counts_known = false;
  // put/get
  SymmetricMemory target;  // the symmetric buffer of put (dst) / get (src), as a view
  size_t target_offset = 0;
  bool signal = false;
  int channel = 0;
  Stream stream = nullptr;
  Millis timeout{0};  // resolved by the core (> 0), NOTE [timeouts] in store.hpp
  // Symmetric views holding send/recv when they lie in symmetric memory of the group (zero copy).
  SymmetricMemory send_sym;
  SymmetricMemory recv_sym;
  // Returns a workspace of at least `bytes` on every rank of the group (collective the first
  // time a size is reached: every rank asks for the same size since ops are called with the same
  // arguments). Growing it during CUDA graph capture is an InvalidArgument error. Callable only
  // during Backend::run (it refers to the caller's group).
  std::function<SymmetricMemory(size_t bytes)> workspace;
  // The flight recorder's slot for this GPU op's device times, or null (recorder off, CPU op).
  // `device_times_ring`: the page-aligned host memory holding every slot of the recorder, to
  // register once; it is never freed once handed to a backend.
  DeviceTimes* device_times = nullptr;
  void* device_times_ring = nullptr;
  size_t device_times_ring_bytes = 0;
};

class SYMMEM_API Backend {
 public:
  // `serves`: what this backend serves, as data (NOTE [op table] in op_table.hpp). The core
  // answers Unsupported for anything no rule holds, naming the backends that do serve it, and
  // routes the CPU buffers of a backend that serves only GPU buffers (a GPU program's host-side
  // reductions) to auto's choice for CPU buffers.
  explicit Backend(std::vector<OpSupport> serves) : serves_(std::move(serves)) {}
  virtual ~Backend();
  virtual const char* name() const = 0;
  // Can this backend serve `device` for `group`? If not, `why` says why (and what would).
  virtual bool can_serve(const Group& group, Device device, std::string* why) const = 0;
  // From the rules given to the constructor.
  bool supports(OpKind kind, DType dtype, DeviceType device) const;
  bool serves(DeviceType type) const;  // some rule holds buffers of this device type
  const std::vector<OpSupport>& support() const { return serves_; }
  // Allocates this rank's buffer and pad and rendezvous with the group (collective). The core
  // has already checked that every rank asked for the same size in the same order.
  virtual std::shared_ptr<BackendMemory> allocate(const Group& group,
                                                  const RendezvousInfo& info) = 0;
  virtual void run(const OpArgs& args) = 0;
  // Backend-specific entry points reached through the registry without linking the backend's
  // dependency (e.g. "use_nccl_comm" of include/symmem/nccl.hpp): a function pointer cast to
  // void*, or nullptr when this backend has no entry point of that name.
  virtual void* extension(const std::string& name) {
    (void)name;
    return nullptr;
  }

 private:
  std::vector<OpSupport> serves_;
};

// Backend::extension names the core calls.
// "raise_async_error": void (*)(const Group& group, const char* op): raises (and clears) what
// the device found after this plugin's GPU ops returned, as Group::check_async_error()
// documents; returns when there is nothing.
inline constexpr const char* kRaiseAsyncErrorExtension = "raise_async_error";
using RaiseAsyncErrorFn = void (*)(const Group& group, const char* op);
// "refuse_op": void (*)(const OpArgs& args, ErrorCode code) noexcept: the core calls it when a
// rank of a GPU group refuses a collective or barrier (its arguments failed the core's checks
// with `code`; args holds what the rank passed, possibly bad) before throwing that error, so
// that the backend tells the peers, whose kernels already wait for this rank, on the device
// (NOTE [refused ops] in src/cuda/kernels/refuse.cu). Never throws; does nothing where the
// backend cannot reach the peers' kernels. args.count is kRefusedCountUnknown when the refusal
// came from symmem::refuse() without the op's count: the backend then takes it that the peers
// run the op (a count > 0) in the group's current workspace.
inline constexpr const char* kRefuseOpExtension = "refuse_op";
inline constexpr size_t kRefusedCountUnknown = static_cast<size_t>(-1);
using RefuseOpFn = void (*)(const OpArgs& args, ErrorCode code) noexcept;
// "tuning_signature": int (*)(const Group& group, int device, char* buf, size_t len): writes the
// machine signature that the backend's tuning entries are keyed by (NOTE [tuning file] in
// src/core/tuning.hpp) for `group`'s ranks on `device`, NUL-terminated, into buf; returns its
// length (the whole length even when len was too small), -1 on failure.
inline constexpr const char* kTuningSignatureExtension = "tuning_signature";
using TuningSignatureFn = int (*)(const Group& group, int device, char* buf, size_t len);

// Registry. get_backend() loads a plugin on first use (from SYMMEM_PLUGIN_PATH, then the
// directory of libsymmem); a missing plugin or a failing dependency is BackendUnavailable with
// the loader's message and the list of available backends.
SYMMEM_API void register_backend(std::shared_ptr<Backend> backend);
SYMMEM_API std::shared_ptr<Backend> get_backend(const std::string& name);

}  // namespace symmem
