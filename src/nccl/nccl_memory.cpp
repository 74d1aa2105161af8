#include "nccl/nccl_memory.hpp"

#include <cstring>

#include "core/log.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/device_sync.hpp"
#include "cuda/signals.hpp"
#include "cuda/timeout_record.hpp"
#include "nccl/nccl_util.hpp"

namespace symmem::nccl {
namespace {

constexpr size_t kPadAlign = 256;

size_t align_up(size_t n, size_t a) {
  return (n + a - 1) / a * a;
}

using cuda::DeviceGuard;

}  // namespace

NcclMemory::NcclMemory(const Group& group, std::shared_ptr<Comm> comm, const RendezvousInfo& info)
    : group_(group),
      comm_(std::move(comm)),
      rank_(group.rank()),
      world_(group.world_size()),
      device_(info.device.index),
      bytes_(info.bytes) {
  const char* op = "allocate";
  DeviceGuard guard(device_);
  pad_offset_ = align_up(bytes_, kPadAlign);
  pad_bytes_ = info.signal_pad_bytes;
  SYMMEM_CHECK(op, rank_, pad_bytes_ >= sizeof(uint32_t) * world_, ErrorCode::InvalidArgument,
               "signal pad of " << pad_bytes_ << " bytes is smaller than one channel (" << world_
                                << " slots of 4 bytes)");
  const size_t total = align_up(pad_offset_ + pad_bytes_, NCCL_WIN_REQUIRED_ALIGNMENT);
  try {
    SYMMEM_NCCL_CHECK(op, rank_, comm_->comm, ncclMemAlloc(&base_, total));
    SYMMEM_CUDART_CHECK(op, rank_, cudaMemset(base_, 0, total));
    SYMMEM_CUDART_CHECK(op, rank_, cudaDeviceSynchronize());
    if (comm_->no_window()) {
      // NOTE [one-rank communicators] in nccl_backend.hpp: NCCL has no LSA team to give here.
      buffers_.assign(1, base_);
      std::vector<uint32_t*> pads{
          reinterpret_cast<uint32_t*>(static_cast<char*>(base_) + pad_offset_)};
      tables_ = std::make_unique<cuda::PeerTables>(device_, rank_, buffers_, std::move(pads));
      SYMMEM_LOG(INFO, ALLOC) << "nccl: allocation " << info.alloc_id << " of group '"
                              << group.name() << "': " << bytes_ << " bytes + " << pad_bytes_
                              << " pad bytes from ncclMemAlloc, one rank (no window)";
      return;
    }
    // Collective over the communicator: the core has checked size and order on every rank.
    SYMMEM_NCCL_CHECK_CODE(
        ErrorCode::BackendUnavailable, op, rank_, comm_->comm,
        ncclCommWindowRegister(comm_->comm, base_, total, &window_, NCCL_WIN_COLL_SYMMETRIC));
    SYMMEM_CHECK(op, rank_, window_ != nullptr, ErrorCode::BackendUnavailable,
                 "nccl backend: ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC) returned no "
                 "window: NCCL did not give this buffer symmetric access");

    // The window's LSA pointers, gathered on the device (ncclGetLsaPointer is device code).
    void** d_lsa = nullptr;
    SYMMEM_CUDART_CHECK(op, rank_, cudaMalloc(&d_lsa, sizeof(void*) * world_));
    buffers_.assign(world_, nullptr);
    cudaError_t e = launch_lsa_pointers(window_, comm_->lsa, world_, rank_, d_lsa, nullptr);
    if (e == cudaSuccess) {
      e = cudaMemcpy(buffers_.data(), d_lsa, sizeof(void*) * world_, cudaMemcpyDeviceToHost);
    }
    (void)cudaFree(d_lsa);
    SYMMEM_CUDART_CHECK(op, rank_, e);
    SYMMEM_CHECK(op, rank_, buffers_[rank_] != nullptr, ErrorCode::BackendUnavailable,
                 "nccl backend: the symmetric window has no LSA pointer for this rank");
    std::vector<uint32_t*> pads(world_, nullptr);
    for (int p = 0; p < world_; ++p) {
      if (buffers_[p] != nullptr) {
        pads[p] = reinterpret_cast<uint32_t*>(static_cast<char*>(buffers_[p]) + pad_offset_);
      }
    }
    tables_ = std::make_unique<cuda::PeerTables>(device_, rank_, buffers_, std::move(pads));
  } catch (...) {
    release();
    throw;
  }
  int direct = 0;
  for (int p = 0; p < world_; ++p) direct += buffers_[p] != nullptr;
  SYMMEM_LOG(INFO, ALLOC) << "nccl: allocation " << info.alloc_id << " of group '" << group.name()
                          << "': " << bytes_ << " bytes + " << pad_bytes_
                          << " pad bytes in a symmetric window, " << direct << "/" << world_
                          << " peers load/store accessible";
}

NcclMemory::~NcclMemory() {
  release();
}

void NcclMemory::release() noexcept {
  DeviceGuard guard(device_);
  if (base_ != nullptr || window_ != nullptr) (void)cudaDeviceSynchronize();
  tables_.reset();
  // NCCL may synchronise the communicator inside deregistration (registration is collective):
  // ranks free nccl allocations in the same order, as they allocated them.
  bool stopped = false;  // NOTE [nccl abort]: the communicator of an aborted group
  {
    std::lock_guard<std::mutex> lock(comm_->state_mu);
    stopped = comm_->stop_requested;
  }
  if (window_ != nullptr && stopped) {
    // Collective: the peers that failed would never come. ncclCommDestroy of the revoked
    // communicator (or ncclCommAbort) releases the window.
    SYMMEM_LOG(INFO, ALLOC) << "nccl: group '" << comm_->group_name
                            << "' was aborted: its window is not deregistered (collective)";
    window_ = nullptr;
  }
  if (window_ != nullptr) {
    ncclResult_t r = ncclCommWindowDeregister(comm_->comm, window_);
    if (r != ncclSuccess) {
      SYMMEM_LOG(WARN, ALLOC) << "nccl: ncclCommWindowDeregister failed: " << ncclGetErrorString(r);
    }
    window_ = nullptr;
  }
  if (base_ != nullptr) {
    ncclResult_t r = ncclMemFree(base_);
    if (r != ncclSuccess) {
      SYMMEM_LOG(WARN, ALLOC) << "nccl: ncclMemFree failed: " << ncclGetErrorString(r);
    }
    base_ = nullptr;
  }
}

void NcclMemory::check_peer(const char* op, const char* arg, int peer) const {
  SYMMEM_CHECK_ARG(op, rank_, peer >= 0 && peer < world_, arg,
                   "= " << peer << " is not a rank of the group (world size " << world_ << ")");
}

void* NcclMemory::ptr(int peer) const {
  check_peer("ptr", "peer", peer);
  return buffers_[peer];
}

uint32_t* NcclMemory::signal_pad(int peer) const {
  check_peer("signal_pad", "peer", peer);
  return tables_->pad(peer);
}

bool NcclMemory::direct_access(int peer) const {
  check_peer("direct_access", "peer", peer);
  return buffers_[peer] != nullptr;
}

DeviceHandle NcclMemory::device_handle(size_t offset, size_t length) const {
  DeviceHandle h = tables_->handle(offset, length, pad_bytes_);
  // NOTE [device abort]: the group's abort word ends this allocation's device waits too.
  const cuda::AbortSlot abort = cuda::abort_slot(group_);
  h.abort_word = abort.word;
  h.abort_slot = abort.slot;
  return h;
}

void NcclMemory::barrier(int channel, Millis timeout, Stream stream) {
  SYMMEM_CHECK("barrier", rank_, all_direct(), ErrorCode::Unsupported,
               "nccl backend: a barrier on the signal pad needs every peer in this rank's NCCL "
               "LSA team ("
                   << comm_->lsa.n_ranks << " of " << world_
                   << " are); the nvshmem backend synchronises across hosts");
  cuda::run_device_sync(cuda::SyncKind::barrier, device_handle(0, bytes_), -1, channel, timeout,
                        stream, device_);
}

void NcclMemory::put_signal(int dst, int channel, Millis timeout, Stream stream) {
  check_peer("put_signal", "dst", dst);
  SYMMEM_CHECK("put_signal", rank_, buffers_[dst] != nullptr, ErrorCode::Unsupported,
               "nccl backend: rank " << dst << " is outside this rank's NCCL LSA team (no "
                                     << "load/store access); the nvshmem backend signals "
                                        "across hosts");
  cuda::run_device_sync(cuda::SyncKind::put_signal, device_handle(0, bytes_), dst, channel, timeout,
                        stream, device_);
}

void NcclMemory::wait_signal(int src, int channel, Millis timeout, Stream stream) {
  check_peer("wait_signal", "src", src);
  SYMMEM_CHECK("wait_signal", rank_, buffers_[src] != nullptr, ErrorCode::Unsupported,
               "nccl backend: rank " << src << " is outside this rank's NCCL LSA team (no "
                                     << "load/store access); the nvshmem backend signals "
                                        "across hosts");
  cuda::run_device_sync(cuda::SyncKind::wait_signal, device_handle(0, bytes_), src, channel,
                        timeout, stream, device_);
}

void NcclMemory::signal_op(int peer, size_t slot, uint32_t value, SignalOp op, Stream stream) {
  uint32_t* pad = signal_pad(peer);  // the core checked peer and slot; null: not addressable
  cuda::device_signal_op(device_handle(0, bytes_), pad != nullptr ? pad + slot : nullptr, peer,
                         slot, value, op, stream, device_);
}

uint32_t NcclMemory::wait_until(size_t slot, Cmp cmp, uint32_t value, Millis timeout,
                                Stream stream) {
  uint32_t* pad = signal_pad(rank_);
  return cuda::device_wait_until(device_handle(0, bytes_), pad != nullptr ? pad + slot : nullptr,
                                 slot, cmp, value, timeout, stream, device_);
}

}  // namespace symmem::nccl
