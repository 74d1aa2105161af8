// StoreExchange over a HashStore, with threads standing in for ranks.

#include <chrono>
#include <functional>
#include <thread>

#include "core/exchange.hpp"
#include "test_util.hpp"

namespace symmem::test {
namespace {

using namespace std::chrono_literals;

// Runs fn(rank) on `world` threads; rethrows nothing, records failures through gtest.
void run_ranks(int world, const std::function<void(int)>& fn) {
  std::vector<std::thread> ts;
  for (int r = 0; r < world; ++r) {
    ts.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << ": " << e.what();
      }
    });
  }
  for (auto& t : ts) t.join();
}

TEST(StoreExchange, AllGatherBroadcastBarrierManyRounds) {
  constexpr int kWorld = 5, kRounds = 30;
  auto store = std::make_shared<HashStore>();
  run_ranks(kWorld, [&](int rank) {
    StoreExchange ex(store, "test/ex", rank, kWorld, 10s);
    for (int round = 0; round < kRounds; ++round) {
      auto all = ex.all_gather(to_bytes(std::to_string(rank * 1000 + round)));
      ASSERT_EQ(all.size(), size_t(kWorld));
      for (int r = 0; r < kWorld; ++r)
        EXPECT_EQ(to_string(all[r]), std::to_string(r * 1000 + round));
      int root = round % kWorld;
      Bytes b =
          ex.broadcast(rank == root ? to_bytes("root" + std::to_string(root)) : Bytes(), root);
      EXPECT_EQ(to_string(b), "root" + std::to_string(root));
      ex.barrier();
      auto ints = ex.all_gather<int64_t>(int64_t(rank) << 40);
      for (int r = 0; r < kWorld; ++r) EXPECT_EQ(ints[r], int64_t(r) << 40);
      EXPECT_EQ(ex.broadcast<double>(rank == 0 ? 2.5 : -1.0, 0), 2.5);
    }
  });
  // Each rank removed its key of every call but the last: at most world keys remain.
  EXPECT_LE(store->num_keys(), kWorld);
}

TEST(StoreExchange, PrefixesDoNotCollide) {
  auto store = std::make_shared<HashStore>();
  run_ranks(2, [&](int rank) {
    StoreExchange a(store, "group/a", rank, 2, 10s);
    StoreExchange b(store, "group/b", rank, 2, 10s);
    auto va = a.all_gather(to_bytes("a" + std::to_string(rank)));
    auto vb = b.all_gather(to_bytes("b" + std::to_string(rank)));
    EXPECT_EQ(to_string(va[1 - rank]), "a" + std::to_string(1 - rank));
    EXPECT_EQ(to_string(vb[1 - rank]), "b" + std::to_string(1 - rank));
  });
}

TEST(StoreExchange, SingleRank) {
  auto store = std::make_shared<HashStore>();
  StoreExchange ex(store, "solo", 0, 1, 1s);
  EXPECT_EQ(to_string(ex.all_gather(to_bytes("x"))[0]), "x");
  EXPECT_EQ(to_string(ex.broadcast(to_bytes("y"), 0)), "y");
  ex.barrier();
}

TEST(StoreExchange, TimeoutNamesMissingRanks) {
  auto store = std::make_shared<HashStore>();
  // Ranks 0 and 2 of 4 arrive; 1 and 3 never do.
  run_ranks(4, [&](int rank) {
    if (rank == 1 || rank == 3) return;
    StoreExchange ex(store, "to", rank, 4, 200ms);
    try {
      ex.all_gather(to_bytes("x"));
      ADD_FAILURE() << "rank " << rank << ": all_gather did not time out";
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_EQ(e.code(), ErrorCode::Timeout) << msg;
      EXPECT_NE(msg.find("ranks 1, 3 did not arrive"), std::string::npos) << msg;
      EXPECT_NE(msg.find("rank " + std::to_string(rank)), std::string::npos) << msg;
      EXPECT_NE(msg.find("StoreExchange::all_gather"), std::string::npos) << msg;
    }
  });
}

TEST(StoreExchange, BarrierAndBroadcastTimeoutsNameMissingRanks) {
  auto store = std::make_shared<HashStore>();
  StoreExchange ex0(store, "tb", 0, 3, 100ms);
  expect_error([&] { ex0.barrier(); }, ErrorCode::Timeout,
               {"StoreExchange::barrier", "rank 0", "ranks 1, 2 did not arrive"});
  StoreExchange ex1(store, "tc", 1, 3, 100ms);
  // Root 0 never comes: rank 1 waits for it, and also sees rank 2 missing.
  expect_error([&] { ex1.broadcast(Bytes(), 0); }, ErrorCode::Timeout,
               {"StoreExchange::broadcast", "rank 1", "ranks 0, 2 did not arrive", "root 0"});
}

TEST(StoreExchange, BadArguments) {
  auto store = std::make_shared<HashStore>();
  expect_error([&] { StoreExchange(nullptr, "p", 0, 1, 1s); }, ErrorCode::InvalidArgument,
               {"'store'"});
  expect_error([&] { StoreExchange(store, "p", 2, 2, 1s); }, ErrorCode::InvalidArgument,
               {"'rank'", "= 2"});
  expect_error([&] { StoreExchange(store, "p", 0, 0, 1s); }, ErrorCode::InvalidArgument,
               {"'world_size'"});
  expect_error([&] { StoreExchange(store, "", 0, 1, 1s); }, ErrorCode::InvalidArgument,
               {"'prefix'"});
  StoreExchange ex(store, "p", 0, 2, 1s);
  expect_error([&] { ex.broadcast(Bytes(), 2); }, ErrorCode::InvalidArgument, {"'root'", "rank 0"});
}

}  // namespace
}  // namespace symmem::test
