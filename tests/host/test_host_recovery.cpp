// Group::abort, shrink and grow on the host backend, ranks as threads over one HashStore
// (NOTE [group abort] in src/core/abort.hpp; docs/reliability.md, "Recovering from a failed
// rank"). The multi-process version, with SIGKILLed ranks, is tests/fault/recovery_driver.py.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <future>
#include <numeric>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "host_test_util.hpp"
#include "symmem/symmem.hpp"
#include "test_util.hpp"

namespace symmem::test {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// Aborts `g` from another thread after `delay`, returning when it did.
std::future<Clock::time_point> abort_later(const Group& g, std::chrono::milliseconds delay) {
  return std::async(std::launch::async, [g, delay] {
    std::this_thread::sleep_for(delay);
    auto t = Clock::now();
    g.abort("test abort");
    return t;
  });
}

// Rank 0 waits in `wait` (which needs rank 1), rank 1 stays away until rank 0 is done; an abort
// from a third thread must end rank 0's wait with Aborted well before the timeout.
template <class Wait>
void expect_abort_ends_wait(Wait&& wait, const char* what) {
  std::atomic<bool> done{false};
  auto errors = run_ranks(2, [&](Group& g) {
    auto buf = allocate(g, 4096);
    if (g.rank() == 1) {
      while (!done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return;
    }
    auto aborted_at = abort_later(g, std::chrono::milliseconds(150));
    try {
      wait(g, buf);
      ADD_FAILURE() << what << ": returned without the peer";
    } catch (const Error& e) {
      const double ms = ms_since(aborted_at.get());
      EXPECT_EQ(e.code(), ErrorCode::Aborted) << e.what();
      EXPECT_NE(std::string(e.what()).find("test abort"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("rank 0"), std::string::npos) << e.what();
      // The bound of NOTE [group abort] is ~70 ms; a loaded 2-core machine gets slack.
      EXPECT_LT(ms, 1000.0) << what;
      std::printf("%s: Aborted %.1f ms after abort()\n", what, ms);
    }
    done = true;
  });
  expect_no_errors(errors);
}

TEST(HostRecovery, AbortEndsABufferBarrier) {
  expect_abort_ends_wait([](Group&, SymmetricMemory& b) { b.barrier(0); }, "barrier");
}

TEST(HostRecovery, AbortEndsASignalWait) {
  expect_abort_ends_wait([](Group&, SymmetricMemory& b) { b.wait_signal(1, 2); }, "wait_signal");
}

TEST(HostRecovery, AbortEndsACollective) {
  expect_abort_ends_wait(
      [](Group& g, SymmetricMemory& b) {
        all_reduce(b, 16, DType::f32, ReduceOp::sum);
        (void)g;
      },
      "all_reduce");
}

TEST(HostRecovery, AbortEndsAStoreBarrier) {
  expect_abort_ends_wait([](Group& g, SymmetricMemory&) { g.store_barrier(); }, "store_barrier");
}

TEST(HostRecovery, AfterAbortEveryOpRaisesAndSubgroupsToo) {
  auto errors = run_ranks(2, [&](Group& g) {
    auto buf = allocate(g, 4096);
    Group sub = g.split({0, 1});
    auto sub_buf = allocate(sub, 4096);
    g.store_barrier();
    EXPECT_FALSE(g.aborted());
    g.check_async_error();  // nothing pending: returns
    g.abort("first reason");
    g.abort("second reason");  // idempotent: the first reason stays
    EXPECT_TRUE(g.aborted());
    EXPECT_TRUE(sub.aborted());
    auto needles = {"first reason", "was aborted by rank"};
    expect_error([&] { all_reduce(buf, 16, DType::f32, ReduceOp::sum); }, ErrorCode::Aborted,
                 needles);
    expect_error([&] { allocate(g, 4096); }, ErrorCode::Aborted, needles);
    expect_error([&] { barrier(g); }, ErrorCode::Aborted, needles);
    expect_error([&] { buf.barrier(); }, ErrorCode::Aborted, needles);
    expect_error([&] { buf.put_signal(1 - g.rank()); }, ErrorCode::Aborted, needles);
    expect_error([&] { put(buf, 0, buf.ptr(g.rank()), 8, 1 - g.rank()); }, ErrorCode::Aborted,
                 needles);
    expect_error([&] { g.store_barrier(); }, ErrorCode::Aborted, needles);
    expect_error([&] { g.check_async_error(); }, ErrorCode::Aborted, needles);
    expect_error([&] { sub.check_async_error(); }, ErrorCode::Aborted, needles);
    expect_error([&] { all_reduce(sub_buf, 16, DType::f32, ReduceOp::sum); }, ErrorCode::Aborted,
                 needles);
    expect_error([&] { allocate(sub, 4096); }, ErrorCode::Aborted, needles);
    buf.free();  // memory of an aborted group can still be freed
    sub_buf.free();
  });
  expect_no_errors(errors);
}

TEST(HostRecovery, AbortingASubgroupLeavesTheParent) {
  auto errors = run_ranks(2, [&](Group& g) {
    Group sub = g.split({0, 1});
    sub.abort("only the subgroup");
    EXPECT_TRUE(sub.aborted());
    EXPECT_FALSE(g.aborted());
    auto buf = allocate(g, 4096);
    auto* x = static_cast<float*>(buf.ptr(g.rank()));
    x[0] = 1.0f;
    all_reduce(buf, 1, DType::f32, ReduceOp::sum);
    EXPECT_EQ(x[0], 2.0f);
  });
  expect_no_errors(errors);
}

// Ranks 0, 1, 3 of 4 shrink without rank 2 (which stays away: a thread standing for a dead rank).
TEST(HostRecovery, ShrinkRenumbersAndWorks) {
  auto errors = run_ranks(4, [&](Group& g) {
    auto old_buf = allocate(g, 4096);
    all_reduce(old_buf, 16, DType::f32, ReduceOp::sum);  // the old group gets a workspace
    if (g.rank() == 2) return;
    expect_error([&] { g.shrink({g.rank()}); }, ErrorCode::InvalidArgument,
                 {"excluded", "contains this rank"});
    expect_error([&] { g.shrink({7}); }, ErrorCode::InvalidArgument, {"excluded", "7"});
    Group s = g.shrink({2});
    EXPECT_EQ(s.world_size(), 3);
    EXPECT_EQ(s.rank_map(), (std::vector<int>{0, 1, -1, 2}));
    EXPECT_EQ(s.rank(), s.rank_map()[g.rank()]);
    EXPECT_EQ(s.global_ranks(), (std::vector<int>{0, 1, 3}));
    EXPECT_TRUE(g.aborted());
    EXPECT_FALSE(s.aborted());
    expect_error([&] { all_reduce(old_buf, 16, DType::f32, ReduceOp::sum); }, ErrorCode::Aborted,
                 {"was shrunk into", s.name().c_str()});
    auto buf = allocate(s, 4096);
    auto* x = static_cast<int32_t*>(buf.ptr(s.rank()));
    for (int i = 0; i < 64; ++i) x[i] = (s.rank() + 1) * 100 + i;
    all_reduce(buf, 64, DType::i32, ReduceOp::sum);
    for (int i = 0; i < 64; ++i) ASSERT_EQ(x[i], 600 + 3 * i);
    std::vector<int32_t> mine(3, s.rank()), all(9, -1);
    all_gather(mine.data(), all.data(), 3, DType::i32, s);
    for (int i = 0; i < 9; ++i) EXPECT_EQ(all[i], i / 3);
    // Nothing keeps the old group once its handles and buffers go (its workspace could).
    std::weak_ptr<Group::Impl> old = g.impl();
    old_buf = SymmetricMemory();
    g = Group();
    EXPECT_TRUE(old.expired()) << "the shrunk group's state outlives its last handle";
  });
  expect_no_errors(errors);
}

// Two ranks grow by one: a third thread joins through Group::rejoin over the same store.
TEST(HostRecovery, GrowTakesAJoiner) {
  auto store = std::make_shared<HashStore>();
  GroupOptions o;
  o.timeout = Millis(20000);
  std::vector<std::exception_ptr> errors(3);
  std::vector<std::thread> threads;
  auto check = [](const Group& g) {
    EXPECT_EQ(g.world_size(), 3);
    auto buf = allocate(g, 4096);
    auto* x = static_cast<int32_t*>(buf.ptr(g.rank()));
    x[0] = g.rank() + 1;
    all_reduce(buf, 1, DType::i32, ReduceOp::sum);
    EXPECT_EQ(x[0], 6);
  };
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        Group g = Group::create(store, r, 2, o);
        Group big = g.grow(1);
        EXPECT_EQ(big.rank(), r);
        EXPECT_EQ(big.rank_map(), (std::vector<int>{0, 1}));
        EXPECT_FALSE(g.aborted());  // grow() leaves the old group usable
        check(big);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  threads.emplace_back([&] {
    try {
      GroupOptions j = o;
      j.store = store;
      j.rank = 5;  // the joiner's launcher rank becomes its global rank
      j.world_size = 6;
      Group g = Group::rejoin(j);
      EXPECT_EQ(g.rank(), 2);
      EXPECT_EQ(g.global_ranks(), (std::vector<int>{0, 1, 5}));
      check(g);
    } catch (...) {
      errors[2] = std::current_exception();
    }
  });
  for (auto& t : threads) t.join();
  expect_no_errors(errors);
}

// A grow offer that does not parse (another version's, or a number that is none) is an Internal
// error that names it, not a std::invalid_argument out of the library.
TEST(HostRecovery, MalformedGrowOfferIsAnError) {
  for (const std::string& offer : {std::string("symmem-grow-v1\ng0\nthree\n0\n1000\n"),
                                   std::string("symmem-grow-v1\ng0\n3\n7\n1000\n"),
                                   std::string("symmem-grow-v1\ng0\n3\n2\n1000\n0:x,\n"),
                                   std::string("symmem-grow-v1\ng0\n3\n")}) {
    auto store = std::make_shared<HashStore>();
    store->set("symmem/grow/offer/1", to_bytes(offer));  // the first joiner's ticket is 1
    GroupOptions j;
    j.store = store;
    j.rank = 2;
    j.world_size = 3;
    j.timeout = Millis(2000);
    try {
      Group::rejoin(j);
      ADD_FAILURE() << "rejoin accepted " << offer;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Internal) << e.what();
      EXPECT_NE(std::string(e.what()).find("malformed grow offer"), std::string::npos) << e.what();
    }
  }
}

// NOTE [one thread per group]: a second thread's collective on a group that is running one fails
// at once, and the first completes.
TEST(HostRecovery, OverlappingCollectivesFromTwoThreadsFailAtOnce) {
  auto errors = run_ranks(2, [&](Group& g) {
    auto buf = allocate(g, 4096);
    auto* x = static_cast<float*>(buf.ptr(g.rank()));
    x[0] = 1.0f;
    if (g.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      all_reduce(buf, 1, DType::f32, ReduceOp::sum);
      EXPECT_EQ(x[0], 2.0f);
      return;
    }
    std::thread second([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the first op is waiting
      const auto t0 = Clock::now();
      expect_error([&] { barrier(g); }, ErrorCode::InvalidArgument,
                   {"another thread", "all_reduce", "split()"});
      EXPECT_LT(ms_since(t0), 1000.0);  // at once: no wait on anyone
    });
    all_reduce(buf, 1, DType::f32, ReduceOp::sum);  // waits for rank 1's
    EXPECT_EQ(x[0], 2.0f);
    second.join();
  });
  expect_no_errors(errors);
}

// The way to run collectives from two threads at once: a group each.
TEST(HostRecovery, TwoThreadsWithAGroupEachRunAtOnce) {
  auto errors = run_ranks(2, [&](Group& g) {
    Group a = g.split({0, 1});
    Group b = g.split({0, 1});  // a second subgroup of the same ranks
    auto run = [](const Group& sub, float v) {
      auto buf = allocate(sub, 4096);
      auto* x = static_cast<float*>(buf.ptr(sub.rank()));
      for (int round = 0; round < 50; ++round) {
        x[0] = v;
        all_reduce(buf, 1, DType::f32, ReduceOp::sum);
        ASSERT_EQ(x[0], 2 * v);
      }
    };
    std::thread t([&] { run(b, 3.0f); });
    run(a, 1.0f);
    t.join();
  });
  expect_no_errors(errors);
}

TEST(HostRecovery, FailedRanksIsEmptyWhileAllLive) {
  auto errors = run_ranks(2, [&](Group& g) { EXPECT_TRUE(g.failed_ranks().empty()); });
  expect_no_errors(errors);
}

}  // namespace
}  // namespace symmem::test
