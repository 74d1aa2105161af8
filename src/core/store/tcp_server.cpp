// TcpStoreServer: the TCP store server (one epoll event-loop thread). Its client, TcpStore,
// is in tcp_client.cpp.
//
// NOTE [store server event loop]
// The server owns every piece of state on its loop thread: the key-value map, the connections,
// the parked requests. Nothing is shared with other threads except the stop flag and an eventfd
// that wakes the loop. Each connection has an input buffer (bytes received, not yet parsed) and
// an output buffer (replies not yet sent). Frames are parsed with tcp::parse_frame; a frame that
// does not parse closes that connection only (with a WARN line naming the peer and the reason).
//
// Blocking requests (get, wait, multi_get) whose keys are missing are *parked*: the connection
// records the request and its deadline, and registers under every missing key in `waiters_`.
// A write to a key re-checks the requests registered under it; a completed request is answered
// and its connection goes on with any frames it had already sent. The earliest deadline bounds
// epoll_wait, and requests past their deadline are answered with kTimeout naming the missing
// keys. A connection processes one request at a time, in order; while a request is parked or
// replies are waiting to be sent, further input is buffered (up to one maximal frame) but not
// parsed, which bounds the memory one client can make the server hold.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>

#include "core/check.hpp"
#include "core/log.hpp"
#include "core/store/store.hpp"
#include "core/store/tcp_protocol.hpp"
#include "core/store/tcp_socket.hpp"
#include "symmem/env.hpp"
#include "symmem/store.hpp"

namespace symmem {

namespace {

using detail::Clock;
using tcp::Direction;
using tcp::errno_text;
using tcp::Frame;
using tcp::kRecvChunk;
using tcp::ms_until;
using tcp::Op;
using tcp::ParseStatus;
using tcp::set_nodelay;

// A connection stops parsing input while this many reply bytes wait to be sent.
constexpr size_t kOutHighWater = 1u << 20;

std::string sockaddr_text(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (sa->sa_family == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf));
    return std::string(buf) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (sa->sa_family == AF_INET6) {
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof(buf));
    return "[" + std::string(buf) + "]:" + std::to_string(ntohs(in6->sin6_port));
  }
  return "?";
}

// Constant-time comparison of a presented token with the expected one.
bool token_equal(const Bytes& presented, const std::string& expected) {
  if (presented.size() != expected.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < presented.size(); ++i) {
    diff |= static_cast<unsigned char>(presented[i] ^ static_cast<uint8_t>(expected[i]));
  }
  return diff == 0;
}

}  // namespace

// ============================================================================================
// Server
// ============================================================================================

namespace {

struct Conn {
  uint64_t id = 0;
  int fd = -1;
  std::string peer;
  bool authed = false;
  bool want_out = false;  // EPOLLOUT is in the interest set
  Bytes in;
  size_t in_off = 0;
  Bytes out;
  size_t out_off = 0;
  // The parked request, if any.
  bool parked = false;
  uint64_t park_gen = 0;
  Frame req;
  Clock::time_point deadline;
  // Disconnect keys: set when this connection ends (not when the server stops).
  std::vector<std::pair<std::string, Bytes>> on_close;

  size_t in_pending() const { return in.size() - in_off; }
  size_t out_pending() const { return out.size() - out_off; }
};

constexpr uint64_t kListenId = 0;
constexpr uint64_t kWakeId = ~uint64_t(0);

}  // namespace

struct TcpStoreServer::Impl {
  std::string host;
  uint16_t port = 0;
  std::string token;
  int listen_fd = -1;
  int epoll_fd = -1;
  int wake_fd = -1;
  std::thread thread;
  std::atomic<bool> stop_requested{false};
  std::mutex stop_mu;
  std::condition_variable stopped_cv;
  bool loop_done = false;
  bool stopped = false;

  // Loop-thread state.
  std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns;
  std::unordered_map<std::string, Bytes> kv;
  std::unordered_map<std::string, std::vector<std::pair<uint64_t, uint64_t>>> waiters;
  std::set<std::pair<Clock::time_point, uint64_t>> deadlines;
  std::vector<uint64_t> to_drive;
  uint64_t next_id = 1;
  bool accept_paused = false;
  Clock::time_point accept_resume;

  ~Impl() {
    for (int fd : {listen_fd, epoll_fd, wake_fd}) {
      if (fd >= 0) ::close(fd);
    }
  }

  void loop();
  void on_accept();
  void on_event(Conn* c, uint32_t events);
  bool read_some(Conn* c);
  void drive(Conn* c);
  bool handle(Conn* c, Frame& f);
  bool flush(Conn* c);
  void reply(Conn* c, Frame&& f);
  void reply_error(Conn* c, uint32_t id, ErrorCode code, const std::string& msg);
  void close_conn(Conn* c, bool warn, const std::string& reason);
  void protocol_error(Conn* c, const std::string& reason);
  void set_interest(Conn* c, bool want_out);
  std::vector<std::string> missing_keys(const Frame& f) const;
  void park(Conn* c, Frame&& f);
  void unpark(Conn* c);
  void answer_parked(Conn* c);
  void notify(const std::string& key);
  void expire(Clock::time_point now);
  void set_key(const std::string& key, Bytes&& value);
};

void TcpStoreServer::Impl::set_interest(Conn* c, bool want_out) {
  if (c->want_out == want_out) return;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | (want_out ? EPOLLOUT : 0u);
  ev.data.u64 = c->id;
  epoll_ctl(epoll_fd, EPOLL_CTL_MOD, c->fd, &ev);
  c->want_out = want_out;
}

void TcpStoreServer::Impl::close_conn(Conn* c, bool warn, const std::string& reason) {
  if (warn) {
    SYMMEM_LOG(WARN, STORE) << "store server " << host << ":" << port << ": closing connection "
                            << c->peer << ": " << reason;
  } else {
    SYMMEM_LOG(INFO, STORE) << "store server " << host << ":" << port << ": connection " << c->peer
                            << " closed: " << reason;
  }
  if (c->parked) {
    deadlines.erase({c->deadline, c->id});
    for (const auto& k : c->req.keys) {
      auto w = waiters.find(k);
      if (w == waiters.end()) continue;
      auto& v = w->second;
      v.erase(std::remove_if(v.begin(), v.end(), [&](auto& p) { return p.first == c->id; }),
              v.end());
      if (v.empty()) waiters.erase(w);
    }
  }
  epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c->fd, nullptr);
  ::close(c->fd);
  auto on_close = std::move(c->on_close);
  std::string peer = c->peer;
  conns.erase(c->id);  // destroys *c
  for (auto& [key, value] : on_close) {
    SYMMEM_LOG(INFO, STORE) << "store server " << host << ":" << port << ": connection " << peer
                            << " ended: setting its disconnect key '" << key << "'";
    set_key(key, std::move(value));
  }
}

// Sends a best-effort error reply (without blocking), then closes the connection.
void TcpStoreServer::Impl::protocol_error(Conn* c, const std::string& reason) {
  Frame f;
  f.op = Op::kError;
  f.num = static_cast<int64_t>(ErrorCode::InvalidArgument);
  f.values.push_back(to_bytes("store server closed the connection: " + reason));
  Bytes buf;
  if (tcp::encode_frame(f, &buf)) {
    (void)!::send(c->fd, buf.data(), buf.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  close_conn(c, true, reason);
}

bool TcpStoreServer::Impl::flush(Conn* c) {
  while (c->out_pending() > 0) {
    ssize_t n =
        ::send(c->fd, c->out.data() + c->out_off, c->out_pending(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      c->out_off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      set_interest(c, true);
      return true;
    }
    close_conn(c, false, "send failed: " + errno_text(errno));
    return false;
  }
  c->out.clear();
  c->out_off = 0;
  if (c->want_out) {
    set_interest(c, false);
    to_drive.push_back(c->id);  // it may have stopped parsing because replies were pending
  }
  return true;
}

void TcpStoreServer::Impl::reply(Conn* c, Frame&& f) {
  if (tcp::body_size(f.keys, f.values) > tcp::kTcpMaxBodyBytes) {
    size_t n = tcp::body_size(f.keys, f.values);
    Frame e;
    e.op = Op::kError;
    e.id = f.id;
    e.num = static_cast<int64_t>(ErrorCode::InvalidArgument);
    e.values.push_back(to_bytes(
        "the reply would have " + std::to_string(n) + " bytes, more than the frame limit of " +
        std::to_string(tcp::kTcpMaxBodyBytes) + "; read large values with fewer keys per call"));
    tcp::encode_frame(e, &c->out);
    return;
  }
  tcp::encode_frame(f, &c->out);
}

void TcpStoreServer::Impl::reply_error(Conn* c, uint32_t id, ErrorCode code,
                                       const std::string& msg) {
  Frame e;
  e.op = Op::kError;
  e.id = id;
  e.num = static_cast<int64_t>(code);
  e.values.push_back(to_bytes(msg));
  reply(c, std::move(e));
}

std::vector<std::string> TcpStoreServer::Impl::missing_keys(const Frame& f) const {
  std::vector<std::string> out;
  for (const auto& k : f.keys) {
    if (kv.find(k) == kv.end()) out.push_back(k);
  }
  return out;
}

// Answers a blocking request whose keys are all present.
void TcpStoreServer::Impl::answer_parked(Conn* c) {
  Frame r;
  r.op = Op::kOk;
  r.id = c->req.id;
  if (c->req.op == Op::kGet || c->req.op == Op::kMultiGet) {
    r.values.reserve(c->req.keys.size());
    for (const auto& k : c->req.keys) r.values.push_back(kv.at(k));
  }
  reply(c, std::move(r));
}

void TcpStoreServer::Impl::park(Conn* c, Frame&& f) {
  c->parked = true;
  c->park_gen++;
  c->req = std::move(f);
  // Clients send a resolved timeout (>= 0); a negative one from a foreign client means "now".
  c->deadline = detail::deadline_for(std::max(Millis(c->req.num), Millis(0)));
  deadlines.insert({c->deadline, c->id});
  for (const auto& k : missing_keys(c->req)) waiters[k].push_back({c->id, c->park_gen});
}

void TcpStoreServer::Impl::unpark(Conn* c) {
  deadlines.erase({c->deadline, c->id});
  c->parked = false;
  c->req = Frame();
  to_drive.push_back(c->id);
}

void TcpStoreServer::Impl::notify(const std::string& key) {
  auto it = waiters.find(key);
  if (it == waiters.end()) return;
  auto list = std::move(it->second);
  waiters.erase(it);
  for (auto [id, gen] : list) {
    auto cit = conns.find(id);
    if (cit == conns.end()) continue;
    Conn* c = cit->second.get();
    if (!c->parked || c->park_gen != gen) continue;
    auto missing = missing_keys(c->req);
    if (missing.empty()) {
      answer_parked(c);
      unpark(c);
    } else {
      // Still waiting: stay registered under every key that is missing now.
      for (const auto& k : missing) waiters[k].push_back({c->id, c->park_gen});
    }
  }
}

void TcpStoreServer::Impl::expire(Clock::time_point now) {
  while (!deadlines.empty() && deadlines.begin()->first <= now) {
    uint64_t id = deadlines.begin()->second;
    deadlines.erase(deadlines.begin());
    auto cit = conns.find(id);
    if (cit == conns.end()) continue;
    Conn* c = cit->second.get();
    if (!c->parked) continue;
    auto missing = missing_keys(c->req);
    for (const auto& k : missing) {
      auto w = waiters.find(k);
      if (w == waiters.end()) continue;
      auto& v = w->second;
      v.erase(std::remove_if(v.begin(), v.end(), [&](auto& p) { return p.first == id; }), v.end());
      if (v.empty()) waiters.erase(w);
    }
    if (missing.empty()) {
      answer_parked(c);  // cannot happen (notify answers first), but answer rather than time out
    } else {
      Frame r;
      r.op = Op::kTimeout;
      r.id = c->req.id;
      r.keys = std::move(missing);
      reply(c, std::move(r));
    }
    c->parked = false;
    c->req = Frame();
    to_drive.push_back(id);
  }
}

void TcpStoreServer::Impl::set_key(const std::string& key, Bytes&& value) {
  kv[key] = std::move(value);
  notify(key);
}

// Handles one parsed request. Returns false if the connection was closed.
bool TcpStoreServer::Impl::handle(Conn* c, Frame& f) {
  if (!c->authed) {
    if (f.op != Op::kHello) {
      protocol_error(c, std::string("first frame is '") + tcp::op_name(f.op) +
                            "', expected 'hello' with the token");
      return false;
    }
    if (!token_equal(f.values[0], token)) {
      protocol_error(c, "wrong token (check SYMMEM_STORE_TOKEN)");
      return false;
    }
    c->authed = true;
  }
  Frame r;
  r.op = Op::kOk;
  r.id = f.id;
  switch (f.op) {
    case Op::kHello:
      // Without a server token any hello is welcome.
      r.num = tcp::kTcpProtocolVersion;
      break;
    case Op::kSet:
      set_key(f.keys[0], std::move(f.values[0]));
      break;
    case Op::kGet:
    case Op::kWait:
    case Op::kMultiGet: {
      auto missing = missing_keys(f);
      if (missing.empty()) {
        c->req = std::move(f);
        answer_parked(c);
        c->req = Frame();
        return true;
      }
      if (f.num == 0) {
        r.op = Op::kTimeout;
        r.keys = std::move(missing);
        break;
      }
      park(c, std::move(f));
      return true;
    }
    case Op::kAdd: {
      const std::string& key = f.keys[0];
      try {
        auto it = kv.find(key);
        int64_t now = it == kv.end() ? 0 : detail::parse_counter("add", key, it->second);
        r.num = detail::add_counter("add", key, now, f.num);
      } catch (const Error& e) {
        reply_error(c, f.id, e.code(), e.what());
        return true;
      }
      set_key(key, detail::format_counter(r.num));
      break;
    }
    case Op::kCompareSet: {
      const std::string& key = f.keys[0];
      auto it = kv.find(key);
      bool matches = it == kv.end() ? f.values[0].empty() : it->second == f.values[0];
      if (matches) {
        r.values.push_back(f.values[1]);
        set_key(key, std::move(f.values[1]));
      } else if (it != kv.end()) {
        r.values.push_back(it->second);
      } else {
        r.values.push_back(Bytes());
      }
      break;
    }
    case Op::kMultiSet:
      for (size_t i = 0; i < f.keys.size(); ++i) set_key(f.keys[i], std::move(f.values[i]));
      break;
    case Op::kRemove:
      r.num = kv.erase(f.keys[0]) > 0 ? 1 : 0;
      break;
    case Op::kCheck:
      r.num = missing_keys(f).empty() ? 1 : 0;
      break;
    case Op::kNumKeys:
      r.num = static_cast<int64_t>(kv.size());
      break;
    case Op::kSetOnClose: {
      auto it = std::find_if(c->on_close.begin(), c->on_close.end(),
                             [&](const auto& p) { return p.first == f.keys[0]; });
      if (it != c->on_close.end()) {
        it->second = std::move(f.values[0]);
      } else if (c->on_close.size() >= tcp::kTcpMaxDisconnectKeys) {
        reply_error(c, f.id, ErrorCode::InvalidArgument,
                    "set_on_disconnect: this connection already has " +
                        std::to_string(tcp::kTcpMaxDisconnectKeys) + " disconnect keys");
        return true;
      } else {
        c->on_close.emplace_back(std::move(f.keys[0]), std::move(f.values[0]));
      }
      break;
    }
    case Op::kCancelOnClose: {
      auto it = std::find_if(c->on_close.begin(), c->on_close.end(),
                             [&](const auto& p) { return p.first == f.keys[0]; });
      r.num = it != c->on_close.end() ? 1 : 0;
      if (it != c->on_close.end()) c->on_close.erase(it);
      break;
    }
    default:
      protocol_error(c, std::string("unexpected op '") + tcp::op_name(f.op) + "'");
      return false;
  }
  reply(c, std::move(r));
  return true;
}

// Parses and handles buffered frames until the connection parks, has too much output pending,
// or runs out of complete frames; then sends what it can.
void TcpStoreServer::Impl::drive(Conn* c) {
  const uint64_t id = c->id;
  while (!c->parked && c->out_pending() < kOutHighWater && c->in_pending() > 0) {
    size_t max_body = c->authed ? tcp::kTcpMaxBodyBytes : tcp::kTcpMaxHelloBodyBytes;
    Frame f;
    auto r = tcp::parse_frame(c->in.data() + c->in_off, c->in_pending(), Direction::kRequest,
                              max_body, &f);
    if (r.status == ParseStatus::kIncomplete) break;
    if (r.status == ParseStatus::kBad) {
      protocol_error(c, "malformed frame: " + r.error);
      return;
    }
    c->in_off += r.consumed;
    bool alive = false;
    try {
      alive = handle(c, f);
    } catch (const std::exception& e) {
      close_conn(c, true, std::string("failed to handle a request: ") + e.what());
      return;
    }
    if (!alive) return;
    if (conns.find(id) == conns.end()) return;
  }
  if (c->in_off == c->in.size()) {
    c->in.clear();
    c->in_off = 0;
  } else if (c->in_off > (1u << 20)) {
    c->in.erase(c->in.begin(), c->in.begin() + static_cast<ptrdiff_t>(c->in_off));
    c->in_off = 0;
  }
  flush(c);
}

// Reads what the socket has. Returns false if the connection was closed.
bool TcpStoreServer::Impl::read_some(Conn* c) {
  size_t total = 0;
  while (total < (4u << 20)) {
    size_t old = c->in.size();
    c->in.resize(old + kRecvChunk);
    ssize_t n = ::recv(c->fd, c->in.data() + old, kRecvChunk, MSG_DONTWAIT);
    c->in.resize(old + (n > 0 ? static_cast<size_t>(n) : 0));
    if (n > 0) {
      total += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    const bool eof = n == 0;
    const int err = errno;
    if (c->in_pending() > 0) {
      Frame dummy;
      size_t max_body = c->authed ? tcp::kTcpMaxBodyBytes : tcp::kTcpMaxHelloBodyBytes;
      auto r = tcp::parse_frame(c->in.data() + c->in_off, c->in_pending(), Direction::kRequest,
                                max_body, &dummy);
      std::string what =
          "client went away mid-frame (" + std::to_string(c->in_pending()) + " bytes of " +
          (r.needed ? std::to_string(r.needed) : std::string("an unknown size")) + " received)";
      if (r.status != ParseStatus::kIncomplete) {
        // Complete frames are still waiting behind a parked request: the client left.
        what = "client went away with requests pending";
      }
      close_conn(c, r.status != ParseStatus::kFrame, what);
    } else {
      close_conn(c, false, eof ? "client closed the connection" : errno_text(err));
    }
    return false;
  }
  // A client may not pile up more than one maximal frame while its requests cannot be parsed.
  if (c->in_pending() > tcp::kTcpHeaderBytes + tcp::kTcpMaxBodyBytes) {
    protocol_error(c, "client sent more than one maximal frame while a request was pending");
    return false;
  }
  return true;
}

void TcpStoreServer::Impl::on_event(Conn* c, uint32_t events) {
  if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
    if (!read_some(c)) return;
  }
  if (events & EPOLLOUT) {
    if (!flush(c)) return;
  }
  drive(c);
}

void TcpStoreServer::Impl::on_accept() {
  for (int i = 0; i < 256; ++i) {
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    int fd =
        ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      SYMMEM_LOG(WARN, STORE) << "store server " << host << ":" << port
                              << ": accept failed: " << errno_text(errno)
                              << "; pausing new connections for 100 ms";
      epoll_event ev{};
      ev.data.u64 = kListenId;
      epoll_ctl(epoll_fd, EPOLL_CTL_MOD, listen_fd, &ev);
      accept_paused = true;
      accept_resume = Clock::now() + Millis(100);
      return;
    }
    set_nodelay(fd);
    auto c = std::make_unique<Conn>();
    c->id = next_id++;
    c->fd = fd;
    c->peer = sockaddr_text(reinterpret_cast<sockaddr*>(&ss));
    c->authed = token.empty();
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = c->id;
    if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
      SYMMEM_LOG(WARN, STORE) << "store server: epoll_ctl failed for " << c->peer << ": "
                              << errno_text(errno);
      ::close(fd);
      continue;
    }
    SYMMEM_LOG(TRACE, STORE) << "store server " << host << ":" << port << ": connection from "
                             << c->peer;
    conns.emplace(c->id, std::move(c));
  }
}

void TcpStoreServer::Impl::loop() {
  std::vector<epoll_event> events(256);
  while (!stop_requested.load(std::memory_order_acquire)) {
    try {
      int timeout = -1;
      if (!deadlines.empty()) timeout = ms_until(deadlines.begin()->first);
      if (accept_paused) {
        int t = ms_until(accept_resume);
        timeout = timeout < 0 ? t : std::min(timeout, t);
      }
      int n = ::epoll_wait(epoll_fd, events.data(), static_cast<int>(events.size()), timeout);
      if (n < 0) {
        if (errno == EINTR) continue;
        SYMMEM_LOG(WARN, STORE) << "store server: epoll_wait failed: " << errno_text(errno);
        std::this_thread::sleep_for(Millis(10));
        continue;
      }
      for (int i = 0; i < n; ++i) {
        uint64_t id = events[i].data.u64;
        if (id == kWakeId) {
          uint64_t v;
          (void)!::read(wake_fd, &v, sizeof(v));
          continue;
        }
        if (id == kListenId) {
          on_accept();
          continue;
        }
        auto it = conns.find(id);
        if (it == conns.end()) continue;
        on_event(it->second.get(), events[i].events);
      }
      if (accept_paused && Clock::now() >= accept_resume) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.u64 = kListenId;
        epoll_ctl(epoll_fd, EPOLL_CTL_MOD, listen_fd, &ev);
        accept_paused = false;
      }
      expire(Clock::now());
      // Connections whose parked request was answered (or whose output drained) go on with the
      // frames they had already sent. Driving one may unpark others; the loop runs until quiet.
      while (!to_drive.empty()) {
        auto ids = std::move(to_drive);
        to_drive.clear();
        for (uint64_t cid : ids) {
          auto it = conns.find(cid);
          if (it != conns.end()) drive(it->second.get());
        }
      }
    } catch (const std::exception& e) {
      // Never let the loop die: log and continue (allocation failure is the realistic case).
      SYMMEM_LOG(WARN, STORE) << "store server: unexpected error in the event loop: " << e.what();
      to_drive.clear();
    }
  }
  // Stopping: close every connection (their clients see PeerFailure).
  for (auto& [id, c] : conns) {
    epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c->fd, nullptr);
    ::close(c->fd);
  }
  conns.clear();
  waiters.clear();
  deadlines.clear();
  {
    std::lock_guard<std::mutex> lock(stop_mu);
    loop_done = true;
  }
  stopped_cv.notify_all();
}

TcpStoreServer::TcpStoreServer() : impl_(std::make_unique<Impl>()) {}

std::unique_ptr<TcpStoreServer> TcpStoreServer::start(const std::string& host, uint16_t port,
                                                      const std::string& token) {
  const char* op = "TcpStoreServer::start";
  SYMMEM_CHECK_ARG(op, -1, token.size() <= tcp::kTcpMaxTokenBytes, "token",
                   "has " << token.size() << " bytes, more than " << tcp::kTcpMaxTokenBytes);
  std::unique_ptr<TcpStoreServer> server(new TcpStoreServer());
  Impl& s = *server->impl_;
  s.host = host.empty() ? "127.0.0.1" : host;
  s.token = token;

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  std::string port_str = std::to_string(port);
  int rc = ::getaddrinfo(s.host.c_str(), port_str.c_str(), &hints, &res);
  SYMMEM_CHECK_ARG(op, -1, rc == 0, "host",
                   "'" << s.host << "' cannot be resolved: " << gai_strerror(rc));
  std::string last_error;
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    int fd =
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last_error = "socket: " + errno_text(errno);
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, SOMAXCONN) != 0) {
      last_error = "bind/listen " + sockaddr_text(ai->ai_addr) + ": " + errno_text(errno);
      ::close(fd);
      continue;
    }
    s.listen_fd = fd;
    break;
  }
  ::freeaddrinfo(res);
  if (s.listen_fd < 0) {
    throw_error(ErrorCode::System, op, -1,
                "cannot listen on " + s.host + ":" + port_str + ": " + last_error);
  }
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  SYMMEM_CHECK_SYS(op, -1, ::getsockname(s.listen_fd, reinterpret_cast<sockaddr*>(&ss), &len));
  s.port = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                          : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);

  s.epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  SYMMEM_CHECK_SYS(op, -1, s.epoll_fd);
  s.wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  SYMMEM_CHECK_SYS(op, -1, s.wake_fd);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenId;
  SYMMEM_CHECK_SYS(op, -1, ::epoll_ctl(s.epoll_fd, EPOLL_CTL_ADD, s.listen_fd, &ev));
  ev.data.u64 = kWakeId;
  SYMMEM_CHECK_SYS(op, -1, ::epoll_ctl(s.epoll_fd, EPOLL_CTL_ADD, s.wake_fd, &ev));

  s.thread = std::thread([&s] { s.loop(); });
  SYMMEM_LOG(INFO, STORE) << "store server listening on " << s.host << ":" << s.port
                          << (s.token.empty() ? " (no token)" : " (token required)");
  return server;
}

TcpStoreServer::~TcpStoreServer() {
  stop();
}

uint16_t TcpStoreServer::port() const {
  return impl_->port;
}
const std::string& TcpStoreServer::host() const {
  return impl_->host;
}

void TcpStoreServer::stop() {
  if (!impl_) return;
  {
    std::lock_guard<std::mutex> lock(impl_->stop_mu);
    if (impl_->stopped) return;
    impl_->stopped = true;
  }
  impl_->stop_requested.store(true, std::memory_order_release);
  uint64_t one = 1;
  (void)!::write(impl_->wake_fd, &one, sizeof(one));
  if (impl_->thread.joinable()) {
    if (impl_->thread.get_id() == std::this_thread::get_id()) {
      impl_->thread.detach();
    } else {
      impl_->thread.join();
    }
  }
  SYMMEM_LOG(INFO, STORE) << "store server " << impl_->host << ":" << impl_->port << " stopped";
}

void TcpStoreServer::serve_forever() {
  std::unique_lock<std::mutex> lock(impl_->stop_mu);
  impl_->stopped_cv.wait(lock, [&] { return impl_->loop_done; });
}

}  // namespace symmem
