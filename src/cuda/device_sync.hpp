#pragma once

// Host launchers of the device-side synchronisation (barrier, put_signal, wait_signal) on a
// stream, shared by the cuda, nccl and nvshmem plugins. Each is one small kernel (one warp)
// built on include/symmem/device/sync.cuh, so it is graph-capturable.
//
// run_device_sync() is the whole host-side recipe (NOTE [timeout record]):
//   1. raise a timeout recorded by an earlier asynchronous call;
//   2. check channel and peer (InvalidArgument naming the argument);
//   3. launch with DeviceHandle::timeout_ns from `timeout` (resolved by the core, NOTE
//      [timeouts] in symmem/store.hpp) and the process's timeout record;
//   4. on the null stream: synchronise it (with wait reports, NOTE [wait progress] in
//      cuda/timeout_record.hpp) and raise a timeout of this call at once.

#include <cuda_runtime_api.h>

#include "symmem/device_handle.hpp"
#include "symmem/store.hpp"
#include "symmem/types.hpp"

namespace symmem::cuda {

enum class SyncKind { barrier, put_signal, wait_signal };
const char* to_string(SyncKind k) noexcept;

// Kernel launches only (no checks): `h` must be complete (timeout_record, timeout_ns set).
// `progress`/`report_after_ns`: where and after how long a wait notes itself (NOTE [wait
// progress] in cuda/timeout_record.hpp); nullptr/0: never.
cudaError_t launch_barrier(const DeviceHandle& h, int channel, cudaStream_t stream,
                           int32_t* progress = nullptr, uint64_t report_after_ns = 0);
cudaError_t launch_put_signal(const DeviceHandle& h, int dst, int channel, cudaStream_t stream,
                              int32_t* progress = nullptr, uint64_t report_after_ns = 0);
cudaError_t launch_wait_signal(const DeviceHandle& h, int src, int channel, cudaStream_t stream,
                               int32_t* progress = nullptr, uint64_t report_after_ns = 0);

// The recipe above. `h` is the allocation's handle (its timeout fields are filled here);
// `peer` is dst (put_signal) or src (wait_signal), ignored for barrier; `device` the CUDA
// device of the allocation; `rank` this rank in the handle's group (for messages).
void run_device_sync(SyncKind kind, DeviceHandle h, int peer, int channel, Millis timeout,
                     Stream stream, int device);

}  // namespace symmem::cuda
