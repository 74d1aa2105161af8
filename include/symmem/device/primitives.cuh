#pragma once

// symmem device primitives: system-scope loads, stores and atomics with an explicit memory
// order, volatile 32-bit accesses, the %globaltimer clock, and 16-byte vector accesses for peer
// memory.
// Header-only CUDA (sm_70 or newer; symmem builds for sm_90). Bodies: primitives_impl.cuh.
//
// Contract
// - Every pointer is a global-memory address valid in this process: this rank's buffer, a
//   peer's buffer from DeviceHandle::buffers, or a signal pad from DeviceHandle::signal_pads.
//   Peer memory lives on another GPU (or in another process on this GPU), so any access that
//   must be observed by, or observe, another rank uses *system* scope (.sys).
// - MemOrder (NOTE [memory order recipe]):
//     relaxed  a morally strong access with no ordering of other accesses; use it for polling
//              and for data whose ordering is established by a separate fence or signal;
//     acquire  (loads/RMWs) later accesses of this thread cannot move before it;
//     release  (stores/RMWs) earlier accesses of this thread cannot move after it, and (being
//              cumulative) neither can writes this thread has observed (e.g. writes of other
//              threads of its block made visible by __syncthreads());
//     acq_rel  (RMWs) both.
//   The recipe between two ranks: the writer stores its data (any width, weak stores are
//   fine), then publishes a flag with a release store/RMW at system scope; the reader polls
//   the flag with relaxed loads, takes it with an acquire load/RMW at system scope, and only
//   then reads the data. Block-wide: __syncthreads() before the releasing thread's release,
//   and __syncthreads() after the acquiring thread's acquire.
// - Vector helpers move 16 bytes; the address must be 16-byte aligned (misalignment is a
//   device fault, not checked). The plain variants (ld_v4/st_v4) are weak accesses: correct
//   for data ordered by a signal or a kernel boundary. ld_v4_cg is weak too but caches in L2
//   only (.cg): for bulk reads of data that peers wrote during this kernel, after the acquire
//   that orders them, where another block of the SM may already hold the line in L1. The
//   .volatile and .relaxed.sys variants are for data that a peer may change while this kernel
//   runs (flag-in-data protocols).
// - symmem's own kernels (src/cuda/kernels/) are written on this header and sync.cuh: there is
//   no second set of wrappers.
//
// NOTE [polling loads]
// A spin re-reads a flag until it changes: poll with a relaxed (load_sys<relaxed>,
// ld_v4_relaxed_sys) or volatile (load_volatile, ld_v4_volatile) load, and take the ordering once,
// after the spin, with an acquire load/RMW or fence_sys. On sm_90 the relaxed .sys and the
// .volatile loads are the same instruction (LDG.E.STRONG.SYS, LDG.E.128.STRONG.SYS); an acquire
// load adds CCTL.IVALL (an L1 invalidation) to every iteration, which costs latency in a hot spin
// (NCCL 2.29.7's symmetric kernels got slower that way, NVIDIA/nccl#2058).
//
// NOTE [hand PTX or libcu++]
// Where cuda::atomic_ref / cuda::atomic_thread_fence (libcu++, <cuda/atomic>) with
// thread_scope_system compile to the same SASS as the PTX here, the body uses libcu++: that is
// fence_sys. The loads, stores and RMWs stay hand PTX: libcu++ emits them with generic
// addresses (ld.relaxed.sys.b32 [p]), which ptxas keeps generic (LD.E.STRONG.SYS,
// ST.E.STRONG.SYS, ATOM.E.CAS.STRONG.SYS) where the .global forms give LDG/STG/ATOMG; the
// ordering part (MEMBAR.ALL.SYS before a release, CCTL.IVALL after an acquire) is the same.
// libcu++ has no volatile or 16-byte accesses.

#if !defined(__CUDACC__)
#error "symmem/device/*.cuh are CUDA headers: compile with nvcc (or clang -x cuda)"
#endif

#include <cstdint>

// Every inline device function of the API is declared with this.
#define SYMMEM_DEVICE_INLINE __device__ __forceinline__

namespace symmem::device {

enum class MemOrder : int { relaxed = 0, acquire = 1, release = 2, acq_rel = 3 };

// Nanoseconds from the GPU's global timer (%globaltimer; monotonic, ~1 us resolution).
SYMMEM_DEVICE_INLINE uint64_t globaltimer_ns();

// 32-bit accesses at system scope. load: relaxed or acquire; store: relaxed or release;
// cas (returns the old value) and exchange: any order.
template <MemOrder kOrder = MemOrder::acquire>
SYMMEM_DEVICE_INLINE uint32_t load_sys(const uint32_t* addr);
template <MemOrder kOrder = MemOrder::release>
SYMMEM_DEVICE_INLINE void store_sys(uint32_t* addr, uint32_t value);
// The same for 64-bit words (one naturally aligned access: both halves are seen together).
template <MemOrder kOrder = MemOrder::acquire>
SYMMEM_DEVICE_INLINE uint64_t load_sys(const uint64_t* addr);
template <MemOrder kOrder = MemOrder::release>
SYMMEM_DEVICE_INLINE void store_sys(uint64_t* addr, uint64_t value);
template <MemOrder kOrder = MemOrder::acq_rel>
SYMMEM_DEVICE_INLINE uint32_t cas_sys(uint32_t* addr, uint32_t expected, uint32_t desired);
template <MemOrder kOrder = MemOrder::acq_rel>
SYMMEM_DEVICE_INLINE uint32_t exchange_sys(uint32_t* addr, uint32_t value);
// fence.acq_rel.sys (kOrder acquire/release/acq_rel); nothing for relaxed.
template <MemOrder kOrder = MemOrder::acq_rel>
SYMMEM_DEVICE_INLINE void fence_sys();
// 32-bit volatile accesses (ld/st.volatile.global.u32): for polls (NOTE [polling loads]) and
// for words one kernel leaves for the next on the stream. No ordering of other accesses.
SYMMEM_DEVICE_INLINE uint32_t load_volatile(const uint32_t* addr);
SYMMEM_DEVICE_INLINE void store_volatile(uint32_t* addr, uint32_t value);

// 16-byte vector accesses (addr 16-byte aligned).
SYMMEM_DEVICE_INLINE uint4 ld_v4(const void* addr);                    // ld.global.v4 (weak)
SYMMEM_DEVICE_INLINE uint4 ld_v4_cg(const void* addr);                 // ld.global.cg.v4 (weak)
SYMMEM_DEVICE_INLINE uint4 ld_v4_volatile(const void* addr);           // ld.volatile.global.v4
SYMMEM_DEVICE_INLINE uint4 ld_v4_relaxed_sys(const void* addr);        // ld.relaxed.sys.global.v4
SYMMEM_DEVICE_INLINE void st_v4(void* addr, uint4 value);              // st.global.v4 (weak)
SYMMEM_DEVICE_INLINE void st_v4_volatile(void* addr, uint4 value);     // st.volatile.global.v4
SYMMEM_DEVICE_INLINE void st_v4_relaxed_sys(void* addr, uint4 value);  // st.relaxed.sys.global.v4

}  // namespace symmem::device

#include "symmem/device/primitives_impl.cuh"
