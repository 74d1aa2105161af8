// Group over an in-process HashStore, one thread per rank.

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "symmem/error.hpp"
#include "symmem/group.hpp"
#include "symmem/store.hpp"
#include "test_util.hpp"

using symmem::ErrorCode;
using symmem::Group;
using symmem::GroupOptions;
using symmem::Millis;

namespace {

// Runs fn(rank) on `world` threads; rethrows (as a test failure) anything a rank throws.
void run_ranks(int world, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  std::mutex m;
  std::vector<std::string> errors;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(m);
        errors.push_back("rank " + std::to_string(r) + ": " + e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) ADD_FAILURE() << e;
}

GroupOptions opts(Millis timeout = Millis(10000)) {
  GroupOptions o;
  o.timeout = timeout;
  return o;
}

}  // namespace

TEST(Group, DefaultIsInvalidAndSaysSo) {
  Group g;
  EXPECT_FALSE(g.valid());
  symmem::test::expect_error([&] { (void)g.rank(); }, ErrorCode::InvalidArgument,
                             {"Group::rank", "not valid"});
}

TEST(Group, CreateChecksArguments) {
  auto store = std::make_shared<symmem::HashStore>();
  symmem::test::expect_error([&] { Group::create(nullptr, 0, 1); }, ErrorCode::InvalidArgument,
                             {"'store'", "null"});
  symmem::test::expect_error([&] { Group::create(store, 0, 0); }, ErrorCode::InvalidArgument,
                             {"'world_size'", "is 0"});
  symmem::test::expect_error([&] { Group::create(store, 3, 3); }, ErrorCode::InvalidArgument,
                             {"rank 3", "'rank'", "0..2"});
  GroupOptions o = opts();
  o.local_rank = 2;
  o.local_world_size = 2;
  symmem::test::expect_error([&] { Group::create(store, 0, 1, o); }, ErrorCode::InvalidArgument,
                             {"'options.local_rank'", "is 2"});
  o = opts();
  o.timeout = Millis(0);
  symmem::test::expect_error([&] { Group::create(store, 0, 1, o); }, ErrorCode::InvalidArgument,
                             {"'options.timeout'"});
}

TEST(Group, SingleRank) {
  auto store = std::make_shared<symmem::HashStore>();
  Group g = Group::create(store, 0, 1, opts());
  EXPECT_TRUE(g.valid());
  EXPECT_EQ(g.rank(), 0);
  EXPECT_EQ(g.world_size(), 1);
  EXPECT_EQ(g.local_rank(), 0);
  EXPECT_EQ(g.local_world_size(), 1);
  EXPECT_TRUE(g.single_host());
  EXPECT_EQ(g.name(), "g0");
  EXPECT_FALSE(g.host_id().empty());
  EXPECT_EQ(g.store(), store);
  EXPECT_EQ(g.timeout(), Millis(10000));
  g.store_barrier();
  // A second root group on the same store gets the next name.
  Group g2 = Group::create(store, 0, 1, opts());
  EXPECT_EQ(g2.name(), "g1");
}

TEST(Group, EightRanksRendezvous) {
  const int n = 8;
  auto store = std::make_shared<symmem::HashStore>();
  std::vector<Group> groups(n);
  run_ranks(n, [&](int r) {
    groups[r] = Group::create(store, r, n, opts());
    groups[r].store_barrier();
    groups[r].store_barrier();
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(groups[r].valid());
    EXPECT_EQ(groups[r].rank(), r);
    EXPECT_EQ(groups[r].world_size(), n);
    EXPECT_EQ(groups[r].local_rank(), r);  // one process, one host
    EXPECT_EQ(groups[r].local_world_size(), n);
    EXPECT_TRUE(groups[r].single_host());
    EXPECT_EQ(groups[r].name(), "g0");
    EXPECT_EQ(groups[r].global_ranks().size(), size_t(n));
    for (int p = 0; p < n; ++p) {
      EXPECT_TRUE(groups[r].same_host(p));
      EXPECT_EQ(groups[r].global_rank(p), p);
      EXPECT_EQ(groups[r].group_rank(p), p);
    }
    EXPECT_EQ(groups[r].group_rank(n), -1);
    symmem::test::expect_error([&] { groups[r].global_rank(n); }, ErrorCode::InvalidArgument,
                               {"'group_rank'", "is 8"});
    symmem::test::expect_error([&] { groups[r].same_host(-1); }, ErrorCode::InvalidArgument,
                               {"'peer'"});
  }
}

TEST(Group, HostIdsGiveLocalRanks) {
  // Ranks 0,2,4 on host A; 1,3 on host B.
  const int n = 5;
  auto store = std::make_shared<symmem::HashStore>();
  std::vector<Group> groups(n);
  run_ranks(n, [&](int r) {
    GroupOptions o = opts();
    o.host_id = r % 2 == 0 ? "hostA" : "hostB";
    groups[r] = Group::create(store, r, n, o);
  });
  const int expect_local[] = {0, 0, 1, 1, 2};
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(groups[r].local_rank(), expect_local[r]) << "rank " << r;
    EXPECT_EQ(groups[r].local_world_size(), r % 2 == 0 ? 3 : 2);
    EXPECT_FALSE(groups[r].single_host());
    EXPECT_EQ(groups[r].host_id(), r % 2 == 0 ? "hostA" : "hostB");
    EXPECT_TRUE(groups[r].same_host(r));
    EXPECT_EQ(groups[r].same_host(0), r % 2 == 0);
  }
  // A subgroup {1,2,3} keeps the hosts: 1,3 on B; 2 on A.
  std::vector<Group> subs(n);
  run_ranks(n, [&](int r) {
    if (r >= 1 && r <= 3) subs[r] = groups[r].split({3, 1, 2});
  });
  EXPECT_EQ(subs[1].local_rank(), 0);
  EXPECT_EQ(subs[1].local_world_size(), 2);
  EXPECT_EQ(subs[3].local_rank(), 1);
  EXPECT_EQ(subs[2].local_rank(), 0);
  EXPECT_EQ(subs[2].local_world_size(), 1);
}

TEST(Group, LauncherLocalRankContradictionFailsOnEveryRank) {
  const int n = 3;
  auto store = std::make_shared<symmem::HashStore>();
  std::vector<std::string> errors(n);
  std::vector<ErrorCode> codes(n, ErrorCode::Internal);
  run_ranks(n, [&](int r) {
    GroupOptions o = opts();
    o.local_rank = r == 2 ? 0 : r;  // rank 2 claims local rank 0, but all share a host
    o.local_world_size = n;
    try {
      Group::create(store, r, n, o);
    } catch (const symmem::Error& e) {
      errors[r] = e.what();
      codes[r] = e.code();
    }
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(codes[r], ErrorCode::InvalidArgument) << errors[r];
    EXPECT_NE(errors[r].find("rank 2: launcher says local_rank 0"), std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find("gives local_rank 2"), std::string::npos) << errors[r];
  }
}

TEST(Group, WorldSizeDisagreementIsReported) {
  auto store = std::make_shared<symmem::HashStore>();
  std::vector<std::string> errors(2);
  run_ranks(2, [&](int r) {
    try {
      // Rank 0 thinks the world has 2 ranks, rank 1 thinks 3.
      Group::create(store, r, r == 0 ? 2 : 3, opts(Millis(1500)));
    } catch (const symmem::Error& e) {
      errors[r] = e.what();
    }
  });
  EXPECT_NE(errors[0].find("disagree on world_size"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("rank 1 says 3"), std::string::npos) << errors[0];
  // Rank 1 waits for a rank 2 that never comes.
  EXPECT_NE(errors[1].find("rank 2"), std::string::npos) << errors[1];
}

TEST(Group, MissingRankTimesOutNamingIt) {
  const int n = 4;
  auto store = std::make_shared<symmem::HashStore>();
  std::vector<std::string> errors(n);
  std::vector<ErrorCode> codes(n, ErrorCode::Internal);
  auto t0 = std::chrono::steady_clock::now();
  run_ranks(n, [&](int r) {
    if (r == 2) return;  // never joins
    try {
      Group::create(store, r, n, opts(Millis(500)));
    } catch (const symmem::Error& e) {
      errors[r] = e.what();
      codes[r] = e.code();
    }
  });
  auto elapsed = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(elapsed, std::chrono::seconds(5));
  for (int r : {0, 1, 3}) {
    EXPECT_EQ(codes[r], ErrorCode::Timeout) << errors[r];
    EXPECT_NE(errors[r].find("rank 2"), std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find("Group::create"), std::string::npos) << errors[r];
  }
}

TEST(Group, SplitSubgroupsIncludingOverlapping) {
  const int n = 6;
  auto store = std::make_shared<symmem::HashStore>();
  std::vector<Group> groups(n), evens(n), low(n), low2(n), solo(n);
  run_ranks(n, [&](int r) {
    groups[r] = Group::create(store, r, n, opts());
    if (r % 2 == 0) evens[r] = groups[r].split({4, 0, 2});
    if (r < 3) low[r] = groups[r].split({0, 1, 2});   // overlaps evens in 0 and 2
    if (r < 3) low2[r] = groups[r].split({2, 1, 0});  // same set again: a distinct group
    if (r % 2 == 0) evens[r].store_barrier();
    if (r < 3) low[r].store_barrier();
    solo[r] = groups[r].split({r});
    solo[r].store_barrier();
  });
  for (int r = 0; r < n; ++r) {
    if (r % 2 == 0) {
      EXPECT_EQ(evens[r].rank(), r / 2);
      EXPECT_EQ(evens[r].world_size(), 3);
      EXPECT_EQ(evens[r].global_ranks(), (std::vector<int>{0, 2, 4}));
      EXPECT_EQ(evens[r].global_rank(2), 4);
      EXPECT_EQ(evens[r].group_rank(4), 2);
      EXPECT_EQ(evens[r].group_rank(1), -1);
      EXPECT_EQ(evens[r].name(), "g0/s0,2,4#0");
      EXPECT_EQ(evens[r].store(), store);
    } else {
      EXPECT_FALSE(evens[r].valid());
    }
    if (r < 3) {
      EXPECT_EQ(low[r].rank(), r);
      EXPECT_EQ(low[r].name(), "g0/s0,1,2#0");
      EXPECT_EQ(low2[r].name(), "g0/s0,1,2#1");
    }
    EXPECT_EQ(solo[r].world_size(), 1);
    EXPECT_EQ(solo[r].global_rank(0), r);
  }
  // Nested split maps back to global ranks: evens {0,2,4} -> its ranks {1,2} = global {2,4}.
  std::vector<Group> nested(n);
  run_ranks(n, [&](int r) {
    if (r == 2 || r == 4) nested[r] = evens[r].split({1, 2});
  });
  EXPECT_EQ(nested[2].global_ranks(), (std::vector<int>{2, 4}));
  EXPECT_EQ(nested[4].rank(), 1);
  EXPECT_EQ(nested[4].global_rank(0), 2);
  EXPECT_EQ(nested[2].name(), "g0/s0,2,4#0/s1,2#0");
}

TEST(Group, SplitChecksArguments) {
  auto store = std::make_shared<symmem::HashStore>();
  std::vector<Group> groups(3);
  run_ranks(3, [&](int r) { groups[r] = Group::create(store, r, 3, opts()); });
  auto& g = groups[1];
  symmem::test::expect_error([&] { g.split({}); }, ErrorCode::InvalidArgument,
                             {"Group::split: rank 1", "'ranks'", "empty"});
  symmem::test::expect_error(
      [&] {
        g.split({0, 3});
      },
      ErrorCode::InvalidArgument, {"'ranks'", "contains 3"});
  symmem::test::expect_error(
      [&] {
        g.split({1, 1});
      },
      ErrorCode::InvalidArgument, {"'ranks'", "1 twice"});
  symmem::test::expect_error(
      [&] {
        g.split({0, 2});
      },
      ErrorCode::InvalidArgument, {"'ranks'", "does not contain this rank (1)"});
}

TEST(Group, SplitWithAbsentMemberTimesOutNamingGlobalRank) {
  const int n = 4;
  auto store = std::make_shared<symmem::HashStore>();
  std::vector<Group> groups(n);
  run_ranks(n, [&](int r) { groups[r] = Group::create(store, r, n, opts(Millis(600))); });
  std::vector<std::string> errors(n);
  run_ranks(n, [&](int r) {
    if (r != 1 && r != 3) return;  // rank 2 of {1,2,3} never calls split
    try {
      groups[r].split({1, 2, 3});
    } catch (const symmem::Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Timeout);
      errors[r] = e.what();
    }
  });
  for (int r : {1, 3}) {
    EXPECT_NE(errors[r].find("rank 1"), std::string::npos) << errors[r];  // subgroup rank 1
    EXPECT_NE(errors[r].find("group rank -> global rank: 0->1, 1->2, 2->3"), std::string::npos)
        << errors[r];
    EXPECT_NE(errors[r].find("split(ranks=[1, 2, 3])"), std::string::npos) << errors[r];
  }
}

TEST(Group, LongMemberListsAreHashedIntoShortNames) {
  const int n = 40;
  auto store = std::make_shared<symmem::HashStore>();
  std::vector<Group> groups(n), subs(n);
  run_ranks(n, [&](int r) {
    groups[r] = Group::create(store, r, n, opts());
    if (r != 5) {
      std::vector<int> all;
      for (int i = 0; i < n; ++i)
        if (i != 5) all.push_back(i);
      subs[r] = groups[r].split(all);
    }
  });
  EXPECT_LT(subs[0].name().size(), 40u);
  EXPECT_EQ(subs[0].name(), subs[39].name());
  EXPECT_EQ(subs[39].rank(), 38);
  EXPECT_EQ(subs[39].global_rank(38), 39);
}
