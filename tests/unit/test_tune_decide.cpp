// symmem-tune's decisions (tools/tune/decide.hpp) on made-up timings: the one_shot / LL
// crossover, the two-shot's blocks per SM share, and the waits' spin. The cuda tune cannot run
// in CI (no GPU); its decisions are checked here.

#include <gtest/gtest.h>

#include <vector>

#include "decide.hpp"

namespace {

using symmem::tune::Row;
constexpr size_t K = 1024, M = 1024 * 1024;

TEST(TuneDecide, CrossoverIsTheLastSizeOneShotHeld) {
  const std::vector<Row> rows = {{4 * K, 1.0, 2.0},  {8 * K, 1.0, 2.0},  {16 * K, 1.0, 1.5},
                                 {32 * K, 2.0, 1.0}, {64 * K, 3.0, 1.0}, {128 * K, 1.0, 2.0}};
  // Two sizes in a row where two_shot won end the search: the later one_shot win is not taken.
  EXPECT_EQ(symmem::tune::crossover(rows), static_cast<int64_t>(16 * K));
}

TEST(TuneDecide, CrossoverTakesOneSlowerSizeForNoise) {
  const std::vector<Row> rows = {{4 * K, 1.0, 2.0},  {8 * K, 2.0, 1.0},  {16 * K, 1.0, 2.0},
                                 {32 * K, 1.0, 1.0}, {64 * K, 2.0, 1.0}, {128 * K, 2.0, 1.0}};
  EXPECT_EQ(symmem::tune::crossover(rows), static_cast<int64_t>(32 * K));  // a tie is one_shot's
}

TEST(TuneDecide, CrossoverIsZeroWhenTwoShotWinsFromTheStart) {
  const std::vector<Row> rows = {{4 * K, 2.0, 1.0}, {8 * K, 2.0, 1.0}, {16 * K, 1.0, 2.0}};
  EXPECT_EQ(symmem::tune::crossover(rows), 0);
  EXPECT_EQ(symmem::tune::crossover({}), 0);
}

TEST(TuneDecide, WiderGridFromTheSmallestSizeItWinsAtAndAbove) {
  // What an H100 with 3 ranks measured (docs/performance.md), in us.
  const std::vector<Row> rows = {{2 * M, 19.7, 19.5},   {4 * M, 22.7, 22.9},
                                 {8 * M, 42.7, 38.6},   {16 * M, 67.2, 58.0},
                                 {32 * M, 115.0, 97.0}, {64 * M, 211.2, 177.7}};
  const auto [per_sm, from] = symmem::tune::wider_grid_from(rows);
  EXPECT_EQ(per_sm, 2);
  EXPECT_EQ(from, static_cast<int64_t>(8 * M));
}

TEST(TuneDecide, WiderGridNeedsItsMarginAtTheLargestSize) {
  // 2 faster by 2% only at the largest size (within the 3% margin): keep 1.
  const std::vector<Row> rows = {{8 * M, 50.0, 40.0}, {16 * M, 100.0, 98.0}};
  const auto [per_sm, from] = symmem::tune::wider_grid_from(rows);
  EXPECT_EQ(per_sm, 1);
  EXPECT_EQ(from, 0);
  // A loss in the middle: only the sizes above it count.
  const std::vector<Row> gap = {
      {8 * M, 50.0, 40.0}, {16 * M, 100.0, 101.0}, {32 * M, 200.0, 150.0}};
  const auto [p2, f2] = symmem::tune::wider_grid_from(gap);
  EXPECT_EQ(p2, 2);
  EXPECT_EQ(f2, static_cast<int64_t>(32 * M));
  EXPECT_EQ(symmem::tune::wider_grid_from({}).first, 1);
}

TEST(TuneDecide, SpinIsTheShortestWithinThreePercentOfTheFastest) {
  const std::vector<int64_t> spins = {0, 5, 20, 50, 200};
  // What the development machine measured (us): 5 is within 3% of 200's best.
  EXPECT_EQ(symmem::tune::shortest_within(spins, {11.52, 11.40, 11.13, 11.16, 11.11}), 5);
  EXPECT_EQ(symmem::tune::shortest_within(spins, {20.0, 15.0, 12.0, 10.0, 10.1}), 50);
  EXPECT_EQ(symmem::tune::shortest_within({}, {}), -1);
}

TEST(TuneDecide, ChunkIsTheFastestUnlessTheBuiltInIsWithinNoise) {
  const std::vector<int64_t> sizes = {64, 128, 256, 512, 1024};
  // 128 is fastest by 5% over the built-in 256: written.
  EXPECT_EQ(symmem::tune::fastest_unless_within(sizes, {3.0, 1.90, 2.0, 2.1, 2.5}, 256), 128);
  // 128 is fastest but the built-in 256 is within 3%: the built-in stays.
  EXPECT_EQ(symmem::tune::fastest_unless_within(sizes, {3.0, 1.98, 2.0, 2.1, 2.5}, 256), 256);
  // A built-in that was not measured never wins.
  EXPECT_EQ(symmem::tune::fastest_unless_within(sizes, {3.0, 2.5, 2.0, 2.1, 1.0}, 4096), 1024);
  EXPECT_EQ(symmem::tune::fastest_unless_within({}, {}, 256), 256);
}

}  // namespace
