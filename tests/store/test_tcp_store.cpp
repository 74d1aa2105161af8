// TcpStoreServer / TcpStore: tokens, hostile input, server loss, connect retry, many clients,
// no busy waiting, URL parsing.

#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "core/exchange.hpp"
#include "core/store/tcp_protocol.hpp"
#include "raw_socket.hpp"
#include "symmem/env.hpp"
#include "test_util.hpp"

namespace symmem::test {
namespace {

using namespace std::chrono_literals;
using tcp::Frame;
using tcp::Op;

Bytes encode(const Frame& f) {
  Bytes b;
  tcp::encode_frame(f, &b);
  return b;
}

Frame hello(const std::string& token) {
  Frame f;
  f.op = Op::kHello;
  f.values = {to_bytes(token)};
  return f;
}

// A server plus one healthy client with a key in the store; hostile tests check that both survive.
class TcpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = TcpStoreServer::start("127.0.0.1", 0, token_);
    good_ = std::make_unique<TcpStore>("127.0.0.1", server_->port(), token_, 5s);
    good_->set("precious", to_bytes("value"));
  }
  void expect_healthy() {
    EXPECT_EQ(to_string(good_->get("precious", 1s)), "value");
    TcpStore fresh("127.0.0.1", server_->port(), token_, 5s);
    EXPECT_EQ(to_string(fresh.get("precious", 1s)), "value");
    int64_t now = fresh.add("healthy", 1);
    EXPECT_EQ(good_->add("healthy", 0), now);
  }
  std::string token_ = "tok-123";
  std::unique_ptr<TcpStoreServer> server_;
  std::unique_ptr<TcpStore> good_;
};

TEST_F(TcpServerTest, WrongOrMissingTokenIsRefused) {
  expect_error([&] { TcpStore("127.0.0.1", server_->port(), "wrong", 2s); },
               ErrorCode::InvalidArgument, {"'token'", "refused"});
  expect_error([&] { TcpStore("127.0.0.1", server_->port(), "", 2s); }, ErrorCode::InvalidArgument,
               {"'token'", "refused"});
  // A raw client that skips the hello is dropped at its first frame.
  RawSocket raw(server_->port());
  Frame set;
  set.op = Op::kSet;
  set.keys = {"precious"};
  set.values = {to_bytes("overwritten")};
  raw.send(encode(set));
  EXPECT_TRUE(raw.closed_by_peer(2s));
  expect_healthy();
}

TEST_F(TcpServerTest, GarbageClosesOnlyThatConnection) {
  RawSocket raw(server_->port());
  raw.send(std::string("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_TRUE(raw.closed_by_peer(2s));
  RawSocket zeros(server_->port());
  zeros.send(std::vector<uint8_t>(1000, 0));
  EXPECT_TRUE(zeros.closed_by_peer(2s));
  expect_healthy();
}

TEST_F(TcpServerTest, OversizedFramesAreRejectedFromTheHeader) {
  // Before authentication, even a hello may not be large.
  RawSocket raw(server_->port());
  Bytes b = encode(hello(token_));
  b[8] = 0;
  b[9] = 0;
  b[10] = 0x10;  // body_len = 1 MiB
  b.resize(tcp::kTcpHeaderBytes);
  raw.send(b);
  EXPECT_TRUE(raw.closed_by_peer(2s));
  // After authentication: a header announcing more than the frame limit.
  RawSocket raw2(server_->port());
  raw2.send(encode(hello(token_)));
  Bytes h = encode(Frame{});
  h[5] = static_cast<uint8_t>(Op::kSet);
  h[8] = h[9] = h[10] = h[11] = 0xff;
  h.resize(tcp::kTcpHeaderBytes);
  raw2.send(h);
  std::vector<uint8_t> got;
  EXPECT_TRUE(raw2.closed_by_peer(2s, &got));
  EXPECT_GT(got.size(), tcp::kTcpHeaderBytes);  // the hello's reply, then the error
  expect_healthy();
}

TEST_F(TcpServerTest, OversizedKeyOrValueAndUnknownOpClose) {
  {
    RawSocket raw(server_->port());
    raw.send(encode(hello(token_)));
    Frame f;
    f.op = Op::kSet;
    f.keys = {std::string(kStoreMaxKeyBytes + 1, 'k')};
    f.values = {Bytes()};
    raw.send(encode(f));
    EXPECT_TRUE(raw.closed_by_peer(2s));
  }
  {
    RawSocket raw(server_->port());
    raw.send(encode(hello(token_)));
    Frame f;
    f.op = Op::kSet;
    f.keys = {"k"};
    f.values = {Bytes(kStoreMaxValueBytes + 1, 1)};
    raw.send(encode(f));
    EXPECT_TRUE(raw.closed_by_peer(5s));
  }
  {
    RawSocket raw(server_->port());
    raw.send(encode(hello(token_)));
    Bytes b = encode(Frame{});
    b[5] = 77;
    raw.send(b);
    EXPECT_TRUE(raw.closed_by_peer(2s));
  }
  expect_healthy();
}

TEST_F(TcpServerTest, HalfFramesDoNotDisturbOthers) {
  Frame set;
  set.op = Op::kSet;
  set.keys = {"half"};
  set.values = {to_bytes("never")};
  Bytes whole = encode(hello(token_));
  Bytes s = encode(set);
  whole.insert(whole.end(), s.begin(), s.begin() + 20);
  {
    RawSocket vanishing(server_->port());
    vanishing.send(whole);
  }  // closed mid-frame
  RawSocket lingering(server_->port());
  lingering.send(whole);  // stays open with half a frame
  expect_healthy();
  EXPECT_FALSE(good_->check({"half"}));
}

TEST_F(TcpServerTest, PipelinedRequestsAreAnsweredInOrder) {
  RawSocket raw(server_->port());
  Frame h = hello(token_);
  h.id = 1;
  Frame get;
  get.op = Op::kGet;
  get.id = 2;
  get.keys = {"piped"};
  get.num = 5000;
  Frame set;
  set.op = Op::kSet;
  set.id = 3;
  set.keys = {"other"};
  set.values = {to_bytes("x")};
  Bytes all = encode(h);
  for (const auto& f : {get, set}) {
    Bytes b = encode(f);
    all.insert(all.end(), b.begin(), b.end());
  }
  raw.send(all);
  // The get parks; the set behind it must wait its turn.
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(good_->check({"other"}));
  good_->set("piped", to_bytes("now"));
  std::vector<uint8_t> replies;
  for (uint32_t want : {1u, 2u, 3u}) {
    Bytes hdr = raw.read_n(tcp::kTcpHeaderBytes, 2s);
    ASSERT_EQ(hdr.size(), tcp::kTcpHeaderBytes);
    uint32_t len = hdr[8] | hdr[9] << 8 | hdr[10] << 16 | uint32_t(hdr[11]) << 24;
    Bytes body = raw.read_n(len, 2s);
    hdr.insert(hdr.end(), body.begin(), body.end());
    Frame r;
    auto pr =
        tcp::parse_frame(hdr.data(), hdr.size(), tcp::Direction::kReply, tcp::kTcpMaxBodyBytes, &r);
    ASSERT_EQ(pr.status, tcp::ParseStatus::kFrame) << pr.error;
    EXPECT_EQ(r.id, want);
    EXPECT_EQ(r.op, Op::kOk);
    if (want == 2) {
      ASSERT_EQ(r.values.size(), 1u);
      EXPECT_EQ(to_string(r.values[0]), "now");
    }
  }
  EXPECT_TRUE(good_->check({"other"}));
}

TEST(TcpStore, ServerGoneMidCallIsPeerFailure) {
  auto server = TcpStoreServer::start();
  TcpStore client("127.0.0.1", server->port(), "", 5s);
  std::thread stopper([&] {
    std::this_thread::sleep_for(150ms);
    server->stop();
  });
  auto start = std::chrono::steady_clock::now();
  expect_error([&] { client.get("never", 30s); }, ErrorCode::PeerFailure,
               {"TcpStore::get", "never", "closed the connection"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  stopper.join();
  expect_error([&] { client.set("k", Bytes()); }, ErrorCode::PeerFailure, {"lost"});
  server->stop();  // idempotent
}

TEST(TcpStore, ConnectRetriesUntilTheServerAppears) {
  uint16_t port = TcpStoreServer::start()->port();  // a port that was free a moment ago
  std::unique_ptr<TcpStoreServer> later;
  std::thread starter([&] {
    std::this_thread::sleep_for(300ms);
    later = TcpStoreServer::start("127.0.0.1", port);
  });
  TcpStore client("127.0.0.1", port, "", 10s);
  client.set("k", to_bytes("v"));
  starter.join();
  EXPECT_EQ(to_string(client.get("k", 1s)), "v");
}

TEST(TcpStore, ConnectTimeoutNamesTheServer) {
  uint16_t port = TcpStoreServer::start()->port();
  auto start = std::chrono::steady_clock::now();
  expect_error([&] { TcpStore("127.0.0.1", port, "", 300ms); }, ErrorCode::Timeout,
               {("127.0.0.1:" + std::to_string(port)).c_str(), "300 ms"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
}

TEST(TcpStore, HundredsOfClientsAndParkedWaitsDoNotSpin) {
  auto server = TcpStoreServer::start();
  constexpr int kClients = 200;
  std::vector<std::unique_ptr<TcpStore>> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.push_back(std::make_unique<TcpStore>("127.0.0.1", server->port(), "", 10s));
    clients.back()->set("c/" + std::to_string(i), to_bytes(std::to_string(i)));
  }
  std::vector<std::string> keys;
  for (int i = 0; i < kClients; ++i) keys.push_back("c/" + std::to_string(i));
  auto vals = clients[0]->multi_get(keys, 5s);
  for (int i = 0; i < kClients; ++i) EXPECT_EQ(to_string(vals[i]), std::to_string(i));

  // Every client parks a get on one key; CPU use while they wait must be near zero.
  std::atomic<int> ok{0};
  std::vector<std::thread> ts;
  for (int i = 0; i < kClients; ++i) {
    ts.emplace_back([&, i] {
      if (to_string(clients[i]->get("go", 20s)) == "go!") ++ok;
    });
  }
  std::this_thread::sleep_for(300ms);  // let them park
  rusage before{}, after{};
  getrusage(RUSAGE_SELF, &before);
  std::this_thread::sleep_for(500ms);
  getrusage(RUSAGE_SELF, &after);
  auto cpu_us = [](const rusage& r) {
    return (r.ru_utime.tv_sec + r.ru_stime.tv_sec) * 1000000L + r.ru_utime.tv_usec +
           r.ru_stime.tv_usec;
  };
  EXPECT_LT(cpu_us(after) - cpu_us(before), 100000) << "server or clients spin while parked";
  TcpStore setter("127.0.0.1", server->port(), "", 5s);
  setter.set("go", to_bytes("go!"));
  for (auto& t : ts) t.join();
  EXPECT_EQ(ok.load(), kClients);
}

TEST(TcpStore, ConnectParsesUrlsAndReadsTheTokenFromTheEnvironment) {
  auto server = TcpStoreServer::start("127.0.0.1", 0, "env-token");
  std::string url = "tcp://127.0.0.1:" + std::to_string(server->port());
  for (const char* bad : {"", "http://x:1", "tcp://", "tcp://host", "tcp://:5", "tcp://h:0",
                          "tcp://h:70000", "tcp://h:12x", "file://relative"}) {
    expect_error([&] { Store::connect(bad, "t", 100ms); }, ErrorCode::InvalidArgument, {"'url'"});
  }
  setenv("SYMMEM_STORE_TOKEN", "env-token", 1);
  env::reset_cache_for_testing();
  auto s = Store::connect(url, "", 2s);
  s->set("k", to_bytes("v"));
  unsetenv("SYMMEM_STORE_TOKEN");
  env::reset_cache_for_testing();
  expect_error([&] { Store::connect(url, "", 2s); }, ErrorCode::InvalidArgument, {"'token'"});
  auto s2 = Store::connect(url + "/", "env-token", 2s);
  EXPECT_EQ(to_string(s2->get("k", 1s)), "v");
}

TEST(TcpStore, DisconnectKeysAreSetWhenTheConnectionEnds) {
  auto server = TcpStoreServer::start();
  TcpStore watcher("127.0.0.1", server->port(), "", 5s);
  {
    TcpStore leaver("127.0.0.1", server->port(), "", 5s);
    EXPECT_TRUE(leaver.set_on_disconnect("gone/a", to_bytes("a left")));
    EXPECT_TRUE(leaver.set_on_disconnect("gone/b", to_bytes("b")));
    EXPECT_TRUE(leaver.set_on_disconnect("gone/a", to_bytes("a left, really")));  // replaces
    leaver.cancel_on_disconnect("gone/b");
    leaver.cancel_on_disconnect("never/registered");
    EXPECT_FALSE(watcher.check({"gone/a"}));
  }  // connection closes
  EXPECT_EQ(to_string(watcher.get("gone/a", 5s)), "a left, really");
  EXPECT_FALSE(watcher.check({"gone/b"}));
  // A waiter parked on a disconnect key is woken by the disconnect.
  auto leaver = std::make_unique<TcpStore>("127.0.0.1", server->port(), "", 5s);
  leaver->set_on_disconnect("gone/c", to_bytes("c"));
  std::thread t([&] {
    std::this_thread::sleep_for(100ms);
    leaver.reset();
  });
  EXPECT_EQ(to_string(watcher.get("gone/c", 5s)), "c");
  t.join();
  // In-process stores have no connection to watch.
  HashStore h;
  EXPECT_FALSE(h.set_on_disconnect("k", Bytes()));
}

TEST(TcpStore, ExchangeNamesAPeerWhoseConnectionClosed) {
  auto server = TcpStoreServer::start();
  auto a = std::make_shared<TcpStore>("127.0.0.1", server->port(), "", 5s);
  // Rank 1 registers its disconnect keys the way StoreExchange does, then vanishes.
  {
    TcpStore b("127.0.0.1", server->port(), "", 5s);
    b.set_on_disconnect("px/dead/1", to_bytes("1"));
    b.set_on_disconnect("px/dead", to_bytes("1"));
  }
  StoreExchange ex(a, "px", 0, 2, 20s);
  auto start = std::chrono::steady_clock::now();
  expect_error([&] { ex.all_gather(to_bytes("x")); }, ErrorCode::PeerFailure,
               {"StoreExchange::all_gather", "rank 0", "rank 1 has left"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
}

TEST(TcpStoreServer, BindsLoopbackByDefaultAndReportsBindErrors) {
  auto server = TcpStoreServer::start();
  EXPECT_EQ(server->host(), "127.0.0.1");
  EXPECT_GT(server->port(), 0);
  expect_error([&] { TcpStoreServer::start("127.0.0.1", server->port()); }, ErrorCode::System,
               {"cannot listen", std::to_string(server->port()).c_str()});
  expect_error([&] { TcpStoreServer::start("no.such.host.invalid", 0); },
               ErrorCode::InvalidArgument, {"'host'"});
}

}  // namespace
}  // namespace symmem::test
