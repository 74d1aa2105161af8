#pragma once

// NOTE [all-reduce tuning]
// The one table that decides, for Algo::automatic, when the LL one-shot (flags in the data, no
// barrier) is used instead of the barrier-based two-shot: a piece of at most `ll_max_bytes`
// bytes (the whole message for all_reduce; the per-rank block for reduce_scatter, all_gather
// and all_to_all) goes LL. Initial values come from the cost model in docs/performance.md
// (LL moves ~4 x bytes x world^2 through HBM in total, two-shot ~2 x bytes x world plus two
// barrier round trips) and torch's numbers in GPU.md; the values for 2 and 4 ranks are the
// crossovers measured on the H200 (docs/performance.md, "Thresholds"). symmem-tune writes a
// measured value per machine into the tuning file, which decides where its signature matches
// (NOTE [tuning file] in src/core/tuning.hpp); SYMMEM_GPU_LL_MAX_BYTES overrides both.
// A value above the LL capacity of the workspace (kernels.hpp, kLLTotalDataBytes / world) is
// clamped to it. Algo::one_shot uses LL up to that capacity, then a barrier-based one-shot.

#include <cstddef>

namespace symmem::cuda::kernels {

struct LLThreshold {
  int world;            // 0: any other world size
  size_t ll_max_bytes;  // largest piece that goes LL under Algo::automatic
};

inline constexpr LLThreshold kLLThresholds[] = {
    {2, size_t{1} << 20},    // 1 MiB
    {4, size_t{512} << 10},  // 512 KiB
    {8, size_t{128} << 10},  // 128 KiB
    {0, size_t{64} << 10},   // 64 KiB
};

// Blocks per rank of the bandwidth kernels: the GPU's SMs shared by the ranks on it, so that all
// ranks' blocks are resident together (kernels wait for each other; under MPS several ranks share
// one GPU). One 512-thread block per SM-share leaves room for 2-4x that many.
inline constexpr int kBlocksPerSm = 1;

// NOTE [two-shot blocks]
// The two-shot all_reduce of a large message may take more blocks per SM share than the other
// kernels: symmem-tune times it with 1 and 2 (every rank's blocks must be resident together,
// since block b waits for block b of every peer: __launch_bounds__(kThreads, 2) guarantees two
// per SM) and writes the cuda entries "two_shot.blocks_per_sm" and "two_shot.blocks_min_bytes"
// (the smallest message from which the wider grid won at every larger size it measured) per
// world size. Without an entry, or below its size, kBlocksPerSm decides; SYMMEM_GPU_BLOCKS_PER_SM
// overrides both for every kernel. Every rank of a group must choose alike (the barriers pair
// blocks by index): they read the same file on one machine.
inline constexpr int kMaxBlocksPerSm = 2;

}  // namespace symmem::cuda::kernels
