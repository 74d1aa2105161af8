#pragma once

// Bodies of symmem/device/sync.cuh (include that header, not this one).

#include <cstdint>

namespace symmem::device {
namespace detail {

__host__ __device__ constexpr MemOrder put_order(MemOrder o) {
  return (o == MemOrder::release || o == MemOrder::acq_rel) ? MemOrder::release : MemOrder::relaxed;
}
__host__ __device__ constexpr MemOrder wait_order(MemOrder o) {
  return (o == MemOrder::acquire || o == MemOrder::acq_rel) ? MemOrder::acquire : MemOrder::relaxed;
}

SYMMEM_DEVICE_INLINE int block_thread_index() {
  return static_cast<int>(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
}
SYMMEM_DEVICE_INLINE int block_thread_count() {
  return static_cast<int>(blockDim.x * blockDim.y * blockDim.z);
}
SYMMEM_DEVICE_INLINE int lane_index() {
  return block_thread_index() & 31;
}

}  // namespace detail

SYMMEM_DEVICE_INLINE Deadline Deadline::after(uint64_t timeout_ns) {
  return Deadline{globaltimer_ns() + (timeout_ns == 0 ? kDefaultTimeoutNs : timeout_ns)};
}

SYMMEM_DEVICE_INLINE Deadline Deadline::with_abort(const int32_t* word,
                                                   const int32_t* orphan_flag) const {
  Deadline d = *this;
  if (word != nullptr) d.abort = word;
  if (orphan_flag != nullptr) d.orphan = orphan_flag;
  if (word != nullptr || orphan_flag != nullptr) {
    d.abort_after_ns = globaltimer_ns() + kAbortPollAfterNs;
  }
  return d;
}

SYMMEM_DEVICE_INLINE Deadline Deadline::with_progress(int32_t* rec,
                                                      uint64_t report_after_ns) const {
  Deadline d = *this;
  if (rec != nullptr && report_after_ns != 0) {
    d.progress = rec;
    d.report_ns = globaltimer_ns() + report_after_ns;
  }
  return d;
}

SYMMEM_DEVICE_INLINE void note_progress(int32_t* rec, bool set, int rank, int channel, int peer) {
  const uint4 v = set ? make_uint4(1u, static_cast<uint32_t>(rank), static_cast<uint32_t>(channel),
                                   static_cast<uint32_t>(peer))
                      : make_uint4(0u, 0u, 0u, 0u);
  st_v4_volatile(rec + 4 * (static_cast<uint32_t>(peer) % kProgressSlots), v);
  __threadfence_system();
}

namespace detail {

// One spin's deadline check of a wait on `peer`: true when it expired (the progress note, if
// any, is cleared then); notes the wait once after deadline.report_ns (*noted).
SYMMEM_DEVICE_INLINE bool spin_expired(const DeviceHandle& h, Deadline& deadline, bool* noted,
                                       int channel, int peer) {
  const uint64_t now = globaltimer_ns();
  if (now > deadline.end_ns || (now > deadline.abort_after_ns && deadline.aborted())) {
    if (*noted) note_progress(deadline.progress, false, h.rank, channel, peer);
    return true;
  }
  if (now > deadline.report_ns) {  // report_ns is ~0 without a progress record
    deadline.report_ns = ~0ull;
    if (deadline.progress != nullptr) {
      *noted = true;
      note_progress(deadline.progress, true, h.rank, channel, peer);
    }
  }
  return false;
}

}  // namespace detail

template <class T>
SYMMEM_DEVICE_INLINE T* peer_ptr(const DeviceHandle& h, int peer) {
  return static_cast<T*>(h.buffers[peer]);
}

SYMMEM_DEVICE_INLINE uint32_t* signal_slot(const DeviceHandle& h, int owner, int channel, int src) {
  return h.signal_pads[owner] + static_cast<uint32_t>(channel) * h.world_size + src;
}

template <int kVecs>
SYMMEM_DEVICE_INLINE bool write_record(int32_t* rec, const uint4 (&v)[kVecs]) {
  static_assert(kVecs >= 1, "write_record: a record has a head vector");
  // No atomics on host memory: NOTE [device records].
  if (load_volatile(reinterpret_cast<const uint32_t*>(rec)) != 0) return false;
  if constexpr (kVecs > 1) {
#pragma unroll
    for (int i = 1; i < kVecs; ++i) st_v4_volatile(rec + 4 * i, v[i]);
    __threadfence_system();
  }
  st_v4_volatile(rec, v[0]);
  __threadfence_system();
  return true;
}

SYMMEM_DEVICE_INLINE bool write_timeout_record(int32_t* rec, int rank, int channel, int peer,
                                               int32_t flag) {
  const uint4 v[1] = {make_uint4(static_cast<uint32_t>(flag), static_cast<uint32_t>(rank),
                                 static_cast<uint32_t>(channel), static_cast<uint32_t>(peer))};
  return write_record(rec, v);
}

SYMMEM_DEVICE_INLINE Status record_timeout(const DeviceHandle& h, int channel, int peer) {
  int32_t* rec = h.timeout_record;
  if (rec == nullptr) __trap();
  const bool aborted =
      (h.abort_word != nullptr && *reinterpret_cast<const volatile int32_t*>(h.abort_word) != 0) ||
      (h.orphan_flag != nullptr && *reinterpret_cast<const volatile int32_t*>(h.orphan_flag) != 0);
  (void)write_timeout_record(rec, h.rank, channel, peer,
                             aborted ? kAbortFlagBase + h.abort_slot : 1);  // NOTE [device abort]
#if defined(SYMMEM_DEVICE_TRAP_ON_TIMEOUT)
  __trap();
#endif
  return Status::timeout;
}

// ---- one thread ------------------------------------------------------------------------------

template <MemOrder kOrder>
SYMMEM_DEVICE_INLINE Status put_signal(const DeviceHandle& h, int dst, int channel,
                                       Deadline deadline) {
  static_assert(kOrder == MemOrder::relaxed || kOrder == MemOrder::release,
                "put_signal: order must be relaxed or release");
  uint32_t* slot = signal_slot(h, dst, channel, h.rank);
  bool noted = false;
  while (true) {
    // Poll cheaply; take the slot with one CAS (which carries the release).
    if (load_sys<MemOrder::relaxed>(slot) == 0 && cas_sys<kOrder>(slot, 0u, 1u) == 0u) {
      if (noted) note_progress(deadline.progress, false, h.rank, channel, dst);
      return Status::ok;
    }
    if (detail::spin_expired(h, deadline, &noted, channel, dst)) {
      return record_timeout(h, channel, dst);
    }
  }
}

template <MemOrder kOrder>
SYMMEM_DEVICE_INLINE Status wait_signal(const DeviceHandle& h, int src, int channel,
                                        Deadline deadline) {
  static_assert(kOrder == MemOrder::relaxed || kOrder == MemOrder::acquire,
                "wait_signal: order must be relaxed or acquire");
  uint32_t* slot = signal_slot(h, h.rank, channel, src);
  bool noted = false;
  while (true) {
    if (load_sys<MemOrder::relaxed>(slot) == 1 && cas_sys<kOrder>(slot, 1u, 0u) == 1u) {
      if (noted) note_progress(deadline.progress, false, h.rank, channel, src);
      return Status::ok;
    }
    if (detail::spin_expired(h, deadline, &noted, channel, src)) {
      return record_timeout(h, channel, src);
    }
  }
}

template <MemOrder kOrder>
SYMMEM_DEVICE_INLINE Status put_signal(const DeviceHandle& h, int dst, int channel) {
  return put_signal<kOrder>(h, dst, channel, Deadline::of(h));
}

template <MemOrder kOrder>
SYMMEM_DEVICE_INLINE Status wait_signal(const DeviceHandle& h, int src, int channel) {
  return wait_signal<kOrder>(h, src, channel, Deadline::of(h));
}

template <MemOrder kOrder>
SYMMEM_DEVICE_INLINE Status barrier(const DeviceHandle& h, int channel) {
  const Deadline deadline = Deadline::of(h);
  for (int peer = 0; peer < h.world_size; ++peer) {
    if (put_signal<detail::put_order(kOrder)>(h, peer, channel, deadline) != Status::ok) {
      return Status::timeout;
    }
  }
  for (int peer = 0; peer < h.world_size; ++peer) {
    if (wait_signal<detail::wait_order(kOrder)>(h, peer, channel, deadline) != Status::ok) {
      return Status::timeout;
    }
  }
  return Status::ok;
}

// ---- one warp --------------------------------------------------------------------------------
// Lane 0 does the signalling for put/wait (one slot); barrier spreads peers over the lanes.
// Release side: __syncwarp() orders the lanes' writes before lane 0's (cumulative) release.
// Acquire side: lane 0's acquire, then __syncwarp(), makes peers' writes visible to all lanes.

template <MemOrder kOrder>
SYMMEM_DEVICE_INLINE Status put_signal_warp(const DeviceHandle& h, int dst, int channel) {
  __syncwarp();
  int failed = 0;
  if (detail::lane_index() == 0) {
    fence_sys<kOrder>();
    failed = put_signal<kOrder>(h, dst, channel) != Status::ok;
  }
  return __any_sync(0xffffffffu, failed) ? Status::timeout : Status::ok;
}

template <MemOrder kOrder>
SYMMEM_DEVICE_INLINE Status wait_signal_warp(const DeviceHandle& h, int src, int channel) {
  int failed = 0;
  if (detail::lane_index() == 0) failed = wait_signal<kOrder>(h, src, channel) != Status::ok;
  failed = __any_sync(0xffffffffu, failed);
  __syncwarp();  // votes do not order memory; __syncwarp does
  return failed ? Status::timeout : Status::ok;
}

template <MemOrder kOrder>
SYMMEM_DEVICE_INLINE Status barrier_warp(const DeviceHandle& h, int channel) {
  return barrier_warp<kOrder>(h, channel, Deadline::of(h));
}

template <MemOrder kOrder>
SYMMEM_DEVICE_INLINE Status barrier_warp(const DeviceHandle& h, int channel, Deadline deadline) {
  constexpr MemOrder kPut = detail::put_order(kOrder);
  constexpr MemOrder kWait = detail::wait_order(kOrder);
  __syncwarp();
  fence_sys<kPut>();
  int failed = 0;
  for (int peer = detail::lane_index(); peer < h.world_size && !failed; peer += 32) {
    failed = put_signal<kPut>(h, peer, channel, deadline) != Status::ok;
  }
  for (int peer = detail::lane_index(); peer < h.world_size && !failed; peer += 32) {
    failed = wait_signal<kWait>(h, peer, channel, deadline) != Status::ok;
  }
  failed = __any_sync(0xffffffffu, failed);
  __syncwarp();  // votes do not order memory; __syncwarp does
  return failed ? Status::timeout : Status::ok;
}

// ---- one block -------------------------------------------------------------------------------

template <MemOrder kOrder>
SYMMEM_DEVICE_INLINE Status put_signal_block(const DeviceHandle& h, int dst, int channel) {
  __syncthreads();
  int failed = 0;
  if (detail::block_thread_index() == 0) {
    fence_sys<kOrder>();
    failed = put_signal<kOrder>(h, dst, channel) != Status::ok;
  }
  return __syncthreads_or(failed) ? Status::timeout : Status::ok;
}

template <MemOrder kOrder>
SYMMEM_DEVICE_INLINE Status wait_signal_block(const DeviceHandle& h, int src, int channel) {
  int failed = 0;
  if (detail::block_thread_index() == 0) {
    failed = wait_signal<kOrder>(h, src, channel) != Status::ok;
  }
  return __syncthreads_or(failed) ? Status::timeout : Status::ok;
}

template <MemOrder kOrder>
SYMMEM_DEVICE_INLINE Status barrier_block(const DeviceHandle& h, int channel) {
  constexpr MemOrder kPut = detail::put_order(kOrder);
  constexpr MemOrder kWait = detail::wait_order(kOrder);
  const int tid = detail::block_thread_index();
  const int nthreads = detail::block_thread_count();
  __syncthreads();
  const Deadline deadline = Deadline::of(h);
  int failed = 0;
  if (tid < h.world_size) fence_sys<kPut>();
  for (int peer = tid; peer < h.world_size && !failed; peer += nthreads) {
    failed = put_signal<kPut>(h, peer, channel, deadline) != Status::ok;
  }
  for (int peer = tid; peer < h.world_size && !failed; peer += nthreads) {
    failed = wait_signal<kWait>(h, peer, channel, deadline) != Status::ok;
  }
  return __syncthreads_or(failed) ? Status::timeout : Status::ok;
}

}  // namespace symmem::device
