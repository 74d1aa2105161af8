// Group: rank bookkeeping, host identity, split() and the store barrier.
// Group::from_env() (launcher variables, the store hosted by rank 0) is in group_env.cpp.

#include "symmem/group.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "core/check.hpp"
#include "core/group_impl.hpp"
#include "core/log.hpp"
#include "core/timeout.hpp"
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
    if (!reason.empty() && msg.find("the launcher reports") == std::string::npos) {
      msg += "; the launcher reports: " + reason;
      code = ErrorCode::PeerFailure;
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

}  // namespace

Group::Impl::~Impl() {
  if (!checkout_on_exit || !store || world_size <= 1) return;
  try {
    if (rank != 0) {
      store->set(name + "/exit/" + std::to_string(rank), to_bytes("1"));
      return;
    }
    // Rank 0 hosts the store: wait until everyone is done with it before it stops. Bounded
    // below the job timeout: a rank that died never checks out, and exiting should not hang.
    std::vector<std::string> keys;
    for (int r = 1; r < world_size; ++r) keys.push_back(name + "/exit/" + std::to_string(r));
    store->wait(keys, std::min(timeout, Millis(kCheckoutWaitMs)));
    for (const auto& k : keys) store->remove(k);
  } catch (const std::exception& e) {
    SYMMEM_LOG(WARN, INIT) << "group " << name << ": check-out at exit failed: " << e.what();
  } catch (...) {
  }
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
                                             bool checkout_on_exit) {
  const char* op = "Group::create";
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
    StoreExchange x(store, g->name + "/i", rank, world_size, g->timeout);
    std::vector<Bytes> raw;
    try {
      raw = x.all_gather(encode(mine));
    } catch (const Error& e) {
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
  int hosts = 0;
  for (int r = 0; r < world_size; ++r) {
    if (std::find(g->host_ids.begin(), g->host_ids.begin() + r, g->host_ids[r]) ==
        g->host_ids.begin() + r) {
      ++hosts;
    }
  }
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
  try {
    g->barrier_x->barrier();  // every member must arrive: a mismatched list fails here, clearly
  } catch (const Error& e) {
    rethrow_with(e, std::string(op) + "(ranks=" + list_for_message(sorted) + ") of " + p->name, *g);
  }
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
