#include "test_util.hpp"

#include <dlfcn.h>

namespace symmem::test {
namespace {
using CuInit = int (*)(unsigned);
using CuDeviceGetCount = int (*)(int*);
}  // namespace

int gpu_count() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return 0;
  auto init = reinterpret_cast<CuInit>(dlsym(lib, "cuInit"));
  auto count = reinterpret_cast<CuDeviceGetCount>(dlsym(lib, "cuDeviceGetCount"));
  int n = 0;
  if (init == nullptr || count == nullptr || init(0) != 0 || count(&n) != 0) n = 0;
  return n;
}

bool have_gpu(std::string* why) {
  if (gpu_count() > 0) return true;
  if (why != nullptr) *why = "no GPU: libcuda.so.1 is missing or reports no device";
  return false;
}

}  // namespace symmem::test
