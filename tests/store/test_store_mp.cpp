// Multi-process store tests (label mp). The test process hosts the server and starts client
// processes by re-executing itself in a client mode (posix_spawn, so the children are clean
// single-threaded processes), then checks their exit codes and the final store contents.
//
//   test_store_mp                     gtest cases
//   test_store_mp --client MODE ...   one child (see child_main)

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>

#include "core/exchange.hpp"
#include "core/store/tcp_protocol.hpp"
#include "raw_socket.hpp"
#include "test_util.hpp"

extern char** environ;

namespace symmem::test {
namespace {

using namespace std::chrono_literals;

std::string g_self;  // path of this executable

// ---- children ---------------------------------------------------------------------------

std::string value_of(int idx, int i) {
  // Distinct, variable-length values with binary bytes.
  std::string v = "v" + std::to_string(idx) + ":" + std::to_string(i) + ":";
  v.append(static_cast<size_t>((idx * 7 + i) % 97), static_cast<char>((idx + i) % 256));
  return v;
}

std::string key_of(int idx, int i) {
  return "mp/" + std::to_string(idx) + "/" + std::to_string(i);
}

#define CHILD_CHECK(cond, what)                                                       \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      std::fprintf(stderr, "client %d op %d: check failed: %s (%s)\n", idx, i, #cond, \
                   std::string(what).c_str());                                        \
      return 1;                                                                       \
    }                                                                                 \
  } while (0)

// 1000 mixed operations, every result checked.
int mixed_ops(Store& s, int idx, int nclients, int ops) {
  const int peer = (idx + 1) % nclients;
  Bytes chain;  // this client's compare_set chain value
  int adds = 0;
  for (int i = 0; i < ops; ++i) {
    switch (i % 8) {
      case 0:
        s.set(key_of(idx, i), to_bytes(value_of(idx, i)));
        break;
      case 1: {
        auto v = s.get(key_of(idx, i - 1), 10s);
        CHILD_CHECK(to_string(v) == value_of(idx, i - 1), "own value");
        break;
      }
      case 2: {
        int64_t r = s.add("mp/counter", 1);
        ++adds;
        CHILD_CHECK(r >= adds && r <= int64_t(nclients) * ops, std::to_string(r));
        break;
      }
      case 3: {
        Bytes next = to_bytes("cs" + std::to_string(i));
        Bytes got = s.compare_set("mp/cs/" + std::to_string(idx), chain, next);
        CHILD_CHECK(got == next, "compare_set chain");
        // A wrong expectation must not change it.
        Bytes same = s.compare_set("mp/cs/" + std::to_string(idx), to_bytes("nope"), Bytes{1});
        CHILD_CHECK(same == next, "compare_set mismatch");
        chain = next;
        break;
      }
      case 4: {
        // The peer's keys written at its steps 0, 8, ... up to ours: blocks until it gets there.
        std::vector<std::string> keys;
        for (int j = std::max(0, i - 4 - 8 * 3); j <= i - 4; j += 8)
          keys.push_back(key_of(peer, j));
        auto vals = s.multi_get(keys, 60s);
        CHILD_CHECK(vals.size() == keys.size(), "multi_get size");
        for (size_t k = 0; k < keys.size(); ++k) {
          int j = std::max(0, i - 4 - 8 * 3) + 8 * static_cast<int>(k);
          CHILD_CHECK(to_string(vals[k]) == value_of(peer, j), keys[k]);
        }
        break;
      }
      case 5:
        CHILD_CHECK(s.check({key_of(idx, i - 5), key_of(peer, 0)}), "check");
        break;
      case 6: {
        std::string a = "mp/ms/" + std::to_string(idx) + "/a",
                    b = "mp/ms/" + std::to_string(idx) + "/b";
        s.multi_set({a, b}, {to_bytes(value_of(idx, i)), to_bytes(value_of(idx, i + 1))});
        auto v = s.multi_get({b, a}, 1s);
        CHILD_CHECK(to_string(v[0]) == value_of(idx, i + 1) && to_string(v[1]) == value_of(idx, i),
                    "multi_set/multi_get");
        break;
      }
      case 7: {
        std::string scratch = "mp/scratch/" + std::to_string(idx);
        s.set(scratch, to_bytes("x"));
        CHILD_CHECK(s.remove(scratch), "remove existing");
        CHILD_CHECK(!s.remove(scratch), "remove absent");
        CHILD_CHECK(!s.check({scratch}), "removed key gone");
        break;
      }
    }
  }
  s.set("mp/final/" + std::to_string(idx), chain);
  return 0;
}

// Connects with bad credentials or sends hostile bytes, repeatedly, for `ms` milliseconds.
int hostile(uint16_t port, int ms) {
  std::mt19937 rng(static_cast<unsigned>(getpid()));
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  int round = 0;
  while (std::chrono::steady_clock::now() < end) {
    RawSocket raw(port);
    std::vector<uint8_t> b;
    switch (round++ % 4) {
      case 0:  // random garbage
        b.resize(1 + rng() % 2000);
        for (auto& x : b) x = static_cast<uint8_t>(rng());
        break;
      case 1: {  // a frame header announcing a huge body
        tcp::Frame f;
        f.op = tcp::Op::kHello;
        f.values = {Bytes()};
        tcp::encode_frame(f, &b);
        b[8] = b[9] = b[10] = b[11] = 0xff;
        b.resize(tcp::kTcpHeaderBytes);
        break;
      }
      case 2: {  // the wrong token
        tcp::Frame f;
        f.op = tcp::Op::kHello;
        f.values = {to_bytes("not-the-token")};
        tcp::encode_frame(f, &b);
        break;
      }
      case 3: {  // half a frame, then gone
        tcp::Frame f;
        f.op = tcp::Op::kHello;
        f.values = {to_bytes("whatever")};
        tcp::encode_frame(f, &b);
        b.resize(b.size() / 2);
        break;
      }
    }
    raw.send(b);
    if (round % 4 != 3) raw.closed_by_peer(1s);
  }
  return 0;
}

int child_main(int argc, char** argv) {
  // --client MODE ARGS...
  std::string mode = argv[2];
  try {
    if (mode == "tcp" && argc == 8) {
      uint16_t port = static_cast<uint16_t>(std::stoi(argv[3]));
      TcpStore s("127.0.0.1", port, argv[4], 30s);
      return mixed_ops(s, std::stoi(argv[5]), std::stoi(argv[6]), std::stoi(argv[7]));
    }
    if (mode == "file" && argc == 7) {
      FileStore s(argv[3]);
      return mixed_ops(s, std::stoi(argv[4]), std::stoi(argv[5]), std::stoi(argv[6]));
    }
    if (mode == "hostile" && argc == 5) {
      return hostile(static_cast<uint16_t>(std::stoi(argv[3])), std::stoi(argv[4]));
    }
    if (mode == "exchange" && argc == 8) {
      // url token rank world rounds
      auto store = Store::connect(argv[3], argv[4], 30s);
      int rank = std::stoi(argv[5]), world = std::stoi(argv[6]), rounds = std::stoi(argv[7]);
      StoreExchange ex(store, "mpx", rank, world, 60s);
      for (int r = 0; r < rounds; ++r) {
        auto all = ex.all_gather<int64_t>(int64_t(rank) * 1000 + r);
        for (int p = 0; p < world; ++p) {
          if (all[p] != int64_t(p) * 1000 + r) {
            std::fprintf(stderr, "rank %d round %d: all_gather[%d] = %lld\n", rank, r, p,
                         static_cast<long long>(all[p]));
            return 1;
          }
        }
        if (ex.broadcast<int>(rank == r % world ? r : -1, r % world) != r) return 1;
        ex.barrier();
      }
      return 0;
    }
    if (mode == "exchange-dies" && argc == 7) {
      // url token rank world: rank 2 kills itself before the exchange; the others must fail
      // with PeerFailure naming rank 2 (its store connection closed), well before the 30 s
      // timeout. Exit 0 = saw the expected error.
      auto store = Store::connect(argv[3], argv[4], 30s);
      int rank = std::stoi(argv[5]), world = std::stoi(argv[6]);
      StoreExchange ex(store, "mpdie", rank, world, 30s);
      ex.barrier();  // everyone is up
      if (rank == 2) ::kill(::getpid(), SIGKILL);
      try {
        ex.all_gather(to_bytes("x"));
      } catch (const Error& e) {
        bool ok = e.code() == ErrorCode::PeerFailure &&
                  std::strstr(e.what(), "rank 2 has left") != nullptr &&
                  std::strstr(e.what(), "StoreExchange::all_gather") != nullptr;
        if (!ok) std::fprintf(stderr, "rank %d: unexpected error: %s\n", rank, e.what());
        return ok ? 0 : 1;
      }
      std::fprintf(stderr, "rank %d: all_gather succeeded without rank 2\n", rank);
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "child %s: %s\n", mode.c_str(), e.what());
    return 1;
  }
  std::fprintf(stderr, "bad child arguments\n");
  return 2;
}

// ---- parent -------------------------------------------------------------------------------

pid_t spawn(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  argv.push_back(g_self.data());
  argv.push_back(const_cast<char*>("--client"));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, g_self.c_str(), nullptr, nullptr, argv.data(), environ);
  if (rc != 0) throw std::runtime_error("posix_spawn failed: " + std::string(strerror(rc)));
  return pid;
}

// Waits for every child (bounded); returns how many exited 0. Kills stragglers at the deadline.
int wait_all(const std::vector<pid_t>& pids, std::chrono::seconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  int ok = 0;
  std::vector<bool> done(pids.size(), false);
  size_t left = pids.size();
  while (left > 0) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (done[i]) continue;
      int status = 0;
      pid_t r = waitpid(pids[i], &status, WNOHANG);
      if (r == pids[i]) {
        done[i] = true;
        --left;
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
          ++ok;
        } else {
          ADD_FAILURE() << "child " << i << " (pid " << pids[i] << ") failed: status " << status;
        }
      }
    }
    if (left > 0 && std::chrono::steady_clock::now() > deadline) {
      for (size_t i = 0; i < pids.size(); ++i) {
        if (!done[i]) {
          kill(pids[i], SIGKILL);
          waitpid(pids[i], nullptr, 0);
          ADD_FAILURE() << "child " << i << " did not finish in time";
        }
      }
      break;
    }
    if (left > 0) std::this_thread::sleep_for(5ms);
  }
  return ok;
}

void check_final(Store& s, int nclients, int ops) {
  EXPECT_EQ(s.add("mp/counter", 0), int64_t(nclients) * ((ops + 5) / 8));
  for (int c = 0; c < nclients; ++c) {
    int last_cs = ((ops - 1 - 3) / 8) * 8 + 3;
    EXPECT_EQ(to_string(s.get("mp/final/" + std::to_string(c), 1s)),
              "cs" + std::to_string(last_cs));
    std::vector<std::string> keys;
    for (int i = 0; i < ops; i += 8) keys.push_back(key_of(c, i));
    auto vals = s.multi_get(keys, 1s);
    for (int i = 0, k = 0; i < ops; i += 8, ++k) {
      ASSERT_EQ(to_string(vals[k]), value_of(c, i)) << key_of(c, i);
    }
  }
}

TEST(StoreMultiProcess, SixtyFourClientsThousandMixedOpsWithHostilePeers) {
  constexpr int kClients = 64, kOps = 1000;
  const std::string token = "mp-token-" + std::to_string(getpid());
  auto server = TcpStoreServer::start("127.0.0.1", 0, token);
  const std::string port = std::to_string(server->port());
  auto start = std::chrono::steady_clock::now();
  std::vector<pid_t> pids;
  for (int c = 0; c < kClients; ++c) {
    pids.push_back(spawn(
        {"tcp", port, token, std::to_string(c), std::to_string(kClients), std::to_string(kOps)}));
  }
  std::vector<pid_t> bad = {spawn({"hostile", port, "3000"}), spawn({"hostile", port, "3000"})};
  EXPECT_EQ(wait_all(pids, 240s), kClients);
  EXPECT_EQ(wait_all(bad, 60s), 2);
  auto took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("64 clients x %d ops: %.2f s (%.0f ops/s)\n", kOps, took, kClients * kOps / took);
  TcpStore check("127.0.0.1", server->port(), token, 5s);
  check_final(check, kClients, kOps);
}

TEST(StoreMultiProcess, FileStoreConcurrentProcesses) {
  constexpr int kClients = 8, kOps = 200;
  std::string base =
      (std::filesystem::temp_directory_path() / ("symmem-mp-fs-" + std::to_string(getpid())))
          .string();
  std::vector<pid_t> pids;
  for (int c = 0; c < kClients; ++c) {
    pids.push_back(
        spawn({"file", base, std::to_string(c), std::to_string(kClients), std::to_string(kOps)}));
  }
  EXPECT_EQ(wait_all(pids, 240s), kClients);
  FileStore check(base);
  check_final(check, kClients, kOps);
  std::error_code ec;
  std::filesystem::remove_all(base, ec);
}

TEST(StoreMultiProcess, EightRanksRendezvousQuickly) {
  constexpr int kWorld = 8, kRounds = 50;
  const std::string token = "x-" + std::to_string(getpid());
  auto server = TcpStoreServer::start("127.0.0.1", 0, token);
  const std::string url = "tcp://127.0.0.1:" + std::to_string(server->port());
  auto start = std::chrono::steady_clock::now();
  std::vector<pid_t> pids;
  for (int r = 0; r < kWorld; ++r) {
    pids.push_back(spawn({"exchange", url, token, std::to_string(r), std::to_string(kWorld),
                          std::to_string(kRounds)}));
  }
  EXPECT_EQ(wait_all(pids, 120s), kWorld);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("8 processes x %d rounds of all_gather+broadcast+barrier: %.3f s\n", kRounds, took);
  EXPECT_LT(took, 30.0);
}

TEST(StoreMultiProcess, KilledRankIsNamedByTheOthers) {
  constexpr int kWorld = 4;
  auto server = TcpStoreServer::start("127.0.0.1", 0, "");
  const std::string url = "tcp://127.0.0.1:" + std::to_string(server->port());
  std::vector<pid_t> pids;
  for (int r = 0; r < kWorld; ++r) {
    pids.push_back(spawn({"exchange-dies", url, "", std::to_string(r), std::to_string(kWorld)}));
  }
  // Rank 2 dies by SIGKILL; every other rank must exit 0 (it saw Timeout naming rank 2).
  auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < kWorld; ++r) {
    int status = 0;
    ASSERT_EQ(waitpid(pids[r], &status, 0), pids[r]);
    if (r == 2) {
      EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
    } else {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "rank " << r << " " << status;
    }
  }
  auto took = std::chrono::steady_clock::now() - start;
  std::printf("killed rank detected by the others after %.3f s (timeout 30 s)\n",
              std::chrono::duration<double>(took).count());
  EXPECT_LT(took, 10s);
}

}  // namespace
}  // namespace symmem::test

int main(int argc, char** argv) {
  symmem::test::g_self = std::filesystem::canonical("/proc/self/exe").string();
  if (argc >= 3 && std::strcmp(argv[1], "--client") == 0) {
    return symmem::test::child_main(argc, argv);
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
