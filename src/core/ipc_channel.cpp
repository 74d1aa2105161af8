#include "core/ipc_channel.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "core/check.hpp"
#include "core/log.hpp"
#include "symmem/env.hpp"
#include "symmem/error.hpp"

namespace symmem {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kMagic = 0x494d5953;  // "SYMI"
constexpr uint32_t kVersion = 1;
constexpr size_t kMaxFds = 32;
constexpr size_t kMaxTag = 4096;
constexpr size_t kMaxPayload = 1 << 20;
constexpr auto kLivenessInterval = std::chrono::milliseconds(100);

struct Header {
  uint32_t magic;
  uint32_t version;
  uint32_t tag_len;
  uint32_t payload_len;
  uint32_t nfds;
  uint32_t reserved;
};

struct Message {
  std::vector<int> fds;
  Bytes payload;
  int pid = 0;
};

std::string errno_text(int e) {
  return std::string(std::strerror(e)) + " (errno " + std::to_string(e) + ")";
}

void close_all(const std::vector<int>& fds) {
  for (int fd : fds) ::close(fd);
}

Millis remaining(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now());
  return left.count() < 0 ? Millis(0) : left;
}

std::string random_hex(size_t bytes) {
  std::vector<uint8_t> b(bytes);
  size_t got = 0;
  while (got < bytes) {
    ssize_t n = ::getrandom(b.data() + got, bytes - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_error(ErrorCode::System, "IpcChannel", -1, "getrandom failed: " + errno_text(errno));
    }
    got += static_cast<size_t>(n);
  }
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (uint8_t c : b) {
    s.push_back(kHex[c >> 4]);
    s.push_back(kHex[c & 15]);
  }
  return s;
}

// sockaddr for "@name" (abstract) or a path. Returns the length to pass to bind/connect.
socklen_t make_addr(const std::string& address, sockaddr_un* sa, const char* op, int rank) {
  std::memset(sa, 0, sizeof(*sa));
  sa->sun_family = AF_UNIX;
  bool abstract = !address.empty() && address[0] == '@';
  size_t n = address.size();
  SYMMEM_CHECK_ARG(
      op, rank, n > 1 && n < sizeof(sa->sun_path), "address",
      "'" << address << "' is empty or longer than " << sizeof(sa->sun_path) - 1 << " characters");
  std::memcpy(sa->sun_path, address.data(), n);
  if (abstract) sa->sun_path[0] = '\0';
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + n + (abstract ? 0 : 1));
}

// Waits for `events` on fd until the deadline. Returns false on timeout.
bool wait_fd(int fd, short events, Clock::time_point deadline) {
  while (true) {
    auto left = remaining(deadline);
    pollfd p{fd, events, 0};
    int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1 << 30)));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return false;
  }
}

struct ucred peer_cred(int fd) {
  struct ucred cr {};
  socklen_t len = sizeof(cr);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0) {
    cr.uid = static_cast<uid_t>(-1);
    cr.pid = 0;
  }
  return cr;
}

// All live channels of this process, for cleanup at exit.
// Never destroyed: channels may outlive static destruction order.
std::mutex& live_mutex() {
  static auto* m = new std::mutex;
  return *m;
}
std::set<IpcChannel*>& live_channels() {
  static auto* s = new std::set<IpcChannel*>;
  return *s;
}

}  // namespace

struct IpcChannel::Impl {
  int rank = -1;
  pid_t owner_pid = 0;
  int listen_fd = -1;
  std::string address;
  std::string dir;   // "" in the abstract namespace
  std::string path;  // socket path ("" in the abstract namespace)

  std::mutex mu;
  std::condition_variable cv;
  bool accepting = false;
  std::multimap<std::string, Message> pending;

  // Removes what this process created. Idempotent; never throws. In a forked child that
  // inherited the channel only the child's copy of the fd is closed.
  void cleanup() noexcept {
    if (listen_fd >= 0) ::close(listen_fd);
    listen_fd = -1;
    if (owner_pid == ::getpid()) {
      if (!path.empty()) ::unlink(path.c_str());
      if (!dir.empty()) ::rmdir(dir.c_str());
    }
    path.clear();
    dir.clear();
    for (auto& [tag, m] : pending) close_all(m.fds);
    pending.clear();
  }

  // Reads one transfer from an accepted connection. Returns false (and logs) for a bad one.
  bool read_message(int fd, Clock::time_point deadline, std::string* tag, Message* out);
};

bool IpcChannel::Impl::read_message(int fd, Clock::time_point deadline, std::string* tag,
                                    Message* out) {
  Header h{};
  size_t got = 0;
  std::vector<int> fds;
  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * kMaxFds)];
  auto fail = [&](const std::string& why) {
    close_all(fds);
    SYMMEM_LOG(WARN, IPC) << "IpcChannel: rank " << rank << ": dropped a transfer: " << why;
    return false;
  };
  while (got < sizeof(h)) {
    if (!wait_fd(fd, POLLIN, deadline)) return fail("the sender sent no complete header in time");
    iovec iov{reinterpret_cast<char*>(&h) + got, sizeof(h) - got};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf;
    msg.msg_controllen = sizeof(cbuf);
    ssize_t n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return fail(n == 0 ? "connection closed early" : "recvmsg: " + errno_text(errno));
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
        size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; ++i) {
          int f;
          std::memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
          fds.push_back(f);
        }
      }
    }
    if (msg.msg_flags & MSG_CTRUNC) return fail("too many file descriptors (control data cut)");
    got += static_cast<size_t>(n);
  }
  if (h.magic != kMagic || h.version != kVersion) return fail("bad header (not a symmem peer?)");
  if (h.tag_len == 0 || h.tag_len > kMaxTag || h.payload_len > kMaxPayload) {
    return fail("tag or payload length out of range");
  }
  if (h.nfds != fds.size()) {
    return fail("announced " + std::to_string(h.nfds) + " fds, received " +
                std::to_string(fds.size()));
  }
  std::vector<char> body(h.tag_len + h.payload_len);
  got = 0;
  while (got < body.size()) {
    if (!wait_fd(fd, POLLIN, deadline)) return fail("the sender sent no complete body in time");
    ssize_t n = ::recv(fd, body.data() + got, body.size() - got, MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return fail(n == 0 ? "connection closed early" : "recv: " + errno_text(errno));
    got += static_cast<size_t>(n);
  }
  tag->assign(body.data(), h.tag_len);
  out->payload.assign(body.begin() + h.tag_len, body.end());
  out->fds = std::move(fds);
  return true;
}

IpcChannel::IpcChannel(int rank) : impl_(std::make_unique<Impl>()) {
  const char* op = "IpcChannel";
  impl_->rank = rank;
  impl_->owner_pid = ::getpid();
  std::string parent = env::socket_dir();
  std::string id = "symmem-" + std::to_string(::geteuid()) + "-" + random_hex(16);
  if (parent.empty()) {
    impl_->address = "@" + id;
  } else {
    while (parent.size() > 1 && parent.back() == '/') parent.pop_back();
    std::string dir = parent + "/" + id;
    std::string path = dir + "/ipc.sock";
    SYMMEM_CHECK(op, rank, path.size() < sizeof(sockaddr_un::sun_path), ErrorCode::InvalidArgument,
                 "SYMMEM_SOCKET_DIR='" << parent << "' is too long: the socket path '" << path
                                       << "' exceeds " << sizeof(sockaddr_un::sun_path) - 1
                                       << " characters");
    if (::mkdir(dir.c_str(), 0700) != 0) {
      throw_error(ErrorCode::System, op, rank,
                  "cannot create the private socket directory '" + dir +
                      "' (SYMMEM_SOCKET_DIR): " + errno_text(errno));
    }
    impl_->dir = dir;
    // mkdir honours the umask, which can only remove bits; make the mode exact and verify it.
    struct stat st {};
    if (::chmod(dir.c_str(), 0700) != 0 || ::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
        st.st_uid != ::geteuid() || (st.st_mode & 0777) != 0700) {
      int e = errno;
      impl_->cleanup();
      throw_error(ErrorCode::System, op, rank,
                  "the socket directory '" + dir +
                      "' is not a private (0700) directory of ours: " + errno_text(e));
    }
    impl_->path = path;
    impl_->address = path;
  }
  try {
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    SYMMEM_CHECK_SYS(op, rank, fd);
    impl_->listen_fd = fd;
    sockaddr_un sa;
    socklen_t len = make_addr(impl_->address, &sa, op, rank);
    SYMMEM_CHECK_SYS(op, rank, ::bind(fd, reinterpret_cast<sockaddr*>(&sa), len));
    SYMMEM_CHECK_SYS(op, rank, ::listen(fd, 512));
  } catch (...) {
    impl_->cleanup();
    throw;
  }
  {
    std::lock_guard<std::mutex> lock(live_mutex());
    static bool registered = false;
    if (!registered) {
      registered = true;
      // Channels still open when the process exits (exit() after an error, for instance).
      std::atexit([] {
        std::lock_guard<std::mutex> l(live_mutex());
        for (IpcChannel* c : live_channels()) c->impl_->cleanup();
      });
    }
    live_channels().insert(this);
  }
  SYMMEM_LOG(INFO, IPC) << "IpcChannel: rank " << rank << " listens at " << impl_->address;
}

IpcChannel::~IpcChannel() {
  {
    std::lock_guard<std::mutex> lock(live_mutex());
    live_channels().erase(this);
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->cleanup();
}

const std::string& IpcChannel::address() const {
  return impl_->address;
}
const std::string& IpcChannel::directory() const {
  return impl_->dir;
}

void IpcChannel::send_fds(const std::string& peer_address, int peer_rank, const std::string& tag,
                          const std::vector<int>& fds, const Bytes& payload, Millis timeout) {
  const char* op = "IpcChannel::send_fds";
  int rank = impl_->rank;
  SYMMEM_CHECK_ARG(op, rank, !tag.empty() && tag.size() <= kMaxTag, "tag",
                   "must have 1.." << kMaxTag << " characters");
  SYMMEM_CHECK_ARG(op, rank, fds.size() <= kMaxFds, "fds",
                   "has " << fds.size() << " entries; at most " << kMaxFds);
  SYMMEM_CHECK_ARG(op, rank, payload.size() <= kMaxPayload, "payload",
                   "has " << payload.size() << " bytes; at most " << kMaxPayload);
  auto deadline = Clock::now() + timeout;
  sockaddr_un sa;
  socklen_t len = make_addr(peer_address, &sa, op, rank);
  std::string who = "peer rank " + std::to_string(peer_rank) + " (" + peer_address + ")";

  int fd = -1;
  while (true) {
    fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    SYMMEM_CHECK_SYS(op, rank, fd);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), len) == 0) break;
    int e = errno;
    ::close(fd);
    fd = -1;
    if (e == ECONNREFUSED || e == ENOENT) {
      throw_error(ErrorCode::PeerFailure, op, rank,
                  who + " is gone: its IPC socket no longer accepts connections (" + errno_text(e) +
                      ") while sending '" + tag + "'");
    }
    if (e != EAGAIN && e != EINTR) {
      throw_error(ErrorCode::System, op, rank, "connect to " + who + " failed: " + errno_text(e));
    }
    if (Clock::now() >= deadline) {
      throw_error(ErrorCode::Timeout, op, rank,
                  "timed out after " + std::to_string(timeout.count()) + " ms connecting to " +
                      who + " (its backlog stays full) to send '" + tag + "'");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};

  // The listener must run as our user: never hand memory to another user's process.
  struct ucred cr = peer_cred(fd);
  if (cr.uid != ::geteuid()) {
    throw_error(ErrorCode::PeerFailure, op, rank,
                who + " refused: the listening process runs as uid " + std::to_string(cr.uid) +
                    ", not ours (" + std::to_string(::geteuid()) + ")");
  }

  Header h{kMagic,
           kVersion,
           static_cast<uint32_t>(tag.size()),
           static_cast<uint32_t>(payload.size()),
           static_cast<uint32_t>(fds.size()),
           0};
  std::vector<char> data(sizeof(h) + tag.size() + payload.size());
  std::memcpy(data.data(), &h, sizeof(h));
  std::memcpy(data.data() + sizeof(h), tag.data(), tag.size());
  if (!payload.empty())
    std::memcpy(data.data() + sizeof(h) + tag.size(), payload.data(), payload.size());

  size_t sent = 0;
  bool fds_sent = fds.empty();
  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * kMaxFds)];
  while (sent < data.size()) {
    if (!wait_fd(fd, POLLOUT, deadline)) {
      throw_error(ErrorCode::Timeout, op, rank,
                  "timed out after " + std::to_string(timeout.count()) + " ms sending '" + tag +
                      "' to " + who + " (it does not read)");
    }
    iovec iov{data.data() + sent, data.size() - sent};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (!fds_sent) {
      std::memset(cbuf, 0, sizeof(cbuf));
      msg.msg_control = cbuf;
      msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
      std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    }
    ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      int e = errno;
      if (e == EINTR || e == EAGAIN) continue;
      if (e == EPIPE || e == ECONNRESET) {
        throw_error(
            ErrorCode::PeerFailure, op, rank,
            who + " closed the connection while receiving '" + tag + "' (" + errno_text(e) + ")");
      }
      throw_error(ErrorCode::System, op, rank, "sendmsg to " + who + " failed: " + errno_text(e));
    }
    fds_sent = true;
    sent += static_cast<size_t>(n);
  }
  SYMMEM_LOG(TRACE, IPC) << "IpcChannel: rank " << rank << " sent '" << tag << "' (" << fds.size()
                         << " fds) to " << who;
}

std::vector<int> IpcChannel::recv_fds(const std::string& tag, int peer_rank, Bytes* payload,
                                      Millis timeout, int peer_pid, int* sender_pid) {
  const char* op = "IpcChannel::recv_fds";
  int rank = impl_->rank;
  auto start = Clock::now();
  auto deadline = start + timeout;
  auto next_liveness = start + kLivenessInterval;
  std::unique_lock<std::mutex> lock(impl_->mu);
  while (true) {
    auto it = impl_->pending.find(tag);
    if (it != impl_->pending.end()) {
      Message m = std::move(it->second);
      impl_->pending.erase(it);
      if (payload != nullptr) *payload = std::move(m.payload);
      if (sender_pid != nullptr) *sender_pid = m.pid;
      return std::move(m.fds);
    }
    auto now = Clock::now();
    if (now >= deadline) {
      throw_error(ErrorCode::Timeout, op, rank,
                  "timed out after " + std::to_string(timeout.count()) + " ms waiting for '" + tag +
                      "' from peer rank " + std::to_string(peer_rank));
    }
    if (peer_pid > 0 && now >= next_liveness) {
      next_liveness = now + kLivenessInterval;
      if (!process_alive(peer_pid)) {
        throw_error(ErrorCode::PeerFailure, op, rank,
                    "peer rank " + std::to_string(peer_rank) + " (pid " + std::to_string(peer_pid) +
                        ") exited before sending '" + tag + "'");
      }
    }
    auto slice = std::min<Clock::duration>(deadline - now, kLivenessInterval);
    if (impl_->accepting) {
      impl_->cv.wait_for(lock, slice);
      continue;
    }
    if (impl_->listen_fd < 0) {
      throw_error(ErrorCode::Internal, op, rank, "the channel is closed");
    }
    impl_->accepting = true;
    int lfd = impl_->listen_fd;
    lock.unlock();
    int conn = -1;
    pollfd p{lfd, POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(std::chrono::duration_cast<Millis>(slice).count()) + 1);
    if (r > 0) conn = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    std::string got_tag;
    Message m;
    bool ok = false;
    if (conn >= 0) {
      struct ucred cr = peer_cred(conn);
      if (cr.uid != ::geteuid()) {
        SYMMEM_LOG(WARN, IPC) << "IpcChannel: rank " << rank << ": refused a connection from uid "
                              << cr.uid << " (pid " << cr.pid << "): not our user";
      } else {
        m.pid = cr.pid;
        ok = impl_->read_message(conn, deadline, &got_tag, &m);
      }
      ::close(conn);
    }
    lock.lock();
    impl_->accepting = false;
    if (ok) impl_->pending.emplace(std::move(got_tag), std::move(m));
    impl_->cv.notify_all();
  }
}

IpcChannel& IpcChannel::instance(int rank) {
  static std::mutex m;
  static std::unique_ptr<IpcChannel> channel;
  std::lock_guard<std::mutex> lock(m);
  if (channel && channel->impl_->owner_pid != ::getpid()) {
    // Inherited across fork(): close our copy of the parent's socket, keep its files.
    {
      std::lock_guard<std::mutex> l(live_mutex());
      live_channels().erase(channel.get());
    }
    channel->impl_->cleanup();
    (void)channel.release();  // the parent's mutexes may be in any state: never destroy them
  }
  if (!channel) channel = std::make_unique<IpcChannel>(rank);
  return *channel;
}

bool IpcChannel::process_alive(int pid) {
  if (pid <= 0 || pid == ::getpid()) return true;
#ifdef SYS_pidfd_open
  int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd >= 0) {
    pollfd p{fd, POLLIN, 0};
    int r = ::poll(&p, 1, 0);
    ::close(fd);
    return r == 0;  // readable: the process has exited (a zombie included)
  }
  if (errno == ESRCH) return false;
#endif
  return ::kill(pid, 0) == 0 || errno == EPERM;
}

std::string IpcChannel::pid_namespace() {
  struct stat st {};
  if (::stat("/proc/self/ns/pid", &st) != 0) return "unknown";
  return std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
}

}  // namespace symmem
