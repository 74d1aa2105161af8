// TcpStore: the client of the TCP store server (tcp_server.cpp, NOTE [store server event
// loop]). One connection; calls are serialised by a mutex.

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
#include "core/wait_report.hpp"
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

// Extra time a client waits for the server's answer to a blocking request beyond the request's
// own timeout (the server answers kTimeout at the deadline; this only covers a hung server).
constexpr Millis kReplyGrace{5000};

}  // namespace

// ============================================================================================
// Client
// ============================================================================================

struct TcpStore::Impl {
  std::string host;
  uint16_t port = 0;
  std::string token;
  std::string where;  // "host:port"
  std::mutex mu;
  int fd = -1;
  std::string broken;  // why the connection is unusable; empty while healthy
  uint32_t next_id = 1;
  Bytes rbuf;

  ~Impl() {
    if (fd >= 0) ::close(fd);
  }

  void connect(Millis timeout);
  void mark_broken(const std::string& why) {
    broken = why;
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  // Sends `req` and returns the reply. `keys` and `timeout` label Timeout errors; `deadline`
  // bounds the whole exchange.
  Frame call(const char* op, Frame& req, Clock::time_point deadline, Millis timeout);
  void send_all(const char* op, const Bytes& buf, Clock::time_point deadline,
                const std::vector<std::string>& keys, Millis timeout);
  Frame recv_frame(const char* op, Clock::time_point deadline, const std::vector<std::string>& keys,
                   Millis timeout);
  [[noreturn]] void fail_transport(const char* op, const std::string& what,
                                   const std::vector<std::string>& keys);
};

void TcpStore::Impl::fail_transport(const char* op, const std::string& what,
                                    const std::vector<std::string>& keys) {
  std::string msg = "store server " + where + " " + what;
  if (!keys.empty()) msg += " (keys " + detail::join_keys(keys) + ")";
  mark_broken(msg);
  throw_error(ErrorCode::PeerFailure, op, -1, msg);
}

void TcpStore::Impl::send_all(const char* op, const Bytes& buf, Clock::time_point deadline,
                              const std::vector<std::string>& keys, Millis timeout) {
  size_t off = 0;
  while (off < buf.size()) {
    ssize_t n = ::send(fd, buf.data() + off, buf.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      int rc = ::poll(&p, 1, ms_until(deadline));
      if (rc == 0) {
        mark_broken("a send timed out");
        detail::throw_store_timeout(op, keys, timeout);
      }
      continue;
    }
    fail_transport(op, "is gone: send failed: " + errno_text(errno), keys);
  }
}

Frame TcpStore::Impl::recv_frame(const char* op, Clock::time_point deadline,
                                 const std::vector<std::string>& keys, Millis timeout) {
  for (;;) {
    if (!rbuf.empty()) {
      Frame f;
      auto r =
          tcp::parse_frame(rbuf.data(), rbuf.size(), Direction::kReply, tcp::kTcpMaxBodyBytes, &f);
      if (r.status == ParseStatus::kFrame) {
        rbuf.erase(rbuf.begin(), rbuf.begin() + static_cast<ptrdiff_t>(r.consumed));
        return f;
      }
      if (r.status == ParseStatus::kBad) {
        std::string msg = "store server " + where + " sent a malformed reply: " + r.error;
        mark_broken(msg);
        throw_error(ErrorCode::Internal, op, -1, msg);
      }
    }
    pollfd p{fd, POLLIN, 0};
    int rc = ::poll(&p, 1, ms_until(deadline));
    if (rc < 0 && errno == EINTR) continue;
    if (rc == 0) {
      mark_broken("no reply within the deadline");
      if (keys.empty()) {
        throw_error(ErrorCode::Timeout, op, -1,
                    "store server " + where + " did not reply within " +
                        std::to_string(timeout.count()) + " ms");
      }
      detail::throw_store_timeout(op, keys, timeout);
    }
    size_t old = rbuf.size();
    rbuf.resize(old + kRecvChunk);
    ssize_t n = ::recv(fd, rbuf.data() + old, kRecvChunk, MSG_DONTWAIT);
    rbuf.resize(old + (n > 0 ? static_cast<size_t>(n) : 0));
    if (n > 0) continue;
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    fail_transport(op,
                   n == 0 ? "closed the connection (server gone?)"
                          : "is gone: recv failed: " + errno_text(errno),
                   keys);
  }
}

Frame TcpStore::Impl::call(const char* op, Frame& req, Clock::time_point deadline, Millis timeout) {
  if (fd < 0) {
    throw_error(ErrorCode::PeerFailure, op, -1, "connection to the store is lost: " + broken);
  }
  req.id = next_id++;
  Bytes buf;
  if (!tcp::encode_frame(req, &buf)) {
    throw_invalid_argument(op, -1, "keys", "and values add up to more than the frame limit");
  }
  send_all(op, buf, deadline, req.keys, timeout);
  Frame r = recv_frame(op, deadline, req.keys, timeout);
  if (r.op == Op::kError && r.id == 0) {
    // The server closed the connection after telling us why.
    std::string msg = "store server " + where + ": " + to_string(r.values[0]);
    mark_broken(msg);
    throw_error(ErrorCode::PeerFailure, op, -1, msg);
  }
  if (r.id != req.id) {
    std::string msg = "store server " + where + " answered request " + std::to_string(r.id) +
                      " instead of " + std::to_string(req.id);
    mark_broken(msg);
    throw_error(ErrorCode::Internal, op, -1, msg);
  }
  if (r.op == Op::kTimeout) detail::throw_store_timeout(op, r.keys, timeout);
  if (r.op == Op::kError) {
    int64_t code = r.num;
    ErrorCode ec = code >= 1 && code <= static_cast<int64_t>(ErrorCode::Aborted)
                       ? static_cast<ErrorCode>(code)
                       : ErrorCode::Internal;
    throw_error(ec, op, -1, "store server " + where + ": " + to_string(r.values[0]));
  }
  return r;
}

void TcpStore::Impl::connect(Millis timeout) {
  const char* op = "TcpStore";
  const auto deadline = detail::deadline_for(timeout);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  std::string port_str = std::to_string(port);
  std::string last_error = "no attempt";
  Millis backoff(10);
  detail::WaitReport report("TcpStore", detail::Subsys::STORE, -1, Clock::now(), deadline, timeout);
  for (;;) {
    addrinfo* res = nullptr;
    int rc = ::getaddrinfo(host.c_str(), port_str.c_str(), &hints, &res);
    if (rc != 0 && rc != EAI_AGAIN) {
      throw_invalid_argument(op, -1, "host",
                             "'" + host + "' cannot be resolved: " + gai_strerror(rc));
    }
    if (rc != 0) last_error = std::string("resolving: ") + gai_strerror(rc);
    for (addrinfo* ai = res; ai != nullptr && fd < 0; ai = ai->ai_next) {
      int s =
          ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
      if (s < 0) {
        last_error = "socket: " + errno_text(errno);
        continue;
      }
      int c = ::connect(s, ai->ai_addr, ai->ai_addrlen);
      if (c != 0 && errno == EINPROGRESS) {
        pollfd p{s, POLLOUT, 0};
        int pr;
        do {
          pr = ::poll(&p, 1, std::max(1, ms_until(deadline)));
        } while (pr < 0 && errno == EINTR);
        int err = 0;
        socklen_t len = sizeof(err);
        if (pr == 1) getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len);
        c = (pr == 1 && err == 0) ? 0 : -1;
        errno = pr == 1 ? err : ETIMEDOUT;
      }
      if (c == 0) {
        fd = s;
      } else {
        last_error = errno_text(errno);
        ::close(s);
      }
    }
    if (res != nullptr) ::freeaddrinfo(res);
    if (fd >= 0) break;
    if (Clock::now() >= deadline) {
      throw_error(ErrorCode::Timeout, op, -1,
                  "could not connect to the store server " + where + " within " +
                      std::to_string(timeout.count()) + " ms: " + last_error +
                      " (is the server running?)");
    }
    if (report.due(Clock::now())) {
      report.text("the store server " + where + " to accept a connection (" + last_error +
                  "; is the process hosting it running: rank 0 at MASTER_ADDR:MASTER_PORT+1, "
                  "symmem-run or symmem-store?)");
    }
    std::this_thread::sleep_for(std::min<Millis>(backoff, Millis(ms_until(deadline))));
    backoff = std::min<Millis>(backoff * 2, Millis(250));
  }
  set_nodelay(fd);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));

  // Handshake: the first frame carries the token (empty when none). Give it at least a few
  // seconds even when the connect timeout is nearly spent.
  Frame hello;
  hello.op = Op::kHello;
  hello.values.push_back(to_bytes(token));
  auto hs_deadline = std::max(deadline, Clock::now() + Millis(5000));
  try {
    call("TcpStore: handshake", hello, hs_deadline, timeout);
  } catch (const Error& e) {
    if (std::string(e.what()).find("wrong token") != std::string::npos) {
      throw_invalid_argument(op, -1, "token",
                             "was refused by the store server " + where +
                                 " (set SYMMEM_STORE_TOKEN to the job's token)");
    }
    if (e.code() == ErrorCode::PeerFailure && !token.empty()) {
      throw_error(ErrorCode::PeerFailure, op, -1,
                  std::string(e.what()) + "; the server may have refused the token");
    }
    throw;
  }
}

TcpStore::TcpStore(const std::string& host, uint16_t port, const std::string& token,
                   Millis connect_timeout)
    : impl_(std::make_unique<Impl>()) {
  SYMMEM_CHECK_ARG("TcpStore", -1, !host.empty(), "host", "is empty");
  SYMMEM_CHECK_ARG("TcpStore", -1, port != 0, "port", "is 0");
  SYMMEM_CHECK_ARG("TcpStore", -1, token.size() <= tcp::kTcpMaxTokenBytes, "token",
                   "has " << token.size() << " bytes, more than " << tcp::kTcpMaxTokenBytes);
  impl_->host = host;
  impl_->port = port;
  impl_->token = token;
  impl_->where =
      (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
  impl_->connect(detail::resolve_timeout(connect_timeout));
}

TcpStore::~TcpStore() = default;

namespace {

// Timeout and deadline of a non-blocking request: the default timeout.
Millis quick_timeout() {
  return detail::resolve_timeout(kDefaultTimeout);
}
Clock::time_point quick_deadline() {
  return detail::deadline_for(kDefaultTimeout);
}

}  // namespace

void TcpStore::set(const std::string& key, const Bytes& value) {
  detail::check_key("TcpStore::set", key);
  detail::check_value("TcpStore::set", key, value);
  Frame f;
  f.op = Op::kSet;
  f.keys = {key};
  f.values = {value};
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->call("TcpStore::set", f, quick_deadline(), quick_timeout());
}

Bytes TcpStore::get(const std::string& key, Millis timeout) {
  detail::check_key("TcpStore::get", key);
  timeout = detail::resolve_timeout(timeout);
  Frame f;
  f.op = Op::kGet;
  f.keys = {key};
  f.num = timeout.count();
  std::lock_guard<std::mutex> lock(impl_->mu);
  Frame r = impl_->call("TcpStore::get", f, detail::deadline_for(timeout + kReplyGrace), timeout);
  if (r.values.size() != 1) throw_error(ErrorCode::Internal, "TcpStore::get", -1, "bad reply");
  return std::move(r.values[0]);
}

void TcpStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  detail::check_keys("TcpStore::wait", keys);
  if (keys.empty()) return;
  timeout = detail::resolve_timeout(timeout);
  Frame f;
  f.op = Op::kWait;
  f.keys = keys;
  f.num = timeout.count();
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->call("TcpStore::wait", f, detail::deadline_for(timeout + kReplyGrace), timeout);
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  detail::check_key("TcpStore::add", key);
  Frame f;
  f.op = Op::kAdd;
  f.keys = {key};
  f.num = delta;
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->call("TcpStore::add", f, quick_deadline(), quick_timeout()).num;
}

Bytes TcpStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  detail::check_key("TcpStore::compare_set", key);
  detail::check_value("TcpStore::compare_set", key, expected);
  detail::check_value("TcpStore::compare_set", key, desired);
  Frame f;
  f.op = Op::kCompareSet;
  f.keys = {key};
  f.values = {expected, desired};
  std::lock_guard<std::mutex> lock(impl_->mu);
  Frame r = impl_->call("TcpStore::compare_set", f, quick_deadline(), quick_timeout());
  if (r.values.size() != 1) {
    throw_error(ErrorCode::Internal, "TcpStore::compare_set", -1, "bad reply");
  }
  return std::move(r.values[0]);
}

std::vector<Bytes> TcpStore::multi_get(const std::vector<std::string>& keys, Millis timeout) {
  detail::check_keys("TcpStore::multi_get", keys);
  if (keys.empty()) return {};
  timeout = detail::resolve_timeout(timeout);
  Frame f;
  f.op = Op::kMultiGet;
  f.keys = keys;
  f.num = timeout.count();
  std::lock_guard<std::mutex> lock(impl_->mu);
  Frame r =
      impl_->call("TcpStore::multi_get", f, detail::deadline_for(timeout + kReplyGrace), timeout);
  if (r.values.size() != keys.size()) {
    throw_error(ErrorCode::Internal, "TcpStore::multi_get", -1, "bad reply");
  }
  return std::move(r.values);
}

void TcpStore::multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) {
  SYMMEM_CHECK_ARG("TcpStore::multi_set", -1, keys.size() == values.size(), "values",
                   "has " << values.size() << " entries but 'keys' has " << keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    detail::check_key("TcpStore::multi_set", keys[i]);
    detail::check_value("TcpStore::multi_set", keys[i], values[i]);
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  // Split into frames that fit the frame limit.
  size_t i = 0;
  while (i < keys.size()) {
    Frame f;
    f.op = Op::kMultiSet;
    size_t body = tcp::body_size({}, {});
    while (i < keys.size()) {
      size_t add = 8 + keys[i].size() + values[i].size();
      if (!f.keys.empty() && body + add > tcp::kTcpMaxBodyBytes) break;
      f.keys.push_back(keys[i]);
      f.values.push_back(values[i]);
      body += add;
      ++i;
    }
    impl_->call("TcpStore::multi_set", f, quick_deadline(), quick_timeout());
  }
}

bool TcpStore::remove(const std::string& key) {
  detail::check_key("TcpStore::remove", key);
  Frame f;
  f.op = Op::kRemove;
  f.keys = {key};
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->call("TcpStore::remove", f, quick_deadline(), quick_timeout()).num != 0;
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  detail::check_keys("TcpStore::check", keys);
  if (keys.empty()) return true;
  Frame f;
  f.op = Op::kCheck;
  f.keys = keys;
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->call("TcpStore::check", f, quick_deadline(), quick_timeout()).num != 0;
}

bool TcpStore::set_on_disconnect(const std::string& key, const Bytes& value) {
  detail::check_key("TcpStore::set_on_disconnect", key);
  detail::check_value("TcpStore::set_on_disconnect", key, value);
  Frame f;
  f.op = Op::kSetOnClose;
  f.keys = {key};
  f.values = {value};
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->call("TcpStore::set_on_disconnect", f, quick_deadline(), quick_timeout());
  return true;
}

void TcpStore::cancel_on_disconnect(const std::string& key) {
  detail::check_key("TcpStore::cancel_on_disconnect", key);
  Frame f;
  f.op = Op::kCancelOnClose;
  f.keys = {key};
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->call("TcpStore::cancel_on_disconnect", f, quick_deadline(), quick_timeout());
}

int64_t TcpStore::num_keys() {
  Frame f;
  f.op = Op::kNumKeys;
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->call("TcpStore::num_keys", f, quick_deadline(), quick_timeout()).num;
}

}  // namespace symmem
