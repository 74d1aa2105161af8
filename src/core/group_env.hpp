#pragma once

// How Group::from_env() reads the job layout from the environment (internal; exported for
// tests). See the precedence in symmem/group.hpp.

#include <string>
#include <vector>

#include "symmem/export.hpp"
#include "symmem/group.hpp"

namespace symmem::detail {

// LaunchSettings::launcher of a process started without any launcher variables: a job of one
// rank with an in-process store (as an MPI program started alone runs as a world of one).
inline constexpr const char* kNoLauncher = "no launcher (a job of one rank)";

struct LaunchSettings {
  int rank = -1;
  int world_size = -1;
  int local_rank = -1;        // -1: unknown (derived from host identity)
  int local_world_size = -1;  // -1: unknown
  std::string launcher;       // where the rank came from: options, SYMMEM_RANK, torchrun, ...
  // The store, one of: an explicit/SYMMEM_STORE url to connect to; MASTER_ADDR and the port
  // rank 0 hosts on (MASTER_PORT + 1); or neither (world of one: an in-process store).
  std::string store_url;
  std::string master_addr;
  int store_port = -1;
  std::vector<std::string> found;  // "NAME=value" of every setting that was consulted
};

// Reads options and the environment; throws InvalidArgument listing what was found and what
// is missing or contradictory, with the fix for the launcher whose variables were found.
// Nothing at all (no options, no launcher or SYMMEM_* layout variables, no store) gives rank 0
// of 1 (launcher kNoLauncher). Touches nothing else.
SYMMEM_API LaunchSettings resolve_launch(const GroupOptions& options);

}  // namespace symmem::detail
