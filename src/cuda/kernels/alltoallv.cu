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

__global__ void __launch_bounds__(kThreads, 2) a2av_kernel(const AllToAllVArgs a) {
  extern __shared__ int64_t plan[];  // [world] offsets, [world] counts of the copy-out
  __shared__ int row_ok_rank;
  const SyncArgs& s = a.sync;
  const int world = s.world;
  const int rank = s.rank;
  const int64_t W1 = world + 1;
  const uint32_t epoch = read_epoch(s);
  const uint64_t deadline = deadline_after(s.timeout_ns);
  const int64_t G = gridDim.x;
  const int64_t b = blockIdx.x;
  const int64_t es = a.elem_size;

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

  if (ok) {
    // Rows with a negative count move nothing; destinations over capacity receive nothing.
    auto row_ok = [&](int q) {
      for (int t = 0; t < world; ++t) {
        if (__ldcg(M + q * W1 + t) < 0) return false;
      }
      return true;
    };
    auto column_total = [&](int p) {
      int64_t sum = 0;
      for (int q = 0; q < world; ++q) {
        if (row_ok(q)) sum += __ldcg(M + q * W1 + p);
      }
      return sum;
    };
    auto dest_ok = [&](int p) { return column_total(p) <= __ldcg(M + p * W1 + world); };
    auto m = [&](int q, int p) { return __ldcg(M + q * W1 + p); };

    const bool my_dest_ok = dest_ok(rank);
    // Outputs and error reports (block 0).
    if (b == 0 && threadIdx.x == 0) {
      int64_t off = 0;
      for (int p = 0; p < world; ++p) {
        const int64_t c = row_ok(p) ? m(p, rank) : 0;
        if (a.counts_known) {
          if (c != a.recv_counts[p] && row_ok(p)) {
            record_op_error(s.error_record, OpErrorCode::count_mismatch, rank, p, c,
                            a.recv_counts[p]);
          }
        } else if (a.recv_counts != nullptr) {
          a.recv_counts[p] = my_dest_ok ? c : 0;
        }
        if (a.recv_offsets != nullptr) a.recv_offsets[p] = off;
        off += my_dest_ok ? c : 0;
      }
      for (int t = 0; t < world; ++t) {
        if (m(rank, t) < 0) {
          record_op_error(s.error_record, OpErrorCode::negative_count, rank, t, m(rank, t), 0);
          break;
        }
      }
      if (!my_dest_ok) {
        record_op_error(s.error_record, OpErrorCode::capacity, rank, -1, column_total(rank),
                        a.capacity);
      }
    }
    // Copy-out plan.
    for (int p = threadIdx.x; p < world; p += blockDim.x) {
      int64_t off = 0;
      for (int q = 0; q < p; ++q) off += row_ok(q) ? m(q, rank) : 0;
      plan[p] = off;
      plan[world + p] = my_dest_ok && row_ok(p) ? m(p, rank) : 0;
    }
    if (threadIdx.x == 0) row_ok_rank = row_ok(rank) ? 1 : 0;
    __syncthreads();
    // Push this rank's pieces.
    if (row_ok_rank != 0) {
      int64_t src_off = 0;
      for (int p = 0; p < world; ++p) {
        const int64_t c = m(rank, p);
        if (dest_ok(p)) {
          int64_t dst_off = 0;
          for (int q = 0; q < rank; ++q) dst_off += row_ok(q) ? m(q, p) : 0;
          char* to = p == rank ? a.recv + dst_off * es : peer(a.dst, p) + dst_off * es;
          copy_share(to, a.send + src_off * es, c * es, b, G);
        }
        src_off += c;
      }
    }
  }
  ok = ok && block_barrier(s, flag_value(epoch, 2), deadline);
  if (ok && a.copy_out_src != nullptr) {
    for (int p = 0; p < world; ++p) {
      if (p == rank) continue;
      copy_share(a.recv + plan[p] * es, a.copy_out_src + plan[p] * es, plan[world + p] * es, b, G);
    }
  }
  finish_epoch(s, epoch);
}

}  // namespace

int launch_all_to_all_v(const AllToAllVArgs& a, int blocks, void* stream) {
  const size_t shared = 2 * static_cast<size_t>(a.sync.world) * sizeof(int64_t);
  a2av_kernel<<<blocks, kThreads, shared, static_cast<cudaStream_t>(stream)>>>(a);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace symmem::cuda::kernels
