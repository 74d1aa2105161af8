// The allocator behind symmem.torch.mempool(): two C functions that torch's
// CUDAPluggableAllocator loads from this module by name, and the registry they allocate through.
//
// NOTE [torch MemPool]
// torch.cuda.MemPool(allocator) routes the segments of its caching allocator to a custom
// allocator: torch calls symmem_torch_mempool_alloc(size, device, stream) when the pool needs a
// new segment and symmem_torch_mempool_free(ptr, size, device, stream) when it gives one back
// (empty_cache, the pool's end). Each segment is one symmem allocation over the group that
// mempool() registered for that device (one group per device and process), so a tensor made
// inside torch.cuda.use_mem_pool(pool) lies in symmetric memory at some offset of a segment, and
// symmem.find_memory (rendezvous, the ops) finds it: each segment is registered as the binding's
// own allocations are. Allocation is collective: torch's caching
// allocator asks for a segment when its own bookkeeping says so, so every rank must make the
// same allocations in the same order inside the pool (as torch's own symmetric-memory pool
// requires). The functions cannot throw into torch: a failed allocation returns null (torch then
// raises its out-of-memory error) and its message is kept for mempool_last_error() and logged on
// stderr. Freeing drops this module's handle; on the cuda backend the mapping goes with the last
// handle or view (NOTE [free with live views] in include/symmem/memory.hpp).

#include <cstdio>
#include <exception>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "common.hpp"

using namespace nanobind::literals;

namespace symmem::py {
namespace {

struct PoolRegistry {
  std::mutex mu;
  std::unordered_map<int, Group> group_of_device;         // mempool()'s group per CUDA device
  std::unordered_map<const void*, SymmetricMemory> live;  // segments handed to torch
  std::string last_error;
};

PoolRegistry& registry() {
  static auto* r = new PoolRegistry;  // never destroyed: torch may free segments at exit
  return *r;
}

void fail(const std::string& what) {
  PoolRegistry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    r.last_error = what;
  }
  std::fprintf(stderr, "symmem: torch mempool: %s\n", what.c_str());
}

}  // namespace

void bind_mempool(nb::module_& m) {
  m.def(
      "_mempool_register",
      [](const Group& group, int device) {
        PoolRegistry& r = registry();
        std::lock_guard<std::mutex> lock(r.mu);
        auto it = r.group_of_device.find(device);
        if (it != r.group_of_device.end() && it->second.impl() != group.impl()) {
          throw_invalid_argument("mempool", group.rank(), "group",
                                 "'" + group.name() + "': cuda:" + std::to_string(device) +
                                     " already has a symmem MemPool over group '" +
                                     it->second.name() +
                                     "' in this process (one group per device)");
        }
        r.group_of_device[device] = group;
      },
      "group"_a, "device"_a,
      "Registers the group whose symmetric memory symmem.torch.mempool() allocates on `device`.");
  m.def(
      "_mempool_last_error",
      [] {
        PoolRegistry& r = registry();
        std::lock_guard<std::mutex> lock(r.mu);
        return r.last_error;
      },
      "The message of the last failed MemPool allocation ('' when none).");
  m.def(
      "_mempool_segments",
      [] {
        PoolRegistry& r = registry();
        std::lock_guard<std::mutex> lock(r.mu);
        return r.live.size();
      },
      "Segments of symmetric memory that torch's MemPools hold now.");
}

}  // namespace symmem::py

// torch.cuda.memory.CUDAPluggableAllocator's signatures: void*(size_t, int, cudaStream_t) and
// void(void*, size_t, int, cudaStream_t); the stream is not needed (allocation is synchronous).
extern "C" __attribute__((visibility("default"))) void* symmem_torch_mempool_alloc(size_t size,
                                                                                   int device,
                                                                                   void* stream) {
  using namespace symmem;
  (void)stream;
  py::PoolRegistry& r = py::registry();
  Group group;
  bool found = false;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.group_of_device.find(device);
    if (it != r.group_of_device.end()) {
      group = it->second;
      found = true;
    }
  }
  if (!found) {
    py::fail("cuda:" + std::to_string(device) +
             " has no group: make the pool with symmem.torch.mempool(group, device)");
    return nullptr;
  }
  try {
    SymmetricMemory mem = allocate(group, size, Device::cuda(device));  // collective
    void* p = mem.ptr(group.rank());
    // What find_memory (is_symm_mem_tensor, rendezvous, the ops) looks tensors up in.
    py::register_allocation(mem);
    std::lock_guard<std::mutex> lock(r.mu);
    r.live[p] = std::move(mem);
    return p;
  } catch (const std::exception& e) {
    py::fail(std::string("allocating a segment of ") + std::to_string(size) +
             " bytes on cuda:" + std::to_string(device) + " failed: " + e.what());
  } catch (...) {
    py::fail("allocating a segment failed (unknown exception)");
  }
  return nullptr;
}

extern "C" __attribute__((visibility("default"))) void symmem_torch_mempool_free(void* ptr,
                                                                                 size_t size,
                                                                                 int device,
                                                                                 void* stream) {
  using namespace symmem;
  (void)size;
  (void)device;
  (void)stream;
  py::PoolRegistry& r = py::registry();
  SymmetricMemory mem;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.live.find(ptr);
    if (it == r.live.end()) return;  // not ours: nothing to release
    mem = std::move(it->second);
    r.live.erase(it);
  }
  // `mem` goes here, outside the lock (its release may synchronise the device).
}
