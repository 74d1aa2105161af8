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

#include "symmem/export.hpp"
#include "symmem/group.hpp"
#include "symmem/memory.hpp"
#include "symmem/types.hpp"

namespace symmem {

SYMMEM_API SymmetricMemory group_workspace(const Group& group, Device device, size_t bytes);

}  // namespace symmem
