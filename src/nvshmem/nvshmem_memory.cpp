#include "nvshmem/nvshmem_memory.hpp"

#include <nvshmem.h>
#include <nvshmemx.h>

#include "core/check.hpp"
#include "core/log.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/signals.hpp"
#include "cuda/timeout_record.hpp"
#include "nvshmem/nvshmem_runtime.hpp"

namespace symmem::nvshm {
namespace {

constexpr size_t kAlign = 256;

size_t align_up(size_t n, size_t a) {
  return (n + a - 1) / a * a;
}

using cuda::DeviceGuard;

}  // namespace

NvshmemMemory::NvshmemMemory(const Group& group, const RendezvousInfo& info)
    : group_(group),
      rank_(group.rank()),
      world_(group.world_size()),
      device_(info.device.index),
      bytes_(info.bytes) {
  const char* op = "allocate";
  DeviceGuard guard(device_);
  auto& rt = Runtime::instance();
  pes_ = rt.pes_of(group, op);
  pad_offset_ = align_up(bytes_, kAlign);
  pad_bytes_ = info.signal_pad_bytes;
  SYMMEM_CHECK(op, rank_, pad_bytes_ >= sizeof(uint32_t) * world_, ErrorCode::InvalidArgument,
               "signal pad of " << pad_bytes_ << " bytes is smaller than one channel (" << world_
                                << " slots of 4 bytes)");
  const size_t slots = pad_bytes_ / sizeof(uint32_t);
  sig_offset_ = align_up(pad_offset_ + pad_bytes_, kAlign);
  const size_t total = sig_offset_ + slots * sizeof(uint64_t);
  // Collective over every PE; the core has checked size and order on every rank first, so a
  // mismatch is an error on every rank rather than a hang in here.
  base_ = nvshmem_malloc(total);
  SYMMEM_CHECK(op, rank_, base_ != nullptr, ErrorCode::System,
               "nvshmem_malloc(" << total << ") failed: the NVSHMEM symmetric heap is exhausted "
                                 << "(raise NVSHMEM_SYMMETRIC_SIZE)");
  try {
    SYMMEM_CUDART_CHECK(op, rank_, cudaMemset(base_, 0, total));
    SYMMEM_CUDART_CHECK(op, rank_, cudaDeviceSynchronize());
    buffers_.assign(world_, nullptr);
    std::vector<uint32_t*> pads(world_, nullptr);
    all_direct_ = true;
    for (int p = 0; p < world_; ++p) {
      buffers_[p] = p == rank_ ? base_ : nvshmem_ptr(base_, pes_[p]);
      if (buffers_[p] != nullptr) {
        pads[p] = reinterpret_cast<uint32_t*>(static_cast<char*>(buffers_[p]) + pad_offset_);
      }
      all_direct_ = all_direct_ && buffers_[p] != nullptr;
    }
    tables_ = std::make_unique<cuda::PeerTables>(device_, rank_, buffers_, std::move(pads));
    SYMMEM_CUDART_CHECK(op, rank_, cudaMalloc(&d_pes_, sizeof(int) * world_));
    SYMMEM_CUDART_CHECK(
        op, rank_, cudaMemcpy(d_pes_, pes_.data(), sizeof(int) * world_, cudaMemcpyHostToDevice));
    // Every rank's pad is zero before any peer may signal into it (the store barrier has a
    // deadline; nvshmem_barrier_all would not).
    group_.store_barrier();
  } catch (...) {
    release();
    throw;
  }
  int direct = 0;
  for (void* b : buffers_) direct += b != nullptr;
  SYMMEM_LOG(INFO, ALLOC) << "nvshmem: allocation " << info.alloc_id << " of group '"
                          << group.name() << "': " << bytes_ << " bytes + " << pad_bytes_
                          << " pad bytes + " << slots * sizeof(uint64_t)
                          << " NVSHMEM signal bytes, " << direct << "/" << world_
                          << " peers load/store accessible";
}

NvshmemMemory::~NvshmemMemory() {
  release();
}

void NvshmemMemory::release() noexcept {
  DeviceGuard guard(device_);
  if (base_ != nullptr) (void)cudaDeviceSynchronize();
  tables_.reset();
  if (d_pes_ != nullptr) (void)cudaFree(d_pes_);
  d_pes_ = nullptr;
  if (base_ != nullptr) {
    // nvshmem_free is collective too (it synchronises all PEs): ranks free nvshmem allocations
    // in the same order, as they allocated them. It has no deadline, so after an abort (a dead
    // PE, Group::abort, shrink) it could wait forever: the memory is kept until the process
    // exits instead (docs/reliability.md, nvshmem).
    bool aborted = true;
    try {
      aborted = group_.aborted();
    } catch (...) {
    }
    if (aborted) {
      SYMMEM_LOG(WARN, ALLOC) << "nvshmem: rank " << rank_
                              << " keeps an allocation of aborted group '" << group_.name()
                              << "' until exit (nvshmem_free would wait for "
                              << "every PE)";
    } else {
      nvshmem_free(base_);
    }
    base_ = nullptr;
  }
}

void NvshmemMemory::check_peer(const char* op, const char* arg, int peer) const {
  SYMMEM_CHECK_ARG(op, rank_, peer >= 0 && peer < world_, arg,
                   "is " << peer << "; the group has ranks 0.." << world_ - 1);
}

int NvshmemMemory::num_channels() const {
  return static_cast<int>(pad_bytes_ / sizeof(uint32_t)) / world_;
}

void NvshmemMemory::check_channel(const char* op, int channel) const {
  SYMMEM_CHECK_ARG(op, rank_, channel >= 0 && channel < num_channels(), "channel",
                   "is " << channel << "; the signal pad has " << num_channels() << " channels (0.."
                         << num_channels() - 1 << ")");
}

void* NvshmemMemory::ptr(int peer) const {
  check_peer("ptr", "peer", peer);
  return buffers_[peer];
}

uint32_t* NvshmemMemory::signal_pad(int peer) const {
  check_peer("signal_pad", "peer", peer);
  return tables_->pad(peer);
}

bool NvshmemMemory::direct_access(int peer) const {
  check_peer("direct_access", "peer", peer);
  return buffers_[peer] != nullptr;
}

DeviceHandle NvshmemMemory::device_handle(size_t offset, size_t length) const {
  return tables_->handle(offset, length, pad_bytes_);
}

NvSync NvshmemMemory::nv_sync(size_t offset, size_t length, Millis timeout) const {
  NvSync s;
  s.h = device_handle(offset, length);
  s.h.timeout_ns = cuda::timeout_to_ns(timeout);
  s.signals = reinterpret_cast<uint64_t*>(static_cast<char*>(base_) + sig_offset_);
  s.pes = d_pes_;
  s.base = static_cast<char*>(base_) + offset;
  return s;
}

namespace {

// The host recipe of every sync call (NOTE [timeout record]): raise an earlier timeout, check,
// launch, and on the null stream synchronise and raise this call's timeout at once.
template <class Launch>
void run_sync(const char* op, int rank, int device, Stream stream, Launch&& launch) {
  cuda::raise_device_timeout(op, rank);
  DeviceGuard guard(device);
  launch(static_cast<cudaStream_t>(stream));
  if (stream == nullptr) {
    SYMMEM_CUDART_CHECK(op, rank, cudaStreamSynchronize(nullptr));
    cuda::raise_device_timeout(op, rank);
  }
}

}  // namespace

void NvshmemMemory::barrier(int channel, Millis timeout, Stream stream) {
  const char* op = "barrier";
  check_channel(op, channel);
  NvSync s = nv_sync(0, bytes_, timeout);
  run_sync(op, rank_, device_, stream,
           [&](cudaStream_t st) { launch_barrier(s, channel, st, op); });
}

void NvshmemMemory::put_signal(int dst, int channel, Millis timeout, Stream stream) {
  const char* op = "put_signal";
  check_peer(op, "dst", dst);
  check_channel(op, channel);
  NvSync s = nv_sync(0, bytes_, timeout);
  run_sync(op, rank_, device_, stream,
           [&](cudaStream_t st) { launch_put_signal(s, dst, channel, st, op); });
}

void NvshmemMemory::wait_signal(int src, int channel, Millis timeout, Stream stream) {
  const char* op = "wait_signal";
  check_peer(op, "src", src);
  check_channel(op, channel);
  NvSync s = nv_sync(0, bytes_, timeout);
  run_sync(op, rank_, device_, stream,
           [&](cudaStream_t st) { launch_wait_signal(s, src, channel, st, op); });
}

void NvshmemMemory::signal_op(int peer, size_t slot, uint32_t value, SignalOp op, Stream stream) {
  uint32_t* pad = signal_pad(peer);  // the core checked peer and slot; null: not addressable
  cuda::device_signal_op(device_handle(0, bytes_), pad != nullptr ? pad + slot : nullptr, peer,
                         slot, value, op, stream, device_);
}

uint32_t NvshmemMemory::wait_until(size_t slot, Cmp cmp, uint32_t value, Millis timeout,
                                   Stream stream) {
  uint32_t* pad = signal_pad(rank_);
  return cuda::device_wait_until(device_handle(0, bytes_), pad != nullptr ? pad + slot : nullptr,
                                 slot, cmp, value, timeout, stream, device_);
}

}  // namespace symmem::nvshm
