// all_to_all_v with counts in device memory (MoE dispatch/combine).
//
// NOTE [all_to_all_v]
// Every rank publishes its row of the count matrix (send_counts[0..world), then its receive
// capacity) into every peer's control region, then block barrier B1. After it every rank holds
// the whole matrix M (M[q][p] = elements q sends to p) and derives everything locally:
//   recv_counts[p] = M[p][rank], recv_offsets[p] = sum_{q<p} M[q][rank],
//   where this rank's piece for p starts in send:   sum_{t<p} M[rank][t],
//   where it lands in p's receive area:            sum_{q<rank} M[q][p].
// Pieces are pushed (split in 16-byte units over the blocks, block b with block b), then B2, then
// the own receive area is copied to recv when it was the workspace. Every read of the matrix
// happens before this block's B2 signal (the copy-out plan is kept in shared memory): once all
// blocks signalled B2 a peer may start the next all_to_all_v and overwrite the matrix.
// Errors are detected on the device (the matrix is the same on every rank, so every rank makes
// the same decision) and written to the op error record (kernels.hpp) by the rank concerned:
//   - a destination whose total exceeds its capacity receives nothing (capacity error there);
//   - a negative count: its sender reports it, nobody moves data of that sender's row;
//   - recv_counts_known and a count that disagrees with the sender: count_mismatch (data moves
//     as the sender says).

#include <cuda_runtime.h>

#include "cuda/kernels/common.cuh"

namespace symmem::cuda::kernels {
namespace {

// Per-block plan in dynamic shared memory, kPlanArrays arrays of `world` int64.
enum Plan : int {
  kRowOk = 0,  // rank q's row has no negative count
  kSendCnt,    // this rank -> p
  kSendOff,    // where that piece starts in send
  kDstOff,     // where it lands in p's receive area
  kDestOk,     // p's total fits its capacity
  kRecvCnt,    // p -> this rank (0 when this rank overflows or p's row is bad)
  kRecvOff,    // where it lands here
  kPlanArrays
};

__global__ void __launch_bounds__(kThreads, 2) a2av_kernel(const AllToAllVArgs a) {
  extern __shared__ int64_t plan[];
  const SyncArgs& s = a.sync;
  const int world = s.world;
  const int rank = s.rank;
  const int64_t W1 = world + 1;
  const uint32_t epoch = read_epoch(s);
  const dev::Deadline deadline = deadline_after(s);
  const int64_t G = gridDim.x;
  const int64_t b = blockIdx.x;
  const int64_t es = a.elem_size;
  int64_t* P[kPlanArrays];
  for (int k = 0; k < kPlanArrays; ++k) P[k] = plan + static_cast<int64_t>(k) * world;

  // 1. Publish this rank's row into every peer's matrix.
  for (int64_t i = threadIdx.x; i < static_cast<int64_t>(world) * W1; i += blockDim.x) {
    const int p = static_cast<int>(i / W1);
    const int t = static_cast<int>(i % W1);
    const int64_t v = t < world ? a.send_counts[t] : a.capacity;
    reinterpret_cast<int64_t*>(peer(a.matrix, p))[rank * W1 + t] = v;
  }
  publish_desc(s);
  bool ok = block_barrier(s, flag_value(epoch, 1), deadline) && desc_agree(s);
  const int64_t* M = a.matrix_local;
  auto m = [&](int q, int p) { return __ldcg(M + q * W1 + p); };

  if (ok) {
    // 2. The plan, every per-peer quantity computed by its own thread.
    for (int q = threadIdx.x; q < world; q += blockDim.x) {
      int64_t good = 1;
      for (int t = 0; t < world; ++t) good &= m(q, t) >= 0 ? 1 : 0;
      P[kRowOk][q] = good;
    }
    __syncthreads();
    for (int p = threadIdx.x; p < world; p += blockDim.x) {
      int64_t total = 0, dst = 0;
      for (int q = 0; q < world; ++q) {
        const int64_t c = P[kRowOk][q] != 0 ? m(q, p) : 0;
        total += c;
        if (q < rank) dst += c;
      }
      P[kDestOk][p] = total <= m(p, world) ? 1 : 0;
      P[kDstOff][p] = dst;
      P[kSendCnt][p] = m(rank, p);
      P[kRecvCnt][p] = P[kRowOk][p] != 0 ? m(p, rank) : 0;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      const bool my_dest_ok = P[kDestOk][rank] != 0;
      int64_t so = 0, ro = 0, incoming = 0;
      for (int p = 0; p < world; ++p) {
        P[kSendOff][p] = so;
        so += P[kSendCnt][p];
        incoming += P[kRecvCnt][p];
        if (!my_dest_ok) P[kRecvCnt][p] = 0;
        P[kRecvOff][p] = ro;
        ro += P[kRecvCnt][p];
      }
      // Outputs and error reports (block 0).
      if (b == 0) {
        for (int p = 0; p < world; ++p) {
          if (a.counts_known) {
            const int64_t c = P[kRowOk][p] != 0 ? m(p, rank) : 0;
            if (P[kRowOk][p] != 0 && c != a.recv_counts[p]) {
              record_op_error(s.error_record, OpErrorCode::count_mismatch, rank, p, c,
                              a.recv_counts[p]);
            }
          } else if (a.recv_counts != nullptr) {
            a.recv_counts[p] = P[kRecvCnt][p];
          }
          if (a.recv_offsets != nullptr) a.recv_offsets[p] = P[kRecvOff][p];
        }
        for (int t = 0; t < world; ++t) {
          if (m(rank, t) < 0) {
            record_op_error(s.error_record, OpErrorCode::negative_count, rank, t, m(rank, t), 0);
            break;
          }
        }
        if (!my_dest_ok) {
          record_op_error(s.error_record, OpErrorCode::capacity, rank, -1, incoming, a.capacity);
        }
      }
    }
    __syncthreads();
    // 3. Push this rank's pieces (nothing when its own row is bad).
    if (P[kRowOk][rank] != 0) {
      for (int i = 0; i < world; ++i) {
        const int p = rank + i < world ? rank + i : rank + i - world;
        if (P[kDestOk][p] == 0) continue;
        char* to = (p == rank ? a.recv : peer(a.dst, p)) + P[kDstOff][p] * es;
        copy_share(to, a.send + P[kSendOff][p] * es, P[kSendCnt][p] * es, b, G);
      }
    }
  }
  // The matrix is not read after this block's B2 signal (a peer may then start the next op).
  ok = ok && block_barrier(s, flag_value(epoch, 2), deadline);
  if (ok && a.copy_out_src != nullptr) {
    for (int p = 0; p < world; ++p) {
      if (p == rank) continue;
      const int64_t off = P[kRecvOff][p] * es;
      copy_share(a.recv + off, a.copy_out_src + off, P[kRecvCnt][p] * es, b, G);
    }
  }
  finish_epoch(s, epoch);
}

}  // namespace

int launch_all_to_all_v(const AllToAllVArgs& a, int blocks, void* stream) {
  const size_t shared = kPlanArrays * static_cast<size_t>(a.sync.world) * sizeof(int64_t);
  a2av_kernel<<<blocks, kThreads, shared, static_cast<cudaStream_t>(stream)>>>(a);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace symmem::cuda::kernels
