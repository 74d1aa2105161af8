// symmem-run, driven from outside: environment, output relay, failures, signals, timeout, skip,
// CPU binding.

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "run_util.hpp"

using namespace symmem::test;

TEST(SymmemRun, EveryRankGetsItsEnvironment) {
  auto r = run({"-n", "3", "--", "sh", "-c", "echo $RANK/$WORLD_SIZE/$LOCAL_RANK/$MASTER_PORT"});
  EXPECT_EQ(r.rc, 0) << r.err;
  auto out = lines(r.out);
  ASSERT_EQ(out.size(), 3u) << r.out;
  std::set<std::string> got(out.begin(), out.end());
  std::smatch m;
  ASSERT_TRUE(std::regex_match(out[0], m, std::regex(R"(\[\d\] \d/3/\d/(\d+))"))) << out[0];
  std::string port = m[1];
  EXPECT_GT(std::stoi(port), 0);
  for (int i = 0; i < 3; ++i) {
    std::string want =
        "[" + std::to_string(i) + "] " + std::to_string(i) + "/3/" + std::to_string(i) + "/" + port;
    EXPECT_EQ(got.count(want), 1u) << "missing '" << want << "' in\n" << r.out;
  }
  EXPECT_EQ(r.err, "");
}

TEST(SymmemRun, SymmemVariablesAndStore) {
  auto r = run({"-n", "2", "sh", "-c",
                "echo $SYMMEM_RANK,$SYMMEM_WORLD_SIZE,$SYMMEM_LOCAL_RANK,$SYMMEM_LOCAL_WORLD_SIZE,"
                "$LOCAL_WORLD_SIZE,$MASTER_ADDR,$SYMMEM_STORE_TOKEN,$SYMMEM_STORE"});
  EXPECT_EQ(r.rc, 0) << r.err;
  auto out = lines(r.out);
  ASSERT_EQ(out.size(), 2u);
  std::regex re(R"(\[(\d)\] (\d),2,(\d),2,2,127\.0\.0\.1,([0-9a-f]{32}),(.*))");
  std::set<std::string> tokens, stores;
  for (const auto& l : out) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(l, m, re)) << l;
    EXPECT_EQ(m[1], m[2]);
    EXPECT_EQ(m[1], m[3]);
    tokens.insert(m[4]);
    stores.insert(m[5]);
  }
  EXPECT_EQ(tokens.size(), 1u);  // one token for the job
  ASSERT_EQ(stores.size(), 1u);
  EXPECT_TRUE(std::regex_match(*stores.begin(), std::regex(R"(tcp://127\.0\.0\.1:\d+)")))
      << *stores.begin();
  // A second job gets another token.
  auto r2 = run({"-n", "1", "sh", "-c", "echo $SYMMEM_STORE_TOKEN"});
  EXPECT_EQ(contains(r2.out, *tokens.begin()), false);
}

TEST(SymmemRun, OutputIsPrefixedPerLineAndStreamsStayApart) {
  // 3 ranks write 300 long lines each to stdout and stderr, in small pieces.
  std::string script =
      "i=0; while [ $i -lt 300 ]; do "
      "printf 'out-%s-%s-' $RANK $i; printf '%0200d\\n' 0; "
      "printf 'err-%s-%s\\n' $RANK $i >&2; i=$((i+1)); done; printf 'tail-no-newline'";
  auto r = run({"-n", "3", "--", "sh", "-c", script});
  EXPECT_EQ(r.rc, 0) << r.err;
  auto out = lines(r.out);
  auto err = lines(r.err);
  EXPECT_EQ(out.size(), 3u * 301u);
  EXPECT_EQ(err.size(), 3u * 300u);
  std::regex out_re(R"(\[(\d)\] out-(\d)-\d+-0{200}|\[(\d)\] tail-no-newline)");
  std::regex err_re(R"(\[(\d)\] err-(\d)-\d+)");
  for (const auto& l : out) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(l, m, out_re)) << "mangled stdout line: " << l;
    if (m[1].matched) EXPECT_EQ(m[1], m[2]);
  }
  for (const auto& l : err) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(l, m, err_re)) << "mangled stderr line: " << l;
    EXPECT_EQ(m[1], m[2]);
  }
}

TEST(SymmemRun, FailingRankStopsTheJobAndIsNamed) {
  auto r = run({"-n", "3", "--", "sh", "-c", "if [ $RANK = 1 ]; then exit 7; fi; sleep 60"});
  EXPECT_NE(r.rc, 0);
  EXPECT_LT(r.seconds, 10);
  EXPECT_TRUE(contains(r.err, "symmem-run: rank 1 exited with code 7")) << r.err;
  // One line per failed rank; the others were stopped.
  EXPECT_TRUE(contains(r.err, "symmem-run: rank 0 killed by signal 15 (Terminated)")) << r.err;
  EXPECT_TRUE(contains(r.err, "symmem-run: rank 2 killed by signal 15 (Terminated)")) << r.err;
  ASSERT_FALSE(lines(r.err).empty());
  EXPECT_EQ(lines(r.err)[0].rfind("symmem-run: rank 1", 0), 0u) << "first failure first:\n"
                                                                << r.err;
}

TEST(SymmemRun, RankKilledBySignalIsNamed) {
  auto r = run({"-n", "3", "--", "sh", "-c", "if [ $RANK = 2 ]; then kill -9 $$; fi; sleep 60"});
  EXPECT_NE(r.rc, 0);
  EXPECT_LT(r.seconds, 10);
  EXPECT_TRUE(contains(r.err, "symmem-run: rank 2 killed by signal 9 (Killed)")) << r.err;
}

TEST(SymmemRun, RankIgnoringTermIsKilledAfterGrace) {
  auto r = run({"-n", "2", "--kill-grace", "1", "--", "sh", "-c",
                "trap '' TERM; if [ $RANK = 0 ]; then sleep 0.3; exit 3; fi; "
                "while true; do sleep 0.05; done"});
  EXPECT_NE(r.rc, 0);
  EXPECT_GT(r.seconds, 0.9);
  EXPECT_LT(r.seconds, 8);
  EXPECT_TRUE(contains(r.err, "rank 0 exited with code 3")) << r.err;
  EXPECT_TRUE(contains(r.err, "rank 1 killed by signal 9 (Killed)")) << r.err;
}

TEST(SymmemRun, FailGraceLetsTheOthersEndOnTheirOwn) {
  auto r = run({"-n", "3", "--fail-grace", "20", "--", "sh", "-c",
                "if [ $RANK = 0 ]; then exit 4; fi; sleep 0.5; echo done $RANK; exit 9"});
  EXPECT_NE(r.rc, 0);
  EXPECT_LT(r.seconds, 10);
  EXPECT_TRUE(contains(r.out, "[1] done 1")) << r.out;
  EXPECT_TRUE(contains(r.err, "rank 0 exited with code 4")) << r.err;
  EXPECT_TRUE(contains(r.err, "rank 2 exited with code 9")) << r.err;
}

TEST(SymmemRun, TimeoutStopsEverything) {
  auto r = run({"-n", "2", "--timeout", "1", "--", "sleep", "60"});
  EXPECT_EQ(r.rc, 124);
  EXPECT_GT(r.seconds, 0.9);
  EXPECT_LT(r.seconds, 8);
  EXPECT_TRUE(contains(r.err, "timeout")) << r.err;
  EXPECT_TRUE(contains(r.err, "rank 0 killed by signal 15")) << r.err;
  EXPECT_TRUE(contains(r.err, "rank 1 killed by signal 15")) << r.err;
}

TEST(SymmemRun, EveryRankSkippingIsASkip) {
  auto r = run({"-n", "4", "--", "sh", "-c", "exit 77"});
  EXPECT_EQ(r.rc, 77);
  EXPECT_EQ(r.err, "");
  // Ranks that skip at slightly different times still count as a skip.
  r = run({"-n", "3", "--", "sh", "-c", "sleep 0.$RANK; exit 77"});
  EXPECT_EQ(r.rc, 77) << r.err;
  // Some skip, some pass: that is a failure.
  r = run({"-n", "2", "--", "sh", "-c", "if [ $RANK = 1 ]; then exit 77; fi; exit 0"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.err, "rank 1 exited with code 77")) << r.err;
}

TEST(SymmemRun, ExitsZeroOnlyWhenAllRanksDo) {
  EXPECT_EQ(run({"-n", "4", "true"}).rc, 0);
  auto r = run({"-n", "2", "--", "sh", "-c", "exit $RANK"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.err, "rank 1 exited with code 1")) << r.err;
}

TEST(SymmemRun, ForwardsSigtermToTheRanks) {
  auto r =
      run({"-n", "2", "--", "sh", "-c", "trap 'echo term $RANK; exit 0' TERM; sleep 60 & wait"}, 30,
          [](pid_t pid) {
            std::this_thread::sleep_for(std::chrono::milliseconds(500));
            kill(pid, SIGTERM);
          });
  EXPECT_EQ(r.rc, 128 + SIGTERM) << r.err;
  EXPECT_LT(r.seconds, 8);
  EXPECT_TRUE(contains(r.out, "[0] term 0")) << r.out;
  EXPECT_TRUE(contains(r.out, "[1] term 1")) << r.out;
}

TEST(SymmemRun, LeavesNoProcessBehind) {
  auto r = run({"-n", "2", "--", "sh", "-c", "sleep 300 & echo $!"});
  EXPECT_EQ(r.rc, 0);
  auto out = lines(r.out);
  ASSERT_EQ(out.size(), 2u);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  for (const auto& l : out) {
    pid_t p = std::stoi(l.substr(l.find(' ') + 1));
    EXPECT_FALSE(pid_alive(p)) << "background process " << p << " of a rank survived";
  }
}

TEST(SymmemRun, BadUsageAndMissingProgram) {
  auto r = run({"--", "true"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_TRUE(contains(r.err, "-n N is required")) << r.err;
  r = run({"-n", "0", "true"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_TRUE(contains(r.err, "1..4096")) << r.err;
  r = run({"-n", "2", "--timeout", "soon", "true"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_TRUE(contains(r.err, "--timeout")) << r.err;
  r = run({"-n", "2", "--bogus", "true"});
  EXPECT_EQ(r.rc, 2);
  r = run({"-n", "2"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_TRUE(contains(r.err, "no PROGRAM")) << r.err;
  r = run({"-n", "2", "--", "/definitely/not/here"});
  EXPECT_EQ(r.rc, 127);
  EXPECT_TRUE(contains(r.err, "cannot execute '/definitely/not/here'")) << r.err;
  r = run({"-n2", "true"});
  EXPECT_EQ(r.rc, 0) << r.err;
}

TEST(SymmemRun, SecondSigintKillsAtOnce) {
  auto r = run({"-n", "2", "--kill-grace", "30", "--", "sh", "-c",
                "trap 'echo int $RANK' INT; while true; do sleep 0.05; done"},
               30, [](pid_t pid) {
                 std::this_thread::sleep_for(std::chrono::milliseconds(400));
                 kill(pid, SIGINT);
                 std::this_thread::sleep_for(std::chrono::milliseconds(300));
                 kill(pid, SIGINT);
               });
  EXPECT_EQ(r.rc, 128 + SIGINT) << r.err;
  EXPECT_LT(r.seconds, 10);  // not the 30 s kill grace
  EXPECT_TRUE(contains(r.out, "[0] int 0")) << r.out;
  EXPECT_TRUE(contains(r.err, "rank 1 killed by signal 9 (Killed)")) << r.err;
}

TEST(SymmemRun, RanksDieWithTheLauncher) {
  char path[] = "/tmp/symmem-run-test-pids-XXXXXX";
  int fd = mkstemp(path);
  close(fd);
  std::string file = path;
  auto r = run({"-n", "2", "--", "sh", "-c", "echo $$ >> " + file + "; exec sleep 60"}, 30,
               [&](pid_t pid) {
                 for (int i = 0; i < 200 && lines(slurp(file)).size() < 2; ++i) {
                   std::this_thread::sleep_for(std::chrono::milliseconds(10));
                 }
                 kill(pid, SIGKILL);
               });
  EXPECT_EQ(r.rc, 128 + SIGKILL);
  auto pids = lines(slurp(file));
  unlink(path);
  ASSERT_EQ(pids.size(), 2u);
  for (int i = 0; i < 100; ++i) {
    if (!pid_alive(std::stoi(pids[0])) && !pid_alive(std::stoi(pids[1]))) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (const auto& p : pids) EXPECT_FALSE(pid_alive(std::stoi(p))) << "rank pid " << p;
}

// ---- binding (NOTE [rank binding] in tools/run/binding.hpp) -------------------------------------

namespace {

std::vector<int> own_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  std::vector<int> v;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) v.push_back(c);
  return v;
}

// Each rank's CPUs as print_affinity reports them, by rank.
std::map<int, std::set<int>> rank_cpus(const std::string& out) {
  std::map<int, std::set<int>> m;
  std::regex re(R"(\[(\d+)\] cpus ([0-9,]*))");
  for (const auto& l : lines(out)) {
    std::smatch s;
    if (!std::regex_match(l, s, re)) {
      ADD_FAILURE() << "unexpected line '" << l << "'";
      continue;
    }
    std::set<int>& cpus = m[std::stoi(s[1])];
    std::stringstream in(s[2]);
    for (std::string c; std::getline(in, c, ',');) cpus.insert(std::stoi(c));
  }
  return m;
}

std::string str(const std::set<int>& s) {
  std::string o;
  for (int c : s) o += (o.empty() ? "" : ",") + std::to_string(c);
  return o;
}

// Runs `body` with this process (and so the symmem-run it spawns) restricted to `cpus`.
void with_affinity(const std::vector<int>& cpus, const std::function<void()>& body) {
  cpu_set_t old, set;
  ASSERT_EQ(sched_getaffinity(0, sizeof(old), &old), 0);
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(c, &set);
  ASSERT_EQ(sched_setaffinity(0, sizeof(set), &set), 0);
  body();
  ASSERT_EQ(sched_setaffinity(0, sizeof(old), &old), 0);
}

}  // namespace

TEST(SymmemRunBinding, BindToCoreGivesEachRankOneDistinctCpu) {
  const std::vector<int> mine = own_cpus();
  if (mine.size() < 2)
    GTEST_SKIP() << "this process may use " << mine.size() << " CPU(s); binding 2 ranks to "
                 << "distinct CPUs needs 2";
  auto r = run({"-n", "2", "--bind-to", "core", "--", SYMMEM_PRINT_AFFINITY});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(r.note, "");
  auto m = rank_cpus(r.out);
  ASSERT_EQ(m.size(), 2u) << r.out;
  std::set<int> all;
  for (const auto& [rank, cpus] : m) {
    // One core each: one CPU unless the core has several hardware threads we may use.
    EXPECT_GE(cpus.size(), 1u) << "rank " << rank;
    if (mine.size() <= 2) EXPECT_EQ(cpus.size(), 1u) << "rank " << rank << ": " << str(cpus);
    for (int c : cpus) {
      EXPECT_TRUE(std::find(mine.begin(), mine.end(), c) != mine.end())
          << "rank " << rank << " got CPU " << c << ", outside symmem-run's own mask";
      EXPECT_TRUE(all.insert(c).second) << "CPU " << c << " given to two ranks:\n" << r.out;
    }
  }
  // The default binds too (a core, or a NUMA node, of its own), with nothing shared.
  auto d = run({"-n", "2", "--report-bindings", "--", SYMMEM_PRINT_AFFINITY});
  ASSERT_EQ(d.rc, 0) << d.err;
  auto dm = rank_cpus(d.out);
  ASSERT_EQ(dm.size(), 2u) << d.out;
  for (int c : dm[0]) EXPECT_EQ(dm[1].count(c), 0u) << "CPU " << c << " given to both:\n" << d.out;
  EXPECT_FALSE(dm[0].empty() || dm[1].empty()) << d.out;
  EXPECT_TRUE(contains(d.err, "symmem-run: rank 0: bound to CPUs ")) << d.err;
  EXPECT_TRUE(contains(d.err, "symmem-run: rank 1: bound to CPUs ")) << d.err;
}

TEST(SymmemRunBinding, NoneKeepsTheLaunchersMask) {
  const std::vector<int> mine = own_cpus();
  std::set<int> want(mine.begin(), mine.end());
  auto r = run({"-n", "2", "--bind-to=none", "--", SYMMEM_PRINT_AFFINITY});
  ASSERT_EQ(r.rc, 0) << r.err;
  auto m = rank_cpus(r.out);
  ASSERT_EQ(m.size(), 2u) << r.out;
  for (const auto& [rank, cpus] : m) EXPECT_EQ(cpus, want) << "rank " << rank;
  EXPECT_EQ(r.note, "");
}

TEST(SymmemRunBinding, MoreRanksThanCpusRunUnboundAndSaySoOnce) {
  const std::vector<int> mine = own_cpus();
  std::set<int> want(mine.begin(), mine.end());
  const int n = static_cast<int>(mine.size()) + 1;
  auto r = run({"-n", std::to_string(n), "--", SYMMEM_PRINT_AFFINITY}, 60);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(lines(r.note).size(), 1u) << r.note;
  EXPECT_TRUE(contains(r.note, std::to_string(n) + " ranks")) << r.note;
  EXPECT_EQ(r.err, "");
  auto m = rank_cpus(r.out);
  ASSERT_EQ(m.size(), static_cast<size_t>(n)) << r.out;
  for (const auto& [rank, cpus] : m) EXPECT_EQ(cpus, want) << "rank " << rank;
  // Asked for explicitly, a core each cannot be had: a usage error that names the way out.
  auto e = run({"-n", std::to_string(n), "--bind-to", "core", "--", SYMMEM_PRINT_AFFINITY}, 60);
  EXPECT_EQ(e.rc, 2);
  EXPECT_TRUE(contains(e.err, "--bind-to none")) << e.err;
  EXPECT_EQ(e.out, "");
}

TEST(SymmemRunBinding, BindsWithinTheMaskItWasStartedUnder) {
  // As under `taskset -c LAST symmem-run ...`: the one rank gets that CPU, not CPU 0.
  const std::vector<int> mine = own_cpus();
  const int last = mine.back();
  with_affinity({last}, [&] {
    auto r = run({"-n", "1", "--", SYMMEM_PRINT_AFFINITY});
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(rank_cpus(r.out), (std::map<int, std::set<int>>{{0, {last}}})) << r.out;
    // Two ranks on that one CPU: unbound, said once.
    r = run({"-n", "2", "--", SYMMEM_PRINT_AFFINITY});
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(lines(r.note).size(), 1u) << r.note;
    EXPECT_EQ(rank_cpus(r.out), (std::map<int, std::set<int>>{{0, {last}}, {1, {last}}}));
  });
}

TEST(SymmemRunBinding, BadValues) {
  for (const char* bad : {"cores", "socket", ""}) {
    auto r = run({"-n", "2", "--bind-to", bad, "--", "true"});
    EXPECT_EQ(r.rc, 2) << bad;
    EXPECT_TRUE(contains(r.err, "--bind-to wants core, numa or none")) << r.err;
  }
  auto r = run({"-n", "2", "--bind-to"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_TRUE(contains(r.err, "--bind-to needs a value")) << r.err;
}
