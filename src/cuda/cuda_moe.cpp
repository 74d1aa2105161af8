// The cuda plugin's MoE entry points (src/core/moe_device.hpp): pointer queries, plain device
// memory, copies and the launchers of src/cuda/kernels/moe.cu, behind one function table.

#include "cuda/cuda_moe.hpp"

#include <cuda_runtime_api.h>

#include <string>

#include "cuda/cuda_check.hpp"
#include "cuda/peer_tables.hpp"
#include "symmem/error.hpp"

namespace symmem::cuda {
namespace {

int device_of(const void* p) {
  if (p == nullptr) return -1;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    (void)cudaGetLastError();  // not a pointer CUDA knows: host memory
    return -1;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged ? attr.device : -1;
}

bool capturing(const char* op, int rank, int device, void* stream) {
  DeviceGuard guard(device);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  SYMMEM_CUDART_CHECK(op, rank, cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &status));
  return status != cudaStreamCaptureStatusNone;
}

void* alloc(const char* op, int rank, int device, size_t bytes) {
  DeviceGuard guard(device);
  void* p = nullptr;
  SYMMEM_CUDART_CHECK(op, rank, cudaMalloc(&p, bytes == 0 ? 1 : bytes));
  return p;
}

void release(int device, void* p) {
  if (p == nullptr) return;
  try {
    DeviceGuard guard(device);
    SYMMEM_CUDART_WARN(cudaFree(p));
  } catch (...) {  // never throws (called from destructors)
  }
}

void copy(const char* op, int rank, int device, void* dst, const void* src, size_t bytes,
          void* stream, bool sync) {
  DeviceGuard guard(device);
  auto s = static_cast<cudaStream_t>(stream);
  if (bytes > 0)
    SYMMEM_CUDART_CHECK(op, rank, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s));
  if (sync) SYMMEM_CUDART_CHECK(op, rank, cudaStreamSynchronize(s));
}

void gather(const char* op, int rank, int device, const detail::MoeGatherArgs& a, void* stream) {
  DeviceGuard guard(device);
  const auto e = static_cast<cudaError_t>(launch_moe_gather(a, stream));
  if (e != cudaSuccess) throw_cudart_error(op, rank, "launch_moe_gather", e, SYMMEM_WHERE);
}

void combine(const char* op, int rank, int device, const detail::MoeCombineArgs& a, void* stream) {
  DeviceGuard guard(device);
  const auto e = static_cast<cudaError_t>(launch_moe_combine(a, stream));
  if (e != cudaSuccess) throw_cudart_error(op, rank, "launch_moe_combine", e, SYMMEM_WHERE);
}

// The launchers of a device layout, checked like gather's.
template <int (*kLaunch)(const detail::MoeDeviceLayoutArgs&, void*)>
void layout_step(const char* op, int rank, int device, const detail::MoeDeviceLayoutArgs& a,
                 void* stream) {
  DeviceGuard guard(device);
  const auto e = static_cast<cudaError_t>(kLaunch(a, stream));
  if (e != cudaSuccess) throw_cudart_error(op, rank, "launch_moe_layout_*", e, SYMMEM_WHERE);
}

}  // namespace

const detail::MoeDeviceApi* moe_device_api() {
  static const detail::MoeDeviceApi api = [] {
    detail::MoeDeviceApi a;
    a.device_of = &device_of;
    a.capturing = &capturing;
    a.alloc = &alloc;
    a.release = &release;
    a.copy = &copy;
    a.gather = &gather;
    a.combine = &combine;
    a.layout_route_pack = &layout_step<&launch_moe_layout_route_pack>;
    a.layout_place = &layout_step<&launch_moe_layout_place>;
    a.layout_combine_pack = &layout_step<&launch_moe_layout_combine_pack>;
    a.layout_route_put = &layout_step<&launch_moe_layout_route_put>;
    a.layout_wait_place = &layout_step<&launch_moe_layout_wait_place>;
    a.layout_combine_put = &layout_step<&launch_moe_layout_combine_put>;
    return a;
  }();
  return &api;
}

}  // namespace symmem::cuda
