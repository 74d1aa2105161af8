// Group: rank bookkeeping, host identity, split() and the store barrier.
// Group::from_env() (launcher variables, the store hosted by rank 0) is in group_env.cpp.

#include "symmem/group.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <tuple>

#include "core/check.hpp"
#include "core/group_impl.hpp"
#include "core/log.hpp"
#include "core/registry.hpp"
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

// A sorted rank list as it goes into a group name (NOTE [group names]): "0,2,3", or, when that is
// longer than 64 characters, its hash and length.
std::string ranks_tag(const std::vector<int>& sorted) {
  std::string tag = join(sorted);
  if (tag.size() > 64) {
    char buf[40];
    std::snprintf(buf, sizeof(buf), "h%016llx-n%zu", static_cast<unsigned long long>(fnv1a(tag)),
                  sorted.size());
    tag = buf;
  }
  return tag;
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

// The record each rank contributes at creation (and to shrink()/grow()).
struct JoinRecord {
  int world_size = 0;
  int claimed_local_rank = -1;
  int claimed_local_world_size = -1;
  int global_rank = -1;  // grow(): the joiner's launcher rank (-1: none); else unused
  detail::ProcessIdent proc;
  std::string host_id;
};

Bytes encode(const JoinRecord& r) {
  std::string s = "symmem-join-v2\n" + std::to_string(r.world_size) + "\n" +
                  std::to_string(r.claimed_local_rank) + "\n" +
                  std::to_string(r.claimed_local_world_size) + "\n" +
                  std::to_string(r.global_rank) + "\n" + std::to_string(r.proc.pid) + "\n" +
                  r.proc.machine + "\n" + r.proc.started + "\n" + r.host_id;
  return to_bytes(s);
}

JoinRecord decode(const Bytes& b, int from, int rank) {
  std::string s = to_string(b);
  std::istringstream in(s);
  std::string magic, w, lr, lw, gr, pid;
  JoinRecord r;
  if (!std::getline(in, magic) || magic != "symmem-join-v2" || !std::getline(in, w) ||
      !std::getline(in, lr) || !std::getline(in, lw) || !std::getline(in, gr) ||
      !std::getline(in, pid) || !std::getline(in, r.proc.machine) ||
      !std::getline(in, r.proc.started)) {
    throw_error(ErrorCode::Internal, "Group::create", rank,
                "rank " + std::to_string(from) +
                    " sent a malformed join record (another program using the same store "
                    "keys, or a different symmem version?)");
  }
  try {
    r.world_size = std::stoi(w);
    r.claimed_local_rank = std::stoi(lr);
    r.claimed_local_world_size = std::stoi(lw);
    r.global_rank = std::stoi(gr);
    r.proc.pid = std::stol(pid);
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
    std::string reason = detail::effective_abort_reason(*g.store);
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
// Field 3 (state) and field 22 (starttime) of /proc/<pid>/stat; both empty when the process
// does not exist.
struct ProcStat {
  std::string state;
  std::string started;
};
ProcStat proc_stat(long pid) {
  std::string stat = read_line("/proc/" + std::to_string(pid) + "/stat");
  size_t close = stat.rfind(')');  // the command name in parentheses may hold spaces
  if (close == std::string::npos) return {};
  std::istringstream fields(stat.substr(close + 1));
  ProcStat out;
  std::string f;
  for (int i = 3; i <= 22 && fields >> f; ++i) {
    if (i == 3) out.state = f;
    if (i == 22) out.started = f;
  }
  return out;
}

std::string process_start_time(long pid) {
  return proc_stat(pid).started;
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

// NOTE [failed ranks]
// Each rank's join record names its process (machine = host name, boot id and pid namespace;
// pid; start time). A process is provably gone when it ran on this machine and its pid is absent
// or now names a process started at another time. Group::failed_ranks() uses that for the ranks
// of this machine and the launcher's list (kJobFailedKey) for the others; PeerFailure errors of
// the host backend come from pidfds of the same processes.
bool process_gone(const detail::ProcessIdent& p, const std::string& my_machine) {
  if (p.machine != my_machine || p.pid <= 0) return false;
  const ProcStat st = proc_stat(p.pid);
  // Another process with that pid, none, or a zombie (dead, not yet reaped): state Z or X.
  return st.started != p.started || st.state == "Z" || st.state == "X";
}

detail::ProcessIdent this_process_ident() {
  ClaimId c = this_process();
  return {c.machine, static_cast<long>(getpid()), c.started};
}

// True only when claimant `c` is provably gone (NOTE [failed ranks]).
bool claimant_gone(const ClaimId& c, const ClaimId& me) {
  size_t colon = c.who.rfind(':');
  if (colon == std::string::npos) return false;
  long pid = std::strtol(c.who.c_str() + colon + 1, nullptr, 10);
  return process_gone({c.machine, pid, c.started}, me.machine);
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

// The world size of the root group behind `p`, for a flight recorder of a group made from it.
int root_world_size(const Group::Impl& p) {
  return p.recorder ? p.recorder->info().root_world_size : p.world_size;
}

// The last steps of split(), shrink() and grow() on a new group `g`: the group's store barrier
// (every member must arrive: mismatched calls fail here, clearly), its flight recorder (over a
// root group of `root_world` ranks) and a log line. `call` names the call in errors; `what` the
// barrier in wait reports.
void finish_derived(Group::Impl& g, int root_world, const std::string& call,
                    const std::string& what) {
  g.abort->group_name = g.name;
  derive_local(g);
  g.barrier_x =
      std::make_unique<StoreExchange>(g.store, g.name + "/b", g.rank, g.world_size, g.timeout);
  g.barrier_x->set_abort(g.abort);
  g.barrier_x->set_what("group " + g.name + ": " + what, detail::Subsys::INIT);
  try {
    g.barrier_x->barrier();
  } catch (const Error& e) {
    rethrow_with(e, call, g);
  }
  g.barrier_x->set_what("group " + g.name + ": store_barrier", detail::Subsys::INIT);
  g.recorder =
      detail::make_flight_recorder({g.name, g.rank, g.world_size, g.global_ranks, root_world});
  SYMMEM_LOG(INFO, INIT) << "group " << g.name << ": rank " << g.rank << " of " << g.world_size
                         << " (global rank " << g.global_ranks[g.rank] << "), " << what;
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
  mine.proc = this_process_ident();

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
  for (int r = 0; r < world_size; ++r) g->procs.push_back(all[r].proc);
  g->abort->group_name = g->name;
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
  g->barrier_x->set_abort(g->abort);
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

  const std::string members = ranks_tag(sorted);
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
    g->procs.push_back(p->procs[r]);
  }
  g->abort->parent = p->abort;  // aborting the parent aborts this group (NOTE [group abort])
  finish_derived(*g, root_world_size(*p),
                 std::string(op) + "(ranks=" + list_for_message(sorted) + ") of " + p->name,
                 "split() of " + p->name);
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

// ---- abort, shrink, grow (NOTE [group abort] in core/abort.hpp) ------------------------------
namespace symmem {

namespace detail {

void throw_aborted(const AbortState& s, std::string_view op, int rank) {
  throw_error(s.code, op, rank, s.reason);
}

std::shared_ptr<AbortState> abort_state(const Group& group) noexcept {
  return group.valid() ? group.impl()->abort : nullptr;
}

bool set_aborted(AbortState& s, const std::string& reason, ErrorCode code) noexcept {
  try {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.set.load(std::memory_order_relaxed)) return false;
    s.reason = reason;
    s.code = code;
    s.set.store(true, std::memory_order_release);
    for (auto& h : s.hooks) h();
    return true;
  } catch (...) {
    s.set.store(true, std::memory_order_release);  // the reason stays empty; still aborted
    return true;
  }
}

void add_abort_hook(AbortState& s, std::function<void()> hook) {
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.set.load(std::memory_order_relaxed)) {
    hook();
    return;
  }
  s.hooks.push_back(std::move(hook));
}

namespace {

// NOTE [liveness watcher] (core/abort.hpp). Immortal: the thread may outlive main().
struct LivenessWatcher {
  std::mutex mu;
  std::vector<std::weak_ptr<Group::Impl>> groups;
  bool started = false;
  std::mutex acting;     // held while the thread aborts a group, and by the exit handler
  bool exiting = false;  // under `acting`: the process is exiting; the thread does nothing more
};

LivenessWatcher& watcher() {
  static auto* w = new LivenessWatcher;
  return *w;
}

void watcher_exit() {
  LivenessWatcher& w = watcher();
  std::lock_guard<std::mutex> lock(w.acting);
  w.exiting = true;
}

void watch_loop() {
  LivenessWatcher& w = watcher();
  const std::string my_machine = this_process_ident().machine;
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::vector<std::shared_ptr<Group::Impl>> live;
    {
      std::lock_guard<std::mutex> lock(w.mu);
      for (auto it = w.groups.begin(); it != w.groups.end();) {
        if (auto g = it->lock()) {
          live.push_back(std::move(g));
          ++it;
        } else {
          it = w.groups.erase(it);
        }
      }
    }
    for (const auto& g : live) {
      if (aborted_state(g->abort.get()) != nullptr) continue;
      for (int r = 0; r < g->world_size; ++r) {
        if (r == g->rank || !process_gone(g->procs[r], my_machine)) continue;
        std::string line = "rank " + std::to_string(r);
        if (g->global_ranks[r] != r) line += " (global " + std::to_string(g->global_ranks[r]) + ")";
        line += " (pid " + std::to_string(g->procs[r].pid) + ") of group " + g->name +
                " has exited; its GPU ops were stopped (the liveness watcher, "
                "SYMMEM_ABORT_ON_PEER_FAILURE)";
        std::lock_guard<std::mutex> acting(w.acting);
        if (w.exiting) return;
        if (set_aborted(*g->abort, line, ErrorCode::PeerFailure)) {
          SYMMEM_LOG(WARN, GPU) << "rank " << g->rank << ": " << line;
          dump_flight_recorders_on_failure("peer_failure", line.c_str());
        }
        break;
      }
    }
  }
}

}  // namespace

void watch_peer_liveness(const Group& group) {
  if (!group.valid() || group.world_size() < 2) return;
  try {
    if (!env::abort_on_peer_failure()) return;
  } catch (...) {
    return;  // a bad value is reported by env::validate_all()
  }
  LivenessWatcher& w = watcher();
  std::lock_guard<std::mutex> lock(w.mu);
  for (const auto& g : w.groups) {
    if (!g.owner_before(group.impl()) && !group.impl().owner_before(g)) return;  // registered
  }
  w.groups.push_back(group.impl());
  if (!w.started) {
    w.started = true;
    std::atexit(watcher_exit);
    std::thread(watch_loop).detach();
  }
}

std::vector<int> gone_local_ranks(const Group::Impl& g) noexcept {
  std::vector<int> out;
  try {
    const std::string my_machine = this_process_ident().machine;
    for (int r = 0; r < g.world_size && r < static_cast<int>(g.procs.size()); ++r) {
      if (r != g.rank && process_gone(g.procs[r], my_machine)) out.push_back(r);
    }
  } catch (...) {
    out.clear();
  }
  return out;
}

std::map<int, int> job_failed_counts(Store& store) noexcept {
  std::map<int, int> out;
  try {
    if (!store.check({kJobFailedKey})) return out;
    std::string list = to_string(store.get(kJobFailedKey, Millis(1000)));
    std::istringstream in(list);
    std::string item;
    while (std::getline(in, item, ',')) {
      if (!item.empty()) ++out[std::stoi(item)];
    }
  } catch (...) {
    // A malformed list or a store that cannot answer: nothing known.
  }
  return out;
}

std::string effective_abort_reason(Store& store) noexcept {
  if (auto* a = dynamic_cast<AbortAwareStore*>(&store)) return a->abort_reason();
  return job_abort_reason(store);
}

}  // namespace detail

namespace {

// The store of a group made from `p` without the ranks `excluded_global` (global ranks): over
// an AbortAwareStore, a new one over the same store that also tolerates their failures.
std::shared_ptr<Store> tolerant_store(const Group::Impl& p,
                                      const std::vector<int>& excluded_global) {
  auto* a = dynamic_cast<detail::AbortAwareStore*>(p.store.get());
  if (a == nullptr) return p.store;
  std::map<int, int> tolerated = a->tolerated();
  std::map<int, int> reported = detail::job_failed_counts(*a->inner());
  for (int r : excluded_global) {
    // Each excluded rank: the failures reported so far, and at least the one that got it
    // excluded (the launcher may report it later).
    tolerated[r] = std::max({tolerated[r], reported[r], 1});
  }
  return std::make_shared<detail::AbortAwareStore>(a->inner(), a->slice(), a->forwards_disconnect(),
                                                   tolerated);
}

// The offer a grow() makes to the joiner holding ticket t: "symmem/grow/offer/<t>".
struct GrowOffer {
  std::string name;
  int world_size = 0;
  int rank = 0;
  int64_t timeout_ms = 0;
  std::map<int, int> tolerated;
};

std::string grow_offer_key(int64_t ticket) {
  return "symmem/grow/offer/" + std::to_string(ticket);
}

Bytes encode(const GrowOffer& o) {
  std::string s = "symmem-grow-v1\n" + o.name + "\n" + std::to_string(o.world_size) + "\n" +
                  std::to_string(o.rank) + "\n" + std::to_string(o.timeout_ms) + "\n";
  for (const auto& [r, n] : o.tolerated) s += std::to_string(r) + ":" + std::to_string(n) + ",";
  return to_bytes(s);
}

// A grow offer as the store holds it; anything else (another version, a foreign key's value)
// is an Internal error naming it, never a std:: exception out of the library.
GrowOffer decode_offer(const Bytes& b) {
  auto malformed = [](const std::string& why) {
    throw_error(ErrorCode::Internal, "Group::rejoin", -1,
                "a malformed grow offer in the store (" + why + "; a different symmem version?)");
  };
  std::istringstream in(to_string(b));
  std::string magic, w, r, t, tol;
  GrowOffer o;
  if (!std::getline(in, magic) || magic != "symmem-grow-v1" || !std::getline(in, o.name) ||
      !std::getline(in, w) || !std::getline(in, r) || !std::getline(in, t)) {
    malformed("missing lines");
  }
  auto number = [&](const std::string& field, const char* what) -> int64_t {
    try {
      size_t used = 0;
      long long v = std::stoll(field, &used);
      if (used != field.size()) throw std::invalid_argument(what);
      return v;
    } catch (const std::exception&) {
      malformed(std::string(what) + " '" + field + "' is not a number");
    }
    return 0;
  };
  o.world_size = static_cast<int>(number(w, "world size"));
  o.rank = static_cast<int>(number(r, "rank"));
  o.timeout_ms = number(t, "timeout");
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size) malformed("rank out of range");
  std::getline(in, tol);
  std::istringstream items(tol);
  std::string item;
  while (std::getline(items, item, ',')) {
    size_t colon = item.find(':');
    if (colon == std::string::npos) malformed("tolerated entry '" + item + "'");
    o.tolerated[static_cast<int>(number(item.substr(0, colon), "tolerated rank"))] =
        static_cast<int>(number(item.substr(colon + 1), "tolerated count"));
  }
  return o;
}

// The all_gather of join records over a grown group `g` (members and joiners alike); fills
// host ids, processes and global ranks, then finishes it.
void complete_grown(Group::Impl& g, const Group::Impl* p, JoinRecord mine, const char* op) {
  std::vector<JoinRecord> all;
  {
    StoreExchange x(g.store, g.name + "/i", g.rank, g.world_size, g.timeout);
    x.set_abort(g.abort);
    x.set_what("group " + g.name + ": grow (" + std::to_string(g.world_size) + " ranks)",
               detail::Subsys::INIT);
    std::vector<Bytes> raw;
    try {
      raw = x.all_gather(encode(mine));
    } catch (const Error& e) {
      rethrow_with(e, op, g);
    }
    for (int r = 0; r < g.world_size; ++r) all.push_back(decode(raw[r], r, g.rank));
  }
  for (int r = 0; r < g.world_size; ++r) {
    if (all[r].world_size != g.world_size) {
      throw_error(ErrorCode::InvalidArgument, op, g.rank,
                  "rank " + std::to_string(r) + " of group " + g.name + " expects " +
                      std::to_string(all[r].world_size) + " ranks, this rank " +
                      std::to_string(g.world_size) +
                      ": every member must call grow() with the same number of joiners");
    }
  }
  g.host_ids.clear();
  g.procs.clear();
  g.global_ranks.clear();
  for (int r = 0; r < g.world_size; ++r) {
    g.host_ids.push_back(all[r].host_id);
    g.procs.push_back(all[r].proc);
    g.global_ranks.push_back(all[r].global_rank);
  }
  // A joiner has no parent: its recorder counts the grown group as the root.
  finish_derived(g, p != nullptr ? root_world_size(*p) : g.world_size, op, "grow");
}

}  // namespace

void Group::abort(const std::string& reason) const {
  const auto& g = checked(impl_, "Group::abort");
  std::string line = "group " + g->name + " was aborted by rank " + std::to_string(g->rank) +
                     (reason.empty() ? std::string() : ": " + reason);
  if (detail::set_aborted(*g->abort, line)) {
    SYMMEM_LOG(WARN, INIT) << line;
    detail::dump_flight_recorders_on_failure("abort", line.c_str());  // SYMMEM_TRACE_DIR set
  }
}

void Group::check_async_error() const {
  static constexpr const char* kOp = "check_async_error";
  const auto& g = checked(impl_, "Group::check_async_error");
  if (const detail::AbortState* s = detail::aborted_state(g->abort.get()))
    detail::throw_aborted(*s, kOp, g->rank);
  for (const auto& b : detail::loaded_backends()) {
    auto fn = reinterpret_cast<RaiseAsyncErrorFn>(b->extension(kRaiseAsyncErrorExtension));
    if (fn != nullptr) fn(*this, kOp);
  }
}

bool Group::aborted() const {
  return detail::aborted_state(checked(impl_, "Group::aborted")->abort.get()) != nullptr;
}

std::vector<int> Group::failed_ranks() const {
  const auto& g = checked(impl_, "Group::failed_ranks");
  const std::string my_machine = this_process_ident().machine;
  std::map<int, int> reported;
  std::map<int, int> tolerated;
  if (g->store) {
    if (auto* a = dynamic_cast<detail::AbortAwareStore*>(g->store.get())) {
      reported = detail::job_failed_counts(*a->inner());
      tolerated = a->tolerated();
    } else {
      reported = detail::job_failed_counts(*g->store);
    }
  }
  std::vector<int> out;
  for (int r = 0; r < g->world_size; ++r) {
    if (r == g->rank) continue;
    const auto& p = g->procs[r];
    bool gone = false;
    if (p.machine == my_machine) {
      gone = process_gone(p, my_machine);
    } else {
      auto it = reported.find(g->global_ranks[r]);
      gone = it != reported.end() && !detail::failures_tolerated(tolerated, it->first, it->second);
    }
    if (gone) out.push_back(r);
  }
  return out;
}

Group Group::shrink(const std::vector<int>& excluded) const {
  const char* op = "Group::shrink";
  detail::NvtxRange nvtx_range("group_shrink rendezvous");  // NOTE [nvtx ranges]
  const auto& p = checked(impl_, op);
  std::vector<int> out = excluded;
  std::sort(out.begin(), out.end());
  for (size_t i = 0; i < out.size(); ++i) {
    SYMMEM_CHECK_ARG(op, p->rank, out[i] >= 0 && out[i] < p->world_size, "excluded",
                     "contains " << out[i] << ", not a rank of group " << p->name << " (0.."
                                 << p->world_size - 1 << ")");
    SYMMEM_CHECK_ARG(op, p->rank, i == 0 || out[i] != out[i - 1], "excluded",
                     "contains " << out[i] << " twice");
  }
  SYMMEM_CHECK_ARG(op, p->rank, !std::binary_search(out.begin(), out.end(), p->rank), "excluded",
                   "= " << list_for_message(out) << " contains this rank (" << p->rank
                        << "); only the survivors call shrink()");
  SYMMEM_CHECK_ARG(op, p->rank, static_cast<int>(out.size()) < p->world_size, "excluded",
                   "excludes every rank");

  const std::string tag = out.empty() ? std::string("none") : ranks_tag(out);
  int call = 0;
  {
    std::lock_guard<std::mutex> lock(p->split_mutex);
    call = p->shrink_calls[tag]++;
  }
  auto g = std::make_shared<Group::Impl>();
  g->server = p->server;
  g->timeout = p->timeout;
  g->name = p->name + "/x" + tag + "#" + std::to_string(call);
  std::vector<int> excluded_global;
  for (int r : out) excluded_global.push_back(p->global_ranks[r]);
  g->store = tolerant_store(*p, excluded_global);
  g->rank_map.assign(static_cast<size_t>(p->world_size), -1);
  for (int r = 0; r < p->world_size; ++r) {
    if (std::binary_search(out.begin(), out.end(), r)) continue;
    g->rank_map[r] = static_cast<int>(g->global_ranks.size());
    if (r == p->rank) g->rank = g->rank_map[r];
    g->host_ids.push_back(p->host_ids[r]);
    g->global_ranks.push_back(p->global_ranks[r]);
    g->procs.push_back(p->procs[r]);
  }
  g->world_size = static_cast<int>(g->global_ranks.size());
  g->shrunk_from = p->name;
  // The old group ends here, for every thread of this process (NOTE [group abort]).
  detail::set_aborted(*p->abort, "group " + p->name + " was shrunk into " + g->name +
                                     " (without ranks " + list_for_message(out) +
                                     "); use the new group and allocate on it");
  finish_derived(*g, root_world_size(*p),
                 std::string(op) + "(excluded=" + list_for_message(out) + ") of " + p->name,
                 "shrink() of " + p->name);
  return Group(g);
}

Group Group::grow(int joiners) const {
  const char* op = "Group::grow";
  detail::NvtxRange nvtx_range("group_grow rendezvous");  // NOTE [nvtx ranges]
  const auto& p = checked(impl_, op);
  detail::check_not_aborted(p->abort.get(), op, p->rank);
  SYMMEM_CHECK_ARG(op, p->rank, joiners >= 1 && joiners <= (1 << 20), "joiners",
                   "is " << joiners << ", not in 1..1048576");
  int call = 0;
  {
    std::lock_guard<std::mutex> lock(p->split_mutex);
    call = p->grow_calls++;
  }
  auto g = std::make_shared<Group::Impl>();
  g->server = p->server;
  g->timeout = p->timeout;
  g->store = p->store;
  g->name = p->name + "/g" + std::to_string(call);
  g->rank = p->rank;
  g->world_size = p->world_size + joiners;
  g->rank_map.resize(static_cast<size_t>(p->world_size));
  for (int r = 0; r < p->world_size; ++r) g->rank_map[r] = r;
  if (p->rank == 0) {
    // Serve the next `joiners` tickets of Group::rejoin() (NOTE [grow tickets]).
    const int64_t base = p->store->add("symmem/grow/served", joiners) - joiners;
    GrowOffer offer;
    offer.name = g->name;
    offer.world_size = g->world_size;
    offer.timeout_ms = g->timeout.count();
    if (auto* a = dynamic_cast<detail::AbortAwareStore*>(p->store.get()))
      offer.tolerated = a->tolerated();
    for (int k = 0; k < joiners; ++k) {
      offer.rank = p->world_size + k;
      p->store->set(grow_offer_key(base + k + 1), encode(offer));
    }
  }
  JoinRecord mine;
  mine.world_size = g->world_size;
  mine.global_rank = p->global_ranks[p->rank];
  mine.proc = p->procs[p->rank];
  mine.host_id = p->host_ids[p->rank];
  complete_grown(*g, p.get(), mine, op);
  return Group(g);
}

bool Group::restarted() {
  return env::restart_count() > 0;
}

const std::vector<int>& Group::rank_map() const {
  return checked(impl_, "Group::rank_map")->rank_map;
}

namespace detail {

// NOTE [grow tickets]
// A joiner takes a ticket (store add on "symmem/grow/tickets", 1, 2, ...) and waits for its
// offer at "symmem/grow/offer/<ticket>". Rank 0 of a grow(n) serves the next n tickets (add n
// on "symmem/grow/served") by writing their offers: the new group's name, size and the joiner's
// rank in it. Tickets are served in the order they were taken, whether the joiners came before
// or after the grow().
Group join_grown_group(std::shared_ptr<Store> store, int launcher_rank,
                       const GroupOptions& options) {
  const char* op = "Group::rejoin";
  Millis timeout = resolve_timeout(options.timeout);
  // The survivors' failures are behind this process: wait on the raw store (an abort key is
  // set), then wrap it as the offer says.
  std::shared_ptr<Store> raw = store;
  if (auto* a = dynamic_cast<AbortAwareStore*>(store.get())) raw = a->inner();
  const int64_t ticket = raw->add("symmem/grow/tickets", 1);
  SYMMEM_LOG(INFO, INIT) << "rejoin: rank " << launcher_rank << " waits for a grow() (ticket "
                         << ticket << ")";
  Bytes b;
  try {
    b = raw->get(grow_offer_key(ticket), timeout);
  } catch (const Error& e) {
    throw Error(e.code(), std::string(op) + ": rank " + std::to_string(launcher_rank) +
                              ": no group grew to take this process within " +
                              std::to_string(timeout.count()) + " ms (ticket " +
                              std::to_string(ticket) + "; the survivors call grow()): " + e.what());
  }
  GrowOffer offer = decode_offer(b);
  auto g = std::make_shared<Group::Impl>();
  g->store = std::make_shared<AbortAwareStore>(raw, Millis(200), false, offer.tolerated);
  g->timeout = Millis(offer.timeout_ms);
  g->name = offer.name;
  g->rank = offer.rank;
  g->world_size = offer.world_size;
  JoinRecord mine;
  mine.world_size = g->world_size;
  mine.global_rank = launcher_rank;
  mine.proc = this_process_ident();
  mine.host_id = host_identity(options.host_id);
  complete_grown(*g, nullptr, mine, op);
  return Group(g);
}

}  // namespace detail
}  // namespace symmem
