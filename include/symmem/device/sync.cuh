#pragma once

// symmem device-side synchronisation on a DeviceHandle: put_signal / wait_signal / barrier for
// one thread, one warp or one block, each with its memory order as a template parameter and a
// deadline. Header-only CUDA; bodies in sync_impl.cuh.
//
//   __global__ void my_kernel(symmem::DeviceHandle h, ...) {
//     ... write into peers' buffers (h.buffers[peer]) ...
//     if (symmem::device::barrier_block(h, /*channel=*/blockIdx.x) != symmem::device::Status::ok)
//       return;  // timed out: recorded for the host (NOTE [device timeouts]); leave the kernel
//     ... read what the peers wrote ...
//   }
//
// Contract
// - Signal pad (NOTE [signal pad] in symmem/device_handle.hpp): each rank's pad is pad_slots
//   uint32_t slots, zero at rest; slot (channel, src) = channel * world_size + src lives in the
//   pad of the rank that waits.
//     put_signal(h, dst, ch)   waits until slot (ch, h.rank) of dst's pad is 0, then sets it
//                              to 1 (compare-and-swap 0 -> 1 at system scope, order kOrder:
//                              relaxed or release);
//     wait_signal(h, src, ch)  waits until slot (ch, src) of this rank's pad is 1, then sets it
//                              back to 0 (compare-and-swap 1 -> 0, order relaxed or acquire);
//     barrier(h, ch)           put_signal to every rank (itself included) then wait_signal
//                              from every rank; kOrder acq_rel (default) releases this side's
//                              earlier writes and acquires every peer's.
//   A slot therefore holds at most one pending signal: a second put_signal on the same
//   (dst, channel) waits until the first was consumed. Every rank of the handle must call the
//   matching operation on the same channel; channels are independent, so concurrent barriers
//   (e.g. one per block) must use distinct channels (channel < h.num_channels).
// - Scopes: *_thread functions are called by one thread; *_warp by all 32 lanes of a converged
//   warp (lane i serves peers i, i+32, ...); *_block by every thread of the block (thread t
//   serves peers t, t+blockDim, ...; contains __syncthreads(), so not under divergent control
//   flow). The warp and block forms release the writes of the whole warp/block made before the
//   call and make every peer's writes visible to the whole warp/block after it.
// - All peers must be directly reachable (h.signal_pads[peer] != nullptr), as they are with the
//   cuda backend. Arguments are not range-checked on the device.
// - Every wait is bounded: see NOTE [device timeouts]. The result is Status::ok or
//   Status::timeout; the warp/block forms return the same value in every lane/thread.
//
// NOTE [device timeouts]
// A device-side wait never spins forever. Each operation takes one deadline when it starts:
// now (%globaltimer, ns) + h.timeout_ns (0 means kDefaultTimeoutNs). Every spin iteration
// re-reads %globaltimer; past the deadline the operation
//   1. records the failure in h.timeout_record, 4 x int32 in host-mapped (pinned) memory, as
//      a device record (NOTE [device records]) of one vector: {1, h.rank, channel, the peer it
//      was waiting for};
//   2. returns Status::timeout (warp/block forms: in every lane/thread) so the kernel can exit
//      cleanly. With SYMMEM_DEVICE_TRAP_ON_TIMEOUT defined before this header it executes
//      __trap() instead, which aborts the kernel but leaves the CUDA context unusable (a sticky
//      error), so symmem's own kernels never trap. A null timeout_record also traps: without a
//      record the host would see a kernel that silently did nothing.
// The host side (the cuda backend) checks the record after each stream synchronisation it
// performs and before each launch, and turns a set flag into a symmem Timeout error naming the
// rank, channel and peer, then clears it. A kernel that timed out has not done its work and
// the pad may hold a stale signal: the allocation should be treated as broken.
//
// NOTE [device abort]
// A wait also gives up when its group is aborted (Group::abort, or the liveness watcher after a
// peer's process exited: NOTE [liveness watcher] in src/core/abort.hpp). h.abort_word points to
// the group's abort word, an int32 in host-mapped memory that the host sets to 1; a wait that
// has lasted kAbortPollAfterNs reads it at each deadline check (a wait shorter than that never
// reads it, so a working op pays nothing). The record then gets flag kAbortFlagBase +
// h.abort_slot instead of 1, which the host raises as the group's abort error (Aborted or
// PeerFailure) instead of Timeout. A null abort_word (a handle built by hand) only times out.
//
// NOTE [orphan stop flags]
// The abort word lives in the waiting process's own host memory, so nobody can set it once that
// process is dead: a kernel it left running (under MPS a killed client's kernel keeps its SMs
// until it returns) would spin until its deadline, and the survivors' frees and allocations may
// wait for it. So each rank's part of every allocation of the cuda backend also holds an orphan
// stop flag (h.orphan_flag: an int32 of device memory, past the signal pad, zero at rest), which
// the peers map like the rest of the part. When a group is aborted (Group::abort, the liveness
// watcher, shrink()), each surviving rank stores 1 into the flag of every rank of the group whose
// process is gone, in every live allocation of the group (src/cuda/timeout_record.hpp). Waits
// read the flag beside the abort word, by the same rule (only after kAbortPollAfterNs of
// waiting, so a working op never loads it), and stop the same way. Live ranks' flags are never
// set: their own host decides (abort stays local to a process, NOTE [group abort]). A null
// orphan_flag: no flag.
//
// NOTE [wait progress]
// How a wait that lasts tells the host whom it waits for (the host logs it: NOTE [wait reports]
// in core/wait_report.hpp, and the cuda backend's NOTE [timeout record]). A Deadline may carry a
// progress record: kProgressSlots vectors of 4 int32 in host-mapped memory, slot p %
// kProgressSlots for peer p. A thread-level put_signal/wait_signal that is still spinning when
// %globaltimer passes deadline.report_ns stores {1, rank, channel, peer} in its peer's slot (one
// 16-byte volatile store and __threadfence_system(), no atomics: NOTE [device records]), once,
// and stores {0, 0, 0, 0} there when the wait ends (done or timed out). The fast path pays
// nothing: a wait reads %globaltimer on each spin already (for its deadline), and the note is
// one more comparison there. Two waits on one peer at once (two streams) may clear each other's
// note: the record is for diagnostics only. Without a record (the default) nothing is noted.
//
// NOTE [device records]
// How a kernel reports a failure to the host: a record of kVecs 16-byte vectors (int32 words,
// 16-byte aligned) in host-mapped memory, word [0] the flag (0: empty, 1: set). The host reads
// it without synchronising: it looks at [0], and only when it is 1 at the rest; it clears the
// payload first and [0] last. write_record, the one writer (of the timeout record above, the
// cuda backend's op error record and the nvshmem backend's all_to_all_v record), does, unless
// [0] != 0 already:
//   1. vectors 1..kVecs-1 (the tail) with 16-byte volatile stores, then __threadfence_system();
//   2. vector 0 (the head: the flag and three payload words) with one 16-byte volatile store,
//      then __threadfence_system().
// So a host that sees the flag sees the whole head with it and a tail written before it. No
// atomics: system-scope atomics on host memory need PCIe atomics, which many hosts lack (and
// a device-scope atomicCAS is not atomic with respect to the host or another GPU). Writers
// racing (several threads or GPUs failing at the same moment) may each store: every head is
// whole and a true failure, but with kVecs > 1 the tail may be another racer's. A thread that
// wrote sees its own flag, so its later write_record calls do nothing: the first failure stays.

#include <cstdint>

#include "symmem/device/primitives.cuh"
#include "symmem/device_handle.hpp"
#include "symmem/env.hpp"

namespace symmem::device {

enum class Status : int { ok = 0, timeout = 1 };

// For handles whose timeout_ns is 0 (one built by hand): SYMMEM_TIMEOUT_MS's declared default.
// Handles from SymmetricMemory::device_handle() always carry a resolved, nonzero timeout_ns.
inline constexpr uint64_t kDefaultTimeoutNs =
    static_cast<uint64_t>(env::defaults::timeout_ms.as_int()) * 1000000ull;
inline constexpr int kTimeoutRecordInts = 4;  // [flag, rank, channel, peer]
// Wait progress record (NOTE [wait progress]): slot p % kProgressSlots of peer p, 4 int32 each.
inline constexpr int kProgressSlots = 256;

// A point in %globaltimer time after which waits give up, and optionally a wait progress record
// (NOTE [wait progress]) that waits still spinning at report_ns note themselves in.
// NOTE [device abort]: how long a wait spins before it looks at the abort word, and the
// record flag of an aborted wait (kAbortFlagBase + the group's abort slot).
inline constexpr uint64_t kAbortPollAfterNs = 1000000;  // 1 ms
inline constexpr int32_t kAbortFlagBase = kDeviceAbortFlagBase;

struct Deadline {
  uint64_t end_ns;
  uint64_t report_ns = ~0ull;       // %globaltimer time after which a wait notes its progress
  int32_t* progress = nullptr;      // kProgressSlots vectors in host-mapped memory, or null
  const int32_t* abort = nullptr;   // the group's abort word (NOTE [device abort]), or null
  const int32_t* orphan = nullptr;  // this rank's orphan stop flag (NOTE [orphan stop flags])
  uint64_t abort_after_ns = ~0ull;  // %globaltimer time after which `abort`/`orphan` are read
  __device__ static Deadline after(uint64_t timeout_ns);  // 0: kDefaultTimeoutNs
  __device__ static Deadline of(const DeviceHandle& h) {
    return after(h.timeout_ns).with_abort(h.abort_word, h.orphan_flag);
  }
  // Past the deadline, or (after kAbortPollAfterNs) the group aborted.
  __device__ bool expired() const {
    const uint64_t now = globaltimer_ns();
    return now > end_ns || (now > abort_after_ns && aborted());
  }
  __device__ bool aborted() const {
    return (abort != nullptr && *reinterpret_cast<const volatile int32_t*>(abort) != 0) ||
           (orphan != nullptr && *reinterpret_cast<const volatile int32_t*>(orphan) != 0);
  }
  // The same deadline, also ended by the abort word `word` and the orphan stop flag `orphan_flag`
  // (null: not that one).
  __device__ Deadline with_abort(const int32_t* word, const int32_t* orphan_flag = nullptr) const;
  // The same deadline with progress notes into `rec` after `report_after_ns` of waiting (from
  // now); a null rec or 0 leaves it without notes.
  __device__ Deadline with_progress(int32_t* rec, uint64_t report_after_ns) const;
};

// Notes (or clears: set = false) "rank waits on channel for peer" in its progress slot.
SYMMEM_DEVICE_INLINE void note_progress(int32_t* rec, bool set, int rank, int channel, int peer);

// Peer buffer / pad accessors (no checks).
template <class T = void>
SYMMEM_DEVICE_INLINE T* peer_ptr(const DeviceHandle& h, int peer);
// Address of slot (channel, src) in the pad of rank `owner`.
SYMMEM_DEVICE_INLINE uint32_t* signal_slot(const DeviceHandle& h, int owner, int channel, int src);

// Writes a device record (NOTE [device records]) at rec: v[0] is the head, v[0].x the flag
// (1); v[1..kVecs) the tail. Returns false (and writes nothing) when rec[0] was already set.
template <int kVecs>
SYMMEM_DEVICE_INLINE bool write_record(int32_t* rec, const uint4 (&v)[kVecs]);
// The timeout record {flag, rank, channel, peer} through write_record; no trap, rec not null.
// flag: 1 timed out, kAbortFlagBase + slot ended by the abort of the group with that abort slot.
SYMMEM_DEVICE_INLINE bool write_timeout_record(int32_t* rec, int rank, int channel, int peer,
                                               int32_t flag = 1);
// Records a timeout (see the NOTE); then traps if SYMMEM_DEVICE_TRAP_ON_TIMEOUT is defined or
// the record is null. Returns Status::timeout.
SYMMEM_DEVICE_INLINE Status record_timeout(const DeviceHandle& h, int channel, int peer);

// One thread. kOrder: put relaxed|release, wait relaxed|acquire, barrier any.
template <MemOrder kOrder = MemOrder::release>
SYMMEM_DEVICE_INLINE Status put_signal(const DeviceHandle& h, int dst, int channel);
template <MemOrder kOrder = MemOrder::acquire>
SYMMEM_DEVICE_INLINE Status wait_signal(const DeviceHandle& h, int src, int channel);
template <MemOrder kOrder = MemOrder::acq_rel>
SYMMEM_DEVICE_INLINE Status barrier(const DeviceHandle& h, int channel);
// The same with an explicit deadline shared by several operations.
template <MemOrder kOrder = MemOrder::release>
SYMMEM_DEVICE_INLINE Status put_signal(const DeviceHandle& h, int dst, int channel,
                                       Deadline deadline);
template <MemOrder kOrder = MemOrder::acquire>
SYMMEM_DEVICE_INLINE Status wait_signal(const DeviceHandle& h, int src, int channel,
                                        Deadline deadline);

// One full warp (all 32 lanes, converged).
template <MemOrder kOrder = MemOrder::release>
SYMMEM_DEVICE_INLINE Status put_signal_warp(const DeviceHandle& h, int dst, int channel);
template <MemOrder kOrder = MemOrder::acquire>
SYMMEM_DEVICE_INLINE Status wait_signal_warp(const DeviceHandle& h, int src, int channel);
template <MemOrder kOrder = MemOrder::acq_rel>
SYMMEM_DEVICE_INLINE Status barrier_warp(const DeviceHandle& h, int channel);
template <MemOrder kOrder = MemOrder::acq_rel>
SYMMEM_DEVICE_INLINE Status barrier_warp(const DeviceHandle& h, int channel, Deadline deadline);

// Every thread of the block.
template <MemOrder kOrder = MemOrder::release>
SYMMEM_DEVICE_INLINE Status put_signal_block(const DeviceHandle& h, int dst, int channel);
template <MemOrder kOrder = MemOrder::acquire>
SYMMEM_DEVICE_INLINE Status wait_signal_block(const DeviceHandle& h, int src, int channel);
template <MemOrder kOrder = MemOrder::acq_rel>
SYMMEM_DEVICE_INLINE Status barrier_block(const DeviceHandle& h, int channel);

}  // namespace symmem::device

#include "symmem/device/sync_impl.cuh"
