// AbortAwareStore: sliced waits that fail fast once the job abort key is set.

#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "core/group_impl.hpp"
#include "core/store/group_store.hpp"
#include "symmem/error.hpp"
#include "test_util.hpp"

using symmem::ErrorCode;
using symmem::Millis;
using Clock = std::chrono::steady_clock;

namespace {
double since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}
}  // namespace

TEST(AbortAwareStore, ForwardsAndWaits) {
  auto inner = std::make_shared<symmem::HashStore>();
  symmem::detail::AbortAwareStore s(inner, Millis(20));
  s.set("a", symmem::to_bytes("1"));
  EXPECT_EQ(symmem::to_string(inner->get("a", Millis(10))), "1");
  EXPECT_EQ(s.add("n", 5), 5);
  EXPECT_TRUE(s.check({"a", "n"}));
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // several slices later
    inner->set("b", symmem::to_bytes("2"));
  });
  auto v = s.multi_get({"a", "b"}, Millis(5000));
  late.join();
  EXPECT_EQ(symmem::to_string(v[1]), "2");
  EXPECT_EQ(symmem::to_string(s.get("b", Millis(10))), "2");
  EXPECT_TRUE(s.remove("b"));
  EXPECT_FALSE(s.check({"b"}));
}

TEST(AbortAwareStore, TimeoutNamesMissingKeysAndTheFullTimeout) {
  auto inner = std::make_shared<symmem::HashStore>();
  symmem::detail::AbortAwareStore s(inner, Millis(20));
  inner->set("here", {});
  auto t0 = Clock::now();
  symmem::test::expect_error(
      [&] {
        s.wait({"here", "gone"}, Millis(150));
      },
      ErrorCode::Timeout, {"150 ms", "'gone'"});
  EXPECT_GE(since(t0), 140);
  EXPECT_LT(since(t0), 2000);
  symmem::test::expect_error([&] { s.get("", Millis(10)); }, ErrorCode::InvalidArgument, {"key"});
}

TEST(AbortAwareStore, AbortKeyFailsWaitersFast) {
  auto inner = std::make_shared<symmem::HashStore>();
  symmem::detail::AbortAwareStore s(inner, Millis(50));
  std::thread reporter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    inner->set(symmem::detail::kJobAbortKey,
               symmem::to_bytes("rank 3 killed by signal 9 (Killed)"));
  });
  auto t0 = Clock::now();
  symmem::test::expect_error(
      [&] {
        s.multi_get({"x/0", "x/3"}, Millis(60000));
      },
      ErrorCode::PeerFailure, {"the launcher reports: rank 3 killed by signal 9", "'x/0'"});
  reporter.join();
  EXPECT_LT(since(t0), 2000);  // not the 60 s timeout
  EXPECT_EQ(symmem::detail::job_abort_reason(*inner), "rank 3 killed by signal 9 (Killed)");
}
