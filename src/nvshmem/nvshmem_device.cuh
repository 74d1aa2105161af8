#pragma once

// Device-side signalling of the nvshmem backend (NOTE [nvshmem allocation layout]): a peer this
// PE reaches with loads/stores uses symmem's uint32 pad through symmem/device/sync.cuh, any
// other peer an NVSHMEM uint64 signal. Every wait has the handle's deadline and records a
// timeout like the device API does (NOTE [device timeouts]).
//
// Ordering. Direct peers: put_signal releases at system scope, wait_signal acquires (the
// device API's recipe). Remote peers: put_signal first calls nvshmem_quiet(), which completes
// every put this PE issued before (from this kernel or earlier ones on the stream), then sets
// the peer's signal; wait_signal polls its own signal and fences before the caller reads data.

#include <nvshmem.h>
#include <nvshmemx.h>

#include "nvshmem/nvshmem_memory.hpp"
#include "symmem/device/sync.cuh"

namespace symmem::nvshm {

namespace dev = symmem::device;

__device__ __forceinline__ uint64_t* nv_signal_slot(const NvSync& s, int channel, int src) {
  return s.signals + static_cast<size_t>(channel) * s.h.world_size + src;
}

// One thread. Raises dst's slot (channel, this rank).
__device__ __forceinline__ dev::Status nv_put_signal(const NvSync& s, int dst, int channel,
                                                     dev::Deadline deadline) {
  if (s.h.signal_pads[dst] != nullptr) {
    return dev::put_signal<dev::MemOrder::release>(s.h, dst, channel, deadline);
  }
  uint64_t* slot = nv_signal_slot(s, channel, s.h.rank);
  const int pe = s.pes[dst];
  nvshmem_quiet();
  // A slot holds one pending signal: wait until dst consumed the previous one.
  while (nvshmem_uint64_g(slot, pe) != 0) {
    if (deadline.expired()) return dev::record_timeout(s.h, channel, dst);
  }
  nvshmemx_signal_op(slot, 1, NVSHMEM_SIGNAL_SET, pe);
  return dev::Status::ok;
}

// One thread. Consumes this rank's slot (channel, src).
__device__ __forceinline__ dev::Status nv_wait_signal(const NvSync& s, int src, int channel,
                                                      dev::Deadline deadline) {
  if (s.h.signal_pads[src] != nullptr) {
    return dev::wait_signal<dev::MemOrder::acquire>(s.h, src, channel, deadline);
  }
  uint64_t* slot = nv_signal_slot(s, channel, src);
  while (nvshmem_signal_fetch(slot) != 1) {
    if (deadline.expired()) return dev::record_timeout(s.h, channel, src);
  }
  *reinterpret_cast<volatile uint64_t*>(slot) = 0;
  __threadfence_system();
  return dev::Status::ok;
}

// Every thread of the block: put_signal to every rank, then wait_signal from every rank.
// Returns the same status in every thread.
__device__ __forceinline__ dev::Status nv_barrier_block(const NvSync& s, int channel) {
  __shared__ int failed;
  if (threadIdx.x == 0) failed = 0;
  __syncthreads();  // also orders the block's earlier writes before the releases below
  const dev::Deadline deadline = dev::Deadline::of(s.h);
  for (int p = threadIdx.x; p < s.h.world_size; p += blockDim.x) {
    if (nv_put_signal(s, p, channel, deadline) != dev::Status::ok) atomicExch(&failed, 1);
  }
  __syncthreads();
  if (failed == 0) {
    for (int p = threadIdx.x; p < s.h.world_size; p += blockDim.x) {
      if (nv_wait_signal(s, p, channel, deadline) != dev::Status::ok) atomicExch(&failed, 1);
    }
  }
  __syncthreads();
  return failed ? dev::Status::timeout : dev::Status::ok;
}

}  // namespace symmem::nvshm
