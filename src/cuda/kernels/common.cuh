#pragma once

// Kernel-internal helpers shared by the collective kernels, on the public device layer
// (symmem/device/primitives.cuh and sync.cuh: the PTX wrappers, the deadline and the device
// records come from there, as a user's kernel gets them): peer address tables, the timeout and
// op error records in SyncArgs terms, epoch bookkeeping, the pairwise block barrier over
// workspace flags, the zero-copy descriptor agreement, an alignment-agnostic block copy, the
// fixed-order reduction arithmetic and the launch dispatch.
// See NOTE [epochs and flags] in kernels.hpp for the protocol.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "core/float_convert.hpp"
#include "cuda/kernels/kernels.hpp"
#include "symmem/device/primitives.cuh"
#include "symmem/device/sync.cuh"

namespace symmem::cuda::kernels {

namespace dev = symmem::device;
using dev::MemOrder;

SYMMEM_DEVICE_INLINE char* peer(const PeerPtrs& t, int p) {
  return p < kMaxInlinePeers && t.table == nullptr ? t.inl[p] : t.table[p] + t.delta;
}

// Balanced split of [0, total) into `parts`; part i.
SYMMEM_DEVICE_INLINE int64_t split_lo(int64_t total, int64_t parts, int64_t i) {
  return static_cast<int64_t>((static_cast<unsigned long long>(total) * i) / parts);
}

// ---- timeouts --------------------------------------------------------------------------------
// The public timeout record (NOTE [device timeouts], written as NOTE [device records] says);
// unlike dev::record_timeout, a null record is skipped and nothing traps.
SYMMEM_DEVICE_INLINE void record_timeout(const SyncArgs& s, int channel, int peer_rank) {
  if (s.timeout_record != nullptr) {
    const bool aborted = dev::Deadline{0}.with_abort(s.abort_word, s.orphan_flag).aborted();
    (void)dev::write_timeout_record(s.timeout_record, s.rank, channel, peer_rank,
                                    aborted ? dev::kAbortFlagBase + s.abort_slot : 1);
  }
  // The flight recorder's slot: armed 2 = a wait of this kernel timed out (NOTE [device
  // timestamps] in src/core/trace.hpp).
  if (s.times != nullptr) *reinterpret_cast<volatile uint64_t*>(s.times + 3) = 2;
}

// The flight recorder's device times (NOTE [device timestamps] in src/core/trace.hpp).
// Parked end: {device address of a DeviceTimes::end in host memory, end ns}, 16 bytes in this
// rank's control region; 0 address: nothing parked.
SYMMEM_DEVICE_INLINE uint64_t* parked_end(const SyncArgs& s) {
  return reinterpret_cast<uint64_t*>(peer(s.ctrl, s.rank) + kCtrlParkedEndOffset);
}
// One 16-byte access, so that the host's copy (cuda_ops.cu) never sees half a pair.
SYMMEM_DEVICE_INLINE void load_pair(const uint64_t* p, uint64_t& a, uint64_t& b) {
  asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
}
SYMMEM_DEVICE_INLINE void store_pair(uint64_t* p, uint64_t a, uint64_t b) {
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(a), "l"(b) : "memory");
}
// At a kernel's start: block 0's thread 0 writes the op's start; its warp 1 (off thread 0's
// path, which goes on to the epoch) moves the previous kernel's parked end into that op's slot:
// a store to host memory this kernel never waits for. Kernels with no slot move it too.
SYMMEM_DEVICE_INLINE void trace_start(const SyncArgs& s) {
  if (blockIdx.x != 0) return;
  if (threadIdx.x == 0 && s.times != nullptr) {
    *reinterpret_cast<volatile uint64_t*>(s.times) = dev::globaltimer_ns();
  }
  if (threadIdx.x == (blockDim.x > 32 ? 32u : 0u)) {
    uint64_t* pe = parked_end(s);
    uint64_t to = 0, end = 0;
    load_pair(pe, to, end);
    if (to != 0) {
      *reinterpret_cast<volatile uint64_t*>(to) = end;
      store_pair(pe, 0, 0);
    }
  }
}

// timeout_ns is resolved on the host (timeout_to_ns: never 0), so dev::Deadline::after's
// default does not apply. The group's abort word and this rank's orphan stop flag end the waits
// too (NOTE [device abort], NOTE [orphan stop flags]).
SYMMEM_DEVICE_INLINE dev::Deadline deadline_after(const SyncArgs& s) {
  return dev::Deadline{dev::globaltimer_ns() + s.timeout_ns}.with_abort(s.abort_word,
                                                                        s.orphan_flag);
}

// ---- epochs and block barriers ---------------------------------------------------------------
SYMMEM_DEVICE_INLINE uint32_t* ctrl_words(const SyncArgs& s) {
  return reinterpret_cast<uint32_t*>(peer(s.ctrl, s.rank));
}
// Every kernel calls it first (all threads): the op's epoch, and its start time.
SYMMEM_DEVICE_INLINE uint32_t read_epoch(const SyncArgs& s) {
  trace_start(s);
  return dev::load_volatile(ctrl_words(s));
}

// Every block calls this once at its end (all threads). The last block resets the done counter
// and advances the epoch; the next kernel on the stream sees it (kernel boundary). Only later
// kernels of this rank read the two words (peers never do), and a kernel boundary orders all of
// this kernel's writes before them, so no fence is needed here: one before the count would hold
// every block's exit until its pushes to the peers are acknowledged (measured: 0.9 us of a
// 1 MiB two-shot with 4 ranks went to this step; docs/performance.md).
SYMMEM_DEVICE_INLINE void finish_epoch(const SyncArgs& s, uint32_t epoch) {
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t* w = ctrl_words(s);
    unsigned prev = atomicAdd(reinterpret_cast<unsigned*>(w + 1), 1u);
    if (prev == gridDim.x - 1) {
      dev::store_volatile(w + 1, 0u);
      dev::store_volatile(w, epoch + 1);
      // The op's end (NOTE [device timestamps]), parked in device memory: a store to host
      // memory here would hold the kernel's completion for the PCIe write (about 0.25 us).
      if (s.times != nullptr) {
        store_pair(parked_end(s), reinterpret_cast<uint64_t>(s.times + 1), dev::globaltimer_ns());
      }
    }
  }
}

SYMMEM_DEVICE_INLINE uint32_t flag_value(uint32_t epoch, uint32_t phase) {
  return (epoch << 2) | phase;
}

// NOTE [barrier flags]
// A barrier flag is one 64-bit word: the low half is the value (epoch << 2 | phase), the high
// half the tag of this rank's descriptor for the op (desc_tag of s.desc). One store carries
// both, so B1 checks the ranks' agreement on the descriptor (NOTE [zero-copy agreement] in
// cuda_ops.cu) from the flags it waits for anyway: no descriptor table is written or read while
// the ranks agree. A peer seen at B1 is at phase 1 or 2 of the same epoch (it cannot pass
// B2 before this rank signals it), and both carry the same tag. Tags differ only when some rank
// differs from another, so every rank sees a difference or none; then block 0 of every rank
// publishes its descriptor into the peers' tables, every rank meets once more (phase 3, release
// and acquire: the tables are visible after it) and block 0 records why from the full table
// (barrier_agree). A refusal's tag has the top bit set and normal tags never do, so
// a refusal is always seen; two different zero-copy descriptors share a tag with probability 2^-31.
SYMMEM_DEVICE_INLINE uint32_t desc_tag(const SyncArgs& s) {
  if (s.desc[0] == kDescRefused) return 0x80000000u | (static_cast<uint32_t>(s.desc[1]) & 0xffffu);
  uint64_t h = 0x9e3779b97f4a7c15ull;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    h ^= static_cast<uint64_t>(s.desc[i]);
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
  }
  return static_cast<uint32_t>(h ^ (h >> 32)) & 0x7fffffffu;
}
// The flag word {value, tag} (NOTE [barrier flags]).
SYMMEM_DEVICE_INLINE uint64_t flag_word(uint32_t tag, uint32_t value) {
  return (static_cast<uint64_t>(tag) << 32) | value;
}
// flags[row][from] of rank `owner`'s workspace.
SYMMEM_DEVICE_INLINE uint64_t* flag_slot(const SyncArgs& s, int owner, int row, int from) {
  return reinterpret_cast<uint64_t*>(peer(s.ctrl, owner) + kCtrlFlagsOffset) +
         static_cast<size_t>(row) * s.world + from;
}
SYMMEM_DEVICE_INLINE void flag_store(uint64_t* p, uint64_t v, bool release) {
  if (release) {
    dev::store_sys<MemOrder::release>(p, v);
  } else {
    dev::store_sys<MemOrder::relaxed>(p, v);
  }
}
SYMMEM_DEVICE_INLINE bool flag_reached(uint64_t word, uint32_t value) {
  return static_cast<int32_t>(static_cast<uint32_t>(word) - value) >= 0;  // wrap-safe
}

// Pairwise barrier of block blockIdx.x with the same block of every rank (all threads call it):
// signals `value` (with this rank's descriptor tag) and waits until every peer's flag reached it.
// `release`: the store releases this block's earlier writes (a peer reads them after the
// barrier); without it the store is relaxed, which suffices where the block wrote nothing since
// the kernel began that a peer reads (what earlier kernels wrote is visible to the peers'
// kernels after their barrier, as in torch's symmetric-memory kernels). The acquire is taken in
// every case. Returns a bit set, the same on every thread: kBarrierTimedOut when a wait timed
// out, kBarrierTagDiffers (with check_tags: at B1 only, where a peer's flag carries this op's tag)
// when a peer's tag is not this rank's. The wait polls with relaxed
// loads and takes the ordering once, with one acquire load of the flag it saw raised (NOTE
// [polling loads] in symmem/device/primitives.cuh: an acquire poll adds CCTL.IVALL to every
// iteration).
inline constexpr int kBarrierTimedOut = 1, kBarrierTagDiffers = 2;
SYMMEM_DEVICE_INLINE int barrier_flags(const SyncArgs& s, uint32_t value, dev::Deadline deadline,
                                       bool release, bool check_tags) {
  __syncthreads();
  const uint32_t tag = desc_tag(s);
  const uint64_t word = flag_word(tag, value);
  for (int p = threadIdx.x; p < s.world; p += blockDim.x) {
    // A release store alone publishes the whole block's writes: __syncthreads() orders them
    // before it and a release is cumulative (its MEMBAR.ALL.SYS drains them). A full
    // __threadfence_system() (MEMBAR.SC.SYS) before it, once per peer, cost time at every barrier.
    flag_store(flag_slot(s, p, blockIdx.x, s.rank), word, release);
  }
  int bits = 0;
  for (int p = threadIdx.x; p < s.world; p += blockDim.x) {
    const uint64_t* mine = flag_slot(s, s.rank, blockIdx.x, p);
    int spins = 0;
    bool timed_out = false;
    while (!flag_reached(dev::load_sys<MemOrder::relaxed>(mine), value)) {
      if (++spins == 64) {
        spins = 0;
        if (deadline.expired()) {
          record_timeout(s, -1 - static_cast<int>(blockIdx.x), p);
          timed_out = true;
          break;
        }
      }
    }
    if (timed_out) {
      bits |= kBarrierTimedOut;
      continue;
    }
    // Synchronizes with the peer's release store (flags only grow: a later value is a later
    // release by the same peer), and reads the tag with it.
    const uint64_t seen = dev::load_sys<MemOrder::acquire>(mine);
    if (check_tags && static_cast<uint32_t>(seen >> 32) != tag) bits |= kBarrierTagDiffers;
  }
  // __syncthreads_or answers whether any thread's predicate is non-zero, not their bitwise OR:
  // one block reduction in the common case, one per bit when something is set.
  if (__syncthreads_or(bits) == 0) return 0;
  return (__syncthreads_or(bits & kBarrierTimedOut) != 0 ? kBarrierTimedOut : 0) |
         (__syncthreads_or(bits & kBarrierTagDiffers) != 0 ? kBarrierTagDiffers : 0);
}

// A barrier that does not look at the tags (B2; all threads call it). False on timeout.
SYMMEM_DEVICE_INLINE bool block_barrier(const SyncArgs& s, uint32_t value, dev::Deadline deadline) {
  return barrier_flags(s, value, deadline, true, false) == 0;
}

// ---- op errors and the zero-copy agreement ----------------------------------------------------
// The op error record (layout in kernels.hpp) is a device record of two vectors (NOTE [device
// records]): head {1, code, rank, peer}, tail {a lo, a hi, b lo, b hi}. A null record is skipped.
SYMMEM_DEVICE_INLINE void record_op_error(int32_t* rec, OpErrorCode code, int rank, int peer_rank,
                                          int64_t va, int64_t vb) {
  if (rec == nullptr) return;
  const uint64_t a = static_cast<uint64_t>(va), b = static_cast<uint64_t>(vb);
  const uint4 v[2] = {make_uint4(1u, static_cast<uint32_t>(code), static_cast<uint32_t>(rank),
                                 static_cast<uint32_t>(peer_rank)),
                      make_uint4(static_cast<uint32_t>(a), static_cast<uint32_t>(a >> 32),
                                 static_cast<uint32_t>(b), static_cast<uint32_t>(b >> 32))};
  static_assert(sizeof(v) == kOpErrorRecordInts * sizeof(int32_t));
  (void)dev::write_record(rec, v);
}

// The descriptor table of rank p for an epoch: int64 [world][4], the half of the epoch's parity.
SYMMEM_DEVICE_INLINE int64_t* desc_table(const SyncArgs& s, int p, uint32_t epoch) {
  return reinterpret_cast<int64_t*>(peer(s.ctrl, p) + s.desc_offset) +
         static_cast<size_t>(epoch & 1) * 4 * s.world;
}

// This rank's descriptor into every peer's table of the epoch's parity: by block 0 of a barrier
// kernel only when B1 saw the tags differ (barrier_agree), and by a refused op. Only block 0
// reads the table, after phase 3 with block 0 of every peer, so nothing else needs it: the
// common path stores no descriptor at all.
SYMMEM_DEVICE_INLINE void publish_desc(const SyncArgs& s, uint32_t epoch) {
  for (int i = threadIdx.x; i < 4 * s.world; i += blockDim.x) {
    desc_table(s, i / 4, epoch)[4 * s.rank + i % 4] = s.desc[i % 4];
  }
}

// B1 with the agreement check (every barrier kernel; all threads call it): true when every peer
// arrived and published the same descriptor as this rank (NOTE [barrier flags]); the same answer
// on every rank and every thread. When the tags differ, every rank meets at phase 3 (release and
// acquire: every peer's descriptor of this epoch is visible after it; the parity half is not
// rewritten before every rank has finished this epoch, NOTE [epochs and flags]) and block 0
// records why: a refusal (NOTE [refused ops]) in preference to a zero-copy mismatch. Block 0
// publishes this rank's descriptor just before that meeting (every rank that gets there does,
// and a refused op published its own before its phase-3 flags), so the descriptors cost nothing
// when the ranks agree. `release` as for barrier_flags: whether a peer reads what this block
// wrote since the kernel began.
SYMMEM_DEVICE_INLINE bool barrier_agree(const SyncArgs& s, uint32_t epoch, dev::Deadline deadline,
                                        bool release) {
  const int bits = barrier_flags(s, flag_value(epoch, 1), deadline, release, true);
  if (bits == 0) return true;
  if ((bits & kBarrierTimedOut) != 0) return false;
  if (blockIdx.x == 0) publish_desc(s, epoch);  // released by the phase-3 store below
  if (barrier_flags(s, flag_value(epoch, 3), deadline, true, false) != 0) return false;
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    const int64_t* t = desc_table(s, s.rank, epoch);
    for (int p = 0; p < s.world; ++p) {
      if (__ldcg(t + 4 * p) != kDescRefused) continue;
      record_op_error(s.error_record, OpErrorCode::peer_refused, p, -1, s.op_kind,
                      __ldcg(t + 4 * p + 1));
      return false;
    }
    for (int i = 0; i < 4 * s.world; ++i) {
      if (__ldcg(t + i) == s.desc[i % 4]) continue;
      const int p = i / 4;
      const int which = (i % 4) < 2 ? 0 : 1;  // 0 send, 1 recv
      record_op_error(s.error_record, OpErrorCode::zero_copy_mismatch, s.rank, p,
                      (__ldcg(t + 4 * p + 2 * which) << 32) | which,
                      __ldcg(t + 4 * p + 2 * which + 1));
      break;
    }
  }
  return false;
}

// ---- LL refusals (NOTE [refused ops] in refuse.cu) -------------------------------------------
// A refused op fills its LL slot at every peer with packets {kLLRefuseMagic, refuse flag, code,
// refuse flag}. The refuse flag of an epoch is never the epoch's data flag (epoch + 1), and the
// magic word keeps a zeroed (never written) packet from reading as a refusal.
inline constexpr uint32_t kLLRefuseMagic = 0x52454655u;  // "REFU"
SYMMEM_DEVICE_INLINE uint32_t ll_refuse_flag(uint32_t epoch) {
  return (epoch + 1) ^ 0x80000000u;
}
// Only where a packet does not carry the data flag (the slow path). Both 8-byte halves must be
// the refusal's (each half is written at once), so `code` (q.z) is the refusal's.
SYMMEM_DEVICE_INLINE bool ll_refused(const uint4& q, uint32_t refuse_flag) {
  return q.y == refuse_flag && q.w == refuse_flag && q.x == kLLRefuseMagic;
}

// ---- block copy, any alignment ---------------------------------------------------------------
template <int W>
struct Word;
template <>
struct Word<1> {
  using T = unsigned char;
};
template <>
struct Word<2> {
  using T = unsigned short;
};
template <>
struct Word<4> {
  using T = unsigned int;
};
template <>
struct Word<8> {
  using T = unsigned long long;
};

template <int W>
SYMMEM_DEVICE_INLINE void copy_words(char* dst, const char* src, int64_t n, int tid, int nthr) {
  // dst and src are congruent modulo W: bytes up to W-alignment, words, bytes after.
  int64_t head = (W - static_cast<int64_t>(reinterpret_cast<uintptr_t>(dst) % W)) % W;
  if (head > n) head = n;
  for (int64_t i = tid; i < head; i += nthr) dst[i] = __ldcg(src + i);
  int64_t words = (n - head) / W;
  if constexpr (W == 16) {
    const char* s = src + head;
    char* d = dst + head;
    int64_t i = tid;
    for (; i + 3 * nthr < words; i += 4 * nthr) {
      uint4 a = dev::ld_v4_cg(s + 16 * i);
      uint4 b = dev::ld_v4_cg(s + 16 * (i + nthr));
      uint4 c = dev::ld_v4_cg(s + 16 * (i + 2 * nthr));
      uint4 e = dev::ld_v4_cg(s + 16 * (i + 3 * nthr));
      dev::st_v4(d + 16 * i, a);
      dev::st_v4(d + 16 * (i + nthr), b);
      dev::st_v4(d + 16 * (i + 2 * nthr), c);
      dev::st_v4(d + 16 * (i + 3 * nthr), e);
    }
    for (; i < words; i += nthr) dev::st_v4(d + 16 * i, dev::ld_v4_cg(s + 16 * i));
  } else {
    using T = typename Word<W>::T;
    const T* s = reinterpret_cast<const T*>(src + head);
    T* d = reinterpret_cast<T*>(dst + head);
    for (int64_t i = tid; i < words; i += nthr) d[i] = __ldcg(s + i);
  }
  for (int64_t i = head + words * W + tid; i < n; i += nthr) dst[i] = __ldcg(src + i);
}

// Copies n bytes with the threads [tid, nthr) (typically one block). No overlap allowed.
SYMMEM_DEVICE_INLINE void copy_bytes(char* dst, const char* src, int64_t n, int tid, int nthr) {
  if (n <= 0 || dst == src) return;
  uintptr_t x = reinterpret_cast<uintptr_t>(dst) ^ reinterpret_cast<uintptr_t>(src);
  if ((x & 15) == 0) {
    copy_words<16>(dst, src, n, tid, nthr);
  } else if ((x & 7) == 0) {
    copy_words<8>(dst, src, n, tid, nthr);
  } else if ((x & 3) == 0) {
    copy_words<4>(dst, src, n, tid, nthr);
  } else if ((x & 1) == 0) {
    copy_words<2>(dst, src, n, tid, nthr);
  } else {
    copy_words<1>(dst, src, n, tid, nthr);
  }
}

// Block `b` of `blocks` copies its share of [0, n) bytes (split on 16-byte units).
SYMMEM_DEVICE_INLINE void copy_share(char* dst, const char* src, int64_t n, int64_t b,
                                     int64_t blocks) {
  int64_t units = (n + 15) / 16;
  int64_t lo = split_lo(units, blocks, b) * 16;
  int64_t hi = split_lo(units, blocks, b + 1) * 16;
  if (hi > n) hi = n;
  if (lo < hi) copy_bytes(dst + lo, src + lo, hi - lo, threadIdx.x, blockDim.x);
}

// ---- element types and reductions ------------------------------------------------------------
// Results must be bitwise equal to src/host/reduce.cpp: widen to the accumulator type A (f32 for
// f32 and the narrow floats, f64 for f64, the integer itself for i32/i64), combine strictly in
// rank order (sum a+b, min b<a?b:a, max a<b?b:a), avg = sum / world (IEEE division for floats,
// C++ integer division, truncating toward zero, for integers), narrow once with round to nearest
// even. Integer sums wrap (two's complement, through the unsigned type), like the host's.
template <KType>
struct Elem;
template <>
struct Elem<KType::f32> {
  using T = float;
  using A = float;
  static SYMMEM_DEVICE_INLINE A to_a(T v) { return v; }
  static SYMMEM_DEVICE_INLINE T from_a(A v) { return v; }
};
template <>
struct Elem<KType::f64> {
  using T = double;
  using A = double;
  static SYMMEM_DEVICE_INLINE A to_a(T v) { return v; }
  static SYMMEM_DEVICE_INLINE T from_a(A v) { return v; }
};
template <>
struct Elem<KType::i32> {
  using T = int32_t;
  using A = int32_t;
  static SYMMEM_DEVICE_INLINE A to_a(T v) { return v; }
  static SYMMEM_DEVICE_INLINE T from_a(A v) { return v; }
};
template <>
struct Elem<KType::i64> {
  using T = int64_t;
  using A = int64_t;
  static SYMMEM_DEVICE_INLINE A to_a(T v) { return v; }
  static SYMMEM_DEVICE_INLINE T from_a(A v) { return v; }
};
template <>
struct Elem<KType::f16> {
  using T = __half;
  using A = float;
  static SYMMEM_DEVICE_INLINE A to_a(T v) { return __half2float(v); }
  static SYMMEM_DEVICE_INLINE T from_a(A v) { return __float2half_rn(v); }
};
template <>
struct Elem<KType::bf16> {
  using T = __nv_bfloat16;
  using A = float;
  static SYMMEM_DEVICE_INLINE A to_a(T v) { return __bfloat162float(v); }
  static SYMMEM_DEVICE_INLINE T from_a(A v) { return __float2bfloat16_rn(v); }
};

// fp8 in storage bits; the conversions are the host's (core/float_convert.hpp), so every rank and
// every backend rounds alike.
template <>
struct Elem<KType::f8e4m3> {
  using T = unsigned char;
  using A = float;
  static SYMMEM_DEVICE_INLINE A to_a(T v) { return fp::e4m3_to_f32(v); }
  static SYMMEM_DEVICE_INLINE T from_a(A v) { return fp::f32_to_e4m3(v); }
};
template <>
struct Elem<KType::f8e5m2> {
  using T = unsigned char;
  using A = float;
  static SYMMEM_DEVICE_INLINE A to_a(T v) { return fp::e5m2_to_f32(v); }
  static SYMMEM_DEVICE_INLINE T from_a(A v) { return fp::f32_to_e5m2(v); }
};

// One step of the rank-order reduction in the accumulator type (no contraction: __fadd_rn,
// __dadd_rn; integer sums wrap).
template <class A>
SYMMEM_DEVICE_INLINE A combine(KRed red, A a, A b) {
  switch (red) {
    case KRed::min:
      return b < a ? b : a;
    case KRed::max:
      return a < b ? b : a;
    default:
      if constexpr (std::is_same_v<A, float>) {
        return __fadd_rn(a, b);
      } else if constexpr (std::is_same_v<A, double>) {
        return __dadd_rn(a, b);
      } else {
        using U = std::make_unsigned_t<A>;
        return static_cast<A>(static_cast<U>(a) + static_cast<U>(b));
      }
  }
}
// avg: the sum divided by the world size (world >= 1, so no integer overflow).
template <class A>
SYMMEM_DEVICE_INLINE A finish(KRed red, A a, int world) {
  if (red != KRed::avg) return a;
  if constexpr (std::is_same_v<A, float>) {
    return __fdiv_rn(a, static_cast<float>(world));
  } else if constexpr (std::is_same_v<A, double>) {
    return __ddiv_rn(a, static_cast<double>(world));
  } else {
    return a / static_cast<A>(world);
  }
}

// A register vector of `kBytes` bytes of element type K, widened to its accumulator type. Raw is
// a 16-byte uint4 or an 8-byte uint64_t, both at least as aligned as T (8-byte elements: two in a
// uint4, one in a uint64_t, never split).
template <KType K, int kBytes>
struct Vec {
  using E = Elem<K>;
  using T = typename E::T;
  using A = typename E::A;
  static constexpr int kN = kBytes / static_cast<int>(sizeof(T));
  static_assert(kN >= 1 && kN * static_cast<int>(sizeof(T)) == kBytes);
  A f[kN];

  template <class Raw>
  SYMMEM_DEVICE_INLINE void load(const Raw& raw) {
    static_assert(sizeof(Raw) == kBytes && alignof(Raw) >= alignof(T));
    const T* t = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < kN; ++i) f[i] = E::to_a(t[i]);
  }
  template <class Raw>
  SYMMEM_DEVICE_INLINE void combine_with(KRed red, const Raw& raw) {
    static_assert(sizeof(Raw) == kBytes && alignof(Raw) >= alignof(T));
    const T* t = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < kN; ++i) f[i] = combine(red, f[i], E::to_a(t[i]));
  }
  template <class Raw>
  SYMMEM_DEVICE_INLINE void store(KRed red, int world, Raw& raw) const {
    static_assert(sizeof(Raw) == kBytes && alignof(Raw) >= alignof(T));
    T* t = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int i = 0; i < kN; ++i) t[i] = E::from_a(finish(red, f[i], world));
  }
};

// Element loads/stores through the raw bit pattern (L1 bypassed for loads, like dev::ld_v4_cg);
// `p` is aligned to the element size (the host checks send/recv; offsets are whole elements).
template <KType K>
SYMMEM_DEVICE_INLINE typename Elem<K>::A load_elem(const char* p) {
  using T = typename Elem<K>::T;
  using W = typename Word<static_cast<int>(sizeof(T))>::T;
  const W bits = __ldcg(reinterpret_cast<const W*>(p));
  T v;
  memcpy(&v, &bits, sizeof(T));
  return Elem<K>::to_a(v);
}
template <KType K>
SYMMEM_DEVICE_INLINE void store_elem(char* p, typename Elem<K>::A f) {
  *reinterpret_cast<typename Elem<K>::T*>(p) = Elem<K>::from_a(f);
}

// Scalar reduction of the element at byte offset `off` of every rank's input (rank order).
template <KType K>
SYMMEM_DEVICE_INLINE typename Elem<K>::A reduce_scalar(const PeerPtrs& in, int world, int64_t off,
                                                       KRed red) {
  typename Elem<K>::A acc = load_elem<K>(peer(in, 0) + off);
  for (int p = 1; p < world; ++p) acc = combine(red, acc, load_elem<K>(peer(in, p) + off));
  return finish(red, acc, world);
}

// Stores 16 bytes at any address.
SYMMEM_DEVICE_INLINE void store16_any(char* dst, uint4 y) {
  uintptr_t a = reinterpret_cast<uintptr_t>(dst);
  if ((a & 15) == 0) {
    dev::st_v4(dst, y);
  } else if ((a & 7) == 0) {
    reinterpret_cast<uint2*>(dst)[0] = make_uint2(y.x, y.y);
    reinterpret_cast<uint2*>(dst)[1] = make_uint2(y.z, y.w);
  } else if ((a & 3) == 0) {
    reinterpret_cast<uint32_t*>(dst)[0] = y.x;
    reinterpret_cast<uint32_t*>(dst)[1] = y.y;
    reinterpret_cast<uint32_t*>(dst)[2] = y.z;
    reinterpret_cast<uint32_t*>(dst)[3] = y.w;
  } else if ((a & 1) == 0) {
    const unsigned short* h = reinterpret_cast<const unsigned short*>(&y);
#pragma unroll
    for (int i = 0; i < 8; ++i) reinterpret_cast<unsigned short*>(dst)[i] = h[i];
  } else {
    const unsigned char* c = reinterpret_cast<const unsigned char*>(&y);
#pragma unroll
    for (int i = 0; i < 16; ++i) reinterpret_cast<unsigned char*>(dst)[i] = c[i];
  }
}

// Loads/stores `nb` (<= 8) bytes at `p` as the low bytes of a u64. kEs is the element size:
// `p` and `nb` are whole elements, so 8-byte elements are always one 8-byte access, 2- and
// 4-byte elements never need byte accesses, and only fp8 (odd pieces) has the byte path.
// Keeping the byte path out of the wider types' instances keeps their LL kernels as small as
// before fp8 (the byte loops doubled the bf16 kernel's SASS and cost ~5% at 256 KiB, 2 ranks).
template <int kEs>
SYMMEM_DEVICE_INLINE uint64_t load8_any(const char* p, int nb) {
  static_assert(kEs == 1 || kEs == 2 || kEs == 4 || kEs == 8);
  if (kEs == 8 || (nb == 8 && (reinterpret_cast<uintptr_t>(p) & 7) == 0)) {
    return *reinterpret_cast<const uint64_t*>(p);
  }
  uint64_t v = 0;
  if (kEs >= 2 || ((reinterpret_cast<uintptr_t>(p) | static_cast<uintptr_t>(nb)) & 1) == 0) {
    for (int i = 0; i < nb; i += 2) {
      v |= static_cast<uint64_t>(*reinterpret_cast<const unsigned short*>(p + i)) << (8 * i);
    }
  } else {
    for (int i = 0; i < nb; ++i) {
      v |= static_cast<uint64_t>(*reinterpret_cast<const unsigned char*>(p + i)) << (8 * i);
    }
  }
  return v;
}
template <int kEs>
SYMMEM_DEVICE_INLINE void store8_any(char* p, uint64_t v, int nb) {
  static_assert(kEs == 1 || kEs == 2 || kEs == 4 || kEs == 8);
  if (kEs == 8 || (nb == 8 && (reinterpret_cast<uintptr_t>(p) & 7) == 0)) {
    *reinterpret_cast<uint64_t*>(p) = v;
    return;
  }
  if (kEs >= 2 || ((reinterpret_cast<uintptr_t>(p) | static_cast<uintptr_t>(nb)) & 1) == 0) {
    for (int i = 0; i < nb; i += 2) {
      *reinterpret_cast<unsigned short*>(p + i) = static_cast<unsigned short>(v >> (8 * i));
    }
  } else {
    for (int i = 0; i < nb; ++i) {
      *reinterpret_cast<unsigned char*>(p + i) = static_cast<unsigned char>(v >> (8 * i));
    }
  }
}

// ---- launch dispatch ------------------------------------------------------------------------
// Calls f(Instance<K, kW>{}) for the element type and the world size of a launch: the world
// sizes 2, 4 and 8 get their own template instances, any other size the generic one (kW = 0).
// Returns the launch's cudaError_t as an int.
template <KType K_, int kW_>
struct Instance {
  static constexpr KType K = K_;
  static constexpr int kW = kW_;
};

template <KType K, class F>
int dispatch_world(int world, F&& f) {
  switch (world) {
    case 2:
      f(Instance<K, 2>{});
      break;
    case 4:
      f(Instance<K, 4>{});
      break;
    case 8:
      f(Instance<K, 8>{});
      break;
    default:
      f(Instance<K, 0>{});
      break;
  }
  return static_cast<int>(cudaGetLastError());
}

template <class F>
int dispatch_type_world(KType type, int world, F&& f) {
  switch (type) {
    case KType::f32:
      return dispatch_world<KType::f32>(world, f);
    case KType::f64:
      return dispatch_world<KType::f64>(world, f);
    case KType::f16:
      return dispatch_world<KType::f16>(world, f);
    case KType::bf16:
      return dispatch_world<KType::bf16>(world, f);
    case KType::i32:
      return dispatch_world<KType::i32>(world, f);
    case KType::i64:
      return dispatch_world<KType::i64>(world, f);
    case KType::f8e4m3:
      return dispatch_world<KType::f8e4m3>(world, f);
    case KType::f8e5m2:
      return dispatch_world<KType::f8e5m2>(world, f);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

}  // namespace symmem::cuda::kernels
