#include "cuda/driver.hpp"

#include <dlfcn.h>

#include <mutex>
#include <string>
#include <string_view>

#include "core/log.hpp"
#include "symmem/error.hpp"

namespace symmem::cuda {
namespace {

using GetProcAddress = CUresult (*)(const char*, void**, int, cuuint64_t,
                                    CUdriverProcAddressQueryResult*);

// cuGetProcAddress returns the newest form of an entry point at the requested version. For
// these, CUDA 13.0 added a form with an extra CUcontext argument (cuCtxSynchronize_v2(ctx),
// cuCtxGetDevice_v2(dev, ctx)) while <cuda.h> keeps declaring the old one under the plain name:
// resolve them at 12.0 so that the pointers match the prototypes they are called through.
int resolve_version(std::string_view name) {
  if (name == "cuCtxSynchronize" || name == "cuCtxGetDevice") return 12000;
  return CUDA_VERSION;
}

struct Loaded {
  Driver drv;
  std::string error;  // empty: loaded
};

Loaded load() {
  Loaded out;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* e = dlerror();
    out.error =
        std::string("cannot load the CUDA driver: ") + (e ? e : "dlopen(libcuda.so.1) failed");
    return out;
  }
  auto gpa = reinterpret_cast<GetProcAddress>(dlsym(lib, "cuGetProcAddress_v2"));
  if (gpa == nullptr) {
    out.error =
        "the CUDA driver is too old: libcuda.so.1 lacks cuGetProcAddress_v2 (need a driver "
        "for CUDA 12.5 or newer)";
    return out;
  }
  Driver& d = out.drv;
  std::string missing;
#define SYMMEM_CU_RESOLVE_(name)                                                    \
  {                                                                                 \
    void* p = nullptr;                                                              \
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;                \
    if (gpa(#name, &p, resolve_version(#name), CU_GET_PROC_ADDRESS_DEFAULT, &st) != \
            CUDA_SUCCESS ||                                                         \
        p == nullptr) {                                                             \
      missing += std::string(missing.empty() ? "" : ", ") + #name;                  \
    }                                                                               \
    d.name = reinterpret_cast<decltype(d.name)>(p);                                 \
  }
  SYMMEM_CU_FUNCTIONS(SYMMEM_CU_RESOLVE_)
#undef SYMMEM_CU_RESOLVE_
  if (!missing.empty()) {
    out.error = "the CUDA driver lacks entry points for CUDA " + std::to_string(CUDA_VERSION) +
                ": " + missing + " (update the driver)";
    return out;
  }
  CUresult r = d.cuInit(0);
  if (r != CUDA_SUCCESS) {
    const char* name = nullptr;
    d.cuGetErrorName(r, &name);
    out.error = std::string("cuInit(0) failed: ") + (name ? name : "unknown error") +
                " (no usable GPU or driver)";
    return out;
  }
  d.cuDriverGetVersion(&d.version);
  SYMMEM_LOG(INFO, GPU) << "CUDA driver loaded (version " << d.version << ")";
  return out;
}

const Loaded& loaded() {
  static Loaded l = load();  // thread-safe static init
  return l;
}

}  // namespace

const Driver& driver() {
  const Loaded& l = loaded();
  if (!l.error.empty()) throw Error(ErrorCode::BackendUnavailable, "cuda: " + l.error);
  return l.drv;
}

bool driver_available(std::string* why) {
  const Loaded& l = loaded();
  if (!l.error.empty() && why != nullptr) *why = l.error;
  return l.error.empty();
}

std::string cu_error_text(CUresult r) {
  const Loaded& l = loaded();
  const char* name = nullptr;
  const char* text = nullptr;
  if (l.error.empty()) {
    l.drv.cuGetErrorName(r, &name);
    l.drv.cuGetErrorString(r, &text);
  }
  std::string s = name ? name : ("CUresult " + std::to_string(static_cast<int>(r)));
  if (text) s += std::string(" (") + text + ")";
  return s;
}

}  // namespace symmem::cuda
