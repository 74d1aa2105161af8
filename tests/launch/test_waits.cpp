// Waits that report and ranks claimed twice, over real processes started by symmem-run (the
// worker, mp_waits_worker.cpp, bends its rank variables to make a rank absent or doubled).
//   - a wait for an absent rank logs WARN lines naming it at SYMMEM_WAIT_REPORT_S intervals
//     (NOTE [wait reports] in core/wait_report.hpp), in group creation, a CPU barrier and the
//     wait at exit;
//   - a rank started twice fails both claimants, and the rest of the job, within 2 s with
//     InvalidArgument naming the rank and both processes (NOTE [rank claims] in core/group.cpp).

#include <map>
#include <regex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "run_util.hpp"

using namespace symmem::test;

namespace {

struct Outcome {
  std::string code, what;
  int ms = 0;
};

struct Job {
  Result run;
  std::multimap<int, Outcome> results;            // by rank (a doubled rank has two)
  std::map<int, std::vector<int>> pids;           // rank -> pids
  std::map<int, std::vector<std::string>> warns;  // symmem-run slot -> its WARN lines
};

Job run_job(int n, std::vector<std::string> worker_args, std::vector<std::string> env,
            double limit_s = 60) {
  std::vector<std::string> args = {"-n", std::to_string(n),  "--timeout", "60",
                                   "--", SYMMEM_WAITS_WORKER};
  args.insert(args.end(), worker_args.begin(), worker_args.end());
  Job j;
  j.run = run(args, limit_s, nullptr, env);
  std::regex result(R"(\[\d+\] RESULT rank=(-?\d+) code=(\w+) ms=(\d+) what=(.*))");
  std::regex pid(R"(\[\d+\] PID rank=(-?\d+) pid=(\d+))");
  for (const auto& l : lines(j.run.out)) {
    std::smatch m;
    if (std::regex_match(l, m, result)) {
      j.results.insert({std::stoi(m[1]), {m[2], m[4], std::stoi(m[3])}});
    } else if (std::regex_match(l, m, pid)) {
      j.pids[std::stoi(m[1])].push_back(std::stoi(m[2]));
    }
  }
  std::regex warn(R"(\[(\d+)\] .* symmem WARN .*)");
  for (const auto& l : lines(j.run.err)) {
    std::smatch m;
    if (std::regex_match(l, m, warn)) j.warns[std::stoi(m[1])].push_back(l);
  }
  return j;
}

std::string dump(const Job& j) {
  return "stdout:\n" + j.run.out + "stderr:\n" + j.run.err;
}

}  // namespace

TEST(WaitReport, GroupCreationNamesTheAbsentRank) {
  // Ranks 0 and 1 of 3: rank 2 never starts. 6 s timeout, a line every 2 s.
  Job j = run_job(2, {"absent", "3"}, {"SYMMEM_TIMEOUT_MS=6000", "SYMMEM_WAIT_REPORT_S=2"});
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<std::string> about;
    for (const auto& l : j.warns[rank]) {
      if (contains(l,
                   "group g0: creation (3 ranks): rank " + std::to_string(rank) + " has waited ") &&
          contains(l, " for rank 2 (2 of 3 arrived); ") &&
          contains(l, " left of the 6.0 s timeout")) {
        about.push_back(l);
      }
    }
    EXPECT_GE(about.size(), 2u) << "rank " << rank << " reported too little:\n" << dump(j);
    auto it = j.results.find(rank);
    ASSERT_NE(it, j.results.end()) << dump(j);
    EXPECT_EQ(it->second.code, "Timeout") << it->second.what;
    EXPECT_TRUE(contains(it->second.what, "rank 2 did not arrive within 6000 ms"))
        << it->second.what;
  }
}

TEST(WaitReport, OffWithZero) {
  Job j = run_job(2, {"absent", "3"}, {"SYMMEM_TIMEOUT_MS=2500", "SYMMEM_WAIT_REPORT_S=0"});
  EXPECT_EQ(j.results.size(), 2u) << dump(j);
  for (const auto& [slot, warns] : j.warns) {
    for (const auto& l : warns) EXPECT_FALSE(contains(l, "has waited")) << l;
  }
}

TEST(WaitReport, CpuBarrierNamesTheLateRank) {
  Job j = run_job(3, {"barrier"}, {"SYMMEM_TIMEOUT_MS=30000", "SYMMEM_WAIT_REPORT_S=1"});
  EXPECT_EQ(j.run.rc, 0) << dump(j);
  for (int rank : {0, 2}) {
    int about = 0;
    for (const auto& l : j.warns[rank]) {
      if (contains(l, "symmem WARN COLL barrier (CPU sync of group g0): rank " +
                          std::to_string(rank) + " has waited ") &&
          contains(l, " for rank 1 (2 of 3 arrived); ")) {
        ++about;
      }
    }
    EXPECT_GE(about, 2) << "rank " << rank << ":\n" << dump(j);
  }
  for (const auto& [rank, o] : j.results) EXPECT_EQ(o.code, "OK") << rank << ": " << o.what;
}

TEST(WaitReport, CollectiveTimeoutNamesTheAbsentRank) {
  // 3 ranks: with more ranks than cores the agreement waits at the arrival counter (NOTE
  // [arrival barrier] in core/pad_sync.hpp), else at rank 1's pad slot; both name rank 1.
  Job j = run_job(3, {"absent_op"}, {"SYMMEM_TIMEOUT_MS=30000", "SYMMEM_WAIT_REPORT_S=1"});
  for (int rank : {0, 2}) {
    auto it = j.results.find(rank);
    ASSERT_NE(it, j.results.end()) << dump(j);
    EXPECT_EQ(it->second.code, "Timeout") << it->second.what;
    EXPECT_TRUE(contains(it->second.what, "all_reduce: rank " + std::to_string(rank)))
        << it->second.what;
    EXPECT_TRUE(
        contains(it->second.what, "timed out after 1500 ms waiting for rank(s) 1 to arrive") ||
        contains(it->second.what, "timed out after 1500 ms waiting for rank 1 "))
        << it->second.what;
    EXPECT_GE(it->second.ms, 1400) << it->second.what;
    int about = 0;
    for (const auto& l : j.warns[rank])
      if (contains(l, "all_reduce (CPU sync of group g0): rank " + std::to_string(rank) +
                          " has waited ") &&
          contains(l, " for rank 1 (2 of 3 arrived); "))
        ++about;
    EXPECT_GE(about, 1) << "rank " << rank << ":\n" << dump(j);
  }
  auto one = j.results.find(1);
  ASSERT_NE(one, j.results.end()) << dump(j);
  EXPECT_EQ(one->second.code, "OK") << one->second.what;
}

TEST(WaitReport, ExitWaitNamesRanksNotCheckedOut) {
  Job j = run_job(2, {"exit"}, {"SYMMEM_TIMEOUT_MS=30000", "SYMMEM_WAIT_REPORT_S=1"});
  EXPECT_EQ(j.run.rc, 0) << dump(j);
  int about = 0;
  for (const auto& l : j.warns[0]) {
    if (contains(l, "group g0: exit (rank 0 hosts the store): rank 0 has waited ") &&
        contains(l, " for rank 1 to check out (0 of 1 did); ")) {
      ++about;
    }
  }
  EXPECT_GE(about, 2) << dump(j);
}

TEST(DuplicateRank, BothClaimantsAndTheJobFailWithin2s) {
  // Ranks 0, 1, 2 and a second 2 of a world of 4: rank 3 never arrives, so without the claim
  // everybody would wait for the 30 s timeout.
  Job j = run_job(4, {"dup"}, {"SYMMEM_TIMEOUT_MS=30000"});
  ASSERT_EQ(j.pids[2].size(), 2u) << dump(j);
  ASSERT_EQ(j.results.size(), 4u) << dump(j);
  const std::vector<int>& dups = j.pids[2];
  for (const auto& [rank, o] : j.results) {
    EXPECT_EQ(o.code, "InvalidArgument") << "rank " << rank << ": " << o.what;
    EXPECT_TRUE(contains(o.what, "rank 2 is claimed by two processes: ")) << o.what;
    // Both claimants are named, host:pid; which one came first is a race.
    for (int pid : dups) {
      EXPECT_TRUE(contains(o.what, ":" + std::to_string(pid) + " (first)") ||
                  contains(o.what, ":" + std::to_string(pid) + "; every process"))
          << "pid " << pid << " not named: " << o.what;
    }
    EXPECT_LT(o.ms, 2000) << "rank " << rank << ": " << o.what;
  }
  auto [b, e] = j.results.equal_range(2);
  int second = 0;
  for (auto it = b; it != e; ++it) second += contains(it->second.what, "is the second") ? 1 : 0;
  EXPECT_EQ(second, 1) << dump(j);
}
