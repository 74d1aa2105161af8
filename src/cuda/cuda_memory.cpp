#include "cuda/cuda_memory.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <sstream>
#include <string>

#include "core/check.hpp"
#include "core/exchange.hpp"
#include "core/ipc_channel.hpp"
#include "core/log.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/device_sync.hpp"
#include "cuda/driver.hpp"
#include "cuda/signals.hpp"
#include "cuda/timeout_record.hpp"
#include "symmem/env.hpp"

namespace symmem::cuda {
namespace {

constexpr const char* kOp = "allocate";
constexpr size_t kPadAlign = 256;
constexpr size_t kOrphanFlagBytes = 16;  // NOTE [orphan stop flags]: an int32, 16 bytes reserved

size_t align_up(size_t v, size_t a) {
  return (v + a - 1) / a * a;
}

template <size_t N>
void copy_text(char (&dst)[N], const std::string& src) {
  size_t n = std::min(src.size(), N - 1);
  std::memcpy(dst, src.data(), n);
  dst[n] = '\0';
}

struct RankInfo {
  unsigned char uuid[16];
  int32_t device;  // ordinal in its own process
  int32_t pid;
  int32_t allow_shared;  // SYMMEM_ALLOW_SHARED_GPU on that rank
  int32_t code;          // ErrorCode of a local failure, 0 if none
  uint64_t bytes;
  uint64_t pad_bytes;
  char pci[32];
  char address[160];
  char message[480];
};

struct RankStatus {
  int32_t code;
  char message[800];
};

// A local failure captured so that every rank can fail together.
struct LocalError {
  ErrorCode code = ErrorCode::Internal;
  std::string message;
};

template <class Fn>
std::optional<LocalError> capture(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return LocalError{e.code(), e.what()};
  } catch (const std::exception& e) {
    return LocalError{ErrorCode::Internal, e.what()};
  }
  return std::nullopt;
}

// Gathers every rank's outcome of a phase; throws the same error on every rank if any failed.
void agree(StoreExchange& ex, int rank, const char* phase, const std::optional<LocalError>& mine) {
  RankStatus st{};
  if (mine) {
    st.code = static_cast<int32_t>(mine->code);
    copy_text(st.message, mine->message);
  }
  auto all = ex.all_gather(st);
  std::ostringstream os;
  int failed = 0;
  ErrorCode code = ErrorCode::Internal;
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].code == 0) continue;
    if (failed++ == 0) code = static_cast<ErrorCode>(all[r].code);
    os << (failed > 1 ? "; " : "") << "[rank " << r << "] " << all[r].message;
  }
  if (failed > 0) {
    throw_error(code, kOp, rank,
                std::string("cuda rendezvous failed (") + phase + ") on " + std::to_string(failed) +
                    " rank(s): " + os.str());
  }
}

std::string uuid_text(const unsigned char* u) {
  static const char* hex = "0123456789abcdef";
  std::string s = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
    s += hex[u[i] >> 4];
    s += hex[u[i] & 15];
  }
  return s;
}

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.fd_;
      o.fd_ = -1;
    }
    return *this;
  }
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

int find_device_by_uuid(const Driver& cu, const unsigned char* uuid) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return -1;
  for (int i = 0; i < n; ++i) {
    CUdevice d;
    CUuuid u;
    if (cu.cuDeviceGet(&d, i) != CUDA_SUCCESS || cu.cuDeviceGetUuid(&u, d) != CUDA_SUCCESS) {
      continue;
    }
    if (std::memcmp(u.bytes, uuid, 16) == 0) return i;
  }
  return -1;
}

}  // namespace

// create()'s phases (NOTE [cuda rendezvous]) and the state they share. Members are destroyed in
// reverse order: on a throw the exported fd is closed, then the device guard restores the
// current device, then `m` releases whatever was reserved, mapped and uploaded.
struct CudaMemory::Rendezvous {
  Rendezvous(const Group& g, const RendezvousInfo& i)
      : group(g),
        info(i),
        rank(g.rank()),
        world(g.world_size()),
        timeout(i.timeout),
        ex(g.store(), g.name() + "/cuda/a" + std::to_string(i.alloc_id), rank, world, timeout),
        m(new CudaMemory()) {
    m->rank_ = rank;
    m->world_ = world;
    m->device_ = info.device.index;
    m->bytes_ = info.bytes;
    m->pad_bytes_ = info.signal_pad_bytes;
    m->mapped_.assign(world, 0);
  }

  void check_locally();
  void check_rank_table() const;
  void check_shared_gpus() const;
  void check_peer_access() const;
  void create_and_export();
  void send_fd(IpcChannel& ipc, const std::string& tag);
  void import_peers(IpcChannel& ipc, const std::string& tag);
  void upload_tables();

  const Group& group;
  const RendezvousInfo& info;
  const int rank;
  const int world;
  const Millis timeout;  // resolved by the core (the group's timeout, > 0)
  StoreExchange ex;
  std::shared_ptr<CudaMemory> m;
  RankInfo mine{};
  std::vector<RankInfo> all;
  const Driver* cu = nullptr;
  std::optional<DeviceGuard> guard;  // on m's device from check_locally() to the end
  Fd my_fd;                          // this rank's exported memory, until sent to every peer
};

// Phase 1, locally: driver, device index, VMM and POSIX-fd handle support, pad size; fills
// `mine`.
void CudaMemory::Rendezvous::check_locally() {
  cu = &driver();
  mine.allow_shared = env::allow_shared_gpu() ? 1 : 0;
  int count = 0;
  SYMMEM_CUDART_CHECK(kOp, rank, cudaGetDeviceCount(&count));
  SYMMEM_CHECK_ARG(kOp, rank,
                   info.device.is_cuda() && info.device.index >= 0 && info.device.index < count,
                   "device",
                   "is " << to_string(info.device) << "; this process sees " << count
                         << " GPU(s) (cuda:0..cuda:" << count - 1 << ")");
  guard.emplace(m->device_);
  SYMMEM_CUDART_CHECK(kOp, rank, cudaFree(nullptr));  // creates the primary context
  CUdevice dev;
  SYMMEM_CU_CHECK(kOp, rank, cu->cuDeviceGet(&dev, m->device_));
  CUuuid uuid;
  SYMMEM_CU_CHECK(kOp, rank, cu->cuDeviceGetUuid(&uuid, dev));
  std::memcpy(mine.uuid, uuid.bytes, 16);
  char pci[32] = {0};
  if (cu->cuDeviceGetPCIBusId(pci, sizeof(pci), dev) == CUDA_SUCCESS) copy_text(mine.pci, pci);
  int vmm = 0, fd_ok = 0;
  SYMMEM_CU_CHECK(
      kOp, rank,
      cu->cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev));
  SYMMEM_CU_CHECK(
      kOp, rank,
      cu->cuDeviceGetAttribute(
          &fd_ok, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev));
  SYMMEM_CHECK(kOp, rank, vmm != 0, ErrorCode::Unsupported,
               "cuda: " << to_string(info.device)
                        << " does not support CUDA virtual memory "
                           "management (cuMemCreate), which the cuda backend needs; use "
                           "SYMMEM_BACKEND=nccl or nvshmem");
  SYMMEM_CHECK(kOp, rank, fd_ok != 0, ErrorCode::Unsupported,
               "cuda: " << to_string(info.device)
                        << " cannot export memory as POSIX file "
                           "descriptors (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), which the cuda "
                           "backend needs to share memory between processes; use "
                           "SYMMEM_BACKEND=nccl or nvshmem");
  SYMMEM_CHECK_ARG(kOp, rank, info.signal_pad_bytes / 4 >= static_cast<size_t>(world),
                   "signal_pad_bytes",
                   "is " << info.signal_pad_bytes << ": a pad needs at least world_size (" << world
                         << ") 4-byte slots; raise SYMMEM_SIGNAL_PAD_BYTES");
  copy_text(mine.address, IpcChannel::instance(group.global_rank(rank)).address());
}

// Phase 1, on the gathered table: the same checks on every rank, so every rank fails the same way.
void CudaMemory::Rendezvous::check_rank_table() const {
  std::ostringstream errs;
  ErrorCode code = ErrorCode::Internal;
  int failed = 0;
  for (int r = 0; r < world; ++r) {
    if (all[r].code == 0) continue;
    if (failed++ == 0) code = static_cast<ErrorCode>(all[r].code);
    errs << (failed > 1 ? "; " : "") << "[rank " << r << "] " << all[r].message;
  }
  if (failed > 0) {
    throw_error(code, kOp, rank,
                "cuda backend unusable on " + std::to_string(failed) + " rank(s): " + errs.str());
  }
  for (int r = 0; r < world; ++r) {
    SYMMEM_CHECK_ARG(kOp, rank,
                     all[r].bytes == all[0].bytes && all[r].pad_bytes == all[0].pad_bytes, "bytes",
                     "differs between ranks: rank 0 asked for "
                         << all[0].bytes << " bytes (+" << all[0].pad_bytes << " pad bytes), rank "
                         << r << " for " << all[r].bytes << " (+" << all[r].pad_bytes << ")");
  }
  SYMMEM_CHECK(kOp, rank, group.single_host(), ErrorCode::Unsupported,
               "the cuda backend needs every rank of the group on one host (this group spans "
               "several hosts); use SYMMEM_BACKEND=nvshmem or nccl across hosts");
  check_shared_gpus();
}

// Several ranks on one GPU only when every rank allows it (SYMMEM_ALLOW_SHARED_GPU).
void CudaMemory::Rendezvous::check_shared_gpus() const {
  for (int a = 0; a < world; ++a) {
    for (int b = a + 1; b < world; ++b) {
      if (std::memcmp(all[a].uuid, all[b].uuid, 16) != 0) continue;
      bool allowed = true;
      std::string lacking;
      for (int r = 0; r < world; ++r) {
        if (!all[r].allow_shared) {
          allowed = false;
          lacking += (lacking.empty() ? "" : ",") + std::to_string(r);
        }
      }
      SYMMEM_CHECK(kOp, rank, allowed, ErrorCode::InvalidArgument,
                   "ranks " << a << " and " << b << " use the same GPU (" << uuid_text(all[a].uuid)
                            << ", cuda:" << all[a].device << " / cuda:" << all[b].device
                            << "); several ranks on one GPU are refused by default. Set "
                               "SYMMEM_ALLOW_SHARED_GPU=1 on every rank to allow it (not set "
                               "on rank(s) "
                            << lacking
                            << "); kernels of different processes then only run concurrently "
                               "under MPS");
      break;
    }
  }
}

// Phase 2: peer access from this rank's GPU to every other rank's GPU.
void CudaMemory::Rendezvous::check_peer_access() const {
  for (int p = 0; p < world; ++p) {
    if (p == rank || std::memcmp(all[p].uuid, mine.uuid, 16) == 0) continue;
    int other = find_device_by_uuid(*cu, all[p].uuid);
    SYMMEM_CHECK(kOp, rank, other >= 0, ErrorCode::Unsupported,
                 "rank " << p << "'s GPU " << uuid_text(all[p].uuid) << " (PCI " << all[p].pci
                         << ") is not visible in this process (CUDA_VISIBLE_DEVICES?), so rank "
                         << rank << " cannot map its memory");
    CUdevice mine_dev, other_dev;
    SYMMEM_CU_CHECK(kOp, rank, cu->cuDeviceGet(&mine_dev, m->device_));
    SYMMEM_CU_CHECK(kOp, rank, cu->cuDeviceGet(&other_dev, other));
    int can = 0;
    SYMMEM_CU_CHECK(kOp, rank, cu->cuDeviceCanAccessPeer(&can, mine_dev, other_dev));
    SYMMEM_CHECK(kOp, rank, can != 0, ErrorCode::Unsupported,
                 "no peer access from rank " << rank << "'s GPU cuda:" << m->device_ << " (PCI "
                                             << mine.pci << ") to rank " << p << "'s GPU (PCI "
                                             << all[p].pci
                                             << "); the cuda backend needs peer access between "
                                                "every pair of GPUs (use nccl or nvshmem)");
  }
}

// Phase 2: creates this rank's memory, reserves the range of all ranks, maps and zeroes its own
// part, exports the fd.
void CudaMemory::Rendezvous::create_and_export() {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = m->device_;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t gran = 0;
  SYMMEM_CU_CHECK(
      kOp, rank,
      cu->cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  if (gran == 0) gran = 2u << 20;
  m->pad_offset_ = align_up(std::max<size_t>(m->bytes_, 1), kPadAlign);
  m->orphan_offset_ = align_up(m->pad_offset_ + m->pad_bytes_, kOrphanFlagBytes);
  m->stride_ = align_up(m->orphan_offset_ + kOrphanFlagBytes, gran);
  CUdeviceptr base = 0;
  SYMMEM_CU_CHECK(kOp, rank, cu->cuMemAddressReserve(&base, m->stride_ * world, gran, 0, 0));
  m->base_ = static_cast<uintptr_t>(base);
  CUmemGenericAllocationHandle h;
  CUresult r = cu->cuMemCreate(&h, m->stride_, &prop, 0);
  if (r == CUDA_ERROR_NOT_SUPPORTED) {
    throw_error(ErrorCode::Unsupported, kOp, rank,
                "cuMemCreate with POSIX file-descriptor handles is not supported on " +
                    to_string(info.device) + " (" + cu_error_text(r) +
                    "); use SYMMEM_BACKEND=nccl or nvshmem");
  }
  if (r != CUDA_SUCCESS) {
    throw_cu_error(
        kOp, rank,
        ("cuMemCreate(" + std::to_string(m->stride_) + " bytes on " + to_string(info.device) + ")")
            .c_str(),
        r, SYMMEM_WHERE);
  }
  const CUdeviceptr own = base + static_cast<CUdeviceptr>(rank) * m->stride_;
  r = cu->cuMemMap(own, m->stride_, 0, h, 0);
  if (r == CUDA_SUCCESS) {
    m->mapped_[rank] = 1;
    int fd = -1;
    r = cu->cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (r == CUDA_SUCCESS) my_fd = Fd(fd);
  }
  SYMMEM_CU_WARN(cu->cuMemRelease(h));  // the mapping keeps the memory alive
  if (r != CUDA_SUCCESS)
    throw_cu_error(kOp, rank, "cuMemMap/cuMemExportToShareableHandle", r, SYMMEM_WHERE);
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = m->device_;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  SYMMEM_CU_CHECK(kOp, rank, cu->cuMemSetAccess(own, m->stride_, &access, 1));
  SYMMEM_CU_CHECK(kOp, rank, cu->cuMemsetD8(own, 0, m->stride_));
  SYMMEM_CU_CHECK(kOp, rank, cu->cuCtxSynchronize());
}

// Phase 3: sends this rank's fd (and its stride) to every peer, then closes it; the first
// failure is thrown after every peer was tried.
void CudaMemory::Rendezvous::send_fd(IpcChannel& ipc, const std::string& tag) {
  Bytes payload(sizeof(uint64_t));
  const uint64_t stride64 = m->stride_;
  std::memcpy(payload.data(), &stride64, sizeof(stride64));
  std::optional<LocalError> send_error;
  for (int k = 1; k < world; ++k) {
    const int p = (rank + k) % world;
    auto e = capture([&] {
      ipc.send_fds(all[p].address, p, tag + std::to_string(rank) + ">" + std::to_string(p),
                   {my_fd.get()}, payload, timeout);
    });
    if (e && !send_error) send_error = e;
  }
  my_fd.reset();
  if (send_error) throw Error(send_error->code, send_error->message);
}

// Phase 3: receives every peer's fd, imports it and maps it at base + peer * stride with
// read/write access for this rank's device.
void CudaMemory::Rendezvous::import_peers(IpcChannel& ipc, const std::string& tag) {
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = m->device_;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  for (int k = 1; k < world; ++k) {
    const int p = (rank + world - k) % world;
    Bytes got;
    auto fds = ipc.recv_fds(tag + std::to_string(p) + ">" + std::to_string(rank), p, &got, timeout);
    std::vector<Fd> owned;
    for (int fd : fds) owned.emplace_back(fd);
    SYMMEM_CHECK(kOp, rank, owned.size() == 1 && got.size() == sizeof(uint64_t),
                 ErrorCode::Internal,
                 "rank " << p << " sent " << owned.size() << " fds and " << got.size()
                         << " payload bytes; expected one fd and 8 bytes");
    uint64_t their_stride = 0;
    std::memcpy(&their_stride, got.data(), sizeof(their_stride));
    SYMMEM_CHECK(kOp, rank, their_stride == m->stride_, ErrorCode::InvalidArgument,
                 "rank " << p << " allocated " << their_stride << " bytes per rank, rank " << rank
                         << " " << m->stride_ << " (sizes or GPUs differ)");
    CUmemGenericAllocationHandle h;
    SYMMEM_CU_CHECK(kOp, rank,
                    cu->cuMemImportFromShareableHandle(
                        &h, reinterpret_cast<void*>(static_cast<uintptr_t>(owned[0].get())),
                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    owned.clear();
    const CUdeviceptr at = m->base_ + static_cast<CUdeviceptr>(p) * m->stride_;
    CUresult r = cu->cuMemMap(at, m->stride_, 0, h, 0);
    SYMMEM_CU_WARN(cu->cuMemRelease(h));
    if (r != CUDA_SUCCESS) throw_cu_error(kOp, rank, "cuMemMap(peer part)", r, SYMMEM_WHERE);
    m->mapped_[p] = 1;
    SYMMEM_CU_CHECK(kOp, rank, cu->cuMemSetAccess(at, m->stride_, &access, 1));
  }
}

// Phase 3: uploads the device pointer tables of every rank's buffer and pad.
void CudaMemory::Rendezvous::upload_tables() {
  std::vector<void*> buffers(world);
  std::vector<uint32_t*> pads(world);
  for (int p = 0; p < world; ++p) {
    char* part = reinterpret_cast<char*>(m->base_ + p * m->stride_);
    buffers[p] = part;
    pads[p] = reinterpret_cast<uint32_t*>(part + m->pad_offset_);
  }
  m->tables_ = std::make_unique<PeerTables>(m->device_, rank, buffers, pads);
  (void)timeout_record();  // created now, not inside a later graph capture
}

std::shared_ptr<CudaMemory> CudaMemory::create(const Group& group, const RendezvousInfo& info) {
  Rendezvous rv(group, info);

  // ---- phase 1: local checks and the table of ranks --------------------------------------
  rv.mine.device = info.device.index;
  rv.mine.pid = static_cast<int32_t>(::getpid());
  rv.mine.bytes = info.bytes;
  rv.mine.pad_bytes = info.signal_pad_bytes;
  auto local = capture([&] { rv.check_locally(); });
  if (local) {
    rv.mine.code = static_cast<int32_t>(local->code);
    copy_text(rv.mine.message, local->message);
  }
  rv.all = rv.ex.all_gather(rv.mine);
  rv.check_rank_table();

  // ---- phase 2: peer access, create, reserve, map own part, export -----------------------
  local = capture([&] {
    rv.check_peer_access();
    rv.create_and_export();
  });
  agree(rv.ex, rv.rank, "create and export", local);

  // ---- phase 3: exchange fds, import and map every peer's part ------------------------------
  local = capture([&] {
    IpcChannel& ipc = IpcChannel::instance(group.global_rank(rv.rank));
    const std::string tag = group.name() + "/cuda/a" + std::to_string(info.alloc_id) + "/";
    rv.send_fd(ipc, tag);
    rv.import_peers(ipc, tag);
    rv.upload_tables();
  });
  agree(rv.ex, rv.rank, "import and map peers", local);

  // ---- phase 4: from here every pad is zero and mapped everywhere -------------------------
  rv.ex.barrier();
  rv.m->abort_ = abort_slot(group);  // NOTE [device abort] (timeout_record.hpp)
  std::vector<int32_t*> flags(rv.world);
  for (int p = 0; p < rv.world; ++p) flags[p] = rv.m->orphan_flag(p);
  rv.m->orphan_id_ = register_orphan_flags(group, rv.m->device_, std::move(flags));
  SYMMEM_LOG(INFO, ALLOC) << "cuda: allocation " << info.alloc_id << " of " << info.bytes
                          << " bytes (+" << info.signal_pad_bytes << " pad, " << rv.m->stride_
                          << " per rank) on " << to_string(info.device) << " mapped for "
                          << rv.world << " rank(s)";
  return std::move(rv.m);
}

CudaMemory::~CudaMemory() {
  release();
}

void CudaMemory::release() noexcept {
  try {
    // No orphan stop flag is set in this memory from here (NOTE [orphan stop flags]); one being
    // set now is waited for by the synchronisation below.
    unregister_orphan_flags(orphan_id_);
    orphan_id_ = 0;
    if (base_ == 0 && !tables_) return;
    std::string why;
    if (!driver_available(&why)) return;
    const Driver& cu = driver();
    DeviceGuard guard(device_);
    // Kernels queued on any stream may still read or write the memory.
    SYMMEM_CU_WARN(cu.cuCtxSynchronize());
    tables_.reset();
    for (int p = 0; p < world_; ++p) {
      if (mapped_[p]) {
        SYMMEM_CU_WARN(cu.cuMemUnmap(base_ + static_cast<CUdeviceptr>(p) * stride_, stride_));
        mapped_[p] = 0;
      }
    }
    if (base_ != 0) SYMMEM_CU_WARN(cu.cuMemAddressFree(base_, stride_ * world_));
    base_ = 0;
  } catch (const std::exception& e) {
    try {
      SYMMEM_LOG(WARN, ALLOC) << "cuda: freeing an allocation failed: " << e.what();
    } catch (...) {
    }
  } catch (...) {
  }
}

void* CudaMemory::ptr(int peer) const {
  if (peer < 0 || peer >= world_) return nullptr;
  return reinterpret_cast<void*>(base_ + static_cast<uintptr_t>(peer) * stride_);
}

void* const* CudaMemory::ptrs_device() const {
  return tables_->buffers_device();
}

uint32_t* CudaMemory::signal_pad(int peer) const {
  if (peer < 0 || peer >= world_) return nullptr;
  return tables_->pad(peer);
}

bool CudaMemory::direct_access(int peer) const {
  return peer >= 0 && peer < world_;
}

DeviceHandle CudaMemory::device_handle(size_t offset, size_t length) const {
  DeviceHandle h = tables_->handle(offset, length, pad_bytes_);
  h.abort_word = abort_.word;
  h.abort_slot = abort_.slot;
  h.orphan_flag = orphan_flag(rank_);
  return h;
}

int32_t* CudaMemory::orphan_flag(int peer) const {
  if (peer < 0 || peer >= world_ || base_ == 0) return nullptr;
  return reinterpret_cast<int32_t*>(base_ + static_cast<uintptr_t>(peer) * stride_ +
                                    orphan_offset_);
}

void CudaMemory::barrier(int channel, Millis timeout, Stream stream) {
  run_device_sync(SyncKind::barrier, device_handle(0, bytes_), -1, channel, timeout, stream,
                  device_);
}

void CudaMemory::put_signal(int dst, int channel, Millis timeout, Stream stream) {
  run_device_sync(SyncKind::put_signal, device_handle(0, bytes_), dst, channel, timeout, stream,
                  device_);
}

void CudaMemory::wait_signal(int src, int channel, Millis timeout, Stream stream) {
  run_device_sync(SyncKind::wait_signal, device_handle(0, bytes_), src, channel, timeout, stream,
                  device_);
}

void CudaMemory::signal_op(int peer, size_t slot, uint32_t value, SignalOp op, Stream stream) {
  uint32_t* pad = signal_pad(peer);  // the core checked peer and slot
  device_signal_op(device_handle(0, bytes_), pad != nullptr ? pad + slot : nullptr, peer, slot,
                   value, op, stream, device_);
}

uint32_t CudaMemory::wait_until(size_t slot, Cmp cmp, uint32_t value, Millis timeout,
                                Stream stream) {
  uint32_t* pad = signal_pad(rank_);
  return device_wait_until(device_handle(0, bytes_), pad != nullptr ? pad + slot : nullptr, slot,
                           cmp, value, timeout, stream, device_);
}

}  // namespace symmem::cuda
