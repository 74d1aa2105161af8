#pragma once

// Lazy CUDA driver loading (shared by the cuda, nccl and nvshmem plugins through
// symmem_cuda_common). libcuda.so.1 is dlopen'ed on first use and every entry point is
// resolved with cuGetProcAddress at the toolkit's CUDA_VERSION, so versioned symbols
// (cuMemGetInfo_v2, ...) match the prototypes of <cuda.h>. Nothing links libcuda.
//
//   const auto& cu = symmem::cuda::driver();           // throws BackendUnavailable
//   SYMMEM_CU_CHECK("allocate", rank, cu.cuMemCreate(&h, bytes, &prop, 0));

#include <cuda.h>

#include <string>

#define SYMMEM_CU_FUNCTIONS(X)      \
  X(cuInit)                         \
  X(cuDriverGetVersion)             \
  X(cuGetErrorName)                 \
  X(cuGetErrorString)               \
  X(cuDeviceGet)                    \
  X(cuDeviceGetCount)               \
  X(cuDeviceGetAttribute)           \
  X(cuDeviceGetUuid)                \
  X(cuDeviceGetPCIBusId)            \
  X(cuDeviceCanAccessPeer)          \
  X(cuCtxGetCurrent)                \
  X(cuCtxGetDevice)                 \
  X(cuCtxSynchronize)               \
  X(cuMemGetInfo)                   \
  X(cuMemGetAllocationGranularity)  \
  X(cuMemCreate)                    \
  X(cuMemRelease)                   \
  X(cuMemAddressReserve)            \
  X(cuMemAddressFree)               \
  X(cuMemMap)                       \
  X(cuMemUnmap)                     \
  X(cuMemSetAccess)                 \
  X(cuMemExportToShareableHandle)   \
  X(cuMemImportFromShareableHandle) \
  X(cuMemsetD8)

namespace symmem::cuda {

struct Driver {
#define SYMMEM_CU_MEMBER_(name) decltype(&::name) name = nullptr;
  SYMMEM_CU_FUNCTIONS(SYMMEM_CU_MEMBER_)
#undef SYMMEM_CU_MEMBER_
  int version = 0;  // cuDriverGetVersion
};

// The loaded driver (after cuInit(0)). Thread-safe; loads once. Throws BackendUnavailable
// naming the loader's message (dlerror) or cuInit's error, e.g. on a machine without a GPU.
const Driver& driver();

// Like driver() but never throws: false with the reason in `why`.
bool driver_available(std::string* why = nullptr);

// "CUDA_ERROR_OUT_OF_MEMORY (out of memory)" for a driver result; works without a driver.
std::string cu_error_text(CUresult r);

}  // namespace symmem::cuda
