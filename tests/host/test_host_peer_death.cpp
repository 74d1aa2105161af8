// A rank SIGKILLed in the middle of a host barrier (or of a signal ring): every surviving rank
// must fail with PeerFailure or Timeout within the timeout plus a margin, and the dead-peer
// detection should make that far quicker than the timeout. Prints each survivor's time to error.

#include <stdlib.h>

#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "run_util.hpp"

using namespace symmem::test;

namespace {

void kill_during(int nranks, int victim, const std::string& mode, int timeout_ms = 10000) {
  const int margin_ms = 3000;
  auto r = run({"-n", std::to_string(nranks), "--fail-grace", "30", "--timeout", "90", "--",
                SYMMEM_HOST_KILL_WORKER, std::to_string(victim), mode},
               120, nullptr, {"SYMMEM_TIMEOUT_MS=" + std::to_string(timeout_ms)});
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(contains(r.err, "rank " + std::to_string(victim) + " killed by signal 9")) << r.err;
  std::regex re(R"(\[(\d+)\] RESULT rank=(\d+) code=(\w+) ms=(\d+) what=(.*))");
  std::map<int, std::smatch> results;
  auto out = lines(r.out);
  for (const auto& l : out) {
    std::smatch m;
    if (std::regex_match(l, m, re)) results[std::stoi(m[1])] = m;
  }
  int name_victim = 0;
  for (int rank = 0; rank < nranks; ++rank) {
    if (rank == victim) continue;
    ASSERT_EQ(results.count(rank), 1u) << "rank " << rank << " reported nothing:\n"
                                       << r.out << r.err;
    const auto& m = results[rank];
    std::string code = m[3], what = m[5];
    int ms = std::stoi(m[4]);
    std::printf("%s np=%d victim=%d: rank %d %s after %d ms: %s\n", mode.c_str(), nranks, victim,
                rank, code.c_str(), ms, what.c_str());
    EXPECT_TRUE(code == "PeerFailure" || code == "Timeout") << "rank " << rank << ": " << what;
    EXPECT_LE(ms, timeout_ms + margin_ms) << "rank " << rank << ": " << what;
    name_victim += contains(what, "rank " + std::to_string(victim) + " ");
  }
  EXPECT_GE(name_victim, 1) << "no survivor named the dead rank " << victim << "\n" << r.out;
}

}  // namespace

TEST(HostPeerDeath, KilledDuringBarrier4) {
  kill_during(4, 2, "barrier");
}
TEST(HostPeerDeath, KilledDuringBarrier8) {
  kill_during(8, 5, "barrier");
}
TEST(HostPeerDeath, KilledDuringSignalRing) {
  kill_during(4, 0, "signal");
}
TEST(HostPeerDeath, LivenessPollNamesDeadRank) {
  kill_during(3, 2, "poll");
}
// Rendezvous waits on the store, which cannot tell that a rank died: Timeout naming it.
TEST(HostPeerDeath, KilledBeforeAllocation) {
  kill_during(4, 1, "alloc", 2000);
}

// A whole job (fds passed, buffers mapped, everything freed) leaves nothing in the socket
// directory nor in /dev/shm.
TEST(HostLeftovers, NothingLeftBehind) {
  namespace fs = std::filesystem;
  auto shm = [] {
    std::set<std::string> s;
    for (const auto& e : fs::directory_iterator("/dev/shm")) s.insert(e.path().string());
    return s;
  };
  char tmpl[] = "/tmp/symmem-leftover-test-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  auto before = shm();
  auto r = run({"-n", "4", "--timeout", "100", "--", SYMMEM_MP_HOST}, 120, nullptr,
               {std::string("SYMMEM_SOCKET_DIR=") + tmpl});
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_TRUE(fs::is_empty(tmpl)) << "left in " << tmpl << ": "
                                  << fs::directory_iterator(tmpl)->path();
  auto after = shm();
  for (const auto& f : after) EXPECT_TRUE(before.count(f)) << "left in /dev/shm: " << f;
  fs::remove_all(tmpl);
}

// SYMMEM_BACKEND=nvshmem where no nvshmem plugin exists: every rank gets BackendUnavailable
// listing the backends that do load. The job runs against a copy of libsymmem in a directory of
// its own (LD_LIBRARY_PATH wins over RUNPATH), so the plugins of the build tree are not beside it.
TEST(HostBackendSelection, SelectedBackendWithoutPlugin) {
  namespace fs = std::filesystem;
  char tmpl[] = "/tmp/symmem-noplugin-test-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  fs::path lib = SYMMEM_LIBRARY;
  for (const auto& e : fs::directory_iterator(lib.parent_path())) {
    std::string f = e.path().filename().string();
    if (f.rfind("libsymmem.so", 0) == 0)
      fs::copy(e.path(), fs::path(tmpl) / f, fs::copy_options::copy_symlinks);
  }
  auto r = run(
      {"-n", "2", "--timeout", "100", "--", SYMMEM_MP_HOST,
       "--gtest_filter=MpHost.UnavailableBackendNamesAvailableOnes"},
      120, nullptr,
      {"SYMMEM_BACKEND=nvshmem", std::string("LD_LIBRARY_PATH=") + tmpl, "SYMMEM_PLUGIN_PATH="});
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "[0] [       OK ] MpHost.UnavailableBackendNamesAvailableOnes"))
      << r.out;
  EXPECT_TRUE(contains(r.out, "[1] [       OK ] MpHost.UnavailableBackendNamesAvailableOnes"))
      << r.out;
  fs::remove_all(tmpl);
}
