// symmem._C: SymmetricMemory, SymmetricArray (DLPack producer), allocate/empty, the allocation
// registry and DLPack import for op arguments.

#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <Python.h>

#include <map>
#include <mutex>

#include "common.hpp"

namespace symmem::py {

using namespace nb::literals;

// ---- Array ------------------------------------------------------------------------------------
void* Array::data() const {
  void* p = pad ? static_cast<void*>(mem.signal_pad(buffer_rank)) : mem.ptr(buffer_rank);
  if (pad && p != nullptr) p = static_cast<char*>(p) + pad_offset;
  if (!p && numel() > 0)
    throw_error(ErrorCode::Unsupported, "SymmetricArray", mem.rank(),
                std::string(pad ? "the signal pad" : "the buffer") + " of rank " +
                    std::to_string(buffer_rank) + " is not directly addressable from this rank (" +
                    mem.backend() + " backend)");
  return p;
}

size_t Array::numel() const {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

// ---- registry ---------------------------------------------------------------------------------
namespace {

struct RegEntry {
  size_t bytes;
  std::weak_ptr<SymmetricMemory::Impl> impl;
};
std::mutex g_reg_mu;
std::map<uintptr_t, RegEntry> g_reg;  // base of this rank's buffer -> allocation

}  // namespace

void register_allocation(const SymmetricMemory& mem) {
  auto base = reinterpret_cast<uintptr_t>(mem.ptr(mem.rank()));
  if (!base) return;
  std::lock_guard<std::mutex> lock(g_reg_mu);
  for (auto it = g_reg.begin(); it != g_reg.end();) {  // drop expired and overlapping entries
    bool overlap = it->first < base + mem.size() && base < it->first + it->second.bytes;
    it = (it->second.impl.expired() || overlap) ? g_reg.erase(it) : std::next(it);
  }
  g_reg[base] = RegEntry{mem.size(), mem.impl()};
}

std::optional<SymmetricMemory> find_allocation(const void* p, size_t bytes, size_t* offset) {
  auto a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(g_reg_mu);
  auto it = g_reg.upper_bound(a);
  if (it == g_reg.begin()) return std::nullopt;
  --it;
  if (a + bytes > it->first + it->second.bytes) return std::nullopt;
  auto impl = it->second.impl.lock();
  if (!impl) return std::nullopt;
  if (offset) *offset = a - it->first;
  return SymmetricMemory(impl);
}

// ---- DLPack export ----------------------------------------------------------------------------
namespace {

// Owns what a DLPack consumer sees; the consumer's deleter frees it. Holding `keep` (a handle of
// the allocation) keeps the symmetric memory alive as long as any consumer lives; `mapping`
// keeps it mapped after free() too, where its release is local (NOTE [free with live views] in
// symmem/memory.hpp). The deleter does not need the GIL.
struct ExportCtx {
  SymmetricMemory keep;
  std::shared_ptr<symmem::BackendMemory> mapping;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  dl::ManagedTensor legacy{};
  dl::ManagedTensorVersioned versioned{};
};

void legacy_deleter(dl::ManagedTensor* m) {
  delete static_cast<ExportCtx*>(m->manager_ctx);
}
void versioned_deleter(dl::ManagedTensorVersioned* m) {
  delete static_cast<ExportCtx*>(m->manager_ctx);
}

// Capsule destructors: a consumer renames the capsule to "used_..." once it owns the tensor;
// otherwise (never consumed) the capsule frees it.
void legacy_capsule_dtor(PyObject* cap) {
  if (PyCapsule_IsValid(cap, "used_dltensor")) return;
  PyObject *t, *v, *tb;
  PyErr_Fetch(&t, &v, &tb);
  auto* m = static_cast<dl::ManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
  if (m)
    m->deleter(m);
  else
    PyErr_Clear();
  PyErr_Restore(t, v, tb);
}
void versioned_capsule_dtor(PyObject* cap) {
  if (PyCapsule_IsValid(cap, "used_dltensor_versioned")) return;
  PyObject *t, *v, *tb;
  PyErr_Fetch(&t, &v, &tb);
  auto* m =
      static_cast<dl::ManagedTensorVersioned*>(PyCapsule_GetPointer(cap, "dltensor_versioned"));
  if (m)
    m->deleter(m);
  else
    PyErr_Clear();
  PyErr_Restore(t, v, tb);
}

[[noreturn]] void buffer_error(const std::string& msg) {
  PyErr_SetString(PyExc_BufferError, msg.c_str());
  throw nb::python_error();
}

dl::Device dl_device(Device d) {
  return d.is_cuda() ? dl::Device{dl::kCUDA, d.index} : dl::Device{dl::kCPU, 0};
}

nb::object export_dlpack(const Array& a, nb::handle stream, nb::handle max_version,
                         nb::handle dl_dev, nb::handle copy) {
  (void)stream;  // symmem memory carries no pending producer work of its own: nothing to order.
  if (!copy.is_none() && nb::cast<bool>(copy))
    buffer_error(
        "SymmetricArray.__dlpack__: copy=True is not supported (symmetric memory is "
        "exported without a copy)");
  dl::Device dev = dl_device(a.device());
  if (!dl_dev.is_none()) {
    auto want_type = nb::cast<int32_t>(dl_dev[0]);
    auto want_id = nb::cast<int32_t>(dl_dev[1]);
    if (want_type != dev.device_type || (dev.device_type == dl::kCUDA && want_id != dev.device_id))
      buffer_error("SymmetricArray.__dlpack__: the array lives on " + to_string(a.device()) +
                   "; dl_device asks for another device and symmem does not copy");
  }
  bool versioned = false;
  if (!max_version.is_none()) versioned = nb::cast<int>(max_version[0]) >= 1;

  auto ctx = std::make_unique<ExportCtx>();
  ctx->keep = a.mem;
  if (const auto& bm = a.mem.backend_memory(); !bm->release_is_collective()) ctx->mapping = bm;
  ctx->shape = a.shape;
  ctx->strides.resize(a.shape.size());
  int64_t stride = 1;
  for (size_t i = a.shape.size(); i-- > 0;) {
    ctx->strides[i] = stride;
    stride *= a.shape[i];
  }
  dl::Tensor t{};
  t.data = a.data();
  t.device = dev;
  t.ndim = static_cast<int32_t>(a.shape.size());
  t.dtype = a.dtype;
  t.shape = ctx->shape.data();
  t.strides = ctx->strides.data();
  t.byte_offset = 0;

  PyObject* cap = nullptr;
  if (versioned) {
    ctx->versioned.version = {dl::kMajor, dl::kMinor};
    ctx->versioned.manager_ctx = ctx.get();
    ctx->versioned.deleter = versioned_deleter;
    ctx->versioned.flags = 0;
    ctx->versioned.dl_tensor = t;
    cap = PyCapsule_New(&ctx->versioned, "dltensor_versioned", versioned_capsule_dtor);
  } else {
    ctx->legacy.dl_tensor = t;
    ctx->legacy.manager_ctx = ctx.get();
    ctx->legacy.deleter = legacy_deleter;
    cap = PyCapsule_New(&ctx->legacy, "dltensor", legacy_capsule_dtor);
  }
  if (!cap) throw nb::python_error();
  ctx.release();  // owned by the capsule (or its consumer) from here
  return nb::steal(cap);
}

nb::tuple dlpack_device(const Array& a) {
  dl::Device d = dl_device(a.device());
  return nb::make_tuple(d.device_type, d.device_id);
}

}  // namespace

// ---- DLPack import ----------------------------------------------------------------------------
namespace {

// A torch.Tensor that NOTE [torch fast path] (module.cpp) may export with torch's C function:
// torch's own type, no autograd, no conjugate or negative bit. Null otherwise. A torch tensor
// with the negative bit (torch._neg_view, conj().imag) is refused: torch's __dlpack__ exports
// its data without the negation, so the op would read values of the opposite sign.
const TorchFast* torch_plain(nb::handle obj, const char* op, const char* arg) {
  const TorchFast* f = torch_fast();
  if (f == nullptr || !PyObject_TypeCheck(obj.ptr(), f->tensor)) return nullptr;
  if (obj.attr("is_neg")().ptr() != Py_False)
    throw_invalid_argument(op, -1, arg,
                           "is a torch tensor with the negative bit set (a lazy negation, e.g. "
                           "conj().imag), which DLPack cannot carry; pass t.resolve_neg()");
  if (Py_TYPE(obj.ptr()) != f->tensor || obj.attr("requires_grad").ptr() != Py_False ||
      obj.attr("is_conj")().ptr() != Py_False)
    return nullptr;
  return f;
}

// The fields of `r` that the DLPack tensor `t` (in the capsule `cap`) gives.
void read_dl_tensor(ArrayRef& r, const dl::Tensor* t, nb::object cap, const char* op,
                    const char* arg) {
  r.keep = std::move(cap);  // unconsumed: its destructor calls the producer's deleter
  r.data = static_cast<char*>(t->data) + t->byte_offset;
  r.dtype = t->dtype;
  if (t->dtype.lanes != 1)
    throw_invalid_argument(op, -1, arg, "has a vector dtype (" + dtype_name(t->dtype) + ")");
  r.shape.assign(t->shape, t->shape + t->ndim);
  r.numel = 1;
  for (int64_t d : r.shape) r.numel *= static_cast<size_t>(d);
  if (t->strides && r.numel > 1) {
    int64_t expect = 1;
    for (int i = t->ndim; i-- > 0;) {
      if (t->shape[i] != 1 && t->strides[i] != expect) {
        std::string st;
        for (int j = 0; j < t->ndim; ++j) st += (j ? "," : "") + std::to_string(t->strides[j]);
        throw_invalid_argument(
            op, -1, arg,
            "is not contiguous (strides (" + st + ") in elements); pass a contiguous array");
      }
      expect *= t->shape[i];
    }
  }
}

// NOTE [torch fast path]: `r` from torch's C export of a plain tensor on the CPU or, on a CUDA
// device, when `stream` is torch's current stream there. False (r untouched): take the protocol.
bool import_torch(nb::handle obj, const char* op, const char* arg, Stream stream, ArrayRef& r) {
  const TorchFast* f = torch_plain(obj, op, arg);
  if (f == nullptr) return false;
  nb::object cap = nb::steal(PyObject_CallOneArg(f->to_dlpack, obj.ptr()));
  if (!cap.is_valid()) {
    PyErr_Clear();  // the protocol raises torch's own error, if any
    return false;
  }
  if (!PyCapsule_IsValid(cap.ptr(), "dltensor")) return false;
  const dl::Tensor* t =
      &static_cast<dl::ManagedTensor*>(PyCapsule_GetPointer(cap.ptr(), "dltensor"))->dl_tensor;
  if (t->device.device_type == dl::kCPU) {
    r.device = Device::cpu();
  } else if (t->device.device_type == dl::kCUDA &&
             stream == torch_current_stream(t->device.device_id)) {
    r.device = Device::cuda(t->device.device_id);
  } else {
    return false;  // the capsule goes unconsumed; its destructor frees torch's context
  }
  read_dl_tensor(r, t, std::move(cap), op, arg);
  return true;
}

}  // namespace

Device array_device(nb::handle obj, const char* op, const char* arg) {
  if (nb::isinstance<Array>(obj)) return nb::cast<const Array&>(obj).device();
  // NOTE [torch fast path]: a torch tensor's device without __dlpack_device__ (whether its data
  // can take the fast path is import_array's question).
  if (const TorchFast* f = torch_fast(); f != nullptr && PyObject_TypeCheck(obj.ptr(), f->tensor)) {
    if (obj.attr("is_cuda").ptr() == Py_True)
      return Device::cuda(nb::cast<int>(obj.attr("get_device")()));
    if (obj.attr("is_cpu").ptr() == Py_True) return Device::cpu();
  }
  if (!nb::hasattr(obj, "__dlpack_device__") || !nb::hasattr(obj, "__dlpack__"))
    throw_invalid_argument(op, -1, arg,
                           "(a " + std::string(nb::type_name(obj.type()).c_str()) +
                               ") is not an array: it implements neither __dlpack__ nor "
                               "__dlpack_device__");
  nb::object d = obj.attr("__dlpack_device__")();
  int type = nb::cast<int>(d[0]);
  int id = nb::cast<int>(d[1]);
  switch (type) {
    case dl::kCPU:
    case dl::kCUDAHost:
      return Device::cpu();
    case dl::kCUDA:
    case dl::kCUDAManaged:
      return Device::cuda(id);
    default:
      throw_invalid_argument(op, -1, arg,
                             "is on DLPack device type " + std::to_string(type) +
                                 ", which symmem does not serve (cpu, cuda)");
  }
}

ArrayRef import_array(nb::handle obj, const char* op, const char* arg, Stream stream) {
  ArrayRef r;
  if (nb::isinstance<Array>(obj)) {
    const Array& a = nb::cast<const Array&>(obj);
    r.keep = nb::borrow(obj);
    r.sym = &a;
    r.data = a.data();
    r.shape = a.shape;
    r.dtype = a.dtype;
    r.device = a.device();
    r.numel = a.numel();
    return r;
  }
  if (import_torch(obj, op, arg, stream, r)) return r;  // NOTE [torch fast path]
  r.device = array_device(obj, op, arg);
  nb::object fn = obj.attr("__dlpack__");
  nb::object s = nb::none();
  if (r.device.is_cuda())  // DLPack: 1 is the legacy default stream; 0 is not allowed
    s = nb::int_(stream ? reinterpret_cast<intptr_t>(stream) : 1);
  nb::object cap;
  try {
    cap = fn("stream"_a = s, "max_version"_a = nb::make_tuple(dl::kMajor, dl::kMinor));
  } catch (nb::python_error& e) {
    if (!e.matches(PyExc_TypeError)) throw;
    cap = fn("stream"_a = s);  // a producer older than DLPack 1.0
  }
  const dl::Tensor* t = nullptr;
  if (PyCapsule_IsValid(cap.ptr(), "dltensor_versioned")) {
    auto* m = static_cast<dl::ManagedTensorVersioned*>(
        PyCapsule_GetPointer(cap.ptr(), "dltensor_versioned"));
    if (m->version.major != dl::kMajor)
      throw_invalid_argument(
          op, -1, arg,
          "is exported with DLPack " + std::to_string(m->version.major) + ".x; symmem reads 1.x");
    r.read_only = (m->flags & dl::kFlagReadOnly) != 0;
    t = &m->dl_tensor;
  } else if (PyCapsule_IsValid(cap.ptr(), "dltensor")) {
    t = &static_cast<dl::ManagedTensor*>(PyCapsule_GetPointer(cap.ptr(), "dltensor"))->dl_tensor;
  } else {
    throw_invalid_argument(op, -1, arg,
                           "returned something other than a DLPack capsule from __dlpack__");
  }
  read_dl_tensor(r, t, std::move(cap), op, arg);
  return r;
}

// ---- bindings ---------------------------------------------------------------------------------
namespace {

Stream op_stream(nb::handle s, Device dev, const char* op) {
  bool none = false;
  Stream st = to_stream(s, op, &none);
  if (none && dev.is_cuda()) st = torch_current_stream(dev.index);
  return st;
}

std::vector<int64_t> to_shape(nb::handle shape, const char* op) {
  std::vector<int64_t> out;
  auto bad = [&] {
    throw_invalid_argument(op, -1, "shape", "must be an int or a sequence of non-negative ints");
  };
  if (PyLong_Check(shape.ptr())) {
    out.push_back(nb::cast<int64_t>(shape));
  } else {
    try {
      for (nb::handle d : shape) out.push_back(nb::cast<int64_t>(d));
    } catch (const std::exception&) {
      bad();
    }
  }
  for (int64_t d : out)
    if (d < 0) bad();
  return out;
}

}  // namespace

Group resolve_alloc_group(nb::handle group, const char* op) {
  nb::handle g = group.is_none() ? default_group_slot() : group;
  if (!g.is_valid() || g.is_none())
    throw_invalid_argument(op, -1, "group",
                           "is None and there is no default group: call symmem.Group.from_env() "
                           "first or pass group=");
  if (!nb::isinstance<Group>(g)) throw_invalid_argument(op, -1, "group", "must be a symmem.Group");
  return nb::cast<Group>(g);
}

namespace {

Array make_array(const SymmetricMemory& mem, std::vector<int64_t> shape, dl::DataType dtype) {
  Array a;
  a.mem = mem;
  a.shape = std::move(shape);
  a.dtype = dtype;
  a.buffer_rank = mem.rank();
  return a;
}

// peer's signal pad as an array: by default all of it as uint32; else `sizes` elements of
// `dtype` from element `offset` (torch's get_signal_pad(rank, sizes, dtype, storage_offset)).
Array pad_array(const SymmetricMemory& mem, nb::handle peer, nb::handle sizes = nb::none(),
                nb::handle dtype = nb::none(), int64_t offset = 0) {
  Array a;
  a.mem = mem;
  a.buffer_rank = peer.is_none() ? mem.rank() : nb::cast<int>(peer);
  if (a.buffer_rank < 0 || a.buffer_rank >= mem.world_size())
    throw_invalid_argument("signal_pad", mem.rank(), "peer",
                           "= " + std::to_string(a.buffer_rank) + " is not in [0, " +
                               std::to_string(mem.world_size()) + ")");
  a.pad = true;
  a.dtype = dtype.is_none() ? dl::DataType{dl::kUInt, 32, 1} : to_dtype(dtype, "signal_pad");
  const size_t es = dtype_bytes(a.dtype);
  const size_t pad_bytes = mem.signal_pad_bytes();
  if (offset < 0 || static_cast<size_t>(offset) * es > pad_bytes)
    throw_invalid_argument("signal_pad", mem.rank(), "offset",
                           "= " + std::to_string(offset) + " elements is outside the " +
                               std::to_string(pad_bytes) + "-byte signal pad");
  a.pad_offset = static_cast<size_t>(offset) * es;
  if (sizes.is_none()) {
    a.shape = {static_cast<int64_t>((pad_bytes - a.pad_offset) / es)};
  } else {
    a.shape = to_shape(sizes, "signal_pad");
    if (a.nbytes() > pad_bytes - a.pad_offset)
      throw_invalid_argument("signal_pad", mem.rank(), "sizes",
                             "need " + std::to_string(a.nbytes()) + " bytes at byte " +
                                 std::to_string(a.pad_offset) + " of the " +
                                 std::to_string(pad_bytes) + "-byte signal pad");
  }
  return a;
}

Array array_over(const SymmetricMemory& mem, nb::handle shape, nb::handle dtype, size_t offset) {
  auto sh = to_shape(shape, "SymmetricMemory.array");
  auto dt = to_dtype(dtype, "SymmetricMemory.array");
  size_t n = dtype_bytes(dt);
  for (int64_t d : sh) n *= static_cast<size_t>(d);
  if (offset > mem.size() || n > mem.size() - offset)
    throw_invalid_argument("SymmetricMemory.array", mem.rank(), "shape",
                           "needs " + std::to_string(n) + " bytes at offset " +
                               std::to_string(offset) + ", beyond the buffer's " +
                               std::to_string(mem.size()) + " bytes");
  return make_array((n == mem.size() && offset == 0) || n == 0 ? mem : mem.view(offset, n), sh, dt);
}

template <class C>
void bind_sync(C& cls, const SymmetricMemory& (*get)(const typename C::Type&)) {
  cls.def(
         "signal_pad",
         [get](const typename C::Type& self, nb::handle peer, nb::handle sizes, nb::handle dtype,
               int64_t offset) { return pad_array(get(self), peer, sizes, dtype, offset); },
         "peer"_a.none() = nb::none(), "sizes"_a.none() = nb::none(), "dtype"_a.none() = nb::none(),
         "offset"_a = 0,
         nb::sig("def signal_pad(self, peer: int | None = None, sizes: object | None = None, "
                 "dtype: object | None = None, offset: int = 0) -> SymmetricArray"),
         "peer's signal pad (default: this rank's) as an array (DLPack-capable): all of it as "
         "uint32, or `sizes` elements of `dtype` from element `offset`.")
      .def(
          "barrier",
          [get](const typename C::Type& self, int channel, nb::handle timeout, nb::handle stream) {
            const SymmetricMemory& m = get(self);
            Millis t = to_timeout(timeout, "barrier");
            Stream s = op_stream(stream, m.device(), "barrier");
            nb::gil_scoped_release r;
            m.barrier(channel, t, s);
          },
          "channel"_a = 0, "timeout"_a.none() = nb::none(), "stream"_a.none() = nb::none(),
          "Barrier over the allocation's signal pads on `channel` (GPU: enqueued on `stream`).")
      .def(
          "put_signal",
          [get](const typename C::Type& self, int dst, int channel, nb::handle timeout,
                nb::handle stream) {
            const SymmetricMemory& m = get(self);
            Millis t = to_timeout(timeout, "put_signal");
            Stream s = op_stream(stream, m.device(), "put_signal");
            nb::gil_scoped_release r;
            m.put_signal(dst, channel, t, s);
          },
          "dst"_a, "channel"_a = 0, "timeout"_a.none() = nb::none(), "stream"_a.none() = nb::none(),
          "Raises slot (channel, this rank) of dst's signal pad (after waiting for it to be 0).")
      .def(
          "wait_signal",
          [get](const typename C::Type& self, int src, int channel, nb::handle timeout,
                nb::handle stream) {
            const SymmetricMemory& m = get(self);
            Millis t = to_timeout(timeout, "wait_signal");
            Stream s = op_stream(stream, m.device(), "wait_signal");
            nb::gil_scoped_release r;
            m.wait_signal(src, channel, t, s);
          },
          "src"_a, "channel"_a = 0, "timeout"_a.none() = nb::none(), "stream"_a.none() = nb::none(),
          "Waits until src raised slot (channel, src) of this rank's pad, then resets it.")
      .def(
          "signal_op",
          [get](const typename C::Type& self, int peer, size_t slot, uint32_t value,
                const std::string& op, nb::handle stream) {
            const SymmetricMemory& m = get(self);
            const SignalOp o = parse_signal_op(op, "op");
            Stream s = op_stream(stream, m.device(), "signal_op");
            nb::gil_scoped_release r;
            m.signal_op(peer, slot, value, o, s);
          },
          "peer"_a, "slot"_a, "value"_a, "op"_a = "set", "stream"_a.none() = nb::none(),
          nb::sig("def signal_op(self, peer: int, slot: int, value: int, op: str = 'set', "
                  "stream: object | None = None) -> None"),
          "NVSHMEM's signal_op: slot `slot` of peer's signal pad becomes `value` (op='set') or "
          "grows by it (op='add', wrapping), ordered after this rank's earlier writes.")
      .def(
          "wait_until",
          [get](const typename C::Type& self, size_t slot, const std::string& cmp, uint32_t value,
                nb::handle timeout, nb::handle stream) {
            const SymmetricMemory& m = get(self);
            const Cmp c = parse_cmp(cmp, "cmp");
            Millis t = to_timeout(timeout, "wait_until");
            Stream s = op_stream(stream, m.device(), "wait_until");
            nb::gil_scoped_release r;
            return m.wait_until(slot, c, value, t, s);
          },
          "slot"_a, "cmp"_a, "value"_a, "timeout"_a.none() = nb::none(),
          "stream"_a.none() = nb::none(),
          nb::sig("def wait_until(self, slot: int, cmp: str, value: int, "
                  "timeout: float | datetime.timedelta | None = None, "
                  "stream: object | None = None) -> int"),
          "NVSHMEM's signal_wait_until: waits until slot `slot` of this rank's pad compares "
          "`cmp` ('eq', 'ne', 'gt', 'ge', 'lt', 'le') to `value`; returns the value seen. "
          "Errors and timeouts are those of barrier.");
}

const SymmetricMemory& mem_of_mem(const SymmetricMemory& m) {
  return m;
}
const SymmetricMemory& mem_of_array(const Array& a) {
  return a.mem;
}

nb::tuple shape_tuple(const std::vector<int64_t>& shape) {
  nb::list l;
  for (int64_t d : shape) l.append(d);
  return nb::tuple(l);
}

// ---- bindings, one function per class or topic ---------------------------------------------

void bind_device_handle(nb::module_& m) {
  nb::class_<DeviceHandle>(m, "DeviceHandle",
                           "The plain struct GPU kernels receive (symmem/device_handle.hpp); "
                           "bytes(handle) is its raw layout, to pass as a kernel argument.")
      .def_ro("rank", &DeviceHandle::rank)
      .def_ro("world_size", &DeviceHandle::world_size)
      .def_ro("size", &DeviceHandle::size)
      .def_ro("num_channels", &DeviceHandle::num_channels)
      .def_ro("pad_slots", &DeviceHandle::pad_slots)
      .def_prop_ro("buffers",
                   [](const DeviceHandle& h) { return reinterpret_cast<uintptr_t>(h.buffers); })
      .def_prop_ro("signal_pads",
                   [](const DeviceHandle& h) { return reinterpret_cast<uintptr_t>(h.signal_pads); })
      .def_prop_ro(
          "timeout_record",
          [](const DeviceHandle& h) { return reinterpret_cast<uintptr_t>(h.timeout_record); })
      .def_ro("timeout_ns", &DeviceHandle::timeout_ns)
      .def("__bytes__", [](const DeviceHandle& h) {
        return nb::bytes(reinterpret_cast<const char*>(&h), sizeof(h));
      });
}

void bind_symmetric_memory(nb::module_& m) {
  auto mem = nb::class_<SymmetricMemory>(
      m, "SymmetricMemory",
      "Handle of a symmetric allocation (or a view of one) over a group. Pointers are ints "
      "(device pointers on GPU backends).");
  mem.def_prop_ro(
         "valid", [](const SymmetricMemory& s) { return s.valid() && !s.freed(); },
         "False for an empty handle and once the allocation was freed.")
      .def_prop_ro("freed", &SymmetricMemory::freed,
                   "True once free() was called on the allocation (by any handle of it).")
      .def_prop_ro("rank", &SymmetricMemory::rank)
      .def_prop_ro("world_size", &SymmetricMemory::world_size)
      .def_prop_ro("size", &SymmetricMemory::size, "Bytes of this view on each rank.")
      .def_prop_ro("offset", &SymmetricMemory::offset)
      .def_prop_ro("device", &SymmetricMemory::device)
      .def_prop_ro("backend", &SymmetricMemory::backend)
      .def_prop_ro("group", &SymmetricMemory::group)
      .def_prop_ro("alloc_id", &SymmetricMemory::alloc_id)
      .def(
          "ptr",
          [](const SymmetricMemory& s, int peer) {
            return reinterpret_cast<uintptr_t>(s.ptr(peer));
          },
          "peer"_a, "This view's start in peer's buffer (0 where not directly addressable).")
      .def_prop_ro(
          "ptrs_device",
          [](const SymmetricMemory& s) { return reinterpret_cast<uintptr_t>(s.ptrs_device()); })
      .def(
          "signal_pad_ptr",
          [](const SymmetricMemory& s, int peer) {
            return reinterpret_cast<uintptr_t>(s.signal_pad(peer));
          },
          "peer"_a)
      .def_prop_ro("signal_pad_bytes", &SymmetricMemory::signal_pad_bytes)
      .def_prop_ro("num_channels", &SymmetricMemory::num_channels)
      .def("direct_access", &SymmetricMemory::direct_access, "peer"_a)
      .def("global_rank", &SymmetricMemory::global_rank, "rank"_a)
      .def("device_handle", &SymmetricMemory::device_handle)
      .def("view", &SymmetricMemory::view, "offset"_a, "length"_a,
           "A view of [offset, offset+length) bytes of every rank's buffer (no rendezvous).")
      .def("free", &SymmetricMemory::free, nb::call_guard<nb::gil_scoped_release>(),
           "Frees the allocation now: every handle becomes invalid and ops on it raise "
           "InvalidArgument. Arrays that numpy, torch, ... got through DLPack stay readable "
           "(host and cuda backends: the mapping goes with the last of them).")
      .def(
          "array",
          [](const SymmetricMemory& s, nb::handle shape, nb::handle dtype, size_t offset) {
            return array_over(s, shape, dtype, offset);
          },
          "shape"_a, "dtype"_a = "float32", "offset"_a = 0,
          nb::sig("def array(self, shape: int | Sequence[int], dtype: object = 'float32', "
                  "offset: int = 0) -> SymmetricArray"),
          "A SymmetricArray over bytes [offset, offset + nbytes) of this view.")
      .def("__repr__", [](const SymmetricMemory& s) {
        if (!s.valid()) return std::string("symmem.SymmetricMemory(invalid)");
        return "symmem.SymmetricMemory(size=" + std::to_string(s.size()) +
               ", rank=" + std::to_string(s.rank()) + "/" + std::to_string(s.world_size()) +
               ", device=" + to_string(s.device()) + ", backend=" + s.backend() + ")";
      });
  bind_sync(mem, &mem_of_mem);
}

// SymmetricArray: what it is (shape, dtype, where).
void bind_array_properties(nb::class_<Array>& arr) {
  arr.def_prop_ro("shape", [](const Array& a) { return shape_tuple(a.shape); })
      .def_prop_ro("dtype", [](const Array& a) { return dtype_name(a.dtype); })
      .def_prop_ro("ndim", [](const Array& a) { return a.shape.size(); })
      .def_prop_ro("size", &Array::numel, "Number of elements.")
      .def_prop_ro("nbytes", &Array::nbytes)
      .def_prop_ro("itemsize", [](const Array& a) { return dtype_bytes(a.dtype); })
      .def_prop_ro("device", [](const Array& a) { return to_string(a.device()); })
      .def_prop_ro(
          "handle", [](const Array& a) { return a.mem; },
          "The SymmetricMemory (view) this array covers.")
      .def_prop_ro("group", [](const Array& a) { return a.mem.group(); })
      .def_prop_ro("rank", [](const Array& a) { return a.mem.rank(); })
      .def_prop_ro("world_size", [](const Array& a) { return a.mem.world_size(); })
      .def_prop_ro("backend", [](const Array& a) { return a.mem.backend(); })
      .def_prop_ro(
          "buffer_rank", [](const Array& a) { return a.buffer_rank; },
          "The rank whose buffer (or pad) this array shows.")
      .def_prop_ro("is_signal_pad", [](const Array& a) { return a.pad; });
}

// SymmetricArray: where its data is (this and the peers' buffers and pads, the device handle).
void bind_array_access(nb::class_<Array>& arr) {
  arr.def("data_ptr", [](const Array& a) { return reinterpret_cast<uintptr_t>(a.data()); })
      .def(
          "ptr",
          [](const Array& a, nb::handle peer) {
            int p = peer.is_none() ? a.buffer_rank : nb::cast<int>(peer);
            if (a.pad) {
              char* pad = reinterpret_cast<char*>(a.mem.signal_pad(p));
              return reinterpret_cast<uintptr_t>(pad != nullptr ? pad + a.pad_offset : nullptr);
            }
            return reinterpret_cast<uintptr_t>(a.mem.ptr(p));
          },
          "peer"_a.none() = nb::none(), nb::sig("def ptr(self, peer: int | None = None) -> int"),
          "Address of this array's data in peer's buffer (0 where not directly addressable).")
      .def(
          "peer",
          [](const Array& a, int peer) {
            if (peer < 0 || peer >= a.mem.world_size())
              throw_invalid_argument("SymmetricArray.peer", a.mem.rank(), "peer",
                                     "= " + std::to_string(peer) + " is not in [0, " +
                                         std::to_string(a.mem.world_size()) + ")");
            Array v = a;
            v.buffer_rank = peer;
            (void)v.data();  // Unsupported now rather than at export
            return v;
          },
          "peer"_a,
          "The same array in peer's buffer (DLPack-capable; loads and stores reach the peer).")
      .def("device_handle", [](const Array& a) { return a.mem.device_handle(); });
}

// SymmetricArray: DLPack, numpy and the Python protocols.
void bind_array_export(nb::class_<Array>& arr) {
  arr.def("__dlpack__", &export_dlpack, nb::kw_only(), "stream"_a.none() = nb::none(),
          "max_version"_a.none() = nb::none(), "dl_device"_a.none() = nb::none(),
          "copy"_a.none() = nb::none(),
          nb::sig("def __dlpack__(self, *, stream: int | None = None, "
                  "max_version: tuple[int, int] | None = None, "
                  "dl_device: tuple[int, int] | None = None, copy: bool | None = None) "
                  "-> types.CapsuleType"),
          "DLPack export (zero copy). `stream` is accepted and ignored: symmem memory has no "
          "pending producer work; order your own work on your stream.")
      .def("__dlpack_device__", &dlpack_device)
      .def(
          "numpy",
          [](nb::handle self) { return nb::module_::import_("numpy").attr("from_dlpack")(self); },
          nb::sig("def numpy(self) -> numpy.ndarray"), "numpy.from_dlpack(self): a view, no copy.")
      .def(
          "__array__",
          [](nb::handle self, nb::handle dtype, nb::handle copy) {
            if (!copy.is_none() && nb::cast<bool>(copy))
              return nb::module_::import_("numpy").attr("array")(
                  nb::module_::import_("numpy").attr("from_dlpack")(self), "dtype"_a = dtype);
            nb::object a = nb::module_::import_("numpy").attr("from_dlpack")(self);
            if (!dtype.is_none()) a = a.attr("astype")(dtype, "copy"_a = false);
            return a;
          },
          "dtype"_a.none() = nb::none(), "copy"_a.none() = nb::none(),
          nb::sig("def __array__(self, dtype: object = None, copy: bool | None = None) -> "
                  "numpy.ndarray"))
      .def("__len__",
           [](const Array& a) {
             if (a.shape.empty()) throw nb::type_error("len() of a 0-d SymmetricArray");
             return a.shape[0];
           })
      .def("__repr__", [](const Array& a) {
        std::string sh = "(";
        for (size_t i = 0; i < a.shape.size(); ++i)
          sh += std::to_string(a.shape[i]) + (a.shape.size() == 1      ? ","
                                              : i + 1 < a.shape.size() ? ", "
                                                                       : "");
        sh += ")";
        return "symmem.SymmetricArray(shape=" + sh + ", dtype=" + dtype_name(a.dtype) +
               ", device=" + to_string(a.device()) + ", rank=" + std::to_string(a.mem.rank()) +
               "/" + std::to_string(a.mem.world_size()) + ", backend=" + a.mem.backend() +
               (a.pad ? ", signal_pad" : "") +
               (a.buffer_rank != a.mem.rank() ? ", peer=" + std::to_string(a.buffer_rank) : "") +
               ")";
      });
}

void bind_symmetric_array(nb::module_& m) {
  auto arr = nb::class_<Array>(
      m, "SymmetricArray",
      "An n-d array in symmetric memory (C order). Consumers see it without a copy through "
      "DLPack: numpy.from_dlpack(a), torch.from_dlpack(a), cupy.from_dlpack(a), "
      "jax.dlpack.from_dlpack(a). The memory lives while the array or any consumer does; "
      "after free() a consumer's view stays mapped (host, cuda) until it goes.");
  bind_array_properties(arr);
  bind_array_access(arr);
  bind_array_export(arr);
  bind_sync(arr, &mem_of_array);
}

// allocate() and empty(): collective over a group.
void bind_allocation(nb::module_& m) {
  m.def(
      "allocate",
      [](nb::handle group, size_t nbytes, nb::handle device, std::optional<std::string> backend,
         size_t signal_pad_bytes) {
        Group g = resolve_alloc_group(group, "allocate");
        Device d = to_device(device, &g, "allocate");
        AllocOptions o;
        o.backend = backend.value_or("");
        o.signal_pad_bytes = signal_pad_bytes;
        SymmetricMemory s;
        {
          nb::gil_scoped_release r;
          s = allocate(g, nbytes, d, o);
        }
        register_allocation(s);
        return s;
      },
      "group"_a.none(), "nbytes"_a, "device"_a.none() = "cpu", "backend"_a.none() = nb::none(),
      "signal_pad_bytes"_a = 0,
      nb::sig("def allocate(group: Group | None, nbytes: int, device: str | int | object = 'cpu', "
              "backend: str | None = None, signal_pad_bytes: int = 0) -> SymmetricMemory"),
      "Allocates nbytes of symmetric memory on every rank of group (collective).");

  m.def(
      "empty",
      [](nb::handle shape, nb::handle dtype, nb::handle device, nb::handle group,
         std::optional<std::string> backend) {
        Group g = resolve_alloc_group(group, "empty");
        auto sh = to_shape(shape, "empty");
        auto dt = to_dtype(dtype, "empty");
        Device d = to_device(device, &g, "empty");
        size_t n = dtype_bytes(dt);
        for (int64_t x : sh) n *= static_cast<size_t>(x);
        AllocOptions o;
        o.backend = backend.value_or("");
        SymmetricMemory s;
        {
          nb::gil_scoped_release r;
          s = allocate(g, n > 0 ? n : 1, d, o);
        }
        register_allocation(s);
        return make_array(n == s.size() || n == 0 ? s : s.view(0, n), sh, dt);
      },
      "shape"_a, "dtype"_a = "float32", "device"_a.none() = "cpu", "group"_a.none() = nb::none(),
      "backend"_a.none() = nb::none(),
      nb::sig("def empty(shape: int | Sequence[int], dtype: object = 'float32', "
              "device: str | int | object = 'cpu', group: Group | None = None, "
              "backend: str | None = None) -> SymmetricArray"),
      "A new symmetric array (uninitialised; collective over group, default: the default "
      "group). device: 'cpu', 'cuda' (torch's current device when torch is imported, else the "
      "group's local rank), 'cuda:N', an int N or a torch.device.");

  m.def(
      "find_memory",
      [](uintptr_t ptr, size_t nbytes) -> nb::object {
        size_t offset = 0;
        auto mem = find_allocation(reinterpret_cast<const void*>(ptr), nbytes, &offset);
        if (!mem || !mem->valid()) return nb::none();
        return nb::make_tuple(*mem, offset);
      },
      "ptr"_a, "nbytes"_a = 0,
      nb::sig("def find_memory(ptr: int, nbytes: int = 0) -> tuple[SymmetricMemory, int] | None"),
      "(handle, byte offset) of the live symmetric allocation of this process that holds bytes "
      "[ptr, ptr + nbytes) of this rank's buffer, else None (no copy, no communication).");

  // find_memory without building the handle and the tuple: what the torch layer asks of every
  // tensor of every op (NOTE [torch fast path] in module.cpp), about 1 us instead of 5 on the GPU
  // machine's host.
  m.def(
      "memory_placement",
      [](uintptr_t ptr, size_t nbytes, const Group* group) -> int {
        auto mem = find_allocation(reinterpret_cast<const void*>(ptr), nbytes, nullptr);
        if (!mem || !mem->valid()) return -1;
        return group == nullptr || mem->group().impl() == group->impl() ? 1 : 0;
      },
      "ptr"_a, "nbytes"_a = 0, "group"_a.none() = nb::none(),
      nb::sig("def memory_placement(ptr: int, nbytes: int = 0, group: Group | None = None) -> int"),
      "-1: bytes [ptr, ptr + nbytes) are in no live symmetric allocation of this process; 1: they "
      "are, and it is over `group` (or group is None); 0: over another group.");
}

void bind_backend_selection(nb::module_& m) {
  m.def("select_backend", &select_backend, "name"_a,
        "Chooses this process's backend (auto, host, cuda, nvshmem, nccl) before the first "
        "allocation.");
  m.def(
      "resolve_backend",
      [](const Group& g, nb::handle device) {
        Device d = to_device(device, &g, "resolve_backend");
        std::string why;
        std::string name = resolve_backend(g, d, &why);
        return nb::make_tuple(name, why);
      },
      "group"_a, "device"_a.none() = "cpu",
      nb::sig("def resolve_backend(group: Group, device: str | int | object = 'cpu') -> tuple[str, "
              "str]"),
      "(backend, why): the backend that serves device for group.");
  m.def("available_backends", &available_backends);
}

}  // namespace

void bind_memory(nb::module_& m) {
  bind_device_handle(m);
  bind_symmetric_memory(m);
  bind_symmetric_array(m);
  bind_allocation(m);
  bind_backend_selection(m);
}

}  // namespace symmem::py
