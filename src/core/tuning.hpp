#pragma once

// NOTE [tuning file]
// The crossovers that Algo::automatic uses (host: the largest all_reduce that goes one_shot,
// key "all_reduce.one_shot_max_bytes"; cuda: the largest piece that goes LL, key
// "ll_max_bytes") have built-in tables, one per backend, in one place each
// (src/host/host_ops.cpp one_shot_max_bytes, src/cuda/kernels/tuning.hpp). So do the other
// keys: host "wait.spin_us" (core/pad_sync.hpp), "all_reduce.piece_bytes" and
// "broadcast.chunk_bytes" (NOTE [host chunk sizes]), cuda "two_shot.blocks_per_sm" and
// "two_shot.blocks_min_bytes" (NOTE [two-shot blocks]). symmem-tune measures them on a machine
// and writes a JSON tuning file:
//
//   {"format": "symmem-tuning", "version": 1, "entries": [
//     {"backend": "host", "signature": "cpu=...;cores=2", "key": "all_reduce.one_shot_max_bytes",
//      "world": 2, "value": 1048576, "measured": "2026-12-04T23:30:00Z"}, ...]}
//
// At the first lookup a process reads SYMMEM_TUNING_FILE, else $XDG_CACHE_HOME/symmem/
// tuning.json (~/.cache/symmem/tuning.json), once. An entry decides when its backend, key and
// world size match and its signature is this machine's (what makes the measurement valid here:
// host_signature() for host, the cuda plugin's Backend::extension "tuning_signature" for cuda).
// Otherwise the built-in table does. The log (INFO, ENV) says which file and entry decided, once
// per backend, key and world size. A file that does not parse is a WARN and is ignored: tuning
// never fails an op.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "symmem/export.hpp"

namespace symmem::tuning {

// This machine's signature for the host backend: "cpu=<model>;cores=<online CPUs>".
SYMMEM_API std::string host_signature();

// The tuned value of `key` for `backend` and `world` ranks on a machine of `signature`, or
// nullopt (use the built-in table). Thread-safe; reads the file once per process.
SYMMEM_API std::optional<int64_t> lookup(std::string_view backend, std::string_view key, int world,
                                         std::string_view signature);

// The file lookup() reads (empty when none is set and the cache file does not exist).
SYMMEM_API std::string file_path();

// Where symmem-tune writes by default: SYMMEM_TUNING_FILE, else the cache file's path (which
// may not exist yet); empty when neither a setting nor a home directory is known.
SYMMEM_API std::string write_path();

// For symmem-tune: a value that lookup() returns for this process (before the file and without
// logging) while it measures one; nullopt removes it. Each change moves generation() on.
SYMMEM_API void set_override(std::string_view backend, std::string_view key, int world,
                             std::optional<int64_t> value);

// Moves on whenever lookup()'s answers may have changed (an override, reset_for_testing), so a
// hot path can keep a looked-up value until it does.
SYMMEM_API uint64_t generation();

// A host entry for `world` ranks on this machine (host_signature()) when it lies in [lo, hi],
// else `builtin`, kept by the caller (one thread_local HostEntry per key) until the world size or
// generation() moves: lookup() takes a lock, and symmem-tune moves the generation with each
// override it measures. Used on the ops' paths (host_ops.cpp, pad_sync.hpp).
struct HostEntry {
  const char* key;
  int64_t lo, hi;
  uint64_t gen = ~uint64_t{0};
  int world = -1;
  int64_t value = 0;
};
SYMMEM_API int64_t host_value(HostEntry& e, int world, int64_t builtin);

// For tests: forget the file read so far (the next lookup reads it again) and every override.
SYMMEM_API void reset_for_testing();

}  // namespace symmem::tuning
