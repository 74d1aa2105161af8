#pragma once

// The host backend's collectives. HostBackend::run() (src/host/host_backend.cpp) delegates every
// op to host_run_op(); the implementation lives in src/host/host_ops*.cpp.
//
// Contract: `args` has been validated by the core (src/core/ops.cpp): sizes, dtype, ranks,
// buffer ownership. args.device is the CPU. Synchronisation between ranks goes through the
// signal pads of symmetric allocations (SymmetricMemory::barrier/put_signal/wait_signal of
// args.send_sym / args.recv_sym / args.workspace(bytes)), which have deadlines and detect dead
// peers.

#include "symmem/backend.hpp"
#include "symmem/export.hpp"

namespace symmem {

SYMMEM_API void host_run_op(const OpArgs& args);

// Bytes per rank up to which all_reduce with Algo::automatic runs one_shot for `world` ranks
// (symmem-tune's file, else the built-in table).
SYMMEM_API size_t host_one_shot_max_bytes(int world);

// The built-in chunk sizes of NOTE [host chunk sizes] (host_ops.cpp), used without a tuning
// file's "all_reduce.piece_bytes" / "broadcast.chunk_bytes" entry.
inline constexpr size_t kHostPieceBytes = 256 << 10;
inline constexpr size_t kHostBroadcastChunkBytes = 512 << 10;

}  // namespace symmem
