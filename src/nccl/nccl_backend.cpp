#include "nccl/nccl_backend.hpp"
#include "nccl/nccl_library.hpp"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "core/exchange.hpp"
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
  int prev = -1;
  if (cudaGetDevice(&prev) == cudaSuccess && device >= 0) (void)cudaSetDevice(device);
  (void)ncclCommDestroy(comm);
  if (prev >= 0) (void)cudaSetDevice(prev);
}

namespace {

constexpr const char* kUseCommOp = "use_nccl_comm";

void use_nccl_comm_entry(const Group& group, void* comm);

// The nccl backend instance created by symmem_plugin_create (the registry owns it).
NcclBackend* g_backend = nullptr;

struct GpuIdentity {
  char host[64];
  char pci[32];
};

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
  // The peer-pointer kernels it runs record like the cuda backend's (its own copy of them).
  if (name == kRaiseAsyncErrorExtension) return reinterpret_cast<void*>(&cuda_raise_async_errors);
  return nullptr;
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
  SYMMEM_LOG(INFO, INIT) << "nccl: group '" << group.name() << "' uses a communicator handed in"
                         << " (not owned): " << count << " ranks, cuda:" << device
                         << ", LSA team of " << c->lsa.n_ranks;
}

std::shared_ptr<Comm> NcclBackend::comm_for(const Group& group, int device, const char* op) {
  std::shared_ptr<Comm> c;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = user_comms_.find(group.name());
    if (it != user_comms_.end()) {
      c = it->second;
    } else {
      auto own = own_comms_.find(group.name());
      if (own != own_comms_.end()) c = own->second.lock();
    }
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

  ncclUniqueId id{};
  if (rank == 0) {
    SYMMEM_NCCL_CHECK_CODE(ErrorCode::BackendUnavailable, op, rank, nullptr, ncclGetUniqueId(&id));
  }
  id = ex.broadcast(id, 0);

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 1;
  ncclComm_t comm = nullptr;
  SYMMEM_NCCL_CHECK_CODE(ErrorCode::BackendUnavailable, op, rank, nullptr,
                         ncclCommInitRankConfig(&comm, world, id, rank, &config));
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

}  // namespace

}  // namespace symmem::nccl

extern "C" __attribute__((visibility("default"))) int symmem_plugin_abi_version() {
  return symmem::kPluginAbiVersion;
}

extern "C" __attribute__((visibility("default"))) symmem::Backend* symmem_plugin_create() {
  return new symmem::nccl::NcclBackend();
}
