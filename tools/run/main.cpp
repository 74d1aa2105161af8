// symmem-run: starts N local ranks of a program, like `torchrun --standalone`.
//
//   symmem-run -n N [--bind-to core|numa|none] [--timeout SEC] [--fail-grace SEC] [--]
//              PROGRAM [ARGS...]
//
// See `symmem-run --help` and docs/launching.md.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include "binding.hpp"
#include "launcher.hpp"
#include "symmem/error.hpp"
#include "symmem/store.hpp"

namespace {

constexpr const char* kUsage =
    "usage: symmem-run -n N [--bind-to core|numa|none] [--report-bindings] [--timeout SEC]\n"
    "                  [--fail-grace SEC] [--kill-grace SEC] [--keep-going]\n"
    "                  [--restart-failed N] [--] PROGRAM [ARGS...]\n"
    "\n"
    "Starts N ranks of PROGRAM on this host, hosts their rendezvous store, and relays their\n"
    "output with a \"[rank] \" prefix. Each rank gets RANK, WORLD_SIZE, LOCAL_RANK,\n"
    "LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT (a free port, left for\n"
    "torch.distributed), SYMMEM_RANK, SYMMEM_WORLD_SIZE, SYMMEM_LOCAL_RANK,\n"
    "SYMMEM_LOCAL_WORLD_SIZE, SYMMEM_STORE=tcp://127.0.0.1:PORT and a random SYMMEM_STORE_TOKEN.\n"
    "\n"
    "  -n, --np N          number of ranks (1..4096)\n"
    "  --bind-to WHAT      bind each rank to CPUs, within the CPUs symmem-run itself may use\n"
    "                      (its affinity mask: taskset, a cgroup, a Slurm allocation):\n"
    "                        core  a core of its own (a hardware thread of its own when there\n"
    "                              are fewer cores than ranks; an error when there are fewer\n"
    "                              CPUs than ranks)\n"
    "                        numa  the CPUs of a NUMA node (ranks share nodes if they must)\n"
    "                        none  no binding\n"
    "                      Default: numa when every rank can have a NUMA node of its own on a\n"
    "                      machine with several, else core when there are enough CPUs, else\n"
    "                      none (said once on stderr).\n"
    "  --report-bindings   print each rank's CPUs on stderr\n"
    "  --timeout SEC       stop the job after SEC seconds (exit status 124)\n"
    "  --fail-grace SEC    after a rank fails, give the others SEC seconds to end on their own\n"
    "                      (to see their errors) before stopping them; default 0\n"
    "  --kill-grace SEC    SIGTERM -> SIGKILL delay when stopping ranks; default 3\n"
    "  --keep-going        a failed rank does not stop the others: they see PeerFailure and\n"
    "                      can go on without it (Group::shrink). Exit status 0 when no rank\n"
    "                      exited with a non-zero code and one exited 0 (ranks killed by a\n"
    "                      signal are tolerated)\n"
    "  --restart-failed N  as --keep-going, and start a failed rank again, N times in all; the\n"
    "                      new process has SYMMEM_RESTART_COUNT=k and joins the survivors with\n"
    "                      Group::rejoin() when they call grow()\n"
    "  -h, --help          this text\n"
    "\n"
    "If a rank exits non-zero or dies by a signal, the others get SIGTERM (then SIGKILL),\n"
    "unless --keep-going or --restart-failed is given; symmem-run prints one line per failed\n"
    "rank on stderr. SIGINT/SIGTERM are forwarded to the\n"
    "ranks. Exit status: 0 when every rank exited 0; 77 when every rank exited 77 (skipped);\n"
    "124 after --timeout; 127 when PROGRAM cannot be executed; 128+N when symmem-run got\n"
    "signal N; 1 otherwise.\n";

[[noreturn]] void usage_error(const std::string& what) {
  std::fprintf(stderr, "symmem-run: %s\n%s", what.c_str(), kUsage);
  std::exit(2);
}

double parse_seconds(const std::string& flag, const std::string& v, bool allow_zero) {
  char* end = nullptr;
  errno = 0;
  double d = std::strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size() || errno != 0 || !std::isfinite(d) || d < 0 ||
      (!allow_zero && d == 0) || d > 1e7) {
    usage_error(flag + " wants a number of seconds" + (allow_zero ? " >= 0" : " > 0") + ", got '" +
                v + "'");
  }
  return d;
}

int parse_count(const std::string& v) {
  char* end = nullptr;
  errno = 0;
  long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || end != v.c_str() + v.size() || errno != 0 || n < 1 || n > 4096) {
    usage_error("-n wants a number of ranks in 1..4096, got '" + v + "'");
  }
  return static_cast<int>(n);
}

std::string random_token() {
  unsigned char b[16];
  size_t got = 0;
  while (got < sizeof(b)) {
    ssize_t n = getrandom(b + got, sizeof(b) - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      std::fprintf(stderr, "symmem-run: getrandom: %s\n", std::strerror(errno));
      std::exit(1);
    }
    got += static_cast<size_t>(n);
  }
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (unsigned char c : b) {
    s += hex[c >> 4];
    s += hex[c & 15];
  }
  return s;
}

// Whether `port` on loopback can be bound now.
bool port_free(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  close(fd);
  return ok;
}

// A port P for MASTER_PORT such that P and P + 1 are free now (a rank 0 that hosts the store
// itself binds MASTER_PORT + 1, as torchrun's convention has it; whoever uses them binds them
// later). Drawn below Linux's default ephemeral range (32768..60999), so the ranks' own
// outgoing connections, which take ports from that range, cannot hold P + 1 meanwhile.
int free_port() {
  uint32_t r = 0;
  for (int attempt = 0; attempt < 200; ++attempt) {
    if (getrandom(&r, sizeof(r), 0) != static_cast<ssize_t>(sizeof(r)))
      r = r * 1103515245u + 12345u;
    const int p = 20000 + static_cast<int>(r % 12000);
    if (port_free(p) && port_free(p + 1)) return p;
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  symmem::run::LaunchConfig config;
  bool have_n = false;
  symmem::run::BindMode bind = symmem::run::BindMode::automatic;
  bool report_bindings = false;
  int i = 1;
  auto value = [&](const std::string& flag) -> std::string {
    if (i + 1 >= argc) usage_error(flag + " needs a value");
    return argv[++i];
  };
  for (; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a.empty() || a[0] != '-') break;  // the program
    std::string flag = a, inline_value;
    bool has_inline = false;
    if (a.rfind("--", 0) == 0 && a.find('=') != std::string::npos) {
      flag = a.substr(0, a.find('='));
      inline_value = a.substr(a.find('=') + 1);
      has_inline = true;
    } else if (a.size() > 2 && a.rfind("-n", 0) == 0 && a[2] != 'p') {
      flag = "-n";
      inline_value = a.substr(2);
      has_inline = true;
    }
    auto get = [&]() { return has_inline ? inline_value : value(flag); };
    if (flag == "-h" || flag == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (flag == "-n" || flag == "--np" || flag == "-np") {
      config.nranks = parse_count(get());
      have_n = true;
    } else if (flag == "--bind-to") {
      const std::string v = get();
      if (!symmem::run::parse_bind_mode(v, &bind))
        usage_error("--bind-to wants core, numa or none, got '" + v + "'");
    } else if (flag == "--report-bindings") {
      if (has_inline) usage_error("--report-bindings takes no value");
      report_bindings = true;
    } else if (flag == "--timeout") {
      config.timeout_s = parse_seconds(flag, get(), false);
    } else if (flag == "--fail-grace") {
      config.fail_grace_s = parse_seconds(flag, get(), true);
    } else if (flag == "--kill-grace") {
      config.kill_grace_s = parse_seconds(flag, get(), true);
    } else if (flag == "--keep-going") {
      if (has_inline) usage_error("--keep-going takes no value");
      config.keep_going = true;
    } else if (flag == "--restart-failed") {
      const std::string v = get();
      char* end = nullptr;
      long k = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || k < 1 || k > 1000000)
        usage_error("--restart-failed wants a number of restarts in 1..1000000, got '" + v + "'");
      config.restarts = static_cast<int>(k);
    } else {
      usage_error("unknown option '" + a + "'");
    }
  }
  if (!have_n) usage_error("-n N is required");
  if (i >= argc) usage_error("no PROGRAM given");
  for (; i < argc; ++i) config.argv.emplace_back(argv[i]);

  // NOTE [rank binding] (binding.hpp).
  {
    const symmem::run::BindPlan plan =
        symmem::run::plan_binding(symmem::run::read_topology(), config.nranks, bind);
    if (!plan.error.empty()) {
      std::fprintf(stderr, "symmem-run: %s\n", plan.error.c_str());
      return 2;
    }
    if (!plan.note.empty()) std::fprintf(stderr, "symmem-run: %s\n", plan.note.c_str());
    config.rank_cpus = plan.cpus;
    if (report_bindings) {
      for (int r = 0; r < config.nranks; ++r) {
        const auto& c = plan.cpus[static_cast<size_t>(r)];
        std::fprintf(stderr, "symmem-run: rank %d: %s\n", r,
                     c.empty() ? "not bound"
                               : ("bound to CPUs " + symmem::run::cpu_list_string(c) + " (" +
                                  symmem::run::to_string(plan.mode) + ")")
                                     .c_str());
      }
    }
  }

  // Two pipes per rank stay open for the whole job.
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    rlim_t want = static_cast<rlim_t>(config.nranks) * 2 + 64;
    if (lim.rlim_cur < want) {
      lim.rlim_cur = std::min(lim.rlim_max, want);
      setrlimit(RLIMIT_NOFILE, &lim);
    }
  }

  std::string token = random_token();
  int master_port = free_port();
  if (master_port < 0) {
    std::fprintf(stderr, "symmem-run: cannot find a free port: %s\n", std::strerror(errno));
    return 1;
  }
  config.env["MASTER_ADDR"] = "127.0.0.1";
  config.env["MASTER_PORT"] = std::to_string(master_port);
  config.env["SYMMEM_STORE_TOKEN"] = token;

  std::unique_ptr<symmem::TcpStoreServer> server;
  try {
    server = symmem::TcpStoreServer::start("127.0.0.1", 0, token);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "symmem-run: cannot start the store: %s\n", e.what());
    return 1;
  }
  config.env["SYMMEM_STORE"] = "tcp://127.0.0.1:" + std::to_string(server->port());
  // Publish the first failure in the store (see NOTE [job abort key] in src/core/group_impl.hpp)
  // so that ranks waiting on the dead one can fail fast, naming it.
  // Every failure is also appended to "symmem/failed" (a list of ranks), which lets a group made
  // by Group::shrink() tolerate the failures of the ranks it excluded.
  std::string failed_list;
  config.on_failure = [&](int rank, const std::string& what) {
    try {
      symmem::TcpStore client("127.0.0.1", server->port(), token, std::chrono::seconds(2));
      failed_list += (failed_list.empty() ? "" : ",") + std::to_string(rank);
      client.set("symmem/failed", symmem::to_bytes(failed_list));
      client.compare_set("symmem/abort", symmem::Bytes(),
                         symmem::to_bytes(what + " (reported by symmem-run)"));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "symmem-run: cannot publish the failure in the store: %s\n", e.what());
    }
  };

  // NOTE [job socket directory]: the ranks' IpcChannel sockets live in a private (0700)
  // directory of this job, removed when the job ends, so that a rank killed with SIGKILL (which
  // cannot clean up after itself) leaves nothing behind.
  std::string job_dir;
  {
    const char* parent = std::getenv("SYMMEM_SOCKET_DIR");
    if (parent == nullptr || *parent == '\0') parent = std::getenv("XDG_RUNTIME_DIR");
    if (parent == nullptr || *parent == '\0') parent = "/tmp";
    std::string templ = std::string(parent) + "/symmem-run-XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr) {
      std::fprintf(stderr, "symmem-run: cannot create a socket directory under %s: %s\n", parent,
                   std::strerror(errno));
      return 1;
    }
    job_dir = templ;
    config.env["SYMMEM_SOCKET_DIR"] = job_dir;
  }

  int rc = symmem::run::run_job(config);
  server->stop();
  std::error_code ec;
  std::filesystem::remove_all(job_dir, ec);
  if (ec) {
    std::fprintf(stderr, "symmem-run: cannot remove %s: %s\n", job_dir.c_str(),
                 ec.message().c_str());
  }
  return rc;
}
