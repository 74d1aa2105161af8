#pragma once

// The CPU-side synchronisation over a group's CPU workspace and that workspace's layout: used by
// the argument agreement of the core (ops.cpp) and by the host collectives (host_ops.cpp).
// Internal; it knows no backend (liveness comes from BackendMemory::check_peers_alive).
//
// NOTE [host ops signal channels]
// Host ops synchronise over the signal pad of the group's CPU workspace (group_workspace(group,
// cpu, ...)), never over the pads of users' buffers (put/get with a signal use the channel the
// user names, on the user's buffer). They use the two HIGHEST channels of that pad:
//   sync  = num_channels - 1 : counting semaphores, slot (sync * world + src) on the receiver's
//                              pad; a sender adds 1, the receiver waits for > 0 and subtracts 1.
//                              Zero at rest. Every op uses the same channel; counting makes
//                              back-to-back barriers safe (a fast rank's next signal only raises
//                              the count).
//   sleep = num_channels - 2 : slot (sleep * world + r) on rank r's own pad is 1 while rank r
//                              sleeps in futex_wait; a sender that sees it wakes the slot it
//                              raised. (Dekker pattern: both sides use seq_cst.)
// Channels below those are free for users of the workspace (none today).
//
// Waits spin (with pause) for a short while (20 us, or symmem-tune's "wait.spin_us"), then
// yield, then sleep on the futex of the slot with a bounded slice; every wait has a deadline and
// its Timeout error names the op, this rank, the awaited rank and the channel. A sleeping wait logs
// the ranks it still waits for every SYMMEM_WAIT_REPORT_S seconds (NOTE [wait reports] in
// core/wait_report.hpp).
//
// Workspace layout (bytes from the start of each rank's workspace buffer):
//   [0, desc_region)     two agreement descriptors (op sequence parity 0 and 1), written by
//                        ops.cpp on the owner's buffer and read by every peer, each followed
//                        by kInlineBytes of inline all_reduce input (NOTE [inline all-reduce])
//   [counts, +8*world)   all_to_all_v send counts of the owner
//   [data_offset, ...)   op data (staged inputs, partial results)

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/abort.hpp"
#include "core/memory_impl.hpp"
#include "core/trace.hpp"
#include "core/tuning.hpp"
#include "core/wait_report.hpp"
#include "symmem/backend.hpp"
#include "symmem/error.hpp"
#include "symmem/memory.hpp"

namespace symmem::detail {

using SyncClock = std::chrono::steady_clock;

// ---- workspace layout -------------------------------------------------------------------------
inline constexpr size_t kDescFixedBytes = 512;  // fixed fields + message
inline size_t align_up(size_t v, size_t a) {
  return (v + a - 1) / a * a;
}
// NOTE [inline all-reduce]: a small host all_reduce (at most kInlineBytes) travels with its
// descriptor. Each rank copies its input behind its descriptor before the agreement barrier,
// then reduces the ranks' copies in rank order straight after it. One barrier instead of two
// (agreement, then data ready or peers done). The copies of op k are rewritten at op k+2, like
// the descriptors, so no trailing barrier is needed.
inline constexpr size_t kInlineBytes = 8192;
inline size_t desc_fixed_bytes(int world) {
  return align_up(kDescFixedBytes + 2 * 8 * static_cast<size_t>(world), 64);
}
inline size_t desc_slot_bytes(int world) {
  return desc_fixed_bytes(world) + kInlineBytes;
}
inline size_t desc_offset(int world, uint64_t seq) {
  return (seq & 1) * desc_slot_bytes(world);
}
inline size_t inline_offset(int world, uint64_t seq) {
  return desc_offset(world, seq) + desc_fixed_bytes(world);
}
inline size_t counts_offset(int world) {
  return 2 * desc_slot_bytes(world);
}
// NOTE [arrival barrier]: in rank 0's part, per op parity, the arrival counter (a cache line) and
// the flag saying the last arriver reduced the inline all-reduce into the reduced area.
inline size_t arrivals_offset(int world, uint64_t seq) {
  return align_up(counts_offset(world) + 8 * static_cast<size_t>(world), 64) + (seq & 1) * 64;
}
inline size_t reduced_offset(int world, uint64_t seq) {
  return arrivals_offset(world, 0) + 128 + (seq & 1) * kInlineBytes;
}
inline size_t data_offset(int world) {
  return align_up(reduced_offset(world, 1) + kInlineBytes, 4096);
}

// ---- pad synchronisation ----------------------------------------------------------------------
class PadSync {
 public:
  // `ws`: the group's CPU workspace. Throws InvalidArgument when the pad has fewer than 2
  // channels (SYMMEM_SIGNAL_PAD_BYTES too small for this world size).
  PadSync(const SymmetricMemory& ws, const char* op, std::chrono::milliseconds timeout)
      : ws_(ws), op_(op), rank_(ws.rank()), world_(ws.world_size()), timeout_(timeout) {
    int nc = ws.num_channels();
    if (nc < 2) {
      throw_error(ErrorCode::InvalidArgument, op, rank_,
                  "the signal pad of the group workspace has " + std::to_string(nc) +
                      " channel(s) for " + std::to_string(world_) +
                      " ranks; host ops need 2: raise SYMMEM_SIGNAL_PAD_BYTES");
    }
    sync_ch_ = nc - 1;
    sleep_ch_ = nc - 2;
    // A CPU group workspace knows its peers' pads (NOTE [op fast path] in core/ops.cpp).
    const auto& known = ws.impl()->alloc->peer_pads;
    if (static_cast<int>(known.size()) == world_ && !ws.impl()->alloc->freed.load()) {
      pads_ = known.data();
    } else {
      own_pads_.resize(world_);
      for (int p = 0; p < world_; ++p) own_pads_[p] = ws.signal_pad(p);
      pads_ = own_pads_.data();
    }
    abort_ = abort_state(ws.group());  // NOTE [group abort]
    static const int cpus = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
    oversubscribed_ = world_ > cpus;
    spin_ = spin_time(world_);
  }

  PadSync(const PadSync&) = delete;  // pads_ may point into own_pads_
  PadSync& operator=(const PadSync&) = delete;
  PadSync(PadSync&&) = default;  // a moved vector keeps its buffer
  PadSync& operator=(PadSync&&) = delete;

  int rank() const { return rank_; }
  int world() const { return world_; }
  int channel() const { return sync_ch_; }
  bool oversubscribed() const { return oversubscribed_; }

  // NOTE [arrival barrier]
  // With more ranks than cores every wait costs the waiter a turn on a CPU, so the agreement's
  // barrier there is a central one: each rank adds 1 to `counter` (one cache line that all ranks
  // share), the rank that brings it to world is the last to arrive, and only it signals the
  // others (slot (sync, peer) of each peer's pad: a rank never signals itself in barrier(), so
  // that slot is free). Before it signals it resets the counter (the same counter is next used by
  // op seq + 2, which no rank reaches before every rank has left op seq + 1) and runs
  // `on_last`. Returns true on the last arriver. `missing()` names the ranks still to arrive, for
  // wait reports and the timeout message.
  template <class OnLast, class Missing>
  bool arrive(uint64_t* counter, OnLast&& on_last, Missing&& missing) {
    std::atomic_ref<uint64_t> c(*counter);
    if (c.fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<uint64_t>(world_)) {
      c.store(0, std::memory_order_relaxed);
      on_last();
      for (int k = 1; k < world_; ++k) {
        const int peer = (rank_ + k) % world_;
        signal_slot(peer, peer);
      }
      return true;
    }
    missing_ = missing;
    wait(rank_);
    missing_ = nullptr;
    return false;
  }

  // Raises slot (sync, me) on `peer`'s pad; data written before is visible to the peer after
  // its wait() returns.
  void signal(int peer) { signal_slot(peer, rank_); }

  // Raises slot (sync, src) on `peer`'s pad (see signal()).
  void signal_slot(int peer, int src) {
    uint32_t* slot = pads_[peer] + static_cast<size_t>(sync_ch_) * world_ + src;
    std::atomic_ref<uint32_t>(*slot).fetch_add(1, std::memory_order_seq_cst);
    uint32_t* sleeping = pads_[peer] + static_cast<size_t>(sleep_ch_) * world_ + peer;
    if (std::atomic_ref<uint32_t>(*sleeping).load(std::memory_order_seq_cst) != 0) {
      syscall(SYS_futex, slot, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
    }
  }

  // Waits until `src` has signalled this rank (one count), then consumes it.
  void wait(int src) {
    uint32_t* slot = pads_[rank_] + static_cast<size_t>(sync_ch_) * world_ + src;
    std::atomic_ref<uint32_t> s(*slot);
    // Spin (not when ranks outnumber cores: the peer needs this core), then yield ~kYieldTime,
    // then sleep. NOTE [pad wait backoff]: the long spin (kSpinTime) is skipped while the
    // signals of this process's recent waits arrived during a short sched_yield, i.e. while a
    // peer runs on this rank's CPU (unbound ranks the scheduler put together: spinning there
    // only delays the peer, 20 us per wait). A yield that returns at once (nobody else here) or
    // only after a long time (another program had the CPU) clears that hint again.
    if (!oversubscribed_) {
      for (int i = 0; i < 64; ++i) {
        if (s.load(std::memory_order_acquire) != 0) return consume(s);
        __builtin_ia32_pause();
      }
    }
    std::atomic<bool>& peer_here = peer_shares_cpu();
    const auto t0 = SyncClock::now();
    const bool spin = !oversubscribed_ && !peer_here.load(std::memory_order_relaxed);
    while (spin && SyncClock::now() - t0 < spin_) {
      for (int i = 0; i < 64; ++i) {
        if (s.load(std::memory_order_acquire) != 0) return consume(s);
        __builtin_ia32_pause();
      }
    }
    if (oversubscribed_) {
      // More ranks than cores: the yields are the scheduler's round robin among the ranks of a
      // core, so each rank runs once per op. The clock is read every 16 yields only (it was
      // three reads per yield: 12% of an 8-rank 4 KiB all_reduce on 2 cores).
      for (int i = 0;; ++i) {
        if (s.load(std::memory_order_acquire) != 0) return consume(s);
        if ((i & 15) == 15 && SyncClock::now() - t0 >= kYieldTime) break;
        sched_yield();
      }
    } else {
      while (SyncClock::now() - t0 < kYieldTime) {
        if (s.load(std::memory_order_acquire) != 0) return consume(s);
        const auto y0 = SyncClock::now();
        sched_yield();
        const auto took = SyncClock::now() - y0;
        if (s.load(std::memory_order_acquire) != 0) {
          const bool shared = took >= kSwitchMin && took < kPeerRunMax;
          if (shared != peer_here.load(std::memory_order_relaxed))
            peer_here.store(shared, std::memory_order_relaxed);
          return consume(s);
        }
      }
    }
    std::atomic_ref<uint32_t> sleeping(
        pads_[rank_][static_cast<size_t>(sleep_ch_) * world_ + rank_]);
    if (!deadline_set_) {  // the op's deadline starts at its first wait that does not end at once
      deadline_ = t0 + timeout_;
      deadline_set_ = true;
    }
    auto next_liveness = SyncClock::now() + std::chrono::milliseconds(50);
    WaitReport report(std::string(op_) + " (CPU sync of group " + ws_.group().name() + ")",
                      Subsys::COLL, rank_, t0, deadline_, timeout_);
    while (true) {
      sleeping.store(1, std::memory_order_seq_cst);
      if (s.load(std::memory_order_seq_cst) != 0) break;
      if (const AbortState* a = aborted_state(abort_.get())) {
        sleeping.store(0, std::memory_order_seq_cst);
        throw_aborted(*a, op_, rank_);
      }
      auto now = SyncClock::now();
      if (report.due(now)) report_missing(report, src);
      if (now >= deadline_) {
        sleeping.store(0, std::memory_order_seq_cst);
        if (missing_) throw_arrival_timeout();
        const int global_src = ws_.global_rank(src);
        note_waiting_for(&global_src, 1, true);  // for the flight recorder (core/trace.hpp)
        throw_error(ErrorCode::Timeout, op_, rank_,
                    "timed out after " + std::to_string(timeout_.count()) +
                        " ms waiting for rank " + std::to_string(src) + " (channel " +
                        std::to_string(sync_ch_) +
                        " of the group workspace's signal pad; is that rank still running "
                        "the same sequence of ops?)");
      }
      // A peer that died is reported now (PeerFailure naming it), not at the deadline.
      if (now >= next_liveness) {
        next_liveness = now + std::chrono::milliseconds(50);
        try {
          ws_.backend_memory()->check_peers_alive(op_, sync_ch_);
        } catch (...) {
          sleeping.store(0, std::memory_order_seq_cst);
          throw;
        }
      }
      auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline_ - now);
      if (left > std::chrono::milliseconds(50)) left = std::chrono::milliseconds(50);
      timespec ts{static_cast<time_t>(left.count() / 1000000000),
                  static_cast<long>(left.count() % 1000000000)};
      syscall(SYS_futex, slot, FUTEX_WAIT, 0, &ts, nullptr, 0);
    }
    sleeping.store(0, std::memory_order_relaxed);
    consume(s);
  }

  // Full barrier over the group (every rank signals every other rank, then waits for all).
  void barrier() {
    for (int k = 1; k < world_; ++k) signal((rank_ + k) % world_);
    for (int k = 1; k < world_; ++k) {
      barrier_step_ = k;  // for the wait report: peers k.. are still to be waited for
      wait((rank_ + world_ - k) % world_);
    }
    barrier_step_ = 0;
  }

 private:
  // One wait-report line: in a barrier, the peers still awaited whose signal has not come (their
  // slot on this rank's pad is 0); else `src`.
  void report_missing(WaitReport& report, int src) const {
    if (missing_) {  // arrive(): the ranks that have not arrived
      const std::vector<int> m = missing_();
      return report.ranks(m, world_ - static_cast<int>(m.size()), world_);
    }
    if (barrier_step_ == 0) return report.ranks({src}, -1, -1);
    std::vector<int> missing;
    for (int k = barrier_step_; k < world_; ++k) {
      const int p = (rank_ + world_ - k) % world_;
      uint32_t* slot = pads_[rank_] + static_cast<size_t>(sync_ch_) * world_ + p;
      if (p == src || std::atomic_ref<uint32_t>(*slot).load(std::memory_order_relaxed) == 0) {
        missing.push_back(p);
      }
    }
    report.ranks(missing, world_ - static_cast<int>(missing.size()), world_);
  }

  static void consume(std::atomic_ref<uint32_t>& s) { s.fetch_sub(1, std::memory_order_acq_rel); }

  [[noreturn]] void throw_arrival_timeout() const {
    const std::vector<int> m = missing_();
    std::vector<int> global;
    std::string names;
    for (int p : m) {
      global.push_back(ws_.global_rank(p));
      names += (names.empty() ? "" : ", ") + std::to_string(p);
    }
    note_waiting_for(global.data(), static_cast<int>(global.size()), true);
    throw_error(ErrorCode::Timeout, op_, rank_,
                "timed out after " + std::to_string(timeout_.count()) + " ms waiting for rank(s) " +
                    (names.empty() ? "?" : names) +
                    " to arrive (the arrival counter of the group workspace; are those ranks "
                    "still running the same sequence of ops?)");
  }

  SymmetricMemory ws_;
  std::shared_ptr<AbortState> abort_;
  const char* op_;
  int rank_;
  int world_;
  std::chrono::milliseconds timeout_;
  int sync_ch_ = 0;
  int sleep_ch_ = 0;
  bool oversubscribed_ = false;
  int barrier_step_ = 0;                       // > 0 inside barrier(): the step being waited for
  std::function<std::vector<int>()> missing_;  // set inside arrive()
  std::chrono::microseconds spin_{0};          // spin_time()
  // The long spin's length: symmem-tune's host entry "wait.spin_us" for this many ranks on this
  // machine (NOTE [tuning file]), else kSpinTime. Kept per thread until tuning::generation()
  // moves (symmem-tune changes it between measurements).
  static constexpr std::chrono::microseconds kSpinTime{20};
  static std::chrono::microseconds spin_time(int world) {
    thread_local tuning::HostEntry e{"wait.spin_us", 0, 1000000};
    return std::chrono::microseconds(tuning::host_value(e, world, kSpinTime.count()));
  }
  // NOTE [pad wait backoff]: a sched_yield that took [kSwitchMin, kPeerRunMax) ran someone else
  // briefly; with the awaited signal there afterwards, that was the peer.
  static constexpr std::chrono::nanoseconds kSwitchMin{1500};
  static constexpr std::chrono::microseconds kPeerRunMax{200};
  static std::atomic<bool>& peer_shares_cpu() {
    static std::atomic<bool> hint{false};
    return hint;
  }
  static constexpr std::chrono::microseconds kYieldTime{20000};
  uint32_t* const* pads_ = nullptr;  // per peer: its signal pad
  std::vector<uint32_t*> own_pads_;  // where the workspace did not know them
  SyncClock::time_point deadline_;
  bool deadline_set_ = false;
};

}  // namespace symmem::detail
