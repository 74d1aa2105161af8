// Multi-process tests of the host backend, one process per rank (symmem-run -n N). Every rank
// runs every case and exits non-zero on a failure.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/memory_registry.hpp"
#include "symmem/backend.hpp"
#include "symmem/error.hpp"
#include "symmem/group.hpp"
#include "symmem/memory.hpp"
#include "test_util.hpp"

namespace symmem::test {
namespace {

Group& world() {
  static Group g = Group::from_env();
  return g;
}

TEST(MpHost, PeerWritesVisibleAfterBarrier) {
  auto& g = world();
  const int n = g.world_size(), r = g.rank();
  for (size_t bytes : {size_t{4}, size_t{4096}, size_t{1} << 20}) {
    auto buf = allocate(g, bytes);
    ASSERT_EQ(buf.backend(), "host");
    size_t words = bytes / sizeof(uint32_t);
    for (int round = 0; round < 10; ++round) {
      // Rank r writes word i of peer (r + round) % n for every i with i % n == r.
      int dst = (r + round) % n;
      auto* peer = static_cast<uint32_t*>(buf.ptr(dst));
      for (size_t i = static_cast<size_t>(r); i < words; i += static_cast<size_t>(n)) {
        peer[i] = static_cast<uint32_t>(round * 1000003u + i);
      }
      buf.barrier(round % buf.num_channels());
      // Word i of this rank was written by rank i % n, which targeted us if (i%n + round)%n == r.
      auto* mine = static_cast<uint32_t*>(buf.ptr(r));
      for (size_t i = 0; i < words; ++i) {
        int writer = static_cast<int>(i % static_cast<size_t>(n));
        if ((writer + round) % n != r) continue;
        ASSERT_EQ(mine[i], static_cast<uint32_t>(round * 1000003u + i))
            << "bytes " << bytes << " round " << round << " word " << i;
      }
      buf.barrier();
    }
  }
}

TEST(MpHost, PutWaitSignalsManyRoundsAndChannels) {
  auto& g = world();
  const int n = g.world_size(), r = g.rank();
  auto buf = allocate(g, static_cast<size_t>(n) * 64 * sizeof(int));
  int channels = buf.num_channels();
  ASSERT_GE(channels, 2);
  int* mine = static_cast<int*>(buf.ptr(r));
  for (int round = 0; round < 200; ++round) {
    int ch = (round * 7) % channels;
    // All pairs: write our value into every peer's row for us, signal, then consume theirs.
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      static_cast<int*>(buf.ptr(p))[r * 64 + round % 64] = round * 31 + r;
      buf.put_signal(p, ch);
    }
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      buf.wait_signal(p, ch);
      ASSERT_EQ(mine[p * 64 + round % 64], round * 31 + p) << "round " << round << " from " << p;
    }
  }
  buf.barrier();
  for (size_t i = 0; i < buf.signal_pad_bytes() / 4; ++i) ASSERT_EQ(buf.signal_pad(r)[i], 0u);
}

TEST(MpHost, SubgroupsOverlappingAndGlobalRanks) {
  auto& g = world();
  const int n = g.world_size(), r = g.rank();
  if (n < 3) GTEST_SKIP() << "needs 3 ranks for overlapping subgroups";
  // Even ranks, and two overlapping windows [0, n-1) and [1, n).
  std::vector<int> evens, low, high;
  for (int i = 0; i < n; ++i) {
    if (i % 2 == 0) evens.push_back(i);
    if (i < n - 1) low.push_back(i);
    if (i >= 1) high.push_back(i);
  }
  std::vector<std::pair<Group, std::vector<int>>> subs;
  if (r % 2 == 0) subs.emplace_back(g.split(evens), evens);
  if (r < n - 1) subs.emplace_back(g.split(low), low);
  if (r >= 1) subs.emplace_back(g.split(high), high);
  std::vector<SymmetricMemory> bufs;
  for (auto& [s, members] : subs) bufs.push_back(allocate(s, 4096));
  for (int round = 0; round < 5; ++round) {
    for (size_t k = 0; k < subs.size(); ++k) {
      auto& [s, members] = subs[k];
      auto& b = bufs[k];
      ASSERT_EQ(b.world_size(), static_cast<int>(members.size()));
      for (int p = 0; p < b.world_size(); ++p) {
        ASSERT_EQ(b.global_rank(p), members[static_cast<size_t>(p)]);
        static_cast<int*>(b.ptr(p))[b.rank()] = round * 1000 + r;
      }
      b.barrier();
      for (int p = 0; p < b.world_size(); ++p) {
        ASSERT_EQ(static_cast<int*>(b.ptr(b.rank()))[p], round * 1000 + b.global_rank(p));
      }
      b.barrier(1);
    }
  }
  for (size_t k = 0; k < subs.size(); ++k) {
    EXPECT_FALSE(find_symmetric(g, bufs[k].ptr(bufs[k].rank()), 4).valid());
  }
}

TEST(MpHost, MismatchedSizesFailOnEveryRank) {
  auto& g = world();
  const int r = g.rank();
  expect_error([&] { allocate(g, r == g.world_size() - 1 ? 8192 : 4096); },
               ErrorCode::InvalidArgument,
               {"disagree", "rank 0 ", ": 4096 bytes", ": 8192 bytes", "bytes"});
  // Order: rank 0 allocates 1 KiB then 2 KiB, the others the other way round.
  expect_error(
      [&] {
        allocate(g, r == 0 ? 1024 : 2048);
        allocate(g, r == 0 ? 2048 : 1024);
      },
      ErrorCode::InvalidArgument, {"disagree", ": 1024 bytes", ": 2048 bytes"});
  // The group still works afterwards.
  auto ok = allocate(g, 64);
  ok.barrier();
}

TEST(MpHost, TimeoutNamesRankAndChannel) {
  auto& g = world();
  auto buf = allocate(g, 4096);
  if (g.rank() == 0) {
    auto t0 = std::chrono::steady_clock::now();
    expect_error([&] { buf.wait_signal(1, 2, Millis(200)); }, ErrorCode::Timeout,
                 {"wait_signal: rank 0", "channel 2", "rank 1 to signal", "200 ms"});
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
  }
  g.store_barrier();
}

// With SYMMEM_BACKEND=<name> set (test_host_peer_death runs this with nvshmem and a libsymmem
// without plugins beside it), a plain allocate() must fail; otherwise AllocOptions names nvshmem.
TEST(MpHost, UnavailableBackendNamesAvailableOnes) {
  auto& g = world();
  auto avail = available_backends();
  ASSERT_FALSE(avail.empty());
  EXPECT_EQ(avail[0], "host");
  const char* env = std::getenv("SYMMEM_BACKEND");
  std::string name = env != nullptr && std::string(env) != "auto" ? env : "nvshmem";
  if (std::find(avail.begin(), avail.end(), name) != avail.end()) {
    GTEST_SKIP() << "the " << name << " plugin loads here";
  }
  AllocOptions options;
  if (env == nullptr) options.backend = name;
  expect_error([&] { allocate(g, 4096, Device::cpu(), options); }, ErrorCode::BackendUnavailable,
               {("'" + name + "'").c_str(), ("libsymmem_" + name + ".so").c_str(),
                "available backends: host", ("rank " + std::to_string(g.rank())).c_str()});
}

}  // namespace
}  // namespace symmem::test

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  try {
    symmem::test::world();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "Group::from_env failed: %s\n", e.what());
    return 1;
  }
  return RUN_ALL_TESTS() == 0 ? 0 : 1;
}
