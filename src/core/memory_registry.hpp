#pragma once

// Internal services of the SymmetricMemory core for ops.cpp and the backends.
//
// Address registry: every live allocation registers this rank's buffer range
// [ptr(rank), ptr(rank) + bytes) (a host address on the host backend, a device address on the
// GPU backends). Ops use it to take the zero-copy path when a pointer lies in symmetric memory
// of the op's group.

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "core/exchange.hpp"
#include "symmem/export.hpp"
#include "symmem/group.hpp"
#include "symmem/memory.hpp"

namespace symmem {

class Backend;

// A view of [p, p + bytes) when that range lies inside one live symmetric allocation of `group`
// (the same Group, or a copy of it), else an invalid handle. bytes == 0 is treated as 1.
SYMMEM_API SymmetricMemory find_symmetric(const Group& group, const void* p, size_t bytes);

// The whole allocation (of any group) whose local buffer contains `p`, or an invalid handle.
// For error messages ("this buffer belongs to group X").
SYMMEM_API SymmetricMemory find_symmetric_any(const void* p);

// The view [p, p + bytes) of `whole` (a handle from find_symmetric_any(p)), or an invalid handle
// when the range runs past the allocation's end: find_symmetric without a second lookup.
SYMMEM_API SymmetricMemory narrow_to(const SymmetricMemory& whole, const void* p, size_t bytes);

// The backend object serving `buf`'s allocation (no registry lookup by name); null when `buf`
// is empty.
SYMMEM_API std::shared_ptr<Backend> backend_of(const SymmetricMemory& buf);

// Throws InvalidArgument "<op>: rank R: argument '<arg>' ..." when `buf` is empty or freed
// (naming the freed allocation). Ops call it on every SymmetricMemory argument.
SYMMEM_API void check_usable(const SymmetricMemory& buf, std::string_view op, std::string_view arg);

// "allocation #3 of group g0 (4096 bytes, host)": how errors name a buffer.
SYMMEM_API std::string describe(const SymmetricMemory& buf);

// A StoreExchange private to (group, purpose), kept for the group's life, so that every call
// on it pairs with the same call on the other ranks. Prefix "<group name>/<purpose>". Not
// thread-safe: one user (backend) per purpose, calls made in the same order on every rank.
SYMMEM_API StoreExchange& group_exchange(const Group& group, const std::string& purpose);

}  // namespace symmem
