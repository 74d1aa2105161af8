#include "nccl/nccl_backend.hpp"
#include "nccl/nccl_library.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <sstream>
#include <thread>

#include "core/abort.hpp"
#include "core/exchange.hpp"
#include "core/group_impl.hpp"
#include "core/log.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/cuda_ops.hpp"
#include "cuda/gpu_rules.hpp"
#include "nccl/nccl_memory.hpp"
#include "nccl/nccl_util.hpp"

namespace symmem::nccl {

void throw_nccl(ErrorCode code, std::string_view op, int rank, const char* call, const char* where,
                ncclResult_t r, ncclComm_t comm) {
  std::ostringstream os;
  os << call << " failed at " << where << ": " << ncclGetErrorString(r) << " (ncclResult "
     << static_cast<int>(r) << ")";
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && last[0] != '\0') os << ": " << last;
  throw_error(code, op, rank, os.str());
}

Comm::~Comm() {
  if (comm == nullptr || !owned) return;
  if (state == State::aborted) return;  // ncclCommAbort freed it (NOTE [nccl abort])
  int prev = -1;
  if (cudaGetDevice(&prev) == cudaSuccess && device >= 0) (void)cudaSetDevice(device);
  (void)ncclCommDestroy(comm);
  if (prev >= 0) (void)cudaSetDevice(prev);
}

namespace {

constexpr const char* kUseCommOp = "use_nccl_comm";

void use_nccl_comm_entry(const Group& group, void* comm);
void refuse_op_entry(const OpArgs& args, ErrorCode code) noexcept;

// The nccl backend instance created by symmem_plugin_create (the registry owns it).
NcclBackend* g_backend = nullptr;

struct GpuIdentity {
  char host[64];
  char pci[32];
  int32_t can_shrink;  // 1: this rank can build the communicator by ncclCommShrink
};

// NOTE [nccl abort]: revoked communicators kept for a shrink of their group, by group name.
// Immortal: never destroyed at exit, when NCCL may be gone.
struct Parked {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<Comm>> by_group;
};
Parked& parked() {
  static auto* p = new Parked;
  return *p;
}

std::string state_name(Comm::State s) {
  switch (s) {
    case Comm::State::live:
      return "live";
    case Comm::State::stopping:
      return "being stopped";
    case Comm::State::revoked:
      return "revoked";
    case Comm::State::aborted:
      return "aborted";
  }
  return "?";
}

// NOTE [nccl abort]: the stopping thread's work. Never throws.
void stop_comm(const std::shared_ptr<Comm>& c) noexcept {
  Comm::State result = Comm::State::live;
  std::string how;
  try {
    int prev = -1;
    const bool have_prev = cudaGetDevice(&prev) == cudaSuccess;
    if (c->device >= 0) (void)cudaSetDevice(c->device);
    const CommRevokeFn revoke = comm_revoke_fn();
    if (revoke != nullptr) {
      const ncclResult_t r = revoke(c->comm, 0 /* NCCL_REVOKE_DEFAULT */);
      if (r == ncclSuccess || r == ncclInProgress) {
        result = Comm::State::revoked;
        how = "revoked (ncclCommRevoke); kept for a shrink of the group";
      } else {
        how = std::string("ncclCommRevoke failed (") + ncclGetErrorString(r) + ")";
      }
    }
    if (result == Comm::State::live && c->owned) {
      const ncclResult_t r = ncclCommAbort(c->comm);
      result = Comm::State::aborted;  // freed or not, never touched again
      how += std::string(how.empty() ? "" : "; ") + "aborted (ncclCommAbort" +
             (revoke == nullptr ? ": this NCCL has no ncclCommRevoke" : "") +
             (r == ncclSuccess ? "" : std::string(", which failed: ") + ncclGetErrorString(r)) +
             ")";
    } else if (result == Comm::State::live) {
      how += std::string(how.empty() ? "" : "; ") +
             "left running: it was handed in with use_nccl_comm() and this NCCL cannot revoke it "
             "(ncclCommAbort would free the caller's communicator); abort it yourself";
    }
    if (have_prev) (void)cudaSetDevice(prev);
    if (result == Comm::State::revoked) {
      Parked& P = parked();
      std::lock_guard<std::mutex> lock(P.mu);
      P.by_group[c->group_name] = c;
    }
    SYMMEM_LOG(INFO, INIT) << "nccl: group '" << c->group_name << "' aborted: its communicator "
                           << how;
  } catch (...) {
  }
  {
    std::lock_guard<std::mutex> lock(c->state_mu);
    c->state = result;
  }
  c->state_cv.notify_all();
}

// NOTE [nccl abort]: hooks `c` on the abort state of `group` and its ancestors.
void watch_abort(const Group& group, const std::shared_ptr<Comm>& c) {
  if (!group.valid()) return;
  std::weak_ptr<Comm> wc = c;
  for (detail::AbortState* s = group.impl()->abort.get(); s != nullptr; s = s->parent.get()) {
    detail::add_abort_hook(*s, [wc] {
      std::shared_ptr<Comm> comm = wc.lock();
      if (!comm) return;
      {
        std::lock_guard<std::mutex> lock(comm->state_mu);
        if (comm->stop_requested) return;
        comm->stop_requested = true;
        comm->state = Comm::State::stopping;
      }
      try {
        std::thread([comm] { stop_comm(comm); }).detach();
      } catch (...) {
        {
          std::lock_guard<std::mutex> lock(comm->state_mu);
          comm->state = Comm::State::live;
        }
        comm->state_cv.notify_all();
      }
    });
  }
}

}  // namespace

namespace {
// The ops this plugin has a path for (a case in its run); any other op is Unsupported here.
constexpr OpSet kOps =
    OpSet::of({OpKind::all_reduce, OpKind::reduce_scatter, OpKind::all_gather, OpKind::all_to_all,
               OpKind::all_to_all_v, OpKind::broadcast, OpKind::put, OpKind::get, OpKind::barrier});
}  // namespace

// These ops on GPU memory: the ones that move data for every dtype (as bytes through NCCL where
// the peer-pointer kernels cannot run), the reductions for the cuda kernels' dtypes, which NCCL
// has too (NOTE [GPU dtypes] in cuda/gpu_rules.hpp).
NcclBackend::NcclBackend() : Backend(cuda::gpu_rules(kOps)) {
  g_backend = this;
}

NcclBackend::~NcclBackend() {
  if (g_backend == this) g_backend = nullptr;
}

bool NcclBackend::can_serve(const Group& group, Device device, std::string* why) const {
  (void)group;
  if (!cuda::cuda_device_visible("nccl", device, why)) return false;
  const Library& lib = library();  // NOTE [which NCCL]
  if (lib.handle == nullptr) {
    if (why != nullptr) *why = "nccl: " + lib.why;
    return false;
  }
  return true;
}

void* NcclBackend::extension(const std::string& name) {
  if (name == kUseCommOp) return reinterpret_cast<void*>(&use_nccl_comm_entry);
  // The peer-pointer kernels it runs record like the cuda backend's (its own copy of them), and
  // take a refused op's place like them (NOTE [refused ops]) where they run.
  if (name == kRaiseAsyncErrorExtension) return reinterpret_cast<void*>(&cuda_raise_async_errors);
  if (name == kRefuseOpExtension) return reinterpret_cast<void*>(&refuse_op_entry);
  return nullptr;
}

std::shared_ptr<Comm> NcclBackend::known_comm_locked(const Group& group) const {
  auto it = user_comms_.find(group.name());
  if (it != user_comms_.end()) return it->second;
  auto own = own_comms_.find(group.name());
  return own != own_comms_.end() ? own->second.lock() : nullptr;
}

std::shared_ptr<Comm> NcclBackend::existing_comm(const Group& group, int device) {
  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<Comm> c = known_comm_locked(group);
  if (c && (c->device != device || !c->symmetric_confirmed)) return nullptr;
  return c;
}

void NcclBackend::use_comm(const Group& group, ncclComm_t comm) {
  const int rank = group.valid() ? group.rank() : -1;
  SYMMEM_CHECK_ARG(kUseCommOp, rank, group.valid(), "group", "is not a valid group");
  SYMMEM_CHECK_ARG(kUseCommOp, rank, comm != nullptr, "nccl_comm", "is null");
  int count = 0, user_rank = -1, device = -1;
  SYMMEM_NCCL_CHECK(kUseCommOp, rank, comm, ncclCommCount(comm, &count));
  SYMMEM_NCCL_CHECK(kUseCommOp, rank, comm, ncclCommUserRank(comm, &user_rank));
  SYMMEM_NCCL_CHECK(kUseCommOp, rank, comm, ncclCommCuDevice(comm, &device));
  SYMMEM_CHECK_ARG(
      kUseCommOp, rank, count == group.world_size(), "nccl_comm",
      "has " << count << " ranks but group '" << group.name() << "' has " << group.world_size());
  SYMMEM_CHECK_ARG(kUseCommOp, rank, user_rank == group.rank(), "nccl_comm",
                   "has this process at rank " << user_rank << " but it is rank " << group.rank()
                                               << " of group '" << group.name() << "'");
  std::lock_guard<std::mutex> lock(mu_);
  SYMMEM_CHECK_ARG(kUseCommOp, rank,
                   user_comms_.count(group.name()) == 0 && own_comms_[group.name()].expired(),
                   "group",
                   "'" << group.name()
                       << "' already has an nccl communicator (made by symmem or handed in "
                          "before); call use_nccl_comm before the first nccl allocation");
  auto c = std::make_shared<Comm>();
  c->comm = comm;
  c->owned = false;
  c->device = device;
  c->rank = user_rank;
  c->world = count;
  c->group_name = group.name();
  c->lsa = lsa_team(comm);
  c->all_lsa = true;
  for (int p = 0; p < count; ++p) c->all_lsa = c->all_lsa && c->lsa.index_of(c->rank, p) >= 0;
  c->all_lsa = c->all_lsa || c->single_rank();
  user_comms_[group.name()] = c;
  watch_abort(group, c);  // NOTE [nccl abort]
  SYMMEM_LOG(INFO, INIT) << "nccl: group '" << group.name() << "' uses a communicator handed in"
                         << " (not owned): " << count << " ranks, cuda:" << device
                         << ", LSA team of " << c->lsa.n_ranks;
}

std::shared_ptr<Comm> NcclBackend::comm_for(const Group& group, int device, const char* op) {
  std::shared_ptr<Comm> c;
  {
    std::lock_guard<std::mutex> lock(mu_);
    c = known_comm_locked(group);
    if (c) {
      SYMMEM_CHECK_ARG(op, group.rank(), c->device == device, "device",
                       "is cuda:" << device << " but group '" << group.name()
                                  << "' has its nccl communicator on cuda:" << c->device);
      if (!c->symmetric_confirmed && !(c->single_rank() && c->confirm_tried)) {
        confirm_symmetric(*c, op);
      }
      return c;
    }
  }
  c = create_comm(group, device, op);  // collective over the group
  std::lock_guard<std::mutex> lock(mu_);
  own_comms_[group.name()] = c;
  return c;
}

std::shared_ptr<Comm> NcclBackend::create_comm(const Group& group, int device, const char* op) {
  const int rank = group.rank();
  const int world = group.world_size();
  SYMMEM_CUDART_CHECK(op, rank, cudaSetDevice(device));
  SYMMEM_CUDART_CHECK(op, rank, cudaFree(nullptr));  // create the context first

  // NCCL refuses two ranks on one GPU ("Duplicate GPU detected"); find them first so the error
  // names them instead of failing inside ncclCommInitRank.
  GpuIdentity me{};
  std::snprintf(me.host, sizeof(me.host), "%s", group.host_id().c_str());
  SYMMEM_CUDART_CHECK(op, rank, cudaDeviceGetPCIBusId(me.pci, sizeof(me.pci), device));
  std::string no_shrink;  // why this rank cannot shrink (NOTE [nccl abort])
  std::shared_ptr<Comm> parent = shrinkable_parent(group, device, &no_shrink);
  me.can_shrink = parent ? 1 : 0;
  StoreExchange ex(group.store(), group.name() + "/nccl/comm", rank, world, group.timeout());
  auto ids = ex.all_gather(me);
  for (int p = 0; p < world; ++p) {
    for (int q = p + 1; q < world; ++q) {
      if (std::strncmp(ids[p].host, ids[q].host, sizeof(me.host)) == 0 &&
          std::strncmp(ids[p].pci, ids[q].pci, sizeof(me.pci)) == 0) {
        throw_error(ErrorCode::BackendUnavailable, op, rank,
                    "nccl backend: ranks " + std::to_string(p) + " and " + std::to_string(q) +
                        " of group '" + group.name() + "' use the same GPU (" +
                        std::string(ids[p].pci) + " on host '" + std::string(ids[p].host) +
                        "'); NCCL refuses two ranks on one GPU. Use the cuda backend "
                        "(SYMMEM_ALLOW_SHARED_GPU=1) or the nvshmem backend for shared GPUs");
      }
    }
  }

  const std::string& shrunk_from = group.impl()->shrunk_from;
  int cannot = -1;  // a rank that cannot shrink
  for (int p = 0; p < world && cannot < 0; ++p) {
    if (ids[p].can_shrink == 0) cannot = p;
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 1;
  ncclComm_t comm = nullptr;
  if (!shrunk_from.empty() && cannot < 0) {
    comm = shrink_comm(group, *parent, &config, op);  // every rank of the group: collective
    std::lock_guard<std::mutex> lock(parked().mu);
    auto it = parked().by_group.find(shrunk_from);
    if (it != parked().by_group.end() && it->second == parent) parked().by_group.erase(it);
  } else {
    if (!shrunk_from.empty()) {
      SYMMEM_LOG(INFO, INIT) << "nccl: group '" << group.name() << "' (shrunk from '" << shrunk_from
                             << "') gets a new communicator, not ncclCommShrink: "
                             << (parent ? "rank " + std::to_string(cannot) + " cannot shrink"
                                        : "this rank cannot: " + no_shrink);
    }
    ncclUniqueId id{};
    if (rank == 0) {
      SYMMEM_NCCL_CHECK_CODE(ErrorCode::BackendUnavailable, op, rank, nullptr,
                             ncclGetUniqueId(&id));
    }
    id = ex.broadcast(id, 0);
    SYMMEM_NCCL_CHECK_CODE(ErrorCode::BackendUnavailable, op, rank, nullptr,
                           ncclCommInitRankConfig(&comm, world, id, rank, &config));
  }
  return wrap_comm(group, device, comm, op);
}

std::shared_ptr<Comm> NcclBackend::wrap_comm(const Group& group, int device, ncclComm_t comm,
                                             const char* op) {
  const int rank = group.rank();
  const int world = group.world_size();
  auto c = std::make_shared<Comm>();
  c->comm = comm;
  c->owned = true;
  c->device = device;
  c->rank = rank;
  c->world = world;
  c->group_name = group.name();
  c->lsa = lsa_team(comm);
  c->all_lsa = true;
  for (int p = 0; p < world; ++p) c->all_lsa = c->all_lsa && c->lsa.index_of(rank, p) >= 0;
  c->all_lsa = c->all_lsa || c->single_rank();
  watch_abort(group, c);      // NOTE [nccl abort]
  confirm_symmetric(*c, op);  // see NOTE [one-rank communicators]
  int version = 0;
  (void)ncclGetVersion(&version);
  SYMMEM_LOG(INFO, INIT) << "nccl: communicator for group '" << group.name() << "': " << world
                         << " ranks on cuda:" << device << ", NCCL " << version << ", LSA team of "
                         << c->lsa.n_ranks << " (this rank " << c->lsa.rank << ")"
                         << (c->all_lsa ? ", every peer in it" : "")
                         << (c->no_window() ? " (one rank without NCCL symmetric support: "
                                              "buffers are used without a window)"
                                            : "");
  return c;
}

std::shared_ptr<Comm> NcclBackend::shrinkable_parent(const Group& group, int device,
                                                     std::string* why) {
  const Group::Impl& g = *group.impl();
  if (g.shrunk_from.empty()) {
    *why = "not made by shrink()";
    return nullptr;
  }
  if (comm_shrink_fn() == nullptr) {
    *why = "the loaded NCCL (" + library().path + ") has no ncclCommShrink";
    return nullptr;
  }
  std::shared_ptr<Comm> c;
  {
    std::lock_guard<std::mutex> lock(parked().mu);
    auto it = parked().by_group.find(g.shrunk_from);
    if (it != parked().by_group.end()) c = it->second;
  }
  if (!c) {
    std::lock_guard<std::mutex> lock(mu_);
    auto u = user_comms_.find(g.shrunk_from);
    if (u != user_comms_.end()) c = u->second;
    auto o = own_comms_.find(g.shrunk_from);
    if (!c && o != own_comms_.end()) c = o->second.lock();
  }
  if (!c) {
    *why = "this rank holds no communicator of group '" + g.shrunk_from +
           "' (none was made, or it was freed with the group's last nccl allocation before it "
           "could be revoked)";
    return nullptr;
  }
  if (c->device != device || c->world != static_cast<int>(g.rank_map.size())) {
    *why = "the communicator of group '" + g.shrunk_from + "' is on another device or size";
    return nullptr;
  }
  const Comm::State st = c->current();
  if (st == Comm::State::aborted) {
    *why = "the communicator of group '" + g.shrunk_from + "' was aborted (ncclCommAbort)";
    return nullptr;
  }
  return c;
}

ncclComm_t NcclBackend::shrink_comm(const Group& group, Comm& parent, ncclConfig_t* config,
                                    const char* op) {
  const Group::Impl& g = *group.impl();
  const int rank = group.rank();
  const auto deadline = std::chrono::steady_clock::now() + group.timeout();
  // A revoke in flight first, then NCCL's own quiescence (NOTE [nccl abort]).
  Comm::State st;
  {
    std::unique_lock<std::mutex> lock(parent.state_mu);
    parent.state_cv.wait_until(lock, deadline,
                               [&] { return parent.state != Comm::State::stopping; });
    st = parent.state;
  }
  SYMMEM_CHECK(op, rank, st == Comm::State::live || st == Comm::State::revoked,
               ErrorCode::BackendUnavailable,
               "nccl: the communicator of group '" << g.shrunk_from << "' is " << state_name(st)
                                                   << "; it cannot be shrunk for group '"
                                                   << group.name() << "'");
  ncclResult_t async = ncclSuccess;
  if (st == Comm::State::revoked) {
    while (ncclCommGetAsyncError(parent.comm, &async) == ncclSuccess && async == ncclInProgress &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    SYMMEM_CHECK(op, rank, async != ncclInProgress, ErrorCode::Timeout,
                 "nccl: the revoked communicator of group '"
                     << g.shrunk_from << "' did not become quiescent within the group's timeout ("
                     << group.timeout().count() << " ms); it cannot be shrunk");
  }
  std::vector<int> excluded;
  for (int r = 0; r < static_cast<int>(g.rank_map.size()); ++r) {
    if (g.rank_map[r] < 0) excluded.push_back(r);
  }
  // A live parent, or one whose revoke left an error: NCCL ends its ops first.
  const int flags =
      st == Comm::State::revoked && async == ncclSuccess ? NCCL_SHRINK_DEFAULT : NCCL_SHRINK_ABORT;
  ncclComm_t comm = nullptr;
  const CommShrinkFn shrink = comm_shrink_fn();
  SYMMEM_NCCL_CHECK_CODE(ErrorCode::BackendUnavailable, op, rank, parent.comm,
                         shrink(parent.comm, excluded.data(), static_cast<int>(excluded.size()),
                                &comm, config, flags));
  std::ostringstream ranks;
  for (size_t i = 0; i < excluded.size(); ++i) ranks << (i ? "," : "") << excluded[i];
  SYMMEM_LOG(INFO, INIT) << "nccl: group '" << group.name()
                         << "' gets its communicator from ncclCommShrink of group '"
                         << g.shrunk_from << "''s (" << state_name(st) << "), without ranks "
                         << ranks.str()
                         << (flags == NCCL_SHRINK_ABORT ? " (NCCL_SHRINK_ABORT)" : "");
  return comm;
}

void NcclBackend::confirm_symmetric(Comm& c, const char* op) {
  // Window registration can succeed without symmetric (LSA) support; ncclDevCommCreate cannot.
  DevComm* dc = nullptr;
  c.confirm_tried = true;
  ncclResult_t r = dev_comm_create(c.comm, &dc);
  if (r != ncclSuccess && c.single_rank()) {
    const char* last = ncclGetLastError(c.comm);
    SYMMEM_LOG(INFO, INIT) << "nccl: one-rank communicator of group '" << c.group_name
                           << "' has no NCCL symmetric support (ncclDevCommCreate: "
                           << ncclGetErrorString(r) << (last && last[0] ? ": " : "")
                           << (last ? last : "")
                           << "); its buffers are used directly, without a window";
    return;
  }
  if (r != ncclSuccess) {
    const char* last = ncclGetLastError(c.comm);
    throw_error(ErrorCode::BackendUnavailable, op, c.rank,
                std::string("nccl backend: this NCCL communicator has no symmetric memory "
                            "support: ncclDevCommCreate(lsaBarrierCount=1) failed: ") +
                    ncclGetErrorString(r) + (last && last[0] ? std::string(": ") + last : "") +
                    " (NCCL gives symmetric memory only with CUMEM enabled -- NCCL_CUMEM_ENABLE "
                    "unset or 1 on a GPU with VMM and GPUDirect RDMA over VMM -- and all-direct "
                    "P2P between the ranks of the host; NCCL_DEBUG=INFO shows which is missing)");
  }
  dev_comm_destroy(c.comm, dc);
  c.symmetric_confirmed = true;
}

std::shared_ptr<BackendMemory> NcclBackend::allocate(const Group& group,
                                                     const RendezvousInfo& info) {
  const char* op = "allocate";
  std::string why;
  if (!can_serve(group, info.device, &why)) {
    throw_error(ErrorCode::Unsupported, op, group.rank(), "nccl backend: " + why);
  }
  auto comm = comm_for(group, info.device.index, op);
  return std::make_shared<NcclMemory>(group, comm, info);
}

namespace {

void use_nccl_comm_entry(const Group& group, void* comm) {
  if (g_backend == nullptr) {
    throw_error(ErrorCode::Internal, kUseCommOp, group.valid() ? group.rank() : -1,
                "the nccl backend instance is gone");
  }
  g_backend->use_comm(group, static_cast<ncclComm_t>(comm));
}

// NOTE [refused ops]: only where run() would take the peer-pointer kernels, with the
// communicator that exists (making one is collective).
void refuse_op_entry(const OpArgs& args, ErrorCode code) noexcept {
  try {
    if (g_backend == nullptr || args.group == nullptr || !args.group->valid()) return;
    auto comm = g_backend->existing_comm(*args.group, args.device.index);
    if (comm && comm->all_lsa) cuda_refuse_op(args, code);
  } catch (...) {
  }
}

}  // namespace

}  // namespace symmem::nccl

extern "C" __attribute__((visibility("default"))) int symmem_plugin_abi_version() {
  return symmem::kPluginAbiVersion;
}

extern "C" __attribute__((visibility("default"))) symmem::Backend* symmem_plugin_create() {
  return new symmem::nccl::NcclBackend();
}
