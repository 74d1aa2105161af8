#pragma once

// MoE dispatch/combine on the GPU, the cuda plugin's side (src/core/moe_device.hpp is the
// contract): the launchers of src/cuda/kernels/moe.cu and the function table that
// CudaBackend::extension(detail::kMoeDeviceExtension) returns. Plain C++, no CUDA headers.

#include "core/moe_device.hpp"

namespace symmem::cuda {

// Each enqueues one kernel on `stream` (a cudaStream_t) and returns the cudaError_t of the
// launch as an int (0: success). Nothing is launched when there is nothing to do.
int launch_moe_gather(const detail::MoeGatherArgs& a, void* stream);
int launch_moe_combine(const detail::MoeCombineArgs& a, void* stream);
// A device layout's kernels (route then pack; place then unpack; combine's pack).
int launch_moe_layout_route_pack(const detail::MoeDeviceLayoutArgs& a, void* stream);
int launch_moe_layout_place(const detail::MoeDeviceLayoutArgs& a, void* stream);
int launch_moe_layout_route_put(const detail::MoeDeviceLayoutArgs& a, void* stream);
int launch_moe_layout_wait_place(const detail::MoeDeviceLayoutArgs& a, void* stream);
int launch_moe_layout_combine_put(const detail::MoeDeviceLayoutArgs& a, void* stream);
int launch_moe_layout_combine_pack(const detail::MoeDeviceLayoutArgs& a, void* stream);

// The table (static storage, never null).
const detail::MoeDeviceApi* moe_device_api();

}  // namespace symmem::cuda
