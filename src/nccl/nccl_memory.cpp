#include "nccl/nccl_memory.hpp"

#include <cstring>

#include "core/log.hpp"
#include "cuda/sync_launch.hpp"
#include "cuda/timeout_record.hpp"
#include "nccl/nccl_util.hpp"

namespace symmem::nccl {
namespace {

constexpr size_t kPadAlign = 256;

size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

// Sets the device for the scope, restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&prev_) != cudaSuccess) prev_ = -1;
    if (prev_ != device) (void)cudaSetDevice(device);
  }
  ~DeviceGuard() {
    if (prev_ >= 0) (void)cudaSetDevice(prev_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = -1;
};

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
               "signal pad of " << pad_bytes_ << " bytes is smaller than one channel ("
                                << world_ << " slots of 4 bytes)");
  const size_t total = align_up(pad_offset_ + pad_bytes_, NCCL_WIN_REQUIRED_ALIGNMENT);
  try {
    SYMMEM_NCCL_CHECK(op, rank_, comm_->comm, ncclMemAlloc(&base_, total));
    SYMMEM_NCCL_CUDA_CHECK(op, rank_, cudaMemset(base_, 0, total));
    SYMMEM_NCCL_CUDA_CHECK(op, rank_, cudaDeviceSynchronize());
    // Collective over the communicator: the core has checked size and order on every rank.
    SYMMEM_NCCL_CHECK_CODE(ErrorCode::BackendUnavailable, op, rank_, comm_->comm,
                           ncclCommWindowRegister(comm_->comm, base_, total, &window_,
                                                  NCCL_WIN_COLL_SYMMETRIC));
    SYMMEM_CHECK(op, rank_, window_ != nullptr, ErrorCode::BackendUnavailable,
                 "nccl backend: ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC) returned no "
                 "window: NCCL did not give this buffer symmetric access");

    SYMMEM_NCCL_CUDA_CHECK(op, rank_, cudaMalloc(&d_buffers_, sizeof(void*) * world_));
    SYMMEM_NCCL_CUDA_CHECK(op, rank_, cudaMalloc(&d_pads_, sizeof(uint32_t*) * world_));
    SYMMEM_NCCL_CUDA_CHECK(op, rank_, launch_lsa_pointers(window_, comm_->lsa, world_, rank_,
                                                          d_buffers_, nullptr));
    buffers_.assign(world_, nullptr);
    SYMMEM_NCCL_CUDA_CHECK(op, rank_, cudaMemcpy(buffers_.data(), d_buffers_,
                                                 sizeof(void*) * world_, cudaMemcpyDeviceToHost));
    pads_.assign(world_, nullptr);
    for (int p = 0; p < world_; ++p) {
      if (buffers_[p] != nullptr) {
        pads_[p] = reinterpret_cast<uint32_t*>(static_cast<char*>(buffers_[p]) + pad_offset_);
      }
    }
    SYMMEM_CHECK(op, rank_, buffers_[rank_] != nullptr, ErrorCode::BackendUnavailable,
                 "nccl backend: the symmetric window has no LSA pointer for this rank");
    SYMMEM_NCCL_CUDA_CHECK(op, rank_, cudaMemcpy(d_pads_, pads_.data(),
                                                 sizeof(uint32_t*) * world_, cudaMemcpyHostToDevice));
    timeout_record_ = cuda::timeout_record();
  } catch (...) {
    release();
    throw;
  }
  int direct = 0;
  for (int p = 0; p < world_; ++p) direct += buffers_[p] != nullptr;
  SYMMEM_LOG(INFO, ALLOC) << "nccl: allocation " << info.alloc_id << " of group '"
                          << group.name() << "': " << bytes_ << " bytes + " << pad_bytes_
                          << " pad bytes in a symmetric window, " << direct << "/" << world_
                          << " peers load/store accessible";
}

NcclMemory::~NcclMemory() { release(); }

void NcclMemory::release() noexcept {
  DeviceGuard guard(device_);
  if (base_ != nullptr || window_ != nullptr) (void)cudaDeviceSynchronize();
  {
    std::lock_guard<std::mutex> lock(views_mu_);
    for (auto& [off, table] : view_tables_) (void)cudaFree(table);
    view_tables_.clear();
  }
  if (d_buffers_) (void)cudaFree(d_buffers_);
  if (d_pads_) (void)cudaFree(d_pads_);
  d_buffers_ = nullptr;
  d_pads_ = nullptr;
  // NCCL may synchronise the communicator inside deregistration (registration is collective):
  // ranks free nccl allocations in the same order, as they allocated them.
  if (window_ != nullptr) {
    ncclResult_t r = ncclCommWindowDeregister(comm_->comm, window_);
    if (r != ncclSuccess) {
      SYMMEM_LOG(WARN, ALLOC) << "nccl: ncclCommWindowDeregister failed: "
                              << ncclGetErrorString(r);
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

void NcclMemory::check_channel(const char* op, int channel) const {
  const int channels = static_cast<int>(pad_bytes_ / sizeof(uint32_t)) / world_;
  SYMMEM_CHECK_ARG(op, rank_, channel >= 0 && channel < channels, "channel",
                   "= " << channel << " is out of range [0, " << channels << ")");
}

void* NcclMemory::ptr(int peer) const {
  check_peer("ptr", "peer", peer);
  return buffers_[peer];
}

uint32_t* NcclMemory::signal_pad(int peer) const {
  check_peer("signal_pad", "peer", peer);
  return pads_[peer];
}

bool NcclMemory::direct_access(int peer) const {
  check_peer("direct_access", "peer", peer);
  return buffers_[peer] != nullptr;
}

DeviceHandle NcclMemory::device_handle(size_t offset, size_t length) const {
  DeviceHandle h;
  h.rank = rank_;
  h.world_size = world_;
  h.size = length;
  h.pad_slots = static_cast<uint32_t>(pad_bytes_ / sizeof(uint32_t));
  h.num_channels = h.pad_slots / static_cast<uint32_t>(world_);
  h.signal_pads = d_pads_;
  h.timeout_record = timeout_record_;
  h.timeout_ns = cuda::timeout_to_ns(Millis(-1));
  if (offset == 0) {
    h.buffers = d_buffers_;
    return h;
  }
  std::lock_guard<std::mutex> lock(views_mu_);
  auto it = view_tables_.find(offset);
  if (it == view_tables_.end()) {
    DeviceGuard guard(device_);
    std::vector<void*> shifted(world_, nullptr);
    for (int p = 0; p < world_; ++p) {
      if (buffers_[p] != nullptr) shifted[p] = static_cast<char*>(buffers_[p]) + offset;
    }
    void** table = nullptr;
    SYMMEM_NCCL_CUDA_CHECK("device_handle", rank_, cudaMalloc(&table, sizeof(void*) * world_));
    cudaError_t e = cudaMemcpy(table, shifted.data(), sizeof(void*) * world_,
                               cudaMemcpyHostToDevice);
    if (e != cudaSuccess) {
      (void)cudaFree(table);
      SYMMEM_NCCL_CUDA_CHECK("device_handle", rank_, e);
    }
    it = view_tables_.emplace(offset, table).first;
  }
  h.buffers = it->second;
  return h;
}

DeviceHandle NcclMemory::handle_for_sync(Millis timeout) const {
  DeviceHandle h = device_handle(0, bytes_);
  h.timeout_ns = cuda::timeout_to_ns(timeout);
  return h;
}

void NcclMemory::barrier(int channel, Millis timeout, Stream stream) {
  const char* op = "barrier";
  check_channel(op, channel);
  SYMMEM_CHECK(op, rank_, all_direct(), ErrorCode::Unsupported,
               "nccl backend: barrier on a signal pad needs every peer in this rank's NCCL LSA "
               "team (" << comm_->lsa.n_ranks << " of " << world_
                        << " are); the nvshmem backend synchronises across hosts");
  DeviceGuard guard(device_);
  cuda::launch_barrier(op, handle_for_sync(timeout), channel, static_cast<cudaStream_t>(stream));
}

void NcclMemory::put_signal(int dst, int channel, Millis timeout, Stream stream) {
  const char* op = "put_signal";
  check_peer(op, "dst", dst);
  check_channel(op, channel);
  SYMMEM_CHECK(op, rank_, buffers_[dst] != nullptr, ErrorCode::Unsupported,
               "nccl backend: rank " << dst << " is outside this rank's NCCL LSA team (no "
                                     << "load/store access); the nvshmem backend signals "
                                        "across hosts");
  DeviceGuard guard(device_);
  cuda::launch_put_signal(op, handle_for_sync(timeout), dst, channel,
                          static_cast<cudaStream_t>(stream));
}

void NcclMemory::wait_signal(int src, int channel, Millis timeout, Stream stream) {
  const char* op = "wait_signal";
  check_peer(op, "src", src);
  check_channel(op, channel);
  SYMMEM_CHECK(op, rank_, buffers_[src] != nullptr, ErrorCode::Unsupported,
               "nccl backend: rank " << src << " is outside this rank's NCCL LSA team (no "
                                     << "load/store access); the nvshmem backend signals "
                                        "across hosts");
  DeviceGuard guard(device_);
  cuda::launch_wait_signal(op, handle_for_sync(timeout), src, channel,
                           static_cast<cudaStream_t>(stream));
}

}  // namespace symmem::nccl
