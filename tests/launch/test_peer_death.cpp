// A rank SIGKILLed during a store exchange: every other rank must fail with PeerFailure or
// Timeout naming it, within the timeout (plus a margin), and symmem-run must exit non-zero with
// a summary naming it.

#include <map>
#include <regex>
#include <string>

#include <gtest/gtest.h>

#include "run_util.hpp"

using namespace symmem::test;

namespace {

struct Outcome {
  std::string code, what;
  int ms = 0;
};

// Runs the worker under symmem-run with --fail-grace; returns each survivor's outcome.
std::map<int, Outcome> kill_during(int nranks, int victim, const std::string& mode) {
  // symmem-run publishes the death in the store, and the store Group::from_env() hands out
  // fails waits on it at once: errors come well before the timeout.
  const int timeout_ms = 20000;
  const int margin_ms = 0;
  const int fast_ms = 3000;
  auto r = run({"-n", std::to_string(nranks), "--fail-grace", "30", "--timeout", "90", "--",
                SYMMEM_PEER_DEATH_WORKER, std::to_string(victim), mode},
               120, nullptr, {"SYMMEM_TIMEOUT_MS=" + std::to_string(timeout_ms)});
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(contains(
      r.err, "symmem-run: rank " + std::to_string(victim) + " killed by signal 9 (Killed)"))
      << r.err;
  std::map<int, Outcome> results;
  std::regex re(R"(\[(\d+)\] RESULT rank=(\d+) code=(\w+) ms=(\d+) what=(.*))");
  for (const auto& l : lines(r.out)) {
    std::smatch m;
    if (std::regex_match(l, m, re)) results[std::stoi(m[1])] = {m[3], m[5], std::stoi(m[4])};
  }
  for (int rank = 0; rank < nranks; ++rank) {
    if (rank == victim) continue;
    EXPECT_EQ(results.count(rank), 1u) << "rank " << rank << " reported nothing:\n"
                                       << r.out << r.err;
    if (results.count(rank) == 0) continue;
    const auto& o = results[rank];
    EXPECT_TRUE(o.code == "PeerFailure" || o.code == "Timeout")
        << "rank " << rank << ": " << o.code;
    EXPECT_TRUE(contains(o.what, "rank " + std::to_string(victim)))
        << "rank " << rank << "'s error does not name rank " << victim << ": " << o.what;
    EXPECT_LE(o.ms, timeout_ms + margin_ms) << "rank " << rank << ": " << o.what;
    EXPECT_LE(o.ms, fast_ms) << "rank " << rank << " noticed the death only after " << o.ms
                             << " ms: " << o.what;
  }
  return results;
}

}  // namespace

TEST(PeerDeath, KilledDuringExchange) {
  kill_during(4, 2, "exchange");
}
TEST(PeerDeath, RankZeroKilledDuringExchange) {
  kill_during(3, 0, "exchange");
}

TEST(PeerDeath, KilledDuringStoreBarrierIsAPeerFailureNamingTheCause) {
  for (const auto& [rank, o] : kill_during(4, 1, "barrier")) {
    EXPECT_EQ(o.code, "PeerFailure") << "rank " << rank << ": " << o.what;
    EXPECT_TRUE(contains(o.what, "the launcher reports: rank 1 killed by signal 9 (Killed)"))
        << o.what;
  }
}
