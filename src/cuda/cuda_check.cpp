#include "cuda/cuda_check.hpp"

#include <cuda_runtime_api.h>

#include "core/log.hpp"

namespace symmem::cuda {

std::string cudart_error_text(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")";
}

void throw_cu_error(std::string_view op, int rank, const char* call, CUresult r,
                    const char* where) {
  throw_error(ErrorCode::Cuda, op, rank,
              std::string(call) + " failed at " + where + ": " + cu_error_text(r));
}

void throw_cudart_error(std::string_view op, int rank, const char* call, cudaError_t e,
                        const char* where) {
  throw_error(ErrorCode::Cuda, op, rank,
              std::string(call) + " failed at " + where + ": " + cudart_error_text(e));
}

void warn_cu_error(const char* call, CUresult r, const char* where) noexcept {
  try {
    SYMMEM_LOG(WARN, GPU) << call << " failed at " << where << ": " << cu_error_text(r);
  } catch (...) {
  }
}

void warn_cudart_error(const char* call, cudaError_t e, const char* where) noexcept {
  try {
    SYMMEM_LOG(WARN, GPU) << call << " failed at " << where << ": " << cudart_error_text(e);
  } catch (...) {
  }
}

}  // namespace symmem::cuda
