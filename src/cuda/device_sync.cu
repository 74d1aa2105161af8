#include "cuda/device_sync.hpp"

#include <sstream>
#include <string>

#include "core/check.hpp"
#include "core/trace.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/peer_tables.hpp"
#include "cuda/timeout_record.hpp"
#include "symmem/device/sync.cuh"

namespace symmem::cuda {
namespace {

namespace dev = symmem::device;

static_assert(dev::kProgressSlots == kProgressSlots, "one progress record layout");

// The kernels' deadline: h's, with progress notes after `report_after_ns` (0: none) into the
// process's progress record (NOTE [wait progress]).
__device__ dev::Deadline sync_deadline(const DeviceHandle& h, int32_t* progress,
                                       uint64_t report_after_ns) {
  return dev::Deadline::of(h).with_progress(progress, report_after_ns);
}

// One warp: lane i signals peer i (and i+32, ...) and waits for it; acq_rel at system scope,
// so everything queued on the stream before is released to the peers and their prior writes
// are visible to everything queued after. A timeout returns (recorded), never traps.
__global__ void barrier_kernel(DeviceHandle h, int channel, int32_t* progress, uint64_t report) {
  (void)dev::barrier_warp<dev::MemOrder::acq_rel>(h, channel, sync_deadline(h, progress, report));
}

__global__ void put_signal_kernel(DeviceHandle h, int dst, int channel, int32_t* progress,
                                  uint64_t report) {
  (void)dev::put_signal<dev::MemOrder::release>(h, dst, channel,
                                                sync_deadline(h, progress, report));
}

__global__ void wait_signal_kernel(DeviceHandle h, int src, int channel, int32_t* progress,
                                   uint64_t report) {
  (void)dev::wait_signal<dev::MemOrder::acquire>(h, src, channel,
                                                 sync_deadline(h, progress, report));
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

cudaError_t launch_barrier(const DeviceHandle& h, int channel, cudaStream_t stream,
                           int32_t* progress, uint64_t report_after_ns) {
  symmem::detail::KernelRange range("pad_barrier", 1);  // NOTE [nvtx ranges]
  barrier_kernel<<<1, 32, 0, stream>>>(h, channel, progress, report_after_ns);
  return cudaGetLastError();
}

cudaError_t launch_put_signal(const DeviceHandle& h, int dst, int channel, cudaStream_t stream,
                              int32_t* progress, uint64_t report_after_ns) {
  symmem::detail::KernelRange range("pad_put_signal", 1);  // NOTE [nvtx ranges]
  put_signal_kernel<<<1, 1, 0, stream>>>(h, dst, channel, progress, report_after_ns);
  return cudaGetLastError();
}

cudaError_t launch_wait_signal(const DeviceHandle& h, int src, int channel, cudaStream_t stream,
                               int32_t* progress, uint64_t report_after_ns) {
  symmem::detail::KernelRange range("pad_wait_signal", 1);  // NOTE [nvtx ranges]
  wait_signal_kernel<<<1, 1, 0, stream>>>(h, src, channel, progress, report_after_ns);
  return cudaGetLastError();
}

void run_device_sync(SyncKind kind, DeviceHandle h, int peer, int channel, Millis timeout,
                     Stream stream, int device) {
  const char* op = to_string(kind);
  const int rank = h.rank;
  raise_device_timeout(op, rank, h.abort_slot);
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
  // Progress notes only where the host watches them (the null stream, NOTE [wait progress]).
  const uint64_t report = stream == nullptr ? progress_after_ns(timeout) : 0;
  int32_t* progress = report != 0 ? progress_record() : nullptr;
  auto s = static_cast<cudaStream_t>(stream);
  cudaError_t e = cudaSuccess;
  switch (kind) {
    case SyncKind::barrier:
      e = launch_barrier(h, channel, s, progress, report);
      break;
    case SyncKind::put_signal:
      e = launch_put_signal(h, peer, channel, s, progress, report);
      break;
    case SyncKind::wait_signal:
      e = launch_wait_signal(h, peer, channel, s, progress, report);
      break;
  }
  if (e != cudaSuccess) throw_cudart_error(op, rank, "kernel launch", e, SYMMEM_WHERE);
  if (stream == nullptr) {
    std::ostringstream what;
    what << op << " (GPU, channel " << channel;
    if (kind != SyncKind::barrier) {
      what << (kind == SyncKind::put_signal ? ", to rank " : ", from rank ") << peer;
    }
    what << ")";
    synchronize_and_raise(op, rank, nullptr, timeout, what.str(), h.abort_slot);
  }
}

}  // namespace symmem::cuda
