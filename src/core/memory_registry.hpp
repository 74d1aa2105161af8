#pragma once

// Internal services of the SymmetricMemory core for ops.cpp and the backends.
//
// Address registry: every live allocation registers this rank's buffer range
// [ptr(rank), ptr(rank) + bytes) (a host address on the host backend, a device address on the
// GPU backends). Ops use it to take the zero-copy path when a pointer lies in symmetric memory
// of the op's group.

#include <array>
#include <cstddef>
#include <cstdint>
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

namespace detail {
struct Allocation;
}

// A buffer argument's allocation: the live allocation (of any group) whose local buffer holds
// the pointer, and the pointer's offset in it; alloc is null for ordinary memory.
struct BufferRef {
  std::shared_ptr<detail::Allocation> alloc;
  size_t offset = 0;
};

// NOTE [op fast path] (core/ops.cpp): the address registry's answers for the last few pointers
// a group's ops were given (ordinary memory included), kept until the registry changes (an
// allocation made or freed anywhere in the process). Holds no allocation alive. Not
// thread-safe: one per group, used by the thread that runs the group's op.
class SYMMEM_API BufferCache {
 public:
  BufferRef find(const void* p);

 private:
  struct Entry {
    const void* p = nullptr;
    uint64_t gen = 0;  // the registry's generation when found (0: never)
    bool found = false;
    std::weak_ptr<detail::Allocation> alloc;
    size_t offset = 0;
  };
  std::array<Entry, 4> entries_{};
  unsigned next_ = 0;
};

// A handle on [offset, offset + length) of `a` (offset from its local buffer's start).
SYMMEM_API SymmetricMemory view_of_allocation(std::shared_ptr<detail::Allocation> a, size_t offset,
                                              size_t length);

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
