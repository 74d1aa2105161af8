// SymmetricMemory handles, allocate() with its cross-rank agreement check, backend selection,
// the address registry and per-group state (allocation sequence, exchanges, workspaces).
//
// NOTE [allocation agreement]
// allocate() is collective. Before any backend work, every rank publishes what it asks for
// (sequence number of the allocation in the group, bytes, device type, backend, signal pad
// bytes) plus any local error (bad argument, backend that cannot be loaded or cannot serve the
// device) through the group's "symmem/alloc" StoreExchange. Every rank then sees every request:
//   - a rank with a local error throws it (naming its argument); the others throw the same code
//     saying which rank failed and why, so nobody is left waiting in the backend's rendezvous;
//   - requests that differ make every rank throw InvalidArgument listing what each rank asked.
// Only when all agree does the backend allocate and rendezvous. The sequence number counts
// allocate() calls per group on each rank, so ranks that allocate in different orders show up
// as different sizes (or devices/backends) for the same sequence number.

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <set>
#include <shared_mutex>
#include <sstream>
#include <string>
#include <tuple>

#include "core/check.hpp"
#include "core/exchange.hpp"
#include "core/group_impl.hpp"
#include "core/log.hpp"
#include "core/memory_impl.hpp"
#include "core/memory_registry.hpp"
#include "core/registry.hpp"
#include "core/timeout.hpp"
#include "core/trace.hpp"
#include "core/workspace.hpp"
#include "symmem/backend.hpp"
#include "symmem/env.hpp"
#include "symmem/error.hpp"
#include "symmem/memory.hpp"

namespace symmem {
namespace {

// A handle on [offset, offset + length) of allocation `a` (every handle the core makes).
SymmetricMemory view_of(std::shared_ptr<detail::Allocation> a, size_t offset, size_t length) {
  auto v = std::make_shared<SymmetricMemory::Impl>();
  v->alloc = std::move(a);
  v->offset = offset;
  v->length = length;
  return SymmetricMemory(std::move(v));
}

constexpr size_t kMaxAllocationBytes = size_t{1} << 46;  // 64 TiB per rank
constexpr size_t kWorkspaceGranule = size_t{1} << 20;

// ---- per-group state ------------------------------------------------------------------------

struct GroupState {
  std::mutex alloc_mu;  // serialises allocate() on this group (the exchange is single-user)
  uint64_t next_alloc = 0;
  std::mutex exchange_mu;
  std::map<std::string, std::unique_ptr<StoreExchange>> exchanges;
  std::mutex workspace_mu;
  std::map<std::pair<int, int>, SymmetricMemory> workspaces;  // per device {type, index}
  std::map<std::tuple<std::string, int, int>, SymmetricMemory> scratches;  // group_scratch()
};

using StateMap =
    std::map<std::weak_ptr<Group::Impl>, std::shared_ptr<GroupState>, std::owner_less<>>;

std::mutex& state_mutex() {
  static auto* m = new std::mutex;
  return *m;
}
// Never destroyed: at process exit the backends' libraries may already be gone.
StateMap& states() {
  static auto* s = new StateMap;
  return *s;
}

std::shared_ptr<GroupState> group_state(const Group& group) {
  std::vector<std::shared_ptr<GroupState>> dead;  // destroyed outside the lock
  std::shared_ptr<GroupState> out;
  {
    std::lock_guard<std::mutex> lock(state_mutex());
    auto& map = states();
    std::weak_ptr<Group::Impl> key = group.impl();
    auto it = map.find(key);
    if (it == map.end()) {
      // A new group: the states of groups that are gone go now (not on every lookup: ops ask
      // for their group's state on every call).
      for (auto e = map.begin(); e != map.end();) {
        if (e->first.expired()) {
          dead.push_back(std::move(e->second));
          e = map.erase(e);
        } else {
          ++e;
        }
      }
      it = map.emplace(key, std::make_shared<GroupState>()).first;
    }
    out = it->second;
  }
  return out;
}

// ---- address registry ---------------------------------------------------------------------

struct RangeEntry {
  uintptr_t end;
  std::weak_ptr<detail::Allocation> alloc;
  const void* group_key;
};

std::shared_mutex& range_mutex() {
  static auto* m = new std::shared_mutex;
  return *m;
}
std::map<uintptr_t, RangeEntry>& ranges() {
  static auto* r = new std::map<uintptr_t, RangeEntry>;
  return *r;
}
// Moves whenever ranges() changes (under its lock): what a BufferCache entry was found at.
std::atomic<uint64_t> range_generation{1};

void register_range(const std::shared_ptr<detail::Allocation>& a) {
  void* p = a->mem->ptr(a->rank);
  if (p == nullptr) return;
  auto base = reinterpret_cast<uintptr_t>(p);
  std::unique_lock<std::shared_mutex> lock(range_mutex());
  ranges()[base] = RangeEntry{base + a->bytes, a, a->group_key};
  range_generation.fetch_add(1, std::memory_order_release);
  a->registered_base = base;
}

std::shared_ptr<detail::Allocation> lookup(const void* p, size_t bytes, uintptr_t* base) {
  auto addr = reinterpret_cast<uintptr_t>(p);
  if (bytes == 0) bytes = 1;
  std::shared_lock<std::shared_mutex> lock(range_mutex());
  auto& r = ranges();
  auto it = r.upper_bound(addr);
  if (it == r.begin()) return nullptr;
  --it;
  if (addr >= it->second.end || bytes > it->second.end - addr) return nullptr;
  auto a = it->second.alloc.lock();
  if (!a || a->freed.load()) return nullptr;
  *base = it->first;
  return a;
}

// ---- backend selection ----------------------------------------------------------------------

struct Selection {
  std::mutex mu;
  std::string name;    // "" until first use: then SYMMEM_BACKEND
  std::string source;  // "SYMMEM_BACKEND" or "select_backend()"
  uint64_t allocations = 0;
  std::set<std::string> logged;
};
Selection& selection() {
  static auto* s = new Selection;
  return *s;
}

std::string selected_backend(std::string* source) {
  auto& s = selection();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.name.empty()) {
    s.name = env::backend();
    if (s.name.empty()) s.name = "auto";
    s.source = "SYMMEM_BACKEND";
  }
  if (source != nullptr) *source = s.source;
  return s.name;
}

bool valid_backend_name(const std::string& n) {
  if (n.empty() || n.size() > 23) return false;
  return std::all_of(n.begin(), n.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

// Resolves `requested` ("auto" or a name) for (group, device). Throws BackendUnavailable only when
// no choice exists at all.
std::string resolve(const std::string& requested, const std::string& source, const Group& group,
                    Device device, std::string* why) {
  if (requested != "auto") {
    if (why != nullptr) *why = "selected by " + source;
    return requested;
  }
  return detail::auto_backend(group, device, why);
}

// ---- handle helpers -------------------------------------------------------------------------

const detail::Allocation& usable(const std::shared_ptr<SymmetricMemory::Impl>& impl,
                                 std::string_view op, std::string_view arg = "buffer") {
  if (!impl) throw_invalid_argument(op, -1, arg, "is an empty SymmetricMemory handle");
  const auto& a = *impl->alloc;
  if (a.freed.load(std::memory_order_acquire)) {
    throw_invalid_argument(op, a.rank, arg, "is " + a.label + ", which was freed");
  }
  return a;
}

// usable(), and the allocation's group not aborted (NOTE [group abort]): for what runs on it.
const detail::Allocation& live(const std::shared_ptr<SymmetricMemory::Impl>& impl,
                               std::string_view op, std::string_view arg = "buffer") {
  const auto& a = usable(impl, op, arg);
  if (a.group.valid()) detail::check_not_aborted(a.group.impl()->abort.get(), op, a.rank);
  return a;
}

const detail::Allocation& meta(const std::shared_ptr<SymmetricMemory::Impl>& impl,
                               std::string_view op) {
  if (!impl) throw_invalid_argument(op, -1, "buffer", "is an empty SymmetricMemory handle");
  return *impl->alloc;
}

void check_peer(const detail::Allocation& a, std::string_view op, std::string_view arg, int peer) {
  if (peer < 0 || peer >= a.world_size) {
    std::ostringstream os;
    os << "= " << peer << " is out of range [0, " << a.world_size << ") of " << a.label;
    throw_invalid_argument(op, a.rank, arg, os.str());
  }
}

int num_channels_of(const detail::Allocation& a) {
  return static_cast<int>(a.pad_bytes / sizeof(uint32_t) / static_cast<size_t>(a.world_size));
}

void check_channel(const detail::Allocation& a, std::string_view op, int channel) {
  int n = num_channels_of(a);
  if (channel < 0 || channel >= n) {
    std::ostringstream os;
    os << "= " << channel << " is out of range [0, " << n << ") of " << a.label
       << " (signal pad of " << a.pad_bytes << " bytes, " << a.world_size << " ranks)";
    throw_invalid_argument(op, a.rank, "channel", os.str());
  }
}

// ---- the agreement record -----------------------------------------------------------------

struct AllocRecord {
  uint64_t seq;
  uint64_t bytes;
  uint64_t pad_bytes;
  int32_t device_type;
  int32_t device_index;
  int32_t error_code;  // 0: no local error
  int32_t reserved;
  char backend[24];
  char error[400];
};

std::string describe_record(const AllocRecord& r) {
  std::ostringstream os;
  Device d{static_cast<DeviceType>(r.device_type), r.device_index};
  os << "#" << r.seq << ": " << r.bytes << " bytes on " << to_string(d) << ", backend " << r.backend
     << ", signal pad " << r.pad_bytes << " bytes";
  if (r.error_code != 0) os << " [local error: " << r.error << "]";
  return os.str();
}

void copy_str(char* dst, size_t cap, const std::string& s) {
  size_t n = std::min(cap - 1, s.size());
  std::memcpy(dst, s.data(), n);
  dst[n] = '\0';
}

// ---- allocate_impl's phases (NOTE [allocation agreement]) ------------------------------------

constexpr const char* kAllocOp = "allocate";

// The backend an allocation uses and why (for the log and for errors).
struct BackendChoice {
  std::shared_ptr<Backend> backend;
  std::string name;
  std::string why;
};

void check_size_and_device(int rank, size_t bytes, Device device) {
  const char* op = kAllocOp;
  SYMMEM_CHECK_ARG(op, rank, bytes > 0, "bytes", "= 0; an allocation needs at least one byte");
  SYMMEM_CHECK_ARG(op, rank, bytes <= kMaxAllocationBytes, "bytes",
                   "= " << bytes << " exceeds the largest supported allocation ("
                        << kMaxAllocationBytes << " bytes per rank)");
  SYMMEM_CHECK_ARG(op, rank, device.type == DeviceType::cpu || device.type == DeviceType::cuda,
                   "device", "has unknown type " << static_cast<int>(device.type));
  SYMMEM_CHECK_ARG(op, rank, device.index >= 0, "device",
                   "= " << to_string(device) << " has a negative index");
}

// The signal pad bytes asked for (options, else SYMMEM_SIGNAL_PAD_BYTES), stored in `*pad_bytes`
// before they are checked.
void check_signal_pad(int rank, int world, const AllocOptions& options, uint64_t* pad_bytes) {
  const char* op = kAllocOp;
  size_t pad = options.signal_pad_bytes;
  std::string pad_arg = "options.signal_pad_bytes";
  if (pad == 0) {
    pad = static_cast<size_t>(env::signal_pad_bytes());
    pad_arg = "SYMMEM_SIGNAL_PAD_BYTES";
  }
  *pad_bytes = pad;
  SYMMEM_CHECK_ARG(op, rank, pad % sizeof(uint32_t) == 0, pad_arg,
                   "= " << pad << " is not a multiple of 4 (slots are uint32_t)");
  SYMMEM_CHECK_ARG(op, rank, pad / sizeof(uint32_t) >= static_cast<size_t>(world), pad_arg,
                   "= " << pad << " gives " << pad / sizeof(uint32_t) << " slots, fewer than the "
                        << world << " one channel needs (one slot per rank); use at least "
                        << world * sizeof(uint32_t));
  SYMMEM_CHECK_ARG(op, rank, pad <= (size_t{1} << 30), pad_arg, "= " << pad << " exceeds 1 GiB");
}

// Picks, loads and checks the backend (NOTE [CPU buffers of a GPU backend] in registry.hpp).
// `*c` keeps what was learnt before a throw (the name goes into the agreement record).
void choose_backend(const Group& group, Device device, const AllocOptions& options,
                    BackendChoice* c) {
  const char* op = kAllocOp;
  const int rank = group.rank();
  std::string requested = options.backend;
  std::string source = "AllocOptions::backend";
  if (requested.empty() || requested == "auto") requested = selected_backend(&source);
  SYMMEM_CHECK_ARG(op, rank, valid_backend_name(requested) || requested == "auto", "backend",
                   "= '" << requested << "' is not a backend name");
  c->name = resolve(requested, source, group, device, &c->why);
  std::string load_why;
  c->backend = detail::try_get_backend(c->name, &load_why);
  if (!c->backend) {
    std::string avail;
    for (const auto& n : available_backends()) avail += (avail.empty() ? "" : ", ") + n;
    throw_error(ErrorCode::BackendUnavailable, op, rank,
                "backend '" + c->name + "' (" + c->why + ") is unavailable: " + load_why +
                    "; available backends: " + (avail.empty() ? "(none)" : avail));
  }
  std::string reroute_why;
  const std::string serving = detail::backend_for(group, device, c->name, &reroute_why);
  if (!reroute_why.empty()) {
    SYMMEM_LOG(INFO, ALLOC) << "backend '" << c->name << "' does not serve " << to_string(device)
                            << " buffers; they use the " << serving << " backend";
    c->why = reroute_why;
    c->name = serving;
    c->backend = detail::try_get_backend(c->name, &load_why);
    SYMMEM_INTERNAL_CHECK(c->backend != nullptr);
  }
  std::string serve_why;
  if (!c->backend->can_serve(group, device, &serve_why)) {
    throw_error(ErrorCode::Unsupported, op, rank,
                "backend '" + c->name + "' cannot serve " + to_string(device) +
                    " buffers for group " + group.name() + ": " + serve_why);
  }
}

// Every rank's record of allocation `seq` (this rank's alone for a group of one).
std::vector<AllocRecord> gather_records(const Group& group, uint64_t seq, const AllocRecord& mine) {
  if (group.world_size() <= 1) return {mine};
  try {
    StoreExchange& x = group_exchange(group, "symmem/alloc");
    x.set_what("group " + group.name() + ": allocation #" + std::to_string(seq),
               detail::Subsys::ALLOC);
    return x.all_gather(mine);
  } catch (const Error& e) {
    throw_error(e.code(), kAllocOp, group.rank(),
                "ranks of group " + group.name() + " did not all join allocation #" +
                    std::to_string(seq) + ": " + e.what());
  }
}

// Throws, on every rank alike, when a rank failed locally or the requests differ.
void check_agreement(const Group& group, uint64_t seq, const std::vector<AllocRecord>& all) {
  const int rank = group.rank();
  const int world = group.world_size();
  for (int r = 0; r < world; ++r) {
    if (all[r].error_code != 0) {
      std::ostringstream os;
      os << "rank " << r << " of group " << group.name() << " failed allocation #" << seq
         << ", so every rank fails it: " << all[r].error;
      throw_error(static_cast<ErrorCode>(all[r].error_code), kAllocOp, rank, os.str());
    }
  }
  std::vector<std::string> differ;
  for (int r = 1; r < world; ++r) {
    const auto& a = all[0];
    const auto& b = all[r];
    if (a.seq != b.seq) differ.push_back("allocation order (sequence number)");
    if (a.bytes != b.bytes) differ.push_back("bytes");
    if (a.device_type != b.device_type) differ.push_back("device type");
    if (std::strcmp(a.backend, b.backend) != 0) differ.push_back("backend");
    if (a.pad_bytes != b.pad_bytes) differ.push_back("signal pad bytes");
  }
  if (differ.empty()) return;
  std::sort(differ.begin(), differ.end());
  differ.erase(std::unique(differ.begin(), differ.end()), differ.end());
  std::ostringstream os;
  os << "ranks of group " << group.name() << " disagree on allocation #" << seq << " (";
  for (size_t i = 0; i < differ.size(); ++i) os << (i ? ", " : "") << differ[i];
  os << " differ; every rank must call allocate() in the same order with the same size, "
        "device type, backend and signal pad). Requests:";
  for (int r = 0; r < world; ++r) {
    if (r >= 64) {
      os << " ... (" << world - 64 << " more)";
      break;
    }
    os << " rank " << r << " " << describe_record(all[r]) << ";";
  }
  throw_invalid_argument(kAllocOp, rank, "bytes", os.str());
}

// Counts the allocation (select_backend() refuses a change after the first) and logs each
// distinct choice once.
void note_backend_choice(const Group& group, Device device, const BackendChoice& c) {
  auto& s = selection();
  std::lock_guard<std::mutex> lock(s.mu);
  ++s.allocations;
  std::string key = c.name + "|" + (device.is_cuda() ? "cuda" : "cpu") + "|" + c.why;
  if (s.logged.insert(key).second) {
    SYMMEM_LOG(INFO, ALLOC) << "backend '" << c.name << "' for "
                            << (device.is_cuda() ? "GPU" : "CPU") << " buffers (group "
                            << group.name() << "): " << c.why;
  }
}

// The allocation's metadata, before its backend memory exists.
std::shared_ptr<detail::Allocation> new_allocation(const Group& group, const RendezvousInfo& info,
                                                   const BackendChoice& c, bool workspace) {
  auto a = std::make_shared<detail::Allocation>();
  a->backend = c.backend;
  a->backend_name = c.name;
  if (workspace) {
    // Aliasing constructor with an empty owner: a non-owning handle on the group.
    a->group =
        Group(std::shared_ptr<Group::Impl>(std::shared_ptr<Group::Impl>(), group.impl().get()));
  } else {
    a->group = group;
  }
  a->group_key = group.impl().get();
  a->device = info.device;
  if (!workspace) {
    group.impl()->last_alloc_device.store(info.device.is_cuda() ? info.device.index : -1);
  }
  a->bytes = info.bytes;
  a->pad_bytes = info.signal_pad_bytes;
  a->alloc_id = info.alloc_id;
  a->rank = group.rank();
  a->world_size = group.world_size();
  a->timeout = info.timeout;
  a->workspace = workspace;
  std::ostringstream os;
  os << (workspace ? "workspace " : "") << "allocation #" << info.alloc_id << " of group "
     << group.name() << " (" << info.bytes << " bytes, " << to_string(info.device) << ", " << c.name
     << ")";
  a->label = os.str();
  return a;
}

SymmetricMemory allocate_impl(const Group& group, size_t bytes, Device device,
                              const AllocOptions& options, bool workspace,
                              detail::TraceScope* trace = nullptr) {
  const char* op = kAllocOp;
  if (!group.valid()) throw_invalid_argument(op, -1, "group", "is not a valid Group");
  const int rank = group.rank();
  detail::check_not_aborted(group.impl()->abort.get(), op, rank);
  auto state = group_state(group);
  std::lock_guard<std::mutex> alloc_lock(state->alloc_mu);
  const uint64_t seq = state->next_alloc++;

  // Local checks: failures travel in the record so that every rank fails together.
  AllocRecord mine{};
  mine.seq = seq;
  mine.bytes = bytes;
  mine.device_type = static_cast<int32_t>(device.type);
  mine.device_index = device.index;
  BackendChoice choice;
  ErrorCode local_code{};
  std::string local_error;
  try {
    check_size_and_device(rank, bytes, device);
    check_signal_pad(rank, group.world_size(), options, &mine.pad_bytes);
    choose_backend(group, device, options, &choice);
  } catch (const Error& e) {
    local_code = e.code();
    local_error = e.what();
    mine.error_code = static_cast<int32_t>(e.code());
    copy_str(mine.error, sizeof(mine.error), e.what());
  }
  copy_str(mine.backend, sizeof(mine.backend), choice.name.empty() ? "?" : choice.name);

  const std::vector<AllocRecord> all = gather_records(group, seq, mine);
  if (!local_error.empty()) throw Error(local_code, local_error);
  check_agreement(group, seq, all);
  note_backend_choice(group, device, choice);
  if (trace) trace->start(choice.name, device, nullptr, bytes, bytes, true);

  RendezvousInfo info;
  info.alloc_id = seq;
  info.bytes = bytes;
  info.signal_pad_bytes = mine.pad_bytes;
  info.device = device;
  info.timeout = group.timeout();  // resolved (> 0) by Group::create
  auto a = new_allocation(group, info, choice, workspace);
  a->mem = choice.backend->allocate(group, info);
  SYMMEM_CHECK(op, rank, a->mem != nullptr, ErrorCode::Internal,
               "backend '" << choice.name << "' returned no memory");
  register_range(a);
  if (workspace && device.type == DeviceType::cpu) {  // NOTE [op fast path] (core/ops.cpp)
    for (int p = 0; p < a->world_size; ++p) {
      a->peer_ptrs.push_back(static_cast<char*>(a->mem->ptr(p)));
      a->peer_pads.push_back(a->mem->signal_pad(p));
    }
  }
  SYMMEM_LOG(TRACE, ALLOC) << "rank " << rank << ": " << a->label << " ready";
  return view_of(std::move(a), 0, bytes);
}

}  // namespace

// ---- Allocation ------------------------------------------------------------------------------

namespace detail {

Allocation::~Allocation() {
  release();
}

void Allocation::release() noexcept {
  freed.store(true, std::memory_order_release);
  if (registered_base != 0) {
    std::unique_lock<std::shared_mutex> lock(range_mutex());
    auto it = ranges().find(registered_base);
    if (it != ranges().end()) {
      auto other = it->second.alloc.lock();
      if (!other || other.get() == this) ranges().erase(it);
    }
    range_generation.fetch_add(1, std::memory_order_release);
    registered_base = 0;
  }
  try {
    mem.reset();
  } catch (...) {
    // BackendMemory destructors must not throw; nothing sensible to do here.
  }
}

}  // namespace detail

// ---- SymmetricMemory -------------------------------------------------------------------------

SymmetricMemory::SymmetricMemory() = default;

int SymmetricMemory::rank() const {
  return meta(impl_, "SymmetricMemory::rank").rank;
}
int SymmetricMemory::world_size() const {
  return meta(impl_, "SymmetricMemory::world_size").world_size;
}
size_t SymmetricMemory::size() const {
  meta(impl_, "SymmetricMemory::size");
  return impl_->length;
}
size_t SymmetricMemory::offset() const {
  meta(impl_, "SymmetricMemory::offset");
  return impl_->offset;
}
Device SymmetricMemory::device() const {
  return meta(impl_, "SymmetricMemory::device").device;
}
const std::string& SymmetricMemory::backend() const {
  return meta(impl_, "SymmetricMemory::backend").backend_name;
}
const Group& SymmetricMemory::group() const {
  return meta(impl_, "SymmetricMemory::group").group;
}
uint64_t SymmetricMemory::alloc_id() const {
  return meta(impl_, "SymmetricMemory::alloc_id").alloc_id;
}

void* SymmetricMemory::ptr(int peer) const {
  const auto& a = usable(impl_, "SymmetricMemory::ptr");
  check_peer(a, "SymmetricMemory::ptr", "peer", peer);
  void* base = a.mem->ptr(peer);
  return base == nullptr ? nullptr : static_cast<char*>(base) + impl_->offset;
}

void* const* SymmetricMemory::ptrs_device() const {
  const auto& a = usable(impl_, "SymmetricMemory::ptrs_device");
  if (impl_->offset == 0) return a.mem->ptrs_device();
  return a.mem->device_handle(impl_->offset, impl_->length).buffers;
}

uint32_t* SymmetricMemory::signal_pad(int peer) const {
  const auto& a = usable(impl_, "SymmetricMemory::signal_pad");
  check_peer(a, "SymmetricMemory::signal_pad", "peer", peer);
  return a.mem->signal_pad(peer);
}

size_t SymmetricMemory::signal_pad_bytes() const {
  return meta(impl_, "SymmetricMemory::signal_pad_bytes").pad_bytes;
}

int SymmetricMemory::num_channels() const {
  return num_channels_of(meta(impl_, "SymmetricMemory::num_channels"));
}

bool SymmetricMemory::direct_access(int peer) const {
  const auto& a = usable(impl_, "SymmetricMemory::direct_access");
  check_peer(a, "SymmetricMemory::direct_access", "peer", peer);
  return a.mem->direct_access(peer);
}

int SymmetricMemory::global_rank(int rank) const {
  const auto& a = meta(impl_, "SymmetricMemory::global_rank");
  check_peer(a, "SymmetricMemory::global_rank", "rank", rank);
  return a.group.global_rank(rank);
}

void SymmetricMemory::barrier(int channel, Millis timeout, Stream stream) const {
  const auto& a = live(impl_, "barrier");
  check_channel(a, "barrier", channel);
  a.mem->barrier(channel, detail::resolve_timeout(timeout, a.timeout), stream);
}

void SymmetricMemory::put_signal(int dst, int channel, Millis timeout, Stream stream) const {
  const auto& a = live(impl_, "put_signal");
  check_peer(a, "put_signal", "dst", dst);
  check_channel(a, "put_signal", channel);
  a.mem->put_signal(dst, channel, detail::resolve_timeout(timeout, a.timeout), stream);
}

void SymmetricMemory::wait_signal(int src, int channel, Millis timeout, Stream stream) const {
  const auto& a = live(impl_, "wait_signal");
  check_peer(a, "wait_signal", "src", src);
  check_channel(a, "wait_signal", channel);
  a.mem->wait_signal(src, channel, detail::resolve_timeout(timeout, a.timeout), stream);
}

namespace {
// A raw pad slot of `a` (signal_op / wait_until).
void check_slot(const detail::Allocation& a, std::string_view op, size_t slot) {
  const size_t slots = a.pad_bytes / sizeof(uint32_t);
  if (slot >= slots) {
    throw_invalid_argument(op, a.rank, "slot",
                           "is " + std::to_string(slot) + "; the signal pad of " + a.label +
                               " has slots 0.." + std::to_string(slots - 1) +
                               " (SYMMEM_SIGNAL_PAD_BYTES / 4)");
  }
}
}  // namespace

void SymmetricMemory::signal_op(int peer, size_t slot, uint32_t value, SignalOp op,
                                Stream stream) const {
  const auto& a = live(impl_, "signal_op");
  check_peer(a, "signal_op", "peer", peer);
  check_slot(a, "signal_op", slot);
  if (op != SignalOp::set && op != SignalOp::add) {
    throw_invalid_argument(
        "signal_op", a.rank, "op",
        "has unknown value " + std::to_string(static_cast<int>(op)) + " (set, add)");
  }
  a.mem->signal_op(peer, slot, value, op, stream);
}

uint32_t SymmetricMemory::wait_until(size_t slot, Cmp cmp, uint32_t value, Millis timeout,
                                     Stream stream) const {
  const auto& a = live(impl_, "wait_until");
  check_slot(a, "wait_until", slot);
  if (static_cast<unsigned>(cmp) > static_cast<unsigned>(Cmp::le)) {
    throw_invalid_argument(
        "wait_until", a.rank, "cmp",
        "has unknown value " + std::to_string(static_cast<int>(cmp)) + " (eq, ne, gt, ge, lt, le)");
  }
  return a.mem->wait_until(slot, cmp, value, detail::resolve_timeout(timeout, a.timeout), stream);
}

DeviceHandle SymmetricMemory::device_handle() const {
  const auto& a = live(impl_, "SymmetricMemory::device_handle");
  DeviceHandle h = a.mem->device_handle(impl_->offset, impl_->length);
  h.rank = a.rank;
  h.world_size = a.world_size;
  h.size = impl_->length;
  h.num_channels = static_cast<uint32_t>(num_channels_of(a));
  h.pad_slots = static_cast<uint32_t>(a.pad_bytes / sizeof(uint32_t));
  return h;
}

SymmetricMemory SymmetricMemory::view(size_t offset, size_t length) const {
  const char* op = "SymmetricMemory::view";
  const auto& a = usable(impl_, op);
  SYMMEM_CHECK_ARG(op, a.rank, length > 0, "length", "= 0; a view needs at least one byte");
  SYMMEM_CHECK_ARG(op, a.rank, offset <= impl_->length && length <= impl_->length - offset,
                   "offset",
                   "= " << offset << " with length " << length << " exceeds the view's "
                        << impl_->length << " bytes (" << a.label << ")");
  return view_of(impl_->alloc, impl_->offset + offset, length);
}

void SymmetricMemory::free() {
  if (!impl_) throw_invalid_argument("SymmetricMemory::free", -1, "buffer", "is an empty handle");
  auto& a = *impl_->alloc;
  if (a.freed.load()) {
    throw_invalid_argument("SymmetricMemory::free", a.rank, "buffer",
                           "is " + a.label + ", which was already freed");
  }
  SYMMEM_LOG(TRACE, ALLOC) << "rank " << a.rank << ": freeing " << a.label;
  a.release();
}

bool SymmetricMemory::freed() const noexcept {
  return impl_ != nullptr && impl_->alloc->freed.load(std::memory_order_acquire);
}

const std::shared_ptr<BackendMemory>& SymmetricMemory::backend_memory() const {
  return usable(impl_, "SymmetricMemory::backend_memory").mem;
}

// ---- allocation and selection ------------------------------------------------------------------

SymmetricMemory allocate(const Group& group, size_t bytes, Device device,
                         const AllocOptions& options) {
  detail::TraceScope trace(group.valid() ? group.impl()->recorder.get() : nullptr);
  if (!trace.active()) return allocate_impl(group, bytes, device, options, false);
  detail::TraceOp t;
  t.op = detail::kTraceAlloc;  // "alloc" (NOTE [flight recorder] in core/trace.hpp)
  t.count = bytes;
  trace.begin(t);
  try {
    SymmetricMemory m = allocate_impl(group, bytes, device, options, false, &trace);
    trace.completed();
    return m;
  } catch (const Error& e) {
    trace.set_backend(std::string(), device);
    trace.failed(e);
    throw;
  } catch (const std::exception& e) {
    trace.failed(e.what());
    throw;
  }
}

void select_backend(const std::string& name) {
  const char* op = "select_backend";
  const auto& known = detail::known_backend_names();
  bool ok = name == "auto" || valid_backend_name(name);
  if (!ok) {
    std::string list = "auto";
    for (const auto& k : known) list += "|" + k;
    throw_invalid_argument(op, -1, "name", "= '" + name + "' is not a backend name (" + list + ")");
  }
  auto& s = selection();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.name.empty()) {
    s.name = env::backend();
    if (s.name.empty()) s.name = "auto";
  }
  if (s.allocations > 0 && name != s.name) {
    throw_invalid_argument(op, -1, "name",
                           "= '" + name + "': the backend is already '" + s.name + "' (" +
                               std::to_string(s.allocations) +
                               " allocations made); choose the backend before the first "
                               "allocation");
  }
  s.name = name;
  s.source = "select_backend()";
}

std::string resolve_backend(const Group& group, Device device, std::string* why) {
  if (!group.valid())
    throw_invalid_argument("resolve_backend", -1, "group", "is not a valid Group");
  std::string source;
  std::string requested = selected_backend(&source);
  return resolve(requested, source, group, device, why);
}

// ---- internal services (memory_registry.hpp, workspace.hpp) -----------------------------------

SymmetricMemory find_symmetric(const Group& group, const void* p, size_t bytes) {
  if (p == nullptr || !group.valid()) return {};
  uintptr_t base = 0;
  auto a = lookup(p, bytes, &base);
  if (!a || a->group_key != group.impl().get()) return {};
  return view_of(std::move(a), reinterpret_cast<uintptr_t>(p) - base, bytes);
}

BufferRef BufferCache::find(const void* p) {
  if (p == nullptr) return {};
  const uint64_t gen = range_generation.load(std::memory_order_acquire);
  for (Entry& e : entries_) {
    if (e.p != p || e.gen != gen) continue;
    if (!e.found) return {};
    auto a = e.alloc.lock();
    if (a && !a->freed.load(std::memory_order_acquire)) return {std::move(a), e.offset};
    break;  // freed since: look again
  }
  uintptr_t base = 0;
  auto a = lookup(p, 1, &base);
  Entry& e = entries_[next_++ % entries_.size()];
  e.p = p;
  e.gen = gen;  // read before the lookup: a change during it makes the entry stale, not wrong
  e.found = a != nullptr;
  e.alloc = a;
  e.offset = a ? reinterpret_cast<uintptr_t>(p) - base : 0;
  return {std::move(a), e.offset};
}

SymmetricMemory view_of_allocation(std::shared_ptr<detail::Allocation> a, size_t offset,
                                   size_t length) {
  return view_of(std::move(a), offset, length);
}

std::shared_ptr<Backend> backend_of(const SymmetricMemory& buf) {
  return buf.impl() ? buf.impl()->alloc->backend : nullptr;
}

void check_usable(const SymmetricMemory& buf, std::string_view op, std::string_view arg) {
  live(buf.impl(), op, arg);
}

std::string describe(const SymmetricMemory& buf) {
  if (!buf.valid()) return "an empty SymmetricMemory handle";
  const auto& impl = *buf.impl();
  std::string s = impl.alloc->label;
  if (impl.offset != 0 || impl.length != impl.alloc->bytes) {
    s += " view [" + std::to_string(impl.offset) + ", " +
         std::to_string(impl.offset + impl.length) + ")";
  }
  return s;
}

StoreExchange& group_exchange(const Group& group, const std::string& purpose) {
  if (!group.valid()) throw_invalid_argument("group_exchange", -1, "group", "is not a valid Group");
  auto state = group_state(group);
  std::lock_guard<std::mutex> lock(state->exchange_mu);
  auto& x = state->exchanges[purpose];
  if (!x) {
    x = std::make_unique<StoreExchange>(group.store(), group.name() + "/" + purpose, group.rank(),
                                        group.world_size(), group.timeout());
    x->set_abort(group.impl()->abort);  // NOTE [group abort]
  }
  return *x;
}

SymmetricMemory group_workspace(const Group& group, Device device, size_t bytes) {
  const char* op = "group_workspace";
  if (!group.valid()) throw_invalid_argument(op, -1, "group", "is not a valid Group");
  SYMMEM_CHECK_ARG(op, group.rank(), bytes > 0, "bytes", "= 0");
  auto state = group_state(group);
  std::lock_guard<std::mutex> lock(state->workspace_mu);
  auto& ws = state->workspaces[{static_cast<int>(device.type), device.index}];
  if (ws.valid() && !ws.impl()->alloc->freed.load() && ws.size() >= bytes) return ws;
  size_t old = ws.valid() ? ws.size() : 0;
  size_t want = std::max(bytes, 2 * old);
  want = (want + kWorkspaceGranule - 1) / kWorkspaceGranule * kWorkspaceGranule;
  SYMMEM_LOG(INFO, ALLOC) << "rank " << group.rank() << ": group " << group.name()
                          << " workspace on " << to_string(device) << " grows from " << old
                          << " to " << want << " bytes";
  ws = SymmetricMemory();  // the old one goes when its last user drops it
  group.impl()->workspace_generation.fetch_add(1, std::memory_order_release);
  ws = allocate_impl(group, want, device, AllocOptions{}, true);
  return ws;
}

SymmetricMemory group_scratch(const Group& group, Device device, size_t bytes,
                              const std::string& purpose, bool may_grow) {
  const char* op = "group_scratch";
  if (!group.valid()) throw_invalid_argument(op, -1, "group", "is not a valid Group");
  SYMMEM_CHECK_ARG(op, group.rank(), bytes > 0, "bytes", "= 0");
  auto state = group_state(group);
  std::lock_guard<std::mutex> lock(state->workspace_mu);
  auto& s = state->scratches[{purpose, static_cast<int>(device.type), device.index}];
  if (s.valid() && !s.impl()->alloc->freed.load() && s.size() >= bytes) return s;
  if (!may_grow) return SymmetricMemory();
  const size_t old = s.valid() ? s.size() : 0;
  size_t want = std::max(bytes, old + old / 4);
  want = (want + kWorkspaceGranule - 1) / kWorkspaceGranule * kWorkspaceGranule;
  SYMMEM_LOG(INFO, ALLOC) << "rank " << group.rank() << ": group " << group.name() << " " << purpose
                          << " scratch on " << to_string(device) << " grows from " << old << " to "
                          << want << " bytes";
  s = SymmetricMemory();
  s = allocate_impl(group, want, device, AllocOptions{}, true);
  return s;
}

}  // namespace symmem
