// The host backend: symmetric CPU memory shared between the processes of one host.
//
// Each rank's buffer is a memfd (sealed against shrinking and growing once sized) holding
//   [buffer, rounded up to a page][signal pad][HostControl]
// The fd goes to every other rank over IpcChannel (SCM_RIGHTS); each rank maps every peer's memfd
// once and closes the fd, so the only resources of an allocation are its mappings: freeing
// unmaps them and the kernel frees the memory when the last rank has unmapped it. Nothing is
// ever created in /dev/shm or on disk. Synchronisation: see NOTE [host signal ordering] in
// host_sync.hpp.

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>

#include "core/abort.hpp"
#include "core/check.hpp"
#include "core/ipc_channel.hpp"
#include "core/log.hpp"
#include "core/memory_registry.hpp"
#include "core/trace.hpp"
#include "host/host_backend.hpp"
#include "host/host_ops.hpp"
#include "host/host_sync.hpp"
#include "symmem/backend.hpp"
#include "symmem/error.hpp"

namespace symmem::host {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kPage = 4096;
constexpr int64_t kSleepSliceNs = 20'000'000;  // longest single futex sleep
constexpr auto kLivenessInterval =
    std::chrono::milliseconds(50);                           // how often dead peers are sought
constexpr auto kSpinAlone = std::chrono::microseconds(2);    // spin before sleeping: cores to spare
constexpr auto kSpinCrowded = std::chrono::microseconds(0);  // ranks outnumber cores
constexpr int kYields = 32;  // sched_yield()s between spinning and sleeping

size_t round_up(size_t v, size_t a) {
  return (v + a - 1) / a * a;
}

std::string errno_text(int e) {
  return std::string(std::strerror(e)) + " (errno " + std::to_string(e) + ")";
}

// ---- peer liveness --------------------------------------------------------------------------

// Watches one process through a pidfd (immune to pid reuse), or kill(pid, 0) where the kernel
// has no pidfd_open. pid 0 (unknown) and our own pid are always alive.
class PidWatch {
 public:
  explicit PidWatch(int pid) : pid_(pid) {
#ifdef SYS_pidfd_open
    if (pid_ > 0 && pid_ != ::getpid()) fd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
#endif
  }
  ~PidWatch() {
    if (fd_ >= 0) ::close(fd_);
  }
  PidWatch(const PidWatch&) = delete;
  PidWatch& operator=(const PidWatch&) = delete;
  int pid() const {
    return pid_;
  }
  bool alive() const {
    if (pid_ <= 0 || pid_ == ::getpid()) return true;
    if (fd_ >= 0) {
      pollfd p{fd_, POLLIN, 0};
      return ::poll(&p, 1, 0) == 0;
    }
    return IpcChannel::process_alive(pid_);
  }

 private:
  int pid_;
  int fd_ = -1;
};

// One watch per pid for the whole process (allocations share them: one fd per peer process).
std::shared_ptr<PidWatch> watch_pid(int pid) {
  static auto* mu = new std::mutex;
  static auto* map = new std::map<int, std::weak_ptr<PidWatch>>;
  std::lock_guard<std::mutex> lock(*mu);
  for (auto it = map->begin(); it != map->end();) {
    it = it->second.expired() ? map->erase(it) : std::next(it);
  }
  auto& w = (*map)[pid];
  auto s = w.lock();
  if (!s) {
    s = std::make_shared<PidWatch>(pid);
    w = s;
  }
  return s;
}

// The CPUs this process may run on (sched_getaffinity), the first 1024 of them as bits; every
// bit set when the mask cannot be read.
void own_cpus(uint64_t (&bits)[16]) {
  cpu_set_t set;
  CPU_ZERO(&set);
  const bool ok = ::sched_getaffinity(0, sizeof(set), &set) == 0;
  for (int c = 0; c < 1024; ++c) {
    if (!ok || CPU_ISSET(c, &set)) bits[c / 64] |= uint64_t{1} << (c % 64);
  }
}

// What a rank publishes at rendezvous.
struct PeerInfo {
  uint64_t alloc_id;
  uint64_t map_bytes;
  int32_t pid;
  int32_t reserved;
  char pidns[64];
  char address[112];
  uint64_t cpus[16];  // own_cpus(): whether the ranks outnumber the CPUs they may use together
};

struct FdCloser {
  int fd = -1;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

// ---- one allocation ---------------------------------------------------------------------------

class HostMemory final : public BackendMemory {
 public:
  HostMemory(int rank, int world, std::vector<int> global, std::string label, size_t pad_off,
             size_t ctrl_off, size_t map_bytes, bool crowded)
      : rank_(rank),
        world_(world),
        global_(std::move(global)),
        label_(std::move(label)),
        pad_off_(pad_off),
        ctrl_off_(ctrl_off),
        map_bytes_(map_bytes),
        spin_(crowded ? kSpinCrowded : kSpinAlone),
        maps_(world, nullptr),
        watch_(world) {}

  ~HostMemory() override {
    for (void* m : maps_) {
      if (m != nullptr) ::munmap(m, map_bytes_);
    }
  }

  void* ptr(int peer) const override { return maps_[peer]; }
  uint32_t* signal_pad(int peer) const override {
    return reinterpret_cast<uint32_t*>(static_cast<char*>(maps_[peer]) + pad_off_);
  }
  bool direct_access(int /*peer*/) const override { return true; }

  void put_signal(int dst, int channel, Millis timeout, Stream) override {
    auto s = slot(dst, channel, rank_);
    bool done = false;
    wait(
        "put_signal", channel, timeout,
        [&] {
          if (!done && s.load(std::memory_order_acquire) == 0) {
            s.store(1, std::memory_order_release);
            ring(ctrl(dst));
            done = true;
          }
          return done;
        },
        [&](std::vector<Pending>* p) {
          if (!done) p->push_back({dst, true});
        });
  }

  void wait_signal(int src, int channel, Millis timeout, Stream) override {
    auto s = slot(rank_, channel, src);
    bool done = false;
    wait(
        "wait_signal", channel, timeout,
        [&] {
          if (!done && s.load(std::memory_order_acquire) == 1) {
            s.store(0, std::memory_order_release);
            ring(ctrl(src));
            done = true;
          }
          return done;
        },
        [&](std::vector<Pending>* p) {
          if (!done) p->push_back({src, false});
        });
  }

  // NVSHMEM-style signals on raw slots (SymmetricMemory::signal_op / wait_until).
  void signal_op(int peer, size_t slot, uint32_t value, SignalOp op, Stream) override {
    std::atomic_ref<uint32_t> s(signal_pad(peer)[slot]);
    if (op == SignalOp::add) {
      s.fetch_add(value, std::memory_order_release);
    } else {
      s.store(value, std::memory_order_release);
    }
    ring(ctrl(peer));
  }

  uint32_t wait_until(size_t slot, Cmp cmp, uint32_t value, Millis timeout, Stream) override {
    std::atomic_ref<uint32_t> s(signal_pad(rank_)[slot]);
    uint32_t seen = 0;
    try {
      wait(
          "wait_until", -1, timeout,
          [&] {
            seen = s.load(std::memory_order_acquire);
            return compares(seen, cmp, value);
          },
          [](std::vector<Pending>*) {}, /*whole_group=*/true);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::Timeout) throw;
      std::ostringstream os;
      os << "timed out after " << timeout.count() << " ms waiting for slot " << slot
         << " of this rank's signal pad (" << label_ << ") to be " << to_string(cmp) << " " << value
         << "; it holds " << s.load(std::memory_order_acquire)
         << " (no peer made it so: is every rank running the same sequence of signals?)";
      throw_error(ErrorCode::Timeout, "wait_until", rank_, os.str());
    }
    return seen;
  }

  void barrier(int channel, Millis timeout, Stream) override {
    if (world_ == 1) return;
    // need[p]: bit 0 = our signal to p not yet placed, bit 1 = p's signal not yet consumed.
    std::vector<uint8_t> need(world_, 3);
    need[rank_] = 0;
    int left = 2 * (world_ - 1);
    wait(
        "barrier", channel, timeout,
        [&] {
          for (int p = 0; p < world_; ++p) {
            if (need[p] & 1) {
              auto s = slot(p, channel, rank_);
              if (s.load(std::memory_order_acquire) == 0) {
                s.store(1, std::memory_order_release);
                ring(ctrl(p));
                need[p] &= ~1;
                --left;
              }
            }
          }
          for (int p = 0; p < world_; ++p) {
            if (need[p] & 2) {
              auto s = slot(rank_, channel, p);
              if (s.load(std::memory_order_acquire) == 1) {
                s.store(0, std::memory_order_release);
                ring(ctrl(p));
                need[p] &= ~2;
                --left;
              }
            }
          }
          return left == 0;
        },
        [&](std::vector<Pending>* out) {
          for (int p = 0; p < world_; ++p) {
            if (need[p] & 2) out->push_back({p, false});
            if (need[p] & 1) out->push_back({p, true});
          }
        },
        /*whole_group=*/true);
  }

  // PeerFailure if any other rank's process has exited (the core's CPU waits call it).
  void check_peers_alive(const char* op, int channel) const override {
    auto none = [](std::vector<Pending>*) {};
    check_peers_alive(op, channel, none, /*whole_group=*/true);
  }

  // Set up by HostBackend::allocate.
  std::vector<void*>& maps() { return maps_; }
  void set_watch(int peer, std::shared_ptr<PidWatch> w) { watch_[peer] = std::move(w); }
  void set_crowded(bool crowded) { spin_ = crowded ? kSpinCrowded : kSpinAlone; }
  void set_abort(std::shared_ptr<detail::AbortState> a) { abort_ = std::move(a); }

 private:
  struct Pending {
    int peer;
    bool put;  // true: waiting for peer to consume our previous signal; false: for its signal
  };

  std::atomic_ref<uint32_t> slot(int owner, int channel, int src) const {
    return std::atomic_ref<uint32_t>(
        signal_pad(owner)[static_cast<size_t>(channel) * static_cast<size_t>(world_) +
                          static_cast<size_t>(src)]);
  }
  HostControl& ctrl(int r) const {
    return *reinterpret_cast<HostControl*>(static_cast<char*>(maps_[r]) + ctrl_off_);
  }

  std::string who(int r) const {
    std::string s = "rank " + std::to_string(r);
    if (global_[r] != r) s += " (global " + std::to_string(global_[r]) + ")";
    return s;
  }

  // Throws PeerFailure naming every dead peer among those we wait for (whole_group: among all
  // peers, since a barrier cannot complete without any of them).
  template <class Describe>
  void check_peers_alive(const char* op, int channel, Describe& pending, bool whole_group) const {
    std::vector<int> peers;
    if (whole_group) {
      for (int p = 0; p < world_; ++p) {
        if (p != rank_) peers.push_back(p);
      }
    } else {
      std::vector<Pending> p;
      pending(&p);
      for (const auto& x : p) peers.push_back(x.peer);
      std::sort(peers.begin(), peers.end());
      peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
    }
    std::ostringstream dead;
    int n = 0;
    for (int p : peers) {
      const auto& w = watch_[p];
      if (w && !w->alive()) dead << (n++ ? ", " : "") << who(p) << " (pid " << w->pid() << ")";
    }
    if (n == 0) return;
    std::vector<int> gone;
    for (int p : peers) {
      const auto& w = watch_[p];
      if (w && !w->alive()) gone.push_back(global_[p]);
    }
    detail::note_waiting_for(gone, true);  // for the flight recorder (core/trace.hpp)
    std::ostringstream os;
    os << "peer " << dead.str() << (n == 1 ? " has" : " have") << " exited while " << who(rank_)
       << " waited on channel " << channel << " of " << label_;
    throw_error(ErrorCode::PeerFailure, op, rank_, os.str());
  }

  template <class Progress, class Describe>
  void wait(const char* op, int channel, Millis timeout, Progress&& progress, Describe&& pending,
            bool whole_group = false) {
    if (progress()) return;
    const auto start = Clock::now();
    const auto deadline = start + timeout;
    // Spin briefly (cores to spare: the peer is probably running), then yield the core a few
    // times (it may be the one a peer needs; on an idle core a yield returns at once), then sleep.
    if (spin_.count() > 0) {
      const auto spin_end = start + spin_;
      do {
        for (int i = 0; i < 32; ++i) cpu_relax();
        if (progress()) return;
      } while (Clock::now() < spin_end);
    }
    for (int i = 0; i < kYields; ++i) {
      ::sched_yield();
      if (progress()) return;
    }
    auto next_liveness = start + kLivenessInterval;
    HostControl& me = ctrl(rank_);
    while (true) {
      uint32_t bell = me.doorbell.load(std::memory_order_acquire);
      me.sleepers.fetch_add(1, std::memory_order_seq_cst);
      bool done = progress();
      auto now = Clock::now();
      if (!done && now < deadline) {
        int64_t left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - now).count();
        futex_wait(&me.doorbell, bell, std::min(left, kSleepSliceNs));
      }
      me.sleepers.fetch_sub(1, std::memory_order_seq_cst);
      if (done || progress()) return;
      detail::check_not_aborted(abort_.get(), op, rank_);  // NOTE [group abort]
      now = Clock::now();
      if (now >= deadline) {
        std::vector<Pending> p;
        pending(&p);
        std::vector<int> peers;
        for (const auto& x : p) {
          if (std::find(peers.begin(), peers.end(), global_[x.peer]) == peers.end())
            peers.push_back(global_[x.peer]);
        }
        detail::note_waiting_for(peers, true);  // for the flight recorder (core/trace.hpp)
        std::ostringstream os;
        os << "timed out after " << timeout.count() << " ms on channel " << channel << " of "
           << label_ << " as " << who(rank_) << ", waiting for ";
        for (size_t i = 0; i < p.size(); ++i) {
          os << (i ? "; " : "") << who(p[i].peer)
             << (p[i].put ? " to consume this rank's previous signal" : " to signal");
        }
        throw_error(ErrorCode::Timeout, op, rank_, os.str());
      }
      if (now >= next_liveness) {
        next_liveness = now + kLivenessInterval;
        check_peers_alive(op, channel, pending, whole_group);
      }
    }
  }

  int rank_;
  int world_;
  std::vector<int> global_;
  std::shared_ptr<detail::AbortState> abort_;  // of the allocation's group
  std::string label_;
  size_t pad_off_;
  size_t ctrl_off_;
  size_t map_bytes_;
  std::chrono::microseconds spin_;
  std::vector<void*> maps_;
  std::vector<std::shared_ptr<PidWatch>> watch_;
};

// ---- the backend --------------------------------------------------------------------------------

class HostBackend final : public Backend {
 public:
  // Every op and every dtype of the tables, on CPU memory.
  // Every op moves every dtype; reductions take the rows with red 1 (NOTE [dtype table]).
  HostBackend()
      : Backend({{OpSet::of({OpKind::all_gather, OpKind::all_to_all, OpKind::all_to_all_v,
                             OpKind::broadcast, OpKind::put, OpKind::get, OpKind::barrier}),
                  DTypeSet::all(), DeviceTypeSet::of(DeviceType::cpu)},
                 {OpSet::of({OpKind::all_reduce, OpKind::reduce_scatter}), DTypeSet::reducible(),
                  DeviceTypeSet::of(DeviceType::cpu)}}) {}
  const char* name() const override { return "host"; }

  bool can_serve(const Group& group, Device device, std::string* why) const override {
    if (device.is_cuda()) {
      if (why != nullptr) {
        *why = "the host backend serves CPU memory only, not " + to_string(device) +
               "; GPU memory is served by cuda (one host), nvshmem or nccl";
      }
      return false;
    }
    if (!group.single_host()) {
      if (why != nullptr) {
        std::ostringstream os;
        std::vector<int> other;
        for (int r = 0; r < group.world_size(); ++r) {
          if (!group.same_host(r)) other.push_back(r);
        }
        os << "the ranks of group " << group.name() << " are not all on one host (rank "
           << group.rank() << " is on '" << group.host_id() << "'; ranks";
        for (size_t i = 0; i < other.size() && i < 16; ++i) os << (i ? ", " : " ") << other[i];
        if (other.size() > 16) os << " and " << other.size() - 16 << " more";
        os << " are elsewhere); the host backend reaches one host only. Backends that reach "
              "across hosts: nvshmem, nccl (GPU memory)";
        *why = os.str();
      }
      return false;
    }
    return true;
  }

  std::shared_ptr<BackendMemory> allocate(const Group& group, const RendezvousInfo& info) override;

  void run(const OpArgs& args) override { host_run_op(args); }
};

std::shared_ptr<BackendMemory> HostBackend::allocate(const Group& group,
                                                     const RendezvousInfo& info) {
  const char* op = "allocate";
  const int rank = group.rank();
  const int world = group.world_size();
  std::string why;
  if (!can_serve(group, info.device, &why)) throw_error(ErrorCode::Unsupported, op, rank, why);
  const auto deadline = Clock::now() + info.timeout;
  auto left = [&] {
    auto l = std::chrono::duration_cast<Millis>(deadline - Clock::now());
    return l.count() < 1 ? Millis(1) : l;
  };

  const size_t pad_off = round_up(info.bytes, kPage);
  const size_t ctrl_off = round_up(pad_off + info.signal_pad_bytes, alignof(HostControl));
  const size_t map_bytes = round_up(ctrl_off + sizeof(HostControl), kPage);
  std::vector<int> global(world);
  for (int r = 0; r < world; ++r) global[r] = group.global_rank(r);
  std::string label = "allocation #" + std::to_string(info.alloc_id) + " of group " + group.name();
  auto mem = std::make_shared<HostMemory>(rank, world, global, label, pad_off, ctrl_off, map_bytes,
                                          /*crowded=*/false);
  mem->set_abort(detail::abort_state(group));

  // This rank's memfd: sized, backed, sealed, mapped.
  std::string fd_name =
      "symmem:" + group.name() + "#" + std::to_string(info.alloc_id) + ":r" + std::to_string(rank);
  if (fd_name.size() > 200) fd_name.resize(200);
  FdCloser own{static_cast<int>(::memfd_create(fd_name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING))};
  SYMMEM_CHECK_SYS(op, rank, own.fd);
  SYMMEM_CHECK_SYS(op, rank, ::ftruncate(own.fd, static_cast<off_t>(map_bytes)));
  // Reserve the memory now, so that running out is an error here rather than SIGBUS later.
  int rc = ::posix_fallocate(own.fd, 0, static_cast<off_t>(map_bytes));
  if (rc == ENOSPC || rc == ENOMEM || rc == EFBIG) {
    throw_error(ErrorCode::System, op, rank,
                "not enough shared memory for " + std::to_string(map_bytes) + " bytes (" + label +
                    "): " + errno_text(rc));
  }
  SYMMEM_CHECK_SYS(op, rank,
                   ::fcntl(own.fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL));
  void* mine = ::mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, own.fd, 0);
  if (mine == MAP_FAILED) {
    throw_error(ErrorCode::System, op, rank,
                "mmap of " + std::to_string(map_bytes) + " bytes failed: " + errno_text(errno));
  }
  mem->maps()[rank] = mine;
  if (world == 1) return mem;

  // Rendezvous: publish where our channel listens, hand our memfd to every peer, map theirs.
  IpcChannel& channel = IpcChannel::instance(global[rank]);
  PeerInfo me{};
  me.alloc_id = info.alloc_id;
  me.map_bytes = map_bytes;
  me.pid = static_cast<int32_t>(::getpid());
  std::string ns = IpcChannel::pid_namespace();
  std::strncpy(me.pidns, ns.c_str(), sizeof(me.pidns) - 1);
  SYMMEM_CHECK(op, rank, channel.address().size() < sizeof(me.address), ErrorCode::Internal,
               "IPC address too long: " << channel.address());
  std::strncpy(me.address, channel.address().c_str(), sizeof(me.address) - 1);
  own_cpus(me.cpus);
  std::vector<PeerInfo> peers;
  try {
    peers = group_exchange(group, "symmem/host").all_gather(me);
  } catch (const Error& e) {
    throw_error(e.code(), op, rank, "host rendezvous of " + label + ": " + e.what());
  }
  for (int p = 0; p < world; ++p) {
    SYMMEM_CHECK(op, rank, peers[p].alloc_id == info.alloc_id && peers[p].map_bytes == map_bytes,
                 ErrorCode::Internal,
                 "rank " << p << " rendezvoused allocation #" << peers[p].alloc_id << " of "
                         << peers[p].map_bytes << " bytes with " << label << " of " << map_bytes
                         << " bytes");
  }
  // Crowded: the ranks outnumber the CPUs they may use together (each rank's own mask says
  // nothing about that: a rank that symmem-run bound to one core of its own has one CPU).
  {
    int cpus = 0;
    for (int w = 0; w < 16; ++w) {
      uint64_t all = 0;
      for (const PeerInfo& p : peers) all |= p.cpus[w];
      cpus += __builtin_popcountll(all);
    }
    mem->set_crowded(world > cpus);
  }
  auto tag = [&](int src, int dst) {
    return group.name() + "/" + std::to_string(info.alloc_id) + "/" + std::to_string(src) + ">" +
           std::to_string(dst);
  };
  Bytes payload(sizeof(uint64_t) * 2);
  uint64_t meta[2] = {info.alloc_id, map_bytes};
  std::memcpy(payload.data(), meta, sizeof(meta));
  for (int p = 0; p < world; ++p) {
    if (p == rank) continue;
    channel.send_fds(peers[p].address, p, tag(rank, p), {own.fd}, payload, left());
  }
  for (int p = 0; p < world; ++p) {
    if (p == rank) continue;
    bool same_ns = std::strncmp(peers[p].pidns, me.pidns, sizeof(me.pidns)) == 0;
    int store_pid = same_ns ? peers[p].pid : 0;
    Bytes got;
    int sender_pid = 0;
    auto fds = channel.recv_fds(tag(p, rank), p, &got, left(), store_pid, &sender_pid);
    std::vector<FdCloser> closers(fds.size());
    for (size_t i = 0; i < fds.size(); ++i) closers[i].fd = fds[i];
    SYMMEM_CHECK(op, rank, fds.size() == 1 && got.size() == payload.size(), ErrorCode::Internal,
                 "rank " << p << " sent " << fds.size() << " fds and " << got.size()
                         << " payload bytes for " << label);
    uint64_t theirs[2];
    std::memcpy(theirs, got.data(), sizeof(theirs));
    struct stat st {};
    SYMMEM_CHECK_SYS(op, rank, ::fstat(fds[0], &st));
    int seals = ::fcntl(fds[0], F_GET_SEALS);
    // A peer's memory must be sealed against shrinking: otherwise it could SIGBUS this rank.
    SYMMEM_CHECK(op, rank,
                 theirs[0] == info.alloc_id && theirs[1] == map_bytes &&
                     static_cast<uint64_t>(st.st_size) == map_bytes && seals >= 0 &&
                     (seals & F_SEAL_SHRINK) != 0,
                 ErrorCode::PeerFailure,
                 "rank " << p << " sent a memfd that does not match " << label << " (size "
                         << st.st_size << ", expected " << map_bytes << ", seals " << seals << ")");
    void* m = ::mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
    if (m == MAP_FAILED) {
      throw_error(ErrorCode::System, op, rank,
                  "mmap of rank " + std::to_string(p) + "'s " + std::to_string(map_bytes) +
                      " bytes failed: " + errno_text(errno));
    }
    mem->maps()[p] = m;
    mem->set_watch(p, watch_pid(sender_pid > 0 ? sender_pid : store_pid));
  }
  SYMMEM_LOG(TRACE, ALLOC) << "host: rank " << rank << " mapped " << label << " of " << world
                           << " ranks (" << map_bytes << " bytes each)";
  return mem;
}

}  // namespace
}  // namespace symmem::host

namespace symmem {

void host_check_peers_alive(const SymmetricMemory& buf, const char* op, int channel) {
  if (buf.backend_memory()) buf.backend_memory()->check_peers_alive(op, channel);
}

}  // namespace symmem

namespace symmem::host {
namespace {

const bool kRegistered = [] {
  register_backend(std::make_shared<HostBackend>());
  return true;
}();

}  // namespace
}  // namespace symmem::host
