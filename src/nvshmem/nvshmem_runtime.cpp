#include "nvshmem/nvshmem_runtime.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "core/check.hpp"
#include "core/exchange.hpp"
#include "core/log.hpp"
#include "cuda/cuda_check.hpp"

namespace symmem::nvshm {
namespace {

struct GpuIdentity {
  char host[64];
  char pci[32];
};

// Sets `name` to `value` unless the user set it; logs what was set (or left alone).
void default_env(const char* name, const char* value, const char* why) {
  const char* cur = std::getenv(name);
  if (cur != nullptr) {
    SYMMEM_LOG(INFO, INIT) << "nvshmem: " << name << "=" << cur << " (set by the user)";
    return;
  }
  ::setenv(name, value, 0);
  SYMMEM_LOG(INFO, INIT) << "nvshmem: " << name << "=" << value << " (set by symmem: " << why
                         << ")";
}

}  // namespace

Runtime& Runtime::instance() {
  static Runtime* rt = new Runtime();  // never destroyed: NVSHMEM is not finalised (see NOTE)
  return *rt;
}

bool Runtime::initialized() const {
  std::lock_guard<std::mutex> lock(mu_);
  return initialized_;
}

void Runtime::set_default_env(const Group& group, bool shared_gpu) {
  // NVLink multicast (NVLS) stays off unless the user enables it.
  default_env("NVSHMEM_DISABLE_NVLS", "1", "NVLink multicast stays off unless enabled");
  if (group.single_host()) {
    default_env("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME", "lo",
                "every rank is on this host: bootstrap over loopback");
    default_env("NVSHMEM_REMOTE_TRANSPORT", "none",
                "every rank is on this host: no network transport");
  }
  if (shared_gpu && std::getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") == nullptr) {
    SYMMEM_LOG(WARN, INIT)
        << "nvshmem: several ranks share a GPU but CUDA_MPS_ACTIVE_THREAD_PERCENTAGE is not set: "
           "NVSHMEM then runs in limited MPG mode where teams and collectives fail. Run under an "
           "MPS daemon with CUDA_MPS_ACTIVE_THREAD_PERCENTAGE set so that the ranks' sum is <= "
           "100 (e.g. 25 for 4 ranks)";
  }
}

void Runtime::init(const Group& group, int device, const char* op) {
  const int rank = group.rank();
  const int world = group.world_size();
  SYMMEM_CUDART_CHECK(op, rank, cudaSetDevice(device));
  // NVSHMEM's init fails with a bare "nvshmem initialization failed" without a context.
  SYMMEM_CUDART_CHECK(op, rank, cudaFree(nullptr));

  StoreExchange ex(group.store(), group.name() + "/nvshmem/init", rank, world, group.timeout());
  GpuIdentity me{};
  std::snprintf(me.host, sizeof(me.host), "%s", group.host_id().c_str());
  SYMMEM_CUDART_CHECK(op, rank, cudaDeviceGetPCIBusId(me.pci, sizeof(me.pci), device));
  auto ids = ex.all_gather(me);
  bool shared_gpu = false;
  for (int p = 0; p < world; ++p) {
    for (int q = p + 1; q < world; ++q) {
      shared_gpu = shared_gpu || (std::strncmp(ids[p].host, ids[q].host, sizeof(me.host)) == 0 &&
                                  std::strncmp(ids[p].pci, ids[q].pci, sizeof(me.pci)) == 0);
    }
  }
  set_default_env(group, shared_gpu);

  nvshmemx_uniqueid_t uid = NVSHMEMX_UNIQUEID_INITIALIZER;
  int status = 0;
  if (rank == 0) {
    status = nvshmemx_get_uniqueid(&uid);
    if (status != 0) {
      // Tell the others before failing so they do not wait for the id until the deadline.
      std::memset(&uid, 0, sizeof(uid));
    }
  }
  struct IdMsg {
    int status;
    nvshmemx_uniqueid_t uid;
  };
  IdMsg msg{status, uid};
  msg = ex.broadcast(msg, 0);
  SYMMEM_CHECK(
      op, rank, msg.status == 0, ErrorCode::BackendUnavailable,
      "nvshmem backend: nvshmemx_get_uniqueid failed on rank 0 (status " << msg.status << ")");
  uid = msg.uid;

  nvshmemx_init_attr_t attr = NVSHMEMX_INIT_ATTR_INITIALIZER;
  status = nvshmemx_set_attr_uniqueid_args(rank, world, &uid, &attr);
  SYMMEM_CHECK(op, rank, status == 0, ErrorCode::BackendUnavailable,
               "nvshmem backend: nvshmemx_set_attr_uniqueid_args("
                   << rank << ", " << world << ") failed (status " << status << ")");
  // nvshmemx_init_attr() would exit() the process on failure; call what it calls instead.
  int provided = 0;
  nvshmemi_version_t version = {NVSHMEM_VENDOR_MAJOR_VERSION, NVSHMEM_VENDOR_MINOR_VERSION,
                                NVSHMEM_VENDOR_PATCH_VERSION};
  nvshmemx_init_init_attr_ver_only(attr);
  status = nvshmemi_init_thread(NVSHMEM_THREAD_SERIALIZED, &provided, NVSHMEMX_INIT_WITH_UNIQUEID,
                                &attr, version);
  SYMMEM_CHECK(op, rank, status == 0, ErrorCode::BackendUnavailable,
               "nvshmem backend: NVSHMEM initialisation failed (status "
                   << status << "; run with NVSHMEM_DEBUG=INFO for NVSHMEM's reason"
                   << (shared_gpu ? "; ranks share a GPU: NVSHMEM needs MPS with "
                                    "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE set"
                                  : "")
                   << ")");
  const int my_pe = nvshmem_my_pe();
  const int n_pes = nvshmem_n_pes();
  SYMMEM_CHECK(op, rank, my_pe == rank && n_pes == world, ErrorCode::Internal,
               "nvshmem backend: NVSHMEM made this rank PE "
                   << my_pe << " of " << n_pes << ", expected " << rank << " of " << world);
  world_global_ranks_ = group.global_ranks();
  world_group_name_ = group.name();
  device_ = device;
  initialized_ = true;
  SYMMEM_LOG(INFO, INIT) << "nvshmem: initialised NVSHMEM " << NVSHMEM_VENDOR_MAJOR_VERSION << "."
                         << NVSHMEM_VENDOR_MINOR_VERSION << "." << NVSHMEM_VENDOR_PATCH_VERSION
                         << " over group '" << group.name() << "': PE " << my_pe << " of " << n_pes
                         << " on cuda:" << device
                         << (shared_gpu ? " (several PEs share a GPU)" : "");
}

void Runtime::ensure(const Group& group, int device, const char* op) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!initialized_) {
    init(group, device, op);
    return;
  }
  SYMMEM_CHECK_ARG(op, group.rank(), device == device_, "device",
                   "is cuda:" << device << " but NVSHMEM was initialised on cuda:" << device_
                              << " (one GPU per process)");
  std::string why;
  if (!is_world_locked(group, &why)) throw_error(ErrorCode::Unsupported, op, group.rank(), why);
}

bool Runtime::can_allocate(const Group& group, std::string* why) const {
  std::lock_guard<std::mutex> lock(mu_);
  return !initialized_ || is_world_locked(group, why);
}

bool Runtime::is_world_locked(const Group& group, std::string* why) const {
  auto mine = group.global_ranks();
  auto world = world_global_ranks_;
  std::sort(mine.begin(), mine.end());
  std::sort(world.begin(), world.end());
  if (mine == world) return true;
  if (why != nullptr) {
    *why = "nvshmem backend: group '" + group.name() + "' (" + std::to_string(group.world_size()) +
           " ranks) is not the NVSHMEM PE world (the " +
           std::to_string(world_global_ranks_.size()) + " ranks of group '" + world_group_name_ +
           "'): nvshmem_malloc is collective over every PE, so a subset of the PEs cannot "
           "allocate. Allocate on the full group, or use the cuda backend (one host) for "
           "subgroups";
  }
  return false;
}

std::vector<int> Runtime::pes_of(const Group& group, const char* op) const {
  std::lock_guard<std::mutex> lock(mu_);
  SYMMEM_CHECK(op, group.rank(), initialized_, ErrorCode::Internal, "NVSHMEM is not initialised");
  std::vector<int> pes(group.world_size(), -1);
  for (int r = 0; r < group.world_size(); ++r) {
    auto it =
        std::find(world_global_ranks_.begin(), world_global_ranks_.end(), group.global_rank(r));
    SYMMEM_CHECK(
        op, group.rank(), it != world_global_ranks_.end(), ErrorCode::Unsupported,
        "nvshmem backend: rank " << r << " of group '" << group.name() << "' is not an NVSHMEM PE");
    pes[r] = static_cast<int>(it - world_global_ranks_.begin());
  }
  return pes;
}

nvshmem_team_t Runtime::team_for(const Group& group, const char* op) {
  auto pes = pes_of(group, op);
  bool identity = static_cast<int>(pes.size()) == n_pes();
  for (size_t r = 0; identity && r < pes.size(); ++r) identity = pes[r] == static_cast<int>(r);
  if (identity) return NVSHMEM_TEAM_WORLD;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = teams_.find(group.name());
    if (it != teams_.end()) return it->second;
  }
  // A team of exactly these PEs, in group order: member 0 makes the id, the members join.
  StoreExchange ex(group.store(), group.name() + "/nvshmem/team", group.rank(), group.world_size(),
                   group.timeout());
  nvshmemx_team_uniqueid_t id = NVSHMEM_TEAM_UNIQUID_INITIALIZER;
  int status = 0;
  if (group.rank() == 0) status = nvshmemx_team_get_uniqueid(&id);
  struct IdMsg {
    int status;
    nvshmemx_team_uniqueid_t id;
  };
  IdMsg msg = ex.broadcast(IdMsg{status, id}, 0);
  SYMMEM_CHECK(op, group.rank(), msg.status == 0, ErrorCode::BackendUnavailable,
               "nvshmem backend: nvshmemx_team_get_uniqueid failed (status " << msg.status << ")");
  nvshmem_team_config_t config = NVSHMEM_TEAM_CONFIG_INITIALIZER;
  config.uniqueid = msg.id;
  nvshmem_team_t team = NVSHMEM_TEAM_INVALID;
  status = nvshmemx_team_init(&team, &config, NVSHMEM_TEAM_CONFIG_MASK_UNIQUEID, group.world_size(),
                              group.rank());
  SYMMEM_CHECK(op, group.rank(), status == 0 && team != NVSHMEM_TEAM_INVALID,
               ErrorCode::BackendUnavailable,
               "nvshmem backend: nvshmemx_team_init for group '"
                   << group.name() << "' failed (status " << status
                   << "); with several PEs on one GPU NVSHMEM needs MPS with "
                      "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE set for teams");
  std::lock_guard<std::mutex> lock(mu_);
  teams_[group.name()] = team;
  SYMMEM_LOG(INFO, INIT) << "nvshmem: team for group '" << group.name() << "' ("
                         << group.world_size() << " PEs)";
  return team;
}

}  // namespace symmem::nvshm
