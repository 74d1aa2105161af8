// A user kernel on symmetric memory, written against the public device API only
// (symmem/device/*.cuh): every rank pushes its rank id into its own slice of every peer's
// buffer with 16-byte stores, a block-wide barrier (release our stores, acquire the peers'),
// then each rank checks its buffer. Bounded waits: a peer that never arrives makes the
// kernel return, and the next symmem call raises a Timeout naming rank and channel.
//
//   symmem-run -n 2 ./symmem_example_device_kernel
//   (ranks sharing one GPU: SYMMEM_ALLOW_SHARED_GPU=1; run an MPS daemon for concurrency)

#include <cuda_runtime.h>

#include <cstdio>
#include <symmem/device/symmem_device.cuh>
#include <symmem/symmem.hpp>

namespace dev = symmem::device;

__global__ void push_and_check(symmem::DeviceHandle h, size_t slice_vecs, int* wrong) {
  // 1. Push: our slice in every peer's buffer.
  const uint32_t me = static_cast<uint32_t>(h.rank) + 1;
  const uint4 value = make_uint4(me, me, me, me);
  for (int peer = 0; peer < h.world_size; ++peer) {
    uint4* slice = dev::peer_ptr<uint4>(h, peer) + h.rank * slice_vecs;
    for (size_t i = threadIdx.x; i < slice_vecs; i += blockDim.x) dev::st_v4(slice + i, value);
  }
  // 2. Barrier on channel 0: acq_rel at system scope, bounded by h.timeout_ns.
  if (dev::barrier_block<dev::MemOrder::acq_rel>(h, /*channel=*/0) != dev::Status::ok) return;
  // 3. Check: slice src of our buffer holds src + 1.
  const uint4* own = dev::peer_ptr<const uint4>(h, h.rank);
  for (int src = 0; src < h.world_size; ++src) {
    for (size_t i = threadIdx.x; i < slice_vecs; i += blockDim.x) {
      const uint4 v = dev::ld_v4(own + src * slice_vecs + i);
      if (v.x != static_cast<uint32_t>(src) + 1 || v.w != static_cast<uint32_t>(src) + 1) {
        atomicAdd(wrong, 1);
      }
    }
  }
  // 4. A second barrier so nobody reuses the buffer while a peer still reads it.
  (void)dev::barrier_block(h, 1);
}

int main() {
  try {
    auto group = symmem::Group::from_env();
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      std::fprintf(stderr, "no GPU\n");
      return 1;
    }
    const int device = group.local_rank() % count;
    cudaSetDevice(device);
    const size_t slice_vecs = 4096;  // 64 KiB per rank
    auto buf =
        symmem::allocate(group, slice_vecs * 16 * group.world_size(), symmem::Device::cuda(device));
    int* wrong = nullptr;
    cudaMalloc(&wrong, sizeof(int));
    cudaMemset(wrong, 0, sizeof(int));
    cudaStream_t stream;
    cudaStreamCreate(&stream);
    push_and_check<<<1, 256, 0, stream>>>(buf.device_handle(), slice_vecs, wrong);
    cudaStreamSynchronize(stream);
    buf.barrier();  // null stream: synchronous; raises a device-side timeout recorded above
    int host_wrong = -1;
    cudaMemcpy(&host_wrong, wrong, sizeof(int), cudaMemcpyDeviceToHost);
    std::printf("rank %d/%d on GPU %d: %s (%d wrong vectors)\n", group.rank(), group.world_size(),
                device, host_wrong == 0 ? "OK" : "WRONG", host_wrong);
    cudaFree(wrong);
    cudaStreamDestroy(stream);
    return host_wrong == 0 ? 0 : 1;
  } catch (const symmem::Error& e) {
    std::fprintf(stderr, "symmem error (%s): %s\n", symmem::to_string(e.code()), e.what());
    return 1;
  }
}
