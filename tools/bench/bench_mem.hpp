#pragma once

// Where symmem-bench's buffers live and how it reads/writes them. The host implementation is
// memcpy; the CUDA one reaches the driver through dlopen("libcuda.so.1") (cuMemcpy with unified
// addressing, cuCtxSynchronize), so the bench never links CUDA.

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace symmem::bench {

class MemIO {
 public:
  virtual ~MemIO() = default;
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;    // host -> buffer
  virtual void download(void* dst, const void* src, size_t bytes) = 0;  // buffer -> host
  virtual void synchronize() = 0;  // waits for every enqueued op (device) / nothing (host)
  // Ordinary (non-symmetric) memory of this kind; free with release().
  virtual void* alloc(size_t bytes) = 0;
  virtual void release(void* p) = 0;
  // Per-iteration timing: marks(n) prepares n + 1 marks; mark(i) is called right before
  // iteration i and mark(n) after the last. Host: a steady_clock reading. CUDA: an event recorded
  // on the default stream, so the times are the device's. After synchronize(), durations_us()
  // gives the n times between consecutive marks, in microseconds.
  virtual void marks(int n) = 0;
  virtual void mark(int i) = 0;
  virtual std::vector<double> durations_us() = 0;
};

std::unique_ptr<MemIO> make_host_io();
// nullptr (with `why`) when the driver cannot be loaded or has no device `device`.
std::unique_ptr<MemIO> make_cuda_io(int device, std::string* why);
// Number of CUDA devices visible here (0 without a driver); ranks pick local_rank % count.
int cuda_device_count();

}  // namespace symmem::bench
