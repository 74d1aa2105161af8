#pragma once

// One allocation of the nccl backend: [buffer | signal pad] from ncclMemAlloc, registered as a
// symmetric window; peers' LSA pointers in host vectors and device tables.

#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "nccl/nccl_backend.hpp"
#include "symmem/backend.hpp"

namespace symmem::nccl {

class NcclMemory final : public BackendMemory {
 public:
  NcclMemory(const Group& group, std::shared_ptr<Comm> comm, const RendezvousInfo& info);
  ~NcclMemory() override;

  void* ptr(int peer) const override;
  void* const* ptrs_device() const override { return d_buffers_; }
  uint32_t* signal_pad(int peer) const override;
  bool direct_access(int peer) const override;
  void barrier(int channel, Millis timeout, Stream stream) override;
  void put_signal(int dst, int channel, Millis timeout, Stream stream) override;
  void wait_signal(int src, int channel, Millis timeout, Stream stream) override;
  DeviceHandle device_handle(size_t offset, size_t length) const override;

  const std::shared_ptr<Comm>& comm() const { return comm_; }
  bool all_direct() const { return comm_->all_lsa; }

 private:
  void check_peer(const char* op, const char* arg, int peer) const;
  void check_channel(const char* op, int channel) const;
  DeviceHandle handle_for_sync(Millis timeout) const;
  void release() noexcept;

  Group group_;
  std::shared_ptr<Comm> comm_;
  int rank_ = 0;
  int world_ = 0;
  int device_ = 0;
  size_t bytes_ = 0;
  size_t pad_offset_ = 0;
  size_t pad_bytes_ = 0;
  void* base_ = nullptr;        // ncclMemAlloc
  ncclWindow_t window_ = nullptr;
  std::vector<void*> buffers_;  // LSA pointers (nullptr outside the LSA team)
  std::vector<uint32_t*> pads_;
  void** d_buffers_ = nullptr;       // device tables [world]
  uint32_t** d_pads_ = nullptr;
  int32_t* timeout_record_ = nullptr;  // host-mapped, 4 ints (NOTE [device timeouts])
  mutable std::mutex views_mu_;
  mutable std::map<size_t, void**> view_tables_;  // offset -> device table of buffers + offset
};

}  // namespace symmem::nccl
