// Workspace layout (NOTE [workspace layout] in kernels.hpp).

#include "cuda/kernels/kernels.hpp"

namespace symmem::cuda::kernels {
namespace {
size_t align_up(size_t v, size_t a) {
  return (v + a - 1) / a * a;
}
}  // namespace

WsLayout ws_layout(int world) {
  const size_t n = static_cast<size_t>(world);
  WsLayout L;
  L.flags_offset = kCtrlFlagsOffset;
  L.desc_offset = align_up(L.flags_offset + kMaxBlocks * n * sizeof(uint64_t), 256);
  L.matrix_offset = align_up(L.desc_offset + 2 * 4 * n * sizeof(int64_t), 256);
  L.ctrl_bytes = align_up(
      L.matrix_offset + n * static_cast<size_t>(a2av_row_length(world)) * sizeof(int64_t), 4096);
  L.ll_offset = L.ctrl_bytes;
  L.ll_slot_bytes = align_up(2 * (kLLTotalDataBytes / n), 4096);
  L.ll_bytes = 2 * n * L.ll_slot_bytes;
  L.data_offset = L.ll_offset + L.ll_bytes;
  return L;
}

}  // namespace symmem::cuda::kernels
