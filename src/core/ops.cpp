// Backend-agnostic entry points of ops.hpp: argument checks, device/backend resolution, the
// collective agreement, then Backend::run().
//
// NOTE [collective agreement]
// A collective only moves data once every rank knows that every rank's arguments are good and
// agree. For CPU groups on one host each rank checks its own arguments locally, writes a small
// descriptor (op, counts, dtype, op, root, which symmetric buffers it passed, all_to_all_v counts,
// and its error message if its arguments were bad) into its part of the group's CPU workspace,
// and the ranks meet at one barrier (core/pad_sync.hpp). Then every rank reads every descriptor
// and takes the same decision: run, or throw. A rank that made a mistake throws its own
// InvalidArgument; the others throw InvalidArgument naming that rank and its message. So a bad
// argument on one rank never leaves the others waiting, and nothing has been touched.
// Descriptors alternate between two slots by op sequence parity: the slot of op k is rewritten
// at op k+2, which no rank can reach before every rank has passed op k+1's barrier (after
// reading op k's descriptors).
// GPU groups skip the agreement (their ops are enqueued on streams, and a host meeting would
// cost every op a round trip); their ranks check their own arguments only. A rank that refuses
// its arguments throws at the call and tells its peers on the device instead (NOTE [refused
// ops] in src/cuda/kernels/refuse.cu): their kernels, already enqueued, see the refusal, move
// nothing, and their next synchronising call (or Group::check_async_error) raises
// InvalidArgument (the refusing rank's code) naming the refusing rank. Ranks that pass
// different but individually valid arguments are not compared on the GPU (the caller's error,
// as in NCCL), except for zero-copy buffers on the barrier kernels (NOTE [zero-copy agreement]
// in src/cuda/cuda_ops.cu).

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/check.hpp"
#include "core/group_impl.hpp"
#include "core/memory_impl.hpp"
#include "core/memory_registry.hpp"
#include "core/pad_sync.hpp"
#include "core/registry.hpp"
#include "core/timeout.hpp"
#include "core/trace.hpp"
#include "core/workspace.hpp"
#include "host/host_ops.hpp"
#include "host/reduce.hpp"
#include "symmem/backend.hpp"
#include "symmem/env.hpp"
#include "symmem/error.hpp"
#include "symmem/ops.hpp"

namespace symmem {
namespace {

// A local argument error, kept until the agreement so that peers learn about it.
struct LocalError {
  ErrorCode code = ErrorCode::InvalidArgument;
  std::string message;
  bool set() const { return !message.empty(); }
};

// Thrown inside validation; caught and turned into a LocalError.
struct ArgFailure {
  Error error;
};

[[noreturn]] void fail_arg(const char* op, int rank, std::string_view arg,
                           const std::string& what) {
  try {
    throw_invalid_argument(op, rank, arg, what);
  } catch (const Error& e) {
    throw ArgFailure{e};
  }
}
[[noreturn]] void fail(ErrorCode code, const char* op, int rank, const std::string& what) {
  try {
    throw_error(code, op, rank, what);
  } catch (const Error& e) {
    throw ArgFailure{e};
  }
}

bool known_dtype(DType t) {
  return find_dtype(t) != nullptr;
}
bool known_redop(ReduceOp o) {
  return static_cast<unsigned>(o) <= static_cast<unsigned>(ReduceOp::max);
}
bool known_algo(Algo a) {
  return static_cast<unsigned>(a) <= static_cast<unsigned>(Algo::two_shot);
}

// NOTE [timeouts] (symmem/store.hpp): an op needs its peers, so 0 ("do not wait") could only
// fail and is rejected; the rest is the one rule.
Millis op_timeout(const char* op, int rank, Millis t) {
  if (t.count() == 0)
    fail_arg(op, rank, "timeout", "is 0 ms; use > 0, or -1 for SYMMEM_TIMEOUT_MS");
  return detail::resolve_timeout(t);
}

// A buffer argument's range in symmetric memory of the op's group. The handle on it (a
// SymmetricMemory) is made only when a backend runs the op (NOTE [op fast path]).
struct SymRange {
  std::shared_ptr<detail::Allocation> alloc;  // null: not in symmetric memory of the group
  size_t offset = 0;                          // from the start of the allocation's local buffer
  size_t length = 0;
  bool valid() const { return alloc != nullptr; }
  Device device() const { return alloc->device; }
  uint64_t alloc_id() const { return alloc->alloc_id; }
  SymmetricMemory view() const {
    return alloc ? view_of_allocation(alloc, offset, length) : SymmetricMemory();
  }
};

// What the core knows about one buffer argument.
struct BufInfo {
  SymRange sym;  // the range when it lies in symmetric memory of the group
};

// The allocation (of any group) holding a buffer argument, looked up once per call and pointer
// (send and recv, and the preliminary device, ask for the same pointers), through the group's
// BufferCache (NOTE [op fast path]).
class Holders {
 public:
  const BufferRef& of(BufferCache& cache, const void* p) {
    for (int i = 0; i < n_; ++i)
      if (p_[i] == p) return ref_[i];
    BufferRef found = cache.find(p);
    if (n_ == kSlots) return last_ = std::move(found);
    p_[n_] = p;
    ref_[n_] = std::move(found);
    return ref_[n_++];
  }

 private:
  static constexpr int kSlots = 2;
  const void* p_[kSlots] = {};
  BufferRef ref_[kSlots];
  BufferRef last_;
  int n_ = 0;
};

bool overlaps(const void* a, size_t an, const void* b, size_t bn) {
  if (!a || !b || an == 0 || bn == 0) return false;
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + bn && y < x + an;
}

size_t checked_bytes(const char* op, int rank, const char* arg, size_t count, size_t es,
                     size_t factor = 1) {
  size_t bytes = 0;
  if (__builtin_mul_overflow(count, es, &bytes) || __builtin_mul_overflow(bytes, factor, &bytes) ||
      bytes > (size_t{1} << 48)) {
    fail_arg(op, rank, arg,
             "= " + std::to_string(count) + " is too large (the byte size overflows)");
  }
  return bytes;
}

// ---- per-group op sequence ------------------------------------------------------------------
uint64_t next_seq(const Group& group) {
  return group.impl()->op_seq.fetch_add(1, std::memory_order_relaxed);
}

// NOTE [op fast path]
// A small host collective is a few hundred nanoseconds of data movement, so what the core does
// around it on every call counts: a 4 KiB all_reduce of 2 ranks ran ~8600 instructions per call
// (callgrind), of which the reduction was ~850. The per-call work that is the same from one call
// to the next is therefore kept, and nothing is allocated on the way:
// - buffer arguments: the group's BufferCache (core/memory_registry.hpp) remembers which
//   allocation held the last pointers, until an allocation is made or freed anywhere;
// - the agreement's CPU workspace: kept per group (weakly) until group_workspace() replaces it;
//   its allocation knows its peers' pointers and signal pads (Allocation::peer_ptrs/peer_pads),
//   so PadSync and the descriptor reads need no calls;
// - descriptors are written in place (the message only when there is one) and read where the
//   peers wrote them (they are not rewritten before op seq + 2; NOTE [collective agreement]);
// - argument agreement compares numbers and formats only a mismatch.
// The caches belong to Group::Impl::op_cache and are touched only by the thread running the
// group's collective (NOTE [one thread per group]).

// ---- descriptor -------------------------------------------------------------------------------
struct Desc {
  uint64_t seq_plus_one;
  int32_t kind, dtype, redop, algo, root, ok, err_code, recv_counts_known, inline_data, unused;
  uint64_t count, recv_capacity;
  int64_t send_alloc, send_off, recv_alloc, recv_off;
  char message[400];
};
static_assert(sizeof(Desc) <= detail::kDescFixedBytes);

// What one op call looks like, for checking and running.
struct Call {
  explicit Call(OpKind k) : kind(k), info(op_info(k)), op(info.name) {}
  // The arguments every buffer op of the public API has.
  Call(OpKind k, const Group& g, const void* s, void* r, size_t n, DType dt) : Call(k) {
    group = &g;
    send = s;
    recv = r;
    count = n;
    dtype = dt;
  }
  OpKind kind;
  const OpInfo& info;  // the op's row (NOTE [op table])
  const char* op;
  const Group* group = nullptr;
  int rank = -1;
  int world = 0;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  DType dtype = DType::f32;
  ReduceOp redop = ReduceOp::sum;
  Algo algo = Algo::automatic;
  int root = -1;
  const int64_t* send_counts = nullptr;
  int64_t* recv_counts = nullptr;
  int64_t* recv_offsets = nullptr;
  size_t recv_capacity = 0;
  bool recv_counts_known = false;
  bool inline_data = false;     // NOTE [inline all-reduce] (core/pad_sync.hpp)
  bool inline_reduced = false;  // its result is in the workspace (NOTE [arrival barrier])
  SymRange send_sym, recv_sym;
  Device device;
  std::shared_ptr<Backend> backend;
  Millis timeout{0};
  Holders holders;
  size_t msg_bytes = 0;      // the larger buffer of a checked blocked op (the recorder's bytes)
  bool check_first = false;  // the op's own checks before the row's (a handle's, in its words)
};

// Checks a buffer argument: null, alignment, ownership (another group, out of range).
BufInfo check_buffer(Call& c, const char* arg, const void* p, size_t bytes, size_t align,
                     bool required) {
  const char* op = c.op;
  const int rank = c.rank;
  BufInfo info;
  if (p == nullptr) {
    if (bytes > 0 && required)
      fail_arg(op, rank, arg, "is null (" + std::to_string(bytes) + " bytes expected)");
    return info;
  }
  if (align > 1 && reinterpret_cast<uintptr_t>(p) % align != 0) {
    std::ostringstream os;
    os << "= " << p << " is not aligned to " << align << " bytes (the element size)";
    fail_arg(op, rank, arg, os.str());
  }
  const BufferRef& ref = c.holders.of(c.group->impl()->op_cache.buffers, p);
  if (!ref.alloc) return info;  // ordinary memory
  const detail::Allocation& a = *ref.alloc;
  if (a.group_key != c.group->impl().get()) {
    const SymmetricMemory any = view_of_allocation(ref.alloc, 0, a.bytes);
    fail_arg(op, rank, arg,
             "lies in " + describe(any) + ", which belongs to group '" + any.group().name() +
                 "', not to this op's group '" + c.group->name() + "'");
  }
  const size_t off = ref.offset;
  if (off >= a.bytes || std::max<size_t>(bytes, 1) > a.bytes - off) {
    const SymmetricMemory any = view_of_allocation(ref.alloc, 0, a.bytes);
    fail_arg(op, rank, arg,
             "range of " + std::to_string(bytes) + " bytes at offset " + std::to_string(off) +
                 " of " + describe(any) + " runs past its end (" +
                 std::to_string(a.bytes - std::min(off, a.bytes)) +
                 " bytes left): the count is too large for this buffer");
  }
  info.sym = SymRange{ref.alloc, off, bytes};
  return info;
}

// The loadable backends whose rules (NOTE [op table]) hold (kind, dtype, device type).
std::vector<std::string> supporting_backends(OpKind kind, DType dtype, DeviceType device) {
  std::vector<std::string> out, names;
  try {
    names = available_backends();
  } catch (const Error&) {
  }
  for (const auto& n : names) {
    try {
      auto b = get_backend(n);
      if (b && b->supports(kind, dtype, device)) out.push_back(n);
    } catch (const Error&) {
    }
  }
  return out;
}

std::string backends_supporting(OpKind kind, DType dtype, DeviceType device) {
  std::string out;
  for (const auto& n : supporting_backends(kind, dtype, device))
    out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "none available here" : out;
}

// "backend 'cuda' has no all_reduce for dtype f64 on cuda buffers; backends that have it: ..."
std::string unsupported(const std::string& backend, const OpInfo& info, DType dtype,
                        Device device) {
  std::string what = info.name;
  if (info.collective()) what += std::string(" for dtype ") + to_string(dtype);
  const char* where = device.is_cuda() ? "GPU" : "CPU";
  std::string out =
      "backend '" + backend + "' has no " + what + " on " + where +
      " buffers; backends that have it: " + backends_supporting(info.kind, dtype, device.type);
  if (info.collective()) {
    // Which ops take the dtype here at all (a byte dtype is moved, not reduced).
    std::string ops;
    for (int k = 0; k < kOpCount; ++k) {
      const OpInfo& other = op_info(static_cast<OpKind>(k));
      if (!other.collective() || other.kind == info.kind) continue;
      if (supporting_backends(other.kind, dtype, device.type).empty()) continue;
      ops += (ops.empty() ? "" : ", ") + std::string(other.name);
    }
    const DTypeInfo* row = find_dtype(dtype);
    out += std::string("; on ") + where + " buffers " + (row ? row->name : to_string(dtype)) +
           " is taken by " + (ops.empty() ? std::string("no op") : ops);
  }
  return out;
}

// Picks the op's device (see ops.hpp).
void resolve_device(Call& c, const std::optional<Device>& requested) {
  if (requested) {
    c.device = *requested;
  } else if (c.send_sym.valid()) {
    c.device = c.send_sym.device();
  } else if (c.recv_sym.valid()) {
    c.device = c.recv_sym.device();
  } else {
    // The device of the group's most recent allocation, else the CPU (ops.hpp).
    const int last = c.group->impl()->last_alloc_device.load();
    c.device = last >= 0 ? Device::cuda(last) : Device::cpu();
  }
}

// Picks the device and backend (see ops.hpp) and checks the backend can do the op.
void resolve_backend_for(Call& c, const std::optional<Device>& requested) {
  resolve_device(c, requested);
  if (c.device.type != DeviceType::cpu && c.device.type != DeviceType::cuda)
    fail_arg(c.op, c.rank, "device", "has an unknown type");
  // A symmetric buffer on the op's device names its backend object (no lookup by name).
  std::string name;
  if (c.send_sym.valid() && c.send_sym.device() == c.device) {
    c.backend = c.send_sym.alloc->backend;
  } else if (c.recv_sym.valid() && c.recv_sym.device() == c.device) {
    c.backend = c.recv_sym.alloc->backend;
  } else {
    name = detail::backend_for(*c.group, c.device);  // NOTE [CPU buffers of a GPU backend]
    c.backend = get_backend(name);
  }
  if (!c.backend->supports(c.kind, c.dtype, c.device.type)) {
    fail(ErrorCode::Unsupported, c.op, c.rank,
         unsupported(name.empty() ? c.backend->name() : name, c.info, c.dtype, c.device));
  }
}

// SYMMEM_ALGO as an Algo, parsed again only when the environment cache is reset (the setting
// itself is read once per thread, NOTE [op fast path]).
Algo forced_algo() {
  thread_local uint64_t stamp = 0;  // env::cache_generation() + 1 when `algo` is current
  thread_local Algo algo = Algo::automatic;
  const uint64_t want = env::cache_generation() + 1;
  if (stamp != want) {
    const std::string forced = env::algo();
    algo = forced == "auto" ? Algo::automatic : parse_algo(forced, "SYMMEM_ALGO");
    stamp = want;
  }
  return algo;
}

// group_workspace(group, cpu, bytes), remembered for the next op (NOTE [op fast path]): the
// group's last CPU workspace while group_workspace() has not replaced it, it is not freed and it
// is large enough.
SymmetricMemory cpu_workspace(const Group& group, size_t bytes) {
  Group::Impl& g = *group.impl();
  auto& cache = g.op_cache;
  const uint64_t gen = g.workspace_generation.load(std::memory_order_acquire);
  const auto& impl = cache.cpu_workspace.impl();
  if (cache.cpu_workspace_generation == gen && impl &&
      !impl->alloc->freed.load(std::memory_order_acquire) && impl->length >= bytes)
    return cache.cpu_workspace;
  cache.cpu_workspace = group_workspace(group, Device::cpu(), bytes);
  cache.cpu_workspace_generation = gen;  // read before: a replacement since makes it stale
  return cache.cpu_workspace;
}

OpArgs make_args(const Call& c, const OpOptions& o) {
  OpArgs a;
  a.kind = c.kind;
  a.group = c.group;
  a.device = c.device;
  a.send = c.send;
  a.recv = c.recv;
  a.count = c.count;
  a.dtype = c.dtype;
  a.redop = c.redop;
  a.algo = c.algo;
  a.root = c.root;
  a.send_counts = c.send_counts;
  a.recv_counts = c.recv_counts;
  a.recv_offsets = c.recv_offsets;
  a.recv_capacity = c.recv_capacity;
  a.recv_counts_known = c.recv_counts_known;
  a.stream = o.stream;
  a.timeout = c.timeout;
  a.send_sym = c.send_sym.view();
  a.recv_sym = c.recv_sym.view();
  // The op's group outlives the backend's run (the caller holds it); two words keep the
  // std::function free of a heap allocation.
  const Group* group = c.group;
  const Device device = c.device;
  a.workspace = [group, device](size_t bytes) {
    return device.type == DeviceType::cpu ? cpu_workspace(*group, bytes)
                                          : group_workspace(*group, device, bytes);
  };
  return a;
}

// Every field but the message, which only a rank with an error writes (and only then is it read).
void fill_desc(Desc& d, const Call& c, uint64_t seq, const LocalError& err) {
  d.seq_plus_one = seq + 1;
  d.kind = static_cast<int32_t>(c.kind);
  d.dtype = static_cast<int32_t>(c.dtype);
  d.redop = static_cast<int32_t>(c.redop);
  d.algo = static_cast<int32_t>(c.algo);
  d.root = c.root;
  d.ok = err.set() ? 0 : 1;
  d.err_code = static_cast<int32_t>(err.code);
  d.recv_counts_known = c.recv_counts_known ? 1 : 0;
  d.inline_data = c.inline_data ? 1 : 0;
  d.unused = 0;
  d.count = c.count;
  d.recv_capacity = c.recv_capacity;
  d.send_alloc = c.send_sym.valid() ? static_cast<int64_t>(c.send_sym.alloc_id()) : -1;
  d.send_off = c.send_sym.valid() ? static_cast<int64_t>(c.send_sym.offset) : -1;
  d.recv_alloc = c.recv_sym.valid() ? static_cast<int64_t>(c.recv_sym.alloc_id()) : -1;
  d.recv_off = c.recv_sym.valid() ? static_cast<int64_t>(c.recv_sym.offset) : -1;
  if (err.set()) std::snprintf(d.message, sizeof(d.message), "%s", err.message.c_str());
}

[[noreturn]] void throw_agreed(const char* op, int rank, const std::string& what) {
  throw_error(ErrorCode::InvalidArgument, op, rank, what);
}

// What every rank wrote for one op, where it wrote it: its descriptor and its all_to_all_v counts.
struct Published {
  const void* const* desc;  // per rank: its descriptor slot in the workspace
  int n;
  bool reduced = false;  // the inline all_reduce's result is in the reduced area (arrive())
  const Desc& operator[](int p) const { return *static_cast<const Desc*>(desc[p]); }
  // counts(p)[q]: p sends to q; counts(p)[n + q]: p expects from q
  const int64_t* counts(int p) const {
    return reinterpret_cast<const int64_t*>(static_cast<const char*>(desc[p]) +
                                            detail::kDescFixedBytes);
  }
};

// The arguments of the row's `agree` column must be the same on every rank. Compares numbers;
// only a mismatch is put into words.
void agree_arguments(const Call& c, const Published& all) {
  auto mismatch = [&](uint32_t flag, const char* arg, auto get, auto say) {
    if (!c.info.must_agree(flag)) return;
    for (int p = 1; p < all.n; ++p) {
      if (get(all[p]) == get(all[0])) continue;
      std::ostringstream os;
      os << "argument '" << arg << "' differs across ranks: rank 0 passed " << say(get(all[0]))
         << ", rank " << p << " passed " << say(get(all[p])) << "; no rank ran the op";
      throw_agreed(c.op, c.rank, os.str());
    }
  };
  auto number = [](auto v) { return std::to_string(v); };
  using namespace op_table;
  mismatch(
      redop, "op", [](const Desc& x) { return x.redop; },
      [](int32_t v) { return std::string(to_string(static_cast<ReduceOp>(v))); });
  mismatch(
      count, c.info.count_arg, [](const Desc& x) { return x.count; }, number);
  mismatch(
      dtype, "dtype", [](const Desc& x) { return x.dtype; },
      [](int32_t v) { return std::string(to_string(static_cast<DType>(v))); });
  mismatch(
      known, "recv_counts_known", [](const Desc& x) { return x.recv_counts_known; }, number);
  mismatch(
      algo, "algo", [](const Desc& x) { return x.algo; },
      [](int32_t v) { return std::string(to_string(static_cast<Algo>(v))); });
  mismatch(
      root, "root", [](const Desc& x) { return x.root; }, number);
}

// Rank p's part of the group's CPU workspace, from its allocation's table (NOTE [op fast path]).
char* workspace_part(const SymmetricMemory& ws, int p) {
  const auto& ptrs = ws.impl()->alloc->peer_ptrs;
  if (static_cast<size_t>(p) < ptrs.size()) return ptrs[static_cast<size_t>(p)] + ws.impl()->offset;
  return static_cast<char*>(ws.ptr(p));
}

// NOTE [arrival barrier]: run by the last rank to arrive. When every rank is in this inline
// all_reduce with the same arguments, reduces their copies in rank order into `out` (the reduced
// area) and returns true; else (an error the agreement reports next) returns false.
template <class InputOf>
bool reduce_once(const Call& c, uint64_t seq, const Published& pub, char* out, InputOf input_of) {
  if (!c.inline_data) return false;
  for (int p = 0; p < pub.n; ++p) {
    const Desc& d = pub[p];
    if (d.seq_plus_one != seq + 1 || d.kind != static_cast<int32_t>(c.kind) || !d.ok ||
        !d.inline_data || d.count != c.count || d.dtype != static_cast<int32_t>(c.dtype) ||
        d.redop != static_cast<int32_t>(c.redop))
      return false;
  }
  auto& ins = c.group->impl()->op_cache.inputs;
  ins.resize(static_cast<size_t>(c.world));
  for (int p = 0; p < c.world; ++p) ins[static_cast<size_t>(p)] = input_of(p);
  host::reduce(out, ins.data(), c.world, c.count, c.dtype, c.redop, c.world);
  return true;
}

// Writes this rank's descriptor, meets the others at one barrier, and points at theirs.
Published publish(const Call& c, uint64_t seq, const LocalError& err, detail::PadSync& sync,
                  const SymmetricMemory& ws) {
  const int n = c.world;
  auto base = [&](int p) { return workspace_part(ws, p); };
  char* mine = base(c.rank) + detail::desc_offset(n, seq);
  fill_desc(*reinterpret_cast<Desc*>(mine), c, seq, err);
  if (c.inline_data)
    std::memcpy(base(c.rank) + detail::inline_offset(n, seq), c.send,
                c.count * dtype_size(c.dtype));
  auto* my_counts = reinterpret_cast<int64_t*>(mine + detail::kDescFixedBytes);
  if (c.kind == OpKind::all_to_all_v && !err.set()) {
    std::memcpy(my_counts, c.send_counts, sizeof(int64_t) * n);
    if (c.recv_counts_known) std::memcpy(my_counts + n, c.recv_counts, sizeof(int64_t) * n);
  }
  auto& descs = c.group->impl()->op_cache.descs;
  descs.resize(static_cast<size_t>(n));
  for (int p = 0; p < n; ++p) descs[static_cast<size_t>(p)] = base(p) + detail::desc_offset(n, seq);
  Published pub{descs.data(), n};
  if (!sync.oversubscribed()) {
    sync.barrier();
    return pub;
  }
  // NOTE [arrival barrier] (core/pad_sync.hpp): the last to arrive reduces an inline all_reduce
  // once, into the reduced area of rank 0's part, and the others copy it out.
  char* arrivals = base(0) + detail::arrivals_offset(n, seq);
  auto* reduced_flag = reinterpret_cast<uint64_t*>(arrivals + 8);
  sync.arrive(
      reinterpret_cast<uint64_t*>(arrivals),
      [&] {
        bool once = false;
        try {  // the others wait for this rank's signal: nothing may stop it
          once = reduce_once(c, seq, pub, base(0) + detail::reduced_offset(n, seq),
                             [&](int p) { return base(p) + detail::inline_offset(n, seq); });
        } catch (...) {
          once = false;  // each rank then reduces for itself, and meets the same error
        }
        std::atomic_ref<uint64_t>(*reduced_flag).store(once ? 1 : 0, std::memory_order_relaxed);
      },
      [&] {
        std::vector<int> missing;
        for (int p = 0; p < n; ++p)
          if (std::atomic_ref<uint64_t>(const_cast<uint64_t&>(pub[p].seq_plus_one))
                  .load(std::memory_order_relaxed) != seq + 1)
            missing.push_back(p);
        return missing;
      });
  pub.reduced = std::atomic_ref<uint64_t>(*reduced_flag).load(std::memory_order_relaxed) == 1;
  return pub;
}

// Out of step: some rank is in another op.
void check_in_step(const Call& c, uint64_t seq, const Published& all) {
  for (int p = 0; p < all.n; ++p) {
    if (all[p].seq_plus_one == seq + 1 && all[p].kind == static_cast<int32_t>(c.kind)) continue;
    const char* pk = to_string(static_cast<OpKind>(all[p].kind));
    throw_error(ErrorCode::InvalidArgument, c.op, c.rank,
                "ranks are out of step: this rank is in op #" + std::to_string(seq) + " (" + c.op +
                    ") of the group, rank " + std::to_string(p) + " in op #" +
                    std::to_string(all[p].seq_plus_one - 1) + " (" + pk +
                    "); every rank must call the same collectives in the same order");
  }
}

// A rank whose own arguments were bad: it throws its error, the others name it.
void check_rejections(const Call& c, const LocalError& err, const Published& all) {
  if (err.set()) throw Error(err.code, err.message);  // the message is complete already
  for (int p = 0; p < all.n; ++p) {
    if (all[p].ok) continue;
    throw_error(static_cast<ErrorCode>(all[p].err_code), c.op, c.rank,
                "rank " + std::to_string(p) + " rejected its arguments, so no rank ran the op: " +
                    std::string(all[p].message, strnlen(all[p].message, sizeof(all[p].message))));
  }
}

// all_to_all_v: MPI-style counts must match the senders', and no rank may receive more than its
// capacity.
void check_a2av_counts(const Call& c, const Published& pub) {
  const int n = c.world, r = c.rank;
  auto counts = [&](int p) { return pub.counts(p); };
  if (c.recv_counts_known) {
    for (int q = 0; q < n; ++q) {
      for (int p = 0; p < n; ++p) {
        int64_t sent = counts(p)[q], expected = counts(q)[n + p];
        if (sent == expected) continue;
        std::string s = std::to_string(sent), e = std::to_string(expected);
        if (r == q) {
          throw_invalid_argument(c.op, r, "recv_counts",
                                 "[" + std::to_string(p) + "] = " + e + " but rank " +
                                     std::to_string(p) + " sends " + s +
                                     " elements to this rank (its send_counts[" +
                                     std::to_string(q) + "]); no rank moved data");
        }
        if (r == p) {
          throw_invalid_argument(c.op, r, "send_counts",
                                 "[" + std::to_string(q) + "] = " + s + " but rank " +
                                     std::to_string(q) + " expects " + e +
                                     " elements from this rank (its recv_counts[" +
                                     std::to_string(p) + "]); no rank moved data");
        }
        throw_agreed(c.op, r,
                     "ranks " + std::to_string(p) + " and " + std::to_string(q) +
                         " disagree on all_to_all_v counts (rank " + std::to_string(p) + " sends " +
                         s + ", rank " + std::to_string(q) + " expects " + e +
                         "); no rank moved data");
      }
    }
  }
  for (int q = 0; q < n; ++q) {
    uint64_t incoming = 0;
    for (int p = 0; p < n; ++p) incoming += static_cast<uint64_t>(counts(p)[q]);
    const uint64_t cap = pub[q].recv_capacity;
    if (incoming <= cap) continue;
    if (r == q) {
      throw_invalid_argument(c.op, r, "recv_capacity",
                             "= " + std::to_string(cap) + " elements, but the ranks send " +
                                 std::to_string(incoming) +
                                 " elements to this rank; no rank moved data");
    }
    throw_agreed(c.op, r,
                 "rank " + std::to_string(q) + " would receive " + std::to_string(incoming) +
                     " elements, more than its recv_capacity " + std::to_string(cap) +
                     "; no rank moved data");
  }
}

// Zero copy only when every rank passed the same symmetric buffer at the same offset.
void keep_common_symmetric_buffers(Call& c, const Published& all) {
  for (int p = 0; p < all.n; ++p) {
    const Desc& d = all[p];
    if (d.send_alloc < 0 || d.send_alloc != all[0].send_alloc || d.send_off != all[0].send_off)
      c.send_sym = SymRange();
    if (d.recv_alloc < 0 || d.recv_alloc != all[0].recv_alloc || d.recv_off != all[0].recv_off)
      c.recv_sym = SymRange();
  }
}

// The collective agreement (NOTE above). Returns normally when the op may run on every rank;
// may clear c.send_sym / c.recv_sym when the ranks did not all pass the same symmetric buffer.
// Returns the group's CPU workspace that carried the descriptors (and inline data).
SymmetricMemory agree(Call& c, uint64_t seq, const LocalError& err) {
  SymmetricMemory ws = cpu_workspace(*c.group, detail::data_offset(c.world));
  detail::PadSync sync(ws, c.op, c.timeout);
  const Published pub = publish(c, seq, err, sync, ws);
  check_in_step(c, seq, pub);
  check_rejections(c, err, pub);
  agree_arguments(c, pub);  // the row's `agree` column (NOTE [op table])
  for (int p = 0; p < pub.n; ++p)
    if ((pub[p].inline_data != 0) != c.inline_data)
      throw_agreed(c.op, c.rank,
                   "rank " + std::to_string(p) +
                       " chose another all_reduce algorithm for the same arguments (do "
                       "SYMMEM_ALGO or the tuning file differ between the ranks?)");
  if (c.kind == OpKind::all_to_all_v) check_a2av_counts(c, pub);
  keep_common_symmetric_buffers(c, pub);
  c.inline_reduced = pub.reduced;
  return ws;
}

// NOTE [refused ops] (src/cuda/kernels/refuse.cu): a rank of a GPU group that refuses an op
// (its own arguments were bad: `code`) tells its peers on the device, through the backend that
// would have run the op, whose kernels already wait for it. c.device is resolved; c.backend may
// be unknown yet (the checks failed before it was chosen). Never throws: the caller throws the
// rank's own error next.
void refuse_on_device(Call& c, const OpOptions& o, ErrorCode code) noexcept {
  try {
    if (c.world <= 1 || !c.device.is_cuda()) return;
    if (!c.backend) c.backend = get_backend(detail::backend_for(*c.group, c.device));
    auto fn = reinterpret_cast<RefuseOpFn>(c.backend->extension(kRefuseOpExtension));
    if (fn == nullptr) return;
    fn(make_args(c, o), code);
  } catch (...) {
  }
}

// Runs a collective: local checks (in `check`), agreement, backend run.
// The checks every collective shares, from its row: the dtype, the reduction argument, the
// count's byte size and, for ops whose buffers are whole blocks, both buffers and the in-place
// form (overlap is only allowed there). Ops with root-only or count-array buffers check those
// themselves.
void check_collective(Call& c) {
  using op_table::Blocks;
  if (!known_dtype(c.dtype))
    fail_arg(c.op, c.rank, "dtype",
             "has unknown value " + std::to_string(static_cast<int>(c.dtype)));
  if (c.info.reduces() && !known_redop(c.redop))
    fail_arg(c.op, c.rank, "op", "has unknown value " + std::to_string(static_cast<int>(c.redop)));
  if (c.info.must_agree(op_table::algo) && !known_algo(c.algo))
    fail_arg(c.op, c.rank, "algo", "has unknown value " + std::to_string(static_cast<int>(c.algo)));
  auto blocked = [](Blocks b) { return b == Blocks::one || b == Blocks::world; };
  if (!blocked(c.info.send) || !blocked(c.info.recv)) return;
  const size_t es = dtype_size(c.dtype);
  auto bytes_of = [&](Blocks b) {
    return checked_bytes(c.op, c.rank, c.info.count_arg, c.count, es,
                         b == Blocks::world ? static_cast<size_t>(c.world) : 1);
  };
  const size_t send_bytes = bytes_of(c.info.send), recv_bytes = bytes_of(c.info.recv);
  c.msg_bytes = std::max(send_bytes, recv_bytes);
  const size_t block = c.count * es;  // fits: checked above
  bool in_place = false;
  switch (c.info.in_place) {
    case op_table::InPlace::same:
      in_place = c.send == c.recv;
      break;
    case op_table::InPlace::recv_block:  // recv == send + rank * block
      in_place = c.send && c.recv == static_cast<const char*>(c.send) + c.rank * block;
      break;
    case op_table::InPlace::send_block:  // send == recv + rank * block
      in_place = c.recv && c.send == static_cast<const char*>(c.recv) + c.rank * block;
      break;
    case op_table::InPlace::no:
      break;
  }
  c.send_sym = check_buffer(c, "send", c.send, send_bytes, es, true).sym;
  if (c.recv == c.send && recv_bytes == send_bytes) {
    c.recv_sym = c.send_sym;  // the same range: the same view (and the same checks)
  } else {
    c.recv_sym = check_buffer(c, "recv", c.recv, recv_bytes, es, true).sym;
  }
  if (!in_place && overlaps(c.send, send_bytes, c.recv, recv_bytes)) {
    fail_arg(c.op, c.rank, "recv",
             "overlaps 'send' without being the in-place form of this op (see ops.hpp)");
  }
}

// What the flight recorder keeps of a call (NOTE [flight recorder] in core/trace.hpp).
detail::TraceOp trace_op(const Call& c) {
  detail::TraceOp t;
  t.op = static_cast<int>(c.kind);
  if (c.info.collective()) {
    t.dtype = static_cast<int>(c.dtype);
    t.algo = static_cast<int>(c.algo);
  }
  if (c.info.reduces()) t.redop = static_cast<int>(c.redop);
  t.root = c.root;
  t.count = c.count;
  return t;
}

// The message size of a checked call, as nccl-tests counts it: the larger buffer of a rank.
uint64_t trace_bytes(const Call& c) {
  if (!c.info.collective()) return 0;
  if (c.msg_bytes != 0 || c.count == 0) return c.msg_bytes;  // set by check_collective
  return c.count * dtype_size(c.dtype);                      // all_to_all_v: what it sends
}

// A GPU op's device-times slot (NOTE [device timestamps] in core/trace.hpp), after start().
void attach_device_times(OpArgs& a, const detail::TraceScope& trace) noexcept {
  if (DeviceTimes* d = trace.device_times()) {
    a.device_times = d;
    a.device_times_ring = trace.device_times_ring();
    a.device_times_ring_bytes = trace.device_times_ring_bytes();
  }
}

// Records a failed call, with what was learnt of its backend and device.
void trace_failed(detail::TraceScope& trace, const Call& c, const Error& e) noexcept {
  if (!trace.active()) return;
  try {
    trace.set_backend(c.backend ? c.backend->name() : std::string(), c.device);
  } catch (...) {
  }
  trace.failed(e);
}

// NOTE [inline all-reduce] (core/pad_sync.hpp): whether this all_reduce travels with its
// descriptor. Every rank decides from the same arguments; agree() checks that they did.
bool inline_all_reduce(const Call& c) {
  if (c.kind != OpKind::all_reduce || !c.backend || std::strcmp(c.backend->name(), "host") != 0)
    return false;
  const size_t bytes = c.count * dtype_size(c.dtype);
  if (bytes == 0 || bytes > detail::kInlineBytes || c.algo == Algo::two_shot) return false;
  return c.algo == Algo::one_shot || bytes <= host_one_shot_max_bytes(c.world);
}

void run_inline_all_reduce(const Call& c, const OpOptions& o, const SymmetricMemory& ws,
                           uint64_t seq, detail::TraceScope& trace) {
  if (trace.active())
    trace.start(c.backend->name(), c.device, o.stream, c.count, trace_bytes(c), true);
  if (c.inline_reduced) {  // NOTE [arrival barrier]: the last arriver reduced it
    std::memcpy(c.recv, workspace_part(ws, 0) + detail::reduced_offset(c.world, seq),
                c.count * dtype_size(c.dtype));
  } else {
    auto& ins = c.group->impl()->op_cache.inputs;
    ins.resize(static_cast<size_t>(c.world));
    for (int p = 0; p < c.world; ++p)
      ins[static_cast<size_t>(p)] = workspace_part(ws, p) + detail::inline_offset(c.world, seq);
    host::reduce(c.recv, ins.data(), c.world, c.count, c.dtype, c.redop, c.world);
  }
  if (c.algo != Algo::one_shot) trace.set_algo(static_cast<int>(Algo::one_shot));
  if (o.chosen_algo) *o.chosen_algo = Algo::one_shot;
  trace.completed();
}

template <class Check>
void run_collective_traced(Call& c, const OpOptions& o, Check& check, detail::TraceScope& trace) {
  c.rank = c.group->rank();
  c.world = c.group->world_size();
  c.timeout = detail::resolve_timeout(kDefaultTimeout);  // until checked below
  // Preliminary device (the checks need to know whether counts live in device memory).
  if (o.device) {
    c.device = *o.device;
  } else {
    const BufferRef& any =
        c.holders.of(c.group->impl()->op_cache.buffers, c.send ? c.send : c.recv);
    c.device = any.alloc ? any.alloc->device : Device::cpu();
  }
  LocalError err;
  try {
    c.timeout = op_timeout(c.op, c.rank, o.timeout);
    if (c.check_first) check(c);
    check_collective(c);
    if (!c.check_first) check(c);
    resolve_backend_for(c, o.device);
  } catch (const ArgFailure& f) {
    err.code = f.error.code();
    err.message = f.error.what();
    // The device the op would have run on, as on the ranks whose checks passed: it decides
    // between the agreement and a refusal on the device.
    if (!c.backend) {
      try {
        resolve_device(c, o.device);
      } catch (const ArgFailure&) {
      }
    }
  }
  const bool agreement = c.world > 1 && !c.device.is_cuda();
  if (c.info.must_agree(op_table::algo) && c.algo == Algo::automatic) c.algo = forced_algo();
  c.inline_data = agreement && !err.set() && inline_all_reduce(c);
  const uint64_t seq = agreement ? next_seq(*c.group) : 0;
  SymmetricMemory ws;
  if (agreement) {
    ws = agree(c, seq, err);
  } else if (err.set()) {
    refuse_on_device(c, o, err.code);  // NOTE [refused ops]
    throw Error(err.code, err.message);
  }
  if (c.inline_data) {  // NOTE [inline all-reduce]: the inputs came with the descriptors
    run_inline_all_reduce(c, o, ws, seq, trace);
    return;
  }
  OpArgs args = make_args(c, o);
  const bool gpu = c.device.is_cuda();
  if (trace.active()) {
    trace.start(c.backend->name(), c.device, o.stream, c.count, trace_bytes(c), !gpu);
    attach_device_times(args, trace);
  }
  Algo chosen = args.algo;
  args.chosen_algo = &chosen;
  c.backend->run(args);
  if (chosen != args.algo) trace.set_algo(static_cast<int>(chosen));  // what `auto` chose
  if (o.chosen_algo) *o.chosen_algo = chosen;
  if (gpu)
    trace.launched();  // NOTE [device timestamps] (core/trace.hpp)
  else
    trace.completed();
}

// NOTE [one thread per group]
// The collectives of one group in one process run one at a time: every rank must see them in
// one order, and they share the group's workspace and its signal channels, so two threads
// issuing them at once would interleave wrongly or wait on each other. A collective (or
// barrier) entered while another of the same group is running on another thread fails at once
// with InvalidArgument naming both; nothing was touched. Threads that need ops at the same
// time use a group each (split() the group, once per thread). GPU ops hold the group only while
// their host part runs (they are stream-ordered after that; docs/design.md, "Concurrency").
class GroupBusy {
 public:
  GroupBusy(Group::Impl& g, const char* op, int rank) : g_(g) {
    const char* running = nullptr;
    if (!g.busy_op.compare_exchange_strong(running, op, std::memory_order_acq_rel)) {
      throw_error(ErrorCode::InvalidArgument, op, rank,
                  "group " + g.name + " is running " + running +
                      " on another thread of this process; the collectives of one group must "
                      "not overlap: issue them from one thread, or split() a group per thread "
                      "(docs/design.md, 'Concurrency')");
    }
  }
  ~GroupBusy() { g_.busy_op.store(nullptr, std::memory_order_release); }
  GroupBusy(const GroupBusy&) = delete;
  GroupBusy& operator=(const GroupBusy&) = delete;

 private:
  Group::Impl& g_;
};

template <class Check>
void run_collective(Call& c, const OpOptions& o, Check&& check) {
  if (!c.group || !c.group->valid())
    throw_invalid_argument(c.op, -1, "group", "is not a valid group (default-constructed?)");
  detail::check_not_aborted(c.group->impl()->abort.get(), c.op, c.group->rank());
  GroupBusy busy(*c.group->impl(), c.op, c.group->rank());
  detail::TraceScope trace(c.group->impl()->recorder.get());
  if (trace.active()) trace.begin(trace_op(c));
  try {
    run_collective_traced(c, o, check, trace);
  } catch (const Error& e) {
    trace_failed(trace, c, e);
    throw;
  } catch (const std::exception& e) {
    trace.failed(e.what());
    throw;
  }
}

void run_collective(Call& c, const OpOptions& o) {
  run_collective(c, o, [](Call&) {});
}

}  // namespace

// ---- all_reduce --------------------------------------------------------------------------------
void all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                const Group& group, const OpOptions& options) {
  Call c(OpKind::all_reduce, group, send, recv, count, dtype);
  c.redop = op;
  c.algo = options.algo;
  run_collective(c, options);
}

void all_reduce(const SymmetricMemory& buf, size_t count, DType dtype, ReduceOp op,
                const OpOptions& options) {
  check_usable(buf, "all_reduce", "buf");
  const Group group = buf.group();
  OpOptions o = options;
  if (!o.device) o.device = buf.device();
  void* p = buf.ptr(buf.rank());
  Call c(OpKind::all_reduce, group, p, p, count, dtype);
  c.redop = op;
  c.algo = o.algo;
  c.check_first = true;
  // The handle's checks, in its terms, as the op's own: a rank whose handle call is bad takes
  // part in the agreement (host) or refuses on the device (GPU) like any other bad argument.
  run_collective(c, o, [&buf](Call& c) {
    if (!known_dtype(c.dtype))
      fail_arg(c.op, c.rank, "dtype",
               "has unknown value " + std::to_string(static_cast<int>(c.dtype)));
    const size_t es = dtype_size(c.dtype);
    size_t bytes = 0;
    if (__builtin_mul_overflow(c.count, es, &bytes) || bytes > buf.size()) {
      fail_arg(c.op, c.rank, "count",
               "= " + std::to_string(c.count) + " elements of " + to_string(c.dtype) +
                   " do not fit " + describe(buf) + " (view of " + std::to_string(buf.size()) +
                   " bytes holds " + std::to_string(buf.size() / es) + ")");
    }
    if (c.send == nullptr) {
      fail(ErrorCode::Unsupported, c.op, c.rank,
           "this rank's part of " + describe(buf) + " is not addressable from the host");
    }
  });
}

// ---- reduce_scatter, all_gather, all_to_all: checked from their rows --------------------------
void reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp op,
                    const Group& group, const OpOptions& options) {
  Call c(OpKind::reduce_scatter, group, send, recv, recv_count, dtype);
  c.redop = op;
  run_collective(c, options);
}

void all_gather(const void* send, void* recv, size_t send_count, DType dtype, const Group& group,
                const OpOptions& options) {
  Call c(OpKind::all_gather, group, send, recv, send_count, dtype);
  run_collective(c, options);
}

void all_to_all(const void* send, void* recv, size_t count, DType dtype, const Group& group,
                const OpOptions& options) {
  Call c(OpKind::all_to_all, group, send, recv, count, dtype);
  run_collective(c, options);
}

// ---- all_to_all_v ------------------------------------------------------------------------------
void all_to_all_v(const void* send, const int64_t* send_counts, void* recv, int64_t* recv_counts,
                  int64_t* recv_offsets, size_t recv_capacity, DType dtype, const Group& group,
                  const AllToAllVOptions& options) {
  Call c(OpKind::all_to_all_v, group, send, recv, 0, dtype);
  c.send_counts = send_counts;
  c.recv_counts = recv_counts;
  c.recv_offsets = recv_offsets;
  c.recv_capacity = recv_capacity;
  c.recv_counts_known = options.recv_counts_known;
  run_collective(c, options, [](Call& c) {
    if (!c.send_counts)
      fail_arg(c.op, c.rank, "send_counts",
               "is null (" + std::to_string(c.world) + " counts expected)");
    if (!c.recv_counts)
      fail_arg(c.op, c.rank, "recv_counts",
               "is null (" + std::to_string(c.world) + " counts expected)");
    if (c.device.is_cuda()) {
      // Counts live in device memory: the backend checks them on the device.
      size_t es = dtype_size(c.dtype);
      size_t cap = checked_bytes(c.op, c.rank, "recv_capacity", c.recv_capacity, es);
      c.recv_sym = check_buffer(c, "recv", c.recv, cap, es, true).sym;
      c.send_sym = check_buffer(c, "send", c.send, 0, es, false).sym;
      return;
    }
    if (overlaps(c.send_counts, 8 * c.world, c.recv_counts, 8 * c.world) ||
        overlaps(c.recv_offsets, 8 * c.world, c.recv_counts, 8 * c.world))
      fail_arg(c.op, c.rank, "recv_counts", "overlaps send_counts or recv_offsets");
    size_t es = dtype_size(c.dtype);
    size_t total = 0;
    for (int p = 0; p < c.world; ++p) {
      int64_t v = c.send_counts[p];
      if (v < 0)
        fail_arg(c.op, c.rank, "send_counts",
                 "[" + std::to_string(p) + "] = " + std::to_string(v) + " is negative");
      total += static_cast<size_t>(v);
      if (c.recv_counts_known && c.recv_counts[p] < 0)
        fail_arg(
            c.op, c.rank, "recv_counts",
            "[" + std::to_string(p) + "] = " + std::to_string(c.recv_counts[p]) + " is negative");
    }
    c.count = total;
    size_t send_bytes = checked_bytes(c.op, c.rank, "send_counts", total, es);
    size_t cap = c.recv_capacity;
    if (c.recv_counts_known) {
      size_t want = 0;
      for (int p = 0; p < c.world; ++p) want += static_cast<size_t>(c.recv_counts[p]);
      if (want > cap)
        fail_arg(c.op, c.rank, "recv_capacity",
                 "= " + std::to_string(cap) + " is smaller than the sum of recv_counts (" +
                     std::to_string(want) + ")");
    }
    size_t recv_bytes = checked_bytes(c.op, c.rank, "recv_capacity", cap, es);
    c.send_sym = check_buffer(c, "send", c.send, send_bytes, es, true).sym;
    c.recv_sym = check_buffer(c, "recv", c.recv, recv_bytes, es, true).sym;
    if (overlaps(c.send, send_bytes, c.recv, recv_bytes))
      fail_arg(c.op, c.rank, "recv",
               "overlaps 'send' without being the in-place form of this op (see ops.hpp)");
  });
}

// ---- broadcast ---------------------------------------------------------------------------------
void broadcast(const void* send, void* recv, size_t count, DType dtype, int root,
               const Group& group, const OpOptions& options) {
  Call c(OpKind::broadcast, group, send, recv, count, dtype);
  c.root = root;
  run_collective(c, options, [](Call& c) {
    if (c.root < 0 || c.root >= c.world)
      fail_arg(
          c.op, c.rank, "root",
          "= " + std::to_string(c.root) + " is out of range [0, " + std::to_string(c.world) + ")");
    size_t bytes = checked_bytes(c.op, c.rank, "count", c.count, dtype_size(c.dtype));
    size_t es = dtype_size(c.dtype);
    c.recv_sym = check_buffer(c, "recv", c.recv, bytes, es, true).sym;
    if (c.rank == c.root) {
      c.send_sym = check_buffer(c, "send", c.send, bytes, es, true).sym;
      if (overlaps(c.send, bytes, c.recv, bytes) && c.send != c.recv)
        fail_arg(c.op, c.rank, "recv", "overlaps 'send' partially");
    } else {
      c.send = nullptr;  // read on the root only
    }
  });
}

// ---- put / get ---------------------------------------------------------------------------------
namespace {
void one_sided_traced(OpKind kind, const SymmetricMemory& target, size_t offset, const void* src,
                      void* dst, size_t bytes, int peer, const P2POptions& o,
                      detail::TraceScope& trace);

void one_sided(OpKind kind, const SymmetricMemory& target, size_t offset, const void* src,
               void* dst, size_t bytes, int peer, const P2POptions& o) {
  const OpInfo& info = op_info(kind);
  const char* op = info.name;
  const char* target_arg = kind == OpKind::put ? "dst" : "src";
  check_usable(target, op, target_arg);
  detail::TraceScope trace(target.group().impl()->recorder.get());
  if (trace.active()) {
    detail::TraceOp t;
    t.op = static_cast<int>(kind);
    t.root = peer;
    t.count = bytes;
    t.one_sided = true;  // no seq of its own (NOTE [flight recorder])
    trace.begin(t);
  }
  try {
    one_sided_traced(kind, target, offset, src, dst, bytes, peer, o, trace);
  } catch (const Error& e) {
    if (trace.active()) trace.set_backend(target.backend(), target.device());
    trace.failed(e);
    throw;
  } catch (const std::exception& e) {
    trace.failed(e.what());
    throw;
  }
}

void one_sided_traced(OpKind kind, const SymmetricMemory& target, size_t offset, const void* src,
                      void* dst, size_t bytes, int peer, const P2POptions& o,
                      detail::TraceScope& trace) {
  const OpInfo& info = op_info(kind);
  const char* op = info.name;
  int rank = target.rank(), world = target.world_size();
  if (peer < 0 || peer >= world)
    throw_invalid_argument(
        op, rank, "peer",
        "= " + std::to_string(peer) + " is out of range [0, " + std::to_string(world) + ")");
  size_t end = 0;
  if (__builtin_add_overflow(offset, bytes, &end) || end > target.size()) {
    throw_invalid_argument(
        op, rank, kind == OpKind::put ? "dst_offset" : "src_offset",
        "= " + std::to_string(offset) + " plus bytes = " + std::to_string(bytes) + " exceeds " +
            describe(target) + " (view of " + std::to_string(target.size()) + " bytes)");
  }
  const void* local = kind == OpKind::put ? src : dst;
  const char* local_arg = kind == OpKind::put ? "src" : "dst";
  if (local == nullptr && bytes > 0) throw_invalid_argument(op, rank, local_arg, "is null");
  if (o.signal && (o.channel < 0 || o.channel >= target.num_channels())) {
    throw_invalid_argument(op, rank, "channel",
                           "= " + std::to_string(o.channel) + " is out of range [0, " +
                               std::to_string(target.num_channels()) + ") of " + describe(target));
  }
  Millis timeout{0};
  try {
    timeout = op_timeout(op, rank, o.timeout);
  } catch (const ArgFailure& f) {
    throw f.error;
  }
  // A peer without direct (load/store) access is the backend's call: nvshmem reaches it with
  // device-initiated transfers, the peer-pointer backends answer Unsupported naming the peer.
  auto backend = get_backend(target.backend());
  if (!backend->supports(kind, DType::f32, target.device().type))
    throw_error(ErrorCode::Unsupported, op, rank,
                unsupported(target.backend(), info, DType::f32, target.device()));
  if (o.device && !(*o.device == target.device())) {
    throw_invalid_argument(op, rank, "device",
                           "= " + to_string(*o.device) + " differs from the buffer's device " +
                               to_string(target.device()));
  }
  OpArgs a;
  a.kind = kind;
  Group group = target.group();
  a.group = &group;
  a.device = target.device();
  a.send = src;
  a.recv = dst;
  a.count = bytes;
  a.root = peer;
  a.target = target;
  a.target_offset = offset;
  a.signal = o.signal;
  a.channel = o.channel;
  a.stream = o.stream;
  a.timeout = timeout;
  Device device = target.device();
  a.workspace = [group, device](size_t b) { return group_workspace(group, device, b); };
  const bool gpu = device.is_cuda();
  if (trace.active()) {
    trace.start(target.backend(), device, o.stream, bytes, bytes, !gpu);
    attach_device_times(a, trace);
  }
  backend->run(a);
  if (gpu)
    trace.launched();  // NOTE [device timestamps] (core/trace.hpp)
  else
    trace.completed();
}
}  // namespace

void put(const SymmetricMemory& dst, size_t dst_offset, const void* src, size_t bytes, int peer,
         const P2POptions& options) {
  one_sided(OpKind::put, dst, dst_offset, src, nullptr, bytes, peer, options);
}

void get(const SymmetricMemory& src, size_t src_offset, void* dst, size_t bytes, int peer,
         const P2POptions& options) {
  one_sided(OpKind::get, src, src_offset, nullptr, dst, bytes, peer, options);
}

// ---- barrier -----------------------------------------------------------------------------------
void barrier(const Group& group, const OpOptions& options) {
  Call c(OpKind::barrier);
  c.group = &group;
  if (!group.valid()) throw_invalid_argument("barrier", -1, "group", "is not a valid group");
  c.rank = group.rank();
  detail::check_not_aborted(group.impl()->abort.get(), c.op, c.rank);
  GroupBusy busy(*group.impl(), c.op, c.rank);
  c.world = group.world_size();
  detail::TraceScope trace(group.impl()->recorder.get());
  if (trace.active()) trace.begin(trace_op(c));
  try {
    try {
      c.timeout = detail::resolve_timeout(kDefaultTimeout);  // until checked
      c.timeout = op_timeout(c.op, c.rank, options.timeout);
      resolve_backend_for(c, options.device);
    } catch (const ArgFailure& f) {
      if (!c.backend) {
        try {
          resolve_device(c, options.device);
        } catch (const ArgFailure&) {
        }
      }
      refuse_on_device(c, options, f.error.code());  // NOTE [refused ops]
      throw f.error;
    }
    OpArgs args = make_args(c, options);
    const bool gpu = c.device.is_cuda();
    if (trace.active()) {
      trace.start(c.backend->name(), c.device, options.stream, 0, 0, !gpu);
      attach_device_times(args, trace);
    }
    c.backend->run(args);
    if (gpu)
      trace.launched();  // NOTE [device timestamps] (core/trace.hpp)
    else
      trace.completed();
  } catch (const Error& e) {
    trace_failed(trace, c, e);
    throw;
  } catch (const std::exception& e) {
    trace.failed(e.what());
    throw;
  }
}

// ---- refusing an op whose arguments a wrapper found bad
// ------------------------------------------ NOTE [refused ops]: what the core does for its own
// checks, for the checks of a layer above it (the Python binding's, say) that fail on one rank
// before the op is called. CPU groups take part in the op's agreement with the error, so their
// peers throw InvalidArgument naming this rank; GPU groups refuse on the device (refuse_on_device).
void refuse(OpKind kind, const Group& group, const OpOptions& options, ErrorCode code,
            const std::string& message, std::optional<size_t> count, DType dtype) noexcept {
  try {
    const OpInfo& row = op_info(kind);
    if (!group.valid() || group.world_size() <= 1) return;
    if (!row.collective() && kind != OpKind::barrier) return;  // put/get: no peer waits
    detail::check_not_aborted(group.impl()->abort.get(), row.name, group.rank());
    GroupBusy busy(*group.impl(), row.name, group.rank());
    Call c(kind);
    c.group = &group;
    c.rank = group.rank();
    c.world = group.world_size();
    c.timeout =
        detail::resolve_timeout(options.timeout.count() == 0 ? kDefaultTimeout : options.timeout);
    resolve_device(c, options.device);
    if (c.device.is_cuda()) {
      c.count = count.value_or(kRefusedCountUnknown);
      c.dtype = dtype;
      refuse_on_device(c, options, code);
      return;
    }
    if (kind == OpKind::barrier) return;  // a host barrier has no agreement to take part in
    LocalError err;
    err.code = code;
    err.message = message.empty() ? std::string(row.name) + ": rank " + std::to_string(c.rank) +
                                        " refused its arguments"
                                  : message;
    (void)agree(c, next_seq(group), err);  // throws this rank's error once the peers know
  } catch (...) {
  }
}

}  // namespace symmem
