#include "cuda/signals.hpp"

#include <cuda_runtime_api.h>

#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "core/check.hpp"
#include "core/trace.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/peer_tables.hpp"
#include "cuda/timeout_record.hpp"
#include "symmem/device/sync.cuh"
#include "symmem/error.hpp"

namespace symmem::cuda {
namespace {

namespace dev = symmem::device;

// A synchronous wait's result word: {state, value seen, 0, 0}, 16 bytes of host-mapped memory,
// zero (pending) until the kernel writes it.
constexpr int32_t kResultSeen = 1;   // the comparison held
constexpr int32_t kResultEnded = 2;  // deadline or abort: the timeout record says which

__device__ void put_result(int32_t* result, int32_t state, uint32_t seen) {
  if (result == nullptr) return;
  dev::st_v4_volatile(result, make_uint4(static_cast<uint32_t>(state), seen, 0u, 0u));
  __threadfence_system();
}

// One thread (NOTE [GPU signals]).
__global__ void signal_op_kernel(uint32_t* target, uint32_t value, int add) {
  if (add == 0) {
    dev::store_sys<dev::MemOrder::release>(target, value);
    return;
  }
  // An add at system scope as a compare-and-swap loop (the device API's RMWs are cas and
  // exchange); each failed attempt learns the current value.
  uint32_t old = dev::load_sys<dev::MemOrder::relaxed>(target);
  while (true) {
    const uint32_t seen = dev::cas_sys<dev::MemOrder::release>(target, old, old + value);
    if (seen == old) return;
    old = seen;
  }
}

// One thread (NOTE [GPU signals]). `result`: the synchronous call's result word, or null.
__global__ void wait_until_kernel(DeviceHandle h, const uint32_t* target, uint32_t slot, int cmp,
                                  uint32_t value, int32_t* result) {
  const dev::Deadline deadline = dev::Deadline::of(h);
  while (true) {
    const uint32_t v = dev::load_sys<dev::MemOrder::relaxed>(target);  // NOTE [polling loads]
    if (compares(v, static_cast<Cmp>(cmp), value)) {
      dev::fence_sys<dev::MemOrder::acquire>();
      put_result(result, kResultSeen, v);
      return;
    }
    if (deadline.expired()) {
      const uint32_t world = h.world_size > 0 ? static_cast<uint32_t>(h.world_size) : 1u;
      (void)dev::record_timeout(h, static_cast<int>(slot / world), static_cast<int>(slot % world));
      put_result(result, kResultEnded, v);
      return;
    }
  }
}

// Result words of synchronous waits, handed out one per call (a wait on the null stream holds
// one until it returns) and reused; the memory is never freed (a kernel that outlives its call,
// after a CUDA error, may still write it).
class ResultWords {
 public:
  int32_t* take(int rank) {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.empty()) {
      constexpr int kPerChunk = 64;
      void* host = nullptr;
      SYMMEM_CUDART_CHECK(
          "wait_until", rank,
          cudaHostAlloc(&host, kPerChunk * 16, cudaHostAllocMapped | cudaHostAllocPortable));
      void* dptr = nullptr;
      SYMMEM_CUDART_CHECK("wait_until", rank, cudaHostGetDevicePointer(&dptr, host, 0));
      SYMMEM_CHECK("wait_until", rank, dptr == host, ErrorCode::Internal,
                   "host-mapped memory has different host and device addresses (no unified "
                   "addressing?)");
      for (int i = 0; i < kPerChunk; ++i) free_.push_back(static_cast<int32_t*>(host) + 4 * i);
    }
    int32_t* w = free_.back();
    free_.pop_back();
    volatile int32_t* v = w;
    for (int i = 0; i < 4; ++i) v[i] = 0;
    return w;
  }
  void give(int32_t* w) noexcept {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(w);
  }

 private:
  std::mutex mu_;
  std::vector<int32_t*> free_;
};

ResultWords& result_words() {
  static auto* words = new ResultWords;  // immortal (NOTE [immortal statics] in docs/design.md)
  return *words;
}

// Gives a result word back when the call ends, however it ends.
class HeldWord {
 public:
  explicit HeldWord(int32_t* w) : w_(w) {}
  ~HeldWord() {
    if (w_ != nullptr && !kept_) result_words().give(w_);
  }
  // After a CUDA error the kernel may still run and write the word: never hand it out again.
  void keep() { kept_ = true; }
  HeldWord(const HeldWord&) = delete;
  HeldWord& operator=(const HeldWord&) = delete;
  int32_t* get() const { return w_; }
  int32_t state() const { return reinterpret_cast<const volatile int32_t*>(w_)[0]; }
  uint32_t seen() const {
    return static_cast<uint32_t>(reinterpret_cast<const volatile int32_t*>(w_)[1]);
  }

 private:
  int32_t* w_;
  bool kept_ = false;
};

}  // namespace

void device_signal_op(const DeviceHandle& h, uint32_t* target, int peer, size_t slot,
                      uint32_t value, SignalOp op, Stream stream, int device) {
  const char* name = "signal_op";
  const int rank = h.rank;
  raise_device_timeout(name, rank, h.abort_slot);  // NOTE [timeout record]
  SYMMEM_CHECK(name, rank, target != nullptr, ErrorCode::Unsupported,
               "rank " << peer << "'s signal pad is not directly addressable from this rank");
  DeviceGuard guard(device);
  auto s = static_cast<cudaStream_t>(stream);
  {
    symmem::detail::KernelRange range("signal_op", 1);  // NOTE [nvtx ranges]
    signal_op_kernel<<<1, 1, 0, s>>>(target, value, op == SignalOp::add ? 1 : 0);
  }
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw_cudart_error(name, rank, "kernel launch", e, SYMMEM_WHERE);
  if (stream == nullptr) {
    std::ostringstream what;
    what << "signal_op (GPU, slot " << slot << " of rank " << peer << ", " << to_string(op) << " "
         << value << ")";
    synchronize_and_raise(name, rank, nullptr, kDefaultTimeout, what.str(), h.abort_slot);
  }
}

uint32_t device_wait_until(DeviceHandle h, const uint32_t* target, size_t slot, Cmp cmp,
                           uint32_t value, Millis timeout, Stream stream, int device) {
  const char* name = "wait_until";
  const int rank = h.rank;
  raise_device_timeout(name, rank, h.abort_slot);  // NOTE [timeout record]
  SYMMEM_CHECK(name, rank, target != nullptr, ErrorCode::Internal,
               "the allocation has no device address for its own signal pad");
  DeviceGuard guard(device);
  h.timeout_record = timeout_record();
  h.timeout_ns = timeout_to_ns(timeout);
  const bool sync = stream == nullptr;
  HeldWord word(sync ? result_words().take(rank) : nullptr);
  auto s = static_cast<cudaStream_t>(stream);
  {
    symmem::detail::KernelRange range("wait_until", 1);  // NOTE [nvtx ranges]
    wait_until_kernel<<<1, 1, 0, s>>>(h, target, static_cast<uint32_t>(slot), static_cast<int>(cmp),
                                      value, word.get());
  }
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw_cudart_error(name, rank, "kernel launch", e, SYMMEM_WHERE);
  if (!sync) return 0;  // enqueued: the value is not known yet (NOTE [GPU signals])
  auto timed_out = [&] {
    std::ostringstream os;
    os << "timed out after " << timeout.count() << " ms waiting for slot " << slot
       << " of this rank's signal pad (GPU) to be " << to_string(cmp) << " " << value
       << "; it holds " << word.seen()
       << " (no peer made it so: is every rank running the same sequence of signals?)";
    return os.str();
  };
  std::ostringstream what;
  what << "wait_until (GPU, slot " << slot << " " << to_string(cmp) << " " << value << ")";
  try {
    synchronize_and_raise(name, rank, nullptr, timeout, what.str(), h.abort_slot);
  } catch (const Error& err) {
    // The record's Timeout, in this call's terms; an abort (Aborted, PeerFailure) or a CUDA
    // error goes on as it is.
    if (err.code() == ErrorCode::Timeout && word.state() == kResultEnded) {
      throw_error(ErrorCode::Timeout, name, rank, timed_out());
    }
    if (err.code() == ErrorCode::Cuda) word.keep();
    throw;
  }
  if (word.state() == kResultSeen) return word.seen();
  if (word.state() == kResultEnded) {
    // Ended, but the record held an earlier failure (raised and cleared elsewhere): still this
    // call's timeout.
    throw_error(ErrorCode::Timeout, name, rank, timed_out());
  }
  throw_error(
      ErrorCode::Internal, name, rank,
      "the wait kernel finished without reporting (state " + std::to_string(word.state()) + ")");
}

}  // namespace symmem::cuda
