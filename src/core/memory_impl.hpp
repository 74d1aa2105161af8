#pragma once

// State behind SymmetricMemory handles (memory.cpp, workspace.cpp).
//
// One Allocation per allocate() call; every handle and view shares it. free() releases the
// backend memory at once and marks the allocation freed, so that any later use of a handle or
// view is an InvalidArgument error naming it; the Allocation object itself lives as long as a
// handle does.

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "symmem/backend.hpp"
#include "symmem/memory.hpp"

namespace symmem::detail {

struct Allocation {
  std::shared_ptr<Backend> backend;  // declared before `mem`: outlives it
  std::shared_ptr<BackendMemory> mem;
  std::string backend_name;
  Group group;  // non-owning for group workspaces (they must not keep their group alive)
  const void* group_key = nullptr;  // group.impl().get(), for the address registry
  Device device;
  size_t bytes = 0;
  size_t pad_bytes = 0;
  uint64_t alloc_id = 0;
  int rank = 0;
  int world_size = 0;
  Millis timeout{0};
  bool workspace = false;
  std::string label;  // "allocation #3 of group g0 (4096 bytes, host)"
  std::atomic<bool> freed{false};
  uintptr_t registered_base = 0;  // 0: not in the address registry
  // CPU group workspaces: mem->ptr(p) and mem->signal_pad(p) of every peer, read once at
  // allocation (NOTE [op fast path] in ops.cpp). Empty for other allocations.
  std::vector<char*> peer_ptrs;
  std::vector<uint32_t*> peer_pads;

  ~Allocation();
  // Unregisters and releases the backend memory; idempotent, never throws.
  void release() noexcept;
};

}  // namespace symmem::detail

namespace symmem {

struct SymmetricMemory::Impl {
  std::shared_ptr<detail::Allocation> alloc;
  size_t offset = 0;
  size_t length = 0;
};

}  // namespace symmem
