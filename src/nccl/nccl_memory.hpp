#pragma once

// One allocation of the nccl backend: [buffer | signal pad] from ncclMemAlloc, registered as a
// symmetric window; peers' LSA pointers in host vectors and device tables.

#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "cuda/peer_tables.hpp"
#include "nccl/nccl_backend.hpp"
#include "symmem/backend.hpp"

namespace symmem::nccl {

class NcclMemory final : public BackendMemory {
 public:
  NcclMemory(const Group& group, std::shared_ptr<Comm> comm, const RendezvousInfo& info);
  ~NcclMemory() override;
  bool release_is_collective() const override { return true; }  // window deregistration

  void* ptr(int peer) const override;
  void* const* ptrs_device() const override {
    return tables_ ? tables_->buffers_device() : nullptr;
  }
  uint32_t* signal_pad(int peer) const override;
  bool direct_access(int peer) const override;
  void barrier(int channel, Millis timeout, Stream stream) override;
  void put_signal(int dst, int channel, Millis timeout, Stream stream) override;
  void wait_signal(int src, int channel, Millis timeout, Stream stream) override;
  DeviceHandle device_handle(size_t offset, size_t length) const override;
  // NVSHMEM-style signals on directly addressable pads, by the cuda backend's kernels (NOTE
  // [GPU signals] in src/cuda/signals.hpp).
  void signal_op(int peer, size_t slot, uint32_t value, SignalOp op, Stream stream) override;
  uint32_t wait_until(size_t slot, Cmp cmp, uint32_t value, Millis timeout, Stream stream) override;

  const std::shared_ptr<Comm>& comm() const { return comm_; }
  bool all_direct() const { return comm_->all_lsa; }

 private:
  void check_peer(const char* op, const char* arg, int peer) const;
  void release() noexcept;

  Group group_;
  std::shared_ptr<Comm> comm_;
  int rank_ = 0;
  int world_ = 0;
  int device_ = 0;
  size_t bytes_ = 0;
  size_t pad_offset_ = 0;
  size_t pad_bytes_ = 0;
  void* base_ = nullptr;  // ncclMemAlloc
  ncclWindow_t window_ = nullptr;
  std::vector<void*> buffers_;  // LSA pointers (nullptr outside the LSA team)
  std::unique_ptr<cuda::PeerTables> tables_;
};

}  // namespace symmem::nccl
