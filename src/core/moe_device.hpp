#pragma once

// What MoE dispatch/combine (src/core/moe.cpp) needs of a GPU, as a table of plain function
// pointers that the cuda plugin returns from Backend::extension(kMoeDeviceExtension)
// (src/cuda/cuda_moe.cpp; kernels in src/cuda/kernels/moe.cu). The core reaches the kernels
// through it without linking CUDA (DESIGN.md, "Plugins"). Plain C++: no CUDA headers.
//
// Every function that takes a stream enqueues on it (a cudaStream_t; null: the legacy stream)
// and neither allocates nor synchronises, so it may be captured in a CUDA graph. Errors are
// symmem::Error (ErrorCode::Cuda) naming `op` and `rank`.

#include <cstddef>
#include <cstdint>

#include "symmem/device_handle.hpp"

namespace symmem::detail {

inline constexpr const char* kMoeDeviceExtension = "moe_device_v1";
inline constexpr int kMoeDeviceApiVersion = 3;

// One part of a row copied by moe gather: `bytes` from src + index * src_stride to
// dst + i * dst_stride. Any alignment (the kernel picks the widest access all of them allow).
struct MoeSegment {
  const char* src = nullptr;
  int64_t src_stride = 0;
  char* dst = nullptr;
  int64_t dst_stride = 0;
  int64_t bytes = 0;
};

// dst row i <- src row index[i] for i in [0, rows), index < 0: row i is left alone. Both
// segments move (a token's row and its fp8 scales; segments = 1 or 2). Block 0 also writes
// count_out[p] = count_in[p] * count_scale for p < count_n (the byte counts of the
// all_to_all_v that follows, from per-layout row counts; count_n = 0: none).
// dst_index, when set, names the destination row of row i instead of i.
// With src_rank set (a pull from symmetric memory, NOTE [moe pull dispatch] in
// src/core/moe.cpp), row i is read from rank src_rank[i]'s buffer: segment s's source base is
// peer_src[s][src_rank[i]] (a device table of every rank's address of the same symmetric view)
// instead of seg[s].src, which still stands for the alignment (every rank's view is at the same
// offset of its allocation).
struct MoeGatherArgs {
  int64_t rows = 0;
  const int32_t* index = nullptr;  // device, [rows]
  MoeSegment seg[2];
  int segments = 1;
  const int64_t* count_in = nullptr;
  int64_t* count_out = nullptr;
  int count_n = 0;
  int64_t count_scale = 0;
  const int32_t* src_rank = nullptr;              // device, [rows]; null: seg[s].src
  void* const* peer_src[2] = {nullptr, nullptr};  // device tables, [world] each
  const int32_t* dst_index =
      nullptr;  // device, [rows]: row i goes to dst row dst_index[i]; null: i
};

// out[t] = sum over j in [0, topk) ascending with slot_row[t * topk + j] >= 0 of
// weights[t * topk + j] * rows[slot_row[...]], each product and each sum rounded to f32 (no
// fused multiply-add), starting from +0.0f, then rounded once to dtype (symmem/moe.hpp).
// dtype is a DType value: f32, f16 or bf16. Rows have `hidden` elements, `row_stride` bytes
// apart; out rows are dense.
struct MoeCombineArgs {
  int64_t tokens = 0;
  int topk = 0;
  int64_t hidden = 0;
  int dtype = 0;
  const int32_t* slot_row = nullptr;  // device, [tokens, topk]
  const float* weights = nullptr;     // device, [tokens, topk]
  const char* rows = nullptr;
  int64_t row_stride = 0;
  char* out = nullptr;
  // Non-null: the rows start rows_half * (*rows_parity) bytes past `rows` (a direct combine's
  // area, NOTE [moe direct dispatch] in src/core/moe.cpp).
  const int32_t* rows_parity = nullptr;
  int64_t rows_half = 0;
  // Non-null: a pull combine (NOTE [moe pull dispatch] in src/core/moe.cpp): slot (t, j)'s row
  // is row slot_row[t * topk + j] of rank src_rank[t * topk + j]'s y, whose address is
  // peer_rows[rank] (a device table, [world]); `rows` still stands for the alignment.
  const int32_t* src_rank = nullptr;
  void* const* peer_rows = nullptr;
};

// A layout routed on the device (MoeOptions::device_layout; NOTE [moe device layout] in
// src/core/moe.cpp): every pointer is device memory of the layout, sized at moe_layout().
// Pieces of the dispatch exchange, per destination r: a count block (cb bytes: int32 {tokens
// this rank sends to r, then per local expert of r how many (token, slot) entries of this rank
// go to it, then how many of its entries go to ranks before r}), then one pack per token (pack
// bytes: header int32 {token, k expert ids or -1, k indices within the expert}, padded to `header`
// bytes, then the row and the fp8 scales). Counts of the all_to_all_v are in 4-byte units. A direct
// dispatch (NOTE [moe direct dispatch] in src/core/moe.cpp) stores the pieces into the peers'
// receive areas itself: `peers` is the handle of the group's "moe_ll" scratch, whose part on each
// rank holds two areas (by the parity of the dispatch) of `world` pieces of `piece` bytes, source
// s's piece at s * piece.
struct MoeDeviceLayoutArgs {
  // The layout.
  const void* topk = nullptr;  // [tokens, k], int32 (idx64 = false) or int64
  bool idx64 = true;
  int64_t tokens = 0, max_tokens = 0;
  int k = 0, experts = 0, world = 0, rank = 0, local = 0;
  // Dispatch data.
  const char* x = nullptr;
  const char* x_scales = nullptr;
  char* recv_x = nullptr;
  char* recv_scales = nullptr;
  int64_t row_bytes = 0, scale_bytes = 0, header = 0, pack = 0, cb = 0;
  char* send = nullptr;  // this rank's send pack
  char* recv = nullptr;  // this rank's receive pack (direct: its "moe_ll" scratch)
  // Direct dispatch (peers.buffers null: through all_to_all_v).
  DeviceHandle peers;
  int64_t piece = 0, half = 0;  // bytes of a source's piece, of one parity's area (world pieces)
  // Direct combine: the "moe_ll_back" scratch, two areas of back_half bytes (by parity), each
  // the rows this rank gets back in combine's order (slot_row).
  DeviceHandle back_peers;
  int64_t back_half = 0;
  // Combine data.
  const char* y = nullptr;
  int64_t y_row_bytes = 0, stride = 0;
  // Device arrays of the layout (written by the kernels; see moe.cpp's DeviceLayout).
  int32_t* dest_pos = nullptr;       // [tokens, world]: the token's place in piece r, or -1
  int32_t* slot_idx = nullptr;       // [tokens, k]: its index among this rank's entries of expert
  int32_t* slot_row = nullptr;       // [tokens, k]: its row in what combine brings back, or -1
  int32_t* hist = nullptr;           // [experts]: this rank's entries per expert
  int64_t* ebase = nullptr;          // [experts]: exclusive prefix of hist
  int64_t* tok_count = nullptr;      // [world]: tokens this rank sends to r
  int64_t* send_units = nullptr;     // [world]: dispatch send counts (units)
  int64_t* send_off = nullptr;       // [world]: where piece r starts in send (units)
  int64_t* recv_units = nullptr;     // [world]: dispatch receive counts (all_to_all_v's output)
  int64_t* recv_off = nullptr;       // [world]: where source s's piece starts in recv (units)
  int64_t* back_rows = nullptr;      // [world]: rows combine brings back from r
  int32_t* cnt = nullptr;            // [local, world]: rows of local expert e from source s
  int32_t* base = nullptr;           // [local, world]: their first row within e's slab
  int32_t* pre = nullptr;            // [world, local]: where (s, e)'s rows start in s's piece
  int64_t* rows_back = nullptr;      // [world]: rows combine sends back to s
  int64_t* off_back = nullptr;       // [world]: where s's piece starts in combine's send (rows)
  int64_t* recv_tokens = nullptr;    // [world]: tokens received from s
  int64_t* expert_counts = nullptr;  // [local]
  int64_t* c_send_units = nullptr;   // [world]: combine send counts (units)
  int64_t* c_recv_units = nullptr;   // [world]: combine receive counts (units)
  int64_t* back_first = nullptr;     // [world]: source s's entries before this rank's experts
  int32_t* parity = nullptr;         // [1]: the area of the latest direct dispatch
  int32_t* done = nullptr;           // [1]: blocks of the put kernel done (0 at rest)
  int32_t* back_parity = nullptr;    // [1]: the area of the latest direct combine
  int32_t* back_done = nullptr;      // [1]: blocks of the combine put kernel done (0 at rest)
};

struct MoeDeviceApi {
  int version = kMoeDeviceApiVersion;
  // The CUDA device whose memory `p` is (device or managed memory), or -1 for host memory
  // (pageable, pinned, or unknown to CUDA).
  int (*device_of)(const void* p) = nullptr;
  // Whether `stream` is being captured into a CUDA graph.
  bool (*capturing)(const char* op, int rank, int device, void* stream) = nullptr;
  // Plain device memory on `device` (cudaMalloc); release never throws.
  void* (*alloc)(const char* op, int rank, int device, size_t bytes) = nullptr;
  void (*release)(int device, void* p) = nullptr;
  // Copies `bytes` on `stream` in any direction (host memory may be pageable). sync: then waits
  // for the stream (the only call here that synchronises; moe_layout reads topk_idx with it).
  void (*copy)(const char* op, int rank, int device, void* dst, const void* src, size_t bytes,
               void* stream, bool sync) = nullptr;
  void (*gather)(const char* op, int rank, int device, const MoeGatherArgs& args,
                 void* stream) = nullptr;
  void (*combine)(const char* op, int rank, int device, const MoeCombineArgs& args,
                  void* stream) = nullptr;
  // A device layout's dispatch before the exchange (route: counts, positions, slot rows; then
  // pack: count blocks and packs; one fused kernel with few entries), after it (place:
  // per-expert counts and bases; then unpack: rows into recv_x), and combine's pack (rows back
  // per source, and both sides' counts).
  void (*layout_route_pack)(const char* op, int rank, int device, const MoeDeviceLayoutArgs& a,
                            void* stream) = nullptr;
  void (*layout_place)(const char* op, int rank, int device, const MoeDeviceLayoutArgs& a,
                       void* stream) = nullptr;
  void (*layout_combine_pack)(const char* op, int rank, int device, const MoeDeviceLayoutArgs& a,
                              void* stream) = nullptr;
  // A direct dispatch (a.peers set): route, then put (count blocks and packs stored into every
  // peer's area, then one signal per peer); wait for every peer's signal, place, then unpack.
  void (*layout_route_put)(const char* op, int rank, int device, const MoeDeviceLayoutArgs& a,
                           void* stream) = nullptr;
  void (*layout_wait_place)(const char* op, int rank, int device, const MoeDeviceLayoutArgs& a,
                            void* stream) = nullptr;
  // A direct combine (a.back_peers set): the rows of y stored into each source's area, one
  // signal per source, then the wait for every rank's signal (combine's sums follow).
  void (*layout_combine_put)(const char* op, int rank, int device, const MoeDeviceLayoutArgs& a,
                             void* stream) = nullptr;
};

}  // namespace symmem::detail
