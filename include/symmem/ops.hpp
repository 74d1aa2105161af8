#pragma once

// Collectives and point-to-point ops. One backend-agnostic name per op; the backend of the
// buffers serves it (host: CPU memory, cuda/nccl/nvshmem: device memory, enqueued on
// OpOptions::stream and CUDA-graph capturable).
//
// Buffers: the pointer forms (NCCL-like) accept ordinary memory or memory inside a symmetric
// allocation of `group` (then no copy is made); copying ordinary memory into the group's
// symmetric workspace is the op's job. recv == send means in place where the op allows it.
// Counts are in elements of `dtype`.
//
// Every argument is checked before any rank touches shared memory: a bad one is an
// InvalidArgument error naming the argument and the rank. An op the backend lacks is
// Unsupported and names the backends that have it. Results are bitwise identical on every
// rank (fixed reduction order, independent of rank). f16/bf16 accumulate in f32.
// Which device: OpOptions::device if set; else the device of a symmetric allocation holding
// `send` or `recv`; else the device of the group's most recent allocation (workspaces aside;
// so a raw cudaMalloc pointer needs no device once the group has GPU memory); else the CPU.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "symmem/error.hpp"
#include "symmem/export.hpp"
#include "symmem/group.hpp"
#include "symmem/memory.hpp"
#include "symmem/op_table.hpp"
#include "symmem/types.hpp"

namespace symmem {

struct OpOptions {
  Stream stream = nullptr;
  Algo algo = Algo::automatic;      // all_reduce only; SYMMEM_ALGO overrides `automatic`
  Millis timeout{kDefaultTimeout};  // NOTE [timeouts] in store.hpp: < 0 SYMMEM_TIMEOUT_MS,
                                    // 0 InvalidArgument (an op needs its peers)
  std::optional<Device> device;     // see above
  Algo* chosen_algo = nullptr;      // if set, receives the algorithm that ran (all_reduce:
                                    // what `automatic` chose on this backend)
};

// ---- all-reduce --------------------------------------------------------------------------
// In place on a symmetric buffer (zero copy): the first `count` elements of `buf`.
SYMMEM_API void all_reduce(const SymmetricMemory& buf, size_t count, DType dtype, ReduceOp op,
                           const OpOptions& options = {});
SYMMEM_API void all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                           const Group& group, const OpOptions& options = {});

// ---- reduce-scatter: send holds world_size * recv_count elements; rank r gets block r ------
SYMMEM_API void reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype,
                               ReduceOp op, const Group& group, const OpOptions& options = {});

// ---- all-gather: recv holds world_size * send_count elements, rank r's block at r ----------
SYMMEM_API void all_gather(const void* send, void* recv, size_t send_count, DType dtype,
                           const Group& group, const OpOptions& options = {});

// ---- all-to-all: block p of send (count elements) goes to peer p, lands at block r there ---
SYMMEM_API void all_to_all(const void* send, void* recv, size_t count, DType dtype,
                           const Group& group, const OpOptions& options = {});

// ---- all-to-all-v ----------------------------------------------------------------------------
// send_counts[p]: elements this rank sends to peer p, packed in `send` in peer order.
// Counts and offsets live in the op's device memory (device memory for GPU backends).
// MoE style (recv_counts_known = false): recv_counts[p] and recv_offsets[p] are outputs; data
// from p is packed in `recv` in peer order; more than recv_capacity elements is InvalidArgument.
// MPI style (recv_counts_known = true): recv_counts is an input checked against the senders'
// send_counts; a disagreement is InvalidArgument naming both ranks.
struct AllToAllVOptions : OpOptions {
  bool recv_counts_known = false;
};
SYMMEM_API void all_to_all_v(const void* send, const int64_t* send_counts, void* recv,
                             int64_t* recv_counts, int64_t* recv_offsets, size_t recv_capacity,
                             DType dtype, const Group& group, const AllToAllVOptions& options = {});

// ---- broadcast: root's send -> every rank's recv (send is read on root only) ----------------
SYMMEM_API void broadcast(const void* send, void* recv, size_t count, DType dtype, int root,
                          const Group& group, const OpOptions& options = {});

// ---- one-sided -------------------------------------------------------------------------------
// put: copies `bytes` from local `src` into peer's buffer `dst` at dst_offset. With signal, the
// peer's slot (channel, this rank) is raised after the data is visible; the peer consumes it
// with dst.wait_signal(this rank, channel). get: the reverse (reads peer's buffer).
struct P2POptions : OpOptions {
  bool signal = false;
  int channel = 0;
};
SYMMEM_API void put(const SymmetricMemory& dst, size_t dst_offset, const void* src, size_t bytes,
                    int peer, const P2POptions& options = {});
SYMMEM_API void get(const SymmetricMemory& src, size_t src_offset, void* dst, size_t bytes,
                    int peer, const P2POptions& options = {});

// ---- barrier over the group's workspace signal pad ------------------------------------------
SYMMEM_API void barrier(const Group& group, const OpOptions& options = {});

// ---- refusing an op before calling it ----------------------------------------------------------
// For layers over these ops that check arguments of their own (bindings, wrappers): when such a
// check fails on some ranks only, the others are already in the op and wait for them. Call
// refuse() with the error instead of skipping the op: the group's other ranks then fail that
// op with InvalidArgument naming this rank (CPU groups: at the call; GPU groups: at the next
// synchronising call or Group::check_async_error(), NOTE [refused ops]) instead of waiting
// until their timeout. `options`: the op's stream, device and timeout. `count` and `dtype`: the
// op's count argument and dtype as the peers pass them, where this rank knows them (its own
// arrays say); a GPU group's refusal needs them to know whether the peers' op fits the group's
// workspace, and without a count it takes that it does. A count of 0 on a GPU group refuses
// nothing (the peers launch nothing). Never throws; put/get and one-rank groups need nothing and
// get nothing.
SYMMEM_API void refuse(OpKind kind, const Group& group, const OpOptions& options, ErrorCode code,
                       const std::string& message, std::optional<size_t> count = std::nullopt,
                       DType dtype = DType::f32) noexcept;

}  // namespace symmem
