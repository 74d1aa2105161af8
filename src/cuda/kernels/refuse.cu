// The refuse kernel: what a rank launches instead of an op's kernel when it refused the op.
//
// NOTE [refused ops]
// GPU ops skip the host agreement (NOTE [collective agreement] in core/ops.cpp): a rank checks
// its own arguments and throws at the call, while its peers have already enqueued the op's
// kernel, which waits for it. So a rank that refuses a collective or barrier of a GPU group
// (any symmem::Error before its kernel was launched, other than a timeout or an abort) still
// enqueues this kernel in its place, on the op's stream and the group's workspace, at the same
// epoch:
//   1. its LL slot at every peer (the epoch's parity, every unit of the slot's capacity) gets
//      refusal packets {kLLRefuseMagic, refuse flag, ErrorCode, refuse flag} (common.cuh): an
//      LL kernel that finds one where it waits for a packet notes the refusal, still waits for
//      every other peer's packet of the unit, and writes no unit of recv;
//   2. its descriptor {kDescRefused, ErrorCode, -1, -1} goes into every peer's table of the
//      epoch's parity, then barrier flags for every block row [0, kMaxBlocks) at every peer,
//      with release: phase 3 (flag_value(epoch, 3), which also passes B1) carrying the refusal's
//      tag (NOTE [barrier flags] in common.cuh). A barrier kernel passes B1, sees a tag that is
//      not its own, meets the ranks again at phase 3 (this rank is there already), reads the
//      refusal from the table, and no rank moves data or waits at B2 (every kernel of the family
//      checks the tags at B1, the plain barrier too, and publishes its own descriptor on its
//      way to phase 3);
//   3. it waits (deadline: the call's timeout) until every peer has started its kernel of this
//      epoch: the peer's first-barrier flag of block 0 has come (a barrier kernel or a refusal),
//      or its LL packet of unit 0 (data or refusal). This keeps NOTE [epochs and flags]'
//      Progress rule, so the descriptor and LL halves it wrote stay until every peer read them;
//   4. it finishes the epoch, so every rank's epoch stays in step.
// The peers record peer_refused in their op error record (naming the refusing rank and carrying
// its ErrorCode), which the next synchronising call or Group::check_async_error() raises (NOTE
// [device-detected errors] in cuda_ops.cu). The refusing rank records nothing: it threw its own
// error at the call. When several ranks refuse, their refusals see each other's flags.
// The host side (cuda_ops.cu, refuse()) launches it only when the peers' kernel will meet it:
// a group of more than one rank, not aborted, an op that launches a kernel at all (a count > 0,
// or a barrier or all_to_all_v), not during stream capture (a captured refusal would replay out
// of step), a workspace that already exists on this device and is large enough for what this
// op needs (growing one is a collective allocation the refusing rank cannot take part in), and
// never after the op's own kernel was launched.
// Limitations: without a workspace yet (a group's first op), during capture, on paths that do
// not run these kernels (NCCL's own collectives; nvshmem's broadcast, all_to_all,
// all_to_all_v and barrier), and when the peers' op needs a larger workspace, the peers are not
// told and their kernel times out. Ranks that pass different but individually valid arguments
// are not detected on the LL path (only zero-copy descriptors are compared, on the barrier path).

#include <cuda_runtime.h>

#include "cuda/kernels/common.cuh"

namespace symmem::cuda::kernels {
namespace {

// Whether `p` has started its kernel of `epoch` (step 3 above).
SYMMEM_DEVICE_INLINE bool peer_started(const RefuseArgs& a, int p, uint32_t epoch) {
  const SyncArgs& s = a.sync;
  if (flag_reached(dev::load_sys<MemOrder::relaxed>(flag_slot(s, s.rank, 0, p)),
                   flag_value(epoch, 1)))
    return true;
  const char* pkt = peer(a.ll, s.rank) + static_cast<size_t>(epoch & 1) * s.world * a.slot_bytes +
                    static_cast<size_t>(p) * a.slot_bytes;
  const uint4 q = dev::ld_v4_volatile(pkt);
  return (q.y == epoch + 1 && q.w == epoch + 1) || ll_refused(q, ll_refuse_flag(epoch));
}

__global__ void __launch_bounds__(kThreads, 2) refuse_kernel(const RefuseArgs a) {
  const SyncArgs& s = a.sync;
  const int world = s.world;
  const int rank = s.rank;
  const uint32_t epoch = read_epoch(s);

  // 1. Refusal packets in this rank's LL slot at every peer.
  const uint32_t rflag = ll_refuse_flag(epoch);
  const uint4 pkt = make_uint4(kLLRefuseMagic, rflag, static_cast<uint32_t>(a.code), rflag);
  const size_t at = static_cast<size_t>(epoch & 1) * world * a.slot_bytes +
                    static_cast<size_t>(rank) * a.slot_bytes;
  const int64_t packets = static_cast<int64_t>(a.slot_bytes / 16);
  const int64_t gtid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t gstride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int i = 1; i < world; ++i) {
    char* base = peer(a.ll, rank + i < world ? rank + i : rank + i - world) + at;
    for (int64_t u = gtid; u < packets; u += gstride) dev::st_v4_volatile(base + u * 16, pkt);
  }

  if (blockIdx.x == 0) {
    // 2. The descriptor, then (released after it) the flags of every block row at every peer:
    // phase 3 with the refusal's tag, so that the peers' B1 sees a differing tag and their
    // phase-3 meeting finds this rank there too (NOTE [barrier flags]).
    publish_desc(s, epoch);
    __syncthreads();
    const uint64_t word = flag_word(desc_tag(s), flag_value(epoch, 3));
    for (int i = threadIdx.x; i < kMaxBlocks * world; i += blockDim.x) {
      const int b = i / world, p = i % world;
      if (p == rank) continue;
      flag_store(flag_slot(s, p, b, rank), word, true);
    }
    // 3. Every peer has started this epoch's kernel.
    const dev::Deadline deadline = deadline_after(s);
    for (int p = threadIdx.x; p < world; p += blockDim.x) {
      if (p == rank) continue;
      int spins = 0;
      while (!peer_started(a, p, epoch)) {
        if (++spins == 64) {
          spins = 0;
          if (deadline.expired()) {
            record_timeout(s, kRefuseChannel, p);
            break;
          }
        }
      }
    }
  }
  // 4.
  finish_epoch(s, epoch);
}

}  // namespace

int launch_refuse(const RefuseArgs& a, int blocks, void* stream) {
  refuse_kernel<<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(a);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace symmem::cuda::kernels
