#pragma once

// The host side of NOTE [device timeouts] (include/symmem/device/sync.cuh).
//
// NOTE [timeout record]
// Each process has one timeout record per plugin: 4 int32 in pinned, host-mapped, portable
// memory (cudaHostAlloc(Mapped|Portable)); with unified addressing its host address is also
// its device address, and it is what every DeviceHandle this plugin hands out carries in
// timeout_record. A device-side wait that passes its deadline fills it (flag, rank, channel,
// peer) and makes its kernel return instead of spinning. The host notices in two places:
//   - after every stream synchronisation symmem performs itself (barrier/put_signal/
//     wait_signal and the group barrier op on the null stream synchronise it, so they raise
//     at once; the op error record too, NOTE [device-detected errors] in cuda_ops.cu);
//   - before every launch of a symmem kernel (every op and device-side sync of this plugin): a
//     timeout of an earlier asynchronous call is raised by the next symmem call of the process.
//     free() and destructors never throw, so they do not raise it (docs/design.md, "Stream-
//     ordered errors").
// Raising clears the record (the first failure is reported once), and the error is Timeout:
// "<op>: rank R: device-side wait timed out: rank R waited on channel C for rank P ...".
// Reading the record needs no synchronisation: the kernel writes flag, rank, channel and peer
// with one 16-byte store (no atomics on host memory: NOTE [device records] in
// symmem/device/sync.cuh, the protocol the library's collective kernels use too).

//
// NOTE [wait progress] (host side)
// Beside the timeout record each process has a progress record (kProgressSlots vectors,
// host-mapped like it; the device side is NOTE [wait progress] in symmem/device/sync.cuh): the
// device-side syncs (barrier/put_signal/wait_signal) note in it a wait that has lasted
// SYMMEM_WAIT_REPORT_S. Where symmem itself synchronises a stream (the null stream, above), it
// polls the stream (cudaStreamQuery: yielding for 1 ms, then sleeping up to 2 ms) instead of
// blocking, and every SYMMEM_WAIT_REPORT_S it logs the WARN line of host waits: "barrier (GPU,
// channel 3): rank 0 has waited 2.0 s for rank 1; 4.0 s left of the 6.0 s timeout", the ranks read
// from the progress record. Waits on explicit streams (asynchronous by contract) are not watched:
// nothing runs on the host while they spin.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "symmem/store.hpp"

namespace symmem {
class Group;
}

namespace symmem::cuda {

// NOTE [device abort] (host side; the device side is NOTE [device abort] in
// symmem/device/sync.cuh)
// Each process has one abort table: kAbortSlots int32 words in host-mapped memory, a word per
// group that runs GPU work in this process (slots are never reused; past the last one a group's
// kernels only time out, said once in the log). abort_slot(group) gives the group its word on
// first use and hooks it to the group's abort state and its ancestors' (NOTE [group abort] in
// src/core/abort.hpp): aborting the group, or the liveness watcher finding a dead peer (NOTE
// [liveness watcher], registered here too), sets the word, and the group's kernels stop waiting
// within about a millisecond. A wait stopped so writes flag kAbortFlagBase + slot in the timeout
// record; raise_device_timeout() turns that into the group's abort error (Aborted or
// PeerFailure, with its reason) when raised for that group, and drops it quietly when raised
// for another one (the aborted group's own ops raise at entry anyway).
// Only the cuda plugin gives slots (AbortState::device_slot is one number per group; each plugin
// linking this file has its own table).
inline constexpr int kAbortSlots = 4096;
struct AbortSlot {
  const int32_t* word = nullptr;  // null: no slot
  int32_t slot = -1;
};
AbortSlot abort_slot(const Group& group);

// NOTE [orphan stop flags] (host side; the device side is the NOTE of that name in
// symmem/device/sync.cuh)
// Every CudaMemory registers its ranks' orphan stop flags here (flags[p]: rank p's flag, as a
// device address of this process, mapped on `device`) after its rendezvous, and unregisters
// them before it unmaps anything. The hook that abort_slot() puts on the group's abort state
// (and its ancestors') then, when the state is set, finds the group's ranks whose process is
// gone (detail::gone_local_ranks: /proc, no store) and stores 1 into their flags in every
// registered allocation of the group, with cudaMemsetAsync on a private non-blocking stream per
// device (no host wait; CudaMemory::release synchronises the context after unregistering, so a
// store never lands in unmapped memory). A kernel the dead process left waiting then stops
// within about a millisecond instead of at its deadline. The hook runs once; a rank found gone
// only later is flagged when an allocation of the aborted group is freed (unregister does it
// first, for that allocation). register returns the registration's id (0: none made).
uint64_t register_orphan_flags(const Group& group, int device, std::vector<int32_t*> flags);
void unregister_orphan_flags(uint64_t id) noexcept;

// The process-wide record (created on first use, on the current device's context).
int32_t* timeout_record();

// True when a device-side wait has recorded a timeout that was not raised yet.
bool device_timeout_pending() noexcept;

// Throws Timeout (and clears the record) when one is pending; `op`/`rank` start the message. A
// wait ended by an abort (NOTE [device abort]) throws that abort's error when `current_slot` is
// its group's slot or -1 (any), and is cleared silently for another group's slot.
void raise_device_timeout(std::string_view op, int rank, int32_t current_slot = -1);

// The process-wide progress record (NOTE [wait progress]), created on first use; its slots
// (symmem::device::kProgressSlots, checked in device_sync.cu).
int32_t* progress_record();
inline constexpr int kProgressSlots = 256;

// How long a device-side wait spins before it notes itself in the progress record (half of
// SYMMEM_WAIT_REPORT_S, in ns, so the note is there when the first line is due), or 0 (no note)
// when the reports are off or the interval is not shorter than `timeout`.
uint64_t progress_after_ns(Millis timeout);

// Waits for everything queued on `stream` (the host side of a synchronous GPU call), logging a
// wait report every SYMMEM_WAIT_REPORT_S while it lasts; `what` names the wait ("barrier (GPU,
// channel 3)"), `timeout` is the call's. Then raises a CUDA error of the stream (Cuda), a
// recorded device-side timeout (Timeout) or a device-detected op error of an earlier GPU op
// (NOTE [device-detected errors] in cuda_ops.cu) with `op`/`rank` starting the message.
void synchronize_and_raise(std::string_view op, int rank, cudaStream_t stream, Millis timeout,
                           const std::string& what, int32_t abort_slot = -1);

// A resolved timeout (NOTE [timeouts] in symmem/store.hpp: the core resolves every user's
// timeout before a backend sees it) in nanoseconds for DeviceHandle::timeout_ns and the
// kernels' SyncArgs::timeout_ns. Never 0, so the kernels need no default of their own: 0 ms
// ("do not wait") becomes 1 ns. An unresolved (negative) value is resolved by the same rule.
uint64_t timeout_to_ns(Millis timeout);

}  // namespace symmem::cuda
