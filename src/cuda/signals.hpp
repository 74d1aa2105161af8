#pragma once

// NVSHMEM-style signals on raw signal-pad slots for GPU memory (SymmetricMemory::signal_op /
// wait_until; the host backend's are in src/host/host_backend.cpp). Each is one single-thread
// kernel on the caller's stream, so it is ordered with the stream's other work and
// graph-capturable.
//
// NOTE [GPU signals]
// - signal_op(peer, slot, value, set|add): slot `slot` of `peer`'s pad becomes `value` (a
//   release store at system scope) or grows by it (a compare-and-swap loop at system scope,
//   release order, wrapping). What the stream ran before the kernel (kernels, copies) is visible
//   to the peer once its wait sees the value: the kernel boundary orders it before the release.
//   It never waits.
// - wait_until(slot, cmp, value, timeout): spins on this rank's slot with relaxed system-scope
//   loads until `slot cmp value` holds (unsigned), then takes an acquire fence, so what the
//   stream runs after it sees what the signalling rank wrote before its signal_op. Like the other
//   device-side waits (NOTE [device timeouts] in symmem/device/sync.cuh) it has a deadline
//   (the call's timeout, resolved by the core) and ends on its group's abort word (NOTE [device
//   abort]); a wait that ends so fills the process's timeout record with channel slot /
//   world_size and peer slot % world_size, i.e. the pad slot in the record's own terms
//   (channel * world_size + peer), and returns without having seen its value.
// - On the null stream both are synchronous (like barrier there, docs/design.md "Stream-ordered
//   errors"): the call synchronises the stream and raises at once. wait_until then returns the
//   value it saw, and its Timeout names the rank, the slot, the comparison, the value waited for
//   and the value the slot held (the kernel leaves them in a host-mapped result word of its
//   own). On any other stream the call returns after enqueueing (wait_until returns 0, the value
//   not being known yet) and a timeout is raised by the next symmem op or device-side sync of
//   the process, with the timeout record's message.

#include <cstddef>
#include <cstdint>

#include "symmem/device_handle.hpp"
#include "symmem/store.hpp"
#include "symmem/types.hpp"

namespace symmem::cuda {

// `h`: the allocation's handle (rank, world size, abort word; its timeout fields are filled
// here). `target`: the slot's device address in the peer's pad (signal_op) or this rank's pad
// (wait_until); `slot` its index, for messages; `device`: the allocation's CUDA device.
void device_signal_op(const DeviceHandle& h, uint32_t* target, int peer, size_t slot,
                      uint32_t value, SignalOp op, Stream stream, int device);
uint32_t device_wait_until(DeviceHandle h, const uint32_t* target, size_t slot, Cmp cmp,
                           uint32_t value, Millis timeout, Stream stream, int device);

}  // namespace symmem::cuda
