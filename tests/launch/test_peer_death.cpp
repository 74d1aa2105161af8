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

void kill_during_exchange(int nranks, int victim) {
  const int timeout_ms = 3000;
  const int margin_ms = 3000;
  auto r = run({"-n", std::to_string(nranks), "--fail-grace", "30", "--timeout", "90", "--",
                SYMMEM_PEER_DEATH_WORKER, std::to_string(victim)},
               120, nullptr, {"SYMMEM_TIMEOUT_MS=" + std::to_string(timeout_ms)});
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(contains(
      r.err, "symmem-run: rank " + std::to_string(victim) + " killed by signal 9 (Killed)"))
      << r.err;
  std::map<int, std::smatch> results;
  std::regex re(R"(\[(\d+)\] RESULT rank=(\d+) code=(\w+) ms=(\d+) what=(.*))");
  auto out = lines(r.out);
  for (const auto& l : out) {
    std::smatch m;
    if (std::regex_match(l, m, re)) results[std::stoi(m[1])] = m;
  }
  for (int rank = 0; rank < nranks; ++rank) {
    if (rank == victim) continue;
    ASSERT_EQ(results.count(rank), 1u) << "rank " << rank << " reported nothing:\n"
                                       << r.out << r.err;
    const auto& m = results[rank];
    std::string code = m[3], what = m[5];
    EXPECT_TRUE(code == "PeerFailure" || code == "Timeout") << "rank " << rank << ": " << code;
    EXPECT_TRUE(contains(what, "rank " + std::to_string(victim)))
        << "rank " << rank << "'s error does not name rank " << victim << ": " << what;
    EXPECT_LE(std::stoi(m[4]), timeout_ms + margin_ms) << "rank " << rank << ": " << what;
  }
}

}  // namespace

TEST(PeerDeath, KilledDuringExchange) {
  kill_during_exchange(4, 2);
}
TEST(PeerDeath, RankZeroKilledDuringExchange) {
  kill_during_exchange(3, 0);
}
