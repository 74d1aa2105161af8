// Wait reports (NOTE [wait reports] in core/wait_report.hpp): the rank range list and the WARN
// lines of a store exchange that waits for an absent rank.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/exchange.hpp"
#include "core/wait_report.hpp"
#include "symmem/error.hpp"
#include "symmem/store.hpp"
#include "test_util.hpp"

using symmem::detail::format_rank_ranges;
using symmem::test::ScopedEnv;

TEST(WaitReport, RankRanges) {
  EXPECT_EQ(format_rank_ranges({}), "");
  EXPECT_EQ(format_rank_ranges({4}), "4");
  EXPECT_EQ(format_rank_ranges({1, 2}), "1-2");
  EXPECT_EQ(format_rank_ranges({7, 1, 3, 4, 5, 6}), "1,3-7");
  EXPECT_EQ(format_rank_ranges({0, 2, 4}), "0,2,4");
  EXPECT_EQ(format_rank_ranges({5, 5, 3, 3, 4}), "3-5");  // sorted and deduplicated
  EXPECT_EQ(format_rank_ranges({0, 1, 2, 10, 12, 13, 4095}), "0-2,10,12-13,4095");
}

TEST(WaitReport, LongListsAreCut) {
  std::vector<int> evens;
  for (int r = 0; r < 100; r += 2) evens.push_back(r);  // 50 single items
  EXPECT_EQ(format_rank_ranges(evens, 3), "0,2,4 and 47 more ranks");
  EXPECT_EQ(format_rank_ranges({0, 1, 2, 5, 6, 7, 9}, 2), "0-2,5-7 and 1 more ranks");
  EXPECT_EQ(format_rank_ranges({0, 1, 2}, 1), "0-2");
}

namespace {

std::vector<std::string> warn_lines(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> out;
  for (std::string l; std::getline(f, l);) {
    if (l.find(" symmem WARN ") != std::string::npos) out.push_back(l);
  }
  return out;
}

// Rank 0 of 3 on a HashStore waits in an all_gather that ranks 1 and 2 never join; returns its
// WARN lines.
std::vector<std::string> lonely_all_gather(const char* interval_s, int timeout_ms) {
  const std::string path = "/tmp/symmem-wait-report-" + std::to_string(getpid()) + ".txt";
  unlink(path.c_str());
  ScopedEnv file("SYMMEM_DEBUG_FILE", path.c_str());
  ScopedEnv every("SYMMEM_WAIT_REPORT_S", interval_s);
  auto store = std::make_shared<symmem::HashStore>();
  symmem::StoreExchange x(store, "t/x", 0, 3, symmem::Millis(timeout_ms));
  x.set_what("test exchange");
  symmem::test::expect_error([&] { x.all_gather(symmem::to_bytes("r0")); },
                             symmem::ErrorCode::Timeout, {"ranks 1, 2 did not arrive"});
  auto lines = warn_lines(path);
  unlink(path.c_str());
  return lines;
}

}  // namespace

TEST(WaitReport, StoreExchangeNamesTheMissingRanks) {
  auto lines = lonely_all_gather("1", 2500);
  ASSERT_EQ(lines.size(), 2u) << "expected lines at 1 s and 2 s";
  for (const auto& l : lines) {
    EXPECT_NE(l.find("symmem WARN STORE test exchange: rank 0 has waited "), std::string::npos)
        << l;
    EXPECT_NE(l.find(" for ranks 1-2 (1 of 3 arrived); "), std::string::npos) << l;
    EXPECT_NE(l.find(" left of the 2.5 s timeout"), std::string::npos) << l;
  }
}

TEST(WaitReport, ZeroTurnsTheLinesOff) {
  EXPECT_TRUE(lonely_all_gather("0", 1200).empty());
}

TEST(WaitReport, TcpStoreConnectSaysWhoItWaitsFor) {
  // A port nobody listens on: bind one, note it, close it.
  int s = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(s, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  ASSERT_EQ(getsockname(s, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const uint16_t port = ntohs(a.sin_port);
  close(s);

  const std::string path = "/tmp/symmem-wait-report-tcp-" + std::to_string(getpid()) + ".txt";
  unlink(path.c_str());
  ScopedEnv file("SYMMEM_DEBUG_FILE", path.c_str());
  ScopedEnv every("SYMMEM_WAIT_REPORT_S", "1");
  symmem::test::expect_error([&] { symmem::TcpStore("127.0.0.1", port, "", symmem::Millis(2200)); },
                             symmem::ErrorCode::Timeout, {"could not connect to the store server"});
  auto lines = warn_lines(path);
  unlink(path.c_str());
  ASSERT_EQ(lines.size(), 2u);
  const std::string where = "127.0.0.1:" + std::to_string(port);
  for (const auto& l : lines) {
    EXPECT_NE(l.find("symmem WARN STORE TcpStore: waited "), std::string::npos) << l;
    EXPECT_NE(l.find(" for the store server " + where + " to accept a connection ("),
              std::string::npos)
        << l;
    EXPECT_NE(l.find("rank 0 at MASTER_ADDR:MASTER_PORT+1"), std::string::npos) << l;
  }
}
