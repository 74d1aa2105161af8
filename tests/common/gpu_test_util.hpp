#pragma once

// Helpers of the GPU tests (tests/cuda): a check macro that names the CUDA call and its error, and
// a non-blocking stream owned by the test.

#include <cuda_runtime_api.h>

#include <gtest/gtest.h>

#include "symmem/types.hpp"

#define CUDA_OK(call)                                                          \
  do {                                                                         \
    cudaError_t e_ = (call);                                                   \
    ASSERT_EQ(e_, cudaSuccess) << #call << ": " << cudaGetErrorName(e_) << " " \
                               << cudaGetErrorString(e_);                      \
  } while (0)

namespace symmem::test {

class Stream {
 public:
  Stream() { cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking); }
  ~Stream() { cudaStreamDestroy(s_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }
  operator symmem::Stream() const { return s_; }
  void sync() const { EXPECT_EQ(cudaStreamSynchronize(s_), cudaSuccess); }

 private:
  cudaStream_t s_ = nullptr;
};

}  // namespace symmem::test
