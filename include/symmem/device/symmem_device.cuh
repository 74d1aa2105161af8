#pragma once

// The symmem device API for users' own kernels (header-only CUDA):
//   #include <symmem/device/symmem_device.cuh>
//   __global__ void k(symmem::DeviceHandle h) { ... symmem::device::barrier_block(h, 0) ... }
// Host side: pass SymmetricMemory::device_handle() by value as a kernel argument.
//
//   symmem/device_handle.hpp        the handle (rank, world, peer pointer and pad tables)
//   symmem/device/primitives.cuh    system-scope loads/stores/atomics, volatile polls,
//                                   %globaltimer, 16-byte vector loads/stores for peer memory
//                                   (NOTE [polling loads], NOTE [hand PTX or libcu++])
//   symmem/device/sync.cuh          put_signal / wait_signal / barrier (thread, warp, block)
//                                   with memory orders and deadlines (NOTE [device timeouts]);
//                                   write_record for host-mapped failure records
//                                   (NOTE [device records])
// symmem's own kernels are written on these headers too.

#include "symmem/device/primitives.cuh"
#include "symmem/device/sync.cuh"
#include "symmem/device_handle.hpp"
