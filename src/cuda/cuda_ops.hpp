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

// This machine's signature for the GPU collectives' tuning entries (NOTE [tuning file]):
// "gpu=<name>;sms=<SMs>;gpus=<visible GPUs>;ranks_per_gpu=<k>;p2p=<pairs>", the GPU model and
// count, how many of `group`'s local ranks share a GPU, and which GPU pairs have peer access
// (NVLink/PCIe performance rank). The plugin's Backend::extension(kTuningSignatureExtension).
int cuda_tuning_signature(const symmem::Group& group, int device, char* buf, size_t len);
