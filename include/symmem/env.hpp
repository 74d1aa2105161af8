#pragma once

// The one home of every SYMMEM_* setting. Each is declared once below with its type, default,
// accepted values and meaning; docs/env.md lists the same table and a unit test keeps the two
// in sync. Values are read from the environment once, on first use, and cached.
// A bad value is an InvalidArgument error that names the variable and what it accepts.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "symmem/export.hpp"

// X(NAME, TYPE, DEFAULT, ACCEPTED, MEANING)
//   TYPE: enum (one of ACCEPTED, '|'-separated), list (comma-separated subset of ACCEPTED,
//   a leading '^' inverts it), int (ACCEPTED is "min..max"), bool (0|1|true|false|yes|no|on|off),
//   string (free text). DEFAULT "" means unset.
#define SYMMEM_ENV_SETTINGS(X)                                                                     \
  X("SYMMEM_DEBUG", "enum", "WARN", "WARN|INFO|TRACE", "Log level.")                               \
  X("SYMMEM_DEBUG_SUBSYS", "list", "ALL", "INIT|ENV|STORE|IPC|ALLOC|COLL|P2P|GPU|PLUGIN|ALL",      \
    "Subsystems to log, comma-separated; a leading ^ logs all but those.")                         \
  X("SYMMEM_DEBUG_FILE", "string", "", "",                                                         \
    "Write the log to this file instead of stderr; %h expands to the host name, %p to the pid.")   \
  X("SYMMEM_BACKEND", "enum", "auto", "auto|host|cuda|nvshmem|nccl",                               \
    "Backend for allocations; auto picks host for CPU buffers, cuda/nvshmem/nccl for GPU ones.")   \
  X("SYMMEM_ALGO", "enum", "auto", "auto|one_shot|two_shot",                                       \
    "Forces the all-reduce algorithm; auto picks by message size and world size.")                 \
  X("SYMMEM_TIMEOUT_MS", "int", "300000", "1..86400000",                                           \
    "Deadline in milliseconds of every blocking wait (store, rendezvous, barrier, signal).")       \
  X("SYMMEM_SIGNAL_PAD_BYTES", "int", "8192", "64..1073741824",                                    \
    "Bytes of the signal pad of each rank in each allocation (4-byte slots).")                     \
  X("SYMMEM_PLUGIN_PATH", "string", "", "",                                                        \
    "Colon-separated directories searched for backend plugins before the library's own.")          \
  X("SYMMEM_RANK", "int", "", "0..1048575", "This process's rank (overrides launcher variables).") \
  X("SYMMEM_WORLD_SIZE", "int", "", "1..1048576", "Number of ranks in the job.")                   \
  X("SYMMEM_LOCAL_RANK", "int", "", "0..1048575", "This process's rank among those on its host.")  \
  X("SYMMEM_LOCAL_WORLD_SIZE", "int", "", "1..1048576", "Number of ranks on this host.")           \
  X("SYMMEM_STORE", "string", "", "",                                                              \
    "Rendezvous store: tcp://host:port or file:///path (overrides MASTER_ADDR/MASTER_PORT).")      \
  X("SYMMEM_STORE_TOKEN", "string", "", "",                                                        \
    "Shared secret a TCP store client must present first; symmem-run sets a random one.")          \
  X("SYMMEM_STORE_BIND", "string", "", "",                                                         \
    "Address the store hosted by rank 0 binds to; default loopback, or MASTER_ADDR if not local.") \
  X("SYMMEM_HOST_ID", "string", "", "",                                                            \
    "Overrides the host identity used to decide which ranks share a host.")                        \
  X("SYMMEM_SOCKET_DIR", "string", "", "",                                                         \
    "If set, IPC sockets live in a private (0700) directory created under it; unset: the "         \
    "abstract socket namespace (nothing on disk).")                                                \
  X("SYMMEM_ALLOW_SHARED_GPU", "bool", "0", "",                                                    \
    "Allow several ranks on one GPU (cuda backend); needs MPS for concurrent kernels.")            \
  X("SYMMEM_GPU_BLOCKS_PER_SM", "int", "", "1..2",                                                 \
    "Tuning: 512-thread blocks per SM share of the GPU collectives (default: tuning.hpp).")        \
  X("SYMMEM_GPU_LL_MAX_BYTES", "int", "", "0..67108864",                                           \
    "Tuning: largest piece the GPU collectives send LL under algo auto (default: tuning.hpp).")

namespace symmem::env {

struct SettingInfo {
  const char* name;
  const char* type;
  const char* default_value;
  const char* accepted;
  const char* meaning;
};

// Every declared setting, in declaration order.
SYMMEM_API const std::vector<SettingInfo>& settings();

// Typed, cached accessors. `name` must be declared above (else Internal error).
// An unset variable yields its default; a bad value throws InvalidArgument naming it.
SYMMEM_API std::string get_string(std::string_view name);
SYMMEM_API std::optional<int64_t> get_int(std::string_view name);  // nullopt: unset, no default
SYMMEM_API int64_t get_int_or(std::string_view name, int64_t fallback);
SYMMEM_API bool get_bool(std::string_view name);
SYMMEM_API bool is_set(std::string_view name);
// For list settings: the selected items, with a leading '^' already applied against ACCEPTED.
SYMMEM_API std::vector<std::string> get_list(std::string_view name);

// Checks every declared variable that is set; throws InvalidArgument on the first bad one.
// Unknown SYMMEM_* variables (likely typos) are logged as warnings.
SYMMEM_API void validate_all();

// Forgets cached values so the next read consults the environment again (tests only).
SYMMEM_API void reset_cache_for_testing();

}  // namespace symmem::env
