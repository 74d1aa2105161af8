// MoE dispatch and combine (symmem/moe.hpp) over the library's all_to_all / all_to_all_v.
//
// NOTE [moe exchange]
// moe_layout() is the metadata step: every rank tells each peer how many of its tokens go there
// (all_to_all of one count per peer) and then sends, per token, its top-k expert ids
// (all_to_all_v), so that each expert rank knows its rows' order (grouped by local expert, then
// source rank, token, slot; symmem/moe.hpp) and its counts before any data moves. dispatch packs
// each token once per destination rank (its row, then its fp8 scales) and moves the packs with
// all_to_all_v, whose counts both sides know from the layout; the receiver then writes the rows
// into recv_x in the layout's order. combine reverses that: the expert rank sends each row back
// to its token's rank in the layout's order restricted to that rank, which the token's rank can
// recompute from its own topk_idx (per destination: local expert, then token, then slot), and
// sums the rows with the router's weights there, slot by slot, in f32. On CPU memory the
// exchange runs through the ops' symmetric workspace.
//
// NOTE [moe on the GPU]
// A layout made for GPU memory (its device: MoeOptions::device, else the device of the group's
// most recent allocation, as for ops) is built exactly as above on the host: moe_layout copies
// topk_idx to the host when it lies in device memory (synchronising the stream) and exchanges
// the metadata over the CPU. It then agrees, in one small CPU all-reduce, on the most tokens any
// rank sends or receives in dispatch and the most rows any rank sends or receives in combine
// (scratch_tokens, scratch_rows), and uploads once what the kernels need (GpuIndex: the tokens
// per destination, row -> received token, the rows going back per source, (token, slot) -> row
// coming back, and the row counts per peer). dispatch and combine then only enqueue work on
// OpOptions::stream, through the cuda plugin's kernels (core/moe_device.hpp):
//   dispatch: gather kernel (x rows and scales -> send pack, one 16-byte aligned pack per token
//             and destination; block 0 writes the byte counts) | all_to_all_v of the group's GPU
//             backend (counts on the device, known on both sides) | gather kernel (recv pack ->
//             recv_x rows in the layout's order);
//   combine:  gather kernel (y rows -> send pack, per source rank) | all_to_all_v | combine
//             kernel (f32 sums in the host's order and rounding: bitwise equal to it).
// The packs live in the group's "moe" scratch (group_scratch(): symmetric memory, so the
// all_to_all_v pushes straight into the peers' receive packs). Its size is a function of the
// agreed maxima and the row size, so every rank grows it in the same call; once it is large
// enough, dispatch and combine neither allocate nor synchronise and may be captured in a CUDA
// graph (a growth during capture is an error that says to warm up first).

// NOTE [moe device layout]
// With MoeOptions::device_layout (low_latency on a GPU) nothing is read at moe_layout(): it checks
// that the ranks agree on max_tokens, topk and num_experts and allocates the layout's device
// arrays (DeviceLayout). Each moe_dispatch routes on the device, reading topk_idx on its stream:
//   route (one block): per expert, this rank's entries in (token, slot) order get their index
//     among them (hist, slot_idx); per destination rank, its tokens get their place in the piece
//     (dest_pos); prefixes give the pieces' counts and offsets and each entry's row in what
//     combine brings back (slot_row: ordered by global expert, then index, as the expert ranks
//     send the rows back);
//   pack: per destination a count block (the entries per local expert of that rank), then one
//     pack per token: header {token, its expert ids on that rank, their indices}, row, scales;
//   all_to_all_v with counts computed on the device (recv counts are its output);
//   place (one block): per local expert and source, the rows and where they start in the
//     expert's slab (the sources' counts in order: rows by source, then token, slot, as
//     symmem/moe.hpp orders them), the expert counts, and combine's plan (per source, where each
//     expert's rows go in its piece);
//   unpack: each received token's row to its rows: slab start + base[e][s] + its index.
// With few entries (a decode step's), route and pack are one kernel in which each block routes
// the tokens it packs (NOTE [moe fused route] in src/cuda/kernels/moe.cu); the numbers are the
// same.
// combine: pack the rows of each (source, expert) range in the source's order | all_to_all_v
// (counts from both sides' plans) | the f32 sums with slot_row. No host synchronisation, no
// allocation once the scratch is large enough: dispatch and combine can be captured in a CUDA
// graph and replayed with new routing in topk_idx. The sums and the row order are those of the
// host (bitwise equal results); topk_idx values outside [-1, num_experts) are dropped on the
// device (there is no host to raise an error).

// NOTE [moe direct dispatch]
// On the cuda backend (every peer's memory mapped here) a device-routed dispatch skips the send
// pack and the all_to_all_v: the put kernel stores each count block and pack straight into this
// rank's piece of the destination's receive area, in the group's "moe_ll" scratch, whose part on
// every rank holds two areas (parity 0 and 1) of world pieces, source s's piece at s * piece
// (max_tokens packs: no offsets to agree on first). The last block of the put kernel to finish
// (a grid-wide count; each block fences its stores at system scope before counting) signals
// every rank once, with the device API's put_signal on channel 0 (release); place's thread s
// waits for source s with wait_signal (acquire), which also consumes the signal. Then place and
// unpack run as through the exchange, reading the pieces where they landed.
// The parity alternates per dispatch, from a count kept in the last slot of this rank's pad of
// the scratch (zero when it is allocated, so the ranks agree; any layout's dispatch moves it, as
// the layouts share the scratch): every block of the put kernel reads it when it begins, and the
// last block moves it on and records the parity for place and unpack. Why two areas suffice: rank
// A's dispatch N + 2 reuses the area that peer B's unpack of dispatch N reads; A starts it only
// after its own place of N + 1 saw B's signal of N + 1, which B sends after its unpack of N (stream
// order). A put_signal also waits until the peer consumed the previous signal on its slot. A wait
// that times out (or a group abort) is recorded in the handle's timeout record and raised by the
// next synchronising call; that source then counts as sending nothing. Whether a layout goes direct
// is agreed when it is made (every rank's backend for the device is cuda and SYMMEM_MOE_DIRECT
// allows it), so no other backend allocates the direct path's scratch. combine does the same in the
// "moe_ll_back" scratch: each (source, expert) pair's rows go into the source's area at the rows
// its slot_row names (the source's count block told the expert rank how many of its entries come
// before that rank's experts), the last block signals, a one-block kernel waits, and the sums read
// the area of this parity (counted and recorded as for dispatch, in this scratch's pad). Two areas
// suffice by the same argument (a rank's combine C + 2 follows its wait for every peer's combine C
// + 1). SYMMEM_MOE_DIRECT=0 on any rank (agreed when the layout is made), another backend, or a pad
// under 2 * world slots: the exchange.

#include "symmem/moe.hpp"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/group_impl.hpp"
#include "core/memory_registry.hpp"
#include "core/moe_device.hpp"
#include "core/workspace.hpp"
#include "symmem/backend.hpp"
#include "symmem/env.hpp"
#include "symmem/error.hpp"

namespace symmem {

namespace {

// The device arrays of a GPU layout (NOTE [moe on the GPU]), in one cudaMalloc.
struct GpuIndex {
  const detail::MoeDeviceApi* api = nullptr;
  int device = -1;
  void* base = nullptr;
  int64_t* counts_in = nullptr;   // [4, world]: tokens sent, received (dispatch); rows sent,
                                  // received (combine); per peer
  int64_t* counts_out = nullptr;  // [4, world]: the same in 4-byte units of the current pack
  int32_t* send_list = nullptr;   // per destination its tokens, concatenated
  int32_t* row_token = nullptr;   // [rows]
  int32_t* back_list = nullptr;   // per source rank the rows of recv_x that go back, concatenated
  int32_t* slot_row = nullptr;    // [tokens, k]
  // The rows a pull dispatch writes (NOTE [moe pull dispatch]), n_pull of them, ordered by the
  // token they copy (source rank, then token): the row of recv_x, its source rank, its token.
  int32_t* pull_dst = nullptr;
  int32_t* pull_rank = nullptr;
  int32_t* pull_token = nullptr;
  int64_t n_pull = 0;
  int32_t* y_rank = nullptr;  // [tokens, k]: the rank whose y holds slot (t, j)'s row
  int32_t* y_row = nullptr;   // [tokens, k]: that row of its y, or -1 (dropped slot)
  int64_t n_send = 0, n_back = 0;
  GpuIndex() = default;
  GpuIndex(const GpuIndex&) = delete;
  GpuIndex& operator=(const GpuIndex&) = delete;
  ~GpuIndex() {
    if (api != nullptr && base != nullptr) api->release(device, base);
  }
};

// The device arrays of a layout routed on the device (NOTE [moe device layout]), in one
// cudaMalloc; `arrays` holds their pointers (its other fields are filled per call).
struct DeviceLayout {
  const detail::MoeDeviceApi* api = nullptr;
  int device = -1;
  void* base = nullptr;
  detail::MoeDeviceLayoutArgs arrays;
  DeviceLayout() = default;
  DeviceLayout(const DeviceLayout&) = delete;
  DeviceLayout& operator=(const DeviceLayout&) = delete;
  ~DeviceLayout() {
    if (api != nullptr && base != nullptr) api->release(device, base);
  }
};

}  // namespace

struct MoeLayout::Impl {
  Group group;
  MoeMode mode = MoeMode::normal;
  int world = 0, rank = 0, experts = 0, local = 0, k = 0;
  size_t tokens = 0, max_tokens = 0;
  std::vector<int64_t> topk;                     // [tokens, k]
  std::vector<std::vector<size_t>> send_tokens;  // per destination: its tokens, ascending
  std::vector<int64_t> recv_tokens;              // per source: tokens it sends here
  std::vector<size_t> recv_first;                // per source: its first token in recv order
  // Per row of recv_x: the received token it copies (index in recv order), or -1.
  std::vector<int64_t> row_token;
  std::vector<int64_t> row_source;  // [rows, 3]: rank, token, slot
  std::vector<int64_t> expert_counts;
  std::vector<size_t> expert_offset;
  size_t rows = 0;
  // What moe_combine needs of the layout, worked out by its first call and kept (the layout
  // does not change): per source rank, the rows of recv_x that go back to it, in order; per
  // rank, the rows it sends back here; per (token, slot), its row in what comes back (-1: none).
  struct CombinePlan {
    std::vector<std::vector<size_t>> by_source;
    std::vector<int64_t> back_count;
    std::vector<int64_t> slot_row;
  };
  mutable std::once_flag combine_once;
  mutable CombinePlan combine;
  // GPU layouts (NOTE [moe on the GPU]); device is the CPU otherwise.
  Device device = Device::cpu();
  size_t scratch_tokens = 0;  // the most tokens any rank sends or receives in dispatch
  size_t scratch_rows = 0;    // the most rows any rank sends or receives in combine
  std::shared_ptr<GpuIndex> gpu;
  // Routed on the device (NOTE [moe device layout]): topk_idx in device memory, read by every
  // dispatch.
  std::shared_ptr<DeviceLayout> dl;
  const void* topk_dev = nullptr;
  bool idx64 = true;
  bool direct = false;  // every rank allows a direct dispatch (NOTE [moe direct dispatch])
  // For a pull combine (NOTE [moe pull dispatch]), per (token, slot): the rank whose y holds its
  // row and that row, or -1 (a dropped slot). pull_rows() fills them: a GPU layout when it is
  // made, a CPU layout at its first pulled combine (a collective there, not in moe_layout, whose
  // errors after its exchange are one rank's own).
  mutable std::once_flag pull_once;
  mutable std::vector<int32_t> y_rank, y_row;
};

MoeLayout::MoeLayout() = default;
MoeLayout::MoeLayout(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
bool MoeLayout::valid() const {
  return impl_ != nullptr;
}

namespace {

const MoeLayout::Impl& need(const MoeLayout& l, const char* op) {
  if (!l.valid()) throw_invalid_argument(op, -1, "layout", "is not a layout (use moe_layout)");
  return *l.impl();
}

// The device of a layout's data: OpOptions::device, else the device of the group's most recent
// allocation, else the CPU (the rule of ops.hpp, without a buffer to look up).
Device moe_device(const OpOptions& o, const Group& group) {
  if (o.device) return *o.device;
  const int last = group.impl()->last_alloc_device.load();
  return last >= 0 ? Device::cuda(last) : Device::cpu();
}

// The cuda plugin's MoE entry points (BackendUnavailable where it cannot load).
const detail::MoeDeviceApi* moe_api(const char* op, int rank) {
  static const detail::MoeDeviceApi* api = [&] {
    auto fn = get_backend("cuda")->extension(detail::kMoeDeviceExtension);
    return static_cast<const detail::MoeDeviceApi*>(fn);
  }();
  if (api == nullptr || api->version != detail::kMoeDeviceApiVersion)
    throw_error(ErrorCode::Internal, op, rank,
                std::string("the cuda plugin has no '") + detail::kMoeDeviceExtension +
                    "' entry point (a plugin of another version?)");
  return api;
}

// dispatch/combine run where their layout was made.
void same_device(const MoeLayout::Impl& l, const OpOptions& o, const char* op) {
  if (o.device && !(*o.device == l.device))
    throw_invalid_argument(op, l.rank, "options.device",
                           "= " + to_string(*o.device) + " but the layout was made for " +
                               to_string(l.device) + " (MoeOptions::device of moe_layout)");
}

// The inner ops run on the CPU whatever else the group has allocated.
AllToAllVOptions inner(const OpOptions& o) {
  AllToAllVOptions a;
  a.timeout = o.timeout;
  a.device = Device::cpu();
  a.recv_counts_known = true;
  return a;
}

// The packs of this thread's last exchange: kept, so that calls with buffers of megabytes do not
// map fresh pages every time (page faults dominated a combine of 14 MB).
struct Scratch {
  std::vector<uint8_t> send, recv;
  std::vector<uint64_t> hits;  // moe_layout's counting sort (kept: no fresh pages per layout)
};
Scratch& scratch() {
  thread_local Scratch s;
  s.send.clear();
  return s;
}

bool is_fp8(DType t) {
  return t == DType::f8e4m3 || t == DType::f8e5m2;
}
constexpr size_t kScaleBlock = 128;

// all_to_all_v of byte packs whose sizes both sides know.
void exchange(const std::vector<uint8_t>& send, const std::vector<int64_t>& send_bytes,
              std::vector<uint8_t>& recv, const std::vector<int64_t>& recv_bytes, const Group& g,
              const OpOptions& o) {
  int64_t total = 0;
  for (int64_t b : recv_bytes) total += b;
  recv.resize(static_cast<size_t>(total));
  std::vector<int64_t> counts = recv_bytes, offsets(recv_bytes.size());
  all_to_all_v(send.empty() ? nullptr : send.data(), send_bytes.data(),
               recv.empty() ? nullptr : recv.data(), counts.data(), offsets.data(), recv.size(),
               DType::u8, g, inner(o));
}

}  // namespace

MoeMode MoeLayout::mode() const {
  return need(*this, "MoeLayout").mode;
}
const Group& MoeLayout::group() const {
  return need(*this, "MoeLayout").group;
}
size_t MoeLayout::num_tokens() const {
  return need(*this, "MoeLayout").tokens;
}
int MoeLayout::topk() const {
  return need(*this, "MoeLayout").k;
}
int MoeLayout::num_experts() const {
  return need(*this, "MoeLayout").experts;
}
int MoeLayout::num_local_experts() const {
  return need(*this, "MoeLayout").local;
}
size_t MoeLayout::max_tokens() const {
  return need(*this, "MoeLayout").max_tokens;
}
size_t MoeLayout::recv_rows() const {
  return need(*this, "MoeLayout").rows;
}
const std::vector<int64_t>& MoeLayout::expert_counts() const {
  const Impl& l = need(*this, "MoeLayout::expert_counts");
  if (l.dl)
    throw_invalid_argument("MoeLayout::expert_counts", l.rank, "layout",
                           "is routed on the device: its counts are device memory written by "
                           "each dispatch (expert_counts_device())");
  return l.expert_counts;
}
const std::vector<int64_t>& MoeLayout::row_source() const {
  const Impl& l = need(*this, "MoeLayout::row_source");
  if (l.dl)
    throw_invalid_argument("MoeLayout::row_source", l.rank, "layout",
                           "is routed on the device, which keeps no row_source");
  return l.row_source;
}
bool MoeLayout::device_layout() const {
  return need(*this, "MoeLayout").dl != nullptr;
}
const int64_t* MoeLayout::expert_counts_device() const {
  const Impl& l = need(*this, "MoeLayout");
  return l.dl ? l.dl->arrays.expert_counts : nullptr;
}
size_t MoeLayout::expert_offset(int e) const {
  const Impl& l = need(*this, "MoeLayout::expert_offset");
  if (e < 0 || e >= l.local)
    throw_invalid_argument(
        "MoeLayout::expert_offset", l.rank, "e",
        "= " + std::to_string(e) + " is not a local expert [0, " + std::to_string(l.local) + ")");
  return l.expert_offset[static_cast<size_t>(e)];
}

namespace {

// The arguments every layout checks alike (host-routed or routed on the device).
void check_layout_args(const char* op, int rank, int world, int topk, int num_experts,
                       DType idx_dtype) {
  if (topk < 1)
    throw_invalid_argument(op, rank, "topk", "= " + std::to_string(topk) + " must be >= 1");
  if (num_experts < 1 || num_experts % world != 0)
    throw_invalid_argument(op, rank, "num_experts",
                           "= " + std::to_string(num_experts) +
                               " must be a positive multiple of the world size " +
                               std::to_string(world));
  if (idx_dtype != DType::i32 && idx_dtype != DType::i64)
    throw_invalid_argument(
        op, rank, "topk_idx",
        std::string("has dtype ") + dtype_info(idx_dtype).name + "; it takes int32 or int64");
}

// low_latency: every rank's slab holds max_tokens tokens.
void check_max_tokens(const char* op, int rank, size_t tokens, size_t max_tokens) {
  if (max_tokens == 0 || tokens > max_tokens)
    throw_invalid_argument(op, rank, "max_tokens",
                           "= " + std::to_string(max_tokens) +
                               ": low_latency needs max_tokens >= tokens (" +
                               std::to_string(tokens) + ") and > 0");
}

// The checked arguments of a layout and where each token goes (no communication).
std::shared_ptr<MoeLayout::Impl> route(const char* op, const void* topk_idx, DType idx_dtype,
                                       size_t tokens, int topk, int num_experts, const Group& group,
                                       const MoeOptions& options) {
  if (!group.valid()) throw_invalid_argument(op, -1, "group", "is not a valid group");
  auto l = std::make_shared<MoeLayout::Impl>();
  l->group = group;
  l->world = group.world_size();
  l->rank = group.rank();
  const int rank = l->rank, world = l->world;
  check_layout_args(op, rank, world, topk, num_experts, idx_dtype);
  if (tokens > 0 && topk_idx == nullptr) throw_invalid_argument(op, rank, "topk_idx", "is null");
  l->mode = options.mode;
  l->experts = num_experts;
  l->local = num_experts / world;
  l->k = topk;
  l->tokens = tokens;
  if (options.mode == MoeMode::low_latency) {
    check_max_tokens(op, rank, tokens, options.max_tokens);
    l->max_tokens = options.max_tokens;
  }
  const size_t k = static_cast<size_t>(topk);
  l->topk.resize(tokens * k);
  auto widen = [&](const auto* in) {
    for (size_t i = 0; i < tokens * k; ++i) l->topk[i] = static_cast<int64_t>(in[i]);
  };
  if (idx_dtype == DType::i32)
    widen(static_cast<const int32_t*>(topk_idx));
  else
    widen(static_cast<const int64_t*>(topk_idx));
  // One unsigned compare finds every value outside [-1, num_experts); the error names the first.
  const auto span = static_cast<uint64_t>(num_experts) + 1;
  for (size_t i = 0; i < tokens * k; ++i) {
    const int64_t v = l->topk[i];
    if (static_cast<uint64_t>(v + 1) >= span)
      throw_invalid_argument(op, rank, "topk_idx",
                             "[" + std::to_string(i / k) + ", " + std::to_string(i % k) +
                                 "] = " + std::to_string(v) + " is not an expert [0, " +
                                 std::to_string(num_experts) + ") or -1");
  }
  // Which ranks each token goes to: once per rank. owner[e + 1] is expert e's rank (owner[0]:
  // the dropped slot, -1), a table instead of a division per slot; `last` holds the last token
  // counted per rank. Counted first, so that each list is allocated once.
  std::vector<int32_t> owner(static_cast<size_t>(num_experts) + 1, -1);
  for (int e = 0; e < num_experts; ++e) owner[static_cast<size_t>(e) + 1] = e / l->local;
  const auto W = static_cast<size_t>(world);
  std::vector<size_t> per_rank(W, 0);
  std::vector<int64_t> last(W, -1);
  auto each_rank = [&](auto&& take) {
    std::fill(last.begin(), last.end(), int64_t{-1});
    for (size_t t = 0; t < tokens; ++t)
      for (size_t j = 0; j < k; ++j) {
        const int32_t r = owner[static_cast<size_t>(l->topk[t * k + j] + 1)];
        if (r < 0 || last[static_cast<size_t>(r)] == static_cast<int64_t>(t)) continue;
        last[static_cast<size_t>(r)] = static_cast<int64_t>(t);
        take(static_cast<size_t>(r), t);
      }
  };
  each_rank([&](size_t r, size_t) { ++per_rank[r]; });
  l->send_tokens.assign(W, {});
  for (size_t r = 0; r < W; ++r) l->send_tokens[r].reserve(per_rank[r]);
  each_rank([&](size_t r, size_t t) { l->send_tokens[r].push_back(t); });
  return l;
}

// topk_idx readable on the host: itself, or (a layout for GPU memory given an array in device
// memory) a copy of it in `keep`, read after the caller's stream.
const void* host_topk(const void* topk_idx, DType idx_dtype, size_t tokens, int topk, Device device,
                      const OpOptions& o, const char* op, int rank, std::vector<int64_t>& keep) {
  if (!device.is_cuda() || topk_idx == nullptr || tokens == 0 || topk < 1) return topk_idx;
  if (idx_dtype != DType::i32 && idx_dtype != DType::i64) return topk_idx;  // route() says why
  const detail::MoeDeviceApi* api = moe_api(op, rank);
  if (api->device_of(topk_idx) < 0) return topk_idx;
  const size_t bytes = tokens * static_cast<size_t>(topk) * dtype_size(idx_dtype);
  keep.resize((bytes + sizeof(int64_t) - 1) / sizeof(int64_t));
  api->copy(op, rank, device.index, keep.data(), topk_idx, bytes, o.stream, true);
  return keep.data();
}

const MoeLayout::Impl::CombinePlan& combine_plan(const MoeLayout::Impl& l);

// For a pull combine (NOTE [moe pull dispatch]): each expert rank tells each source where that
// source's rows of each local expert start in recv_x (and y), and the source numbers its own
// entries per expert in (token, slot) order, the order of its rows there. Collective (one CPU
// all_to_all of num_local_experts int64 per peer).
void pull_rows(const MoeLayout::Impl& l, const OpOptions& o) {
  const auto world = static_cast<size_t>(l.world);
  const auto L = static_cast<size_t>(l.local);
  const size_t n = l.tokens * static_cast<size_t>(l.k);
  std::vector<int64_t> first_out(world * L, -1), first_in(world * L, -1);
  for (size_t e = 0; e < L; ++e)
    for (size_t i = l.expert_offset[e] + static_cast<size_t>(l.expert_counts[e]);
         i-- > l.expert_offset[e];) {
      const int64_t src = l.row_source[3 * i];
      if (src >= 0) first_out[static_cast<size_t>(src) * L + e] = static_cast<int64_t>(i);
    }
  OpOptions cpu;
  cpu.timeout = o.timeout;
  cpu.device = Device::cpu();
  all_to_all(first_out.data(), first_in.data(), L, DType::i64, l.group, cpu);
  l.y_rank.assign(n, -1);
  l.y_row.assign(n, -1);
  std::vector<int64_t> seen(world * L, 0);
  for (size_t i = 0; i < n; ++i) {
    const int64_t e = l.topk[i];
    if (e < 0) continue;
    const auto r = static_cast<size_t>(e) / L, le = static_cast<size_t>(e) % L;
    l.y_rank[i] = static_cast<int32_t>(r);
    l.y_row[i] = static_cast<int32_t>(first_in[r * L + le] + seen[r * L + le]++);
  }
}

// A layout for GPU memory: agree on the packs' sizes and upload the index arrays (NOTE [moe on
// the GPU]). Collective (one CPU all-reduce).
void prepare_gpu(MoeLayout::Impl& l, const OpOptions& o, const char* op) {
  const detail::MoeDeviceApi* api = moe_api(op, l.rank);
  const auto world = static_cast<size_t>(l.world);
  const size_t k = static_cast<size_t>(l.k);
  const auto& plan = combine_plan(l);
  // counts_in: tokens sent, received; rows sent back, received back; per peer.
  std::vector<int64_t> counts(4 * world);
  int64_t sent = 0, received = 0, rows_sent = 0, rows_back = 0;
  for (size_t p = 0; p < world; ++p) {
    counts[p] = static_cast<int64_t>(l.send_tokens[p].size());
    counts[world + p] = l.recv_tokens[p];
    counts[2 * world + p] = static_cast<int64_t>(plan.by_source[p].size());
    counts[3 * world + p] = plan.back_count[p];
    sent += counts[p];
    received += counts[world + p];
    rows_sent += counts[2 * world + p];
    rows_back += counts[3 * world + p];
  }
  // The kernels index rows with int32; a rank past that tells the others in the same all-reduce
  // (the largest rank with the problem, or -1), so that every rank fails together.
  const int64_t limit = INT32_MAX;
  const bool too_many = l.rows > static_cast<size_t>(limit) ||
                        l.tokens * k > static_cast<size_t>(limit) || received > limit ||
                        rows_back > limit;
  std::vector<int64_t> need{std::max(sent, received), std::max(rows_sent, rows_back),
                            too_many ? l.rank : -1};
  std::vector<int64_t> most(3);
  OpOptions cpu;
  cpu.timeout = o.timeout;
  cpu.device = Device::cpu();
  all_reduce(need.data(), most.data(), 3, DType::i64, ReduceOp::max, l.group, cpu);
  if (most[2] >= 0)
    throw_invalid_argument(op, l.rank, "topk_idx",
                           "makes more than 2^31 - 1 rows or slots on rank " +
                               std::to_string(most[2]) + "; the GPU path indexes them with int32");
  l.scratch_tokens = static_cast<size_t>(most[0]);
  l.scratch_rows = static_cast<size_t>(most[1]);
  std::call_once(l.pull_once, [&] { pull_rows(l, o); });  // after the agreement: every rank
  // One host image of the device arrays: int64 counts_in, counts_out, then the int32 lists.
  auto g = std::make_shared<GpuIndex>();
  g->n_send = sent;
  g->n_back = rows_sent;
  const size_t n32 = static_cast<size_t>(sent) + l.rows + static_cast<size_t>(rows_sent) +
                     l.tokens * k + 3 * l.rows + 2 * l.tokens * k;
  std::vector<int64_t> image(8 * world + (n32 + 1) / 2, 0);
  std::copy(counts.begin(), counts.end(), image.begin());
  auto* i32 = reinterpret_cast<int32_t*>(image.data() + 8 * world);
  size_t at = 0;
  for (size_t p = 0; p < world; ++p)
    for (size_t t : l.send_tokens[p]) i32[at++] = static_cast<int32_t>(t);
  for (size_t i = 0; i < l.rows; ++i) i32[at++] = static_cast<int32_t>(l.row_token[i]);
  for (size_t p = 0; p < world; ++p)
    for (size_t i : plan.by_source[p]) i32[at++] = static_cast<int32_t>(i);
  for (size_t i = 0; i < l.tokens * k; ++i) i32[at++] = static_cast<int32_t>(plan.slot_row[i]);
  // The pull's rows by the received token they copy (a counting sort on row_token), so that the
  // blocks copying one token's rows run side by side and read its row from HBM once.
  std::vector<int32_t> by_token(static_cast<size_t>(received) + 1, 0);
  for (size_t i = 0; i < l.rows; ++i)
    if (l.row_token[i] >= 0) ++by_token[static_cast<size_t>(l.row_token[i]) + 1];
  for (size_t j = 0; j < static_cast<size_t>(received); ++j) by_token[j + 1] += by_token[j];
  const size_t n_pull = static_cast<size_t>(by_token.back());
  std::vector<int32_t> pull(n_pull);
  for (size_t i = 0; i < l.rows; ++i)
    if (l.row_token[i] >= 0)
      pull[by_token[static_cast<size_t>(l.row_token[i])]++] = static_cast<int32_t>(i);
  for (size_t n = 0; n < n_pull; ++n) i32[at++] = pull[n];
  for (size_t n = 0; n < n_pull; ++n)
    i32[at++] = static_cast<int32_t>(l.row_source[3 * static_cast<size_t>(pull[n])]);
  for (size_t n = 0; n < n_pull; ++n)
    i32[at++] = static_cast<int32_t>(l.row_source[3 * static_cast<size_t>(pull[n]) + 1]);
  g->n_pull = static_cast<int64_t>(n_pull);
  for (size_t i = 0; i < l.tokens * k; ++i) i32[at++] = l.y_rank[i];
  for (size_t i = 0; i < l.tokens * k; ++i) i32[at++] = l.y_row[i];
  const size_t bytes = image.size() * sizeof(int64_t);
  g->base = api->alloc(op, l.rank, l.device.index, bytes);
  g->api = api;
  g->device = l.device.index;
  api->copy(op, l.rank, l.device.index, g->base, image.data(), bytes, o.stream, true);
  auto* base = static_cast<int64_t*>(g->base);
  g->counts_in = base;
  g->counts_out = base + 4 * world;
  auto* lists = reinterpret_cast<int32_t*>(base + 8 * world);
  g->send_list = lists;
  g->row_token = g->send_list + sent;
  g->back_list = g->row_token + l.rows;
  g->slot_row = g->back_list + rows_sent;
  g->pull_dst = g->slot_row + l.tokens * k;
  g->pull_rank = g->pull_dst + n_pull;
  g->pull_token = g->pull_rank + n_pull;
  g->y_rank = g->pull_token + n_pull;
  g->y_row = g->y_rank + l.tokens * k;
  l.gpu = std::move(g);
}

size_t align_to(size_t n, size_t a) {
  return (n + a - 1) / a * a;
}

// A layout routed on the device (NOTE [moe device layout]). Collective: one CPU all-reduce in
// which the ranks compare their arguments and report refusals, so that all fail together.
MoeLayout device_layout(const char* op, const void* topk_idx, DType idx_dtype, size_t tokens,
                        int topk, int num_experts, const Group& group, Device device,
                        const MoeOptions& options) {
  const int rank = group.rank(), world = group.world_size();
  std::exception_ptr refused;
  const detail::MoeDeviceApi* api = nullptr;
  try {
    if (options.mode != MoeMode::low_latency || !device.is_cuda())
      throw_invalid_argument(op, rank, "options.device_layout",
                             "needs mode low_latency and a GPU device (options.device)");
    check_layout_args(op, rank, world, topk, num_experts, idx_dtype);
    check_max_tokens(op, rank, tokens, options.max_tokens);
    const size_t slab = options.max_tokens * static_cast<size_t>(world);
    if (slab > static_cast<size_t>(INT32_MAX) ||
        options.max_tokens * static_cast<size_t>(topk) > static_cast<size_t>(INT32_MAX))
      throw_invalid_argument(op, rank, "max_tokens", "is too large for int32 row indices");
    api = moe_api(op, rank);
    if (tokens > 0 && (topk_idx == nullptr || api->device_of(topk_idx) < 0))
      throw_invalid_argument(op, rank, "topk_idx",
                             "must be device memory: a device layout reads it on the device at "
                             "every dispatch");
  } catch (const Error&) {
    refused = std::current_exception();
  }
  // A direct dispatch where every rank wants one (NOTE [moe direct dispatch]): the cuda backend
  // serves the device and SYMMEM_MOE_DIRECT allows it.
  bool want_direct = false;
  try {
    want_direct = !refused && env::moe_direct() && resolve_backend(group, device) == "cuda";
  } catch (const Error&) {
    want_direct = false;  // then the exchange, which reports what is wrong
  }
  // Agreement: max and -min of what must be equal, the largest refusing rank (or -1), and
  // whether any rank does not want a direct dispatch.
  const auto mt = static_cast<int64_t>(options.max_tokens);
  std::vector<int64_t> mine{mt,
                            -mt,
                            topk,
                            -static_cast<int64_t>(topk),
                            num_experts,
                            -static_cast<int64_t>(num_experts),
                            refused ? rank : -1,
                            want_direct ? 0 : 1};
  std::vector<int64_t> most(mine.size());
  OpOptions cpu;
  cpu.timeout = options.timeout;
  cpu.device = Device::cpu();
  all_reduce(mine.data(), most.data(), mine.size(), DType::i64, ReduceOp::max, group, cpu);
  if (refused) std::rethrow_exception(refused);
  if (most[6] >= 0)
    throw_invalid_argument(op, rank, "arguments",
                           "rank " + std::to_string(most[6]) + " refused its arguments");
  if (most[0] != -most[1] || most[2] != -most[3] || most[4] != -most[5])
    throw_invalid_argument(op, rank, "max_tokens",
                           "topk or num_experts differ between the ranks (a device layout needs "
                           "the same on every rank)");
  auto l = std::make_shared<MoeLayout::Impl>();
  l->group = group;
  l->world = world;
  l->rank = rank;
  l->mode = MoeMode::low_latency;
  l->experts = num_experts;
  l->local = num_experts / world;
  l->k = topk;
  l->tokens = tokens;
  l->max_tokens = options.max_tokens;
  l->device = device;
  l->topk_dev = topk_idx;
  l->idx64 = idx_dtype == DType::i64;
  l->direct = most[7] == 0;  // every rank wants it
  const auto W = static_cast<size_t>(world), L = static_cast<size_t>(l->local);
  const auto E = static_cast<size_t>(num_experts), K = static_cast<size_t>(topk);
  const size_t slab = l->max_tokens * W;
  l->rows = L * slab;
  l->expert_offset.resize(L);
  for (size_t e = 0; e < L; ++e) l->expert_offset[e] = e * slab;
  // The arrays: int64 first (12 per rank), then int32.
  const size_t n64 = E + 12 * W + L, n32 = tokens * W + 2 * tokens * K + E + 3 * L * W + 4;
  const size_t bytes = align_to(n64 * 8 + n32 * 4, 16);
  auto d = std::make_shared<DeviceLayout>();
  d->base = api->alloc(op, rank, device.index, bytes);
  d->api = api;
  d->device = device.index;
  std::vector<uint8_t> zeros(bytes, 0);
  api->copy(op, rank, device.index, d->base, zeros.data(), bytes, options.stream, true);
  auto* p64 = static_cast<int64_t*>(d->base);
  auto take64 = [&](size_t n) {
    int64_t* q = p64;
    p64 += n;
    return q;
  };
  detail::MoeDeviceLayoutArgs& a = d->arrays;
  a.ebase = take64(E);
  a.tok_count = take64(W);
  a.send_units = take64(W);
  a.send_off = take64(W);
  a.recv_units = take64(W);
  a.recv_off = take64(W);
  a.back_rows = take64(W);
  a.rows_back = take64(W);
  a.off_back = take64(W);
  a.recv_tokens = take64(W);
  a.c_send_units = take64(W);
  a.c_recv_units = take64(W);
  a.back_first = take64(W);
  a.expert_counts = take64(L);
  auto* p32 = reinterpret_cast<int32_t*>(p64);
  auto take32 = [&](size_t n) {
    int32_t* q = p32;
    p32 += n;
    return q;
  };
  a.dest_pos = take32(tokens * W);
  a.slot_idx = take32(tokens * K);
  a.slot_row = take32(tokens * K);
  a.hist = take32(E);
  a.cnt = take32(L * W);
  a.base = take32(L * W);
  a.pre = take32(W * L);
  a.parity = take32(1);
  a.done = take32(1);
  a.back_parity = take32(1);
  a.back_done = take32(1);
  a.topk = topk_idx;
  a.idx64 = l->idx64;
  a.tokens = static_cast<int64_t>(tokens);
  a.max_tokens = static_cast<int64_t>(l->max_tokens);
  a.k = topk;
  a.experts = num_experts;
  a.world = world;
  a.rank = rank;
  a.local = l->local;
  l->dl = std::move(d);
  return MoeLayout(std::move(l));
}

}  // namespace

MoeLayout moe_layout(const void* topk_idx, DType idx_dtype, size_t tokens, int topk,
                     int num_experts, const Group& group, const MoeOptions& options) {
  const char* op = "moe_layout";
  if (!group.valid()) throw_invalid_argument(op, -1, "group", "is not a valid group");
  const Device device = moe_device(options, group);
  if (options.device_layout)
    return device_layout(op, topk_idx, idx_dtype, tokens, topk, num_experts, group, device,
                         options);
  std::vector<int64_t> idx_copy;
  const void* idx =
      host_topk(topk_idx, idx_dtype, tokens, topk, device, options, op, group.rank(), idx_copy);
  auto l = route(op, idx, idx_dtype, tokens, topk, num_experts, group, options);
  l->device = device;
  const int rank = l->rank, world = l->world;
  const size_t k = static_cast<size_t>(topk);
  // Counts, then the tokens' expert ids.
  std::vector<int64_t> send_n(static_cast<size_t>(world)), recv_n(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r)
    send_n[static_cast<size_t>(r)] =
        static_cast<int64_t>(l->send_tokens[static_cast<size_t>(r)].size());
  OpOptions count_opts;
  count_opts.timeout = options.timeout;
  count_opts.device = Device::cpu();
  all_to_all(send_n.data(), recv_n.data(), 1, DType::i64, group, count_opts);
  if (l->max_tokens > 0)
    for (int s = 0; s < world; ++s)
      if (static_cast<size_t>(recv_n[static_cast<size_t>(s)]) > l->max_tokens)
        throw_invalid_argument(op, rank, "max_tokens",
                               "= " + std::to_string(l->max_tokens) + " but rank " +
                                   std::to_string(s) + " sends " +
                                   std::to_string(recv_n[static_cast<size_t>(s)]) + " tokens");
  l->recv_tokens = recv_n;
  Scratch& buf = scratch();
  std::vector<uint8_t>&send = buf.send, &recv = buf.recv;
  std::vector<int64_t> send_bytes(static_cast<size_t>(world)),
      recv_bytes(static_cast<size_t>(world));
  const size_t meta = (k + 1) * sizeof(int64_t);  // the token's index, then its expert ids
  size_t total = 0;
  for (const auto& list : l->send_tokens) total += list.size();
  send.resize(total * meta);
  auto* out = reinterpret_cast<int64_t*>(send.data());
  for (int r = 0; r < world; ++r) {
    auto ru = static_cast<size_t>(r);
    for (size_t t : l->send_tokens[ru]) {
      *out++ = static_cast<int64_t>(t);
      std::memcpy(out, &l->topk[t * k], k * sizeof(int64_t));
      out += k;
    }
    send_bytes[ru] = static_cast<int64_t>(l->send_tokens[ru].size() * meta);
    recv_bytes[ru] = recv_n[ru] * static_cast<int64_t>(meta);
  }
  exchange(send, send_bytes, recv, recv_bytes, group, options);
  // The rows, grouped by local expert, then source, token, slot.
  l->recv_first.resize(static_cast<size_t>(world));
  size_t received = 0;
  for (int s = 0; s < world; ++s) {
    l->recv_first[static_cast<size_t>(s)] = received;
    received += static_cast<size_t>(recv_n[static_cast<size_t>(s)]);
  }
  const auto* ids = reinterpret_cast<const int64_t*>(recv.data());
  const int64_t first_expert = static_cast<int64_t>(rank) * l->local;
  const size_t slab = l->max_tokens * static_cast<size_t>(world);
  // A counting sort by local expert. The first pass walks the received tokens in order
  // (source, then token) and each token's slots in order, and notes every slot that names a
  // local expert (received token, slot, expert) while it counts each expert's rows; the second
  // writes each noted slot at its expert's next row, so an expert's rows keep that order
  // (symmem/moe.hpp). O(received x topk), and no branch on the expert ids: a slot is always
  // written and kept by advancing the end when it is local (random ids would defeat a branch).
  const auto local = static_cast<size_t>(l->local);
  // A hit packs (received token << 32 | slot << 16 | local expert): topk and the experts per
  // rank are below 2^16 (checked), the received tokens below 2^32.
  if (k >= (size_t{1} << 16) || local >= (size_t{1} << 16) || received >= (size_t{1} << 32))
    throw_invalid_argument(op, rank, "topk_idx",
                           "makes " + std::to_string(received) + " received tokens with topk " +
                               std::to_string(k) + " and " + std::to_string(local) +
                               " experts per rank; the layout needs fewer than 2^32, 2^16 and "
                               "2^16");
  std::vector<uint64_t>& hits = buf.hits;
  hits.resize(std::max(hits.size(), received * k + 1));
  std::vector<int64_t> count(local + 1, 0);  // the last one counts the slots of other ranks
  size_t n_hits = 0;
  for (size_t tok = 0; tok < received; ++tok) {
    const int64_t* m = ids + tok * (k + 1);
    for (size_t j = 0; j < k; ++j) {
      const auto e = static_cast<uint64_t>(m[1 + j] - first_expert);
      const bool mine = e < local;
      const uint64_t bin = mine ? e : local;
      hits[n_hits] = (static_cast<uint64_t>(tok) << 32) | (static_cast<uint64_t>(j) << 16) | bin;
      n_hits += mine ? 1 : 0;
      ++count[bin];
    }
  }
  l->expert_counts.assign(count.begin(), count.end() - 1);
  l->expert_offset.resize(local);
  size_t rows = 0;
  for (size_t e = 0; e < local; ++e) {
    const auto used = static_cast<size_t>(l->expert_counts[e]);
    if (l->max_tokens > 0 && used > slab)  // only when tokens list one expert in several slots
      throw_invalid_argument(op, rank, "topk_idx",
                             "sends " + std::to_string(used) + " rows to local expert " +
                                 std::to_string(e) + ", more than its low_latency slab of " +
                                 std::to_string(slab) + " (world_size x max_tokens)");
    l->expert_offset[e] = l->max_tokens > 0 ? e * slab : rows;
    rows += l->max_tokens > 0 ? slab : used;  // low_latency: the slab's unwritten rows stay -1
  }
  l->row_token.assign(rows, -1);
  l->row_source.assign(3 * rows, -1);
  // The source rank of each received token, from the sources' first tokens.
  std::vector<int32_t> source_of(received);
  for (int s = 0; s < world; ++s) {
    const auto su = static_cast<size_t>(s);
    std::fill_n(source_of.begin() + static_cast<std::ptrdiff_t>(l->recv_first[su]),
                static_cast<size_t>(recv_n[su]), s);
  }
  std::vector<size_t> next(l->expert_offset);
  for (size_t h = 0; h < n_hits; ++h) {
    const uint64_t hit = hits[h];
    const size_t tok = hit >> 32;
    const size_t at = next[hit & 0xffff]++;
    l->row_token[at] = static_cast<int64_t>(tok);
    l->row_source[3 * at] = source_of[tok];
    l->row_source[3 * at + 1] = ids[tok * (k + 1)];
    l->row_source[3 * at + 2] = static_cast<int64_t>((hit >> 16) & 0xffff);
  }
  l->rows = l->row_token.size();
  if (device.is_cuda()) prepare_gpu(*l, options, op);
  return MoeLayout(std::move(l));
}

MoeLayout moe_layout_restore(const void* topk_idx, DType idx_dtype, size_t tokens, int topk,
                             int num_experts, const int64_t* row_source, size_t rows,
                             const int64_t* expert_counts, const Group& group,
                             const MoeOptions& options) {
  const char* op = "moe_layout_restore";
  if (!group.valid()) throw_invalid_argument(op, -1, "group", "is not a valid group");
  if (options.device_layout)
    throw_invalid_argument(op, group.rank(), "options.device_layout",
                           "a layout routed on the device keeps no row_source to restore from; "
                           "keep the MoeLayout itself");
  const Device device = moe_device(options, group);
  std::vector<int64_t> idx_copy;
  const void* idx =
      host_topk(topk_idx, idx_dtype, tokens, topk, device, options, op, group.rank(), idx_copy);
  auto l = route(op, idx, idx_dtype, tokens, topk, num_experts, group, options);
  l->device = device;
  const auto world = static_cast<size_t>(l->world), local = static_cast<size_t>(l->local);
  const size_t slab = l->max_tokens * world;
  if (l->max_tokens > 0 ? rows != local * slab : false)
    throw_invalid_argument(
        op, l->rank, "row_source",
        "has " + std::to_string(rows) + " rows; low_latency has " + std::to_string(local * slab));
  if (rows > 0 && row_source == nullptr)
    throw_invalid_argument(op, l->rank, "row_source", "is null");
  // Received tokens: the distinct (source, token) pairs, in source then token order.
  std::vector<std::vector<int64_t>> from(world);
  for (size_t i = 0; i < rows; ++i) {
    const int64_t s = row_source[3 * i], t = row_source[3 * i + 1];
    if (s < 0) continue;
    if (static_cast<size_t>(s) >= world || t < 0)
      throw_invalid_argument(op, l->rank, "row_source",
                             "[" + std::to_string(i) + "] = (" + std::to_string(s) + ", " +
                                 std::to_string(t) + ") is no (rank, token)");
    from[static_cast<size_t>(s)].push_back(t);
  }
  l->recv_tokens.resize(world);
  l->recv_first.resize(world);
  size_t received = 0;
  for (size_t s = 0; s < world; ++s) {
    auto& v = from[s];
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    l->recv_first[s] = received;
    l->recv_tokens[s] = static_cast<int64_t>(v.size());
    received += v.size();
  }
  l->row_source.assign(row_source, row_source + 3 * rows);
  l->row_token.assign(rows, -1);
  for (size_t i = 0; i < rows; ++i) {
    const int64_t s = row_source[3 * i];
    if (s < 0) continue;
    const auto& v = from[static_cast<size_t>(s)];
    auto pos = std::lower_bound(v.begin(), v.end(), row_source[3 * i + 1]) - v.begin();
    l->row_token[i] = static_cast<int64_t>(l->recv_first[static_cast<size_t>(s)]) + pos;
  }
  l->expert_counts.assign(expert_counts, expert_counts + local);
  l->expert_offset.resize(local);
  size_t at = 0;
  for (size_t e = 0; e < local; ++e) {
    l->expert_offset[e] = l->max_tokens > 0 ? e * slab : at;
    at += static_cast<size_t>(l->expert_counts[e]);
  }
  if (l->max_tokens == 0 && at != rows)
    throw_invalid_argument(
        op, l->rank, "expert_counts",
        "sum to " + std::to_string(at) + " but row_source has " + std::to_string(rows) + " rows");
  l->rows = rows;
  if (device.is_cuda()) prepare_gpu(*l, options, op);
  return MoeLayout(std::move(l));
}

namespace {

const MoeLayout::Impl::CombinePlan& combine_plan(const MoeLayout::Impl& l) {
  std::call_once(l.combine_once, [&] {
    auto& p = l.combine;
    const auto world = static_cast<size_t>(l.world);
    const size_t k = static_cast<size_t>(l.k);
    // The rows going back, per source rank in row order (counted first: one allocation each).
    std::vector<size_t> per_source(world, 0);
    for (size_t i = 0; i < l.rows; ++i)
      if (l.row_token[i] >= 0) ++per_source[static_cast<size_t>(l.row_source[3 * i])];
    p.by_source.assign(world, {});
    for (size_t s = 0; s < world; ++s) p.by_source[s].reserve(per_source[s]);
    for (size_t i = 0; i < l.rows; ++i)
      if (l.row_token[i] >= 0) p.by_source[static_cast<size_t>(l.row_source[3 * i])].push_back(i);
    // What comes back: rank r returns the rows of this rank's tokens in its layout's order
    // restricted to this rank (local expert, then token, then slot). Ranks in order and their
    // experts in order is the global expert order, so one counting sort of the slots by global
    // expert, stable in (token, slot), numbers every slot's row.
    const auto E = static_cast<size_t>(l.experts);
    std::vector<int64_t> next(E + 1, 0);
    for (size_t i = 0; i < l.tokens * k; ++i) ++next[static_cast<size_t>(l.topk[i] + 1)];
    p.back_count.assign(world, 0);
    int64_t n = 0;
    for (size_t e = 0; e < E; ++e) {
      const int64_t c = next[e + 1];
      next[e + 1] = n;
      n += c;
      p.back_count[e / static_cast<size_t>(l.local)] += c;
    }
    next[0] = -1;  // dropped slots (-1) have no row; the count of them is not needed
    p.slot_row.resize(l.tokens * k);
    for (size_t i = 0; i < l.tokens * k; ++i) {
      const auto bin = static_cast<size_t>(l.topk[i] + 1);
      p.slot_row[i] = next[bin];
      next[bin] += bin != 0 ? 1 : 0;
    }
  });
  return l.combine;
}

size_t align_up(size_t n, size_t a) {
  return (n + a - 1) / a * a;
}

// The group's MoE scratch for `purpose`, at least `bytes` per rank (NOTE [moe on the GPU]).
// Growing it is collective (every rank computes the same size in the same call) and cannot
// happen while the stream is being captured into a CUDA graph.
SymmetricMemory moe_scratch_memory(const MoeLayout::Impl& l, const OpOptions& o, size_t bytes,
                                   const char* op, const char* purpose) {
  SymmetricMemory s = group_scratch(l.group, l.device, bytes, purpose, false);
  if (!s.valid()) {
    // (moe_api: a layout routed on the device has no GpuIndex, l.gpu is null there.)
    if (moe_api(op, l.rank)->capturing(op, l.rank, l.device.index, o.stream))
      throw_invalid_argument(op, l.rank, "stream",
                             "is being captured into a CUDA graph, but this MoE call needs its "
                             "exchange buffers grown (to " +
                                 std::to_string(bytes) +
                                 " bytes per rank), which cannot happen during capture: run the "
                                 "same call once before capturing (warm up)");
    s = group_scratch(l.group, l.device, bytes, purpose, true);
  }
  return s;
}

// This rank's part of the group's "moe" scratch (the packs of the all_to_all_v exchanges).
char* moe_scratch(const MoeLayout::Impl& l, const OpOptions& o, size_t bytes, const char* op) {
  return static_cast<char*>(moe_scratch_memory(l, o, bytes, op, "moe").ptr(l.rank));
}

AllToAllVOptions gpu_exchange(const MoeLayout::Impl& l, const OpOptions& o) {
  AllToAllVOptions a;
  a.stream = o.stream;
  a.timeout = o.timeout;
  a.device = l.device;
  a.recv_counts_known = true;
  return a;
}

// The packs are moved as f32 elements (4 bytes): every pack is a multiple of 16 bytes, and f32
// is an all_to_all_v dtype of every GPU backend.
constexpr size_t kPackUnit = 4;

// NOTE [moe pull dispatch]
// When every rank's x (and, in fp8, x_scales) lies in symmetric memory of the layout's group on
// the cuda backend, every peer's part reachable here, at the same offset of the same allocation
// on every rank, the expert ranks read the rows straight from the sources' x instead of the pack
// | all_to_all_v | unpack of NOTE [moe on the GPU]: a barrier of the group on the stream (every
// source's x is written: its earlier kernels ended before its barrier kernel arrived), one gather
// kernel that copies each row of recv_x from its source rank's x through the view's device table
// of peer addresses, and a second barrier (every expert rank is done reading, so a source may
// overwrite x once it passes it). The gather takes the rows in the order of the tokens they copy
// (pull_dst), so the rows of one token (one per local expert it has) are copied by neighbouring
// blocks at about the same time and its row comes from HBM once. One pass over the bytes instead
// of three, and no exchange buffers. Whether it applies is agreed per dispatch in one CPU
// all-reduce (every rank's yes, allocation id and offsets): the answer depends on pointers that
// may differ by rank. SYMMEM_MOE_DIRECT=0 on any rank keeps the exchange. A CPU layout pulls the
// same way from x and y in host-backend symmetric memory (barriers of the group on the CPU,
// memcpy from the peers' mapped buffers, the same sums).

// The symmetric view of `p` (`bytes`) when a pull may read it from every peer: memory of
// `group` on `backend` (cuda for a GPU layout, host for a CPU one), each peer's part mapped here.
SymmetricMemory pull_view(const Group& group, const void* p, size_t bytes, const char* backend) {
  if (p == nullptr) return {};
  SymmetricMemory v = find_symmetric(group, p, bytes);
  if (!v.valid()) return {};
  if (v.backend() != backend) return {};
  for (int q = 0; q < v.world_size(); ++q)
    if (!v.direct_access(q)) return {};
  return v;
}

// Whether a dispatch or combine pulls (NOTE [moe pull dispatch]): collective, the same answer
// on every rank. bufs: the buffers read from the peers (null: none), each {pointer, bytes};
// views[i]: bufs[i]'s symmetric view when it does.
bool agree_pull(const MoeLayout::Impl& l, const std::pair<const void*, size_t> (&bufs)[2],
                const OpOptions& o, SymmetricMemory (&views)[2]) {
  // bufs[0] (x or y) is always read: null on a rank (no tokens, no rows) means no pull.
  bool ok = env::moe_direct() && bufs[0].first != nullptr;
  const char* backend = l.device.is_cuda() ? "cuda" : "host";
  for (int i = 0; i < 2 && ok; ++i)
    if (bufs[i].first != nullptr) {
      views[i] = pull_view(l.group, bufs[i].first, std::max<size_t>(bufs[i].second, 1), backend);
      ok = views[i].valid();
    }
  // The max of {not ok, then per buffer id and offset, then their negations}: the ranks agree
  // where max == -max(-v).
  std::vector<int64_t> mine{ok ? 0 : 1};
  for (const SymmetricMemory& v : views) {
    mine.push_back(ok && v.valid() ? static_cast<int64_t>(v.alloc_id()) : -1);
    mine.push_back(ok && v.valid() ? static_cast<int64_t>(v.offset()) : 0);
  }
  for (size_t i = 1; i < 5; ++i) mine.push_back(-mine[i]);
  std::vector<int64_t> most(mine.size());
  OpOptions cpu;
  cpu.timeout = o.timeout;
  cpu.device = Device::cpu();
  all_reduce(mine.data(), most.data(), mine.size(), DType::i64, ReduceOp::max, l.group, cpu);
  bool same = most[0] == 0;
  for (size_t i = 1; i < 5; ++i) same = same && most[i] == -most[i + 4];
  return same;
}

// The group barrier on the stream that brackets a pull.
void pull_barrier(const MoeLayout::Impl& l, const OpOptions& o) {
  OpOptions sync;
  sync.stream = o.stream;
  sync.timeout = o.timeout;
  sync.device = l.device;
  barrier(l.group, sync);
}

void dispatch_gpu(const MoeLayout::Impl& l, const void* x, const float* x_scales, void* recv_x,
                  float* recv_scales, size_t row_bytes, size_t scale_bytes, const OpOptions& o,
                  const char* op) {
  const GpuIndex& g = *l.gpu;
  const auto world = static_cast<size_t>(l.world);
  SymmetricMemory views[2];
  const std::pair<const void*, size_t> bufs[2] = {
      {x, l.tokens * row_bytes}, {scale_bytes > 0 ? x_scales : nullptr, l.tokens * scale_bytes}};
  if (agree_pull(l, bufs, o, views)) {
    pull_barrier(l, o);
    detail::MoeGatherArgs a;
    a.rows = g.n_pull;
    a.index = g.pull_token;
    a.src_rank = g.pull_rank;
    a.dst_index = g.pull_dst;
    a.seg[0] = {static_cast<const char*>(x), static_cast<int64_t>(row_bytes),
                static_cast<char*>(recv_x), static_cast<int64_t>(row_bytes),
                static_cast<int64_t>(row_bytes)};
    a.peer_src[0] = views[0].device_handle().buffers;
    if (scale_bytes > 0) {
      a.seg[1] = {reinterpret_cast<const char*>(x_scales), static_cast<int64_t>(scale_bytes),
                  reinterpret_cast<char*>(recv_scales), static_cast<int64_t>(scale_bytes),
                  static_cast<int64_t>(scale_bytes)};
      a.peer_src[1] = views[1].device_handle().buffers;
      a.segments = 2;
    }
    g.api->gather(op, l.rank, l.device.index, a, o.stream);
    pull_barrier(l, o);
    return;
  }
  const size_t pack = align_up(row_bytes + scale_bytes, 16);
  const size_t region = align_up(std::max<size_t>(l.scratch_tokens * pack, 1), 256);
  char* send = moe_scratch(l, o, 2 * region, op);
  char* recv = send + region;
  detail::MoeGatherArgs a;
  a.rows = g.n_send;
  a.index = g.send_list;
  a.seg[0] = {static_cast<const char*>(x), static_cast<int64_t>(row_bytes), send,
              static_cast<int64_t>(pack), static_cast<int64_t>(row_bytes)};
  a.seg[1] = {reinterpret_cast<const char*>(x_scales), static_cast<int64_t>(scale_bytes),
              send + row_bytes, static_cast<int64_t>(pack), static_cast<int64_t>(scale_bytes)};
  a.segments = scale_bytes > 0 ? 2 : 1;
  a.count_in = g.counts_in;
  a.count_out = g.counts_out;
  a.count_n = static_cast<int>(2 * world);
  a.count_scale = static_cast<int64_t>(pack / kPackUnit);
  g.api->gather(op, l.rank, l.device.index, a, o.stream);
  all_to_all_v(send, g.counts_out, recv, g.counts_out + world, nullptr, region / kPackUnit,
               DType::f32, l.group, gpu_exchange(l, o));
  detail::MoeGatherArgs b;
  b.rows = static_cast<int64_t>(l.rows);
  b.index = g.row_token;
  b.seg[0] = {recv, static_cast<int64_t>(pack), static_cast<char*>(recv_x),
              static_cast<int64_t>(row_bytes), static_cast<int64_t>(row_bytes)};
  b.seg[1] = {recv + row_bytes, static_cast<int64_t>(pack), reinterpret_cast<char*>(recv_scales),
              static_cast<int64_t>(scale_bytes), static_cast<int64_t>(scale_bytes)};
  b.segments = scale_bytes > 0 ? 2 : 1;
  g.api->gather(op, l.rank, l.device.index, b, o.stream);
}

void combine_gpu(const MoeLayout::Impl& l, const void* y, DType dtype, size_t hidden,
                 const float* topk_weights, void* out, size_t row_bytes, const OpOptions& o,
                 const char* op) {
  const GpuIndex& g = *l.gpu;
  const auto world = static_cast<size_t>(l.world);
  detail::MoeCombineArgs c;
  c.tokens = static_cast<int64_t>(l.tokens);
  c.topk = l.k;
  c.hidden = static_cast<int64_t>(hidden);
  c.dtype = static_cast<int>(dtype);
  c.weights = topk_weights;
  c.out = static_cast<char*>(out);
  SymmetricMemory views[2];
  const std::pair<const void*, size_t> bufs[2] = {{y, l.rows * row_bytes}, {nullptr, 0}};
  if (agree_pull(l, bufs, o, views)) {
    // NOTE [moe pull dispatch]: the sums read each slot's row from its expert rank's y.
    pull_barrier(l, o);
    c.slot_row = g.y_row;
    c.src_rank = g.y_rank;
    c.peer_rows = views[0].device_handle().buffers;
    c.rows = static_cast<const char*>(y);
    c.row_stride = static_cast<int64_t>(row_bytes);
    if (hidden > 0) g.api->combine(op, l.rank, l.device.index, c, o.stream);
    pull_barrier(l, o);
    return;
  }
  const size_t stride = align_up(std::max<size_t>(row_bytes, 1), 16);
  const size_t region = align_up(std::max<size_t>(l.scratch_rows * stride, 1), 256);
  char* send = moe_scratch(l, o, 2 * region, op);
  char* recv = send + region;
  detail::MoeGatherArgs a;
  a.rows = g.n_back;
  a.index = g.back_list;
  a.seg[0] = {static_cast<const char*>(y), static_cast<int64_t>(row_bytes), send,
              static_cast<int64_t>(stride), static_cast<int64_t>(row_bytes)};
  a.segments = 1;
  a.count_in = g.counts_in + 2 * world;
  a.count_out = g.counts_out + 2 * world;
  a.count_n = static_cast<int>(2 * world);
  a.count_scale = static_cast<int64_t>(stride / kPackUnit);
  g.api->gather(op, l.rank, l.device.index, a, o.stream);
  all_to_all_v(send, g.counts_out + 2 * world, recv, g.counts_out + 3 * world, nullptr,
               region / kPackUnit, DType::f32, l.group, gpu_exchange(l, o));
  c.slot_row = g.slot_row;
  c.rows = recv;
  c.row_stride = static_cast<int64_t>(stride);
  if (hidden > 0) g.api->combine(op, l.rank, l.device.index, c, o.stream);
}

// Whether a direct dispatch or combine can use scratch `s` of a layout that goes direct (its
// backend, cuda, was agreed when the layout was made; NOTE [moe direct dispatch]): the same
// answer on every rank (one backend, one host). Then `h` is its device handle, with the op's
// timeout.
bool direct_handle(const SymmetricMemory& s, const OpOptions& o, DeviceHandle& h) {
  const auto world = static_cast<size_t>(s.world_size());
  bool reachable = s.signal_pad_bytes() / 4 >= 2 * world;
  for (int p = 0; p < s.world_size() && reachable; ++p) reachable = s.direct_access(p);
  if (!reachable) return false;
  h = s.device_handle();
  if (o.timeout.count() > 0)  // else the handle's (SYMMEM_TIMEOUT_MS)
    h.timeout_ns = static_cast<uint64_t>(o.timeout.count()) * 1000000u;
  return true;
}

void dispatch_device_layout(const MoeLayout::Impl& l, const void* x, const float* x_scales,
                            void* recv_x, float* recv_scales, size_t row_bytes, size_t scale_bytes,
                            const OpOptions& o, const char* op) {
  const DeviceLayout& d = *l.dl;
  const auto W = static_cast<size_t>(l.world);
  const size_t header = align_up((1 + 2 * static_cast<size_t>(l.k)) * 4, 16);
  const size_t pack = align_up(header + row_bytes + scale_bytes, 16);
  const size_t cb = align_up((2 + static_cast<size_t>(l.local)) * 4, 16);
  detail::MoeDeviceLayoutArgs a = d.arrays;
  a.x = static_cast<const char*>(x);
  a.x_scales = reinterpret_cast<const char*>(x_scales);
  a.recv_x = static_cast<char*>(recv_x);
  a.recv_scales = reinterpret_cast<char*>(recv_scales);
  a.row_bytes = static_cast<int64_t>(row_bytes);
  a.scale_bytes = static_cast<int64_t>(scale_bytes);
  a.header = static_cast<int64_t>(header);
  a.pack = static_cast<int64_t>(pack);
  a.cb = static_cast<int64_t>(cb);
  if (l.direct) {
    // NOTE [moe direct dispatch]: two areas (by parity) of one piece per source.
    const size_t piece = align_up(cb + l.max_tokens * pack, 256);
    SymmetricMemory s = moe_scratch_memory(l, o, 2 * W * piece, op, "moe_ll");
    if (direct_handle(s, o, a.peers)) {
      a.piece = static_cast<int64_t>(piece);
      a.half = static_cast<int64_t>(W * piece);
      a.recv = static_cast<char*>(s.ptr(l.rank));
      d.api->layout_route_put(op, l.rank, l.device.index, a, o.stream);
      d.api->layout_wait_place(op, l.rank, l.device.index, a, o.stream);
      return;
    }
  }
  const size_t region = align_up(W * cb + W * l.max_tokens * pack, 256);
  char* send = moe_scratch(l, o, 2 * region, op);
  a.send = send;
  a.recv = send + region;
  d.api->layout_route_pack(op, l.rank, l.device.index, a, o.stream);
  AllToAllVOptions ao = gpu_exchange(l, o);
  ao.recv_counts_known = false;  // the receive counts are the exchange's output
  all_to_all_v(a.send, a.send_units, a.recv, a.recv_units, a.recv_off, region / kPackUnit,
               DType::f32, l.group, ao);
  d.api->layout_place(op, l.rank, l.device.index, a, o.stream);
}

void combine_device_layout(const MoeLayout::Impl& l, const void* y, DType dtype, size_t hidden,
                           const float* topk_weights, void* out, size_t row_bytes,
                           const OpOptions& o, const char* op) {
  const DeviceLayout& d = *l.dl;
  const size_t stride = align_up(std::max<size_t>(row_bytes, 1), 16);
  const size_t most_rows = static_cast<size_t>(l.world) * l.max_tokens * static_cast<size_t>(l.k);
  const size_t region = align_up(std::max<size_t>(most_rows * stride, 1), 256);
  detail::MoeDeviceLayoutArgs a = d.arrays;
  a.y = static_cast<const char*>(y);
  a.y_row_bytes = static_cast<int64_t>(row_bytes);
  a.stride = static_cast<int64_t>(stride);
  detail::MoeCombineArgs c;
  bool direct = false;
  if (l.direct) {  // NOTE [moe direct dispatch]: two areas (by parity) of the rows coming back
    SymmetricMemory s = moe_scratch_memory(l, o, 2 * region, op, "moe_ll_back");
    direct = direct_handle(s, o, a.back_peers);
    if (direct) {
      a.back_half = static_cast<int64_t>(region);
      a.recv = static_cast<char*>(s.ptr(l.rank));
      d.api->layout_combine_put(op, l.rank, l.device.index, a, o.stream);
      c.rows_parity = a.back_parity;
      c.rows_half = a.back_half;
    }
  }
  if (!direct) {
    char* send = moe_scratch(l, o, 2 * region, op);
    a.send = send;
    a.recv = send + region;
    d.api->layout_combine_pack(op, l.rank, l.device.index, a, o.stream);
    all_to_all_v(a.send, a.c_send_units, a.recv, a.c_recv_units, nullptr, region / kPackUnit,
                 DType::f32, l.group, gpu_exchange(l, o));
  }
  c.tokens = static_cast<int64_t>(l.tokens);
  c.topk = l.k;
  c.hidden = static_cast<int64_t>(hidden);
  c.dtype = static_cast<int>(dtype);
  c.slot_row = a.slot_row;
  c.weights = topk_weights;
  c.rows = a.recv;
  c.row_stride = static_cast<int64_t>(stride);
  c.out = static_cast<char*>(out);
  if (hidden > 0) d.api->combine(op, l.rank, l.device.index, c, o.stream);
}

}  // namespace

void moe_dispatch(const MoeLayout& layout, const void* x, DType dtype, size_t hidden,
                  const float* x_scales, void* recv_x, float* recv_scales,
                  const OpOptions& options) {
  const char* op = "moe_dispatch";
  const MoeLayout::Impl& l = need(layout, op);
  same_device(l, options, op);
  const size_t es = dtype_size(dtype);
  size_t scales = 0;
  if (is_fp8(dtype)) {
    if (hidden % kScaleBlock != 0)
      throw_invalid_argument(op, l.rank, "hidden",
                             "= " + std::to_string(hidden) + " is not a multiple of 128: fp8 " +
                                 "tokens carry one f32 scale per 128 elements");
    if (l.tokens > 0 && x_scales == nullptr)
      throw_invalid_argument(op, l.rank, "x_scales", "is null; fp8 tokens need their scales");
    if (l.rows > 0 && recv_scales == nullptr)
      throw_invalid_argument(op, l.rank, "recv_scales", "is null; fp8 tokens need their scales");
    scales = hidden / kScaleBlock;
  } else if (x_scales != nullptr || recv_scales != nullptr) {
    throw_invalid_argument(op, l.rank, x_scales ? "x_scales" : "recv_scales",
                           std::string("is given but dtype ") + dtype_info(dtype).name +
                               " carries no scales (fp8 only)");
  }
  if (l.tokens > 0 && hidden > 0 && x == nullptr)
    throw_invalid_argument(op, l.rank, "x", "is null");
  if (l.rows > 0 && hidden > 0 && recv_x == nullptr)
    throw_invalid_argument(op, l.rank, "recv_x", "is null");
  const size_t row_bytes = hidden * es, scale_bytes = scales * sizeof(float);
  if (l.dl)
    return dispatch_device_layout(l, x, x_scales, recv_x, recv_scales, row_bytes, scale_bytes,
                                  options, op);
  if (l.device.is_cuda())
    return dispatch_gpu(l, x, x_scales, recv_x, recv_scales, row_bytes, scale_bytes, options, op);
  SymmetricMemory views[2];
  const std::pair<const void*, size_t> bufs[2] = {
      {x, l.tokens * row_bytes}, {scales ? x_scales : nullptr, l.tokens * scale_bytes}};
  if (agree_pull(l, bufs, options, views)) {  // NOTE [moe pull dispatch], on the CPU
    pull_barrier(l, options);
    for (size_t i = 0; i < l.rows; ++i) {
      const int64_t src = l.row_source[3 * i];
      if (src < 0) continue;
      const auto t = static_cast<size_t>(l.row_source[3 * i + 1]);
      const auto q = static_cast<int>(src);
      if (row_bytes)
        std::memcpy(static_cast<uint8_t*>(recv_x) + i * row_bytes,
                    static_cast<const uint8_t*>(views[0].ptr(q)) + t * row_bytes, row_bytes);
      if (scales)
        std::memcpy(recv_scales + i * scales,
                    static_cast<const uint8_t*>(views[1].ptr(q)) + t * scale_bytes, scale_bytes);
    }
    pull_barrier(l, options);
    return;
  }
  const size_t pack = row_bytes + scale_bytes;
  const auto world = static_cast<size_t>(l.world);
  Scratch& buf = scratch();
  std::vector<uint8_t>&send = buf.send, &recv = buf.recv;
  std::vector<int64_t> send_bytes(world), recv_bytes(world);
  for (size_t r = 0; r < world; ++r) {
    for (size_t t : l.send_tokens[r]) {
      const auto* row = static_cast<const uint8_t*>(x) + t * row_bytes;
      send.insert(send.end(), row, row + row_bytes);
      if (scales) {
        const auto* sc = reinterpret_cast<const uint8_t*>(x_scales + t * scales);
        send.insert(send.end(), sc, sc + scale_bytes);
      }
    }
    send_bytes[r] = static_cast<int64_t>(l.send_tokens[r].size() * pack);
    recv_bytes[r] = l.recv_tokens[r] * static_cast<int64_t>(pack);
  }
  exchange(send, send_bytes, recv, recv_bytes, l.group, options);
  for (size_t i = 0; i < l.rows; ++i) {
    int64_t tok = l.row_token[i];
    if (tok < 0) continue;
    const uint8_t* src = recv.data() + static_cast<size_t>(tok) * pack;
    if (row_bytes) std::memcpy(static_cast<uint8_t*>(recv_x) + i * row_bytes, src, row_bytes);
    if (scales) std::memcpy(recv_scales + i * scales, src + row_bytes, scale_bytes);
  }
}

void moe_combine(const MoeLayout& layout, const void* y, DType dtype, size_t hidden,
                 const float* topk_weights, void* out, const OpOptions& options) {
  const char* op = "moe_combine";
  const MoeLayout::Impl& l = need(layout, op);
  same_device(l, options, op);
  if (dtype != DType::f32 && dtype != DType::f16 && dtype != DType::bf16)
    throw_invalid_argument(op, l.rank, "dtype",
                           std::string("= ") + dtype_info(dtype).name +
                               "; combine sums rows of float32, float16 or bfloat16");
  if (l.rows > 0 && hidden > 0 && y == nullptr) throw_invalid_argument(op, l.rank, "y", "is null");
  if (l.tokens > 0 && topk_weights == nullptr)
    throw_invalid_argument(op, l.rank, "topk_weights", "is null");
  if (l.tokens > 0 && hidden > 0 && out == nullptr)
    throw_invalid_argument(op, l.rank, "out", "is null");
  const size_t row_bytes = hidden * dtype_size(dtype);
  if (l.dl)
    return combine_device_layout(l, y, dtype, hidden, topk_weights, out, row_bytes, options, op);
  if (l.device.is_cuda())
    return combine_gpu(l, y, dtype, hidden, topk_weights, out, row_bytes, options, op);
  const auto world = static_cast<size_t>(l.world);
  const size_t k = static_cast<size_t>(l.k);
  // out[t] = sum over the live slots of weight x row, in f32, slot by slot; row_of(t * k + j)
  // is the slot's row (null: a dropped slot).
  auto sum_rows = [&](auto&& row_of) {
    std::vector<float> acc(hidden), row_f32(hidden);
    for (size_t t = 0; t < l.tokens; ++t) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (size_t j = 0; j < k; ++j) {
        const uint8_t* row = row_of(t * k + j);
        if (row == nullptr) continue;
        const float w = topk_weights[t * k + j];
        convert_to_f32(dtype, row, row_f32.data(), hidden);
        for (size_t h = 0; h < hidden; ++h) {
          const float prod = w * row_f32[h];  // rounded: no fused multiply-add (-ffp-contract=off)
          acc[h] = acc[h] + prod;
        }
      }
      convert_from_f32(dtype, acc.data(), static_cast<uint8_t*>(out) + t * row_bytes, hidden);
    }
  };
  SymmetricMemory views[2];
  const std::pair<const void*, size_t> bufs[2] = {{y, l.rows * row_bytes}, {nullptr, 0}};
  if (agree_pull(l, bufs, options, views)) {  // NOTE [moe pull dispatch]
    // Collective: every rank agreed to pull, so every rank runs it in this call.
    std::call_once(l.pull_once, [&] { pull_rows(l, options); });
    pull_barrier(l, options);
    sum_rows([&](size_t i) -> const uint8_t* {
      if (l.y_row[i] < 0) return nullptr;
      return static_cast<const uint8_t*>(views[0].ptr(l.y_rank[i])) +
             static_cast<size_t>(l.y_row[i]) * row_bytes;
    });
    pull_barrier(l, options);
    return;
  }
  // Back to the token ranks: rows of each source in layout order.
  Scratch& buf = scratch();
  std::vector<uint8_t>&send = buf.send, &recv = buf.recv;
  std::vector<int64_t> send_bytes(world, 0), recv_bytes(world);
  const auto& plan = combine_plan(l);
  const auto& by_source = plan.by_source;
  for (size_t s = 0; s < world; ++s) {
    for (size_t i : by_source[s]) {
      const auto* row = static_cast<const uint8_t*>(y) + i * row_bytes;
      send.insert(send.end(), row, row + row_bytes);
    }
    send_bytes[s] = static_cast<int64_t>(by_source[s].size() * row_bytes);
  }
  for (size_t r = 0; r < world; ++r)
    recv_bytes[r] = plan.back_count[r] * static_cast<int64_t>(row_bytes);
  const std::vector<int64_t>& slot_row = plan.slot_row;  // (t, j) -> row in recv
  exchange(send, send_bytes, recv, recv_bytes, l.group, options);
  sum_rows([&](size_t i) -> const uint8_t* {
    const int64_t row = slot_row[i];
    return row < 0 ? nullptr : recv.data() + static_cast<size_t>(row) * row_bytes;
  });
}

}  // namespace symmem
