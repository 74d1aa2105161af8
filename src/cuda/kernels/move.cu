// Barrier-based data movement over peer pointers: all_gather, all_to_all, broadcast, barrier,
// and the plain copy used by put/get.
//
// NOTE [move kernels]
// Pieces are split in 16-byte units over the blocks; block b of every rank handles share b of
// every piece in every phase, so block b's pairwise barrier (kernels.hpp) covers what it reads.
//   all_gather (pull):  [copy own piece into src[rank]] B1 | read share b of src[p] into recv
//                       block p, for every p | B2
//   all_to_all (push):  B1 | write share b of send block p to dst[p] block `rank` | B2 |
//                       [copy share b of every block of the own receive area to recv]
//   broadcast (pull):   [root: copy its piece into src[root]] B1 | read share b of src[root]
//                       into recv | B2
//   barrier:            B1 (and the descriptor check, which sees a refused barrier)
// B1 says every rank reached the op (its inputs are published, its receive area is free); B2
// says every peer is done with this rank's memory. Every mode checks the ranks' tags of its
// descriptor at B1 (barrier_agree, NOTE [barrier flags]); when the check
// fails (a peer refused the op, NOTE [refused ops] in refuse.cu, or zero-copy buffers differ)
// nothing moves and B2 is skipped on every rank, since every rank sees the same table.

#include <cuda_runtime.h>

#include "cuda/kernels/common.cuh"

namespace symmem::cuda::kernels {
namespace {

__global__ void __launch_bounds__(kThreads, 2) move_kernel(const MoveArgs a) {
  const SyncArgs& s = a.sync;
  const int world = s.world;
  const int rank = s.rank;
  const uint32_t epoch = read_epoch(s);
  const dev::Deadline deadline = deadline_after(s);
  const int64_t G = gridDim.x;
  const int64_t b = blockIdx.x;
  const int64_t n = a.bytes;
  bool ok = true;
  switch (a.mode) {
    case MoveMode::all_gather: {
      if (a.copy_in != nullptr) copy_share(peer(a.src, rank), a.copy_in, n, b, G);
      ok = barrier_agree(s, epoch, deadline, true);
      if (ok) {
        for (int i = 0; i < world; ++i) {
          const int p = rank + i < world ? rank + i : rank + i - world;
          const char* from = p == rank && a.local_in != nullptr ? a.local_in : peer(a.src, p);
          copy_share(a.local_out + p * n, from, n, b, G);
        }
      }
      ok = ok && block_barrier(s, flag_value(epoch, 2), deadline);
      break;
    }
    case MoveMode::all_to_all: {
      ok = barrier_agree(s, epoch, deadline, true);
      if (ok) {
        for (int i = 0; i < world; ++i) {
          const int p = rank + i < world ? rank + i : rank + i - world;
          char* to = p == rank ? a.local_out + p * n : peer(a.dst, p) + rank * n;
          copy_share(to, a.local_in + p * n, n, b, G);
        }
      }
      ok = ok && block_barrier(s, flag_value(epoch, 2), deadline);
      if (ok && a.copy_out_src != nullptr) {
        for (int p = 0; p < world; ++p) {
          if (p != rank) copy_share(a.local_out + p * n, a.copy_out_src + p * n, n, b, G);
        }
      }
      break;
    }
    case MoveMode::broadcast: {
      if (rank == a.root && a.copy_in != nullptr) copy_share(peer(a.src, rank), a.copy_in, n, b, G);
      ok = barrier_agree(s, epoch, deadline, true);
      if (ok) {
        const char* from =
            rank == a.root && a.local_in != nullptr ? a.local_in : peer(a.src, a.root);
        copy_share(a.local_out, from, n, b, G);
      }
      ok = ok && block_barrier(s, flag_value(epoch, 2), deadline);
      break;
    }
    case MoveMode::barrier:
      ok = barrier_agree(s, epoch, deadline, true);
      break;
  }
  (void)ok;
  finish_epoch(s, epoch);
}

__global__ void __launch_bounds__(kThreads, 2) copy_kernel(const CopyArgs a) {
  copy_share(a.dst, a.src, a.bytes, blockIdx.x, gridDim.x);
}

__global__ void read_globaltimer_kernel(uint64_t* out) {
  *reinterpret_cast<volatile uint64_t*>(out) = dev::globaltimer_ns();
  __threadfence_system();
}

}  // namespace

int launch_move(const MoveArgs& a, int blocks, void* stream) {
  move_kernel<<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(a);
  return static_cast<int>(cudaGetLastError());
}

int launch_copy(const CopyArgs& a, int blocks, void* stream) {
  copy_kernel<<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(a);
  return static_cast<int>(cudaGetLastError());
}

int launch_read_globaltimer(uint64_t* out, void* stream) {
  read_globaltimer_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(out);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace symmem::cuda::kernels
