// Group: rank bookkeeping, host identity, split() and the store barrier.
// Group::from_env() (launcher variables, the store hosted by rank 0) is in group_env.cpp.

#include "symmem/group.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <tuple>

#include "core/check.hpp"
#include "core/group_impl.hpp"
#include "core/log.hpp"
#include "core/store/group_store.hpp"
#include "core/timeout.hpp"
#include "core/trace.hpp"
#include "core/wait_report.hpp"
#include "symmem/env.hpp"
#include "symmem/error.hpp"

namespace symmem {
namespace {

// NOTE [group names]
// A group's name is the prefix of every key it (and anything built on it) puts in the store, so
// it must be identical on all members and distinct from every other group on the same store.
// Root groups are "g<n>", n counting this rank's root groups on the store (a counter kept in
// the store itself, at "symmem/rank/<rank>/root_groups", so a second from_env() in a process,
// or a later job on a long-lived store, gets a fresh name): every rank creates its root groups
// in the same order, so the n agree.
// Subgroups are "<parent>/s<members>#<k>", with the sorted member list (or, when long, its
// hash and size) and k counting the parent's split() calls with that member list.
std::string next_root_name(Store& store, int rank) {
  int64_t n = store.add("symmem/rank/" + std::to_string(rank) + "/root_groups", 1) - 1;
  return "g" + std::to_string(n);
}

const std::shared_ptr<Group::Impl>& checked(const std::shared_ptr<Group::Impl>& impl,
                                            const char* op) {
  if (!impl) {
    throw_error(ErrorCode::InvalidArgument, op, -1,
                "the group is not valid (default-constructed); use Group::from_env() or "
                "Group::create()");
  }
  return impl;
}

std::string join(const std::vector<int>& v, const char* sep = ",") {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += sep;
    out += std::to_string(v[i]);
  }
  return out;
}

std::string list_for_message(const std::vector<int>& v) {
  if (v.size() <= 16) return "[" + join(v, ", ") + "]";
  std::vector<int> head(v.begin(), v.begin() + 16);
  return "[" + join(head, ", ") + ", ... (" + std::to_string(v.size()) + " ranks)]";
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

void derive_local(Group::Impl& g) {
  const int n = g.world_size;
  g.local_rank = 0;
  g.local_world_size = 0;
  g.single_host = true;
  for (int r = 0; r < n; ++r) {
    if (g.host_ids[r] != g.host_ids[0]) g.single_host = false;
    if (g.host_ids[r] == g.host_ids[g.rank]) {
      if (r < g.rank) ++g.local_rank;
      ++g.local_world_size;
    }
  }
}

// The record each rank contributes at creation.
struct JoinRecord {
  int world_size = 0;
  int claimed_local_rank = -1;
  int claimed_local_world_size = -1;
  std::string host_id;
};

Bytes encode(const JoinRecord& r) {
  std::string s = "symmem-join-v1\n" + std::to_string(r.world_size) + "\n" +
                  std::to_string(r.claimed_local_rank) + "\n" +
                  std::to_string(r.claimed_local_world_size) + "\n" + r.host_id;
  return to_bytes(s);
}

JoinRecord decode(const Bytes& b, int from, int rank) {
  std::string s = to_string(b);
  std::istringstream in(s);
  std::string magic, w, lr, lw;
  JoinRecord r;
  if (!std::getline(in, magic) || magic != "symmem-join-v1" || !std::getline(in, w) ||
      !std::getline(in, lr) || !std::getline(in, lw)) {
    throw_error(ErrorCode::Internal, "Group::create", rank,
                "rank " + std::to_string(from) +
                    " sent a malformed join record (another program using the same store "
                    "keys, or a different symmem version?)");
  }
  try {
    r.world_size = std::stoi(w);
    r.claimed_local_rank = std::stoi(lr);
    r.claimed_local_world_size = std::stoi(lw);
  } catch (const std::exception&) {
    throw_error(ErrorCode::Internal, "Group::create", rank,
                "rank " + std::to_string(from) + " sent a malformed join record");
  }
  std::getline(in, r.host_id, '\0');
  return r;
}

// Rethrows `e` with the same code and some context about the group in front. When the launcher
// has reported a dead rank, a Timeout becomes a PeerFailure that says so.
[[noreturn]] void rethrow_with(const Error& e, const std::string& op, const Group::Impl& g) {
  std::string msg = op + ": group " + g.name + ": " + e.what();
  ErrorCode code = e.code();
  if ((code == ErrorCode::Timeout || code == ErrorCode::PeerFailure) && g.store) {
    std::string reason = detail::job_abort_reason(*g.store);
    ErrorCode abort_code = ErrorCode::PeerFailure;
    std::string text = reason.empty() ? "" : detail::job_abort_text(reason, &abort_code);
    if (!text.empty() && msg.find(text) == std::string::npos) {
      msg += "; " + text;
      code = abort_code;
    }
  }
  if (g.global_ranks.size() > 1) {
    bool identity = true;
    for (size_t i = 0; i < g.global_ranks.size(); ++i) {
      if (g.global_ranks[i] != static_cast<int>(i)) identity = false;
    }
    if (!identity) {
      msg += " (ranks above are ranks of group " + g.name + "; group rank -> global rank: ";
      size_t n = std::min<size_t>(g.global_ranks.size(), 16);
      for (size_t i = 0; i < n; ++i) {
        msg += (i ? ", " : "") + std::to_string(i) + "->" + std::to_string(g.global_ranks[i]);
      }
      if (n < g.global_ranks.size()) msg += ", ...";
      msg += ")";
    }
  }
  throw Error(code, msg);
}

constexpr int64_t kCheckoutWaitMs = 30000;

// At exit every rank checks out ("<name>/exit/<rank>"); rank 0, which hosts the store, waits
// until everyone is done with it before its server stops. Bounded below the job timeout: a rank
// that died never checks out, and exiting should not hang.
void check_out(Group::Impl& g) {
  if (g.rank != 0) {
    g.store->set(g.name + "/exit/" + std::to_string(g.rank), to_bytes("1"));
    return;
  }
  std::vector<std::string> keys;
  for (int r = 1; r < g.world_size; ++r) keys.push_back(g.name + "/exit/" + std::to_string(r));
  const Millis timeout = std::min(g.timeout, Millis(kCheckoutWaitMs));
  const auto start = detail::Clock::now();
  const auto deadline = start + timeout;
  detail::WaitReport report("group " + g.name + ": exit (rank 0 hosts the store)",
                            detail::Subsys::INIT, 0, start, deadline, timeout);
  for (;;) {
    const auto now = detail::Clock::now();
    auto left = std::max(Millis(0), std::chrono::duration_cast<Millis>(deadline - now));
    const Millis slice = std::min(left, report.slice(now, left));
    try {
      g.store->wait(keys, slice);
      break;
    } catch (const Error& e) {
      if (e.code() != ErrorCode::Timeout || slice >= left) throw;
    }
    if (report.due(detail::Clock::now())) {
      std::vector<int> missing;
      for (int r = 1; r < g.world_size; ++r) {
        if (!g.store->check({keys[r - 1]})) missing.push_back(r);
      }
      report.text((missing.size() == 1 ? "rank " : "ranks ") + detail::format_rank_ranges(missing) +
                  " to check out (" + std::to_string(g.world_size - 1 - missing.size()) + " of " +
                  std::to_string(g.world_size - 1) + " did)");
    }
  }
  for (const auto& k : keys) g.store->remove(k);
}

// NOTE [rank claims]
// Two processes started with the same rank would otherwise pair up wrongly: each takes the next
// root-group name of that rank (NOTE [group names]), so one joins rank 0's group and the other
// waits alone in the next one until its timeout. So a process creating a root group of more
// than one rank first claims its rank: compare_set on "symmem/rank/<rank>/claim" from empty to
// its ClaimId (host:pid, the machine, the process's start time). A claim this process already
// holds (a second from_env()) is fine. A claim held by another live process is a duplicate: the
// second claimant fails at once with InvalidArgument naming both processes and writes the same
// line to the job abort key (NOTE [job abort key]), so that every rank waiting on the job's
// store (the first claimant included) fails with that InvalidArgument within a slice of its
// wait. Ranks that have already finished creating their group learn of it at their next wait
// on the store, if any; the second claimant's failure ends the job under most launchers.
// Release: the claim is emptied when the root group ends and, on a TcpStore, by the server when
// the process's connection closes (a disconnect key), so a later job on a long-lived store can
// take the rank again. A claim left by a process that died without either (FileStore) is taken
// over when that process ran on this machine and is gone; one left by a process on another host
// cannot be checked and counts as live (start such a job on a fresh store). One process holding
// one rank in several root groups on separate store connections releases the claim with the
// first of them; only duplicate detection is weaker then.
struct ClaimId {
  std::string who;      // "host:pid", for messages
  std::string machine;  // hostname/boot id/pid namespace: where `pid` names this process
  std::string started;  // start time of the process (field 22 of /proc/<pid>/stat)
};

std::string read_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (in) std::getline(in, line);
  return line;
}

// Field 22 (starttime) of /proc/<pid>/stat, or "" when the process does not exist.
std::string process_start_time(long pid) {
  std::string stat = read_line("/proc/" + std::to_string(pid) + "/stat");
  size_t close = stat.rfind(')');  // the command name in parentheses may hold spaces
  if (close == std::string::npos) return "";
  std::istringstream fields(stat.substr(close + 1));
  std::string f;
  for (int i = 3; i <= 22 && fields >> f; ++i) {
    if (i == 22) return f;
  }
  return "";
}

// Process `pid` of this machine.
ClaimId process_id(long pid) {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) std::snprintf(host, sizeof(host), "unknown-host");
  ClaimId id;
  id.who = std::string(host) + ":" + std::to_string(pid);
  char ns[128] = {0};
  ssize_t n = readlink("/proc/self/ns/pid", ns, sizeof(ns) - 1);
  id.machine = std::string(host) + "/" + read_line("/proc/sys/kernel/random/boot_id") + "/" +
               (n > 0 ? std::string(ns, static_cast<size_t>(n)) : std::string());
  id.started = process_start_time(pid);
  return id;
}

ClaimId this_process() {
  return process_id(getpid());
}

Bytes encode_claim(const ClaimId& c) {
  return to_bytes("symmem-claim-v1\n" + c.who + "\n" + c.machine + "\n" + c.started);
}

std::optional<ClaimId> decode_claim(const Bytes& b) {
  std::istringstream in(to_string(b));
  std::string magic;
  ClaimId c;
  if (!std::getline(in, magic) || magic != "symmem-claim-v1" || !std::getline(in, c.who) ||
      !std::getline(in, c.machine)) {
    return std::nullopt;
  }
  std::getline(in, c.started);
  return c;
}

// True only when `c` is provably gone: it ran on this machine (same host name, boot and pid
// namespace) and its pid is absent or now names a process started at another time.
bool claimant_gone(const ClaimId& c, const ClaimId& me) {
  if (c.machine != me.machine) return false;
  size_t colon = c.who.rfind(':');
  if (colon == std::string::npos) return false;
  long pid = std::strtol(c.who.c_str() + colon + 1, nullptr, 10);
  if (pid <= 0) return false;
  return process_start_time(pid) != c.started;
}

// Claims held by this process, per store object and key: the last root group releases.
std::mutex g_claims_mutex;
std::map<std::pair<const Store*, std::string>, int>& held_claims() {
  static auto* m = new std::map<std::pair<const Store*, std::string>, int>;  // used at exit
  return *m;
}

Store& claim_store(Store& store) {
  if (auto* a = dynamic_cast<detail::AbortAwareStore*>(&store)) return *a->inner();
  return store;
}

// Claims `rank` (NOTE [rank claims]); returns the claim's key and value.
std::pair<std::string, Bytes> claim_rank(Store& store, int rank, const std::string& launcher,
                                         const char* op) {
  const std::string key = "symmem/rank/" + std::to_string(rank) + "/claim";
  const ClaimId me = this_process();
  const Bytes mine = encode_claim(me);
  Bytes now = store.compare_set(key, Bytes(), mine);
  std::optional<ClaimId> holder;
  for (int attempt = 0; attempt < 8 && now != mine; ++attempt) {
    if (now.empty()) {  // a store whose compare_set does not create absent keys
      store.set(key, mine);
      now = mine;
      break;
    }
    holder = decode_claim(now);
    if (!holder) {
      throw_error(ErrorCode::InvalidArgument, op, rank,
                  "store key '" + key +
                      "' holds something other than a rank claim: is another "
                      "program using this store?");
    }
    if (!claimant_gone(*holder, me)) break;
    SYMMEM_LOG(INFO, INIT) << "rank " << rank << ": the claim of " << holder->who
                           << " on this rank is left from a process that is gone; taking it over";
    now = store.compare_set(key, now, mine);
  }
  if (now == mine) {
    Store& inner = claim_store(store);
    {
      std::lock_guard<std::mutex> lock(g_claims_mutex);
      ++held_claims()[{&inner, key}];
    }
    try {
      inner.set_on_disconnect(key, Bytes());  // the server empties it when we are gone
    } catch (const Error& e) {
      SYMMEM_LOG(INFO, INIT) << "rank " << rank << ": claim '" << key
                             << "': no disconnect key: " << e.what();
    }
    return {key, mine};
  }
  std::string line = "rank " + std::to_string(rank) + " is claimed by two processes: " +
                     (holder ? holder->who : std::string("another")) + " (first) and " + me.who +
                     "; every process of a job needs its own rank";
  try {
    store.compare_set(detail::kJobAbortKey, Bytes(),
                      to_bytes(std::string(detail::kJobAbortInvalidPrefix) + line));
  } catch (const Error& e) {
    SYMMEM_LOG(WARN, INIT) << "rank " << rank << ": cannot tell the job: " << e.what();
  }
  throw_error(ErrorCode::InvalidArgument, op, rank,
              line + ". This process (" + me.who + ") is the second; its rank came from " +
                  (launcher.empty() ? std::string("Group::create") : launcher) +
                  ". Check how the job was started: a rank started twice (by hand and by a "
                  "launcher, or by two launchers), or two jobs sharing one store");
}

void release_claim(Store& store, const std::string& key, const Bytes& value) noexcept {
  try {
    Store& inner = claim_store(store);
    {
      std::lock_guard<std::mutex> lock(g_claims_mutex);
      auto it = held_claims().find({&inner, key});
      if (it != held_claims().end() && --it->second > 0) return;
      if (it != held_claims().end()) held_claims().erase(it);
    }
    inner.compare_set(key, value, Bytes());
  } catch (...) {
    // The store is gone or going; a TcpStore's disconnect key empties the claim anyway.
  }
}

}  // namespace

Group::Impl::~Impl() {
  // The root group of the process ends: its exit dump (NOTE [flight recorder]), while every
  // group's recorder is still registered.
  if (recorder && name.find('/') == std::string::npos) detail::flight_recorder_exit_dump();
  if (checkout_on_exit && store && world_size > 1) {
    try {
      check_out(*this);
    } catch (const std::exception& e) {
      SYMMEM_LOG(WARN, INIT) << "group " << name << ": check-out at exit failed: " << e.what();
    } catch (...) {
    }
  }
  if (!claim_key.empty() && store) release_claim(*store, claim_key, claim_value);
}

namespace detail {

std::string job_abort_reason(Store& store) noexcept {
  try {
    if (!store.check({kJobAbortKey})) return "";
    return to_string(store.get(kJobAbortKey, Millis(1000)));
  } catch (...) {
    return "";
  }
}

Bytes rank_claim_value(long pid) {
  return encode_claim(process_id(pid));
}

std::string job_abort_text(const std::string& reason, ErrorCode* code) {
  const std::string prefix = kJobAbortInvalidPrefix;
  if (reason.rfind(prefix, 0) == 0) {
    if (code != nullptr) *code = ErrorCode::InvalidArgument;
    return reason.substr(prefix.size());
  }
  if (code != nullptr) *code = ErrorCode::PeerFailure;
  return "the launcher reports: " + reason;
}

std::string host_identity(const std::string& override_id) {
  if (!override_id.empty()) return override_id;
  std::string env_id = env::host_id();
  if (!env_id.empty()) return env_id;
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) std::snprintf(host, sizeof(host), "unknown-host");
  std::string id = host;
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string boot_id;
  if (boot && std::getline(boot, boot_id) && !boot_id.empty()) id += "/" + boot_id;
  return id;
}

std::shared_ptr<Group::Impl> make_root_group(std::shared_ptr<Store> store, int rank, int world_size,
                                             const GroupOptions& options,
                                             std::shared_ptr<TcpStoreServer> server,
                                             bool checkout_on_exit, const std::string& launcher) {
  const char* op = "Group::create";
  detail::NvtxRange nvtx_range("group_create rendezvous");  // NOTE [nvtx ranges]
  SYMMEM_CHECK_ARG(op, rank, store != nullptr, "store", "is null");
  SYMMEM_CHECK_ARG(op, rank, world_size >= 1, "world_size", "is " << world_size << ", not >= 1");
  SYMMEM_CHECK_ARG(op, rank, rank >= 0 && rank < world_size, "rank",
                   "is " << rank << ", not in 0.." << world_size - 1);
  SYMMEM_CHECK_ARG(op, rank, options.local_rank >= -1, "options.local_rank",
                   "is " << options.local_rank);
  SYMMEM_CHECK_ARG(op, rank, options.local_world_size == -1 || options.local_world_size >= 1,
                   "options.local_world_size", "is " << options.local_world_size);
  SYMMEM_CHECK_ARG(
      op, rank, options.local_world_size < 0 || options.local_rank < options.local_world_size,
      "options.local_rank",
      "is " << options.local_rank << ", not below local_world_size " << options.local_world_size);

  auto g = std::make_shared<Group::Impl>();
  g->server = std::move(server);
  g->store = store;
  g->rank = rank;
  g->world_size = world_size;
  // NOTE [timeouts] (symmem/store.hpp): joining needs the peers, so 0 could only fail.
  if (options.timeout.count() == 0) {
    throw_invalid_argument("Group::create", rank, "options.timeout",
                           "is 0 ms; give a positive deadline or -1 for SYMMEM_TIMEOUT_MS");
  }
  g->timeout = detail::resolve_timeout(options.timeout);
  if (world_size > 1)
    std::tie(g->claim_key, g->claim_value) = claim_rank(*store, rank, launcher, op);
  g->name = next_root_name(*store, rank);
  g->global_ranks.resize(world_size);
  for (int r = 0; r < world_size; ++r) g->global_ranks[r] = r;

  JoinRecord mine;
  mine.world_size = world_size;
  mine.claimed_local_rank = options.local_rank;
  mine.claimed_local_world_size = options.local_world_size;
  mine.host_id = host_identity(options.host_id);

  std::vector<JoinRecord> all;
  {
    // The join watches the job abort key even on a store given to Group::create (a duplicate
    // rank is reported there, NOTE [rank claims]); from_env()'s store does so already.
    std::shared_ptr<Store> join_store = store;
    if (world_size > 1 && dynamic_cast<detail::AbortAwareStore*>(store.get()) == nullptr) {
      join_store = std::make_shared<detail::AbortAwareStore>(store, Millis(200), true);
    }
    StoreExchange x(join_store, g->name + "/i", rank, world_size, g->timeout);
    x.set_what("group " + g->name + ": creation (" + std::to_string(world_size) + " ranks)",
               detail::Subsys::INIT);
    std::vector<Bytes> raw;
    try {
      raw = x.all_gather(encode(mine));
    } catch (const Error& e) {
      if (e.code() == ErrorCode::Timeout && launcher == "Slurm") {
        rethrow_with(
            Error(e.code(),
                  std::string(e.what()) +
                      ". Under Slurm the usual cause is ranks started without srun: a program run "
                      "directly in the batch script sees SLURM_PROCID=0 and the allocation's "
                      "task count, and waits for ranks that never start. Start every rank with "
                      "srun (docs/launching.md)"),
            op, *g);
      }
      rethrow_with(e, op, *g);
    }
    for (int r = 0; r < world_size; ++r) all.push_back(decode(raw[r], r, rank));
  }

  // Every rank sees every record, so every rank finds the same problems and fails alike.
  std::vector<std::string> bad_world;
  for (int r = 0; r < world_size; ++r) {
    if (all[r].world_size != world_size) {
      bad_world.push_back("rank " + std::to_string(r) + " says " +
                          std::to_string(all[r].world_size));
    }
  }
  if (!bad_world.empty()) {
    std::string msg = "ranks disagree on world_size: this rank says " + std::to_string(world_size);
    for (const auto& b : bad_world) msg += ", " + b;
    throw_error(ErrorCode::InvalidArgument, op, rank, msg);
  }
  g->host_ids.resize(world_size);
  for (int r = 0; r < world_size; ++r) g->host_ids[r] = all[r].host_id;
  derive_local(*g);

  std::vector<std::string> contradictions;
  for (int r = 0; r < world_size; ++r) {
    int lr = 0, lw = 0;
    for (int s = 0; s < world_size; ++s) {
      if (g->host_ids[s] != g->host_ids[r]) continue;
      if (s < r) ++lr;
      ++lw;
    }
    const auto& c = all[r];
    bool rank_bad = c.claimed_local_rank >= 0 && c.claimed_local_rank != lr;
    bool size_bad = c.claimed_local_world_size >= 0 && c.claimed_local_world_size != lw;
    if (rank_bad || size_bad) {
      std::ostringstream os;
      os << "rank " << r << ": launcher says local_rank " << c.claimed_local_rank
         << " local_world_size " << c.claimed_local_world_size << ", host identity '"
         << g->host_ids[r] << "' gives local_rank " << lr << " local_world_size " << lw;
      contradictions.push_back(os.str());
    }
  }
  if (!contradictions.empty()) {
    std::string msg = "the launcher's local ranks contradict the hosts the ranks run on (";
    for (size_t i = 0; i < contradictions.size() && i < 8; ++i) {
      msg += (i ? "; " : "") + contradictions[i];
    }
    if (contradictions.size() > 8) {
      msg += "; and " + std::to_string(contradictions.size() - 8) + " more";
    }
    msg +=
        "). Fix LOCAL_RANK/LOCAL_WORLD_SIZE, or set SYMMEM_HOST_ID when ranks share a host "
        "under different host names";
    throw_error(ErrorCode::InvalidArgument, op, rank, msg);
  }

  g->checkout_on_exit = checkout_on_exit;
  g->barrier_x =
      std::make_unique<StoreExchange>(store, g->name + "/b", rank, world_size, g->timeout);
  g->barrier_x->set_what("group " + g->name + ": store_barrier", detail::Subsys::INIT);
  int hosts = 0;
  for (int r = 0; r < world_size; ++r) {
    if (std::find(g->host_ids.begin(), g->host_ids.begin() + r, g->host_ids[r]) ==
        g->host_ids.begin() + r) {
      ++hosts;
    }
  }
  g->recorder =
      detail::make_flight_recorder({g->name, rank, world_size, g->global_ranks, world_size});
  SYMMEM_LOG(INFO, INIT) << "group " << g->name << ": rank " << rank << " of " << world_size
                         << ", local rank " << g->local_rank << " of " << g->local_world_size
                         << ", " << hosts << (hosts == 1 ? " host" : " hosts") << ", host id '"
                         << mine.host_id << "', timeout " << g->timeout.count() << " ms";
  return g;
}

}  // namespace detail

Group::Group() = default;

Group Group::create(std::shared_ptr<Store> store, int rank, int world_size,
                    const GroupOptions& options) {
  return Group(
      detail::make_root_group(std::move(store), rank, world_size, options, nullptr, false));
}

int Group::rank() const {
  return checked(impl_, "Group::rank")->rank;
}
int Group::world_size() const {
  return checked(impl_, "Group::world_size")->world_size;
}
int Group::local_rank() const {
  return checked(impl_, "Group::local_rank")->local_rank;
}
int Group::local_world_size() const {
  return checked(impl_, "Group::local_world_size")->local_world_size;
}
const std::string& Group::host_id() const {
  const auto& g = checked(impl_, "Group::host_id");
  return g->host_ids[g->rank];
}
bool Group::same_host(int peer) const {
  const auto& g = checked(impl_, "Group::same_host");
  SYMMEM_CHECK_ARG("Group::same_host", g->rank, peer >= 0 && peer < g->world_size, "peer",
                   "is " << peer << ", not in 0.." << g->world_size - 1);
  return g->host_ids[peer] == g->host_ids[g->rank];
}
bool Group::single_host() const {
  return checked(impl_, "Group::single_host")->single_host;
}

int Group::global_rank(int group_rank) const {
  const auto& g = checked(impl_, "Group::global_rank");
  SYMMEM_CHECK_ARG("Group::global_rank", g->rank, group_rank >= 0 && group_rank < g->world_size,
                   "group_rank", "is " << group_rank << ", not in 0.." << g->world_size - 1);
  return g->global_ranks[group_rank];
}

int Group::group_rank(int global_rank) const {
  const auto& g = checked(impl_, "Group::group_rank");
  auto it = std::find(g->global_ranks.begin(), g->global_ranks.end(), global_rank);
  if (it == g->global_ranks.end()) return -1;
  return static_cast<int>(it - g->global_ranks.begin());
}

const std::vector<int>& Group::global_ranks() const {
  return checked(impl_, "Group::global_ranks")->global_ranks;
}
const std::shared_ptr<Store>& Group::store() const {
  return checked(impl_, "Group::store")->store;
}
Millis Group::timeout() const {
  return checked(impl_, "Group::timeout")->timeout;
}
const std::string& Group::name() const {
  return checked(impl_, "Group::name")->name;
}

Group Group::split(const std::vector<int>& ranks) const {
  const char* op = "Group::split";
  detail::NvtxRange nvtx_range("group_split rendezvous");  // NOTE [nvtx ranges]
  const auto& p = checked(impl_, op);
  SYMMEM_CHECK_ARG(op, p->rank, !ranks.empty(), "ranks", "is empty");
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    SYMMEM_CHECK_ARG(op, p->rank, sorted[i] >= 0 && sorted[i] < p->world_size, "ranks",
                     "contains " << sorted[i] << ", not a rank of group " << p->name << " (0.."
                                 << p->world_size - 1 << ")");
    SYMMEM_CHECK_ARG(op, p->rank, i == 0 || sorted[i] != sorted[i - 1], "ranks",
                     "contains " << sorted[i] << " twice");
  }
  auto me = std::find(sorted.begin(), sorted.end(), p->rank);
  SYMMEM_CHECK_ARG(op, p->rank, me != sorted.end(), "ranks",
                   "= " << list_for_message(sorted) << " does not contain this rank (" << p->rank
                        << "); only the members call split()");

  std::string members = join(sorted);
  if (members.size() > 64) {
    char buf[40];
    std::snprintf(buf, sizeof(buf), "h%016llx-n%zu",
                  static_cast<unsigned long long>(fnv1a(members)), sorted.size());
    members = buf;
  }
  int call = 0;
  {
    std::lock_guard<std::mutex> lock(p->split_mutex);
    call = p->split_calls[members]++;
  }

  auto g = std::make_shared<Group::Impl>();
  g->server = p->server;
  g->store = p->store;
  g->timeout = p->timeout;
  g->name = p->name + "/s" + members + "#" + std::to_string(call);
  g->rank = static_cast<int>(me - sorted.begin());
  g->world_size = static_cast<int>(sorted.size());
  for (int r : sorted) {
    g->host_ids.push_back(p->host_ids[r]);
    g->global_ranks.push_back(p->global_ranks[r]);
  }
  derive_local(*g);
  g->barrier_x =
      std::make_unique<StoreExchange>(g->store, g->name + "/b", g->rank, g->world_size, g->timeout);
  g->barrier_x->set_what("group " + g->name + ": split() of " + p->name, detail::Subsys::INIT);
  try {
    g->barrier_x->barrier();  // every member must arrive: a mismatched list fails here, clearly
  } catch (const Error& e) {
    rethrow_with(e, std::string(op) + "(ranks=" + list_for_message(sorted) + ") of " + p->name, *g);
  }
  g->barrier_x->set_what("group " + g->name + ": store_barrier", detail::Subsys::INIT);
  g->recorder = detail::make_flight_recorder(
      {g->name, g->rank, g->world_size, g->global_ranks,
       p->recorder ? p->recorder->info().root_world_size : p->world_size});
  SYMMEM_LOG(INFO, INIT) << "group " << g->name << ": rank " << g->rank << " of " << g->world_size
                         << " (global rank " << g->global_ranks[g->rank] << ")";
  return Group(g);
}

void Group::store_barrier() const {
  const auto& g = checked(impl_, "Group::store_barrier");
  std::lock_guard<std::mutex> lock(g->barrier_mutex);
  try {
    g->barrier_x->barrier();
  } catch (const Error& e) {
    rethrow_with(e, "Group::store_barrier", *g);
  }
}

}  // namespace symmem
