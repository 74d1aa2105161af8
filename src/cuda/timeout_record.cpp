#include "cuda/timeout_record.hpp"

#include <cuda_runtime_api.h>

#include <atomic>
#include <mutex>
#include <sstream>

#include "core/timeout.hpp"
#include "cuda/cuda_check.hpp"
#include "symmem/device_handle.hpp"

namespace symmem::cuda {
namespace {

std::mutex g_mu;
std::atomic<int32_t*> g_record{nullptr};

}  // namespace

int32_t* timeout_record() {
  int32_t* r = g_record.load(std::memory_order_acquire);
  if (r != nullptr) return r;
  std::lock_guard<std::mutex> lock(g_mu);
  r = g_record.load(std::memory_order_relaxed);
  if (r != nullptr) return r;
  void* host = nullptr;
  SYMMEM_CUDART_CHECK("timeout record", -1,
                      cudaHostAlloc(&host, 64, cudaHostAllocMapped | cudaHostAllocPortable));
  void* dev = nullptr;
  SYMMEM_CUDART_CHECK("timeout record", -1, cudaHostGetDevicePointer(&dev, host, 0));
  SYMMEM_CHECK("timeout record", -1, dev == host, ErrorCode::Internal,
               "host-mapped memory has different host and device addresses (no unified "
               "addressing?)");
  auto* rec = static_cast<int32_t*>(host);
  for (int i = 0; i < 16; ++i) reinterpret_cast<volatile int32_t*>(rec)[i] = 0;
  g_record.store(rec, std::memory_order_release);
  return rec;  // never freed: kernels of any allocation may still reference it at exit
}

bool device_timeout_pending() noexcept {
  int32_t* r = g_record.load(std::memory_order_acquire);
  if (r == nullptr) return false;
  return reinterpret_cast<volatile int32_t*>(r)[0] == 1;
}

void raise_device_timeout(std::string_view op, int rank) {
  int32_t* r = g_record.load(std::memory_order_acquire);
  if (r == nullptr) return;
  volatile int32_t* v = r;
  if (v[0] != 1) return;
  std::atomic_thread_fence(std::memory_order_acquire);
  const int32_t who = v[1], channel = v[2], peer = v[3];
  v[1] = 0;
  v[2] = 0;
  v[3] = 0;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  v[0] = 0;
  std::ostringstream os;
  os << "device-side wait timed out: rank " << who << " waited on channel " << channel
     << " for rank " << peer << " (signal pad slot " << channel << " * world_size + " << peer
     << "); the peer did not reach the matching put_signal/wait_signal/barrier before the "
        "deadline (SYMMEM_TIMEOUT_MS or the call's timeout). The kernel returned without "
        "finishing; this allocation's signal pad may hold a stale signal";
  throw_error(ErrorCode::Timeout, op, rank, os.str());
}

uint64_t timeout_to_ns(Millis timeout) {
  // resolve_timeout clamps to kMaxTimeout (ten years), far below 2^64 ns.
  const int64_t ms = detail::resolve_timeout(timeout).count();
  return ms <= 0 ? 1 : static_cast<uint64_t>(ms) * 1000000ull;
}

}  // namespace symmem::cuda
