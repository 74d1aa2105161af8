#pragma once

// nccl backend extras. Everything here goes through the registry (the nccl plugin is loaded on
// first use); including this header does not need NCCL's headers or library.
//
//   ncclComm_t comm = ...;                       // e.g. the one the framework already holds
//   symmem::use_nccl_comm(group, comm);          // on every rank of `group`, before allocating
//   auto buf = symmem::allocate(group, bytes, symmem::Device::cuda(dev), {.backend = "nccl"});
//
// The communicator must span exactly the ranks of `group` (ncclCommCount == world_size,
// ncclCommUserRank == group.rank()) and live on the allocation's device. symmem uses it without
// taking ownership: the caller destroys it, after every symmem allocation on `group` is freed.
// Calling it after the nccl backend already made its own communicator for `group` is an
// InvalidArgument error.

#include <string>

#include "symmem/backend.hpp"
#include "symmem/error.hpp"
#include "symmem/group.hpp"

namespace symmem {

// `nccl_comm` is an ncclComm_t.
inline void use_nccl_comm(const Group& group, void* nccl_comm) {
  using Fn = void (*)(const Group&, void*);
  auto backend = get_backend("nccl");  // BackendUnavailable when the plugin cannot load
  auto fn = reinterpret_cast<Fn>(backend->extension("use_nccl_comm"));
  if (fn == nullptr) {
    throw_error(ErrorCode::Internal, "use_nccl_comm", group.valid() ? group.rank() : -1,
                "the nccl plugin has no 'use_nccl_comm' entry point");
  }
  fn(group, nccl_comm);
}

}  // namespace symmem
