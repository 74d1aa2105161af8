// Rank claims (NOTE [rank claims] in core/group.cpp), in one process: another process's claim
// is planted in the store with detail::rank_claim_value(pid) of a child process.

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "core/group_impl.hpp"
#include "symmem/error.hpp"
#include "symmem/group.hpp"
#include "symmem/store.hpp"
#include "test_util.hpp"

extern char** environ;

using symmem::ErrorCode;
using symmem::Group;
using symmem::GroupOptions;
using symmem::HashStore;
using symmem::Millis;

namespace {

using Clock = std::chrono::steady_clock;

// A child process that sleeps until killed.
struct Sleeper {
  pid_t pid = -1;
  Sleeper() {
    char sh[] = "/bin/sh", c[] = "-c", cmd[] = "exec sleep 60";
    char* argv[] = {sh, c, cmd, nullptr};
    EXPECT_EQ(posix_spawn(&pid, "/bin/sh", nullptr, nullptr, argv, environ), 0);
  }
  void stop() {
    if (pid <= 0) return;
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    pid = -1;
  }
  ~Sleeper() { stop(); }
};

std::string host_pid(pid_t pid) {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return std::string(host) + ":" + std::to_string(pid);
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

TEST(RankClaims, SecondClaimantFailsAtOnceAndTheJobIsTold) {
  Sleeper other;  // holds rank 1 "first"
  auto store = std::make_shared<HashStore>();
  store->set("symmem/rank/1/claim", symmem::detail::rank_claim_value(other.pid));
  GroupOptions o;
  o.timeout = Millis(30000);

  // Rank 0 joins first and waits for rank 1.
  auto t0 = Clock::now();
  auto rank0 = std::async(std::launch::async, [&] {
    try {
      Group::create(store, 0, 2, o);
      return std::string("no error");
    } catch (const symmem::Error& e) {
      return std::string(symmem::to_string(e.code())) + ": " + e.what();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));

  const std::string line = "rank 1 is claimed by two processes: " + host_pid(other.pid) +
                           " (first) and " + host_pid(getpid());
  symmem::test::expect_error([&] { Group::create(store, 1, 2, o); }, ErrorCode::InvalidArgument,
                             {"Group::create", line.c_str(), "is the second"});
  EXPECT_LT(seconds_since(t0), 1.0);
  EXPECT_EQ(symmem::detail::job_abort_reason(*store),
            std::string(symmem::detail::kJobAbortInvalidPrefix) + line +
                "; every process of a job needs its own rank");

  // The waiting rank fails with the same line within a slice, not at its 30 s timeout.
  ASSERT_EQ(rank0.wait_for(std::chrono::seconds(2)), std::future_status::ready);
  std::string r0 = rank0.get();
  EXPECT_EQ(r0.rfind("InvalidArgument: ", 0), 0u) << r0;
  EXPECT_NE(r0.find(line), std::string::npos) << r0;
  EXPECT_LT(seconds_since(t0), 2.0);
}

TEST(RankClaims, ClaimOfAProcessThatIsGoneIsTakenOver) {
  auto store = std::make_shared<HashStore>();
  {
    Sleeper gone;
    store->set("symmem/rank/1/claim", symmem::detail::rank_claim_value(gone.pid));
  }  // killed and reaped: its claim is stale
  auto rank1 = std::async(std::launch::async, [&] { return Group::create(store, 1, 2); });
  Group g0 = Group::create(store, 0, 2);
  Group g1 = rank1.get();
  EXPECT_EQ(g1.rank(), 1);
  EXPECT_EQ(symmem::to_string(store->get("symmem/rank/1/claim", Millis(0))),
            symmem::to_string(symmem::detail::rank_claim_value(getpid())));
  EXPECT_EQ(symmem::detail::job_abort_reason(*store), "");
}

TEST(RankClaims, ReleasedWhenTheLastGroupOfTheProcessEnds) {
  auto store = std::make_shared<HashStore>();
  const std::string mine = symmem::to_string(symmem::detail::rank_claim_value(getpid()));
  {
    auto rank1 = std::async(std::launch::async, [&] { return Group::create(store, 1, 2); });
    Group a0 = Group::create(store, 0, 2);
    Group a1 = rank1.get();
    {
      // A second root group of the same ranks in this process is no duplicate.
      auto again = std::async(std::launch::async, [&] { return Group::create(store, 1, 2); });
      Group b0 = Group::create(store, 0, 2);
      Group b1 = again.get();
      EXPECT_EQ(b1.name(), "g1");
    }
    EXPECT_EQ(symmem::to_string(store->get("symmem/rank/1/claim", Millis(0))), mine)
        << "released while another group of this process still holds the rank";
  }
  EXPECT_TRUE(store->get("symmem/rank/0/claim", Millis(0)).empty());
  EXPECT_TRUE(store->get("symmem/rank/1/claim", Millis(0)).empty());
}

TEST(RankClaims, WorldOfOneClaimsNothing) {
  auto store = std::make_shared<HashStore>();
  Group g = Group::create(store, 0, 1);
  EXPECT_FALSE(store->check({"symmem/rank/0/claim"}));
}
