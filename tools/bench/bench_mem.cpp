#include "bench_mem.hpp"

#include <dlfcn.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace symmem::bench {
namespace {

class HostIO final : public MemIO {
 public:
  void upload(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
  void download(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
  void synchronize() override {}
  void* alloc(size_t n) override {
    void* p = nullptr;
    if (posix_memalign(&p, 4096, n ? n : 1) != 0) throw std::bad_alloc();
    return p;
  }
  void release(void* p) override { std::free(p); }
  void marks(int n) override { t_.assign(static_cast<size_t>(n) + 1, {}); }
  void mark(int i) override { t_[static_cast<size_t>(i)] = std::chrono::steady_clock::now(); }
  std::vector<double> durations_us() override {
    std::vector<double> d;
    for (size_t i = 0; i + 1 < t_.size(); ++i)
      d.push_back(std::chrono::duration<double, std::micro>(t_[i + 1] - t_[i]).count());
    return d;
  }

 private:
  std::vector<std::chrono::steady_clock::time_point> t_;
};

// The few driver entry points the bench needs (CUDA driver API, stable ABI).
using CUresult = int;
using CUdeviceptr = unsigned long long;
struct Driver {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDeviceGet)(int*, int);
  CUresult (*cuDevicePrimaryCtxRetain)(void**, int);
  CUresult (*cuCtxSetCurrent)(void*);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuMemcpy)(CUdeviceptr, CUdeviceptr, size_t);
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuEventCreate)(void**, unsigned);
  CUresult (*cuEventRecord)(void*, void*);
  CUresult (*cuEventElapsedTime)(float*, void*, void*);
  CUresult (*cuEventDestroy)(void*);
};

class CudaIO final : public MemIO {
 public:
  explicit CudaIO(const Driver& d) : d_(d) {}
  ~CudaIO() override {
    for (void* e : events_) d_.cuEventDestroy(e);
  }
  void upload(void* dst, const void* src, size_t n) override { copy(dst, src, n, "upload"); }
  void download(void* dst, const void* src, size_t n) override { copy(dst, src, n, "download"); }
  void synchronize() override { check(d_.cuCtxSynchronize(), "cuCtxSynchronize"); }
  void* alloc(size_t n) override {
    CUdeviceptr p = 0;
    check(d_.cuMemAlloc(&p, n ? n : 1), "cuMemAlloc");
    return reinterpret_cast<void*>(p);
  }
  void release(void* p) override { d_.cuMemFree(reinterpret_cast<CUdeviceptr>(p)); }
  void marks(int n) override {
    used_ = static_cast<size_t>(n) + 1;
    while (events_.size() < used_) {
      void* e = nullptr;
      check(d_.cuEventCreate(&e, 0), "cuEventCreate");  // CU_EVENT_DEFAULT: timing enabled
      events_.push_back(e);
    }
  }
  void mark(int i) override {
    check(d_.cuEventRecord(events_[static_cast<size_t>(i)], nullptr), "cuEventRecord");
  }
  std::vector<double> durations_us() override {
    std::vector<double> d;
    for (size_t i = 0; i + 1 < used_; ++i) {
      float ms = 0;
      check(d_.cuEventElapsedTime(&ms, events_[i], events_[i + 1]), "cuEventElapsedTime");
      d.push_back(static_cast<double>(ms) * 1e3);
    }
    return d;
  }

 private:
  void copy(void* dst, const void* src, size_t n, const char* what) {
    synchronize();
    check(d_.cuMemcpy(reinterpret_cast<CUdeviceptr>(dst), reinterpret_cast<CUdeviceptr>(src), n),
          what);
    synchronize();  // from pageable memory cuMemcpy may return before the DMA has landed
  }
  static void check(CUresult r, const char* what) {
    if (r != 0)
      throw std::runtime_error(std::string(what) + " failed: CUresult " + std::to_string(r));
  }
  Driver d_;
  std::vector<void*> events_;
  size_t used_ = 0;
};

template <class F>
bool sym(void* lib, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  return *out != nullptr;
}

}  // namespace

std::unique_ptr<MemIO> make_host_io() {
  return std::make_unique<HostIO>();
}

int cuda_device_count() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return 0;
  using Init = int (*)(unsigned);
  using Count = int (*)(int*);
  auto init = reinterpret_cast<Init>(dlsym(lib, "cuInit"));
  auto count = reinterpret_cast<Count>(dlsym(lib, "cuDeviceGetCount"));
  int n = 0;
  if (!init || !count || init(0) != 0 || count(&n) != 0) return 0;
  return n;
}

std::unique_ptr<MemIO> make_cuda_io(int device, std::string* why) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    if (why) *why = std::string("cannot load libcuda.so.1: ") + dlerror();
    return nullptr;
  }
  Driver d{};
  bool ok = sym(lib, "cuInit", &d.cuInit) && sym(lib, "cuDeviceGet", &d.cuDeviceGet) &&
            sym(lib, "cuDevicePrimaryCtxRetain", &d.cuDevicePrimaryCtxRetain) &&
            sym(lib, "cuCtxSetCurrent", &d.cuCtxSetCurrent) &&
            sym(lib, "cuCtxSynchronize", &d.cuCtxSynchronize) &&
            sym(lib, "cuMemcpy", &d.cuMemcpy) && sym(lib, "cuMemAlloc_v2", &d.cuMemAlloc) &&
            sym(lib, "cuMemFree_v2", &d.cuMemFree) && sym(lib, "cuEventCreate", &d.cuEventCreate) &&
            sym(lib, "cuEventRecord", &d.cuEventRecord) &&
            sym(lib, "cuEventElapsedTime", &d.cuEventElapsedTime) &&
            sym(lib, "cuEventDestroy_v2", &d.cuEventDestroy);
  if (!ok) {
    if (why) *why = "libcuda.so.1 lacks a needed entry point";
    return nullptr;
  }
  int dev = 0;
  void* ctx = nullptr;
  const char* step = "cuInit";
  int rc = d.cuInit(0);
  if (rc == 0) rc = (step = "cuDeviceGet", d.cuDeviceGet(&dev, device));
  if (rc == 0) rc = (step = "cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain(&ctx, dev));
  if (rc == 0) rc = (step = "cuCtxSetCurrent", d.cuCtxSetCurrent(ctx));
  if (rc != 0) {
    if (why) {
      *why = "no usable CUDA device " + std::to_string(device) + " (" + step + " returned " +
             std::to_string(rc) + ")";
    }
    return nullptr;
  }
  return std::make_unique<CudaIO>(d);
}

}  // namespace symmem::bench
