#pragma once

// NOTE [which NCCL]
// The nccl plugin does not link libnccl: one process has one libnccl.so.2 (the loader matches
// the soname), and a framework brings its own. Linked, the plugin's NCCL (the build's, e.g. the
// CUDA toolkit's 2.28) was loaded first whenever symmem's plugins were loaded before torch,
// and torch then failed to import ("libtorch_cuda.so: undefined symbol: ncclCommResume"): its
// newer NCCL was never loaded. Instead the plugin opens NCCL at its first NCCL call, chosen
// once, in this order:
//   1. a libnccl.so.2 already loaded in the process (torch imported first): two NCCLs in one
//      process could not share communicators, so a loaded one always wins;
//   2. SYMMEM_NCCL_LIBRARY, a path (the Python module sets it to the nvidia-nccl wheel's
//      library when the wheel is installed and the variable is not set: the one torch loads);
//   3. the library the plugin was built against (its absolute path, from CMake);
//   4. "libnccl.so.2" on the loader's search path.
// The first that loads is taken (a failure of 2 is logged, then 3 and 4 are tried). Its version
// (ncclGetVersion) must be at least the major.minor of the headers the plugin was built with;
// an older one makes the backend unavailable, saying which library and which version. The
// choice is logged once at INFO (SYMMEM_DEBUG=INFO, subsystem PLUGIN). The NCCL functions the
// plugin calls are defined in the plugin (hidden, nccl_library.cpp and nccl_devcomm.cu) and
// forward to the chosen library; without one they return ncclSystemError and
// ncclGetLastError() says why.

#include <nccl.h>

#include <string>

namespace symmem::nccl {

struct Library {
  void* handle = nullptr;  // dlopen handle, or null when no usable NCCL was found
  std::string path;        // the file that was loaded (or the last one tried)
  std::string source;      // which rule of NOTE [which NCCL] chose it
  int version = 0;         // ncclGetVersion() of the loaded library
  std::string why;         // when handle is null: why no NCCL is usable
};

// The process's NCCL, chosen on first use (thread-safe).
const Library& library() noexcept;

// The address of `name` in the chosen NCCL, or null when there is none.
void* symbol(const char* name) noexcept;

// NOTE [optional NCCL entry points]
// Entry points of newer NCCLs than the oldest the plugin accepts are looked up, never assumed:
// each function below is the loaded NCCL's, or null when it lacks it (then the caller does
// without, and says so in the log). Signatures as in NCCL 2.28.9's nccl.h.
//   ncclCommRevoke(comm, flags)                      stops in-flight ops; the comm stays valid
//                                                     for destroy and shrink (2.28)
//   ncclCommShrink(comm, excluded, n, &newcomm, config, flags)   a communicator of the ranks
//                                                     not excluded, collective over them (2.27)
using CommRevokeFn = ncclResult_t (*)(ncclComm_t comm, int revoke_flags);
using CommShrinkFn = ncclResult_t (*)(ncclComm_t comm, int* exclude_ranks, int exclude_count,
                                      ncclComm_t* newcomm, ncclConfig_t* config, int shrink_flags);
CommRevokeFn comm_revoke_fn() noexcept;
CommShrinkFn comm_shrink_fn() noexcept;

}  // namespace symmem::nccl
