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

bool cuda_device_visible(const char* backend, const Device& device, std::string* why) {
  if (!device.is_cuda()) {
    if (why) {
      *why = std::string("the ") + backend + " backend serves CUDA devices only (" +
             to_string(device) + " requested); the host backend serves CPU memory";
    }
    return false;
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count <= 0) {
    (void)cudaGetLastError();
    if (why) *why = "no CUDA device is visible to this process";
    return false;
  }
  if (device.index < 0 || device.index >= count) {
    if (why) {
      *why =
          "device " + to_string(device) + " does not exist (" + std::to_string(count) + " visible)";
    }
    return false;
  }
  return true;
}

}  // namespace symmem::cuda
