#include "gpu_kernels.hpp"

#include <symmem/device/symmem_device.cuh>

namespace symmem::test {
namespace {

namespace dev = symmem::device;

__device__ uint32_t tag(int round, int rank) {
  return (static_cast<uint32_t>(round) << 8) | static_cast<uint32_t>(rank & 0xff);
}

// One synchronisation step at the given scope; every thread gets the same answer.
template <Scope kScope>
__device__ bool barrier_at(const DeviceHandle& h, int channel) {
  if constexpr (kScope == Scope::block) {
    return dev::barrier_block(h, channel) == dev::Status::ok;
  } else if constexpr (kScope == Scope::warp) {
    return dev::barrier_warp(h, channel) == dev::Status::ok;  // launched with one warp
  } else {
    return dev::barrier(h, channel) == dev::Status::ok;  // launched with one thread
  }
}

template <Scope kScope>
__device__ bool put_at(const DeviceHandle& h, int dst, int channel) {
  if constexpr (kScope == Scope::block) {
    return dev::put_signal_block<dev::MemOrder::release>(h, dst, channel) == dev::Status::ok;
  } else if constexpr (kScope == Scope::warp) {
    return dev::put_signal_warp<dev::MemOrder::release>(h, dst, channel) == dev::Status::ok;
  } else {
    return dev::put_signal<dev::MemOrder::release>(h, dst, channel) == dev::Status::ok;
  }
}

template <Scope kScope>
__device__ bool wait_at(const DeviceHandle& h, int src, int channel) {
  if constexpr (kScope == Scope::block) {
    return dev::wait_signal_block<dev::MemOrder::acquire>(h, src, channel) == dev::Status::ok;
  } else if constexpr (kScope == Scope::warp) {
    return dev::wait_signal_warp<dev::MemOrder::acquire>(h, src, channel) == dev::Status::ok;
  } else {
    return dev::wait_signal<dev::MemOrder::acquire>(h, src, channel) == dev::Status::ok;
  }
}

template <Scope kScope>
__global__ void push_barrier_check(DeviceHandle h, int rounds, int channels, size_t slot_vecs,
                                   int* errors) {
  const int tid = threadIdx.x;
  const int nthreads = blockDim.x;
  for (int round = 1; round <= rounds; ++round) {
    const uint32_t v = tag(round, h.rank);
    const uint4 mine = make_uint4(v, v + 1, v + 2, v + 3);
    for (int peer = 0; peer < h.world_size; ++peer) {
      uint4* slot = dev::peer_ptr<uint4>(h, peer) + static_cast<size_t>(h.rank) * slot_vecs;
      for (size_t i = tid; i < slot_vecs; i += nthreads) dev::st_v4(slot + i, mine);
    }
    if (!barrier_at<kScope>(h, round % channels)) {
      if (tid == 0) atomicAdd(errors, kTimedOut);
      return;
    }
    int bad = 0;
    const uint4* own = dev::peer_ptr<const uint4>(h, h.rank);
    for (int src = 0; src < h.world_size; ++src) {
      const uint32_t w = tag(round, src);
      for (size_t i = tid; i < slot_vecs; i += nthreads) {
        const uint4 x = dev::ld_v4(own + static_cast<size_t>(src) * slot_vecs + i);
        bad += (x.x != w) + (x.y != w + 1) + (x.z != w + 2) + (x.w != w + 3);
      }
    }
    if (bad) atomicAdd(errors, bad);
    if (!barrier_at<kScope>(h, (round + 1) % channels)) {
      if (tid == 0) atomicAdd(errors, kTimedOut);
      return;
    }
  }
}

template <Scope kScope>
__global__ void signal_ring(DeviceHandle h, int rounds, int pairs, int* errors) {
  const int tid = threadIdx.x;
  const int next = (h.rank + 1) % h.world_size;
  const int prev = (h.rank + h.world_size - 1) % h.world_size;
  // Slot 0 of a buffer holds the value written by its ring predecessor.
  for (int round = 1; round <= rounds; ++round) {
    const int c = round % pairs;
    if (tid == 0) {
      uint32_t* dst = dev::peer_ptr<uint32_t>(h, next);
      dst[0] = tag(round, h.rank);
    }
    bool ok = put_at<kScope>(h, next, 2 * c) && wait_at<kScope>(h, prev, 2 * c);
    if (ok && tid == 0) {
      const uint32_t got =
          *reinterpret_cast<volatile uint32_t*>(dev::peer_ptr<uint32_t>(h, h.rank));
      if (got != tag(round, prev)) atomicAdd(errors, 1);
    }
    ok = ok && put_at<kScope>(h, prev, 2 * c + 1) && wait_at<kScope>(h, next, 2 * c + 1);
    if (!ok) {
      if (tid == 0) atomicAdd(errors, kTimedOut);
      return;
    }
  }
}

__global__ void fill_u32(uint32_t* dst, size_t n, uint32_t value) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    dst[i] = value;
  }
}

}  // namespace

cudaError_t launch_push_barrier_check(const DeviceHandle& h, Scope scope, int rounds, int channels,
                                      size_t slot_vecs, int* errors, cudaStream_t stream) {
  switch (scope) {
    case Scope::block:
      push_barrier_check<Scope::block>
          <<<1, 256, 0, stream>>>(h, rounds, channels, slot_vecs, errors);
      break;
    case Scope::warp:
      push_barrier_check<Scope::warp><<<1, 32, 0, stream>>>(h, rounds, channels, slot_vecs, errors);
      break;
    case Scope::thread:
      push_barrier_check<Scope::thread>
          <<<1, 1, 0, stream>>>(h, rounds, channels, slot_vecs, errors);
      break;
  }
  return cudaGetLastError();
}

cudaError_t launch_signal_ring(const DeviceHandle& h, Scope scope, int rounds, int pairs,
                               int* errors, cudaStream_t stream) {
  switch (scope) {
    case Scope::block:
      signal_ring<Scope::block><<<1, 128, 0, stream>>>(h, rounds, pairs, errors);
      break;
    case Scope::warp:
      signal_ring<Scope::warp><<<1, 32, 0, stream>>>(h, rounds, pairs, errors);
      break;
    case Scope::thread:
      signal_ring<Scope::thread><<<1, 1, 0, stream>>>(h, rounds, pairs, errors);
      break;
  }
  return cudaGetLastError();
}

cudaError_t launch_fill_u32(uint32_t* dst, size_t n, uint32_t value, cudaStream_t stream) {
  fill_u32<<<64, 256, 0, stream>>>(dst, n, value);
  return cudaGetLastError();
}

}  // namespace symmem::test
