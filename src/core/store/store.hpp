#pragma once

// Internal helpers shared by the store implementations (HashStore, FileStore, TcpStore and the
// TCP server): argument checks against the documented limits, and the Timeout error
// that names the missing keys.

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/timeout.hpp"
#include "symmem/export.hpp"
#include "symmem/store.hpp"

namespace symmem::detail {

// Timeouts and deadlines: resolve_timeout() and deadline_for() in core/timeout.hpp.

// InvalidArgument unless 1 <= key.size() <= kStoreMaxKeyBytes.
SYMMEM_API void check_key(std::string_view op, const std::string& key);
SYMMEM_API void check_keys(std::string_view op, const std::vector<std::string>& keys);
// InvalidArgument unless value.size() <= kStoreMaxValueBytes.
SYMMEM_API void check_value(std::string_view op, const std::string& key, const Bytes& value);

// "'a', 'b', 'c' and 5 more" (at most `max_listed` keys spelled out).
SYMMEM_API std::string join_keys(const std::vector<std::string>& keys, size_t max_listed = 16);

// Throws Timeout: "<op>: timed out after N ms waiting for keys 'a', 'b'".
[[noreturn]] SYMMEM_API void throw_store_timeout(std::string_view op,
                                                 const std::vector<std::string>& missing,
                                                 Millis timeout);

// add() stores counters as decimal text. parse_counter throws InvalidArgument when the value at
// `key` is not a decimal int64.
SYMMEM_API int64_t parse_counter(std::string_view op, const std::string& key, const Bytes& value);
SYMMEM_API Bytes format_counter(int64_t value);
// Overflow-checked a + b (InvalidArgument naming `key` on overflow).
SYMMEM_API int64_t add_counter(std::string_view op, const std::string& key, int64_t a, int64_t b);

}  // namespace symmem::detail
