// LL one-shot kernels: all_reduce, reduce_scatter, all_gather and all_to_all for small pieces.
//
// NOTE [LL one-shot]
// No barrier at all: each thread owns 8-byte units u of the piece. It first writes, for every
// peer p, the packet {lo, flag, hi, flag} of unit u of piece p into p's LL slot for this rank
// (one 16-byte volatile store; each 4-byte data word shares an 8-byte half with its flag, so a
// reader that sees both flags sees both words). Then, for the same units, it polls its own
// slots until every peer's packet carries the current flag, and reduces them in rank order
// (this rank's own contribution is read from `send`, at its place in the order) or stores them
// (gather). The same thread reads unit u of `send` before it writes unit u of `recv`, so in-place
// calls are fine. Units are whole elements: an 8-byte element (f64, i64) is exactly one unit,
// its low and high words travel in the two halves of one packet and are joined again before the
// element is combined, so min/max/sum see the whole 64-bit value. Flags and parities: NOTE
// [epochs and flags] in kernels.hpp.
// A unit of recv is written only once every peer's packet for it came (the values wait in
// registers for the world sizes with their own instance; the generic one reads the packets
// twice), so a peer's refusal (its refusal packets, NOTE [refused ops] in refuse.cu) leaves recv
// untouched on every rank. The refusal is only looked for where a packet has not come yet.

#include <cuda_runtime.h>

#include "cuda/kernels/common.cuh"

namespace symmem::cuda::kernels {
namespace {

SYMMEM_DEVICE_INLINE uint4 make_packet(uint64_t v, uint32_t flag) {
  return make_uint4(static_cast<uint32_t>(v), flag, static_cast<uint32_t>(v >> 32), flag);
}

// What a poll found.
enum class Poll : int { data = 0, refused = 1, timeout = 2 };

// Polls one packet until it carries `flag` (its data in *out) or the refusal of this epoch (its
// ErrorCode in *code); a timeout is recorded. The refusal is looked for only while the packet
// is not there yet.
SYMMEM_DEVICE_INLINE Poll poll_packet(const char* addr, uint32_t flag, uint32_t refuse_flag,
                                      dev::Deadline deadline, const SyncArgs& s, int src,
                                      uint64_t* out, int* code) {
  int spins = 0;
  while (true) {
    const uint4 q = dev::ld_v4_volatile(addr);
    if (q.y == flag && q.w == flag) {
      *out = static_cast<uint64_t>(q.x) | (static_cast<uint64_t>(q.z) << 32);
      return Poll::data;
    }
    if (ll_refused(q, refuse_flag)) {
      *code = static_cast<int>(q.z);
      return Poll::refused;
    }
    if (++spins == 64) {
      spins = 0;
      if (deadline.expired()) {
        record_timeout(s, -1000, src);
        return Poll::timeout;
      }
    }
  }
}

// Receive side, per unit: every peer's packet is waited for, also after a refusal (so this
// kernel ends only after every peer started it: NOTE [epochs and flags], Progress), and the unit
// of recv is written only when every peer's data came: a refused op leaves recv untouched.
template <KType K, int kW>
__global__ void __launch_bounds__(kThreads, 2) ll_kernel(const LLArgs a) {
  using V8 = Vec<K, 8>;
  const SyncArgs& s = a.sync;
  const int world = kW > 0 ? kW : s.world;
  const int rank = s.rank;
  const uint32_t epoch = read_epoch(s);
  const uint32_t flag = epoch + 1;
  const uint32_t refuse_flag = ll_refuse_flag(epoch);
  const size_t slot = a.slot_bytes;
  const size_t parity_off = static_cast<size_t>(epoch & 1) * world * slot;
  constexpr int kEs = static_cast<int>(sizeof(typename Elem<K>::T));
  const int64_t es = kEs;
  const int64_t piece = a.count * es;
  const int64_t units = (piece + 7) / 8;
  const int64_t gtid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t gstride = static_cast<int64_t>(gridDim.x) * blockDim.x;

  // Send.
  for (int64_t u = gtid; u < units; u += gstride) {
    const int nb = static_cast<int>(piece - u * 8 < 8 ? piece - u * 8 : 8);
    const size_t at = parity_off + static_cast<size_t>(rank) * slot + static_cast<size_t>(u) * 16;
    if (a.send_stride == 0) {
      const uint4 pkt = make_packet(load8_any<kEs>(a.send + u * 8, nb), flag);
      for (int i = 1; i < world; ++i) {
        const int p = rank + i < world ? rank + i : rank + i - world;
        dev::st_v4_volatile(peer(a.ll, p) + at, pkt);
      }
    } else {
      for (int i = 1; i < world; ++i) {
        const int p = rank + i < world ? rank + i : rank + i - world;
        const uint64_t v = load8_any<kEs>(a.send + p * a.send_stride + u * 8, nb);
        dev::st_v4_volatile(peer(a.ll, p) + at, make_packet(v, flag));
      }
    }
  }

  // Receive.
  const dev::Deadline deadline = deadline_after(s);
  const char* mine = peer(a.ll, rank) + parity_off;
  const char* own = a.send + rank * a.send_stride;
  bool ok = true;
  int refused_by = -1;  // a peer that refused the op (NOTE [refused ops]), and its ErrorCode
  int refused_code = 0;
  for (int64_t u = gtid; u < units && ok; u += gstride) {
    const int nb = static_cast<int>(piece - u * 8 < 8 ? piece - u * 8 : 8);
    const size_t at = static_cast<size_t>(u) * 16;
    if constexpr (kW > 0) {
      // Every peer's packet in flight at once, kept in registers until all came.
      uint64_t v[kW];
      uint32_t pending = 0, refused = 0;
#pragma unroll
      for (int p = 0; p < kW; ++p) {
        if (p == rank) {
          v[p] = load8_any<kEs>(own + u * 8, nb);
        } else {
          pending |= 1u << p;
        }
      }
      int spins = 0;
      while (pending != 0) {
#pragma unroll
        for (int p = 0; p < kW; ++p) {
          if (pending & (1u << p)) {
            const uint4 q = dev::ld_v4_volatile(mine + static_cast<size_t>(p) * slot + at);
            if (q.y == flag && q.w == flag) {
              v[p] = static_cast<uint64_t>(q.x) | (static_cast<uint64_t>(q.z) << 32);
              pending &= ~(1u << p);
            } else if (ll_refused(q, refuse_flag)) {
              pending &= ~(1u << p);
              refused |= 1u << p;
              refused_by = p;
              refused_code = static_cast<int>(q.z);
            }
          }
        }
        if (pending != 0 && ++spins == 64) {
          spins = 0;
          if (deadline.expired()) {
            record_timeout(s, -1000, __ffs(pending) - 1);
            ok = false;
            break;
          }
        }
      }
      if (!ok) break;
      if (refused != 0) continue;
      if (a.reduce) {
        V8 acc;
        acc.load(v[0]);
#pragma unroll
        for (int p = 1; p < kW; ++p) acc.combine_with(a.red, v[p]);
        uint64_t r;
        acc.store(a.red, world, r);
        store8_any<kEs>(a.recv + u * 8, r, nb);
      } else {
#pragma unroll
        for (int p = 0; p < kW; ++p) {
          char* to = a.recv + p * a.recv_stride + u * 8;
          if (p == rank && own + u * 8 == to) continue;  // in place
          store8_any<kEs>(to, v[p], nb);
        }
      }
    } else {
      // Any world size. Waits for peer p's packet of this unit: false on timeout; a refusal sets
      // *refused (and refused_by, refused_code) and leaves *v alone.
      auto wait_peer = [&](int p, uint64_t* v, bool* refused) {
        int code = 0;
        const Poll got = poll_packet(mine + static_cast<size_t>(p) * slot + at, flag, refuse_flag,
                                     deadline, s, p, v, &code);
        if (got == Poll::refused) {
          *refused = true;
          refused_by = p;
          refused_code = code;
        }
        return got != Poll::timeout;
      };
      if (a.reduce) {
        // The peers in rank order, combined as they come.
        V8 acc;
        bool refused = false;
        for (int p = 0; p < world; ++p) {
          uint64_t v = 0;
          if (p == rank) {
            v = load8_any<kEs>(own + u * 8, nb);
          } else if (!wait_peer(p, &v, &refused)) {
            ok = false;
            break;
          }
          if (refused) continue;
          if (p == 0) {
            acc.load(v);
          } else {
            acc.combine_with(a.red, v);
          }
        }
        if (!ok) break;
        if (refused) continue;
        uint64_t r;
        acc.store(a.red, world, r);
        store8_any<kEs>(a.recv + u * 8, r, nb);
      } else {
        // Gather: every peer's packet first, then the stores (packets stay in place until every
        // rank has finished this epoch).
        bool refused = false;
        for (int p = 0; p < world; ++p) {
          if (p == rank) continue;
          uint64_t v = 0;
          if (!wait_peer(p, &v, &refused)) {
            ok = false;
            break;
          }
        }
        if (!ok) break;
        if (refused) continue;
        for (int i = 0; i < world; ++i) {
          const int p = rank + i < world ? rank + i : rank + i - world;
          char* to = a.recv + p * a.recv_stride + u * 8;
          uint64_t v;
          if (p == rank) {
            if (own + u * 8 == to) continue;  // in place
            v = load8_any<kEs>(own + u * 8, nb);
          } else {
            const uint4 q = dev::ld_v4_volatile(mine + static_cast<size_t>(p) * slot + at);
            v = static_cast<uint64_t>(q.x) | (static_cast<uint64_t>(q.z) << 32);
          }
          store8_any<kEs>(to, v, nb);
        }
      }
    }
  }
  // Unit 0 exists (count > 0) and a refusing rank fills every unit of its slot, so thread 0 has
  // seen any refusal: it alone records one.
  if (gtid == 0 && refused_by >= 0) {
    record_op_error(s.error_record, OpErrorCode::peer_refused, refused_by, -1, s.op_kind,
                    refused_code);
  }
  finish_epoch(s, epoch);
}

}  // namespace

int launch_ll(const LLArgs& a, KType type, int blocks, void* stream) {
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  return dispatch_type_world(type, a.sync.world, [&](auto i) {
    ll_kernel<decltype(i)::K, decltype(i)::kW><<<blocks, kThreads, 0, st>>>(a);
  });
}

}  // namespace symmem::cuda::kernels
