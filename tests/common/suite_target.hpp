#pragma once

// NOTE [backend suites]
// A backend-independent suite (tests/ops/test_ops_mp.cpp) runs the same cases on every backend
// the machine has. Its source is built twice: once for the host backend (CPU memory, no CUDA
// runtime: what CI runs), and, where the CUDA toolkit is present, once with SYMMEM_SUITE_GPU
// defined (buffers in GPU memory, the CUDA runtime linked), which runs on the backend its
// argument `--backend=NAME` names (cuda, nvshmem or nccl; scripts/gpu-check.sh runs each).
//  - Cases never touch a buffer from the host: they write inputs with upload() and read results
//    with download() (GPU: synchronising the device first, since ops run on the backend's
//    non-blocking streams), so one source serves CPU and GPU memory.
//  - Which (op, dtype) pairs run is the backend's own op table (Backend::supports, the rules a
//    backend declares as data): a pair it does not serve is skipped and listed on rank 0's
//    output ("[ NOT SERVED ]"), never hand-picked. A test none of whose pairs is served is
//    reported SKIPPED with that reason.
//  - Device-found errors (all_to_all_v's capacity and count checks on the GPU, and a peer's
//    refusal of an op's arguments) are raised at the next synchronising call (docs/design.md,
//    "Stream-ordered errors"); settle() is that call: a group barrier on the null stream,
//    synchronous on every GPU backend.

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#ifdef SYMMEM_SUITE_GPU
#include <cuda_runtime_api.h>
#endif

#include "symmem/backend.hpp"
#include "symmem/symmem.hpp"
#include "test_util.hpp"

namespace symmem::suite {

struct Target {
  std::string backend = "host";
  Device device = Device::cpu();
  std::shared_ptr<Backend> impl;
  bool gpu() const { return device.is_cuda(); }
};

inline Target& target() {
  static Target t;
  return t;
}

#ifdef SYMMEM_SUITE_GPU
inline void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw Error(ErrorCode::Cuda, std::string("suite: ") + what + ": " + cudaGetErrorName(e) + " (" +
                                     cudaGetErrorString(e) + ")");
  }
}
#endif

// Chooses where the suite runs, for `group`: `backend` is the value of --backend= ("" for the
// build's default: host, or cuda in the GPU build). Returns "" when the suite can run, else why
// it is skipped here.
inline std::string init_target(const Group& group, const std::string& backend) {
  Target& t = target();
#ifdef SYMMEM_SUITE_GPU
  t.backend = backend.empty() ? "cuda" : backend;
  if (t.backend == "host") return "--backend=host: the host build of the suite runs it";
  std::string why;
  if (!test::have_gpu(&why)) return why;
  const int gpus = test::gpu_count();
  if (t.backend == "nccl" && group.world_size() > 1 && group.local_world_size() > gpus) {
    return "NCCL refuses two ranks on one GPU (\"Duplicate GPU detected\"): " +
           std::to_string(group.local_world_size()) + " ranks on this host, " +
           std::to_string(gpus) + " GPU(s)";
  }
  t.device = Device::cuda(group.local_rank() % gpus);
  cuda_check(cudaSetDevice(t.device.index), "cudaSetDevice");
#else
  (void)group;
  if (!backend.empty() && backend != "host")
    return "--backend=" + backend + ": this build of the suite has no GPU memory";
  t.backend = "host";
  t.device = Device::cpu();
#endif
  try {
    t.impl = get_backend(t.backend);
  } catch (const Error& e) {
    return std::string("backend ") + t.backend + " unavailable: " + e.what();
  }
  std::string why_not;
  if (!t.impl->can_serve(group, t.device, &why_not)) return why_not;
  select_backend(t.backend);
  return "";
}

// Whether the target backend's op table serves `op` on `dtype` for the target's memory.
inline bool serves(OpKind op, DType dtype) {
  return target().impl->supports(op, dtype, target().device.type);
}

// Every row of the dtype table, in table order.
inline std::vector<DType> all_dtypes() {
  std::vector<DType> v;
  for (size_t i = 0; i < dtype_table_size(); ++i) v.push_back(dtype_table()[i].dtype);
  return v;
}

// Options of an op on the target's memory.
template <class O = OpOptions>
O opts() {
  O o;
  if (target().gpu()) o.device = target().device;
  return o;
}

inline SymmetricMemory alloc_sym(const Group& group, size_t bytes) {
  AllocOptions o;
  o.backend = target().backend;
  return allocate(group, bytes, target().device, o);
}

// ---- memory the cases read and write only through these -----------------------------------
inline void upload(void* dst, const void* src, size_t n) {
  if (n == 0) return;
#ifdef SYMMEM_SUITE_GPU
  if (target().gpu()) {
    cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    cuda_check(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice), "cudaMemcpy to device");
    cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    return;
  }
#endif
  std::memcpy(dst, src, n);
}

inline void download(void* dst, const void* src, size_t n) {
  if (n == 0) return;
#ifdef SYMMEM_SUITE_GPU
  if (target().gpu()) {
    cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    cuda_check(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
    return;
  }
#endif
  std::memcpy(dst, src, n);
}

inline void fill(void* dst, int byte, size_t n) {
  std::vector<char> v(n, static_cast<char>(byte));
  upload(dst, v.data(), n);
}

inline std::vector<char> read(const void* src, size_t n) {
  std::vector<char> v(n);
  download(v.data(), src, n);
  return v;
}

template <class T>
void upload(T* dst, const std::vector<T>& v) {
  upload(static_cast<void*>(dst), v.data(), v.size() * sizeof(T));
}
template <class T>
std::vector<T> read_as(const T* src, size_t count) {
  std::vector<T> v(count);
  download(v.data(), src, count * sizeof(T));
  return v;
}

// Ordinary (non-symmetric) memory of the target: malloc'ed, or cudaMalloc'ed on the GPU.
class Mem {
 public:
  Mem() = default;
  explicit Mem(size_t bytes) : bytes_(bytes) {
#ifdef SYMMEM_SUITE_GPU
    if (target().gpu()) {
      void* p = nullptr;
      cuda_check(cudaMalloc(&p, bytes > 0 ? bytes : 1), "cudaMalloc");
      p_ = static_cast<char*>(p);
      return;
    }
#endif
    p_ = static_cast<char*>(std::malloc(bytes > 0 ? bytes : 1));
  }
  Mem(const Mem&) = delete;
  Mem& operator=(const Mem&) = delete;
  Mem(Mem&& o) noexcept : p_(o.p_), bytes_(o.bytes_) {
    o.p_ = nullptr;
  }
  Mem& operator=(Mem&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  ~Mem() {
    if (p_ == nullptr) return;
#ifdef SYMMEM_SUITE_GPU
    if (target().gpu()) {
      (void)cudaDeviceSynchronize();  // an op may still use it
      (void)cudaFree(p_);
      return;
    }
#endif
    std::free(p_);
  }
  char* get() const {
    return p_;
  }
  size_t size() const {
    return bytes_;
  }

 private:
  char* p_ = nullptr;
  size_t bytes_ = 0;
};

// A copy of `v` in the target's ordinary memory.
template <class T>
Mem mem_of(const std::vector<T>& v) {
  Mem m(v.size() * sizeof(T));
  upload(m.get(), v.data(), v.size() * sizeof(T));
  return m;
}

// Raises what the device found during the ops before (GPU), through a synchronising call; a
// no-op on the host backend, whose ops raise at the call.
inline void settle(const Group& group) {
  if (!target().gpu()) return;
#ifdef SYMMEM_SUITE_GPU
  cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");  // the kernels wrote their records
#endif
  barrier(group, opts());
}

// Whether the peers of one rank that refuses an `op` (its arguments fail its own checks) learn
// of it rather than waiting: on the host backend through the agreement; on the GPU where the op
// runs on the peer-pointer kernels, which take a refused op's place (NOTE [refused ops] in
// src/cuda/kernels/refuse.cu): every op on cuda and on nccl within one host; on nvshmem
// all_reduce, reduce_scatter, all_gather and all_to_all_v when every peer is directly reachable
// (one host, as in the GPU check; NvshmemBackend::runs_on_cuda_kernels): its other ops have
// kernels of their own.
inline bool refusal_reaches_peers(OpKind op) {
  if (!target().gpu() || target().backend != "nvshmem") return true;
  return op == OpKind::all_reduce || op == OpKind::reduce_scatter || op == OpKind::all_gather ||
         op == OpKind::all_to_all_v;
}

// ---- what the op table left out --------------------------------------------------------------
// Collects the (op, dtype) pairs a test skipped because the backend does not serve them; rank 0
// prints them when the test ends; a test that ran no pair is SKIPPED with the reason.
class NotServed {
 public:
  explicit NotServed(const Group& group) : rank_(group.rank()) {}
  // True when the backend serves `op` on `dtype`; else remembers the pair.
  bool check(OpKind op, DType dtype) {
    if (serves(op, dtype)) {
      ++served_;
      return true;
    }
    const std::string pair = std::string(to_string(op)) + " " + to_string(dtype);
    for (const auto& p : pairs_)
      if (p == pair) return false;
    pairs_.push_back(pair);
    return false;
  }
  int served() const { return served_; }
  std::string list() const {
    std::string s;
    for (const auto& p : pairs_) s += (s.empty() ? "" : ", ") + p;
    return s;
  }
  ~NotServed() {
    if (rank_ == 0 && !pairs_.empty()) {
      std::printf("[ NOT SERVED ] the %s backend's op table does not serve: %s\n",
                  target().backend.c_str(), list().c_str());
    }
  }

 private:
  int rank_;
  int served_ = 0;
  std::vector<std::string> pairs_;
};

}  // namespace symmem::suite
