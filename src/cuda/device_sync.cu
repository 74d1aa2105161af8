#include "cuda/device_sync.hpp"

#include <string>

#include "core/check.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/peer_tables.hpp"
#include "cuda/timeout_record.hpp"
#include "symmem/device/sync.cuh"

namespace symmem::cuda {
namespace {

namespace dev = symmem::device;

// One warp: lane i signals peer i (and i+32, ...) and waits for it; acq_rel at system scope,
// so everything queued on the stream before is released to the peers and their prior writes
// are visible to everything queued after. A timeout returns (recorded), never traps.
__global__ void barrier_kernel(DeviceHandle h, int channel) {
  (void)dev::barrier_warp<dev::MemOrder::acq_rel>(h, channel);
}

__global__ void put_signal_kernel(DeviceHandle h, int dst, int channel) {
  (void)dev::put_signal<dev::MemOrder::release>(h, dst, channel);
}

__global__ void wait_signal_kernel(DeviceHandle h, int src, int channel) {
  (void)dev::wait_signal<dev::MemOrder::acquire>(h, src, channel);
}

}  // namespace

const char* to_string(SyncKind k) noexcept {
  switch (k) {
    case SyncKind::barrier:
      return "barrier";
    case SyncKind::put_signal:
      return "put_signal";
    case SyncKind::wait_signal:
      return "wait_signal";
  }
  return "sync";
}

cudaError_t launch_barrier(const DeviceHandle& h, int channel, cudaStream_t stream) {
  barrier_kernel<<<1, 32, 0, stream>>>(h, channel);
  return cudaGetLastError();
}

cudaError_t launch_put_signal(const DeviceHandle& h, int dst, int channel, cudaStream_t stream) {
  put_signal_kernel<<<1, 1, 0, stream>>>(h, dst, channel);
  return cudaGetLastError();
}

cudaError_t launch_wait_signal(const DeviceHandle& h, int src, int channel, cudaStream_t stream) {
  wait_signal_kernel<<<1, 1, 0, stream>>>(h, src, channel);
  return cudaGetLastError();
}

void run_device_sync(SyncKind kind, DeviceHandle h, int peer, int channel, Millis timeout,
                     Stream stream, int device) {
  const char* op = to_string(kind);
  const int rank = h.rank;
  raise_device_timeout(op, rank);
  SYMMEM_CHECK_ARG(op, rank, channel >= 0 && static_cast<uint32_t>(channel) < h.num_channels,
                   "channel",
                   "is " << channel << "; the signal pad has " << h.num_channels << " channels (0.."
                         << h.num_channels - 1 << ")");
  if (kind != SyncKind::barrier) {
    SYMMEM_CHECK_ARG(op, rank, peer >= 0 && peer < h.world_size,
                     kind == SyncKind::put_signal ? "dst" : "src",
                     "is " << peer << "; the group has ranks 0.." << h.world_size - 1);
  }
  SYMMEM_CHECK(op, rank, h.signal_pads != nullptr, ErrorCode::Internal,
               "the allocation has no device signal-pad table");
  DeviceGuard guard(device);
  h.timeout_record = timeout_record();
  h.timeout_ns = timeout_to_ns(timeout);
  auto s = static_cast<cudaStream_t>(stream);
  cudaError_t e = cudaSuccess;
  switch (kind) {
    case SyncKind::barrier:
      e = launch_barrier(h, channel, s);
      break;
    case SyncKind::put_signal:
      e = launch_put_signal(h, peer, channel, s);
      break;
    case SyncKind::wait_signal:
      e = launch_wait_signal(h, peer, channel, s);
      break;
  }
  if (e != cudaSuccess) throw_cudart_error(op, rank, "kernel launch", e, SYMMEM_WHERE);
  if (stream == nullptr) {
    SYMMEM_CUDART_CHECK(op, rank, cudaStreamSynchronize(nullptr));
    raise_device_timeout(op, rank);
  }
}

}  // namespace symmem::cuda
