// NOTE [which NCCL] (nccl_library.hpp): choosing and opening the process's NCCL, and the NCCL
// functions of nccl.h that the plugin calls, forwarding to it. The device-header ones
// (ncclDevCommCreate/Destroy, ncclTeamLsa) forward in nccl_devcomm.cu.

#include "nccl/nccl_library.hpp"

#include <dlfcn.h>
#include <link.h>
#include <nccl.h>

#include <mutex>
#include <string>

#include "core/log.hpp"
#include "symmem/env.hpp"

#ifndef SYMMEM_NCCL_BUILD_LIBRARY
#define SYMMEM_NCCL_BUILD_LIBRARY ""
#endif

namespace symmem::nccl {
namespace {

std::string version_text(int v) {
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

std::string loaded_path(void* handle, const std::string& fallback) {
  link_map* lm = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &lm) == 0 && lm != nullptr && lm->l_name != nullptr &&
      lm->l_name[0] != '\0') {
    return lm->l_name;
  }
  return fallback;
}

// Takes `handle` (from dlopen of `what`) if its version is new enough; else closes it and says
// why in lib.why. True when taken.
bool take(Library& lib, void* handle, const std::string& what, const char* source) {
  lib.path = loaded_path(handle, what);
  using GetVersion = ncclResult_t (*)(int*);
  auto get_version = reinterpret_cast<GetVersion>(dlsym(handle, "ncclGetVersion"));
  int v = 0;
  if (get_version == nullptr || get_version(&v) != ncclSuccess) {
    lib.why = lib.path + " has no working ncclGetVersion (not NCCL?)";
    dlclose(handle);
    return false;
  }
  constexpr int kNeed = NCCL_VERSION_CODE / 100 * 100;  // the headers' major.minor
  if (v < kNeed) {
    lib.why = "NCCL " + version_text(v) + " at " + lib.path + " (" + source +
              ") is older than NCCL " + version_text(kNeed) +
              ", the version the nccl plugin was built against; install a newer NCCL or point "
              "SYMMEM_NCCL_LIBRARY at one";
    dlclose(handle);
    return false;
  }
  lib.handle = handle;
  lib.version = v;
  lib.source = source;
  lib.why.clear();
  return true;
}

Library load() {
  Library lib;
  // 1. Already in the process (the soname is what the loader matches).
  const std::string requested = env::nccl_library();
  if (void* h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD)) {
    // Too old is final: loading another beside it would give the process two NCCLs.
    if (take(lib, h, "libnccl.so.2", "already loaded in the process") && !requested.empty() &&
        lib.path != requested) {
      SYMMEM_LOG(WARN, PLUGIN) << "nccl: SYMMEM_NCCL_LIBRARY=" << requested
                               << " is not used: " << lib.path
                               << " was already loaded in the process (one NCCL per process)";
    }
    return lib;
  }
  // 2-4. Open one (RTLD_LOCAL: a framework that loads libnccl.so.2 later gets this one by its
  // soname, and nothing else in the process binds to it before).
  struct Candidate {
    std::string file;
    const char* source;
  };
  const Candidate candidates[] = {
      {requested, "SYMMEM_NCCL_LIBRARY"},
      {SYMMEM_NCCL_BUILD_LIBRARY, "the library the plugin was built against"},
      {"libnccl.so.2", "the loader's search path"},
  };
  std::string tried;
  for (const Candidate& c : candidates) {
    if (c.file.empty()) continue;
    const bool explicit_choice = &c == &candidates[0];
    dlerror();
    void* h = dlopen(c.file.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      const char* e = dlerror();
      tried += (tried.empty() ? "" : "; ") + c.file + " (" + c.source + "): " + (e ? e : "?");
      if (explicit_choice) {
        SYMMEM_LOG(WARN, PLUGIN) << "nccl: SYMMEM_NCCL_LIBRARY=" << c.file << " cannot be loaded ("
                                 << (e ? e : "?") << "); trying the others";
      }
      continue;
    }
    if (take(lib, h, c.file, c.source)) return lib;
    tried += (tried.empty() ? "" : "; ") + lib.why;
  }
  lib.why = "no usable libnccl.so.2: " + tried;
  return lib;
}

}  // namespace

const Library& library() noexcept {
  static const Library lib = [] {
    Library l;
    try {
      l = load();
    } catch (const std::exception& e) {
      l.why = std::string("choosing NCCL failed: ") + e.what();
    }
    if (l.handle != nullptr) {
      SYMMEM_LOG(INFO, PLUGIN) << "nccl: NCCL " << version_text(l.version) << " from " << l.path
                               << " (" << l.source << "; built against "
                               << version_text(NCCL_VERSION_CODE) << ")";
    } else {
      SYMMEM_LOG(INFO, PLUGIN) << "nccl: " << l.why;
    }
    return l;
  }();
  return lib;
}

void* symbol(const char* name) noexcept {
  const Library& lib = library();
  return lib.handle != nullptr ? dlsym(lib.handle, name) : nullptr;
}

CommRevokeFn comm_revoke_fn() noexcept {
  static const auto fn = reinterpret_cast<CommRevokeFn>(symbol("ncclCommRevoke"));
  return fn;
}

CommShrinkFn comm_shrink_fn() noexcept {
  static const auto fn = reinterpret_cast<CommShrinkFn>(symbol("ncclCommShrink"));
  return fn;
}

}  // namespace symmem::nccl

// ---- the plugin's NCCL entry points (hidden: they bind inside the plugin only) ----------------
// Each resolves its symbol once; with no NCCL they fail like NCCL would (ncclSystemError), and
// ncclGetLastError/ncclGetErrorString say why.
#define SYMMEM_NCCL_FORWARD(name, params, args)                                            \
  ncclResult_t name params {                                                               \
    static const auto fn = reinterpret_cast<decltype(&name)>(symmem::nccl::symbol(#name)); \
    return fn != nullptr ? fn args : ncclSystemError;                                      \
  }

extern "C" {
SYMMEM_NCCL_FORWARD(ncclGetVersion, (int* version), (version))
SYMMEM_NCCL_FORWARD(ncclGetUniqueId, (ncclUniqueId * id), (id))
SYMMEM_NCCL_FORWARD(ncclCommInitRankConfig,
                    (ncclComm_t * comm, int nranks, ncclUniqueId id, int rank,
                     ncclConfig_t* config),
                    (comm, nranks, id, rank, config))
SYMMEM_NCCL_FORWARD(ncclCommDestroy, (ncclComm_t comm), (comm))
SYMMEM_NCCL_FORWARD(ncclCommAbort, (ncclComm_t comm), (comm))
SYMMEM_NCCL_FORWARD(ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t* async_error),
                    (comm, async_error))
SYMMEM_NCCL_FORWARD(ncclCommCount, (const ncclComm_t comm, int* count), (comm, count))
SYMMEM_NCCL_FORWARD(ncclCommCuDevice, (const ncclComm_t comm, int* device), (comm, device))
SYMMEM_NCCL_FORWARD(ncclCommUserRank, (const ncclComm_t comm, int* rank), (comm, rank))
SYMMEM_NCCL_FORWARD(ncclCommWindowRegister,
                    (ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int flags),
                    (comm, buff, size, win, flags))
SYMMEM_NCCL_FORWARD(ncclCommWindowDeregister, (ncclComm_t comm, ncclWindow_t win), (comm, win))
SYMMEM_NCCL_FORWARD(ncclMemAlloc, (void** ptr, size_t size), (ptr, size))
SYMMEM_NCCL_FORWARD(ncclMemFree, (void* ptr), (ptr))
SYMMEM_NCCL_FORWARD(ncclGroupStart, (), ())
SYMMEM_NCCL_FORWARD(ncclGroupEnd, (), ())
SYMMEM_NCCL_FORWARD(ncclAllReduce,
                    (const void* send, void* recv, size_t count, ncclDataType_t type,
                     ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream),
                    (send, recv, count, type, op, comm, stream))
SYMMEM_NCCL_FORWARD(ncclReduceScatter,
                    (const void* send, void* recv, size_t count, ncclDataType_t type,
                     ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream),
                    (send, recv, count, type, op, comm, stream))
SYMMEM_NCCL_FORWARD(ncclAllGather,
                    (const void* send, void* recv, size_t count, ncclDataType_t type,
                     ncclComm_t comm, cudaStream_t stream),
                    (send, recv, count, type, comm, stream))
SYMMEM_NCCL_FORWARD(ncclBroadcast,
                    (const void* send, void* recv, size_t count, ncclDataType_t type, int root,
                     ncclComm_t comm, cudaStream_t stream),
                    (send, recv, count, type, root, comm, stream))
SYMMEM_NCCL_FORWARD(ncclSend,
                    (const void* send, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                     cudaStream_t stream),
                    (send, count, type, peer, comm, stream))
SYMMEM_NCCL_FORWARD(ncclRecv,
                    (void* recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                     cudaStream_t stream),
                    (recv, count, type, peer, comm, stream))

const char* ncclGetErrorString(ncclResult_t result) {
  static const auto fn =
      reinterpret_cast<decltype(&ncclGetErrorString)>(symmem::nccl::symbol("ncclGetErrorString"));
  return fn != nullptr ? fn(result) : "NCCL is not loaded";
}

const char* ncclGetLastError(ncclComm_t comm) {
  static const auto fn =
      reinterpret_cast<decltype(&ncclGetLastError)>(symmem::nccl::symbol("ncclGetLastError"));
  return fn != nullptr ? fn(comm) : symmem::nccl::library().why.c_str();
}
}  // extern "C"
