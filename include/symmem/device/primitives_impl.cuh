#pragma once

// Bodies of symmem/device/primitives.cuh (include that header, not this one).

#include <cuda/atomic>

#include <cstdint>

namespace symmem::device {

// Hand PTX below, except where libcu++ gives the same SASS (NOTE [hand PTX or libcu++] in
// primitives.cuh). Every asm has a "memory" clobber, so the compiler keeps other memory
// accesses on their side of it.

SYMMEM_DEVICE_INLINE uint64_t globaltimer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

template <MemOrder kOrder>
SYMMEM_DEVICE_INLINE uint32_t load_sys(const uint32_t* addr) {
  static_assert(kOrder == MemOrder::relaxed || kOrder == MemOrder::acquire,
                "load_sys: order must be relaxed or acquire");
  uint32_t v;
  if constexpr (kOrder == MemOrder::acquire) {
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(addr) : "memory");
  } else {
    asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(addr) : "memory");
  }
  return v;
}

template <MemOrder kOrder>
SYMMEM_DEVICE_INLINE void store_sys(uint32_t* addr, uint32_t value) {
  static_assert(kOrder == MemOrder::relaxed || kOrder == MemOrder::release,
                "store_sys: order must be relaxed or release");
  if constexpr (kOrder == MemOrder::release) {
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(addr), "r"(value) : "memory");
  } else {
    asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(addr), "r"(value) : "memory");
  }
}

template <MemOrder kOrder>
SYMMEM_DEVICE_INLINE uint64_t load_sys(const uint64_t* addr) {
  static_assert(kOrder == MemOrder::relaxed || kOrder == MemOrder::acquire,
                "load_sys: order must be relaxed or acquire");
  uint64_t v;
  if constexpr (kOrder == MemOrder::acquire) {
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(addr) : "memory");
  } else {
    asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(addr) : "memory");
  }
  return v;
}

template <MemOrder kOrder>
SYMMEM_DEVICE_INLINE void store_sys(uint64_t* addr, uint64_t value) {
  static_assert(kOrder == MemOrder::relaxed || kOrder == MemOrder::release,
                "store_sys: order must be relaxed or release");
  if constexpr (kOrder == MemOrder::release) {
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(addr), "l"(value) : "memory");
  } else {
    asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(addr), "l"(value) : "memory");
  }
}

template <MemOrder kOrder>
SYMMEM_DEVICE_INLINE uint32_t cas_sys(uint32_t* addr, uint32_t expected, uint32_t desired) {
  uint32_t old;
  if constexpr (kOrder == MemOrder::relaxed) {
    asm volatile("atom.relaxed.sys.global.cas.b32 %0, [%1], %2, %3;"
                 : "=r"(old)
                 : "l"(addr), "r"(expected), "r"(desired)
                 : "memory");
  } else if constexpr (kOrder == MemOrder::acquire) {
    asm volatile("atom.acquire.sys.global.cas.b32 %0, [%1], %2, %3;"
                 : "=r"(old)
                 : "l"(addr), "r"(expected), "r"(desired)
                 : "memory");
  } else if constexpr (kOrder == MemOrder::release) {
    asm volatile("atom.release.sys.global.cas.b32 %0, [%1], %2, %3;"
                 : "=r"(old)
                 : "l"(addr), "r"(expected), "r"(desired)
                 : "memory");
  } else {
    asm volatile("atom.acq_rel.sys.global.cas.b32 %0, [%1], %2, %3;"
                 : "=r"(old)
                 : "l"(addr), "r"(expected), "r"(desired)
                 : "memory");
  }
  return old;
}

template <MemOrder kOrder>
SYMMEM_DEVICE_INLINE uint32_t exchange_sys(uint32_t* addr, uint32_t value) {
  uint32_t old;
  if constexpr (kOrder == MemOrder::relaxed) {
    asm volatile("atom.relaxed.sys.global.exch.b32 %0, [%1], %2;"
                 : "=r"(old)
                 : "l"(addr), "r"(value)
                 : "memory");
  } else if constexpr (kOrder == MemOrder::acquire) {
    asm volatile("atom.acquire.sys.global.exch.b32 %0, [%1], %2;"
                 : "=r"(old)
                 : "l"(addr), "r"(value)
                 : "memory");
  } else if constexpr (kOrder == MemOrder::release) {
    asm volatile("atom.release.sys.global.exch.b32 %0, [%1], %2;"
                 : "=r"(old)
                 : "l"(addr), "r"(value)
                 : "memory");
  } else {
    asm volatile("atom.acq_rel.sys.global.exch.b32 %0, [%1], %2;"
                 : "=r"(old)
                 : "l"(addr), "r"(value)
                 : "memory");
  }
  return old;
}

template <MemOrder kOrder>
SYMMEM_DEVICE_INLINE void fence_sys() {
  if constexpr (kOrder != MemOrder::relaxed) {
    // fence.acq_rel.sys, the same SASS as the hand PTX (MEMBAR.ALL.SYS ... CCTL.IVALL).
    ::cuda::atomic_thread_fence(::cuda::memory_order_acq_rel, ::cuda::thread_scope_system);
  }
}

SYMMEM_DEVICE_INLINE uint32_t load_volatile(const uint32_t* addr) {
  uint32_t v;
  asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v) : "l"(addr) : "memory");
  return v;
}

SYMMEM_DEVICE_INLINE void store_volatile(uint32_t* addr, uint32_t value) {
  asm volatile("st.volatile.global.u32 [%0], %1;" ::"l"(addr), "r"(value) : "memory");
}

SYMMEM_DEVICE_INLINE uint4 ld_v4(const void* addr) {
  uint4 v;
  asm volatile("ld.global.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(addr)
               : "memory");
  return v;
}

SYMMEM_DEVICE_INLINE uint4 ld_v4_cg(const void* addr) {
  uint4 v;
  asm volatile("ld.global.cg.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(addr)
               : "memory");
  return v;
}

SYMMEM_DEVICE_INLINE uint4 ld_v4_volatile(const void* addr) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(addr)
               : "memory");
  return v;
}

SYMMEM_DEVICE_INLINE uint4 ld_v4_relaxed_sys(const void* addr) {
  uint4 v;
  asm volatile("ld.relaxed.sys.global.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(addr)
               : "memory");
  return v;
}

SYMMEM_DEVICE_INLINE void st_v4(void* addr, uint4 v) {
  asm volatile("st.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(addr), "r"(v.x), "r"(v.y), "r"(v.z),
               "r"(v.w)
               : "memory");
}

SYMMEM_DEVICE_INLINE void st_v4_volatile(void* addr, uint4 v) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(addr), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w)
               : "memory");
}

SYMMEM_DEVICE_INLINE void st_v4_relaxed_sys(void* addr, uint4 v) {
  asm volatile("st.relaxed.sys.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(addr), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w)
               : "memory");
}

}  // namespace symmem::device
