#pragma once

// Entry point of the peer-pointer GPU collectives (src/cuda/kernels/, src/cuda/cuda_ops.cu). The
// cuda backend's run() calls it after the core's validation; the nccl and nvshmem plugins call it
// for ops whose peers are all directly reachable. Runs on args.stream; throws symmem::Error. An
// error that an earlier op detected on the device is raised by the next call (NOTE
// [device-detected errors] in cuda_ops.cu).

#include "symmem/backend.hpp"

void cuda_run_op(const symmem::OpArgs& args);

// The plugin's Backend::extension(kRaiseAsyncErrorExtension) (Group::check_async_error): raises
// a device-side timeout or abort record and a device-detected op error of this plugin's earlier
// GPU ops, without waiting.
void cuda_raise_async_errors(const symmem::Group& group, const char* op);
