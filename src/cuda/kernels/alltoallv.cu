// all_to_all_v with counts in device memory (MoE dispatch/combine).
//
// NOTE [all_to_all_v]
// Every rank publishes its row of the count matrix into every peer's control region: its
// send_counts[0..world), its receive capacity, then (recv_counts_known) the counts it expects
// from each peer, else -1s. Then block barrier B1. After it every rank holds the whole matrix
// (M[q][p] = elements q sends to p, E[p][q] = what p expects from q) and derives everything
// locally:
//   recv_counts[p] = M[p][rank], recv_offsets[p] = sum_{q<p} M[q][rank],
//   where this rank's piece for p starts in send:   sum_{t<p} M[rank][t],
//   where it lands in p's receive area:            sum_{q<rank} M[q][p].
// Pieces are pushed (split in 16-byte units over the blocks, block b with block b), then B2, then
// the own receive area is copied to recv when it was the workspace. Every read of the matrix
// happens before this block's B2 signal (the copy-out plan is kept in shared memory): once all
// blocks signalled B2 a peer may start the next all_to_all_v and overwrite the matrix.
// Errors: the matrix is the same on every rank, so every rank checks all of it in one fixed
// order and finds the same first error: a negative count (its sender), a destination whose
// total exceeds its capacity, a count that disagrees with what the receiver expects
// (recv_counts_known). Then no rank moves anything or writes its outputs, and every rank writes
// that error to its op error record (kernels.hpp), naming the rank at fault: each rank raises
// the same InvalidArgument as the host backend would, at its next synchronising call or error
// query (NOTE [device-detected errors] in cuda_ops.cu).

#include <cuda_runtime.h>

#include "cuda/kernels/common.cuh"

namespace symmem::cuda::kernels {
namespace {

// Per-block plan in dynamic shared memory, kPlanArrays arrays of `world` int64.
enum Plan : int {
  kSendCnt = 0,  // this rank -> p
  kSendOff,      // where that piece starts in send
  kDstOff,       // where it lands in p's receive area
  kRecvCnt,      // p -> this rank
  kRecvOff,      // where it lands here
  kPlanArrays
};

// The first error of the matrix, in the documented order (every rank finds the same one).
struct MatrixError {
  OpErrorCode code = OpErrorCode::none;
  int who = -1, peer = -1;
  int64_t a = 0, b = 0;
};

template <class Get>
__device__ MatrixError first_error(int world, bool known, Get m) {
  MatrixError e;
  for (int q = 0; q < world; ++q) {
    for (int t = 0; t < world; ++t) {
      if (m(q, t) < 0) return {OpErrorCode::negative_count, q, t, m(q, t), 0};
    }
  }
  for (int p = 0; p < world; ++p) {
    int64_t total = 0;
    for (int q = 0; q < world; ++q) total += m(q, p);
    if (total > m(p, world)) return {OpErrorCode::capacity, p, -1, total, m(p, world)};
  }
  if (known) {
    for (int p = 0; p < world; ++p) {
      for (int q = 0; q < world; ++q) {
        const int64_t expected = m(p, world + 1 + q);
        if (expected != m(q, p)) return {OpErrorCode::count_mismatch, p, q, m(q, p), expected};
      }
    }
  }
  return e;
}

__global__ void __launch_bounds__(kThreads, 2) a2av_kernel(const AllToAllVArgs a) {
  extern __shared__ int64_t plan[];
  __shared__ int matrix_ok;
  const SyncArgs& s = a.sync;
  const int world = s.world;
  const int rank = s.rank;
  const int64_t row = a2av_row_length(world);
  const uint32_t epoch = read_epoch(s);
  const dev::Deadline deadline = deadline_after(s);
  const int64_t G = gridDim.x;
  const int64_t b = blockIdx.x;
  const int64_t es = a.elem_size;
  int64_t* P[kPlanArrays];
  for (int k = 0; k < kPlanArrays; ++k) P[k] = plan + static_cast<int64_t>(k) * world;

  // 1. Publish this rank's row into every peer's matrix.
  for (int64_t i = threadIdx.x; i < static_cast<int64_t>(world) * row; i += blockDim.x) {
    const int p = static_cast<int>(i / row);
    const int t = static_cast<int>(i % row);
    int64_t v;
    if (t < world) {
      v = a.send_counts[t];
    } else if (t == world) {
      v = a.capacity;
    } else {
      v = a.counts_known ? a.recv_counts[t - world - 1] : -1;
    }
    reinterpret_cast<int64_t*>(peer(a.matrix, p))[rank * row + t] = v;
  }
  bool ok = barrier_agree(s, epoch, deadline, true);
  const int64_t* M = a.matrix_local;
  auto m = [&](int q, int p) { return __ldcg(M + q * row + p); };

  if (ok) {
    // 2. The checks (thread 0 of every block: the same answer everywhere), then the plan.
    if (threadIdx.x == 0) {
      const MatrixError e = first_error(world, a.counts_known, m);
      matrix_ok = e.code == OpErrorCode::none ? 1 : 0;
      if (e.code != OpErrorCode::none && b == 0)
        record_op_error(s.error_record, e.code, e.who, e.peer, e.a, e.b);
    }
    __syncthreads();
  }
  if (ok && matrix_ok != 0) {
    for (int p = threadIdx.x; p < world; p += blockDim.x) {
      int64_t dst = 0;
      for (int q = 0; q < rank; ++q) dst += m(q, p);
      P[kDstOff][p] = dst;
      P[kSendCnt][p] = m(rank, p);
      P[kRecvCnt][p] = m(p, rank);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int64_t so = 0, ro = 0;
      for (int p = 0; p < world; ++p) {
        P[kSendOff][p] = so;
        so += P[kSendCnt][p];
        P[kRecvOff][p] = ro;
        ro += P[kRecvCnt][p];
      }
      // Outputs (block 0).
      if (b == 0) {
        for (int p = 0; p < world; ++p) {
          if (!a.counts_known && a.recv_counts != nullptr) a.recv_counts[p] = P[kRecvCnt][p];
          if (a.recv_offsets != nullptr) a.recv_offsets[p] = P[kRecvOff][p];
        }
      }
    }
    __syncthreads();
    // 3. Push this rank's pieces.
    for (int i = 0; i < world; ++i) {
      const int p = rank + i < world ? rank + i : rank + i - world;
      char* to = (p == rank ? a.recv : peer(a.dst, p)) + P[kDstOff][p] * es;
      copy_share(to, a.send + P[kSendOff][p] * es, P[kSendCnt][p] * es, b, G);
    }
  }
  // The matrix is not read after this block's B2 signal (a peer may then start the next op).
  const bool moved = ok && matrix_ok != 0;
  ok = ok && block_barrier(s, flag_value(epoch, 2), deadline);
  if (ok && moved && a.copy_out_src != nullptr) {
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
