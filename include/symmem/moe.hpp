#pragma once

// MoE dispatch and combine: the expert-parallel token exchange (docs/moe.md).
//
// Each of a rank's `tokens` rows goes to the ranks that hold its top-k experts (num_experts
// split evenly over the group: rank r holds experts [r * L, (r + 1) * L), L = num_experts /
// world_size), once per destination rank however many of its experts live there. The expert
// ranks receive the rows grouped by local expert; after the experts ran, combine brings each
// row's output back to the token's rank and sums it with the router's weights.
//
//   MoeLayout l = moe_layout(topk_idx, DType::i64, T, k, E, group);  // collective: who gets what
//   moe_dispatch(l, x, DType::bf16, H, nullptr, recv_x, nullptr);   // rows to the experts
//   ... experts: y[i] = expert(l.row_expert(i), recv_x[i]) ...
//   moe_combine(l, y, DType::bf16, H, topk_weights, out);            // back, weighted and summed
//
// Row order (bitwise reproducible; the tests' reference follows it): the rows of recv_x are
// grouped by local expert e; within e by source rank s; within s by token index t; within t by
// top-k slot j (a token that lists an expert twice gets two rows). topk_idx -1 drops a slot.
// normal mode packs the groups densely (expert_counts()[e] rows each, recv_rows() in all);
// low_latency gives every expert max_tokens * world_size rows (recv_x is
// [L, world_size * max_tokens, H]; rows past expert_counts()[e] are not written), so that
// buffers have fixed shapes for CUDA graphs.
//
// A device layout (MoeOptions::device_layout) is filled by moe_dispatch: moe_combine with it
// brings back the rows of the latest dispatch with it.
//
// combine: out[t] = sum over slots j in ascending order of topk_weights[t, j] * y(row of (t, j)),
// accumulated in f32 (one rounding per multiply and per add, no fused multiply-add) and rounded
// once to the output dtype; tokens with no live slot get zeros.
//
// fp8 tokens (float8_e4m3fn, float8_e5m2) carry one f32 scale per 128 elements: x_scales
// [T, H / 128] moves with them into recv_scales [recv_rows, H / 128]; H must be a multiple of
// 128. Other dtypes move as bytes, without scales. y and out are f32, f16 or bf16.
//
// Memory: a layout is made for one device, MoeOptions::device, else (as for ops) the device of
// the group's most recent allocation, else the CPU. On the CPU every pointer is CPU memory. For a
// GPU (docs/moe.md, "On the GPU"): topk_idx may be device or host memory, x, x_scales, recv_x,
// recv_scales, y, topk_weights and out are device memory on that GPU, dispatch and combine are
// enqueued on OpOptions::stream (bitwise equal to the CPU results), and moe_layout synchronises
// that stream to read topk_idx. With a kept layout, dispatch and combine may be captured in a CUDA
// graph once a call with the same shapes has run (the exchange buffers are then large enough).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "symmem/export.hpp"
#include "symmem/group.hpp"
#include "symmem/ops.hpp"
#include "symmem/types.hpp"

namespace symmem {

enum class MoeMode : int { normal = 0, low_latency = 1 };

struct MoeOptions : OpOptions {
  MoeMode mode = MoeMode::normal;
  size_t max_tokens = 0;  // low_latency: the most tokens any rank passes (>= tokens)
  // low_latency on a GPU only: route on the device. moe_layout() then reads nothing (topk_idx
  // must be device memory; it is read by every moe_dispatch, on its stream, so a captured graph
  // replays with whatever routing the array holds then); expert counts are written on the device
  // by each dispatch (MoeLayout::expert_counts_device()); row_source() is not kept. Every rank
  // passes the same max_tokens, topk and num_experts (checked). docs/moe.md, "Routing on the
  // device".
  bool device_layout = false;
};

// Where a rank's tokens go and where each received row came from. Made by moe_layout()
// (collective over the group); moe_dispatch() and moe_combine() with it are collective too.
class SYMMEM_API MoeLayout {
 public:
  MoeLayout();  // invalid
  bool valid() const;
  MoeMode mode() const;
  const Group& group() const;
  size_t num_tokens() const;  // T of this rank
  int topk() const;
  int num_experts() const;
  int num_local_experts() const;
  size_t max_tokens() const;                          // low_latency; 0 in normal mode
  size_t recv_rows() const;                           // rows of recv_x and of y
  const std::vector<int64_t>& expert_counts() const;  // rows per local expert
  // Row i of recv_x came from rank row_source()[3i] (token row_source()[3i + 1], slot
  // row_source()[3i + 2]); -1 for the unwritten rows of low_latency.
  const std::vector<int64_t>& row_source() const;
  // The row of recv_x where expert e (local) begins.
  size_t expert_offset(int e) const;
  // Routed on the device (MoeOptions::device_layout): expert_counts() and row_source() are then
  // InvalidArgument; the counts are device memory, [num_local_experts()] int64, written by each
  // moe_dispatch on its stream (null for other layouts).
  bool device_layout() const;
  const int64_t* expert_counts_device() const;

  struct Impl;
  explicit MoeLayout(std::shared_ptr<const Impl> impl);
  const std::shared_ptr<const Impl>& impl() const { return impl_; }

 private:
  std::shared_ptr<const Impl> impl_;
};

// topk_idx: [tokens, topk] of idx_dtype i32 or i64, each in [-1, num_experts).
SYMMEM_API MoeLayout moe_layout(const void* topk_idx, DType idx_dtype, size_t tokens, int topk,
                                int num_experts, const Group& group,
                                const MoeOptions& options = {});

// The layout that moe_layout() made, from what it returned: the same topk_idx, its row_source()
// ([rows, 3]) and expert_counts() (both host memory), the same group and options. For callers
// that keep a layout as tensors (the torch ops of symmem.torch). No communication on the CPU; a
// layout for a GPU agrees on the size of its exchange buffers (a small CPU all-reduce, so it is
// collective there).
SYMMEM_API MoeLayout moe_layout_restore(const void* topk_idx, DType idx_dtype, size_t tokens,
                                        int topk, int num_experts, const int64_t* row_source,
                                        size_t rows, const int64_t* expert_counts,
                                        const Group& group, const MoeOptions& options = {});

// x: [tokens, hidden] of dtype; recv_x: [recv_rows, hidden]. fp8: x_scales [tokens, hidden/128]
// and recv_scales [recv_rows, hidden/128] (null otherwise).
SYMMEM_API void moe_dispatch(const MoeLayout& layout, const void* x, DType dtype, size_t hidden,
                             const float* x_scales, void* recv_x, float* recv_scales,
                             const OpOptions& options = {});

// y: [recv_rows, hidden] in recv_x's order; topk_weights: [tokens, topk] f32; out:
// [tokens, hidden] of y's dtype (f32, f16, bf16).
SYMMEM_API void moe_combine(const MoeLayout& layout, const void* y, DType dtype, size_t hidden,
                            const float* topk_weights, void* out, const OpOptions& options = {});

}  // namespace symmem
