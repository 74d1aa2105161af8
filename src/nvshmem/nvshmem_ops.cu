// Ops of the nvshmem backend.
//
// - broadcast, all_to_all, all_to_all_v, put and get move data with NVSHMEM device-initiated
//   transfers (nvshmemx_putmem_block / nvshmemx_getmem_block), so they reach peers on other
//   hosts as well as peers on this one. Sources and destinations of remote transfers must be
//   symmetric, so data is staged through the group's symmetric workspace:
//     stage in (local copy) -> barrier -> puts into peers' workspace -> barrier -> stage out.
//   The barriers (NOTE [nvshmem collective launch]) keep a rank from overwriting a peer's
//   workspace before the peer finished the previous op, and from reading before every put
//   completed (their remote signals follow nvshmem_quiet).
// - all_reduce, reduce_scatter, all_gather run the cuda backend's peer-pointer kernels
//   (cuda_run_op) when every peer is directly reachable, else NVSHMEM's team collectives
//   (nvshmemx_*_reduce_on_stream, nvshmemx_fcollectmem_on_stream) on the workspace.
//   all_to_all_v takes the peer-pointer kernels too when every peer is directly reachable (their
//   errors are every rank's: NOTE [all_to_all_v]), else the NVSHMEM path below.
//
// all_to_all_v (device-side counts): every rank publishes its send_counts row to every peer,
// so each rank holds the full matrix M[src][dst] and can place its block for peer p at
// sum_{q<me} M[q][p] in p's receive area without a host round trip. Capacity overflows and
// (MPI style) count disagreements are detected on the device, recorded, and raised by the host
// as InvalidArgument after the null stream's synchronisation, or by the group's error query
// (Group::check_async_error), never by the next op before its launch.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include "core/check.hpp"
#include "core/log.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/cuda_ops.hpp"
#include "cuda/kernels/common.cuh"
#include "cuda/kernels/kernels.hpp"
#include "cuda/peer_tables.hpp"
#include "cuda/timeout_record.hpp"
#include "nvshmem/nvshmem_backend.hpp"
#include "nvshmem/nvshmem_device.cuh"
#include "nvshmem/nvshmem_memory.hpp"
#include "nvshmem/nvshmem_runtime.hpp"

namespace symmem::nvshm {
namespace {

constexpr int kThreads = 512;
constexpr size_t kChunk = 256 << 10;  // bytes one block moves per transfer
constexpr int kOpChannel = 0;         // the workspace pad channel the ops synchronise on

size_t align_up(size_t n, size_t a) {
  return (n + a - 1) / a * a;
}

// ---- device error record of all_to_all_v ----------------------------------------------------
// int64 [0] flag (0 ok / 1 set), [1] kind (1 capacity, 2 count mismatch), [2] peer, [3] value,
// [4] expected. Host-mapped (8 int64); written as a device record of three vectors (NOTE
// [device records] in symmem/device/sync.cuh: no atomics on host memory) by one thread per
// kernel, so the first failure stays whole.
constexpr int kA2avCapacity = 1;
constexpr int kA2avMismatch = 2;
constexpr int kA2avPeerStaging = 3;  // a sender's staging refused its data (its row is all -1)

__device__ void record_a2av_error(long long* rec, int kind, int peer, long long value,
                                  long long expected) {
  auto lo = [](long long x) { return static_cast<uint32_t>(static_cast<unsigned long long>(x)); };
  auto hi = [](long long x) {
    return static_cast<uint32_t>(static_cast<unsigned long long>(x) >> 32);
  };
  const uint4 v[3] = {make_uint4(1u, 0u, lo(kind), hi(kind)),
                      make_uint4(lo(peer), hi(peer), lo(value), hi(value)),
                      make_uint4(lo(expected), hi(expected), 0u, 0u)};
  (void)dev::write_record(reinterpret_cast<int32_t*>(rec), v);
}

// ---- kernels ----------------------------------------------------------------------------------

__device__ __forceinline__ size_t chunk_len(size_t bytes, size_t off) {
  return bytes - off < kChunk ? bytes - off : kChunk;
}

// Puts `bytes` from local symmetric `src` to `dst` (symmetric address) on PE `pe`, split over
// the grid's blocks in kChunk pieces.
__global__ void put_kernel(char* dst, const char* src, size_t bytes, int pe) {
  for (size_t off = static_cast<size_t>(blockIdx.x) * kChunk; off < bytes;
       off += static_cast<size_t>(gridDim.x) * kChunk) {
    nvshmemx_putmem_block(dst + off, src + off, chunk_len(bytes, off), pe);
  }
}

__global__ void get_kernel(char* dst, const char* src, size_t bytes, int pe) {
  for (size_t off = static_cast<size_t>(blockIdx.x) * kChunk; off < bytes;
       off += static_cast<size_t>(gridDim.x) * kChunk) {
    nvshmemx_getmem_block(dst + off, src + off, chunk_len(bytes, off), pe);
  }
}

// Broadcast from the root: block y serves peer y (skips the root), blocks x split the bytes.
__global__ void bcast_kernel(char* dst, const char* src, size_t bytes, const int* pes, int root) {
  const int p = blockIdx.y;
  if (p == root) return;
  for (size_t off = static_cast<size_t>(blockIdx.x) * kChunk; off < bytes;
       off += static_cast<size_t>(gridDim.x) * kChunk) {
    nvshmemx_putmem_block(dst + off, src + off, chunk_len(bytes, off), pes[p]);
  }
}

// all_to_all: block y serves peer y: src block y -> peer y's dst block `me`.
__global__ void a2a_kernel(char* dst, const char* src, size_t block_bytes, const int* pes, int me) {
  const int p = blockIdx.y;
  for (size_t off = static_cast<size_t>(blockIdx.x) * kChunk; off < block_bytes;
       off += static_cast<size_t>(gridDim.x) * kChunk) {
    nvshmemx_putmem_block(dst + me * block_bytes + off, src + p * block_bytes + off,
                          chunk_len(block_bytes, off), pes[p]);
  }
}

// Local copy by the whole grid (the cuda kernels' copy_bytes: widest words the two addresses
// allow, four 16-byte loads in flight per thread).
__device__ void grid_copy(char* dst, const char* src, size_t bytes) {
  cuda::kernels::copy_bytes(dst, src, static_cast<int64_t>(bytes),
                            static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x),
                            static_cast<int>(gridDim.x * blockDim.x));
}

// all_to_all_v stage in: send_counts -> my row, and (stage) the send data -> src area, whose
// capacity is checked. A rank whose data do not fit publishes a row of -1: no rank sends to or
// from it, and each receiver records which rank it was (kA2avPeerStaging).
__global__ void a2av_stage_kernel(const int64_t* send_counts, int world, const char* send,
                                  int64_t* my_row, char* src_area, size_t src_capacity_elems,
                                  size_t esize, bool stage, long long* rec, int me) {
  __shared__ long long total;
  if (threadIdx.x == 0) {
    long long t = 0;
    for (int p = 0; p < world; ++p) t += send_counts[p];
    total = t;
  }
  __syncthreads();
  const bool fits = total >= 0 && (!stage || static_cast<size_t>(total) <= src_capacity_elems);
  if (blockIdx.x == 0) {
    for (int p = threadIdx.x; p < world; p += blockDim.x) my_row[p] = fits ? send_counts[p] : -1;
    if (!fits && threadIdx.x == 0)
      record_a2av_error(rec, kA2avCapacity, me, total, static_cast<long long>(src_capacity_elems));
  }
  if (fits && stage) grid_copy(src_area, send, static_cast<size_t>(total) * esize);
}

// Publishes my row of counts into row `me` of every peer's matrix.
__global__ void a2av_counts_kernel(int64_t* matrix, const int64_t* my_row, int world,
                                   const int* pes, int me) {
  const int p = blockIdx.x;
  nvshmemx_putmem_block(matrix + static_cast<size_t>(me) * world, my_row, sizeof(int64_t) * world,
                        pes[p]);
}

// Data: block y serves peer y. Offset in peer p's receive area: sum_{q<me} M[q][p].
__global__ void a2av_data_kernel(const int64_t* matrix, int world, const char* src_area,
                                 char* dst_area, size_t recv_capacity, size_t esize, const int* pes,
                                 int me) {
  const int p = blockIdx.y;
  if (matrix[static_cast<size_t>(me) * world + p] <= 0) return;  // nothing, or this rank refused
  long long send_off = 0, dst_off = 0, total_at_p = 0;
  for (int q = 0; q < p; ++q) send_off += matrix[static_cast<size_t>(me) * world + q];
  for (int q = 0; q < world; ++q) {
    const long long c = matrix[static_cast<size_t>(q) * world + p];
    if (c < 0) return;  // a sender to p refused: p records it and takes nothing
    if (q < me) dst_off += c;
    total_at_p += c;
  }
  if (total_at_p > static_cast<long long>(recv_capacity)) return;  // recorded by the receiver
  const size_t bytes = static_cast<size_t>(matrix[static_cast<size_t>(me) * world + p]) * esize;
  const char* s = src_area + send_off * esize;
  char* d = dst_area + dst_off * esize;
  for (size_t off = static_cast<size_t>(blockIdx.x) * kChunk; off < bytes;
       off += static_cast<size_t>(gridDim.x) * kChunk) {
    nvshmemx_putmem_block(d + off, s + off, chunk_len(bytes, off), pes[p]);
  }
}

// Stage out: counts/offsets (or their check) and the packed data.
__global__ void a2av_finish_kernel(const int64_t* matrix, int world, const char* dst_area,
                                   char* recv, int64_t* recv_counts, int64_t* recv_offsets,
                                   bool counts_known, size_t recv_capacity, size_t esize,
                                   long long* rec, int me) {
  __shared__ long long total;
  __shared__ int refused;  // the lowest sender whose staging refused its data (world: none)
  if (threadIdx.x == 0) {
    long long t = 0;
    refused = world;
    for (int q = 0; q < world; ++q) {
      const long long c = matrix[static_cast<size_t>(q) * world + me];
      if (c < 0 && refused == world) refused = q;
      t += c;
    }
    total = t;
  }
  __syncthreads();
  if (refused < world) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
      record_a2av_error(rec, kA2avPeerStaging, refused, -1, 0);
    }
    return;
  }
  if (blockIdx.x == 0) {
    __shared__ int first_bad;  // the lowest peer whose count disagrees (world: none)
    if (threadIdx.x == 0) first_bad = world;
    __syncthreads();
    for (int q = threadIdx.x; q < world; q += blockDim.x) {
      const long long c = matrix[static_cast<size_t>(q) * world + me];
      if (counts_known) {
        if (recv_counts[q] != c) atomicMin(&first_bad, q);
      } else {
        long long off = 0;
        for (int r = 0; r < q; ++r) off += matrix[static_cast<size_t>(r) * world + me];
        recv_counts[q] = c;
        if (recv_offsets != nullptr) recv_offsets[q] = off;
      }
    }
    __syncthreads();
    if (threadIdx.x == 0 && first_bad < world) {
      const int q = first_bad;
      record_a2av_error(rec, kA2avMismatch, q, recv_counts[q],
                        matrix[static_cast<size_t>(q) * world + me]);
    }
  }
  if (total > static_cast<long long>(recv_capacity)) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
      record_a2av_error(rec, kA2avCapacity, -1, total, static_cast<long long>(recv_capacity));
    }
    return;
  }
  grid_copy(recv, dst_area, static_cast<size_t>(total) * esize);
}

template <class T>
__global__ void scale_kernel(T* data, size_t n, float factor) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    data[i] = static_cast<T>(static_cast<float>(data[i]) * factor);
  }
}

// avg of f64 and the integer types: the sum divided by the world size, as the host and the cuda
// kernels do it (IEEE division; integer division truncates toward zero).
template <class T>
__global__ void divide_kernel(T* data, size_t n, int world) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    data[i] = data[i] / static_cast<T>(world);
  }
}

unsigned grid_for(size_t bytes, unsigned max_blocks = 32) {
  size_t g = (bytes + kChunk - 1) / kChunk;
  return static_cast<unsigned>(std::clamp<size_t>(g, 1, max_blocks));
}

// Blocks of a local grid_copy of `bytes` (64 KiB per block, at most 128).
unsigned copy_grid(size_t bytes) {
  return static_cast<unsigned>(std::clamp<size_t>((bytes + 65535) / 65536, 1, 128));
}

// ---- host helpers ------------------------------------------------------------------------------

NvshmemMemory& nv_memory(const SymmetricMemory& m, const char* op, int rank) {
  auto* mem = dynamic_cast<NvshmemMemory*>(m.backend_memory().get());
  SYMMEM_CHECK(op, rank, mem != nullptr, ErrorCode::InvalidArgument,
               "the symmetric buffer belongs to the '" << m.backend() << "' backend, not nvshmem");
  return *mem;
}

// The symmetric address (this PE) of a view.
char* sym_addr(const SymmetricMemory& m, NvshmemMemory& mem) {
  return mem.local_base() + m.offset();
}

void check_launch(const char* op, int rank) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) cuda::throw_cudart_error(op, rank, "kernel launch", e, SYMMEM_WHERE);
}

// The group workspace's staging area: the cuda backend's kernels keep control words, flags and
// LL buffers before data_offset (NOTE [workspace layout]); the nvshmem ops stage after it.
struct Staging {
  SymmetricMemory ws;
  NvshmemMemory* mem = nullptr;
  char* base = nullptr;  // symmetric address (this PE) of the staging area
};

Staging staging(const OpArgs& a, size_t bytes, const char* op) {
  const size_t off = cuda::kernels::ws_layout(a.group->world_size()).data_offset;
  Staging st;
  st.ws = a.workspace(off + bytes);
  st.mem = &nv_memory(st.ws, op, a.group->rank());
  st.base = sym_addr(st.ws, *st.mem) + off;
  return st;
}

void barrier_on(const SymmetricMemory& ws, NvshmemMemory& mem, const OpArgs& a, const char* op) {
  NvSync s = mem.nv_sync(0, mem.bytes(), a.timeout);
  launch_barrier(s, kOpChannel, static_cast<cudaStream_t>(a.stream), op);
  (void)ws;
}

void copy_async(void* dst, const void* src, size_t bytes, cudaStream_t stream, const char* op,
                int rank) {
  if (bytes == 0 || dst == src) return;
  SYMMEM_CUDART_CHECK(op, rank, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
}

}  // namespace

// ---- NvshmemBackend::run ------------------------------------------------------------------------

void NvshmemBackend::raise_a2av_error(const char* op, int rank) {
  long long* rec = a2av_record_;
  if (rec == nullptr || __atomic_load_n(&rec[0], __ATOMIC_ACQUIRE) != 1) return;
  const long long kind = rec[1], peer = rec[2], value = rec[3], expected = rec[4];
  __atomic_store_n(&rec[0], 0, __ATOMIC_RELEASE);
  std::ostringstream os;
  const char* arg = kind == kA2avCapacity ? "recv_capacity" : "recv_counts";
  if (kind == kA2avCapacity) {
    os << "all_to_all_v: " << value << " elements exceed the capacity of " << expected
       << " (recv_capacity, or, for a send buffer outside nvshmem memory with a peer on another "
          "host, the send staging area of the same size)";
  } else if (kind == kA2avPeerStaging) {
    arg = "send_counts";
    os << "all_to_all_v: rank " << peer << " sent nothing: its send data did not fit its staging "
       << "area (its own error names the numbers), so no rank received from it";
  } else {
    os << "all_to_all_v: recv_counts[" << peer << "] = " << value << " but rank " << peer
       << " sends " << expected << " elements";
  }
  throw_invalid_argument(op, rank, arg, os.str());
}

void NvshmemBackend::finish(const OpArgs& a, const char* op, int rank) {
  if (a.stream == nullptr) {
    SYMMEM_CUDART_CHECK(op, rank, cudaStreamSynchronize(nullptr));
    // What the error query raises (raise_async_errors), now that all is done.
    cuda_raise_async_errors(*a.group, op);
    raise_a2av_error(op, rank);
  }
}

bool NvshmemBackend::runs_on_cuda_kernels(const OpArgs& a) {
  switch (a.kind) {
    case OpKind::all_reduce:
    case OpKind::reduce_scatter:
    case OpKind::all_gather:
    case OpKind::all_to_all_v:
      return group_all_direct(a);
    default:
      return false;
  }
}

void NvshmemBackend::run(const OpArgs& a) {
  SYMMEM_INTERNAL_CHECK(a.group != nullptr);
  const char* op = to_string(a.kind);
  const int rank = a.group->rank();
  // An earlier timeout only: the argument errors the kernels record are raised after a
  // synchronisation (finish) or by the error query, so that no rank skips a launch its peers
  // made (docs/design.md, "Stream-ordered errors").
  cuda::raise_device_timeout(op, rank);
  cuda::DeviceGuard guard(a.device.index);
  // One host: the cuda backend's peer-pointer kernels, for the ops runs_on_cuda_kernels names
  // (all_to_all_v among them: there every rank sees every count and expectation, so a
  // disagreement or an overflow is raised by every rank and moves nothing, NOTE
  // [all_to_all_v]). NVSHMEM's own paths below reach peers on other hosts.
  if (runs_on_cuda_kernels(a)) {
    cuda_run_op(a);
    finish(a, op, rank);
    return;
  }
  switch (a.kind) {
    case OpKind::all_reduce:
    case OpKind::reduce_scatter:
    case OpKind::all_gather:
      run_team_collective(a);
      break;
    case OpKind::broadcast:
      run_broadcast(a);
      break;
    case OpKind::all_to_all:
      run_all_to_all(a);
      break;
    case OpKind::all_to_all_v:
      run_all_to_all_v(a);
      break;
    case OpKind::put:
    case OpKind::get:
      run_put_get(a);
      break;
    case OpKind::barrier: {
      SymmetricMemory ws = a.workspace(256);
      auto& mem = nv_memory(ws, op, rank);
      barrier_on(ws, mem, a, op);
      break;
    }
    default:
      throw_error(ErrorCode::Unsupported, op, rank, "nvshmem backend: unknown op");
  }
  finish(a, op, rank);
}

bool NvshmemBackend::group_all_direct(const OpArgs& a) {
  SymmetricMemory ws = a.workspace(256);
  return nv_memory(ws, to_string(a.kind), a.group->rank()).all_direct();
}

void NvshmemBackend::run_broadcast(const OpArgs& a) {
  const char* op = "broadcast";
  const int rank = a.group->rank();
  const int world = a.group->world_size();
  const size_t bytes = a.count * dtype_size(a.dtype);
  if (bytes == 0) return;
  auto stream = static_cast<cudaStream_t>(a.stream);
  // [src | dst]
  const size_t half = align_up(bytes, 256);
  Staging st = staging(a, 2 * half, op);
  const SymmetricMemory& ws = st.ws;
  auto& mem = *st.mem;
  char* src = st.base;
  char* dst = src + half;
  if (rank == a.root) copy_async(src, a.send, bytes, stream, op, rank);
  barrier_on(ws, mem, a, op);
  if (rank == a.root) {
    NvSync s = mem.nv_sync(0, mem.bytes(), a.timeout);
    dim3 grid(grid_for(bytes), world);
    bcast_kernel<<<grid, kThreads, 0, stream>>>(dst, src, bytes, s.pes, a.root);
    check_launch(op, rank);
  }
  barrier_on(ws, mem, a, op);
  copy_async(a.recv, rank == a.root ? a.send : dst, bytes, stream, op, rank);
}

void NvshmemBackend::run_all_to_all(const OpArgs& a) {
  const char* op = "all_to_all";
  const int rank = a.group->rank();
  const int world = a.group->world_size();
  const size_t block = a.count * dtype_size(a.dtype);
  if (block == 0) return;
  auto stream = static_cast<cudaStream_t>(a.stream);
  const size_t half = align_up(block * world, 256);
  Staging st = staging(a, 2 * half, op);
  const SymmetricMemory& ws = st.ws;
  auto& mem = *st.mem;
  char* src = st.base;
  char* dst = src + half;
  copy_async(src, a.send, block * world, stream, op, rank);
  barrier_on(ws, mem, a, op);
  NvSync s = mem.nv_sync(0, mem.bytes(), a.timeout);
  dim3 grid(grid_for(block), world);
  a2a_kernel<<<grid, kThreads, 0, stream>>>(dst, src, block, s.pes, rank);
  check_launch(op, rank);
  barrier_on(ws, mem, a, op);
  copy_async(a.recv, dst, block * world, stream, op, rank);
}

void NvshmemBackend::run_all_to_all_v(const OpArgs& a) {
  const char* op = "all_to_all_v";
  const int rank = a.group->rank();
  const int world = a.group->world_size();
  const size_t esize = dtype_size(a.dtype);
  auto stream = static_cast<cudaStream_t>(a.stream);
  // run() comes here only when some peer is on another host. The data kernel puts straight from
  // the send buffer when that is nvshmem memory (a put's source across hosts must be); else the
  // data are staged first, in an area of recv_capacity elements: the one case with a limit on
  // what a rank sends.
  const bool in_place = a.send_sym.valid() &&
                        dynamic_cast<NvshmemMemory*>(a.send_sym.backend_memory().get()) != nullptr;
  // [my row: W | matrix: W*W | src area: capacity | dst area: capacity]. The src area is there
  // on every rank, used or not: the workspace grows collectively, by the same size everywhere,
  // and whether a rank's send buffer is nvshmem memory is that rank's own affair.
  const size_t row_bytes = align_up(sizeof(int64_t) * world, 256);
  const size_t matrix_bytes = align_up(sizeof(int64_t) * world * world, 256);
  const size_t area = align_up(a.recv_capacity * esize, 256);
  Staging st = staging(a, row_bytes + matrix_bytes + 2 * area, op);
  const SymmetricMemory& ws = st.ws;
  auto& mem = *st.mem;
  char* base = st.base;
  auto* my_row = reinterpret_cast<int64_t*>(base);
  auto* matrix = reinterpret_cast<int64_t*>(base + row_bytes);
  char* src_area = base + row_bytes + matrix_bytes;
  char* dst_area = src_area + area;
  const char* src = in_place ? static_cast<const char*>(a.send) : src_area;
  NvSync s = mem.nv_sync(0, mem.bytes(), a.timeout);
  long long* rec = a2av_record();

  barrier_on(ws, mem, a, op);  // peers are done with the previous op's workspace
  a2av_stage_kernel<<<in_place ? 1 : copy_grid(a.recv_capacity * esize), kThreads, 0, stream>>>(
      a.send_counts, world, static_cast<const char*>(a.send), my_row, src_area, a.recv_capacity,
      esize, !in_place, rec, rank);
  check_launch(op, rank);
  a2av_counts_kernel<<<world, 32, 0, stream>>>(matrix, my_row, world, s.pes, rank);
  check_launch(op, rank);
  barrier_on(ws, mem, a, op);  // every row arrived
  dim3 grid(grid_for(a.recv_capacity * esize / std::max(world, 1)), world);
  a2av_data_kernel<<<grid, kThreads, 0, stream>>>(matrix, world, src, dst_area, a.recv_capacity,
                                                  esize, s.pes, rank);
  check_launch(op, rank);
  barrier_on(ws, mem, a, op);  // every block arrived
  a2av_finish_kernel<<<copy_grid(a.recv_capacity * esize), kThreads, 0, stream>>>(
      matrix, world, dst_area, static_cast<char*>(a.recv), a.recv_counts, a.recv_offsets,
      a.recv_counts_known, a.recv_capacity, esize, rec, rank);
  check_launch(op, rank);
}

void NvshmemBackend::run_put_get(const OpArgs& a) {
  const bool is_put = a.kind == OpKind::put;
  const char* op = is_put ? "put" : "get";
  const int rank = a.group->rank();
  const int peer = a.root;
  const size_t bytes = a.count;
  auto stream = static_cast<cudaStream_t>(a.stream);
  auto& target = nv_memory(a.target, op, rank);
  SYMMEM_CHECK_ARG(op, rank, peer >= 0 && peer < a.group->world_size(), "peer",
                   "is " << peer << "; the group has ranks 0.." << a.group->world_size() - 1);
  if (a.signal) target.check_channel(op, a.channel);
  char* remote = sym_addr(a.target, target) + a.target_offset;
  const int pe = target.pe(peer);
  if (bytes > 0) {
    // The local side of a transfer to another host must be symmetric too.
    const bool direct = target.direct_access(peer);
    const void* local = is_put ? a.send : a.recv;
    const SymmetricMemory& local_sym = is_put ? a.send_sym : a.recv_sym;
    char* local_addr = nullptr;
    if (local_sym.valid()) {
      auto& lm = nv_memory(local_sym, op, rank);
      local_addr = sym_addr(local_sym, lm);
    } else {
      SYMMEM_CHECK(op, rank, direct, ErrorCode::Unsupported,
                   "nvshmem backend: rank " << peer
                                            << " is not load/store reachable (another host), "
                                               "so the local buffer of a "
                                            << op
                                            << " must lie in nvshmem symmetric memory of this "
                                               "group (allocate it with symmem::allocate)");
      local_addr = static_cast<char*>(const_cast<void*>(local));
    }
    if (is_put) {
      put_kernel<<<grid_for(bytes), kThreads, 0, stream>>>(remote, local_addr, bytes, pe);
    } else {
      get_kernel<<<grid_for(bytes), kThreads, 0, stream>>>(local_addr, remote, bytes, pe);
    }
    check_launch(op, rank);
  }
  if (a.signal) {
    // put: the data precedes the signal (nvshmem_quiet / the kernel boundary before the
    // release). get: tells the peer its buffer has been read.
    NvSync s = target.nv_sync(0, target.bytes(), a.timeout);
    launch_put_signal(s, peer, a.channel, stream, op);
  }
}

void NvshmemBackend::run_team_collective(const OpArgs& a) {
  const char* op = to_string(a.kind);
  const int rank = a.group->rank();
  const int world = a.group->world_size();
  const size_t esize = dtype_size(a.dtype);
  auto stream = static_cast<cudaStream_t>(a.stream);
  nvshmem_team_t team = Runtime::instance().team_for(*a.group, op);
  // Elements in (per rank) and out of the team collective.
  size_t n_in = a.count, n_out = a.count;
  if (a.kind == OpKind::reduce_scatter) n_in = n_out = a.count * world;
  if (a.kind == OpKind::all_gather) n_out = a.count * world;
  const size_t in_bytes = align_up(n_in * esize, 256);
  Staging st = staging(a, in_bytes + n_out * esize, op);
  char* src = st.base;
  char* dst = src + in_bytes;
  copy_async(src, a.send, n_in * esize, stream, op, rank);
  int status = 0;
  if (a.kind == OpKind::all_gather) {
    status = nvshmemx_fcollectmem_on_stream(team, dst, src, n_in * esize, stream);
  } else {
    const bool sum = a.redop == ReduceOp::sum || a.redop == ReduceOp::avg;
    const bool mx = a.redop == ReduceOp::max;
#define SYMMEM_NV_REDUCE(NAME, T)                                                                  \
  status =                                                                                         \
      sum  ? nvshmemx_##NAME##_sum_reduce_on_stream(team, reinterpret_cast<T*>(dst),               \
                                                    reinterpret_cast<const T*>(src), n_in, stream) \
      : mx ? nvshmemx_##NAME##_max_reduce_on_stream(team, reinterpret_cast<T*>(dst),               \
                                                    reinterpret_cast<const T*>(src), n_in, stream) \
           : nvshmemx_##NAME##_min_reduce_on_stream(team, reinterpret_cast<T*>(dst),               \
                                                    reinterpret_cast<const T*>(src), n_in, stream)
    // Integer sums through the unsigned type: NVSHMEM's signed sum would overflow; the unsigned
    // one wraps, which is the two's-complement result the other backends give.
#define SYMMEM_NV_REDUCE_INT(NAME, UNAME, T, U)                                                     \
  status =                                                                                          \
      sum  ? nvshmemx_##UNAME##_sum_reduce_on_stream(team, reinterpret_cast<U*>(dst),               \
                                                     reinterpret_cast<const U*>(src), n_in, stream) \
      : mx ? nvshmemx_##NAME##_max_reduce_on_stream(team, reinterpret_cast<T*>(dst),                \
                                                    reinterpret_cast<const T*>(src), n_in, stream)  \
           : nvshmemx_##NAME##_min_reduce_on_stream(team, reinterpret_cast<T*>(dst),                \
                                                    reinterpret_cast<const T*>(src), n_in, stream)
    switch (a.dtype) {
      case DType::f32:
        SYMMEM_NV_REDUCE(float, float);
        break;
      case DType::f64:
        SYMMEM_NV_REDUCE(double, double);
        break;
      case DType::f16:
        SYMMEM_NV_REDUCE(half, half);
        break;
      case DType::bf16:
        SYMMEM_NV_REDUCE(bfloat16, __nv_bfloat16);
        break;
      case DType::i32:
        SYMMEM_NV_REDUCE_INT(int32, uint32, int32_t, uint32_t);
        break;
      case DType::i64:
        SYMMEM_NV_REDUCE_INT(int64, uint64, int64_t, uint64_t);
        break;
      default:
        throw_error(ErrorCode::Unsupported, op, rank,
                    std::string("nvshmem backend: ") + to_string(a.dtype) +
                        " reductions with a peer that is not directly reachable are not supported "
                        "(NVSHMEM's team reductions have f32, f64, f16, bf16, i32 and i64)");
    }
#undef SYMMEM_NV_REDUCE_INT
#undef SYMMEM_NV_REDUCE
    if (status == 0 && a.redop == ReduceOp::avg) {
      const float f = 1.0f / static_cast<float>(world);
      const unsigned g = static_cast<unsigned>(std::min<size_t>((n_in + 255) / 256, 1024));
      if (a.dtype == DType::f32)
        scale_kernel<<<g, 256, 0, stream>>>(reinterpret_cast<float*>(dst), n_in, f);
      if (a.dtype == DType::f16)
        scale_kernel<<<g, 256, 0, stream>>>(reinterpret_cast<half*>(dst), n_in, f);
      if (a.dtype == DType::bf16) {
        scale_kernel<<<g, 256, 0, stream>>>(reinterpret_cast<__nv_bfloat16*>(dst), n_in, f);
      }
      if (a.dtype == DType::f64)
        divide_kernel<<<g, 256, 0, stream>>>(reinterpret_cast<double*>(dst), n_in, world);
      if (a.dtype == DType::i32)
        divide_kernel<<<g, 256, 0, stream>>>(reinterpret_cast<int32_t*>(dst), n_in, world);
      if (a.dtype == DType::i64)
        divide_kernel<<<g, 256, 0, stream>>>(reinterpret_cast<int64_t*>(dst), n_in, world);
      check_launch(op, rank);
    }
  }
  SYMMEM_CHECK(op, rank, status == 0, ErrorCode::Internal,
               "nvshmem backend: the NVSHMEM team collective failed (status "
                   << status
                   << "); with several PEs on one GPU NVSHMEM needs MPS with "
                      "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE set");
  const size_t out_off = a.kind == OpKind::reduce_scatter ? rank * a.count * esize : 0;
  const size_t out_n = a.kind == OpKind::reduce_scatter ? a.count : n_out;
  copy_async(a.recv, dst + out_off, out_n * esize, stream, op, rank);
}

}  // namespace symmem::nvshm
