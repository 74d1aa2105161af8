#include "launcher.hpp"

#include "binding.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <sstream>

extern char** environ;

namespace symmem::run {
namespace {

using Clock = std::chrono::steady_clock;

// NOTE [symmem-run signals]
// SIGINT, SIGTERM and SIGCHLD are caught by a handler that writes the signal number into a
// self-pipe; the poll() loop reads it. Signals are blocked around fork() so a child never runs
// our handler; the child restores default dispositions and an empty mask before execve().
int g_sig_pipe[2] = {-1, -1};

void on_signal(int sig) {
  int saved = errno;
  unsigned char c = static_cast<unsigned char>(sig);
  ssize_t ignored = write(g_sig_pipe[1], &c, 1);
  (void)ignored;
  errno = saved;
}

void write_all(int fd, const char* data, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return;  // stdout closed (e.g. piped into head): drop the output, keep managing ranks
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
}

void say(const std::string& line) {
  std::string s = "symmem-run: " + line + "\n";
  write_all(STDERR_FILENO, s.data(), s.size());
}

std::string signal_name(int sig) {
  const char* d = strsignal(sig);
  return d != nullptr ? d : "unknown";
}

std::string seconds_str(double s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

Clock::time_point after(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// One output stream of one rank: relayed line by line with a "[rank] " prefix, one write() per
// line so lines of different ranks never mix.
struct Relay {
  int fd = -1;      // read end of the rank's pipe; -1 once closed
  int out_fd = -1;  // our stdout or stderr
  std::string prefix;
  std::string pending;

  void emit(const char* data, size_t n) {
    std::string line;
    line.reserve(prefix.size() + n + 1);
    line += prefix;
    line.append(data, n);
    line += '\n';
    write_all(out_fd, line.data(), line.size());
  }

  // Reads what is available; returns false at EOF.
  bool pump() {
    char buf[65536];
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0) return errno == EINTR || errno == EAGAIN;
    if (n == 0) return false;
    pending.append(buf, static_cast<size_t>(n));
    size_t start = 0;
    for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
      emit(pending.data() + start, nl - start);
    }
    pending.erase(0, start);
    constexpr size_t kMaxLine = 1 << 16;  // a huge line without newline is cut into pieces
    while (pending.size() >= kMaxLine) {
      emit(pending.data(), kMaxLine);
      pending.erase(0, kMaxLine);
    }
    return true;
  }

  void close_fd() {
    if (fd >= 0) {
      if (!pending.empty()) emit(pending.data(), pending.size());
      pending.clear();
      ::close(fd);
      fd = -1;
    }
  }
};

struct Rank {
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  bool signalled_by_us = false;
  Relay out, err;

  bool exited_with(int code) const {
    return !running && WIFEXITED(status) && WEXITSTATUS(status) == code;
  }
  bool ok() const { return exited_with(0); }
  std::string how() const {
    if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
    if (WIFSIGNALED(status)) {
      int s = WTERMSIG(status);
      return "killed by signal " + std::to_string(s) + " (" + signal_name(s) + ")";
    }
    return "ended with status " + std::to_string(status);
  }
};

// PATH lookup done before fork (execve in the child needs no allocation).
std::optional<std::string> find_program(const std::string& name, std::string* why) {
  auto executable = [](const std::string& p) {
    struct stat st {};
    return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0;
  };
  if (name.find('/') != std::string::npos) {
    if (executable(name)) return name;
    *why = access(name.c_str(), F_OK) == 0 ? "not an executable file" : std::strerror(ENOENT);
    return std::nullopt;
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string dir = dirs.substr(start, end - start);
    if (dir.empty()) dir = ".";
    std::string cand = dir + "/" + name;
    if (executable(cand)) return cand;
    start = end + 1;
  }
  *why = "not found in PATH";
  return std::nullopt;
}

class Job {
 public:
  explicit Job(const LaunchConfig& c)
      : config_(c),
        ranks_(static_cast<size_t>(c.nranks)),
        restart_count_(static_cast<size_t>(c.nranks), 0) {}

  int run() {
    std::string why;
    auto program = find_program(config_.argv[0], &why);
    if (!program) {
      say("cannot execute '" + config_.argv[0] + "': " + why);
      return kExitCannotExec;
    }
    program_ = *program;
    if (!setup_signals()) return 1;
    devnull_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
    start_ = Clock::now();
    if (config_.timeout_s > 0) timeout_at_ = after(config_.timeout_s);

    for (int r = 0; r < config_.nranks; ++r) {
      if (!spawn(r)) {
        stop_all(SIGKILL);
        wait_all_blocking();
        finish_relays();
        return exec_failed_ ? kExitCannotExec : 1;
      }
    }
    loop();
    // Every rank's main process is gone: remove what they left behind in their process groups
    // (background children), then print the rest of their output.
    for (auto& r : ranks_) {
      if (r.pid > 0) kill(-r.pid, SIGKILL);
    }
    finish_relays();
    return summarise();
  }

 private:
  bool setup_signals() {
    if (pipe2(g_sig_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
      say(std::string("pipe2: ") + std::strerror(errno));
      return false;
    }
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    for (int s : {SIGINT, SIGTERM, SIGCHLD, SIGHUP}) sigaction(s, &sa, nullptr);
    signal(SIGPIPE, SIG_IGN);
    return true;
  }

  std::vector<std::string> rank_env(int r) const {
    std::map<std::string, std::string> vars = config_.env;
    std::string n = std::to_string(config_.nranks);
    for (const char* k : {"RANK", "SYMMEM_RANK", "LOCAL_RANK", "SYMMEM_LOCAL_RANK"}) {
      vars[k] = std::to_string(r);
    }
    for (const char* k :
         {"WORLD_SIZE", "SYMMEM_WORLD_SIZE", "LOCAL_WORLD_SIZE", "SYMMEM_LOCAL_WORLD_SIZE"}) {
      vars[k] = n;
    }
    if (restart_count_[static_cast<size_t>(r)] > 0)
      vars["SYMMEM_RESTART_COUNT"] = std::to_string(restart_count_[static_cast<size_t>(r)]);
    std::vector<std::string> out;
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
      std::string kv(*e);
      std::string key = kv.substr(0, kv.find('='));
      if (vars.count(key) == 0) out.push_back(kv);
    }
    for (const auto& [k, v] : vars) out.push_back(k + "=" + v);
    return out;
  }

  bool spawn(int r) {
    Rank& rank = ranks_[static_cast<size_t>(r)];
    int out[2], err[2], status[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0 || pipe2(status, O_CLOEXEC) != 0) {
      say(std::string("pipe2: ") + std::strerror(errno));
      return false;
    }
    // Everything the child needs is built before fork: after fork only async-signal-safe calls.
    std::vector<std::string> env_strings = rank_env(r);
    std::vector<char*> envp;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> args = config_.argv;
    std::vector<char*> argv;
    for (auto& s : args) argv.push_back(s.data());
    argv.push_back(nullptr);
    const char* path = program_.c_str();
    pid_t parent = getpid();
    // The rank's CPU mask, built here too (CPU_ALLOC allocates).
    const std::vector<int>* cpus =
        static_cast<size_t>(r) < config_.rank_cpus.size() ? &config_.rank_cpus[r] : nullptr;
    std::unique_ptr<cpu_set_t, void (*)(cpu_set_t*)> mask(nullptr, [](cpu_set_t* m) {
      if (m != nullptr) CPU_FREE(m);
    });
    size_t mask_bytes = 0;
    if (cpus != nullptr && !cpus->empty()) {
      const int top = *std::max_element(cpus->begin(), cpus->end());
      mask.reset(CPU_ALLOC(static_cast<size_t>(top) + 1));
      if (!mask) {
        say("cannot allocate a CPU mask for rank " + std::to_string(r));
        return false;
      }
      mask_bytes = CPU_ALLOC_SIZE(static_cast<size_t>(top) + 1);
      CPU_ZERO_S(mask_bytes, mask.get());
      for (int c : *cpus) CPU_SET_S(static_cast<size_t>(c), mask_bytes, mask.get());
    }
    cpu_set_t* child_mask = mask.get();

    sigset_t all, old;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &old);
    pid_t pid = fork();
    if (pid == 0) {
      // Child.
      setpgid(0, 0);  // its own process group, so stopping a rank stops its children too
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // no orphans if symmem-run itself is killed
      if (getppid() != parent) _exit(kExitCannotExec);
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      sigemptyset(&dfl.sa_mask);
      for (int s : {SIGINT, SIGTERM, SIGCHLD, SIGHUP, SIGPIPE}) sigaction(s, &dfl, nullptr);
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      if (devnull_ >= 0) dup2(devnull_, STDIN_FILENO);
      dup2(out[1], STDOUT_FILENO);
      dup2(err[1], STDERR_FILENO);
      if (child_mask != nullptr && sched_setaffinity(0, mask_bytes, child_mask) != 0) {
        int e = -errno;  // negative: the binding failed, not execve
        ssize_t ignored = write(status[1], &e, sizeof(e));
        (void)ignored;
        _exit(kExitCannotExec);
      }
      execve(path, argv.data(), envp.data());
      int e = errno;
      ssize_t ignored = write(status[1], &e, sizeof(e));
      (void)ignored;
      _exit(kExitCannotExec);
    }
    int fork_errno = errno;
    if (pid > 0) setpgid(pid, pid);  // also here: no race with kill(-pid) below
    sigprocmask(SIG_SETMASK, &old, nullptr);
    close(out[1]);
    close(err[1]);
    close(status[1]);
    if (pid < 0) {
      say(std::string("fork: ") + std::strerror(fork_errno));
      close(out[0]);
      close(err[0]);
      close(status[0]);
      return false;
    }
    rank.pid = pid;
    rank.running = true;
    std::string prefix = "[" + std::to_string(r) + "] ";
    rank.out = Relay{out[0], STDOUT_FILENO, prefix, {}};
    rank.err = Relay{err[0], STDERR_FILENO, prefix, {}};
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    fcntl(err[0], F_SETFL, O_NONBLOCK);
    // Wait for execve: the status pipe closes on success, carries errno on failure.
    int child_errno = 0;
    ssize_t n;
    do {
      n = read(status[0], &child_errno, sizeof(child_errno));
    } while (n < 0 && errno == EINTR);
    close(status[0]);
    if (n == static_cast<ssize_t>(sizeof(child_errno)) && child_errno < 0) {
      say("cannot bind rank " + std::to_string(r) + " to CPUs " + cpu_list_string(*cpus) + ": " +
          std::strerror(-child_errno));
      return false;
    }
    if (n == static_cast<ssize_t>(sizeof(child_errno))) {
      say("cannot execute '" + program_ + "': " + std::strerror(child_errno));
      exec_failed_ = true;
      return false;
    }
    return true;
  }

  void stop_all(int sig) {
    for (auto& r : ranks_) {
      if (r.running && r.pid > 0) {
        kill(-r.pid, sig);
        r.signalled_by_us = true;
      }
    }
  }

  int running_count() const {
    int n = 0;
    for (const auto& r : ranks_) n += r.running ? 1 : 0;
    return n;
  }

  void reap() {
    for (;;) {
      int st = 0;
      pid_t pid = waitpid(-1, &st, WNOHANG);
      if (pid <= 0) return;
      for (size_t i = 0; i < ranks_.size(); ++i) {
        Rank& r = ranks_[i];
        if (r.pid != pid || !r.running) continue;
        r.running = false;
        r.status = st;
        on_rank_end(static_cast<int>(i));
      }
    }
  }

  // --keep-going or --restart-failed: a failed rank does not stop the others.
  bool keeps_going() const { return config_.keep_going || config_.restarts > 0; }

  void on_rank_end(int i) {
    const Rank& r = ranks_[static_cast<size_t>(i)];
    if (r.ok() || stopping_) return;
    if (r.exited_with(kExitSkip)) {
      // Skips usually come from every rank at once; give the others time to skip too.
      if (!stop_at_) stop_at_ = after(config_.skip_grace_s);
      return;
    }
    const std::string line = "rank " + std::to_string(i) + " " + r.how();
    if (config_.on_failure) config_.on_failure(i, line);
    if (keeps_going()) {
      // NOTE [keep going]: the others carry on (they see PeerFailure and may shrink their
      // group); with restarts left, the rank starts again (it may rejoin through grow()).
      ++failures_;
      if (first_failure_ < 0) first_failure_ = i;
      if (restarts_used_ < config_.restarts) {
        ++restarts_used_;
        const int k = ++restart_count_[static_cast<size_t>(i)];
        say(line + "; starting it again (restart " + std::to_string(restarts_used_) + " of " +
            std::to_string(config_.restarts) + ", SYMMEM_RESTART_COUNT=" + std::to_string(k) + ")");
        Rank& old = ranks_[static_cast<size_t>(i)];
        kill(-old.pid, SIGKILL);  // what the dead process left in its process group
        for (Relay* rel : {&old.out, &old.err}) {
          for (int reads = 0; reads < 64 && rel->fd >= 0 && rel->pump(); ++reads) {
          }
          rel->close_fd();  // relays the rest of its output first
        }
        if (!spawn(i)) say("cannot start rank " + std::to_string(i) + " again");
      } else {
        say(line + "; the other ranks carry on (--keep-going)");
      }
      return;
    }
    if (first_failure_ < 0) {
      first_failure_ = i;
      auto at = after(config_.fail_grace_s);
      if (!stop_at_ || at < *stop_at_) stop_at_ = at;
    }
  }

  void begin_stop(int sig) {
    stopping_ = true;
    stop_at_.reset();
    stop_all(sig);
    if (!kill_at_) kill_at_ = after(config_.kill_grace_s);
  }

  void on_signal_byte(int sig) {
    if (sig == SIGCHLD) return;  // reaped below
    if (interrupted_by_ != 0) {
      say("second " + signal_name(sig) + ": killing every rank");
      stop_all(SIGKILL);
      return;
    }
    interrupted_by_ = sig;
    say("got signal " + std::to_string(sig) + " (" + signal_name(sig) +
        "), forwarding it to the ranks");
    stopping_ = true;
    stop_at_.reset();
    stop_all(sig == SIGHUP ? SIGTERM : sig);
    kill_at_ = after(config_.kill_grace_s);
  }

  void loop() {
    std::vector<pollfd> fds;
    std::vector<Relay*> relays;
    while (running_count() > 0) {
      fds.clear();
      relays.clear();
      fds.push_back({g_sig_pipe[0], POLLIN, 0});
      for (auto& r : ranks_) {
        for (Relay* rel : {&r.out, &r.err}) {
          if (rel->fd >= 0) {
            fds.push_back({rel->fd, POLLIN, 0});
            relays.push_back(rel);
          }
        }
      }
      int wait_ms = 1000;  // SIGCHLD wakes us; this only bounds a missed wake-up
      auto now = Clock::now();
      for (const auto& t : {timeout_at_, stop_at_, kill_at_}) {
        if (!t) continue;
        auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(*t - now).count() + 1;
        wait_ms = static_cast<int>(std::clamp<long long>(ms, 0, wait_ms));
      }
      int n = poll(fds.data(), fds.size(), wait_ms);
      if (n < 0 && errno != EINTR) {
        say(std::string("poll: ") + std::strerror(errno));
        begin_stop(SIGKILL);
      }
      if (n > 0) {
        if (fds[0].revents & POLLIN) {
          unsigned char buf[64];
          ssize_t k;
          while ((k = read(g_sig_pipe[0], buf, sizeof(buf))) > 0) {
            for (ssize_t j = 0; j < k; ++j) on_signal_byte(buf[j]);
          }
        }
        for (size_t j = 1; j < fds.size(); ++j) {
          if (fds[j].revents & (POLLIN | POLLHUP | POLLERR)) {
            if (!relays[j - 1]->pump()) relays[j - 1]->close_fd();
          }
        }
      }
      reap();
      now = Clock::now();
      if (timeout_at_ && now >= *timeout_at_ && !timed_out_) {
        timed_out_ = true;
        timeout_at_.reset();
        say("timeout: the job ran longer than " + seconds_str(config_.timeout_s) +
            " s; stopping the ranks still running");
        begin_stop(SIGTERM);
      }
      if (stop_at_ && now >= *stop_at_) begin_stop(SIGTERM);
      if (kill_at_ && now >= *kill_at_) {
        kill_at_.reset();
        stop_all(SIGKILL);
      }
    }
  }

  void wait_all_blocking() {
    for (auto& r : ranks_) {
      if (!r.running) continue;
      int st = 0;
      while (waitpid(r.pid, &st, 0) < 0 && errno == EINTR) {
      }
      r.running = false;
      r.status = st;
    }
  }

  // Reads what is left in the pipes (bounded: a process that escaped its group may hold one).
  void finish_relays() {
    auto deadline = after(1.0);
    for (;;) {
      std::vector<pollfd> fds;
      std::vector<Relay*> relays;
      for (auto& r : ranks_) {
        for (Relay* rel : {&r.out, &r.err}) {
          if (rel->fd >= 0) {
            fds.push_back({rel->fd, POLLIN, 0});
            relays.push_back(rel);
          }
        }
      }
      if (fds.empty()) return;
      auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) break;
      int n = poll(fds.data(), fds.size(), static_cast<int>(left));
      if (n <= 0) {
        if (n < 0 && errno == EINTR) continue;
        break;
      }
      for (size_t j = 0; j < fds.size(); ++j) {
        if (fds[j].revents & (POLLIN | POLLHUP | POLLERR)) {
          if (!relays[j]->pump()) relays[j]->close_fd();
        }
      }
    }
    for (auto& r : ranks_) {
      r.out.close_fd();
      r.err.close_fd();
    }
  }

  int summarise() {
    bool all_ok = std::all_of(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.ok(); });
    if (!all_ok && keeps_going() && interrupted_by_ == 0 && !timed_out_) {
      // NOTE [keep going]: ranks killed by a signal were expected; an error exit was not.
      bool any_ok = false, any_error = false;
      for (const auto& r : ranks_) {
        any_ok = any_ok || r.ok();
        any_error = any_error || (!r.ok() && !WIFSIGNALED(r.status));
      }
      if (any_ok && !any_error) {
        say(std::to_string(failures_) + " rank failure(s) tolerated (--keep-going); " +
            "the other ranks exited 0");
        return 0;
      }
    }
    if (all_ok && interrupted_by_ == 0 && !timed_out_) return 0;
    bool all_skip = std::all_of(ranks_.begin(), ranks_.end(),
                                [](const Rank& r) { return r.exited_with(kExitSkip); });
    if (all_skip && interrupted_by_ == 0 && !timed_out_) return kExitSkip;

    std::vector<int> order;
    if (first_failure_ >= 0) order.push_back(first_failure_);
    for (int i = 0; i < config_.nranks; ++i) {
      if (i != first_failure_) order.push_back(i);
    }
    for (int i : order) {
      const Rank& r = ranks_[static_cast<size_t>(i)];
      if (r.ok()) continue;
      std::string line = "rank " + std::to_string(i) + " " + r.how();
      if (r.exited_with(kExitSkip)) line += " (skip; not every rank skipped)";
      if (i == first_failure_ && config_.nranks > 1)
        line += " (first failure)";
      else if (r.signalled_by_us)
        line += " (stopped by symmem-run)";
      say(line);
    }
    if (timed_out_) return kExitTimeout;
    if (interrupted_by_ != 0) return 128 + interrupted_by_;
    return 1;
  }

  const LaunchConfig& config_;
  std::vector<Rank> ranks_;
  std::vector<int> restart_count_;  // per rank: SYMMEM_RESTART_COUNT of its current process
  int restarts_used_ = 0;
  int failures_ = 0;
  std::string program_;
  int devnull_ = -1;
  Clock::time_point start_;
  std::optional<Clock::time_point> timeout_at_, stop_at_, kill_at_;
  bool stopping_ = false;
  bool timed_out_ = false;
  bool exec_failed_ = false;
  int interrupted_by_ = 0;
  int first_failure_ = -1;
};

}  // namespace

int run_job(const LaunchConfig& config) {
  Job job(config);
  return job.run();
}

}  // namespace symmem::run
