// Host-only checks of the GPU collectives' workspace layout and tuning table
// (src/cuda/kernels/kernels.hpp, tuning.hpp): runs everywhere, no GPU needed.

#include <gtest/gtest.h>

#include "cuda/kernels/kernels.hpp"
#include "cuda/kernels/tuning.hpp"

namespace K = symmem::cuda::kernels;

TEST(GpuLayout, RegionsAreOrderedAlignedAndLargeEnough) {
  for (int world = 1; world <= 72; ++world) {
    SCOPED_TRACE("world " + std::to_string(world));
    const K::WsLayout L = K::ws_layout(world);
    const size_t n = static_cast<size_t>(world);
    EXPECT_EQ(L.flags_offset, K::kCtrlFlagsOffset);
    EXPECT_GE(L.desc_offset, L.flags_offset + K::kMaxBlocks * n * sizeof(uint64_t));
    // Descriptors: one [world][4] table per epoch parity (NOTE [epochs and flags]).
    EXPECT_GE(L.matrix_offset, L.desc_offset + 2 * 4 * n * sizeof(int64_t));
    EXPECT_GE(L.ctrl_bytes, L.matrix_offset + n * (2 * n + 1) * sizeof(int64_t));
    EXPECT_EQ(L.desc_offset % 8, 0u);
    EXPECT_EQ(L.matrix_offset % 8, 0u);
    EXPECT_EQ(L.ll_offset, L.ctrl_bytes);
    EXPECT_EQ(L.ll_offset % 4096, 0u);
    EXPECT_EQ(L.ll_slot_bytes % 4096, 0u);  // whole packets: a refusal fills a slot (refuse.cu)
    // Packets carry 8 data bytes in 16: a slot holds ll_capacity() data bytes.
    EXPECT_GE(L.ll_slot_bytes, 2 * L.ll_capacity());
    EXPECT_GE(L.ll_capacity(), K::kLLTotalDataBytes / n);
    EXPECT_EQ(L.ll_bytes, 2 * n * L.ll_slot_bytes);
    EXPECT_EQ(L.data_offset, L.ll_offset + L.ll_bytes);
    EXPECT_EQ(L.data_offset % 4096, 0u);
    // The descriptor table offset is passed to kernels as 32 bits.
    EXPECT_LT(L.desc_offset, size_t{1} << 32);
  }
}

TEST(GpuLayout, TuningTableIsUsable) {
  bool generic = false;
  for (const auto& t : K::kLLThresholds) {
    EXPECT_GT(t.ll_max_bytes, 0u);
    EXPECT_GE(t.world, 0);
    generic = generic || t.world == 0;
    if (t.world > 0) {
      // Thresholds above the LL capacity would silently be clamped: keep the table honest.
      EXPECT_LE(t.ll_max_bytes, K::ws_layout(t.world).ll_capacity()) << "world " << t.world;
    }
  }
  EXPECT_TRUE(generic) << "kLLThresholds needs an entry for other world sizes (world 0)";
  EXPECT_GE(K::kBlocksPerSm, 1);
}
