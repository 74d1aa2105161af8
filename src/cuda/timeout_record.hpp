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
//     wait_signal on the null stream synchronise it, so they raise at once);
//   - before every launch of a symmem kernel and in free(): a timeout of an earlier
//     asynchronous call is raised by the next symmem call, as the API promises.
// Raising clears the record (the first failure is reported once), and the error is Timeout:
// "<op>: rank R: device-side wait timed out: rank R waited on channel C for rank P ...".
// Reading the record needs no synchronisation: the kernel writes flag, rank, channel and peer
// with one 16-byte store (no atomics on host memory: NOTE [device records] in
// symmem/device/sync.cuh, the protocol the library's collective kernels use too).

#include <cstdint>
#include <string_view>

#include "symmem/store.hpp"

namespace symmem::cuda {

// The process-wide record (created on first use, on the current device's context).
int32_t* timeout_record();

// True when a device-side wait has recorded a timeout that was not raised yet.
bool device_timeout_pending() noexcept;

// Throws Timeout (and clears the record) when one is pending; `op`/`rank` start the message.
void raise_device_timeout(std::string_view op, int rank);

// A resolved timeout (NOTE [timeouts] in symmem/store.hpp: the core resolves every user's
// timeout before a backend sees it) in nanoseconds for DeviceHandle::timeout_ns and the
// kernels' SyncArgs::timeout_ns. Never 0, so the kernels need no default of their own: 0 ms
// ("do not wait") becomes 1 ns. An unresolved (negative) value is resolved by the same rule.
uint64_t timeout_to_ns(Millis timeout);

}  // namespace symmem::cuda
