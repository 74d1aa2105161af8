#include "test_util.hpp"

#include <dlfcn.h>
#include <execinfo.h>
#include <unistd.h>

#include <csignal>

namespace symmem::test {
namespace {
using CuInit = int (*)(unsigned);
using CuDeviceGetCount = int (*)(int*);

// A test process that crashes (often at exit, far from any assertion) prints where it was: the
// raw frames (library+offset, for addr2line) on stderr, then dies of the same signal, so exit
// statuses and the fault suite's expectations do not change. Sanitizer builds keep their own.
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
void crash_handler(int sig) {
  void* frames[64];
  const int n = backtrace(frames, 64);
  const char head[] = "\n*** test process crashed; backtrace (addr2line -e LIB -f -C OFFSET):\n";
  (void)!write(STDERR_FILENO, head, sizeof(head) - 1);
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

const bool g_crash_handler_installed = [] {
  void* warm[1];
  (void)backtrace(warm, 1);  // loads libgcc now, not inside the handler
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL}) std::signal(sig, crash_handler);
  return true;
}();
#endif
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
