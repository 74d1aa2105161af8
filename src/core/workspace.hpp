#pragma once

// Per-group symmetric workspace for ops whose inputs are ordinary memory.
//
// group_workspace(group, device, bytes) returns a symmetric allocation of `group` on `device`
// (one per (group, device type)) holding at least `bytes` per rank. It is collective when it
// grows: every rank must call it with the same `bytes` in the same order (ops do, since they are
// called with the same arguments). Growth allocates max(bytes, 2 * old) rounded up to 1 MiB and
// drops the old workspace (it is freed when the last handle to it goes). The workspace lives as
// long as the group.

#include <cstddef>
#include <string>

#include "symmem/export.hpp"
#include "symmem/group.hpp"
#include "symmem/memory.hpp"
#include "symmem/types.hpp"

namespace symmem {

SYMMEM_API SymmetricMemory group_workspace(const Group& group, Device device, size_t bytes);

// Like group_workspace, a symmetric allocation of at least `bytes` per rank kept with the group,
// but one per `purpose` (e.g. "moe"), for an op that needs its own memory beside the workspace
// the collectives it calls use. Collective when it grows (every rank asks for the same bytes in
// the same order); grows by at least a quarter, rounded up to 1 MiB. !may_grow: an empty handle
// instead of growing (the caller checks first whether it may take part in an allocation).
SymmetricMemory group_scratch(const Group& group, Device device, size_t bytes,
                              const std::string& purpose, bool may_grow = true);

}  // namespace symmem
