#pragma once

// The one home of every SYMMEM_* setting. Each is declared once below with its type, default,
// accepted values and meaning; docs/env.md lists the same table and a unit test keeps the two
// in sync. Values are read from the environment once, on first use, and cached.
// A bad value is an InvalidArgument error that names the variable and what it accepts.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "symmem/export.hpp"

// X(ID, NAME, TYPE, DEFAULT, ACCEPTED, MEANING)
//   ID: the name of the generated typed accessor env::ID() and of the default env::defaults::ID
//   (below); NAME: the variable.
//   TYPE: enum (one of ACCEPTED, '|'-separated), list (comma-separated subset of ACCEPTED,
//   a leading '^' inverts it), int (ACCEPTED is "min..max"), bool (0|1|true|false|yes|no|on|off),
//   string (free text). DEFAULT "" means unset.
#define SYMMEM_ENV_SETTINGS(X)                                                                     \
  X(debug, "SYMMEM_DEBUG", "enum", "WARN", "WARN|INFO|TRACE", "Log level.")                        \
  X(debug_subsys, "SYMMEM_DEBUG_SUBSYS", "list", "ALL",                                            \
    "INIT|ENV|STORE|IPC|ALLOC|COLL|P2P|GPU|PLUGIN|ALL",                                            \
    "Subsystems to log, comma-separated; a leading ^ logs all but those.")                         \
  X(debug_file, "SYMMEM_DEBUG_FILE", "string", "", "",                                             \
    "Write the log to this file instead of stderr; %h expands to the host name, %p to the pid.")   \
  X(backend, "SYMMEM_BACKEND", "enum", "auto", "auto|host|cuda|nvshmem|nccl",                      \
    "Backend for allocations; auto picks host for CPU buffers, cuda/nvshmem/nccl for GPU ones.")   \
  X(algo, "SYMMEM_ALGO", "enum", "auto", "auto|one_shot|two_shot",                                 \
    "Forces the all-reduce algorithm; auto picks by message size and world size.")                 \
  X(timeout_ms, "SYMMEM_TIMEOUT_MS", "int", "300000", "1..86400000",                               \
    "Deadline in milliseconds of every blocking wait (store, rendezvous, barrier, signal).")       \
  X(wait_report_s, "SYMMEM_WAIT_REPORT_S", "int", "5", "0..86400",                                 \
    "Seconds between the WARN lines of a wait on other ranks (who is missing, time left); 0: "     \
    "none.")                                                                                       \
  X(signal_pad_bytes, "SYMMEM_SIGNAL_PAD_BYTES", "int", "8192", "64..1073741824",                  \
    "Bytes of the signal pad of each rank in each allocation (4-byte slots).")                     \
  X(plugin_path, "SYMMEM_PLUGIN_PATH", "string", "", "",                                           \
    "Colon-separated directories searched for backend plugins before the library's own.")          \
  X(rank, "SYMMEM_RANK", "int", "", "0..1048575",                                                  \
    "This process's rank (overrides launcher variables).")                                         \
  X(world_size, "SYMMEM_WORLD_SIZE", "int", "", "1..1048576", "Number of ranks in the job.")       \
  X(local_rank, "SYMMEM_LOCAL_RANK", "int", "", "0..1048575",                                      \
    "This process's rank among those on its host.")                                                \
  X(local_world_size, "SYMMEM_LOCAL_WORLD_SIZE", "int", "", "1..1048576",                          \
    "Number of ranks on this host.")                                                               \
  X(store, "SYMMEM_STORE", "string", "", "",                                                       \
    "Rendezvous store: tcp://host:port or file:///path (overrides MASTER_ADDR/MASTER_PORT).")      \
  X(store_token, "SYMMEM_STORE_TOKEN", "string", "", "",                                           \
    "Shared secret a TCP store client must present first; symmem-run sets a random one.")          \
  X(store_bind, "SYMMEM_STORE_BIND", "string", "", "",                                             \
    "Address the store hosted by rank 0 binds to; default loopback, or MASTER_ADDR if not local.") \
  X(abort_on_peer_failure, "SYMMEM_ABORT_ON_PEER_FAILURE", "bool", "1", "",                        \
    "A rank whose peer's process exits stops that group's GPU waits (PeerFailure within ~50 ms) "  \
    "instead of waiting for the deadline.")                                                        \
  X(restart_count, "SYMMEM_RESTART_COUNT", "int", "0", "0..1000000",                               \
    "Set by symmem-run --restart-failed: how often this rank was started again after a failure; "  \
    "> 0 means call Group::rejoin() instead of from_env().")                                       \
  X(host_id, "SYMMEM_HOST_ID", "string", "", "",                                                   \
    "Overrides the host identity used to decide which ranks share a host.")                        \
  X(socket_dir, "SYMMEM_SOCKET_DIR", "string", "", "",                                             \
    "If set, IPC sockets live in a private (0700) directory created under it; unset: the "         \
    "abstract socket namespace (nothing on disk).")                                                \
  X(nccl_library, "SYMMEM_NCCL_LIBRARY", "string", "", "",                                         \
    "libnccl.so.2 for the nccl backend (default: one already loaded, the nvidia-nccl wheel from "  \
    "Python, the build's).")                                                                       \
  X(allow_shared_gpu, "SYMMEM_ALLOW_SHARED_GPU", "bool", "0", "",                                  \
    "Allow several ranks on one GPU (cuda backend); needs MPS for concurrent kernels.")            \
  X(gpu_blocks_per_sm, "SYMMEM_GPU_BLOCKS_PER_SM", "int", "", "1..2",                              \
    "Tuning: 512-thread blocks per SM share of every GPU collective, above the tuning file's "     \
    "two-shot entries (default: tuning.hpp, NOTE [two-shot blocks]).")                             \
  X(gpu_ll_max_bytes, "SYMMEM_GPU_LL_MAX_BYTES", "int", "", "0..67108864",                         \
    "Tuning: largest piece the GPU collectives send LL under algo auto (default: tuning.hpp).")    \
  X(moe_direct, "SYMMEM_MOE_DIRECT", "bool", "1", "",                                              \
    "Low-latency MoE dispatch and combine routed on the device store their rows straight into "    \
    "the peers' buffers (cuda backend); 0 on any rank: through all_to_all_v (docs/moe.md).")       \
  X(moe_pdl, "SYMMEM_MOE_PDL", "bool", "1", "",                                                    \
    "Direct low-latency MoE dispatch and combine launch the kernels after their put with "         \
    "programmatic dependent launch (sm_90), so each starts as the one before ends; 0: plain "      \
    "launches (docs/moe.md).")                                                                     \
  X(trace_buffer, "SYMMEM_TRACE_BUFFER", "int", "2000", "0..1000000",                              \
    "Ops each group's flight recorder keeps (a ring of the most recent); 0: record nothing.")      \
  X(trace_device_times, "SYMMEM_TRACE_DEVICE_TIMES", "bool", "1", "",                              \
    "GPU ops' kernels write their start and end times for the flight recorder; 0: they write "     \
    "nothing, GPU ops stay 'enqueued' in dumps and get no metrics lines.")                         \
  X(trace_dir, "SYMMEM_TRACE_DIR", "string", "", "",                                               \
    "If set, each rank writes its flight recorder to DIR/rank<R>.json on a Timeout or "            \
    "PeerFailure, on Group::abort(), on SIGUSR1 and at exit (docs/debugging.md).")                 \
  X(trace_file, "SYMMEM_TRACE_FILE", "string", "", "",                                             \
    "If set, every completed op appends one JSON line (op, bytes, algo, us, algbw, busbw) to "     \
    "this file; GPU ops with device times when their kernel's end arrives (docs/debugging.md).")   \
  X(tuning_file, "SYMMEM_TUNING_FILE", "string", "", "",                                           \
    "The tuning file of symmem-tune that auto algorithms read (default: "                          \
    "$XDG_CACHE_HOME/symmem/tuning.json, else ~/.cache/symmem/tuning.json, when present).")

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
// Changes each time reset_cache_for_testing() runs: the typed accessors below keep their value
// per thread and read it again when this moves.
SYMMEM_API uint64_t cache_generation() noexcept;

// ---- generated from SYMMEM_ENV_SETTINGS ----------------------------------------------------
// The defaults, at compile time: env::defaults::timeout_ms.text is "300000" and
// env::defaults::timeout_ms.as_int() is 300000. Code that needs a default (the device-side
// kDefaultTimeoutNs, say) derives it from here, so each default is written once, in the table.
struct Default {
  const char* text;
  constexpr bool empty() const { return text[0] == '\0'; }
  // The decimal value of an int setting's default (0 when empty).
  constexpr int64_t as_int() const {
    const char* p = text;
    const bool negative = *p == '-';
    if (negative) ++p;
    int64_t v = 0;
    for (; *p >= '0' && *p <= '9'; ++p) v = v * 10 + (*p - '0');
    return negative ? -v : v;
  }
};
namespace defaults {
#define SYMMEM_ENV_DEFAULT(ID, NAME, TYPE, DEFAULT, ACCEPTED, MEANING) \
  inline constexpr Default ID{DEFAULT};
SYMMEM_ENV_SETTINGS(SYMMEM_ENV_DEFAULT)
#undef SYMMEM_ENV_DEFAULT
}  // namespace defaults

// Typed accessors, one per setting: env::timeout_ms() is get_int("SYMMEM_TIMEOUT_MS") with its
// default applied, as an int64_t. The return type follows TYPE: enum/string -> std::string,
// list -> std::vector<std::string>, bool -> bool, int with a default -> int64_t, int without
// one -> std::optional<int64_t> (nullopt: unset).
namespace typed {
constexpr bool same(const char* a, const char* b) {
  while (*a != '\0' && *a == *b) {
    ++a;
    ++b;
  }
  return *a == *b;
}
enum class Kind { text, list, boolean, int_with_default, optional_int };
constexpr Kind kind_of(const char* type, const char* default_value) {
  if (same(type, "list")) return Kind::list;
  if (same(type, "bool")) return Kind::boolean;
  if (same(type, "int")) {
    return default_value[0] != '\0' ? Kind::int_with_default : Kind::optional_int;
  }
  return Kind::text;  // enum, string
}
template <Kind K>
struct Read;
template <>
struct Read<Kind::text> {
  static std::string get(std::string_view name) { return get_string(name); }
};
template <>
struct Read<Kind::list> {
  static std::vector<std::string> get(std::string_view name) { return get_list(name); }
};
template <>
struct Read<Kind::boolean> {
  static bool get(std::string_view name) { return get_bool(name); }
};
template <>
struct Read<Kind::int_with_default> {
  static int64_t get(std::string_view name) { return *get_int(name); }  // the default applies
};
template <>
struct Read<Kind::optional_int> {
  static std::optional<int64_t> get(std::string_view name) { return get_int(name); }
};
// One setting's value in one thread: the ops read some settings on every call, and this keeps
// that to a compare (no lock, no map). A read that throws (a bad value) is not kept.
template <class T>
struct Cached {
  uint64_t stamp = 0;  // cache_generation() + 1 when `value` is current
  T value{};
  template <class Read>
  T get(Read read) {
    const uint64_t want = cache_generation() + 1;
    if (stamp != want) {
      value = read();
      stamp = want;
    }
    return value;
  }
};
}  // namespace typed

#define SYMMEM_ENV_ACCESSOR(ID, NAME, TYPE, DEFAULT, ACCEPTED, MEANING) \
  inline auto ID() {                                                    \
    using Read_ = typed::Read<typed::kind_of(TYPE, DEFAULT)>;           \
    thread_local typed::Cached<decltype(Read_::get(NAME))> cached_;     \
    return cached_.get([] { return Read_::get(NAME); });                \
  }
SYMMEM_ENV_SETTINGS(SYMMEM_ENV_ACCESSOR)
#undef SYMMEM_ENV_ACCESSOR

// SYMMEM_TIMEOUT_MS as a duration: the default of every timeout argument (NOTE [timeouts] in
// symmem/store.hpp).
inline std::chrono::milliseconds timeout() {
  return std::chrono::milliseconds(timeout_ms());
}

}  // namespace symmem::env
