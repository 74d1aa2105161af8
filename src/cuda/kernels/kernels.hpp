#pragma once

// Host-facing interface of the peer-pointer collective kernels (src/cuda/kernels/*.cu).
// Plain C++, no CUDA headers: src/cuda/cuda_ops.cu fills these structs and calls the
// launchers, which enqueue one kernel each on `stream` (graph capturable, no allocation, no
// host synchronisation). The kernels are written on the public device layer
// (include/symmem/device/), through common.cuh.
//
// NOTE [workspace layout]
// Every rank's workspace (the group's symmetric workspace, see OpArgs::workspace) is laid out
// identically, as a function of the world size only:
//   [0, ctrl_bytes)                  control: epoch counter, block-done counter, parked end,
//                                    barrier flags, all_to_all_v count matrix
//   [ll_offset, ll_offset+ll_bytes)  LL packet buffers: 2 parities x world sources x ll_slot
//   [data_offset, ...)               staging for ordinary-memory inputs/outputs
// The control and LL regions are zeroed (then a signal-pad barrier) the first time an
// allocation is used; see cuda_ops.cu.
//
// NOTE [epochs and flags]
// Each workspace carries one 32-bit epoch per rank (ctrl word 0). Every kernel that talks to
// peers through the workspace reads it at start; the last block to finish increments it (block
// done counter, ctrl word 1). All ranks run the same kernels in the same order (collectives are
// called with the same arguments), so the epochs agree without communication, also when a CUDA
// graph replays the kernels.
// - Barrier kernels: block b of rank r signals peer p by storing value (epoch << 2 | phase) at
//   system scope into the low half of p's 64-bit flags[b][r] (the high half: the tag of its
//   descriptor, NOTE [barrier flags] in common.cuh; release where the block wrote something a
//   peer reads), and waits (acquire) until its own flags[b][p] >= that value (wrap-safe). Flags
//   only grow, so nothing is reset and no round-trip is needed to re-arm them. Blocks pair up by
//   index: every rank launches the same grid for the same op.
// - LL kernels: data travels in 16-byte packets {data_lo, flag, data_hi, flag} (8 data bytes,
//   each 4-byte half paired with its flag, written by one 16-byte volatile store); the flag is
//   epoch + 1 and the packet buffer is chosen by epoch parity, so a stale packet never carries
//   the current flag. A rank can only write parity p again after every peer has *started* the
//   kernel in between (it received their packets or passed a barrier with them), and a peer
//   starts that kernel only after it finished reading parity p.
// - Progress: a rank's kernel of epoch e finishes only after every peer has started its kernel
//   of epoch e (barrier kernels pass B1 even when they fail after it; LL kernels receive a
//   packet, or a refusal, from every peer for each unit; a refused op waits for it, NOTE
//   [refused ops] in refuse.cu), unless a wait timed out. So no rank writes the descriptor
//   table or LL buffers of parity p again before every peer is done reading parity p.
// A wait that passes its deadline records the failure in the process timeout record (layout of
// DeviceHandle::timeout_record, written by symmem/device/sync.cuh's write_timeout_record like
// the device API's waits do) and the kernel returns without finishing its work. The recorded
// "channel" is not a signal-pad channel: -1 - b for block b of a barrier kernel, -1000 for an
// LL kernel, kRefuseChannel for a refused op; the recorded peer is the rank that never arrived.
// A timed-out group is out of step: use a new group (or workspace) for further work.

#include <cstddef>
#include <cstdint>

namespace symmem::cuda::kernels {

inline constexpr int kThreads = 512;    // threads per block of every collective kernel
inline constexpr int kMaxBlocks = 256;  // flag rows per rank (blocks of a barrier kernel)
// 16-byte units per thread that the launch of a barrier reduction (two-shot, one-shot, reduce-
// scatter) sizes its grid by: blocks = units / (kThreads x this), capped.
inline constexpr int kReduceUnitsPerThread = 2;
// Peer pointers passed by value up to this world size; beyond it a device table. Kept small:
// the kernel parameters (LLArgs 288 bytes, ReduceArgs 368) are part of every launch's cost.
inline constexpr int kMaxInlinePeers = 8;
inline constexpr size_t kCtrlFlagsOffset = 256;
// Control words: [0] epoch, [1] block-done counter; bytes [16, 32): the parked end of the flight
// recorder (NOTE [device timestamps] in src/core/trace.hpp; common.cuh's trace_start).
inline constexpr size_t kCtrlParkedEndOffset = 16;
inline constexpr size_t kLLTotalDataBytes = 2u << 20;  // LL capacity, split among the sources

// Element types and reductions the kernels know (values match symmem::DType/ReduceOp; the
// dtypes whose SYMMEM_DTYPES row has gpu = 1).
enum class KType : int {
  f32 = 0,
  f64 = 1,
  f16 = 2,
  bf16 = 3,
  i32 = 4,
  i64 = 5,
  f8e4m3 = 6,
  f8e5m2 = 7
};
enum class KRed : int { sum = 0, avg = 1, min = 2, max = 3 };

// int64 entries of a rank's row of the all_to_all_v count matrix: world send counts, the
// capacity, world expected receive counts (NOTE [all_to_all_v]).
constexpr int64_t a2av_row_length(int world) {
  return 2 * static_cast<int64_t>(world) + 1;
}

// Control-region and workspace offsets for a world size (NOTE [workspace layout]).
struct WsLayout {
  size_t flags_offset = 0;   // uint64 [kMaxBlocks][world]: barrier flags {value, tag}
  size_t desc_offset = 0;    // int64 [2][world][4]: descriptors, by epoch parity (barrier_agree)
  size_t matrix_offset = 0;  // int64 [world][a2av_row_length(world)]: row r = rank r's send
                             // counts, capacity, expected receive counts (NOTE [all_to_all_v])
  size_t ctrl_bytes = 0;
  size_t ll_offset = 0;
  size_t ll_slot_bytes = 0;  // packet bytes per (parity, source): 2x its data capacity
  size_t ll_bytes = 0;
  size_t data_offset = 0;
  size_t ll_capacity() const { return ll_slot_bytes / 2; }  // data bytes per source
};
WsLayout ws_layout(int world);

// Peers' addresses: by value up to kMaxInlinePeers, else a device table plus a byte delta.
struct PeerPtrs {
  char* inl[kMaxInlinePeers] = {};
  char* const* table = nullptr;
  int64_t delta = 0;
};

struct SyncArgs {
  PeerPtrs ctrl;  // every rank's workspace base (its control region)
  int rank = 0;
  int world = 1;
  uint64_t timeout_ns = 0;  // resolved by the host (cuda::timeout_to_ns), never 0 at a launch
  int32_t* timeout_record = nullptr;    // DeviceHandle::timeout_record layout, may be null
  int32_t* error_record = nullptr;      // op error record (below), host-mapped, may be null
  const int32_t* abort_word = nullptr;  // the group's (NOTE [device abort]), may be null
  // This rank's orphan stop flag in the workspace (NOTE [orphan stop flags] in
  // symmem/device/sync.cuh), may be null.
  const int32_t* orphan_flag = nullptr;
  int32_t abort_slot = -1;
  int32_t op_kind = -1;  // this op's symmem::OpKind, for the op error record (peer_refused)
  // Zero-copy descriptor {send alloc id, send offset, recv alloc id, recv offset} (-1: staged).
  // Barrier kernels publish it before B1 and check after B1 that every rank passed the same
  // (GPU ops have no host-side agreement), NOTE [zero-copy agreement] in cuda_ops.cu. A refused
  // op publishes {kDescRefused, its ErrorCode, -1, -1} (NOTE [refused ops] in refuse.cu).
  int64_t desc[4] = {-1, -1, -1, -1};
  // Of the descriptor table int64 [2][world][4] in the control region: the half of the epoch's
  // parity, so the slot of epoch e is rewritten at e + 2 (NOTE [epochs and flags], Progress).
  uint32_t desc_offset = 0;
  // The flight recorder's DeviceTimes slot (symmem/backend.hpp) as a device address, or null:
  // [0] start, [1] end (%globaltimer ns), [3] set to 2 when a wait timed out (NOTE [device
  // timestamps] in src/core/trace.hpp).
  uint64_t* times = nullptr;
};

// LL one-shot family: all_reduce, reduce_scatter (reduce = true), all_gather, all_to_all.
// Piece p of `send` (send + p * send_stride bytes, count elements) goes to rank p; rank p
// reduces the pieces it receives in rank order into recv (reduce) or stores the piece from
// rank q at recv + q * recv_stride (gather).
struct LLArgs {
  SyncArgs sync;
  PeerPtrs ll;  // every rank's LL region
  size_t slot_bytes = 0;
  const char* send = nullptr;
  char* recv = nullptr;
  int64_t count = 0;        // elements per piece
  int64_t send_stride = 0;  // bytes; 0 = the same piece for everyone
  int64_t recv_stride = 0;  // bytes (gather)
  bool reduce = true;
  KRed red = KRed::sum;
};

// Barrier-based reductions (NOTE [reduce kernels] in reduce.cu).
enum class ReduceMode : int { two_shot = 0, one_shot = 1, reduce_scatter = 2 };
struct ReduceArgs {
  SyncArgs sync;
  ReduceMode mode = ReduceMode::two_shot;
  KRed red = KRed::sum;
  PeerPtrs in;                    // every rank's input (16-byte aligned)
  PeerPtrs out;                   // two_shot: where reduced shards are pushed (16-byte aligned)
  const char* copy_in = nullptr;  // ordinary input copied into in[rank] first (nullptr: none)
  int64_t count = 0;              // all_reduce: elements; reduce_scatter: elements per rank
  int64_t in_stride = 0;          // reduce_scatter: bytes between rank blocks of `in` (16-aligned)
  char* direct_out = nullptr;     // one_shot / reduce_scatter: local result (any alignment)
  const char* copy_out_src = nullptr;  // after the last barrier: copy this ...
  char* copy_out_dst = nullptr;        // ... to here (nullptr: none)
};

// Barrier-based data movement (NOTE [move kernels] in move.cu).
enum class MoveMode : int { all_gather = 0, all_to_all = 1, broadcast = 2, barrier = 3 };
struct MoveArgs {
  SyncArgs sync;
  MoveMode mode = MoveMode::barrier;
  PeerPtrs src;                    // all_gather/broadcast: every rank's readable piece
  PeerPtrs dst;                    // all_to_all: every rank's receive area
  const char* copy_in = nullptr;   // all_gather/broadcast(root): local piece -> src[rank]
  const char* local_in = nullptr;  // all_to_all: send; all_gather/broadcast: the local piece
  char* local_out = nullptr;       // recv
  int64_t bytes = 0;               // bytes per piece
  int root = 0;
  const char* copy_out_src = nullptr;  // all_to_all: own receive area copied to local_out after
                                       // the last barrier (nullptr: dst is already recv)
};

// all_to_all_v (NOTE [all_to_all_v] in alltoallv.cu).
struct AllToAllVArgs {
  SyncArgs sync;
  int64_t* matrix_local = nullptr;  // this rank's count matrix (control region)
  PeerPtrs matrix;                  // every rank's count matrix
  PeerPtrs dst;                     // every rank's receive area (recv_sym or workspace data)
  const char* send = nullptr;
  const int64_t* send_counts = nullptr;  // device, [world]
  int64_t* recv_counts = nullptr;        // device, [world]: output, or input when known
  int64_t* recv_offsets = nullptr;       // device, [world]: output (may be null)
  char* recv = nullptr;
  const char* copy_out_src = nullptr;  // own workspace receive area (nullptr: dst is recv)
  int64_t capacity = 0;                // elements
  int elem_size = 1;
  bool counts_known = false;
};

// A refused op (NOTE [refused ops] in refuse.cu): the refusing rank's stand-in for the kernel
// its peers run.
inline constexpr int64_t kDescRefused = -2;   // desc[0] of a refusal (-1: staged, >= 0: alloc id)
inline constexpr int kRefuseChannel = -2000;  // the timeout record's channel of a refused op
struct RefuseArgs {
  SyncArgs sync;  // desc = {kDescRefused, code, -1, -1}
  PeerPtrs ll;    // every rank's LL region
  size_t slot_bytes = 0;
  int code = 0;  // the refusing rank's symmem::ErrorCode
};

// Plain copy (put/get, world size 1): `bytes` from src to dst, any alignment.
struct CopyArgs {
  char* dst = nullptr;
  const char* src = nullptr;
  int64_t bytes = 0;
};

// Layout of the op error record (int32 x 8, host-mapped, 16-byte aligned; written as a device
// record of two vectors, NOTE [device records] in symmem/device/sync.cuh): [0] flag (0 none,
// 1 set), [1] code, [2] rank, [3] peer, [4..5] value a (int64, lo/hi), [6..7] value b.
// [2] is the rank at fault (every rank records the same error, NOTE [all_to_all_v]).
enum class OpErrorCode : int {
  none = 0,
  capacity = 1,            // [2] receives a elements, b: its capacity
  count_mismatch = 2,      // [3] sends a elements to [2], which expected b
  negative_count = 3,      // [2]'s send count to [3] is a
  zero_copy_mismatch = 4,  // peer in [3]; a: peer's (alloc id << 32 | which), b: its offset
  peer_refused = 5,        // [2] refused the op (NOTE [refused ops]); a: this rank's OpKind,
                           // b: the refusing rank's ErrorCode; nothing moved
};
inline constexpr int kOpErrorRecordInts = 8;

// Launchers: each enqueues one kernel on `stream` (a cudaStream_t) and returns the
// cudaError_t of the launch as an int (0 = success). `blocks` must be in [1, kMaxBlocks] and
// the same on every rank for the barrier-based kernels.
int launch_ll(const LLArgs& a, KType type, int blocks, void* stream);
int launch_reduce(const ReduceArgs& a, KType type, int blocks, void* stream);
int launch_move(const MoveArgs& a, int blocks, void* stream);
int launch_all_to_all_v(const AllToAllVArgs& a, int blocks, void* stream);
int launch_copy(const CopyArgs& a, int blocks, void* stream);
int launch_refuse(const RefuseArgs& a, int blocks, void* stream);
// One thread writes %globaltimer to `out` (device address of mapped host memory): the clock
// calibration of NOTE [device timestamps].
int launch_read_globaltimer(uint64_t* out, void* stream);

}  // namespace symmem::cuda::kernels
