#pragma once

// Runs symmem-run (SYMMEM_RUN_PATH) as a child process and collects its exit status, output
// and duration; for tests that drive the launcher from outside.

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

extern char** environ;

namespace symmem::test {

using Clock = std::chrono::steady_clock;

struct Result {
  int rc = -1;  // exit status, or 128+signal
  std::string out, err;
  std::string note;  // symmem-run's line saying it did not bind the ranks (taken out of `err`)
  double seconds = 0;
};

// Whether `line` is the note symmem-run prints when its default binding binds nothing (more
// ranks than CPUs; NOTE [rank binding] in tools/run/binding.hpp).
inline bool is_binding_note(const std::string& line) {
  return line.rfind("symmem-run: ", 0) == 0 &&
         line.find("ranks are not bound to CPUs") != std::string::npos;
}

inline std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs symmem-run with `args`; kills it (and fails the test) after `limit_s`. `during` runs
// while it is running (with its pid).
inline Result run(std::vector<std::string> args, double limit_s = 30,
                  const std::function<void(pid_t)>& during = nullptr,
                  const std::vector<std::string>& extra_env = {}) {
  args.insert(args.begin(), SYMMEM_RUN_PATH);
  char out_path[] = "/tmp/symmem-run-test-out-XXXXXX";
  char err_path[] = "/tmp/symmem-run-test-err-XXXXXX";
  int out_fd = mkstemp(out_path);
  int err_fd = mkstemp(err_path);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
  posix_spawn_file_actions_adddup2(&fa, err_fd, 2);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_s;
  for (char** e = environ; *e != nullptr; ++e) env_s.emplace_back(*e);
  for (const auto& e : extra_env) env_s.push_back(e);
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);
  Result r;
  auto t0 = Clock::now();
  pid_t pid = -1;
  int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  close(out_fd);
  close(err_fd);
  if (rc != 0) {
    ADD_FAILURE() << "cannot spawn " << argv[0] << ": " << strerror(rc);
    return r;
  }
  if (during) during(pid);
  int st = 0;
  for (;;) {
    pid_t w = waitpid(pid, &st, WNOHANG);
    if (w == pid) break;
    if (std::chrono::duration<double>(Clock::now() - t0).count() > limit_s) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      ADD_FAILURE() << "symmem-run did not finish within " << limit_s << " s";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  r.out = slurp(out_path);
  {
    std::istringstream in(slurp(err_path));
    for (std::string l; std::getline(in, l);) (is_binding_note(l) ? r.note : r.err) += l + "\n";
  }
  unlink(out_path);
  unlink(err_path);
  return r;
}

inline std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> v;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) v.push_back(l);
  return v;
}

inline bool contains(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

inline bool pid_alive(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string s;
  if (!std::getline(f, s)) return false;
  auto p = s.rfind(") ");
  return p != std::string::npos && s[p + 2] != 'Z';
}

}  // namespace symmem::test
