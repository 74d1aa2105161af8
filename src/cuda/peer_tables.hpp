#pragma once

// Device arrays of peer pointers, the tables a DeviceHandle points at. Shared by the cuda,
// nccl and nvshmem plugins (symmem_cuda_common).
//
// One table of buffer pointers and one of signal-pad pointers for the whole allocation, plus
// one buffer table per view offset, created on first use and kept until the allocation is
// freed (views are cheap and repeat: the cache is keyed by offset). Tables are uploaded on a
// private non-blocking stream with this thread's capture mode relaxed, so asking for a new
// view's handle while another stream is being captured into a CUDA graph is allowed.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "symmem/device_handle.hpp"

namespace symmem::cuda {

// Makes `device` current for the scope and restores the previous device after.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
  bool changed_ = false;
};

class PeerTables {
 public:
  // `buffers[p]`/`pads[p]`: device addresses of peer p's buffer and pad in this process
  // (nullptr where not directly reachable). `rank` labels errors.
  PeerTables(int device, int rank, std::vector<void*> buffers, std::vector<uint32_t*> pads);
  ~PeerTables();
  PeerTables(const PeerTables&) = delete;
  PeerTables& operator=(const PeerTables&) = delete;

  int world_size() const { return static_cast<int>(buffers_.size()); }
  void* buffer(int peer) const { return buffers_[peer]; }
  uint32_t* pad(int peer) const { return pads_[peer]; }
  void* const* buffers_device() const { return buffers_dev_; }
  uint32_t* const* pads_device() const { return pads_dev_; }
  // Device table of buffers_[p] + offset (nullptr entries stay nullptr). Cached.
  void* const* view_buffers_device(size_t offset) const;
  // The DeviceHandle of bytes [offset, offset + length) of every rank's buffer, with signal
  // pads of `pad_bytes` each (one channel = world_size() slots); no deadline of its own.
  DeviceHandle handle(size_t offset, size_t length, size_t pad_bytes) const;

 private:
  void** upload(const std::vector<void*>& host) const;

  int device_;
  int rank_;
  std::vector<void*> buffers_;
  std::vector<uint32_t*> pads_;
  void** buffers_dev_ = nullptr;
  uint32_t** pads_dev_ = nullptr;
  cudaStream_t stream_ = nullptr;
  mutable std::mutex mu_;
  mutable std::map<size_t, void**> views_;
};

}  // namespace symmem::cuda
