#include "nvshmem/nvshmem_backend.hpp"

#include <cuda_runtime_api.h>

#include <cstring>

#include "core/check.hpp"
#include "core/log.hpp"
#include "cuda/cuda_check.hpp"
#include "nvshmem/nvshmem_memory.hpp"
#include "nvshmem/nvshmem_runtime.hpp"

namespace symmem::nvshm {

NvshmemBackend::~NvshmemBackend() {
  if (a2av_record_ != nullptr) (void)cudaFreeHost(a2av_record_);
}

bool NvshmemBackend::can_serve(const Group& group, Device device, std::string* why) const {
  if (!cuda::cuda_device_visible("nvshmem", device, why)) return false;
  return Runtime::instance().can_allocate(group, why);
}

bool NvshmemBackend::supports(OpKind kind, DType dtype) const {
  // The cuda kernels' dtypes (NOTE [dtype table]); NVSHMEM's own team reductions, used when a
  // peer is not directly reachable, have no fp8 and say so when asked.
  const bool gpu_type = gpu_reduces(dtype);
  switch (kind) {
    case OpKind::barrier:
      return true;
    case OpKind::all_reduce:
    case OpKind::reduce_scatter:
    case OpKind::all_gather:
    case OpKind::all_to_all:
    case OpKind::all_to_all_v:
    case OpKind::broadcast:
    case OpKind::put:
    case OpKind::get:
      return gpu_type;
    default:
      return false;
  }
}

std::shared_ptr<BackendMemory> NvshmemBackend::allocate(const Group& group,
                                                        const RendezvousInfo& info) {
  const char* op = "allocate";
  std::string why;
  if (!can_serve(group, info.device, &why)) {
    throw_error(ErrorCode::Unsupported, op, group.rank(), "nvshmem backend: " + why);
  }
  Runtime::instance().ensure(group, info.device.index, op);
  return std::make_shared<NvshmemMemory>(group, info);
}

long long* NvshmemBackend::a2av_record() {
  if (a2av_record_ == nullptr) {
    void* p = nullptr;
    SYMMEM_CUDART_CHECK(
        "all_to_all_v", -1,
        cudaHostAlloc(&p, 8 * sizeof(long long), cudaHostAllocMapped | cudaHostAllocPortable));
    std::memset(p, 0, 8 * sizeof(long long));
    a2av_record_ = static_cast<long long*>(p);
  }
  return a2av_record_;
}

}  // namespace symmem::nvshm

extern "C" __attribute__((visibility("default"))) int symmem_plugin_abi_version() {
  return symmem::kPluginAbiVersion;
}

extern "C" __attribute__((visibility("default"))) symmem::Backend* symmem_plugin_create() {
  return new symmem::nvshm::NvshmemBackend();
}
