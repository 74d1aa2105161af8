#pragma once

// Symmetric memory: every rank of a group allocates the same number of bytes; after the
// rendezvous each rank can address every peer's buffer directly.
//
//   auto buf = symmem::allocate(group, 1 << 20);                    // host backend (CPU)
//   auto gbuf = symmem::allocate(group, 1 << 20, symmem::Device::cuda(0));
//   float* mine = static_cast<float*>(buf.ptr(buf.rank()));
//   float* peer = static_cast<float*>(buf.ptr((buf.rank() + 1) % buf.world_size()));
//   buf.barrier();
//
// allocate() is collective over the group: every rank must call it, in the same order, with
// the same size. The rendezvous checks both (each allocation carries a sequence number per
// group) and throws InvalidArgument on every rank, listing what each rank asked for.
//
// For a cuda/nccl/nvshmem allocation, ptr(peer) is a device pointer valid in this process.
// Handles are cheap copies of one shared allocation; the memory is freed (collectively is not
// required) when the last handle (and every view) is gone, or by free().

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "symmem/device_handle.hpp"
#include "symmem/export.hpp"
#include "symmem/group.hpp"
#include "symmem/types.hpp"

namespace symmem {

class BackendMemory;

struct AllocOptions {
  std::string backend;  // "" or "auto": the process's backend (SYMMEM_BACKEND / select_backend)
  size_t signal_pad_bytes = 0;  // 0: SYMMEM_SIGNAL_PAD_BYTES
};

class SYMMEM_API SymmetricMemory {
 public:
  SymmetricMemory();  // empty handle; valid() is false

  bool valid() const noexcept { return impl_ != nullptr; }  // a non-empty handle
  // NOTE [free with live views]: true once free() was called on the allocation (through any
  // handle of it); ops on it raise InvalidArgument. A DLPack consumer's view (Python) keeps the
  // mapping of a host or cuda allocation until the consumer goes, so reading it never crashes;
  // nccl and nvshmem release collectively, in allocation order, at free() itself.
  bool freed() const noexcept;
  int rank() const;
  int world_size() const;
  size_t size() const;    // bytes of this view on each rank
  size_t offset() const;  // offset of this view within the allocation
  Device device() const;
  const std::string& backend() const;
  const Group& group() const;
  uint64_t alloc_id() const;  // sequence number of the allocation in its group

  // This view's start in peer's buffer, or nullptr where not directly addressable.
  void* ptr(int peer) const;
  // Device array of world_size buffer pointers (this view); nullptr on the host backend.
  void* const* ptrs_device() const;
  // Peer's signal pad (whole allocation, not the view): pad_slots() uint32_t slots.
  uint32_t* signal_pad(int peer) const;
  size_t signal_pad_bytes() const;
  int num_channels() const;  // signal_pad_slots / world_size
  bool direct_access(int peer) const;
  int global_rank(int rank) const;

  // Synchronisation. channel in [0, num_channels()). timeout (NOTE [timeouts] in store.hpp):
  // kDefaultTimeout (-1, any negative): the group's timeout (GroupOptions::timeout, by default
  // SYMMEM_TIMEOUT_MS); 0: do not wait (check once).
  // On GPU backends they are enqueued on `stream` (graph-capturable) and a device-side timeout
  // is raised as Timeout by the next synchronising call.
  void barrier(int channel = 0, Millis timeout = kDefaultTimeout, Stream stream = nullptr) const;
  void put_signal(int dst, int channel = 0, Millis timeout = kDefaultTimeout,
                  Stream stream = nullptr) const;
  void wait_signal(int src, int channel = 0, Millis timeout = kDefaultTimeout,
                   Stream stream = nullptr) const;

  // Signals in NVSHMEM's terms (nvshmemx_signal_op, nvshmem_signal_wait_until) on raw slots of
  // the signal pad: `slot` in [0, signal_pad_bytes() / 4). The pad is shared with barrier /
  // put_signal / wait_signal, which use slot channel * world_size + src: give signals channels
  // of their own (slot = channel * world_size + k). signal_op sets (SignalOp::set) or adds to
  // (SignalOp::add, wrapping) slot `slot` of rank `peer`'s pad, with release order: what this
  // rank wrote before (to any memory) is visible to the peer once its wait sees the value.
  // wait_until waits until this rank's slot `slot` compares `cmp` to `value` (unsigned), with
  // acquire order, and returns the value it saw; it neither resets nor consumes the slot.
  // Errors and timeouts are those of barrier (Timeout names the slot, the comparison and the
  // value held; a dead peer is a PeerFailure; an aborted group Aborted). Host and cuda
  // backends (nccl, nvshmem: Unsupported). On GPU memory they are enqueued on `stream`; on the
  // null stream they are synchronous, and on another stream wait_until returns 0 and a timeout
  // is raised by the next synchronising call (NOTE [GPU signals] in src/cuda/signals.hpp).
  void signal_op(int peer, size_t slot, uint32_t value, SignalOp op = SignalOp::set,
                 Stream stream = nullptr) const;
  uint32_t wait_until(size_t slot, Cmp cmp, uint32_t value, Millis timeout = kDefaultTimeout,
                      Stream stream = nullptr) const;

  // The trivially-copyable handle for kernels (GPU backends).
  DeviceHandle device_handle() const;

  // A view of [offset, offset+length) of every rank's buffer; no new rendezvous.
  SymmetricMemory view(size_t offset, size_t length) const;

  // Frees this allocation now (every handle and view becomes invalid: using one is an
  // InvalidArgument error naming the freed buffer).
  void free();

  const std::shared_ptr<BackendMemory>& backend_memory() const;

  struct Impl;
  explicit SymmetricMemory(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  const std::shared_ptr<Impl>& impl() const { return impl_; }

 private:
  std::shared_ptr<Impl> impl_;
};

// Collective over `group`. Throws InvalidArgument on size/order mismatch (every rank),
// BackendUnavailable when the backend cannot be loaded, Unsupported when it cannot serve
// `device`.
SYMMEM_API SymmetricMemory allocate(const Group& group, size_t bytes, Device device = Device::cpu(),
                                    const AllocOptions& options = {});

// Chooses the backend of this process ("auto", "host", "cuda", "nvshmem", "nccl"). Changing it
// after the first allocation is an InvalidArgument error.
SYMMEM_API void select_backend(const std::string& name);
// The backend that serves (or would serve) `device` for `group`, and why (for logs/tools).
SYMMEM_API std::string resolve_backend(const Group& group, Device device,
                                       std::string* why = nullptr);
// Names of backends whose plugins can be loaded here.
SYMMEM_API std::vector<std::string> available_backends();

}  // namespace symmem
