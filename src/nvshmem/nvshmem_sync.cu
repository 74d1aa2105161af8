// Kernels and launchers of barrier / put_signal / wait_signal for the nvshmem backend.
//
// NOTE [nvshmem collective launch]
// A kernel that waits for other PEs (a barrier, or an op that synchronises inside) can only
// make progress if every PE's instance of it runs, and all of its own CTAs are resident at once:
// a spinning CTA must never wait for a CTA of the same grid that the GPU has not scheduled,
// which happens as soon as the grid exceeds what fits (and, with several PEs sharing a GPU under
// MPS, what each PE's CUDA_MPS_ACTIVE_THREAD_PERCENTAGE share allows). nvshmemx_collective_launch
// is NVSHMEM's answer: a CUDA cooperative launch, which fails with an error instead of hanging
// when the grid cannot be co-resident, made on every PE (it is collective over the PEs, as the
// kernels it launches are). So every kernel of this plugin that every PE runs and that waits
// for peers (the barrier and the collectives) is launched with it. put_signal and wait_signal
// are one-CTA kernels launched by one side only (not collective), so they use a plain launch:
// a single CTA is trivially co-resident.

#include <cuda_runtime_api.h>

#include "core/check.hpp"
#include "cuda/cuda_check.hpp"
#include "nvshmem/nvshmem_device.cuh"
#include "nvshmem/nvshmem_memory.hpp"

namespace symmem::nvshm {
namespace {

__global__ void nv_barrier_kernel(NvSync s, int channel) {
  (void)nv_barrier_block(s, channel);
}

__global__ void nv_put_signal_kernel(NvSync s, int dst, int channel) {
  (void)nv_put_signal(s, dst, channel, dev::Deadline::of(s.h));
}

__global__ void nv_wait_signal_kernel(NvSync s, int src, int channel) {
  (void)nv_wait_signal(s, src, channel, dev::Deadline::of(s.h));
}

}  // namespace

void collective_launch(const void* kernel, dim3 grid, dim3 block, void** args, size_t smem,
                       cudaStream_t stream, const char* op, int rank) {
  int r = nvshmemx_collective_launch(kernel, grid, block, args, smem, stream);
  if (r != 0) {
    cudaError_t e = cudaGetLastError();
    throw_error(ErrorCode::Cuda, op, rank,
                "nvshmemx_collective_launch failed (status " + std::to_string(r) + ", " +
                    cudaGetErrorName(e) + "): the grid (" + std::to_string(grid.x) + " blocks of " +
                    std::to_string(block.x) + " threads) cannot be co-resident on this GPU");
  }
}

void launch_barrier(const NvSync& s, int channel, cudaStream_t stream, const char* op) {
  NvSync arg = s;
  void* args[] = {&arg, &channel};
  collective_launch(reinterpret_cast<const void*>(&nv_barrier_kernel), dim3(1), dim3(32), args, 0,
                    stream, op, s.h.rank);
}

void launch_put_signal(const NvSync& s, int dst, int channel, cudaStream_t stream, const char* op) {
  nv_put_signal_kernel<<<1, 1, 0, stream>>>(s, dst, channel);
  SYMMEM_CUDART_CHECK(op, s.h.rank, cudaGetLastError());
}

void launch_wait_signal(const NvSync& s, int src, int channel, cudaStream_t stream,
                        const char* op) {
  nv_wait_signal_kernel<<<1, 1, 0, stream>>>(s, src, channel);
  SYMMEM_CUDART_CHECK(op, s.h.rank, cudaGetLastError());
}

}  // namespace symmem::nvshm
