// symmem._C: MoE dispatch and combine (symmem/moe.hpp) over DLPack-capable arrays.

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>

#include "common.hpp"
#include "symmem/moe.hpp"

namespace symmem::py {

using namespace nb::literals;

namespace {

// An imported argument with its symmem dtype and device checked.
struct Arg {
  ArrayRef ref;
  DType dtype;
};

// `stream`: the op's stream, handed to __dlpack__ of CUDA arrays (NOTE in common.hpp).
Arg take(nb::handle obj, const char* op, const char* arg, int rank, Stream stream = nullptr) {
  Arg a{import_array(obj, op, arg, stream), DType::u8};
  auto t = to_symmem_dtype(a.ref.dtype);
  if (!t) throw_invalid_argument(op, rank, arg, "has dtype " + dtype_name(a.ref.dtype));
  a.dtype = *t;
  return a;
}

void want_dtype(const Arg& a, DType t, const char* op, const char* arg, int rank) {
  if (a.dtype != t)
    throw_invalid_argument(
        op, rank, arg,
        std::string("has dtype ") + dtype_info(a.dtype).name + "; it takes " + dtype_info(t).name);
}

void want_numel(const Arg& a, size_t n, const char* op, const char* arg, int rank,
                const std::string& why) {
  if (a.ref.numel != n)
    throw_invalid_argument(op, rank, arg,
                           "has " + std::to_string(a.ref.numel) + " elements; it takes " +
                               std::to_string(n) + " (" + why + ")");
}

// The hidden size of a [rows, hidden] (or [..., hidden]) argument.
size_t hidden_of(const Arg& a, const char* op, const char* arg, int rank) {
  if (a.ref.shape.size() < 2)
    throw_invalid_argument(op, rank, arg,
                           "must have 2 or more dimensions ([tokens, hidden]); it has " +
                               std::to_string(a.ref.shape.size()));
  return static_cast<size_t>(a.ref.shape.back());
}

// The stream of an op on `d`: the `stream` argument, else (None) torch's current stream on a CUDA
// device (the legacy default stream without torch).
Stream op_stream(nb::handle stream, Device d, const char* op) {
  bool none = false;
  Stream s = to_stream(stream, op, &none);
  if (none && d.is_cuda()) s = torch_current_stream(d.index);
  return s;
}

// The device and stream of an op whose data arguments all live where `first` does.
struct Where {
  Device device;
  Stream stream = nullptr;
};
Where where_of(nb::handle first, nb::handle stream, const char* op, const char* arg) {
  Where w;
  w.device = array_device(first, op, arg);
  w.stream = op_stream(stream, w.device, op);
  return w;
}
void same_place(const Arg& a, const Where& w, const char* op, const char* arg, int rank) {
  if (!(a.ref.device == w.device))
    throw_invalid_argument(op, rank, arg,
                           "is on " + to_string(a.ref.device) + " but the op's data is on " +
                               to_string(w.device) + " (every array of one op on one device)");
}
void on_host(const Arg& a, const char* op, const char* arg, int rank) {
  if (a.ref.device.is_cuda())
    throw_invalid_argument(op, rank, arg,
                           "is on " + to_string(a.ref.device) +
                               "; it is read on the host (pass it in CPU memory, e.g. .cpu())");
}

OpOptions options(const Where& w, nb::handle timeout, const char* op) {
  OpOptions o;
  o.timeout = to_timeout(timeout, op);
  o.device = w.device;
  o.stream = w.stream;
  return o;
}

// A layout's topk_idx argument and options (mode, max_tokens).
Arg topk_arg(nb::handle topk_idx, const char* op, int rank, Stream stream) {
  Arg idx = take(topk_idx, op, "topk_idx", rank, stream);
  if (idx.ref.shape.size() != 2)
    throw_invalid_argument(
        op, rank, "topk_idx",
        "must be [tokens, topk]; it has " + std::to_string(idx.ref.shape.size()) + " dimensions");
  return idx;
}

// The layout's device: `device`, else topk_idx's.
Where layout_where(nb::handle topk_idx, nb::handle device, nb::handle stream, const Group& g,
                   const char* op) {
  Where w;
  w.device = device.is_none() ? array_device(topk_idx, op, "topk_idx") : to_device(device, &g, op);
  w.stream = op_stream(stream, w.device, op);
  return w;
}

MoeOptions moe_options(const Where& w, const std::string& mode, size_t max_tokens,
                       nb::handle timeout, const char* op, int rank, bool device_layout = false) {
  MoeOptions o;
  static_cast<OpOptions&>(o) = options(w, timeout, op);
  o.device_layout = device_layout;
  if (mode == "low_latency" || mode == "ll")
    o.mode = MoeMode::low_latency;
  else if (mode != "normal")
    throw_invalid_argument(op, rank, "mode",
                           "= '" + mode + "'; it takes 'normal' or 'low_latency'");
  o.max_tokens = max_tokens;
  return o;
}

std::string scales_shape(size_t rows, size_t hidden) {
  return "[" + std::to_string(rows) + ", " + std::to_string(hidden / 128) + "] float32 scales";
}

}  // namespace

void bind_moe(nb::module_& m) {
  nb::class_<MoeLayout>(m, "MoeLayout",
                        "Where each token of a MoE dispatch goes and where each received row "
                        "came from (symmem.moe_layout; docs/moe.md).")
      .def_prop_ro(
          "mode",
          [](const MoeLayout& l) { return l.mode() == MoeMode::normal ? "normal" : "low_latency"; })
      .def_prop_ro("group", &MoeLayout::group)
      .def_prop_ro("num_tokens", &MoeLayout::num_tokens)
      .def_prop_ro("topk", &MoeLayout::topk)
      .def_prop_ro("num_experts", &MoeLayout::num_experts)
      .def_prop_ro("num_local_experts", &MoeLayout::num_local_experts)
      .def_prop_ro("max_tokens", &MoeLayout::max_tokens)
      .def_prop_ro("recv_rows", &MoeLayout::recv_rows, "Rows of recv_x (and of y).")
      .def_prop_ro("expert_counts", &MoeLayout::expert_counts, "Rows per local expert.")
      .def_prop_ro(
          "row_source",
          [](const MoeLayout& l) {
            const auto& s = l.row_source();
            std::vector<nb::tuple> out;
            out.reserve(s.size() / 3);
            for (size_t i = 0; i + 2 < s.size(); i += 3)
              out.push_back(nb::make_tuple(s[i], s[i + 1], s[i + 2]));
            return out;
          },
          nb::sig("def row_source(self) -> list[tuple[int, int, int]]"),
          "(rank, token, slot) of each row of recv_x; (-1, -1, -1) for the unwritten rows of "
          "low_latency.")
      .def(
          "row_source_bytes",
          [](const MoeLayout& l) {
            const auto& s = l.row_source();
            return nb::bytes(reinterpret_cast<const char*>(s.data()), s.size() * sizeof(s[0]));
          },
          "row_source as the bytes of an int64 [rows, 3] array in native byte order: what "
          "torch.frombuffer or numpy.frombuffer read without a Python object per row.")
      .def_prop_ro("device_layout", &MoeLayout::device_layout,
                   "Routed on the device (moe_layout(device_layout=True)): expert_counts and "
                   "row_source are then on the device or absent.")
      .def_prop_ro(
          "expert_counts_ptr",
          [](const MoeLayout& l) { return reinterpret_cast<uintptr_t>(l.expert_counts_device()); },
          "A device layout's expert counts: the address of int64 [num_local_experts] in device "
          "memory, written by each dispatch on its stream (0 for other layouts).")
      .def("expert_offset", &MoeLayout::expert_offset, "e"_a,
           "The row of recv_x where local expert e begins.")
      .def(
          "recv_shape",
          [](const MoeLayout& l, size_t hidden) {
            if (l.mode() == MoeMode::low_latency)
              return nb::make_tuple(l.num_local_experts(),
                                    l.max_tokens() * static_cast<size_t>(l.group().world_size()),
                                    hidden);
            return nb::make_tuple(l.recv_rows(), hidden);
          },
          "hidden"_a,
          "Shape of recv_x: (recv_rows, hidden), or (local experts, world_size * max_tokens, "
          "hidden) in low_latency mode.");

  m.def(
      "moe_layout",
      [](nb::handle topk_idx, int num_experts, const std::string& mode, size_t max_tokens,
         nb::handle group, nb::handle timeout, nb::handle device, nb::handle stream,
         bool device_layout) {
        const char* op = "moe_layout";
        Group g = resolve_alloc_group(group, op);
        Where w = layout_where(topk_idx, device, stream, g, op);
        Arg idx = topk_arg(topk_idx, op, g.rank(), w.stream);
        MoeOptions o = moe_options(w, mode, max_tokens, timeout, op, g.rank(), device_layout);
        nb::gil_scoped_release r;
        return moe_layout(idx.ref.data, idx.dtype, static_cast<size_t>(idx.ref.shape[0]),
                          static_cast<int>(idx.ref.shape[1]), num_experts, g, o);
      },
      "topk_idx"_a, "num_experts"_a, nb::kw_only(), "mode"_a = "normal", "max_tokens"_a = 0,
      "group"_a.none() = nb::none(), "timeout"_a.none() = nb::none(),
      "device"_a.none() = nb::none(), "stream"_a.none() = nb::none(), "device_layout"_a = false,
      nb::sig("def moe_layout(topk_idx: object, num_experts: int, *, mode: str = 'normal', "
              "max_tokens: int = 0, group: Group | None = None, "
              "timeout: float | datetime.timedelta | None = None, device: object = None, "
              "stream: object = None, device_layout: bool = False) -> MoeLayout"),
      "Collective: exchanges which tokens (topk_idx [tokens, topk] int32/int64, -1 = dropped) go "
      "to which of num_experts experts (split evenly over the ranks). mode 'low_latency' gives "
      "every local expert world_size * max_tokens rows. device: where dispatch/combine's data "
      "will be (default: topk_idx's device; a GPU layout reads a host or device topk_idx). "
      "stream (CUDA): None is torch's current stream; a GPU layout synchronises it once to read "
      "topk_idx. device_layout=True (low_latency on a GPU, topk_idx on the GPU): nothing is read "
      "now; every dispatch routes on the device with what topk_idx holds then (CUDA graphs).");

  m.def(
      "moe_layout_restore",
      [](nb::handle topk_idx, int num_experts, nb::handle row_source, nb::handle expert_counts,
         const std::string& mode, size_t max_tokens, nb::handle group, nb::handle device,
         nb::handle stream) {
        const char* op = "moe_layout_restore";
        Group g = resolve_alloc_group(group, op);
        Where w = layout_where(topk_idx, device, stream, g, op);
        Arg idx = topk_arg(topk_idx, op, g.rank(), w.stream);
        Arg rows = take(row_source, op, "row_source", g.rank());
        Arg counts = take(expert_counts, op, "expert_counts", g.rank());
        on_host(rows, op, "row_source", g.rank());
        on_host(counts, op, "expert_counts", g.rank());
        want_dtype(rows, DType::i64, op, "row_source", g.rank());
        want_dtype(counts, DType::i64, op, "expert_counts", g.rank());
        if (rows.ref.numel % 3 != 0)
          throw_invalid_argument(op, g.rank(), "row_source", "must be [rows, 3]");
        if (num_experts > 0 && g.world_size() > 0)
          want_numel(counts, static_cast<size_t>(num_experts / g.world_size()), op, "expert_counts",
                     g.rank(), "one per local expert");
        MoeOptions o = moe_options(w, mode, max_tokens, nb::none(), op, g.rank());
        nb::gil_scoped_release r;
        return moe_layout_restore(idx.ref.data, idx.dtype, static_cast<size_t>(idx.ref.shape[0]),
                                  static_cast<int>(idx.ref.shape[1]), num_experts,
                                  static_cast<const int64_t*>(rows.ref.data), rows.ref.numel / 3,
                                  static_cast<const int64_t*>(counts.ref.data), g, o);
      },
      "topk_idx"_a, "num_experts"_a, "row_source"_a, "expert_counts"_a, nb::kw_only(),
      "mode"_a = "normal", "max_tokens"_a = 0, "group"_a.none() = nb::none(),
      "device"_a.none() = nb::none(), "stream"_a.none() = nb::none(),
      nb::sig("def moe_layout_restore(topk_idx: object, num_experts: int, row_source: object, "
              "expert_counts: object, *, mode: str = 'normal', max_tokens: int = 0, "
              "group: Group | None = None, device: object = None, stream: object = None) "
              "-> MoeLayout"),
      "The layout moe_layout() made, rebuilt from the same topk_idx and the layout's row_source "
      "([rows, 3] int64) and expert_counts (int64), both in CPU memory. Without communication "
      "on CPU memory; a GPU layout (device, default topk_idx's) agrees on its exchange buffers' "
      "size in one small collective.");

  m.def(
      "moe_dispatch",
      [](nb::handle x, const MoeLayout& layout, nb::handle recv_x, nb::handle x_scales,
         nb::handle recv_scales, nb::handle timeout, nb::handle stream) {
        const char* op = "moe_dispatch";
        const int rank = layout.valid() ? layout.group().rank() : -1;
        if (!layout.valid()) throw_invalid_argument(op, rank, "layout", "is not a layout");
        Where w = where_of(x, stream, op, "x");
        Arg xa = take(x, op, "x", rank, w.stream);
        Arg ra = take(recv_x, op, "recv_x", rank, w.stream);
        same_place(ra, w, op, "recv_x", rank);
        size_t hidden =
            layout.num_tokens() ? hidden_of(xa, op, "x", rank) : hidden_of(ra, op, "recv_x", rank);
        want_numel(xa, layout.num_tokens() * hidden, op, "x", rank, "the layout's tokens x hidden");
        want_dtype(ra, xa.dtype, op, "recv_x", rank);
        want_numel(ra, layout.recv_rows() * hidden, op, "recv_x", rank,
                   "the layout's recv_rows x hidden");
        std::optional<Arg> xs, rs;
        if (!x_scales.is_none()) {
          xs = take(x_scales, op, "x_scales", rank, w.stream);
          same_place(*xs, w, op, "x_scales", rank);
          want_dtype(*xs, DType::f32, op, "x_scales", rank);
          want_numel(*xs, layout.num_tokens() * (hidden / 128), op, "x_scales", rank,
                     scales_shape(layout.num_tokens(), hidden));
        }
        if (!recv_scales.is_none()) {
          rs = take(recv_scales, op, "recv_scales", rank, w.stream);
          same_place(*rs, w, op, "recv_scales", rank);
          want_dtype(*rs, DType::f32, op, "recv_scales", rank);
          want_numel(*rs, layout.recv_rows() * (hidden / 128), op, "recv_scales", rank,
                     scales_shape(layout.recv_rows(), hidden));
        }
        OpOptions o = options(w, timeout, op);
        nb::gil_scoped_release r;
        moe_dispatch(layout, xa.ref.data, xa.dtype, hidden,
                     xs ? static_cast<const float*>(xs->ref.data) : nullptr, ra.ref.data,
                     rs ? static_cast<float*>(rs->ref.data) : nullptr, o);
      },
      "x"_a, "layout"_a, "recv_x"_a, nb::kw_only(), "x_scales"_a.none() = nb::none(),
      "recv_scales"_a.none() = nb::none(), "timeout"_a.none() = nb::none(),
      "stream"_a.none() = nb::none(),
      nb::sig("def moe_dispatch(x: object, layout: MoeLayout, recv_x: object, *, "
              "x_scales: object = None, recv_scales: object = None, "
              "timeout: float | datetime.timedelta | None = None, stream: object = None) -> None"),
      "Collective: sends the tokens x [tokens, hidden] to their experts' ranks; recv_x "
      "(layout.recv_shape(hidden)) gets them grouped by local expert. fp8 x carries x_scales "
      "[tokens, hidden/128] float32 into recv_scales. Every array on the layout's device; on a GPU "
      "the op is enqueued on `stream` (None: torch's current stream). With x (and x_scales) in "
      "symmetric memory of the group on every rank (symmem.empty), the expert ranks read the "
      "rows from it directly instead of exchanging packs (docs/moe.md).");

  m.def(
      "moe_combine",
      [](nb::handle y, const MoeLayout& layout, nb::handle topk_weights, nb::handle out,
         nb::handle timeout, nb::handle stream) {
        const char* op = "moe_combine";
        const int rank = layout.valid() ? layout.group().rank() : -1;
        if (!layout.valid()) throw_invalid_argument(op, rank, "layout", "is not a layout");
        Where w = where_of(y, stream, op, "y");
        Arg ya = take(y, op, "y", rank, w.stream);
        Arg wa = take(topk_weights, op, "topk_weights", rank, w.stream);
        Arg oa = take(out, op, "out", rank, w.stream);
        same_place(wa, w, op, "topk_weights", rank);
        same_place(oa, w, op, "out", rank);
        size_t hidden = hidden_of(oa, op, "out", rank);
        want_numel(ya, layout.recv_rows() * hidden, op, "y", rank,
                   "the layout's recv_rows x hidden");
        want_dtype(wa, DType::f32, op, "topk_weights", rank);
        want_numel(wa, layout.num_tokens() * static_cast<size_t>(layout.topk()), op, "topk_weights",
                   rank, "the layout's tokens x topk");
        want_dtype(oa, ya.dtype, op, "out", rank);
        want_numel(oa, layout.num_tokens() * hidden, op, "out", rank,
                   "the layout's tokens x hidden");
        OpOptions o = options(w, timeout, op);
        nb::gil_scoped_release r;
        moe_combine(layout, ya.ref.data, ya.dtype, hidden, static_cast<const float*>(wa.ref.data),
                    oa.ref.data, o);
      },
      "y"_a, "layout"_a, "topk_weights"_a, "out"_a, nb::kw_only(), "timeout"_a.none() = nb::none(),
      "stream"_a.none() = nb::none(),
      nb::sig("def moe_combine(y: object, layout: MoeLayout, topk_weights: object, out: object, "
              "*, timeout: float | datetime.timedelta | None = None, stream: object = None) "
              "-> None"),
      "Collective: brings the experts' outputs y (recv_x's layout) back and writes out "
      "[tokens, hidden] = the sum over each token's top-k slots of topk_weights * y, in f32, "
      "slot by slot. With y in symmetric memory of the group on every rank (symmem.empty), the "
      "token ranks read the rows from it directly (docs/moe.md).");
}

}  // namespace symmem::py
