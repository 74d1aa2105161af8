// symmem._C: the ops of symmem/ops.hpp over DLPack-capable arrays.
//
// An argument may be a symmem.SymmetricArray, or any array with __dlpack__ (numpy, torch, CuPy,
// JAX, ...). Memory that lies inside a symmetric allocation of the group is used in place; other
// memory is copied through the group's symmetric workspace by the C++ op. The group is, in order:
// the `group` argument; the group of the first argument that is symmetric memory (a
// SymmetricArray, or a foreign array over one); the default group.

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <deque>
#include <exception>
#include <string>
#include <string_view>

#include "common.hpp"
#include "symmem/backend.hpp"

namespace symmem::py {

using namespace nb::literals;

namespace {

// NOTE [refused ops] (src/cuda/kernels/refuse.cu): a check of this binding that fails on some
// ranks only must not leave the others waiting in the op. An OpCall destroyed before its op was
// called (calling(), which every binding calls right before its op) was left by an exception: it
// refuses the op through symmem::refuse(), so the group's other ranks fail the op naming this
// rank; the exception then goes on to Python. Not std::uncaught_exceptions(): where libstdc++ is
// linked statically into each shared object (the GPU machine's toolchain), an exception thrown
// in libsymmem is counted by libsymmem's copy only, this module's copy said 0, and no binding
// error was ever refused there (the peers waited out their timeout; CI's static build runs this
// case, .ci/run).
class OpCall {
 public:
  OpCall(OpKind kind, nb::handle group, nb::handle stream, nb::handle timeout)
      : kind_(kind), op_(to_string(kind)), group_arg_(group), stream_arg_(stream) {
    opts_.timeout = to_timeout(timeout, op_);
  }
  OpCall(const OpCall&) = delete;
  OpCall& operator=(const OpCall&) = delete;
  ~OpCall() {
    if (called_) return;
    if (!opts_.device && kind_ != OpKind::barrier) return;  // no array was read: which device?
    try {
      const Group g = group();
      const std::string why = error_.empty()
                                  ? std::string(op_) + ": rank " + std::to_string(g.rank()) +
                                        " refused its arguments (the Python binding's checks)"
                                  : error_;
      const std::optional<size_t> count = peers_count(g.world_size());
      nb::gil_scoped_release rel;  // a CPU group's refusal meets the peers in the op
      refuse(kind_, g, opts_, ErrorCode::InvalidArgument, why, count,
             count ? *first_dtype_ : DType::f32);
    } catch (...) {
    }
  }

  // The op is called next: from here on the op itself tells the peers about an error.
  void calling() { called_ = true; }

  // Imports an array argument; every array of one op must be on one device.
  ArrayRef& add(nb::handle obj, const char* arg, bool written) {
    Device d = array_device(obj, op_, arg);
    if (!first_arg_) {
      first_arg_ = arg;
      bool none = false;
      Stream s = to_stream(stream_arg_, op_, &none);
      if (none && d.is_cuda()) s = torch_current_stream(d.index);
      opts_.stream = s;
      opts_.device = d;
    } else if (!(d == *opts_.device)) {
      fail(-1, arg,
           "is on " + to_string(d) + " but '" + first_arg_ + "' is on " + to_string(*opts_.device));
    }
    refs_.push_back(import_array(obj, op_, arg, opts_.stream));
    ArrayRef& r = refs_.back();
    if (refs_.size() == 1) {
      first_numel_ = r.numel;
      first_dtype_ = to_symmem_dtype(r.dtype);
    }
    if (written && r.read_only) fail(-1, arg, "is read-only");
    return r;
  }

  // For ops without array arguments (barrier).
  void set_device(nb::handle device) {
    if (device.is_none()) {
      bool none = false;
      opts_.stream = to_stream(stream_arg_, op_, &none);
      return;
    }
    Group g = group();
    Device d = to_device(device, &g, op_);
    bool none = false;
    Stream s = to_stream(stream_arg_, op_, &none);
    if (none && d.is_cuda()) s = torch_current_stream(d.index);
    opts_.stream = s;
    opts_.device = d;
  }

  const Group& group() {
    if (group_) return *group_;
    if (!group_arg_.is_none()) {
      if (!nb::isinstance<Group>(group_arg_)) fail(-1, "group", "must be a symmem.Group or None");
      group_ = nb::cast<Group>(group_arg_);
      return *group_;
    }
    for (const ArrayRef& r : refs_) {
      if (r.sym) {
        group_ = r.sym->mem.group();
        return *group_;
      }
      if (auto mem = find_allocation(r.data, r.nbytes(), nullptr)) {
        group_ = mem->group();
        return *group_;
      }
    }
    nb::object& d = default_group_slot();
    if (d.is_valid() && !d.is_none()) {
      group_ = nb::cast<Group>(d);
      return *group_;
    }
    fail(-1, "group",
         "is None, no argument lies in symmetric memory and there is no default "
         "group: call symmem.Group.from_env() first or pass group=");
  }

  int rank() { return group().rank(); }

  DType dtype(const ArrayRef& r, const char* arg) {
    auto t = to_symmem_dtype(r.dtype);
    if (!t) {
      std::string names;  // NOTE [dtype table]
      for (size_t i = 0; i < dtype_table_size(); ++i)
        names += std::string(i ? ", " : "") + dtype_table()[i].name;
      fail(rank(), arg, "has dtype " + dtype_name(r.dtype) + "; " + op_ + " takes " + names);
    }
    return *t;
  }

  void same_dtype(const ArrayRef& a, const char* an, const ArrayRef& b, const char* bn) {
    if (a.dtype.code != b.dtype.code || a.dtype.bits != b.dtype.bits)
      fail(rank(), bn,
           "has dtype " + dtype_name(b.dtype) + " but '" + an + "' has " + dtype_name(a.dtype));
  }

  [[noreturn]] void bad(const char* arg, const std::string& what) { fail(rank(), arg, what); }

  OpOptions& opts() { return opts_; }
  const char* op() const { return op_; }

 private:
  // The op's count argument as the peers pass it, judged from this rank's first array (its send
  // buffer, blocked as the op's row says), for a refusal on a GPU group; nullopt when that says
  // nothing.
  std::optional<size_t> peers_count(int world) const {
    using op_table::Blocks;
    if (!first_numel_ || !first_dtype_) return std::nullopt;
    const OpInfo& row = op_info(kind_);
    const size_t n = *first_numel_, w = static_cast<size_t>(std::max(world, 1));
    if (row.send == Blocks::one || row.send == Blocks::root) return n;
    if (row.send == Blocks::world && n % w == 0) return n / w;
    return std::nullopt;
  }

  // Throws InvalidArgument, keeping its message for the refusal (~OpCall).
  [[noreturn]] void fail(int rank, std::string_view arg, const std::string& what) {
    try {
      throw_invalid_argument(op_, rank, arg, what);
    } catch (const Error& e) {
      error_ = e.what();
      throw;
    }
  }

  OpKind kind_;
  const char* op_;
  nb::handle group_arg_;
  nb::handle stream_arg_;
  OpOptions opts_;
  const char* first_arg_ = nullptr;
  std::deque<ArrayRef> refs_;  // deque: references stay valid as arguments are added
  std::optional<Group> group_;
  bool called_ = false;
  std::string error_;
  std::optional<size_t> first_numel_;  // of the first array added (peers_count)
  std::optional<DType> first_dtype_;
};

// The symmetric memory of a put/get target: a SymmetricArray of this rank, or a foreign array
// over a symmetric allocation. *base_offset: the array's byte offset in the returned handle.
SymmetricMemory target_memory(OpCall& c, const ArrayRef& r, const char* arg, size_t* base_offset) {
  if (r.sym) {
    if (!r.sym->is_local())
      c.bad(arg,
            "is a peer view or a signal pad; pass the array of this rank (the op names the "
            "peer)");
    *base_offset = 0;
    return r.sym->mem;
  }
  auto mem = find_allocation(r.data, r.nbytes(), base_offset);
  if (!mem)
    c.bad(arg, "is not in symmetric memory; allocate it with symmem.empty() (or a view of one)");
  return *mem;
}

size_t elements_offset(OpCall& c, int64_t offset, const ArrayRef& r, const char* arg,
                       size_t bytes) {
  if (offset < 0) c.bad("offset", "= " + std::to_string(offset) + " is negative");
  size_t off = static_cast<size_t>(offset) * dtype_bytes(r.dtype);
  if (off > r.nbytes() || bytes > r.nbytes() - off)
    c.bad(arg, "holds " + std::to_string(r.nbytes()) + " bytes; " + std::to_string(bytes) +
                   " bytes at element offset " + std::to_string(offset) + " do not fit");
  return off;
}

// The count argument of an op whose buffers are whole blocks (its row's send/recv columns, NOTE
// [op table]): taken from the buffer of one block (else from `a`, which must divide into
// world_size blocks); the other buffer must hold the blocks its column says.
size_t blocked_count(OpCall& c, OpKind kind, const ArrayRef& a, const char* an, const ArrayRef& b,
                     const char* bn) {
  using op_table::Blocks;
  const OpInfo& row = op_info(kind);
  const auto w = static_cast<size_t>(c.group().world_size());
  const size_t ab = row.send == Blocks::world ? w : 1, bb = row.recv == Blocks::world ? w : 1;
  const bool from_b = bb == 1 && ab != 1;
  const ArrayRef& base = from_b ? b : a;
  const ArrayRef& other = from_b ? a : b;
  const char* base_name = from_b ? bn : an;
  const char* other_name = from_b ? an : bn;
  const size_t base_blocks = from_b ? bb : ab, other_blocks = from_b ? ab : bb;
  if (base.numel % base_blocks != 0)
    c.bad(base_name, "has " + std::to_string(base.numel) +
                         " elements, not a multiple of world_size (" + std::to_string(w) + ")");
  const size_t count = base.numel / base_blocks;
  if (other.numel != count * other_blocks) {
    if (other_blocks == base_blocks)
      c.bad(other_name, "has " + std::to_string(other.numel) + " elements but '" + base_name +
                            "' has " + std::to_string(base.numel));
    c.bad(other_name, "has " + std::to_string(other.numel) + " elements; it needs world_size (" +
                          std::to_string(w) + ") x " + base_name + "'s " +
                          std::to_string(base.numel));
  }
  return count;
}

// symmem.op_table(): the rows of NOTE [op table], for the torch custom ops and for users.
nb::list op_table_list() {
  nb::list out;
  for (int i = 0; i < kOpCount; ++i) {
    const OpInfo& r = op_table_rows()[i];
    nb::dict d;
    d["name"] = r.name;
    d["count_arg"] = r.count_arg;
    d["send"] = to_string(r.send);
    d["recv"] = to_string(r.recv);
    d["in_place"] = to_string(r.in_place);
    d["kind"] = to_string(r.op_kind);
    nb::list ag;
    for (const AgreeFlag& a : kAgreeFlags)
      if (r.must_agree(a.flag)) ag.append(a.arg);
    d["agree"] = ag;
    d["busbw_factor"] =
        nb::cpp_function([b = r.busbw](int world) { return busbw_factor(b, world); });
    d["schema"] = r.py_signature;
    out.append(d);
  }
  return out;
}

}  // namespace

namespace {

// all_reduce, reduce_scatter.
void bind_reductions(nb::module_& m) {
  m.def(
      "all_reduce",
      [](nb::handle x, const std::string& op, const std::string& algo, nb::handle out,
         nb::handle group, nb::handle stream, nb::handle timeout) {
        OpCall c(OpKind::all_reduce, group, stream, timeout);
        ArrayRef& in = c.add(x, "x", out.is_none());  // first: the device of a refusal
        ReduceOp redop = parse_reduce_op(op, "op");
        c.opts().algo = parse_algo(algo, "algo");
        DType t = c.dtype(in, "x");
        if (out.is_none() && in.sym && in.sym->is_local() && group.is_none()) {
          SymmetricMemory mem = in.sym->mem;  // zero copy, in place
          c.calling();
          nb::gil_scoped_release r;
          all_reduce(mem, in.numel, t, redop, c.opts());
          return;
        }
        ArrayRef* o = &in;
        if (!out.is_none()) {
          o = &c.add(out, "out", true);
          c.same_dtype(in, "x", *o, "out");
          blocked_count(c, OpKind::all_reduce, in, "x", *o, "out");
        }
        const Group& g = c.group();
        c.calling();
        nb::gil_scoped_release r;
        all_reduce(in.data, o->data, in.numel, t, redop, g, c.opts());
      },
      "x"_a, "op"_a = "sum", "algo"_a = "auto", nb::kw_only(), "out"_a.none() = nb::none(),
      "group"_a.none() = nb::none(), "stream"_a.none() = nb::none(),
      "timeout"_a.none() = nb::none(),
      nb::sig("def all_reduce(x: object, op: str = 'sum', algo: str = 'auto', *, "
              "out: object = None, group: Group | None = None, stream: object = None, "
              "timeout: float | datetime.timedelta | None = None) -> None"),
      "Reduces x over the group (op: sum, avg, min, max; algo: auto, one_shot, two_shot), in "
      "place, or into out when given. Every rank gets bitwise identical results.");

  m.def(
      "reduce_scatter",
      [](nb::handle send, nb::handle recv, const std::string& op, nb::handle group,
         nb::handle stream, nb::handle timeout) {
        OpCall c(OpKind::reduce_scatter, group, stream, timeout);
        ArrayRef& s = c.add(send, "send", false);
        ArrayRef& r = c.add(recv, "recv", true);
        ReduceOp redop = parse_reduce_op(op, "op");
        DType t = c.dtype(s, "send");
        c.same_dtype(s, "send", r, "recv");
        const Group& g = c.group();
        size_t count = blocked_count(c, OpKind::reduce_scatter, s, "send", r, "recv");
        c.calling();
        nb::gil_scoped_release rel;
        reduce_scatter(s.data, r.data, count, t, redop, g, c.opts());
      },
      "send"_a, "recv"_a, "op"_a = "sum", nb::kw_only(), "group"_a.none() = nb::none(),
      "stream"_a.none() = nb::none(), "timeout"_a.none() = nb::none(),
      nb::sig("def reduce_scatter(send: object, recv: object, op: str = 'sum', *, "
              "group: Group | None = None, stream: object = None, "
              "timeout: float | datetime.timedelta | None = None) -> None"),
      "send holds world_size blocks of recv.size elements; rank r receives the reduction of "
      "block r.");
}

// all_gather, all_to_all, all_to_all_v, broadcast.
void bind_data_movement(nb::module_& m) {
  m.def(
      "all_gather",
      [](nb::handle send, nb::handle recv, nb::handle group, nb::handle stream,
         nb::handle timeout) {
        OpCall c(OpKind::all_gather, group, stream, timeout);
        ArrayRef& s = c.add(send, "send", false);
        ArrayRef& r = c.add(recv, "recv", true);
        DType t = c.dtype(s, "send");
        c.same_dtype(s, "send", r, "recv");
        const Group& g = c.group();
        size_t count = blocked_count(c, OpKind::all_gather, s, "send", r, "recv");
        c.calling();
        nb::gil_scoped_release rel;
        all_gather(s.data, r.data, count, t, g, c.opts());
      },
      "send"_a, "recv"_a, nb::kw_only(), "group"_a.none() = nb::none(),
      "stream"_a.none() = nb::none(), "timeout"_a.none() = nb::none(),
      nb::sig("def all_gather(send: object, recv: object, *, group: Group | None = None, "
              "stream: object = None, timeout: float | datetime.timedelta | None = None) -> None"),
      "recv holds world_size blocks of send.size elements; block r is rank r's send.");

  m.def(
      "all_to_all",
      [](nb::handle send, nb::handle recv, nb::handle group, nb::handle stream,
         nb::handle timeout) {
        OpCall c(OpKind::all_to_all, group, stream, timeout);
        ArrayRef& s = c.add(send, "send", false);
        ArrayRef& r = c.add(recv, "recv", true);
        DType t = c.dtype(s, "send");
        c.same_dtype(s, "send", r, "recv");
        const Group& g = c.group();
        size_t count = blocked_count(c, OpKind::all_to_all, s, "send", r, "recv");
        c.calling();
        nb::gil_scoped_release rel;
        all_to_all(s.data, r.data, count, t, g, c.opts());
      },
      "send"_a, "recv"_a, nb::kw_only(), "group"_a.none() = nb::none(),
      "stream"_a.none() = nb::none(), "timeout"_a.none() = nb::none(),
      nb::sig("def all_to_all(send: object, recv: object, *, group: Group | None = None, "
              "stream: object = None, timeout: float | datetime.timedelta | None = None) -> None"),
      "Block p of send (send.size / world_size elements) goes to peer p and lands at block r "
      "(this rank) of its recv.");

  m.def(
      "all_to_all_v",
      [](nb::handle send, nb::handle send_counts, nb::handle recv, nb::handle recv_counts,
         nb::handle recv_offsets, bool recv_counts_known, nb::handle group, nb::handle stream,
         nb::handle timeout) {
        OpCall c(OpKind::all_to_all_v, group, stream, timeout);
        ArrayRef& s = c.add(send, "send", false);
        ArrayRef& sc = c.add(send_counts, "send_counts", false);
        ArrayRef& r = c.add(recv, "recv", true);
        ArrayRef& rc = c.add(recv_counts, "recv_counts", !recv_counts_known);
        ArrayRef& ro = c.add(recv_offsets, "recv_offsets", true);
        DType t = c.dtype(s, "send");
        c.same_dtype(s, "send", r, "recv");
        const Group& g = c.group();
        auto w = static_cast<size_t>(g.world_size());
        for (auto [ref, name] : {std::pair<ArrayRef*, const char*>{&sc, "send_counts"},
                                 {&rc, "recv_counts"},
                                 {&ro, "recv_offsets"}}) {
          if (ref->dtype.code != dl::kInt || ref->dtype.bits != 64)
            c.bad(name, "has dtype " + dtype_name(ref->dtype) + "; counts and offsets are int64");
          if (ref->numel != w)
            c.bad(name, "has " + std::to_string(ref->numel) + " elements; it needs world_size (" +
                            std::to_string(w) + ")");
        }
        if (!c.opts().device->is_cuda()) {  // host memory: check the counts here
          auto check_sum = [&](const ArrayRef& counts, const char* name, size_t limit,
                               const char* of) {
            const auto* p = static_cast<const int64_t*>(counts.data);
            int64_t sum = 0;
            for (size_t i = 0; i < w; ++i) {
              if (p[i] < 0)
                c.bad(name,
                      "[" + std::to_string(i) + "] = " + std::to_string(p[i]) + " is negative");
              sum += p[i];
            }
            if (static_cast<size_t>(sum) > limit)
              c.bad(name, "sums to " + std::to_string(sum) + " elements but '" + of + "' holds " +
                              std::to_string(limit));
          };
          check_sum(sc, "send_counts", s.numel, "send");
          if (recv_counts_known) check_sum(rc, "recv_counts", r.numel, "recv");
        }
        AllToAllVOptions o;
        static_cast<OpOptions&>(o) = c.opts();
        o.recv_counts_known = recv_counts_known;
        c.calling();
        nb::gil_scoped_release rel;
        all_to_all_v(s.data, static_cast<const int64_t*>(sc.data), r.data,
                     static_cast<int64_t*>(rc.data), static_cast<int64_t*>(ro.data), r.numel, t, g,
                     o);
      },
      "send"_a, "send_counts"_a, "recv"_a, "recv_counts"_a, "recv_offsets"_a, nb::kw_only(),
      "recv_counts_known"_a = false, "group"_a.none() = nb::none(), "stream"_a.none() = nb::none(),
      "timeout"_a.none() = nb::none(),
      nb::sig("def all_to_all_v(send: object, send_counts: object, recv: object, "
              "recv_counts: object, recv_offsets: object, *, recv_counts_known: bool = False, "
              "group: Group | None = None, stream: object = None, "
              "timeout: float | datetime.timedelta | None = None) -> None"),
      "send_counts[p] elements of send (packed in peer order) go to peer p. Counts/offsets are "
      "int64 arrays of world_size on the data's device. MoE style (default): recv_counts and "
      "recv_offsets are outputs; recv.size is the capacity. recv_counts_known=True: recv_counts "
      "is an input checked against the senders.");

  m.def(
      "broadcast",
      [](nb::handle x, int root, nb::handle out, nb::handle group, nb::handle stream,
         nb::handle timeout) {
        OpCall c(OpKind::broadcast, group, stream, timeout);
        ArrayRef& s = c.add(x, "x", out.is_none());
        ArrayRef* r = &s;
        DType t = c.dtype(s, "x");
        if (!out.is_none()) {
          r = &c.add(out, "out", true);
          c.same_dtype(s, "x", *r, "out");
          blocked_count(c, OpKind::broadcast, s, "x", *r, "out");
        }
        const Group& g = c.group();
        c.calling();
        nb::gil_scoped_release rel;
        broadcast(s.data, r->data, s.numel, t, root, g, c.opts());
      },
      "x"_a, "root"_a = 0, nb::kw_only(), "out"_a.none() = nb::none(),
      "group"_a.none() = nb::none(), "stream"_a.none() = nb::none(),
      "timeout"_a.none() = nb::none(),
      nb::sig("def broadcast(x: object, root: int = 0, *, out: object = None, "
              "group: Group | None = None, stream: object = None, "
              "timeout: float | datetime.timedelta | None = None) -> None"),
      "root's x is copied into every rank's x (or out when given; x is read on root only).");
}

// put (the symmetric target is `first`, the local array `second`) and get (the reverse): the
// target's memory, the byte offset in it, and the options.
template <OpKind kind>
void one_sided(nb::handle first, nb::handle second, int peer, int64_t offset, bool signal,
               int channel, nb::handle stream, nb::handle timeout) {
  constexpr bool is_put = kind == OpKind::put;
  const char* target_arg = is_put ? "dst" : "src";
  const char* local_arg = is_put ? "src" : "dst";
  OpCall c(kind, nb::none(), stream, timeout);
  ArrayRef& target = c.add(first, target_arg, false);
  ArrayRef& local = c.add(second, local_arg, !is_put);
  size_t base = 0;
  SymmetricMemory mem = target_memory(c, target, target_arg, &base);
  size_t off = elements_offset(c, offset, target, target_arg, local.nbytes());
  P2POptions o;
  static_cast<OpOptions&>(o) = c.opts();
  o.signal = signal;
  o.channel = channel;
  c.calling();
  nb::gil_scoped_release rel;
  if constexpr (is_put) {
    put(mem, base + off, local.data, local.nbytes(), peer, o);
  } else {
    get(mem, base + off, local.data, local.nbytes(), peer, o);
  }
}

// put, get, barrier.
void bind_one_sided(nb::module_& m) {
  m.def("put", &one_sided<OpKind::put>, "dst"_a, "src"_a, "peer"_a, nb::kw_only(), "offset"_a = 0,
        "signal"_a = false, "channel"_a = 0, "stream"_a.none() = nb::none(),
        "timeout"_a.none() = nb::none(),
        nb::sig("def put(dst: object, src: object, peer: int, *, offset: int = 0, "
                "signal: bool = False, channel: int = 0, stream: object = None, "
                "timeout: float | datetime.timedelta | None = None) -> None"),
        "Copies src into peer's copy of the symmetric array dst, at element `offset` of dst. "
        "signal=True raises slot (channel, this rank) of peer's pad once the data is visible "
        "(the peer consumes it with dst.wait_signal(this rank, channel)).");

  m.def("get", &one_sided<OpKind::get>, "src"_a, "dst"_a, "peer"_a, nb::kw_only(), "offset"_a = 0,
        "signal"_a = false, "channel"_a = 0, "stream"_a.none() = nb::none(),
        "timeout"_a.none() = nb::none(),
        nb::sig("def get(src: object, dst: object, peer: int, *, offset: int = 0, "
                "signal: bool = False, channel: int = 0, stream: object = None, "
                "timeout: float | datetime.timedelta | None = None) -> None"),
        "Copies dst.nbytes bytes from peer's copy of the symmetric array src (at element "
        "`offset`) into dst.");

  m.def(
      "barrier",
      [](nb::handle group, nb::handle device, nb::handle stream, nb::handle timeout) {
        OpCall c(OpKind::barrier, group, stream, timeout);
        c.set_device(device);
        const Group& g = c.group();
        c.calling();
        nb::gil_scoped_release rel;
        barrier(g, c.opts());
      },
      nb::kw_only(), "group"_a.none() = nb::none(), "device"_a.none() = nb::none(),
      "stream"_a.none() = nb::none(), "timeout"_a.none() = nb::none(),
      nb::sig("def barrier(*, group: Group | None = None, device: object = None, "
              "stream: object = None, timeout: float | datetime.timedelta | None = None) -> None"),
      "Barrier over the group's workspace signal pads (device: that of the group's latest "
      "allocation unless given).");

  m.def(
      "refuse",
      [](const std::string& op, nb::handle group, nb::handle device, nb::handle stream,
         nb::handle timeout, const std::string& message, std::optional<int64_t> count,
         std::optional<std::string> dtype) {
        const OpInfo* row = find_op(op);
        if (row == nullptr)
          throw_invalid_argument("refuse", -1, "op", "'" + op + "' is not an op of the op table");
        if (count && *count < 0)
          throw_invalid_argument("refuse", -1, "count", "= " + std::to_string(*count) + " < 0");
        // A dtype that is no name of the table leaves the count unknown (the refusal goes on).
        const DTypeInfo* t = dtype ? find_dtype(std::string_view(*dtype)) : nullptr;
        OpCall c(row->kind, group, stream, timeout);
        c.set_device(device);
        const Group& g = c.group();
        c.calling();  // the refusal below is the op's
        std::optional<size_t> n;
        if (count && t != nullptr) n = static_cast<size_t>(*count);
        nb::gil_scoped_release rel;
        refuse(row->kind, g, c.opts(), ErrorCode::InvalidArgument, message, n,
               t != nullptr ? t->dtype : DType::f32);
      },
      "op"_a, nb::kw_only(), "group"_a.none() = nb::none(), "device"_a.none() = nb::none(),
      "stream"_a.none() = nb::none(), "timeout"_a.none() = nb::none(), "message"_a = "",
      "count"_a.none() = nb::none(), "dtype"_a.none() = nb::none(),
      nb::sig("def refuse(op: str, *, group: Group | None = None, device: object = None, "
              "stream: object = None, timeout: float | datetime.timedelta | None = None, "
              "message: str = '', count: int | None = None, dtype: str | None = None) -> None"),
      "For layers over these ops with checks of their own (NOTE [refused ops]): when such a "
      "check fails on some ranks only, call refuse() with the op's group, device and stream "
      "instead of skipping the op, then raise; the other ranks then fail that op with "
      "InvalidArgument naming this rank (CPU: at the call; GPU: at the next synchronising call "
      "or check_async_error()) instead of waiting until their timeout. count and dtype (a name "
      "such as 'float32'): the op's count argument and dtype as the peers pass them, where known "
      "(on the GPU they say whether the peers' op fits the group's workspace; without them, or "
      "with a dtype name symmem does not know, it is taken to fit). "
      "Never raises for the refusal itself.");
}

}  // namespace

void bind_ops(nb::module_& m) {
  bind_reductions(m);
  bind_data_movement(m);
  bind_one_sided(m);
  m.def(
      "serves",
      [](const std::string& backend, const std::string& op, nb::handle dtype, nb::handle device) {
        const OpInfo* row = find_op(op);
        if (row == nullptr)
          throw_invalid_argument("serves", -1, "op", "'" + op + "' is not an op of the op table");
        const std::optional<DType> t = to_symmem_dtype(to_dtype(dtype, "serves"));
        if (!t) return false;
        const Device d = to_device(device, nullptr, "serves");
        return get_backend(backend)->supports(row->kind, *t, d.type);
      },
      "backend"_a, "op"_a, "dtype"_a, "device"_a = "cpu",
      nb::sig("def serves(backend: str, op: str, dtype: object, device: str | int | object = "
              "'cpu') -> bool"),
      "Whether `backend`'s op table serves `op` on `dtype` for buffers on `device` (its type "
      "counts). Loads the backend's plugin (BackendUnavailable where it cannot load).");
  m.def("op_table", &op_table_list, nb::sig("def op_table() -> list[dict]"),
        "The ops, one dict per row of the library's op table: name, count_arg, send and recv "
        "(blocks of count per buffer: none, one, world, root, var), in_place (no, same, "
        "recv_block, send_block), kind (reduction, collective, one_sided, sync), agree (the "
        "arguments every rank must pass alike), busbw_factor(world) and schema (the torch "
        "custom op's arguments).");
}

}  // namespace symmem::py
