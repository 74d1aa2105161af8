#pragma once

// Entry point of the peer-pointer GPU collectives (src/cuda/kernels/, src/cuda/cuda_ops*.cu,
// owned by the GPU-collectives work). The cuda backend's run() calls it after the core's
// validation; the nccl and nvshmem plugins call it for ops whose peers are all directly
// reachable. Runs on args.stream; throws symmem::Error.

#include "symmem/backend.hpp"

void cuda_run_op(const symmem::OpArgs& args);

// Raises (as InvalidArgument, then clears) an error that an earlier op detected on the device
// (all_to_all_v capacity/count checks, zero-copy disagreement between ranks); see NOTE
// [device-detected errors] in cuda_ops.cpp. cuda_run_op() calls it first; call it after a
// stream synchronisation to learn about the ops just finished.
void cuda_raise_device_errors(const char* op, int rank);
