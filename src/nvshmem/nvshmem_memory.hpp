#pragma once

// One allocation of the nvshmem backend.
//
// NOTE [nvshmem allocation layout]
// One nvshmem_malloc per allocation (collective over every PE), laid out as
//   [ buffer (bytes) | signal pad: pad_slots x uint32 | NVSHMEM signals: pad_slots x uint64 ]
// The uint32 pad is symmem's signal pad (NOTE [signal pad]): DeviceHandle::signal_pads points
// at it for every peer this PE reaches with loads and stores (nvshmem_ptr != nullptr), so the
// device API and the cuda backend's kernels work unchanged. A peer that is not directly
// reachable (another host) is signalled through NVSHMEM instead: slot (channel, src) of the
// uint64 array, set with nvshmemx_signal_op after nvshmem_quiet, polled with
// nvshmem_signal_fetch. Reachability is symmetric, so sender and receiver always agree on which
// of the two slots a (src, dst) pair uses. Both kinds are zero at rest.

#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include <cuda_runtime_api.h>

#include "cuda/peer_tables.hpp"
#include "symmem/backend.hpp"

namespace symmem::nvshm {

// What the nvshmem kernels receive (trivially copyable).
struct NvSync {
  DeviceHandle h;     // uint32 pads of direct peers, buffers of direct peers (nullptr else)
  uint64_t* signals;  // this PE's uint64 signal array (a symmetric address)
  const int* pes;     // [world] group rank -> PE
  char* base;         // this PE's buffer (a symmetric address): remote puts target it
};

class NvshmemMemory final : public BackendMemory {
 public:
  NvshmemMemory(const Group& group, const RendezvousInfo& info);
  ~NvshmemMemory() override;
  bool release_is_collective() const override { return true; }  // nvshmem_free

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

  // For the ops: the sync view of [offset, offset+length).
  NvSync nv_sync(size_t offset, size_t length, Millis timeout) const;
  bool all_direct() const { return all_direct_; }
  int pe(int rank) const { return pes_[rank]; }
  char* local_base() const { return static_cast<char*>(base_); }
  size_t bytes() const { return bytes_; }
  int num_channels() const;
  void check_channel(const char* op, int channel) const;
  void check_peer(const char* op, const char* arg, int peer) const;

 private:
  void release() noexcept;

  Group group_;
  int rank_ = 0;
  int world_ = 0;
  int device_ = 0;
  size_t bytes_ = 0;
  size_t pad_offset_ = 0;
  size_t pad_bytes_ = 0;
  size_t sig_offset_ = 0;
  void* base_ = nullptr;  // nvshmem_malloc
  bool all_direct_ = false;
  std::vector<int> pes_;
  std::vector<void*> buffers_;  // nvshmem_ptr of each rank (nullptr: not directly reachable)
  std::unique_ptr<cuda::PeerTables> tables_;
  int* d_pes_ = nullptr;
};

// Launchers (nvshmem_sync.cu). `op` and the rank name errors.
// nvshmemx_collective_launch with an error naming `op` (NOTE [nvshmem collective launch]).
void collective_launch(const void* kernel, dim3 grid, dim3 block, void** args, size_t smem,
                       cudaStream_t stream, const char* op, int rank);
void launch_barrier(const NvSync& s, int channel, cudaStream_t stream, const char* op);
void launch_put_signal(const NvSync& s, int dst, int channel, cudaStream_t stream, const char* op);
void launch_wait_signal(const NvSync& s, int src, int channel, cudaStream_t stream, const char* op);

}  // namespace symmem::nvshm
