#pragma once

// The plain, trivially-copyable view of a symmetric allocation that kernels receive
// (SymmetricMemory::device_handle()). Host code may pass it by value to a kernel; the
// device-side helpers in symmem/device/ operate on it. No CUDA headers needed here.
//
// Signal pads (NOTE [signal pad]): each rank's pad is an array of uint32_t slots, zero at rest.
// Slot index = channel * world_size + src. put_signal(dst, ch) by rank src sets dst's slot
// (ch, src) to 1 with release semantics, after waiting for it to be 0; wait_signal(src, ch) on
// rank dst waits for its own slot (ch, src) to be 1 with acquire semantics, then resets it to 0.
// A barrier on channel ch is put_signal to every peer then wait_signal from every peer.

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace symmem {

struct DeviceHandle {
  int32_t rank = 0;
  int32_t world_size = 0;
  uint64_t size = 0;                       // bytes of each rank's buffer (this view)
  uint32_t num_channels = 0;               // signal channels per pad
  uint32_t pad_slots = 0;                  // uint32_t slots per pad (>= num_channels * world_size)
  void* const* buffers = nullptr;          // [world_size] peer buffer pointers, device memory;
                                           // nullptr for peers not directly reachable
  uint32_t* const* signal_pads = nullptr;  // [world_size] peer signal pads, device memory
  // Where a device-side wait records a timeout (host-mapped, written without atomics as NOTE
  // [device records] says); see NOTE [device timeouts]. Layout: [0] = flag (0 ok / 1 timed
  // out), [1] = rank that waited, [2] = channel, [3] = peer waited on.
  int32_t* timeout_record = nullptr;
  uint64_t timeout_ns = 0;  // deadline of every device-side wait, in %globaltimer ns
  // The group's abort word (host-mapped; NOTE [device abort] in symmem/device/sync.cuh): waits
  // also end when it is set. Null: they only time out. abort_slot names it in the record.
  const int32_t* abort_word = nullptr;
  int32_t abort_slot = -1;
  // This rank's orphan stop flag (NOTE [orphan stop flags] in symmem/device/sync.cuh): an int32 in
  // this rank's own part of the allocation (device memory, past the signal pad) that surviving
  // peers set when they find this rank's process gone, so a kernel it left running stops. Read
  // with abort_word, and as cheaply (only by a wait that has lasted 1 ms). Null: not used.
  const int32_t* orphan_flag = nullptr;
};

static_assert(std::is_trivially_copyable_v<DeviceHandle>);

// The timeout record's flag of a wait ended by its group's abort: this + abort_slot (NOTE
// [device abort] in symmem/device/sync.cuh); 1 is a timeout.
inline constexpr int32_t kDeviceAbortFlagBase = 2;

}  // namespace symmem
