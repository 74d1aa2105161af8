// Multi-process: ranks started by symmem-run rendezvous with Group::from_env(), all-gather over
// the store, and split into subgroups (disjoint, overlapping, nested). Each rank runs the cases
// and exits non-zero on a failure.

#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/exchange.hpp"
#include "symmem/error.hpp"
#include "symmem/group.hpp"

namespace {

symmem::Group& world() {
  static symmem::Group g = symmem::Group::from_env();
  return g;
}

// The first of these variables that is set (-1: none): the launchers' names for one value.
int env_int(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    const char* v = std::getenv(name);
    if (v != nullptr && *v != '\0') return std::atoi(v);
  }
  return -1;
}

// A value only rank r would produce, of a size that varies with r.
symmem::Bytes payload(int r, int round) {
  symmem::Bytes b(static_cast<size_t>(1 + 37 * r + round));
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(r * 31 + round * 7 + i);
  return b;
}

}  // namespace

TEST(MpGroup, RendezvousMatchesTheLauncher) {
  auto& g = world();
  EXPECT_EQ(g.rank(), env_int({"SYMMEM_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"}));
  EXPECT_EQ(g.world_size(),
            env_int({"SYMMEM_WORLD_SIZE", "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"}));
  EXPECT_EQ(g.local_rank(), g.rank());  // one host
  EXPECT_EQ(g.local_world_size(), g.world_size());
  EXPECT_TRUE(g.single_host());
  EXPECT_EQ(g.name(), "g0");
  for (int p = 0; p < g.world_size(); ++p) EXPECT_TRUE(g.same_host(p));
}

TEST(MpGroup, AllGatherEveryValueChecked) {
  auto& g = world();
  symmem::StoreExchange x(g.store(), g.name() + "/test/ag", g.rank(), g.world_size(), g.timeout());
  for (int round = 0; round < 20; ++round) {
    auto all = x.all_gather(payload(g.rank(), round));
    ASSERT_EQ(all.size(), static_cast<size_t>(g.world_size()));
    for (int r = 0; r < g.world_size(); ++r) {
      ASSERT_EQ(all[r], payload(r, round)) << "round " << round << " value of rank " << r;
    }
    auto pids = x.all_gather<int>(static_cast<int>(getpid()));
    EXPECT_EQ(pids[g.rank()], getpid());
    int root = round % g.world_size();
    int v = x.broadcast<int>(1000 + round, root);
    EXPECT_EQ(v, 1000 + round);
  }
  g.store_barrier();
}

TEST(MpGroup, SplitDisjointOverlappingNested) {
  auto& g = world();
  const int n = g.world_size();
  const int me = g.rank();
  ASSERT_GE(n, 4);
  std::vector<int> evens, odds, low, mid;
  for (int r = 0; r < n; ++r) (r % 2 == 0 ? evens : odds).push_back(r);
  for (int r = 0; r < n / 2 + 1; ++r) low.push_back(r);  // overlaps mid
  for (int r = n / 2 - 1; r < n; ++r) mid.push_back(r);

  auto check = [&](const symmem::Group& sub, const std::vector<int>& members) {
    ASSERT_TRUE(sub.valid());
    EXPECT_EQ(sub.world_size(), static_cast<int>(members.size()));
    EXPECT_EQ(sub.global_ranks(), members);
    EXPECT_EQ(sub.global_rank(sub.rank()), me);
    EXPECT_EQ(sub.group_rank(me), sub.rank());
    EXPECT_EQ(sub.local_world_size(), static_cast<int>(members.size()));
    // The subgroup's own exchange works and sees exactly its members.
    symmem::StoreExchange x(sub.store(), sub.name() + "/test", sub.rank(), sub.world_size(),
                            sub.timeout());
    auto all = x.all_gather<int>(me);
    EXPECT_EQ(all, members);
    sub.store_barrier();
  };

  symmem::Group parity = g.split(me % 2 == 0 ? evens : odds);
  check(parity, me % 2 == 0 ? evens : odds);
  // Overlapping subgroups, in the same order on every member.
  symmem::Group a, b;
  if (me <= n / 2) a = g.split(low);
  if (me >= n / 2 - 1) b = g.split(mid);
  if (a.valid()) check(a, low);
  if (b.valid()) check(b, mid);
  // The same member list twice: two distinct groups.
  if (a.valid()) {
    symmem::Group a2 = g.split(low);
    EXPECT_NE(a2.name(), a.name());
    check(a2, low);
  }
  // Nested: the first two members of the parity group.
  if (parity.rank() < 2) {
    symmem::Group pair = parity.split({0, 1});
    check(pair, {parity.global_rank(0), parity.global_rank(1)});
  }
  symmem::Group solo = g.split({me});
  check(solo, {me});
  g.store_barrier();
}

TEST(MpGroup, SecondRootGroupGetsAFreshName) {
  auto& g = world();
  symmem::Group again = symmem::Group::from_env();
  EXPECT_EQ(again.name(), "g1");
  EXPECT_EQ(again.rank(), g.rank());
  symmem::StoreExchange x(again.store(), again.name() + "/test", again.rank(), again.world_size(),
                          again.timeout());
  auto all = x.all_gather<int>(again.rank() * 3);
  for (int r = 0; r < again.world_size(); ++r) EXPECT_EQ(all[r], r * 3);
  again.store_barrier();
}

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  try {
    world();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "Group::from_env failed: %s\n", e.what());
    return 1;
  }
  return RUN_ALL_TESTS() == 0 ? 0 : 1;
}
