// The symmem-store program: serves clients, refuses wrong tokens, stops cleanly on SIGTERM and
// SIGINT, rejects bad arguments.

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "symmem/store.hpp"
#include "test_util.hpp"

extern char** environ;

namespace symmem::test {
namespace {

using namespace std::chrono_literals;

struct Tool {
  pid_t pid = -1;
  int out = -1;  // read end of its stdout
  ~Tool() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    if (out >= 0) close(out);
  }
};

void start_tool(Tool* t, std::vector<std::string> args) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  std::vector<char*> argv = {const_cast<char*>(SYMMEM_STORE_TOOL)};
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ASSERT_EQ(posix_spawn(&t->pid, SYMMEM_STORE_TOOL, &fa, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  t->out = fds[0];
}

// Reads stdout until a full line arrives (bounded).
std::string read_line(int fd, std::chrono::milliseconds timeout) {
  std::string line;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (line.find('\n') == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    char c;
    if (read(fd, &c, 1) != 1) break;
    line += c;
  }
  return line;
}

int wait_exit(pid_t pid, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(10ms);
  }
  return -1;
}

void serve_and_stop(int sig) {
  Tool t;
  start_tool(&t, {"--host", "127.0.0.1", "--port", "0", "--token", "tool-token"});
  std::string line = read_line(t.out, 10s);
  auto pos = line.find("listening on 127.0.0.1:");
  ASSERT_NE(pos, std::string::npos) << line;
  uint16_t port = static_cast<uint16_t>(std::stoi(line.substr(pos + 23)));
  {
    TcpStore c("127.0.0.1", port, "tool-token", 5s);
    c.set("k", to_bytes("v"));
    EXPECT_EQ(to_string(c.get("k", 1s)), "v");
    expect_error([&] { TcpStore("127.0.0.1", port, "bad", 5s); }, ErrorCode::InvalidArgument,
                 {"'token'"});
    kill(t.pid, sig);
    EXPECT_EQ(wait_exit(t.pid, 10s), 0);
    t.pid = -1;
    // The server is gone: the client's next call is a PeerFailure.
    expect_error([&] { c.get("k", 1s); }, ErrorCode::PeerFailure, {"TcpStore::get"});
  }
}

TEST(SymmemStoreTool, ServesAndStopsOnSigterm) {
  serve_and_stop(SIGTERM);
}
TEST(SymmemStoreTool, ServesAndStopsOnSigint) {
  serve_and_stop(SIGINT);
}

TEST(SymmemStoreTool, RejectsBadArguments) {
  for (std::vector<std::string> args :
       {std::vector<std::string>{"--port", "99999"}, {"--bogus"}, {"--port"}}) {
    Tool t;
    start_tool(&t, args);
    EXPECT_EQ(wait_exit(t.pid, 10s), 2) << args[0];
    t.pid = -1;
  }
}

}  // namespace
}  // namespace symmem::test
