// IpcChannel: fd passing, tags, deadlines, peers that are gone, and attempts from another user.

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/ipc_channel.hpp"
#include "symmem/env.hpp"
#include "test_util.hpp"

namespace symmem::test {
namespace {

// Sets (or unsets) SYMMEM_SOCKET_DIR for the scope of a test.
class SocketDirScope {
 public:
  explicit SocketDirScope(const std::string& dir) {
    if (dir.empty()) {
      ::unsetenv("SYMMEM_SOCKET_DIR");
    } else {
      ::setenv("SYMMEM_SOCKET_DIR", dir.c_str(), 1);
    }
    env::reset_cache_for_testing();
  }
  ~SocketDirScope() {
    ::unsetenv("SYMMEM_SOCKET_DIR");
    env::reset_cache_for_testing();
  }
};

std::string make_temp_dir() {
  char tmpl[] = "/tmp/symmem-ipc-test-XXXXXX";
  char* d = ::mkdtemp(tmpl);
  EXPECT_NE(d, nullptr);
  ::chmod(tmpl, 0755);  // other users may traverse it; our private subdirectory must still hold
  return tmpl;
}

// Sends a pipe's write end from a to b and checks that it works on b's side.
void exchange_pipe(IpcChannel& a, IpcChannel& b) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  a.send_fds(b.address(), 1, "pipe", {p[1]}, to_bytes("hello"), Millis(5000));
  ::close(p[1]);
  Bytes payload;
  int sender_pid = -1;
  auto fds = b.recv_fds("pipe", 0, &payload, Millis(5000), 0, &sender_pid);
  ASSERT_EQ(fds.size(), 1u);
  EXPECT_EQ(to_string(payload), "hello");
  EXPECT_EQ(sender_pid, ::getpid());
  ASSERT_EQ(::write(fds[0], "x", 1), 1);
  char c = 0;
  ASSERT_EQ(::read(p[0], &c, 1), 1);
  EXPECT_EQ(c, 'x');
  ::close(fds[0]);
  ::close(p[0]);
}

TEST(IpcChannel, PassesFdsInAbstractNamespace) {
  SocketDirScope scope("");
  IpcChannel a(0), b(1);
  EXPECT_EQ(a.address()[0], '@');
  EXPECT_TRUE(a.directory().empty());
  EXPECT_NE(a.address(), b.address());
  EXPECT_GE(a.address().size(), 32u);  // 128 random bits in the name
  exchange_pipe(a, b);
}

TEST(IpcChannel, PrivateDirectoryIs0700AndRemoved) {
  std::string parent = make_temp_dir();
  SocketDirScope scope(parent);
  std::string dir;
  {
    IpcChannel a(0), b(1);
    dir = a.directory();
    ASSERT_FALSE(dir.empty());
    struct stat st {};
    ASSERT_EQ(::stat(dir.c_str(), &st), 0);
    EXPECT_TRUE(S_ISDIR(st.st_mode));
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    EXPECT_EQ(st.st_uid, ::geteuid());
    EXPECT_EQ(a.address().rfind(dir, 0), 0u);
    exchange_pipe(a, b);
  }
  EXPECT_FALSE(std::filesystem::exists(dir)) << dir << " left behind";
  EXPECT_TRUE(std::filesystem::is_empty(parent)) << parent << " not empty";
  std::filesystem::remove_all(parent);
}

TEST(IpcChannel, TagsOutOfOrderAndDeadlines) {
  SocketDirScope scope("");
  IpcChannel a(3), b(4);
  a.send_fds(b.address(), 4, "t1", {}, to_bytes("one"), Millis(1000));
  a.send_fds(b.address(), 4, "t2", {}, to_bytes("two"), Millis(1000));
  Bytes p;
  EXPECT_TRUE(b.recv_fds("t2", 3, &p, Millis(1000)).empty());
  EXPECT_EQ(to_string(p), "two");
  b.recv_fds("t1", 3, &p, Millis(1000));
  EXPECT_EQ(to_string(p), "one");
  auto t0 = std::chrono::steady_clock::now();
  expect_error([&] { b.recv_fds("never", 3, &p, Millis(150)); }, ErrorCode::Timeout,
               {"rank 4", "'never'", "peer rank 3", "150 ms"});
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(140));
}

TEST(IpcChannel, PeerGoneIsPeerFailure) {
  SocketDirScope scope("");
  IpcChannel a(0);
  std::string gone;
  {
    IpcChannel b(7);
    gone = b.address();
  }
  expect_error([&] { a.send_fds(gone, 7, "x", {}, {}, Millis(1000)); }, ErrorCode::PeerFailure,
               {"peer rank 7", "gone"});
  // A peer process that exits while we wait for its transfer.
  pid_t child = ::fork();
  if (child == 0) {
    ::usleep(100 * 1000);
    ::_exit(0);
  }
  auto t0 = std::chrono::steady_clock::now();
  expect_error([&] { a.recv_fds("from-child", 5, nullptr, Millis(20000), child); },
               ErrorCode::PeerFailure, {"peer rank 5", "exited", std::to_string(child).c_str()});
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_FALSE(IpcChannel::process_alive(child));
  EXPECT_TRUE(IpcChannel::process_alive(::getpid()));
}

// Runs fn() in a child process that has switched to uid/gid 65534 (nobody). Returns the child's
// exit status (0 = all its checks passed), or -1 when the test cannot switch users.
template <class Fn>
int as_other_user(Fn&& fn) {
  pid_t child = ::fork();
  if (child == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(99);
    ::_exit(fn());
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  if (!WIFEXITED(status)) return 98;
  return WEXITSTATUS(status) == 99 ? -1 : WEXITSTATUS(status);
}

// From outside the job: a process of another user cannot hand us anything, and we never hand
// memory to it.
TEST(IpcSecurity, OtherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to switch to another uid";
  const std::string temp = make_temp_dir();
  for (std::string parent : {std::string(), temp}) {
    SocketDirScope scope(parent);
    IpcChannel victim(0);
    const std::string addr = victim.address();
    int rc = as_other_user([&] {
      // 1. Connect with a raw socket and push a forged transfer carrying an fd.
      sockaddr_un sa{};
      sa.sun_family = AF_UNIX;
      std::memcpy(sa.sun_path, addr.data(), addr.size());
      socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + addr.size() +
                                             (addr[0] == '@' ? 0 : 1));
      if (addr[0] == '@') sa.sun_path[0] = '\0';
      int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), len) == 0) {
        if (addr[0] != '@') return 10;  // the 0700 directory must stop us before the socket
        uint32_t hdr[6] = {0x494d5953, 1, 6, 0, 0, 0};
        (void)!::write(fd, hdr, sizeof(hdr));
        (void)!::write(fd, "forged", 6);
      } else if (addr[0] != '@' && errno != EACCES) {
        return 11;
      }
      ::close(fd);
      // 2. Through IpcChannel itself: it must refuse the victim (another uid) as a receiver.
      if (addr[0] == '@') {
        try {
          IpcChannel mine(9);
          mine.send_fds(addr, 0, "forged", {}, {}, Millis(2000));
          return 12;  // handed data to another user's process
        } catch (const Error& e) {
          if (e.code() != ErrorCode::PeerFailure || !std::strstr(e.what(), "uid")) return 13;
        }
      }
      return 0;
    });
    ASSERT_NE(rc, -1) << "cannot switch to uid 65534";
    EXPECT_EQ(rc, 0) << "child check " << rc << " failed (socket dir '" << parent << "')";
    // The forged transfer never reaches a caller.
    expect_error([&] { victim.recv_fds("forged", 9, nullptr, Millis(300)); }, ErrorCode::Timeout,
                 {"forged"});
    if (!parent.empty()) {
      struct stat st {};
      ASSERT_EQ(::stat(victim.directory().c_str(), &st), 0);
      EXPECT_EQ(st.st_mode & 0777, 0700u);
    }
  }
  EXPECT_TRUE(std::filesystem::is_empty(temp));
  std::filesystem::remove_all(temp);
}

}  // namespace
}  // namespace symmem::test
