// Group::from_env(): the job layout from explicit options, SYMMEM_* settings or a launcher's
// variables, and the store (connected to, or hosted by rank 0).

#include "core/group_env.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <charconv>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>

#include "core/group_impl.hpp"
#include "core/log.hpp"
#include "core/store/group_store.hpp"
#include "core/timeout.hpp"
#include "symmem/env.hpp"
#include "symmem/error.hpp"

namespace symmem {
namespace {

constexpr const char* kOp = "Group::from_env";

std::optional<std::string> getenv_nonempty(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

// A launcher variable: a non-negative decimal integer (no sign, no spaces).
std::optional<int> launcher_int(const char* name, int min, std::vector<std::string>& found) {
  auto v = getenv_nonempty(name);
  if (!v) return std::nullopt;
  found.push_back(std::string(name) + "=" + *v);
  int out = 0;
  auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), out);
  if (ec != std::errc() || p != v->data() + v->size() || out < min) {
    throw_error(ErrorCode::InvalidArgument, kOp, -1,
                "environment variable " + std::string(name) + "='" + *v +
                    "' is invalid: expected an integer >= " + std::to_string(min));
  }
  return out;
}

std::optional<int> symmem_int(const char* name, std::vector<std::string>& found) {
  auto v = env::get_int(name);  // validates the declared range, naming the variable
  if (!v) return std::nullopt;
  found.push_back(std::string(name) + "=" + std::to_string(*v));
  return static_cast<int>(*v);
}

struct Launcher {
  const char* label;
  const char* rank;
  std::vector<const char*> world;  // first one set wins
  const char* local_rank;          // may be null
  const char* local_world;         // may be null
};

const std::vector<Launcher>& launchers() {
  static const std::vector<Launcher> all = {
      {"torchrun", "RANK", {"WORLD_SIZE"}, "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
      {"Open MPI",
       "OMPI_COMM_WORLD_RANK",
       {"OMPI_COMM_WORLD_SIZE"},
       "OMPI_COMM_WORLD_LOCAL_RANK",
       "OMPI_COMM_WORLD_LOCAL_SIZE"},
      // SLURM_STEP_NUM_TASKS is the size of this srun step (SLURM_NTASKS that of the allocation).
      {"Slurm", "SLURM_PROCID", {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"}, "SLURM_LOCALID", nullptr},
  };
  return all;
}

bool launcher_present(const Launcher& l) {
  if (getenv_nonempty(l.rank)) return true;
  for (const char* w : l.world) {
    if (getenv_nonempty(w)) return true;
  }
  return false;
}

// The fix for a layout error when `l`'s variables were found (null: none were).
std::string launcher_advice(const Launcher* l) {
  const std::string label = l != nullptr ? l->label : "";
  if (label == "Open MPI") {
    return " Found Open MPI's OMPI_COMM_WORLD_* variables: mpirun does not pass MASTER_ADDR and "
           "MASTER_PORT to the ranks by itself; add -x MASTER_ADDR=<rank-0 host> -x "
           "MASTER_PORT=<port> to the mpirun command line (symmem's store listens on "
           "MASTER_PORT+1), or -x SYMMEM_STORE=tcp://host:port for a store started elsewhere "
           "(see docs/launching.md, \"Open MPI: mpirun\").";
  }
  if (label == "Slurm") {
    return " Found Slurm's SLURM_* variables: srun sets no store address; in the batch script, "
           "before srun, export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | "
           "head -n 1) and export MASTER_PORT=29500 (symmem's store listens on MASTER_PORT+1), "
           "or export SYMMEM_STORE (see docs/launching.md, \"Slurm: srun\").";
  }
  if (label == "torchrun") {
    return " Found torchrun's variables, but torchrun sets RANK, WORLD_SIZE, MASTER_ADDR and "
           "MASTER_PORT for every worker: set the missing ones too, or start the program with "
           "torchrun or symmem-run (see docs/launching.md).";
  }
  return " Start the program with symmem-run, torchrun, srun or mpirun, or set SYMMEM_RANK, "
         "SYMMEM_WORLD_SIZE and SYMMEM_STORE (see docs/launching.md).";
}

struct Field {
  int value = -1;
  std::string from;  // "options.rank", "SYMMEM_RANK", "RANK (torchrun)", ...
  bool set() const { return !from.empty(); }
};

std::string describe(const Field& f) {
  return std::to_string(f.value) + " (from " + f.from + ")";
}

bool is_loopback(const std::string& host) {
  if (host == "localhost") return true;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_flags = AI_NUMERICHOST;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) {
    // A name: resolve it.
    hints.ai_flags = 0;
    if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return false;
  }
  bool loop = true;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      auto* in = reinterpret_cast<sockaddr_in*>(a->ai_addr);
      if ((ntohl(in->sin_addr.s_addr) >> 24) != 127) loop = false;
    } else if (a->ai_family == AF_INET6) {
      auto* in6 = reinterpret_cast<sockaddr_in6*>(a->ai_addr);
      if (!IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr)) loop = false;
    }
  }
  freeaddrinfo(res);
  return loop;
}

std::string tcp_url(const std::string& host, int port) {
  if (host.find(':') != std::string::npos && host.front() != '[') {
    return "tcp://[" + host + "]:" + std::to_string(port);
  }
  return "tcp://" + host + ":" + std::to_string(port);
}

// The store rank 0 hosts, shared by every root group of this process that names the same
// address (a second from_env() must not try to bind the port again).
std::shared_ptr<TcpStoreServer> hosted_server(const std::string& bind, uint16_t port,
                                              const std::string& token) {
  static std::mutex mutex;
  static std::map<std::string, std::weak_ptr<TcpStoreServer>> servers;
  std::lock_guard<std::mutex> lock(mutex);
  std::string key = bind + "|" + std::to_string(port) + "|" + token;
  if (auto existing = servers[key].lock()) return existing;
  std::shared_ptr<TcpStoreServer> server = TcpStoreServer::start(bind, port, token);
  servers[key] = server;
  return server;
}

}  // namespace

namespace detail {

LaunchSettings resolve_launch(const GroupOptions& o) {
  LaunchSettings s;
  auto& found = s.found;
  Field rank, world, local_rank, local_world;
  if (o.rank >= 0) rank = {o.rank, "options.rank"};
  if (o.world_size >= 0) world = {o.world_size, "options.world_size"};
  if (o.local_rank >= 0) local_rank = {o.local_rank, "options.local_rank"};
  if (o.local_world_size >= 0) local_world = {o.local_world_size, "options.local_world_size"};
  if (o.rank < -1) throw_invalid_argument(kOp, -1, "options.rank", "is " + std::to_string(o.rank));
  if (o.world_size < -1 || o.world_size == 0) {
    throw_invalid_argument(kOp, -1, "options.world_size", "is " + std::to_string(o.world_size));
  }

  auto take = [](Field& f, std::optional<int> v, const std::string& from) {
    if (!f.set() && v) f = {*v, from};
  };
  take(rank, symmem_int("SYMMEM_RANK", found), "SYMMEM_RANK");
  take(world, symmem_int("SYMMEM_WORLD_SIZE", found), "SYMMEM_WORLD_SIZE");
  take(local_rank, symmem_int("SYMMEM_LOCAL_RANK", found), "SYMMEM_LOCAL_RANK");
  take(local_world, symmem_int("SYMMEM_LOCAL_WORLD_SIZE", found), "SYMMEM_LOCAL_WORLD_SIZE");
  if (rank.set()) s.launcher = rank.from;

  // The first launcher whose variables are present is the one that started us; the others'
  // variables are ignored (e.g. SLURM_* leaking into a torchrun started inside sbatch).
  const Launcher* launcher = nullptr;
  for (const auto& l : launchers()) {
    if (launcher_present(l)) {
      launcher = &l;
      break;
    }
  }
  if (launcher != nullptr) {
    std::string tag = std::string(" (") + launcher->label + ")";
    bool rank_from_launcher = !rank.set();
    take(rank, launcher_int(launcher->rank, 0, found), launcher->rank + tag);
    for (const char* w : launcher->world) {
      auto v = launcher_int(w, 1, found);
      take(world, v, w + tag);
      if (v) break;
    }
    // Local values only from the launcher that also gave the rank; they are claims that
    // Group::create() checks against the host identity of every rank.
    if (rank_from_launcher) {
      if (launcher->local_rank != nullptr) {
        take(local_rank, launcher_int(launcher->local_rank, 0, found), launcher->local_rank + tag);
      }
      if (launcher->local_world != nullptr) {
        take(local_world, launcher_int(launcher->local_world, 1, found),
             launcher->local_world + tag);
      }
      if (rank.set()) s.launcher = launcher->label;
    }
  }

  // The store.
  std::vector<std::string> missing;
  std::optional<std::string> master_addr = getenv_nonempty("MASTER_ADDR");
  std::optional<std::string> master_port_raw = getenv_nonempty("MASTER_PORT");
  std::string symmem_store = env::store();
  if (!symmem_store.empty()) found.push_back("SYMMEM_STORE=" + symmem_store);
  if (o.store) {
    // An existing store object wins over everything.
  } else if (!o.store_url.empty()) {
    s.store_url = o.store_url;
  } else if (!symmem_store.empty()) {
    s.store_url = symmem_store;
  } else if (master_addr || master_port_raw) {
    if (master_addr) found.push_back("MASTER_ADDR=" + *master_addr);
    auto port = launcher_int("MASTER_PORT", 1, found);
    if (!master_addr) missing.push_back("MASTER_ADDR (MASTER_PORT is set)");
    if (!port) missing.push_back("MASTER_PORT (MASTER_ADDR is set)");
    if (port && *port > 65534) {
      throw_error(ErrorCode::InvalidArgument, kOp, -1,
                  "environment variable MASTER_PORT='" + *master_port_raw +
                      "' is invalid: symmem's store uses MASTER_PORT+1, which must be <= 65535");
    }
    if (master_addr && port) {
      s.master_addr = *master_addr;
      s.store_port = *port + 1;
    }
  } else if (!(world.set() && world.value == 1)) {
    if (found.empty() && !rank.set() && !world.set() && !local_rank.set() && !local_world.set()) {
      // No launcher and nothing set: a job of one rank (like an MPI program started alone).
      s.rank = 0;
      s.world_size = 1;
      s.launcher = kNoLauncher;
      return s;
    }
    missing.push_back(
        "a store (SYMMEM_STORE=tcp://host:port or file:///path, or MASTER_ADDR and MASTER_PORT)");
  }

  if (!rank.set()) {
    missing.insert(missing.begin(),
                   "rank (SYMMEM_RANK, RANK, OMPI_COMM_WORLD_RANK or SLURM_PROCID)");
  }
  if (!world.set()) {
    missing.insert(missing.begin() + (rank.set() ? 0 : 1),
                   "world size (SYMMEM_WORLD_SIZE, WORLD_SIZE, OMPI_COMM_WORLD_SIZE or "
                   "SLURM_NTASKS)");
  }
  std::vector<std::string> contradictions;
  if (rank.set() && world.set() && rank.value >= world.value) {
    contradictions.push_back("rank " + describe(rank) + " is not below world size " +
                             describe(world));
  }
  if (local_rank.set() && local_world.set() && local_rank.value >= local_world.value) {
    contradictions.push_back("local rank " + describe(local_rank) +
                             " is not below local world size " + describe(local_world));
  }
  if (local_world.set() && world.set() && local_world.value > world.value) {
    contradictions.push_back("local world size " + describe(local_world) + " exceeds world size " +
                             describe(world));
  }
  if (local_rank.set() && rank.set() && local_rank.value > rank.value) {
    contradictions.push_back("local rank " + describe(local_rank) + " exceeds rank " +
                             describe(rank));
  }

  if (!missing.empty() || !contradictions.empty()) {
    std::string msg = "cannot determine the job layout. Found: ";
    if (found.empty() && !o.store && o.rank < 0 && o.world_size < 0) {
      msg += "no launcher variables";
    } else {
      std::vector<std::string> parts;
      if (o.rank >= 0) parts.push_back("options.rank=" + std::to_string(o.rank));
      if (o.world_size >= 0) parts.push_back("options.world_size=" + std::to_string(o.world_size));
      if (o.store) parts.push_back("options.store");
      if (!o.store_url.empty()) parts.push_back("options.store_url=" + o.store_url);
      for (const auto& f : found) parts.push_back(f);
      for (size_t i = 0; i < parts.size(); ++i) msg += (i ? ", " : "") + parts[i];
    }
    msg += ".";
    if (!missing.empty()) {
      msg += " Missing: ";
      for (size_t i = 0; i < missing.size(); ++i) msg += (i ? "; " : "") + missing[i];
      msg += ".";
    }
    if (!contradictions.empty()) {
      msg += " Contradictory: ";
      for (size_t i = 0; i < contradictions.size(); ++i) msg += (i ? "; " : "") + contradictions[i];
      msg += ".";
    }
    msg += launcher_advice(launcher);
    throw_error(ErrorCode::InvalidArgument, kOp, rank.set() ? rank.value : -1, msg);
  }

  s.rank = rank.value;
  s.world_size = world.value;
  s.local_rank = local_rank.set() ? local_rank.value : -1;
  s.local_world_size = local_world.set() ? local_world.value : -1;
  return s;
}

}  // namespace detail

Group Group::from_env(const GroupOptions& options) {
  env::validate_all();
  detail::LaunchSettings s = detail::resolve_launch(options);
  detail::log_set_rank(s.rank);
  if (Group::restarted()) {
    SYMMEM_LOG(WARN, INIT) << "from_env: this process was started again after a failure "
                              "(SYMMEM_RESTART_COUNT="
                           << env::restart_count()
                           << "); the survivors take it in through Group::rejoin(), which their "
                              "grow() serves. from_env() waits for every rank to form a new "
                              "group (docs/reliability.md, 'Recovering from a failed rank')";
  }
  SYMMEM_LOG(INFO, INIT) << "from_env: rank " << s.rank << " of " << s.world_size << " from "
                         << s.launcher;
  if (s.launcher == detail::kNoLauncher) {
    SYMMEM_LOG(INFO, INIT) << "from_env: no launcher variables (RANK, OMPI_COMM_WORLD_RANK, "
                              "SLURM_PROCID, SYMMEM_RANK, ...): running as a job of one rank "
                              "(rank 0 of 1) with an in-process store; start the program with "
                              "symmem-run, torchrun, srun or mpirun for more";
  }

  GroupOptions o = options;
  o.rank = s.rank;
  o.world_size = s.world_size;
  o.local_rank = s.local_rank;
  o.local_world_size = s.local_world_size;
  Millis timeout = detail::resolve_timeout(options.timeout);
  std::string token = options.token.empty() ? env::store_token() : options.token;

  std::shared_ptr<Store> store = options.store;
  std::shared_ptr<TcpStoreServer> server;
  bool checkout = false;
  if (!store && !s.store_url.empty()) {
    store = Store::connect(s.store_url, token, timeout);
  } else if (!store && !s.master_addr.empty()) {
    if (s.rank == 0) {
      std::string bind = env::store_bind();
      if (bind.empty()) bind = is_loopback(s.master_addr) ? "127.0.0.1" : s.master_addr;
      try {
        server = hosted_server(bind, static_cast<uint16_t>(s.store_port), token);
      } catch (const Error& e) {
        throw Error(e.code(),
                    std::string(kOp) + ": rank 0: cannot host the store at " + bind + ":" +
                        std::to_string(s.store_port) +
                        " (MASTER_PORT+1; MASTER_ADDR must be an address of rank 0's host, "
                        "SYMMEM_STORE_BIND chooses another bind address, SYMMEM_STORE names a "
                        "store hosted elsewhere): " +
                        e.what());
      }
      SYMMEM_LOG(INFO, STORE) << "rank 0 hosts the store at " << bind << ":" << s.store_port;
    }
    std::string host = s.master_addr;
    if (s.rank == 0) {  // connect to our own server where it listens
      host = server->host();
      if (host == "0.0.0.0") host = "127.0.0.1";
      if (host == "::") host = "::1";
    }
    store = Store::connect(tcp_url(host, s.store_port), token, timeout);
    checkout = true;
  } else if (!store) {
    store = std::make_shared<HashStore>();  // a world of one rank
  }
  if (store != options.store && s.world_size > 1) {
    // Waits on the job's store fail fast once a launcher reports a dead rank.
    store = std::make_shared<detail::AbortAwareStore>(std::move(store));
  }
  auto impl = detail::make_root_group(std::move(store), s.rank, s.world_size, o, std::move(server),
                                      checkout, s.launcher);
  return Group(std::move(impl));
}

Group Group::rejoin(const GroupOptions& options) {
  const char* op = "Group::rejoin";
  env::validate_all();
  detail::LaunchSettings s = detail::resolve_launch(options);
  detail::log_set_rank(s.rank);
  Millis timeout = detail::resolve_timeout(options.timeout);
  std::string token = options.token.empty() ? env::store_token() : options.token;
  std::shared_ptr<Store> store = options.store;
  if (!store && !s.store_url.empty()) {
    store = Store::connect(s.store_url, token, timeout);
  } else if (!store && !s.master_addr.empty()) {
    // Never hosts: the store is the running job's (hosted by its rank 0).
    store = Store::connect(tcp_url(s.master_addr, s.store_port), token, timeout);
  } else if (!store) {
    throw_error(ErrorCode::InvalidArgument, op, s.rank,
                "no job store to rejoin through: set SYMMEM_STORE (symmem-run does), "
                "MASTER_ADDR/MASTER_PORT, or options.store");
  }
  if (store != options.store) store = std::make_shared<detail::AbortAwareStore>(std::move(store));
  return detail::join_grown_group(std::move(store), s.rank, options);
}

}  // namespace symmem
