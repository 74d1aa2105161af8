#pragma once

// The cuda backend's allocation: CUDA VMM memory shared across the processes of one host.
//
// NOTE [cuda rendezvous]
// Every rank of the group, collectively and in the same order:
//   1. checks locally (driver, device index, VMM and POSIX-fd handle support, pad size) and
//      gathers over the store: GPU uuid, pid, IpcChannel address, sizes, its
//      SYMMEM_ALLOW_SHARED_GPU setting and any local error. Every rank then applies the same
//      checks to the same table -- sizes agree, one host, no shared GPU unless every rank
//      allows it, the local errors -- so they all fail together with the same message;
//   2. checks peer access from its GPU to every other rank's GPU (cuDeviceCanAccessPeer on the
//      device with that uuid), creates its memory (cuMemCreate, POSIX-fd handle type, size
//      rounded up to the recommended granularity; layout: buffer, then the signal pad at a
//      256-byte aligned offset, then 16 bytes for the orphan stop flag, NOTE [orphan stop flags]
//      in symmem/device/sync.cuh), reserves one virtual range for all ranks
//      (world_size * stride), maps and zeroes its own part, exports the fd; a second gather
//      makes every failure collective again (naming the failing pair for peer access);
//   3. sends its fd to every peer over IpcChannel (SCM_RIGHTS) and receives theirs; imports,
//      maps each at base + peer * stride and sets read/write access for its own device;
//      uploads the device pointer tables (PeerTables); a third gather agrees on success;
//   4. a store barrier: from here every pad is zero and mapped everywhere, so signals are safe.
// Freeing synchronises the device (kernels may still use the memory), drops the tables, unmaps
// every rank's part and frees the range. Physical memory goes back to the driver once every
// process that mapped it has unmapped it (the import keeps a peer's memory alive while mapped),
// so no rank has to wait for another to free.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "cuda/peer_tables.hpp"
#include "cuda/timeout_record.hpp"
#include "symmem/backend.hpp"

namespace symmem::cuda {

class CudaMemory final : public BackendMemory {
 public:
  // Collective over `group` (NOTE [cuda rendezvous]).
  static std::shared_ptr<CudaMemory> create(const Group& group, const RendezvousInfo& info);
  ~CudaMemory() override;

  void* ptr(int peer) const override;
  void* const* ptrs_device() const override;
  uint32_t* signal_pad(int peer) const override;
  bool direct_access(int peer) const override;
  void barrier(int channel, Millis timeout, Stream stream) override;
  void put_signal(int dst, int channel, Millis timeout, Stream stream) override;
  void wait_signal(int src, int channel, Millis timeout, Stream stream) override;
  // NVSHMEM-style signals on raw pad slots (NOTE [GPU signals] in cuda/signals.hpp).
  void signal_op(int peer, size_t slot, uint32_t value, SignalOp op, Stream stream) override;
  uint32_t wait_until(size_t slot, Cmp cmp, uint32_t value, Millis timeout, Stream stream) override;
  DeviceHandle device_handle(size_t offset, size_t length) const override;

  int device() const { return device_; }
  // Rank `peer`'s orphan stop flag (NOTE [orphan stop flags]), as mapped in this process.
  int32_t* orphan_flag(int peer) const;

  CudaMemory(const CudaMemory&) = delete;
  CudaMemory& operator=(const CudaMemory&) = delete;

 private:
  struct Rendezvous;  // create()'s phases and the state they share (cuda_memory.cpp)

  CudaMemory() = default;
  void release() noexcept;

  int rank_ = 0;
  int world_ = 0;
  int device_ = 0;
  size_t bytes_ = 0;          // buffer bytes per rank
  size_t pad_bytes_ = 0;      // signal pad bytes per rank
  size_t pad_offset_ = 0;     // pad offset within a rank's part
  size_t orphan_offset_ = 0;  // the orphan stop flag's offset within a rank's part
  size_t stride_ = 0;         // bytes of a rank's part (granularity multiple)
  uintptr_t base_ = 0;        // CUdeviceptr of the reserved range (world_ * stride_)
  std::vector<char> mapped_;  // per rank: part mapped
  std::unique_ptr<PeerTables> tables_;
  AbortSlot abort_;         // the group's (NOTE [device abort] in timeout_record.hpp)
  uint64_t orphan_id_ = 0;  // register_orphan_flags' id (NOTE [orphan stop flags])
};

}  // namespace symmem::cuda
