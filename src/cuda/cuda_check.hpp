#pragma once

// CUDA check macros: the failing call is stringified, with file:line and the error's name.
//   SYMMEM_CU_CHECK("allocate", rank, cu.cuMemCreate(&h, n, &prop, 0));   // driver API
//   SYMMEM_CUDART_CHECK("barrier", rank, cudaStreamSynchronize(s));        // runtime API
// Both throw symmem::Error(ErrorCode::Cuda, "<op>: rank R: <call> failed at file:line: NAME
// (text)"). SYMMEM_CU_WARN / SYMMEM_CUDART_WARN log instead (for destructors).

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <string>
#include <string_view>

#include "core/check.hpp"
#include "cuda/driver.hpp"
#include "symmem/types.hpp"

namespace symmem::cuda {

[[noreturn]] void throw_cu_error(std::string_view op, int rank, const char* call, CUresult r,
                                 const char* where);
[[noreturn]] void throw_cudart_error(std::string_view op, int rank, const char* call, cudaError_t e,
                                     const char* where);
void warn_cu_error(const char* call, CUresult r, const char* where) noexcept;
void warn_cudart_error(const char* call, cudaError_t e, const char* where) noexcept;
std::string cudart_error_text(cudaError_t e);

// For the GPU backends' can_serve(): whether `device` is a CUDA device this process sees; when
// not, `why` (if non-null) says so, naming `backend`.
bool cuda_device_visible(const char* backend, const Device& device, std::string* why);

}  // namespace symmem::cuda

#define SYMMEM_CU_CHECK(op, rank, call)                                                \
  do {                                                                                 \
    CUresult symmem_cu_r_ = (call);                                                    \
    if (symmem_cu_r_ != CUDA_SUCCESS)                                                  \
      ::symmem::cuda::throw_cu_error((op), (rank), #call, symmem_cu_r_, SYMMEM_WHERE); \
  } while (0)

#define SYMMEM_CUDART_CHECK(op, rank, call)                                                    \
  do {                                                                                         \
    cudaError_t symmem_cudart_e_ = (call);                                                     \
    if (symmem_cudart_e_ != cudaSuccess)                                                       \
      ::symmem::cuda::throw_cudart_error((op), (rank), #call, symmem_cudart_e_, SYMMEM_WHERE); \
  } while (0)

#define SYMMEM_CU_WARN(call)                                            \
  do {                                                                  \
    CUresult symmem_cu_r_ = (call);                                     \
    if (symmem_cu_r_ != CUDA_SUCCESS)                                   \
      ::symmem::cuda::warn_cu_error(#call, symmem_cu_r_, SYMMEM_WHERE); \
  } while (0)

#define SYMMEM_CUDART_WARN(call)                                                \
  do {                                                                          \
    cudaError_t symmem_cudart_e_ = (call);                                      \
    if (symmem_cudart_e_ != cudaSuccess)                                        \
      ::symmem::cuda::warn_cudart_error(#call, symmem_cudart_e_, SYMMEM_WHERE); \
  } while (0)
