// Host collectives over peer pointers of symmetric CPU memory (memfd mappings).
//
// NOTE [host collectives]
// Every op works on the group's CPU workspace `ws` (args.workspace) and, when the core found the
// caller's buffers in symmetric memory identically on every rank (args.send_sym/recv_sym valid),
// on those buffers directly (zero copy). Otherwise a rank stages its input into its own part of
// the workspace, the only memory its peers can read. Pattern of every collective:
//   stage (own input -> own ws) ; barrier ; read peers / reduce ; barrier
// The trailing barrier keeps a fast rank from overwriting its workspace (or returning a buffer
// to the user) while a peer still reads it. Synchronisation: PadSync (core/pad_sync.hpp).
//
// Contract with the core: before a collective reaches host_run_op, every rank has passed the
// agreement barrier of ops.cpp on the same workspace pad (NOTE [collective agreement]). That
// barrier already says "every rank has entered this op and has finished the previous one", so:
//  - nothing staged (zero copy): no barrier is needed before reading peers' buffers;
//  - staged only (peers read only our workspace): no trailing barrier is needed, since our
//    workspace is next written after the next op's agreement barrier.
// A trailing barrier remains where peers read the caller's own symmetric buffers.
//
// Reductions: every element is reduced by reduce() over inputs in rank order 0..n-1, whichever
// rank computes it, so all ranks hold the same bits. one_shot: every rank reduces everything;
// two_shot: rank r reduces chunk r (reduce-scatter) then every rank copies the other chunks
// (all-gather), so the work is split across ranks.

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include <unistd.h>

#include "core/pad_sync.hpp"
#include "core/tuning.hpp"
#include "host/host_ops.hpp"
#include "host/reduce.hpp"
#include "symmem/error.hpp"

namespace symmem {
namespace {

using detail::data_offset;
using detail::PadSync;
using host::copy_bytes;

char* cptr(void* p) {
  return static_cast<char*>(p);
}
const char* cptr(const void* p) {
  return static_cast<const char*>(p);
}

struct Ctx {
  const OpArgs& a;
  const char* op;
  int rank;
  int n;
  size_t es;
  SymmetricMemory ws;

  Ctx(const OpArgs& args, size_t data_bytes)
      : a(args),
        op(to_string(args.kind)),
        rank(args.group->rank()),
        n(args.group->world_size()),
        es(args.kind == OpKind::put || args.kind == OpKind::get || args.kind == OpKind::barrier
               ? 1
               : dtype_size(args.dtype)) {
    grow(data_bytes);
  }
  void grow(size_t data_bytes) { ws = a.workspace(data_offset(n) + data_bytes); }
  char* data(int p) const { return cptr(ws.ptr(p)) + data_offset(n); }
  char* header(int p) const { return cptr(ws.ptr(p)); }
  PadSync sync() const { return PadSync(ws, op, a.timeout); }
};

// The built-in table of the host backend (NOTE [tuning file]): bytes per rank up to which `auto`
// picks one_shot; measured on the development machine (2 cores), see docs/performance.md. With
// more ranks than cores the ranks cannot run at once and every barrier costs each rank a turn
// of the CPU: the inline one_shot (one barrier, NOTE [inline all-reduce] in core/pad_sync.hpp)
// wins up to its limit (8 ranks on 2 cores, 5 alternating runs: 4 KiB 22.0 vs 30.2 us, 8 KiB 29.0
// vs 31.4 us), and above it total work decides: two_shot (n reads per element instead of n * n;
// 32 KiB 36.0 vs 59.1 us). symmem-tune's file overrides it.
size_t builtin_one_shot_max_bytes(int world) {
  static const int cpus = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  if (world > cpus) return detail::kInlineBytes;
  if (world <= 2) return 1 << 20;
  if (world <= 4) return 256 << 10;
  return 64 << 10;
}

size_t one_shot_max_bytes(int world) {
  thread_local tuning::HostEntry e{"all_reduce.one_shot_max_bytes", 0, int64_t{1} << 40};
  return static_cast<size_t>(
      tuning::host_value(e, world, static_cast<int64_t>(builtin_one_shot_max_bytes(world))));
}

// NOTE [host chunk sizes]
// Two host collectives work in pieces whose size is a trade between cache reuse and per-piece
// cost, so symmem-tune measures them per machine and world size (tools/tune/tune.cpp):
//  - "all_reduce.piece_bytes": the zero-copy two_shot reduces its chunk a piece at a time and
//    stores each piece into every peer's output while it is still in cache. Only the rank's own
//    loop depends on it, so ranks need not agree on it.
//  - "broadcast.chunk_bytes": the root publishes its input in chunks that peers copy as each is
//    signalled (a pipeline). Root and peers must cut the same chunks, so the root's size is
//    published with its first chunk and the peers' own entries are not used.
// Built in (no entry, host_ops.hpp): 256 KiB pieces and 512 KiB chunks, the sizes these ops had
// before they were tuned; docs/performance.md has what symmem-tune measured.

size_t piece_bytes(int world) {
  thread_local tuning::HostEntry e{"all_reduce.piece_bytes", 4 << 10, int64_t{1} << 30};
  return static_cast<size_t>(tuning::host_value(e, world, static_cast<int64_t>(kHostPieceBytes)));
}

size_t broadcast_chunk_bytes(int world) {
  thread_local tuning::HostEntry e{"broadcast.chunk_bytes", 4 << 10, int64_t{1} << 30};
  return static_cast<size_t>(
      tuning::host_value(e, world, static_cast<int64_t>(kHostBroadcastChunkBytes)));
}

// ---- all_reduce ------------------------------------------------------------------------------
void all_reduce(const OpArgs& a) {
  const size_t es = dtype_size(a.dtype);
  const size_t bytes = a.count * es;
  const int n = a.group->world_size();
  const int r = a.group->rank();
  Algo algo = a.algo;
  if (algo == Algo::automatic)
    algo = bytes <= one_shot_max_bytes(n) ? Algo::one_shot : Algo::two_shot;
  if (a.chosen_algo) *a.chosen_algo = algo;
  if (n == 1) {
    copy_bytes(a.recv, a.send, bytes);
    return;
  }
  const bool in_place = a.recv == a.send;
  std::vector<const void*> ins(n);

  if (algo == Algo::one_shot) {
    // Zero copy unless in place (peers would read our input while we overwrite it).
    const bool zc = a.send_sym.valid() && !in_place;
    Ctx c(a, zc ? 0 : bytes);
    PadSync sync = c.sync();
    if (!zc) {
      copy_bytes(c.data(r), a.send, bytes);
      sync.barrier();
    }
    for (int p = 0; p < n; ++p) ins[p] = zc ? a.send_sym.ptr(p) : c.data(p);
    ins[r] = a.send;
    host::reduce(a.recv, ins.data(), n, a.count, a.dtype, a.redop, n);
    if (zc) sync.barrier();
    return;
  }

  // two_shot: chunk c = elements [c * ce, min(count, (c + 1) * ce)), ce a multiple of 64 bytes.
  const size_t per_line = std::max<size_t>(1, 64 / es);
  const size_t ce = (a.count + n - 1) / n;
  const size_t chunk = (ce + per_line - 1) / per_line * per_line;
  auto begin = [&](int c) { return std::min(a.count, static_cast<size_t>(c) * chunk); };
  auto len = [&](int c) {
    return std::min(a.count, static_cast<size_t>(c + 1) * chunk) - begin(c);
  };

  const bool zc_in = a.send_sym.valid();
  const bool zc_out = a.recv_sym.valid();
  const size_t stage_bytes = zc_in ? 0 : bytes;
  Ctx c(a, stage_bytes + (zc_out ? 0 : bytes));
  PadSync sync = c.sync();
  auto src = [&](int p) -> const char* {
    return zc_in ? cptr(a.send_sym.ptr(p)) : cptr(c.data(p));
  };
  auto reduced = [&](int p) -> char* {
    return zc_out ? cptr(a.recv_sym.ptr(p)) : c.data(p) + stage_bytes;
  };
  if (!zc_in) {
    // Peers read every chunk but ours; ours is read locally from `send`.
    for (int q = 0; q < n; ++q) {
      if (q == r) continue;
      copy_bytes(c.data(r) + begin(q) * es, cptr(a.send) + begin(q) * es, len(q) * es);
    }
    sync.barrier();
  }
  for (int p = 0; p < n; ++p) ins[p] = src(p) + begin(r) * es;
  ins[r] = cptr(a.send) + begin(r) * es;
  if (zc_out && !in_place) {
    // Push: reduce a cache-sized piece of our chunk into our recv, then store it into every
    // peer's recv while it is still in cache: the reduced data is read from memory once
    // instead of once per rank (peers pulling it), and one barrier (ours are all written) ends
    // the op. Not in place: peers' stores land in recv while we still read send.
    const size_t piece = std::max<size_t>(per_line, piece_bytes(n) / es / per_line * per_line);
    std::vector<const void*> at(n);
    for (size_t off = 0; off < len(r); off += piece) {
      const size_t m = std::min(piece, len(r) - off);
      for (int p = 0; p < n; ++p) at[p] = static_cast<const char*>(ins[p]) + off * es;
      char* mine = reduced(r) + (begin(r) + off) * es;
      host::reduce(mine, at.data(), n, m, a.dtype, a.redop, n);
      for (int k = 1; k < n; ++k) {
        int p = (r + k) % n;
        copy_bytes(reduced(p) + (begin(r) + off) * es, mine, m * es);
      }
    }
    sync.barrier();  // every rank's chunk is in every recv
    return;
  }
  host::reduce(reduced(r) + begin(r) * es, ins.data(), n, len(r), a.dtype, a.redop, n);
  sync.barrier();
  for (int k = zc_out ? 1 : 0; k < n; ++k) {
    int p = (r + k) % n;
    copy_bytes(cptr(a.recv) + begin(p) * es, reduced(p) + begin(p) * es, len(p) * es);
  }
  if (zc_out) sync.barrier();  // peers read our recv
}

// ---- reduce_scatter ---------------------------------------------------------------------------
void reduce_scatter(const OpArgs& a) {
  const size_t es = dtype_size(a.dtype);
  const size_t block = a.count * es;
  const int n = a.group->world_size();
  const int r = a.group->rank();
  const bool zc = a.send_sym.valid();
  Ctx c(a, zc ? 0 : block * n);
  PadSync sync = c.sync();
  if (!zc) {
    for (int q = 0; q < n; ++q)
      if (q != r) copy_bytes(c.data(r) + q * block, cptr(a.send) + q * block, block);
    if (n > 1) sync.barrier();
  }
  std::vector<const void*> ins(n);
  for (int p = 0; p < n; ++p) ins[p] = (zc ? cptr(a.send_sym.ptr(p)) : c.data(p)) + r * block;
  ins[r] = cptr(a.send) + r * block;
  host::reduce(a.recv, ins.data(), n, a.count, a.dtype, a.redop, n);
  if (zc && n > 1) sync.barrier();  // peers read our send
}

// ---- all_gather -------------------------------------------------------------------------------
void all_gather(const OpArgs& a) {
  const size_t block = a.count * dtype_size(a.dtype);
  const int n = a.group->world_size();
  const int r = a.group->rank();
  const bool zc = a.send_sym.valid();
  Ctx c(a, zc ? 0 : block);
  PadSync sync = c.sync();
  if (!zc && n > 1) {
    copy_bytes(c.data(r), a.send, block);
    sync.barrier();
  }
  copy_bytes(cptr(a.recv) + r * block, a.send, block);
  for (int k = 1; k < n; ++k) {
    int p = (r + k) % n;
    copy_bytes(cptr(a.recv) + p * block, zc ? cptr(a.send_sym.ptr(p)) : c.data(p), block);
  }
  if (zc && n > 1) sync.barrier();
}

// ---- all_to_all -------------------------------------------------------------------------------
void all_to_all(const OpArgs& a) {
  const size_t block = a.count * dtype_size(a.dtype);
  const int n = a.group->world_size();
  const int r = a.group->rank();
  const bool zc = a.send_sym.valid() && a.recv != a.send;
  Ctx c(a, zc ? 0 : block * n);
  PadSync sync = c.sync();
  if (!zc) {
    for (int q = 0; q < n; ++q)
      if (q != r) copy_bytes(c.data(r) + q * block, cptr(a.send) + q * block, block);
    if (n > 1) sync.barrier();
  }
  copy_bytes(cptr(a.recv) + r * block, cptr(a.send) + r * block, block);
  for (int k = 1; k < n; ++k) {
    int p = (r + k) % n;
    const char* from = (zc ? cptr(a.send_sym.ptr(p)) : c.data(p)) + r * block;
    copy_bytes(cptr(a.recv) + p * block, from, block);
  }
  if (zc && n > 1) sync.barrier();
}

// ---- all_to_all_v -----------------------------------------------------------------------------
// The core has already checked, collectively, that the counts agree and fit (ops.cpp).
void all_to_all_v(const OpArgs& a) {
  const size_t es = dtype_size(a.dtype);
  const int n = a.group->world_size();
  const int r = a.group->rank();
  Ctx c(a, 0);
  // Exchange send counts through the workspace headers.
  {
    PadSync sync = c.sync();
    std::memcpy(c.header(r) + detail::counts_offset(n), a.send_counts, sizeof(int64_t) * n);
    sync.barrier();
  }
  std::vector<int64_t> counts(static_cast<size_t>(n) * n);  // counts[p * n + q]: p sends to q
  for (int p = 0; p < n; ++p)
    std::memcpy(&counts[static_cast<size_t>(p) * n], c.header(p) + detail::counts_offset(n),
                sizeof(int64_t) * n);
  auto sc = [&](int p, int q) {
    return static_cast<size_t>(counts[static_cast<size_t>(p) * n + q]);
  };
  size_t max_total = 0, my_total = 0;
  for (int p = 0; p < n; ++p) {
    size_t t = 0;
    for (int q = 0; q < n; ++q) t += sc(p, q);
    max_total = std::max(max_total, t);
    if (p == r) my_total = t;
  }
  const bool zc = a.send_sym.valid();
  // Growing replaces the workspace; peers still reading our old header read it through their
  // own mapping, which stays valid until they grow too.
  if (!zc) c.grow(max_total * es);
  PadSync sync = c.sync();
  if (!zc) {
    copy_bytes(c.data(r), a.send, my_total * es);
    sync.barrier();
  }
  std::vector<int64_t> recv_off(n);
  size_t off = 0;
  for (int p = 0; p < n; ++p) {
    recv_off[p] = static_cast<int64_t>(off);
    off += sc(p, r);
  }
  for (int k = 0; k < n; ++k) {
    int p = (r + k) % n;
    size_t from = 0;  // offset of block (p -> r) in p's send buffer
    for (int q = 0; q < r; ++q) from += sc(p, q);
    const char* base = p == r ? cptr(a.send) : zc ? cptr(a.send_sym.ptr(p)) : c.data(p);
    copy_bytes(cptr(a.recv) + recv_off[p] * es, base + from * es, sc(p, r) * es);
  }
  if (zc) sync.barrier();  // peers read our send
  if (!a.recv_counts_known)
    for (int p = 0; p < n; ++p) a.recv_counts[p] = static_cast<int64_t>(sc(p, r));
  if (a.recv_offsets)
    for (int p = 0; p < n; ++p) a.recv_offsets[p] = recv_off[p];
}

// ---- broadcast --------------------------------------------------------------------------------
// The root stages its input through its workspace in pipelined chunks; peers copy each chunk as
// soon as it is signalled.
void broadcast(const OpArgs& a) {
  const size_t bytes = a.count * dtype_size(a.dtype);
  const int n = a.group->world_size();
  const int r = a.group->rank();
  const int root = a.root;
  if (n == 1) {
    copy_bytes(a.recv, a.send, bytes);
    return;
  }
  // The root's chunk size leads its staging area, so that every peer cuts the root's chunks
  // whatever its own tuning says (NOTE [host chunk sizes]).
  constexpr size_t kHead = 64;
  Ctx c(a, kHead + bytes);
  PadSync sync = c.sync();
  char* stage = c.data(root) + kHead;
  size_t chunk = broadcast_chunk_bytes(n);
  if (r == root) std::memcpy(c.data(r), &chunk, sizeof chunk);
  size_t chunks = 1;  // known from chunk 0 on
  for (size_t k = 0; k < chunks; ++k) {
    if (r != root) sync.wait(root);  // chunk k is staged (at k = 0, with its size)
    if (k == 0) {
      if (r != root) std::memcpy(&chunk, c.data(root), sizeof chunk);
      chunks = bytes == 0 ? 1 : (bytes + chunk - 1) / chunk;
    }
    const size_t off = k * chunk, m = std::min(chunk, bytes - std::min(bytes, off));
    if (r == root) {
      copy_bytes(stage + off, cptr(a.send) + off, m);
      for (int p = 0; p < n; ++p)
        if (p != r) sync.signal(p);
    } else {
      copy_bytes(cptr(a.recv) + off, stage + off, m);
    }
  }
  if (r == root) copy_bytes(a.recv, a.send, bytes);
}

// ---- put / get --------------------------------------------------------------------------------
void put(const OpArgs& a) {
  char* dst = cptr(a.target.ptr(a.root)) + a.target_offset;
  copy_bytes(dst, a.send, a.count);
  if (a.signal) {
    std::atomic_thread_fence(std::memory_order_release);
    a.target.put_signal(a.root, a.channel, a.timeout);
  }
}

void get(const OpArgs& a) {
  const char* src = cptr(a.target.ptr(a.root)) + a.target_offset;
  copy_bytes(a.recv, src, a.count);
  if (a.signal) {
    std::atomic_thread_fence(std::memory_order_acq_rel);
    a.target.put_signal(a.root, a.channel, a.timeout);
  }
}

void barrier(const OpArgs& a) {
  if (a.group->world_size() == 1) return;
  Ctx c(a, 0);
  c.sync().barrier();
}

}  // namespace

size_t host_one_shot_max_bytes(int world) {
  return one_shot_max_bytes(world);
}

void host_run_op(const OpArgs& args) {
  switch (args.kind) {
    case OpKind::all_reduce:
      return all_reduce(args);
    case OpKind::reduce_scatter:
      return reduce_scatter(args);
    case OpKind::all_gather:
      return all_gather(args);
    case OpKind::all_to_all:
      return all_to_all(args);
    case OpKind::all_to_all_v:
      return all_to_all_v(args);
    case OpKind::broadcast:
      return broadcast(args);
    case OpKind::put:
      return put(args);
    case OpKind::get:
      return get(args);
    case OpKind::barrier:
      return barrier(args);
    case OpKind::kCount:
      break;
  }
  throw_error(ErrorCode::Internal, "host_run_op", args.group ? args.group->rank() : -1,
              "unknown op kind " + std::to_string(static_cast<int>(args.kind)));
}

}  // namespace symmem
