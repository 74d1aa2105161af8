#pragma once

// Test kernels written against the public device API (symmem/device/*.cuh), launched from the
// gtest code (which is plain C++). Each returns the launch's cudaError_t; failures found on the
// device are counted in *errors (device memory); a device-side timeout adds kTimedOut.

#include <cuda_runtime_api.h>

#include "symmem/device_handle.hpp"

namespace symmem::test {

inline constexpr int kTimedOut = 1000000;

enum class Scope { thread, warp, block };

// Every round: write (round, rank) into this rank's 16-byte-vector slot of every peer's buffer
// (slot_vecs uint4 per rank), barrier (scope) on channel round % channels, check the slots of
// every peer in this rank's buffer, barrier again. Needs h.size >= world * slot_vecs * 16.
cudaError_t launch_push_barrier_check(const DeviceHandle& h, Scope scope, int rounds, int channels,
                                      size_t slot_vecs, int* errors, cudaStream_t stream);

// A ring with acknowledgement, `rounds` times: write (round, rank) into next's slot, put_signal
// to next on channel 2c, wait_signal from prev on 2c, check prev's value in this buffer,
// put_signal to prev on 2c+1 (read done), wait_signal from next on 2c+1. c = round % pairs.
cudaError_t launch_signal_ring(const DeviceHandle& h, Scope scope, int rounds, int pairs,
                               int* errors, cudaStream_t stream);

// Fills n uint32 at dst with value.
cudaError_t launch_fill_u32(uint32_t* dst, size_t n, uint32_t value, cudaStream_t stream);

}  // namespace symmem::test
