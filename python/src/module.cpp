// symmem._C: errors, value types, settings, stores and groups. See common.hpp for conventions.

#include <nanobind/stl/function.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <Python.h>

#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "common.hpp"
#include "symmem/version.hpp"

namespace symmem::py {

using namespace nb::literals;

// ---- errors ---------------------------------------------------------------------------------
namespace {

// Exception classes indexed by ErrorCode (1..8); [0] is symmem.Error. Created once, never freed
// (they live as long as the interpreter).
std::array<PyObject*, 10> g_exc{};

PyObject* exception_for(ErrorCode code) {
  int i = static_cast<int>(code);
  if (i < 1 || i > 9) return g_exc[0];
  return g_exc[i];
}

void translate(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const symmem::Error& e) {
    PyObject* cls = exception_for(e.code());
    PyObject* msg = PyUnicode_FromString(e.what());
    if (!msg) return;
    PyObject* exc = PyObject_CallOneArg(cls, msg);
    Py_DECREF(msg);
    if (!exc) return;
    try {
      nb::object code = nb::cast(e.code());  // a symmem.ErrorCode
      PyObject_SetAttrString(exc, "code", code.ptr());
    } catch (...) {
      PyErr_Clear();
    }
    PyErr_SetObject(cls, exc);
    Py_DECREF(exc);
  }
}

PyObject* make_exc(nb::module_& m, const char* name, const char* doc, PyObject* extra_base) {
  std::string qual = std::string("symmem.") + name;
  PyObject* bases = extra_base ? PyTuple_Pack(2, g_exc[0], extra_base) : PyTuple_Pack(1, g_exc[0]);
  PyObject* cls = PyErr_NewExceptionWithDoc(qual.c_str(), doc, bases, nullptr);
  Py_DECREF(bases);
  if (!cls) throw nb::python_error();
  m.attr(name) = nb::handle(cls);
  return cls;
}

}  // namespace

void bind_errors(nb::module_& m) {
  g_exc[0] = PyErr_NewExceptionWithDoc(
      "symmem.Error",
      "Base class of every symmem error. `code` is the symmem.ErrorCode; the message starts with "
      "the operation and names the rank.",
      PyExc_RuntimeError, nullptr);
  if (!g_exc[0]) throw nb::python_error();
  m.attr("Error") = nb::handle(g_exc[0]);
  auto idx = [](ErrorCode c) { return static_cast<size_t>(c); };
  g_exc[idx(ErrorCode::InvalidArgument)] =
      make_exc(m, "InvalidArgument", "A bad argument; the message names it. Also a ValueError.",
               PyExc_ValueError);
  g_exc[idx(ErrorCode::Unsupported)] =
      make_exc(m, "Unsupported",
               "The backend cannot do this; the message names the backends that can. Also a "
               "NotImplementedError.",
               PyExc_NotImplementedError);
  g_exc[idx(ErrorCode::Timeout)] =
      make_exc(m, "Timeout",
               "A wait passed its deadline; the message names what was missing. Also a "
               "TimeoutError.",
               PyExc_TimeoutError);
  g_exc[idx(ErrorCode::PeerFailure)] = make_exc(
      m, "PeerFailure", "A peer vanished (socket closed, process died). Also a ConnectionError.",
      PyExc_ConnectionError);
  g_exc[idx(ErrorCode::BackendUnavailable)] =
      make_exc(m, "BackendUnavailable",
               "The backend's plugin or its dependency cannot be loaded or used here.", nullptr);
  g_exc[idx(ErrorCode::System)] = make_exc(
      m, "SystemFailure", "An operating-system call failed. Also an OSError.", PyExc_OSError);
  g_exc[idx(ErrorCode::Cuda)] = make_exc(m, "CudaError", "A CUDA call failed.", nullptr);
  g_exc[idx(ErrorCode::Internal)] = make_exc(m, "InternalError", "A bug in symmem.", nullptr);
  g_exc[idx(ErrorCode::Aborted)] =
      make_exc(m, "Aborted",
               "The group was aborted (Group.abort(), or shrink() of it); the message gives the "
               "reason.",
               nullptr);
  nb::register_exception_translator(translate);

  nb::enum_<ErrorCode>(m, "ErrorCode", "The code carried by every symmem.Error (its `code`).")
      .value("InvalidArgument", ErrorCode::InvalidArgument)
      .value("Unsupported", ErrorCode::Unsupported)
      .value("Timeout", ErrorCode::Timeout)
      .value("PeerFailure", ErrorCode::PeerFailure)
      .value("BackendUnavailable", ErrorCode::BackendUnavailable)
      .value("System", ErrorCode::System)
      .value("Cuda", ErrorCode::Cuda)
      .value("Internal", ErrorCode::Internal)
      .value("Aborted", ErrorCode::Aborted);
  // For tests and for Python code that wants to raise a symmem error itself.
  m.def(
      "_raise",
      [](int code, const std::string& message) {
        throw symmem::Error(static_cast<ErrorCode>(code), message);
      },
      "code"_a, "message"_a);
}

// ---- conversions ------------------------------------------------------------------------------
Millis to_timeout(nb::handle t, const char* op) {
  if (t.is_none()) return Millis(-1);
  double seconds = 0;
  if (nb::hasattr(t, "total_seconds")) {
    seconds = nb::cast<double>(t.attr("total_seconds")());
  } else {
    try {
      seconds = nb::cast<double>(nb::float_(t));
    } catch (const nb::python_error&) {
      throw_invalid_argument(op, -1, "timeout",
                             "must be seconds (int/float), a datetime.timedelta or None");
    }
  }
  if (!std::isfinite(seconds) || seconds < 0 || seconds > 1e9)
    throw_invalid_argument(op, -1, "timeout",
                           "= " + std::to_string(seconds) + " s is not a non-negative duration");
  return Millis(static_cast<int64_t>(std::ceil(seconds * 1000.0)));
}

// NOTE [torch fast path]: torch's __dlpack__ and __dlpack_device__ are Python methods that ask
// torch.cuda.current_stream() and more (about 8 us a tensor on the CPU machine, more with CUDA),
// and an op reads two or three arrays. For a plain torch.Tensor (the exact type: no subclass,
// which may be a fake or distributed tensor) that needs no autograd and has no conjugate or
// negative bit, whose data would be exported as is, torch's C function behind
// torch.utils.dlpack.to_dlpack gives the same capsule without them (0.4 us). It does not
// synchronise streams, so a CUDA tensor takes it only when the op runs on torch's current stream
// of its device, which __dlpack__ would have made the op wait for anyway; any other case takes
// the protocol. torch is never imported here: the fast path starts once the caller has.
const TorchFast* torch_fast() {
  static TorchFast f;  // the GIL guards it; its references are never released (interpreter exit)
  static bool looked = false;
  if (looked) return f.tensor != nullptr ? &f : nullptr;
  PyObject* torch = PyImport_GetModule(nb::str("torch").ptr());
  if (torch == nullptr) {
    PyErr_Clear();
    return nullptr;  // not imported yet: look again next time
  }
  looked = true;
  nb::object t = nb::steal(torch);
  try {
    nb::object tensor = t.attr("Tensor");
    nb::object c = t.attr("_C");
    nb::object to = nb::getattr(c, "_to_dlpack", nb::none());
    if (!PyType_Check(tensor.ptr()) || to.is_none()) return nullptr;
    nb::object raw = nb::getattr(c, "_cuda_getCurrentRawStream", nb::none());
    f.to_dlpack = to.release().ptr();
    f.raw_stream = raw.is_none() ? nullptr : raw.release().ptr();
    f.tensor = reinterpret_cast<PyTypeObject*>(tensor.release().ptr());
  } catch (const nb::python_error&) {
    f = TorchFast{};
  }
  return f.tensor != nullptr ? &f : nullptr;
}

Stream torch_current_stream(int device_index) {
  if (const TorchFast* f = torch_fast(); f != nullptr && f->raw_stream != nullptr) {
    PyObject* s = PyObject_CallFunction(f->raw_stream, "i", device_index);
    if (s != nullptr) {
      const uintptr_t v = PyLong_AsUnsignedLongLong(s);
      Py_DECREF(s);
      if (!PyErr_Occurred()) return reinterpret_cast<Stream>(v);
    }
    PyErr_Clear();  // the public way below
  }
  PyObject* torch = PyImport_GetModule(nb::str("torch").ptr());
  if (!torch) {
    PyErr_Clear();
    return nullptr;
  }
  nb::object t = nb::steal(torch);
  nb::object s = t.attr("cuda").attr("current_stream")(device_index);
  return reinterpret_cast<Stream>(nb::cast<uintptr_t>(s.attr("cuda_stream")));
}

Stream to_stream(nb::handle s, const char* op, bool* is_none) {
  if (is_none) *is_none = s.is_none();
  if (s.is_none()) return nullptr;
  nb::object v;
  if (PyLong_Check(s.ptr())) {
    v = nb::borrow(s);
  } else if (nb::hasattr(s, "__cuda_stream__")) {
    nb::object r = s.attr("__cuda_stream__")();
    v = nb::isinstance<nb::tuple>(r) ? nb::object(r[1]) : r;  // (version, handle)
  } else if (nb::hasattr(s, "cuda_stream")) {
    v = s.attr("cuda_stream");
  } else if (nb::hasattr(s, "ptr")) {
    v = s.attr("ptr");
  } else {
    throw_invalid_argument(op, -1, "stream",
                           "must be None, an int (cudaStream_t) or an object with __cuda_stream__ "
                           "or cuda_stream; got " +
                               std::string(nb::type_name(s.type()).c_str()));
  }
  int64_t value = 0;
  try {
    value = nb::cast<int64_t>(v);
  } catch (const nb::cast_error&) {
    throw_invalid_argument(op, -1, "stream", "does not hold an integer stream handle");
  }
  if (value < 0)
    throw_invalid_argument(op, -1, "stream", "= " + std::to_string(value) + " is negative");
  return reinterpret_cast<Stream>(static_cast<uintptr_t>(value));
}

namespace {

bool parse_cuda_index(const std::string& s, int* index) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  *index = std::stoi(s);
  return true;
}

int default_cuda_index(const Group* group) {
  PyObject* torch = PyImport_GetModule(nb::str("torch").ptr());
  if (!torch) PyErr_Clear();
  if (torch) {
    nb::object t = nb::steal(torch);
    if (nb::cast<bool>(t.attr("cuda").attr("is_available")()))
      return nb::cast<int>(t.attr("cuda").attr("current_device")());
  }
  return group && group->valid() ? group->local_rank() : 0;
}

}  // namespace

Device to_device(nb::handle d, const Group* group, const char* op) {
  if (d.is_none()) return Device::cpu();
  if (PyLong_Check(d.ptr())) {
    int i = nb::cast<int>(d);
    if (i < 0) throw_invalid_argument(op, -1, "device", "= " + std::to_string(i) + " is negative");
    return Device::cuda(i);
  }
  std::string s = nb::cast<std::string>(nb::str(d));  // also torch.device
  if (s == "cpu") return Device::cpu();
  if (s == "cuda" || s == "gpu") return Device::cuda(default_cuda_index(group));
  int index = 0;
  if (s.rfind("cuda:", 0) == 0 && parse_cuda_index(s.substr(5), &index)) return Device::cuda(index);
  throw_invalid_argument(op, group && group->valid() ? group->rank() : -1, "device",
                         "= '" + s + "' is not a device (cpu, cuda, cuda:N or an int N)");
}

namespace {

dl::DataType dl_type(const DTypeInfo& row) {
  return {row.dlpack_code, static_cast<uint8_t>(8 * row.size), 1};
}

bool same(dl::DataType a, dl::DataType b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

std::string dtype_names() {
  std::string s;
  for (size_t i = 0; i < dtype_table_size(); ++i) s += std::string(dtype_table()[i].name) + ", ";
  return s.substr(0, s.size() - 2);
}

}  // namespace

dl::DataType to_dtype(nb::handle d, const char* op) {
  std::string s;
  if (nb::isinstance<nb::str>(d)) {
    s = nb::cast<std::string>(d);
  } else if (d.ptr() == reinterpret_cast<PyObject*>(&PyFloat_Type)) {
    s = "float64";  // Python's float, as numpy reads it
  } else if (d.ptr() == reinterpret_cast<PyObject*>(&PyLong_Type)) {
    s = "int64";
  } else if (d.ptr() == reinterpret_cast<PyObject*>(&PyBool_Type)) {
    s = "bool";
  } else if (PyType_Check(d.ptr())) {
    s = nb::cast<std::string>(d.attr("__name__"));  // numpy.float32, ...
  } else {
    s = nb::cast<std::string>(nb::str(d));  // numpy.dtype('float32'), torch.float32
    if (s.rfind("torch.", 0) == 0) s = s.substr(6);
  }
  if (const DTypeInfo* r = find_dtype(std::string_view(s))) return dl_type(*r);
  throw_invalid_argument(op, -1, "dtype", "= '" + s + "' is not a dtype (" + dtype_names() + ")");
}

std::string dtype_name(dl::DataType t) {
  if (auto d = to_symmem_dtype(t)) return dtype_info(*d).name;
  return "dlpack(code=" + std::to_string(t.code) + ",bits=" + std::to_string(t.bits) +
         ",lanes=" + std::to_string(t.lanes) + ")";
}

size_t dtype_bytes(dl::DataType t) {
  return (static_cast<size_t>(t.bits) * t.lanes + 7) / 8;
}

std::optional<DType> to_symmem_dtype(dl::DataType t) {
  for (size_t i = 0; i < dtype_table_size(); ++i)
    if (same(dl_type(dtype_table()[i]), t)) return dtype_table()[i].dtype;
  return std::nullopt;
}

dl::DataType from_symmem_dtype(DType t) {
  return dl_type(dtype_info(t));
}

nb::object& default_group_slot() {
  // Leaked on purpose: the default group lives until the process exits, and is never destroyed
  // during interpreter finalisation.
  static nb::object* slot = new nb::object();
  return *slot;
}

// ---- Python-implemented store --------------------------------------------------------------
namespace {

// A Store whose operations call a Python object (see PythonStore's docstring for the protocol).
// Used to rendezvous over a store the application already has, e.g. torch.distributed's.
class PythonStore final : public Store {
 public:
  explicit PythonStore(nb::object obj) : obj_(std::move(obj)) {}
  ~PythonStore() override {
    if (!Py_IsInitialized()) {
      obj_.release();  // interpreter gone: leak rather than touch it
      return;
    }
    nb::gil_scoped_acquire gil;
    obj_.reset();
  }

  void set(const std::string& key, const Bytes& value) override {
    call("set", [&] { obj_.attr("set")(key, as_bytes(value)); });
  }
  Bytes get(const std::string& key, Millis timeout) override {
    Bytes out;
    call("get", [&] { out = from_bytes(obj_.attr("get")(key, seconds(timeout))); });
    return out;
  }
  void wait(const std::vector<std::string>& keys, Millis timeout) override {
    call("wait", [&] { obj_.attr("wait")(keys, seconds(timeout)); });
  }
  int64_t add(const std::string& key, int64_t delta) override {
    int64_t out = 0;
    call("add", [&] { out = nb::cast<int64_t>(obj_.attr("add")(key, delta)); });
    return out;
  }
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    Bytes out;
    call("compare_set", [&] {
      out = from_bytes(obj_.attr("compare_set")(key, as_bytes(expected), as_bytes(desired)));
    });
    return out;
  }
  std::vector<Bytes> multi_get(const std::vector<std::string>& keys, Millis timeout) override {
    std::vector<Bytes> out;
    call("multi_get", [&] {
      if (nb::hasattr(obj_, "multi_get")) {
        nb::object r = obj_.attr("multi_get")(keys, seconds(timeout));
        for (nb::handle v : r) out.push_back(from_bytes(v));
      } else {
        for (const auto& k : keys) out.push_back(from_bytes(obj_.attr("get")(k, seconds(timeout))));
      }
    });
    return out;
  }
  void multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) override {
    call("multi_set", [&] {
      if (keys.size() != values.size())
        throw_invalid_argument("PythonStore::multi_set", -1, "values",
                               "has a different length than keys");
      if (nb::hasattr(obj_, "multi_set")) {
        nb::list vs;
        for (const auto& v : values) vs.append(as_bytes(v));
        obj_.attr("multi_set")(keys, vs);
      } else {
        for (size_t i = 0; i < keys.size(); ++i) obj_.attr("set")(keys[i], as_bytes(values[i]));
      }
    });
  }
  bool remove(const std::string& key) override {
    bool out = false;
    call("remove", [&] { out = nb::cast<bool>(obj_.attr("remove")(key)); });
    return out;
  }
  bool check(const std::vector<std::string>& keys) override {
    bool out = false;
    call("check", [&] { out = nb::cast<bool>(obj_.attr("check")(keys)); });
    return out;
  }
  int64_t num_keys() override {
    int64_t out = 0;
    call("num_keys", [&] { out = nb::cast<int64_t>(obj_.attr("num_keys")()); });
    return out;
  }

  const nb::object& object() const { return obj_; }

 private:
  static nb::bytes as_bytes(const Bytes& b) {
    return nb::bytes(reinterpret_cast<const char*>(b.data()), b.size());
  }
  static Bytes from_bytes(nb::handle v) {
    if (nb::isinstance<nb::str>(v)) return to_bytes(nb::cast<std::string>(v));
    nb::bytes b = nb::isinstance<nb::bytes>(v) ? nb::borrow<nb::bytes>(v)
                                               : nb::bytes(nb::bytes(v));  // bytearray, ...
    const auto* p = static_cast<const uint8_t*>(b.data());
    return Bytes(p, p + b.size());
  }
  static double seconds(Millis t) { return t.count() < 0 ? -1.0 : t.count() / 1000.0; }

  // Runs f with the GIL held; a Python exception becomes a symmem::Error (a symmem.Error keeps
  // its code; TimeoutError or a message mentioning a timeout becomes Timeout).
  template <class F>
  void call(const char* what, F&& f) {
    nb::gil_scoped_acquire gil;
    try {
      f();
    } catch (nb::python_error& e) {
      std::string msg = std::string("PythonStore::") + what + ": " + e.what();
      ErrorCode code = ErrorCode::System;
      if (PyObject_HasAttrString(e.value().ptr(), "code") &&
          PyErr_GivenExceptionMatches(e.type().ptr(), g_exc[0])) {
        code = static_cast<ErrorCode>(nb::cast<int>(e.value().attr("code")));
      } else if (e.matches(PyExc_TimeoutError) ||
                 std::string(e.what()).find("imeout") != std::string::npos ||
                 std::string(e.what()).find("imed out") != std::string::npos) {
        code = ErrorCode::Timeout;
      }
      throw symmem::Error(code, msg);
    }
  }

  nb::object obj_;
};

std::string bytes_arg(nb::handle v) {
  if (nb::isinstance<nb::str>(v)) return nb::cast<std::string>(v);
  nb::bytes b = nb::isinstance<nb::bytes>(v) ? nb::borrow<nb::bytes>(v) : nb::bytes(nb::bytes(v));
  return std::string(b.c_str(), b.size());
}

nb::bytes py_bytes(const Bytes& b) {
  return nb::bytes(reinterpret_cast<const char*>(b.data()), b.size());
}

GroupOptions group_options(std::optional<int> rank, std::optional<int> world_size,
                           std::optional<int> local_rank, std::optional<int> local_world_size,
                           std::optional<std::string> store_url, std::shared_ptr<Store> store,
                           std::optional<std::string> token, nb::handle timeout, const char* op) {
  GroupOptions o;
  o.rank = rank.value_or(-1);
  o.world_size = world_size.value_or(-1);
  o.local_rank = local_rank.value_or(-1);
  o.local_world_size = local_world_size.value_or(-1);
  o.store_url = store_url.value_or("");
  o.store = std::move(store);
  o.token = token.value_or("");
  o.timeout = to_timeout(timeout, op);
  return o;
}

}  // namespace

// ---- types, settings, stores, groups: one function per class or topic ------------------------
namespace {

void bind_device(nb::module_& m) {
  nb::class_<Device>(m, "Device", "A device: cpu or cuda:N.")
      .def_static("cpu", &Device::cpu)
      .def_static("cuda", &Device::cuda, "index"_a)
      .def_prop_ro("type", [](const Device& d) { return d.is_cuda() ? "cuda" : "cpu"; })
      .def_prop_ro("index", [](const Device& d) { return d.index; })
      .def("__str__", [](const Device& d) { return to_string(d); })
      .def("__repr__", [](const Device& d) { return "symmem.Device('" + to_string(d) + "')"; })
      .def("__eq__", [](const Device& a, const Device& b) { return a == b; });
}

void bind_settings(nb::module_& m) {
  m.def(
      "settings",
      [] {
        nb::list out;
        for (const auto& s : env::settings()) {
          nb::dict d;
          d["name"] = s.name;
          d["type"] = s.type;
          d["default"] = s.default_value;
          d["accepted"] = s.accepted;
          d["meaning"] = s.meaning;
          out.append(d);
        }
        return out;
      },
      "Every SYMMEM_* setting: a list of dicts (name, type, default, accepted, meaning).");
}

// Store's key-value operations.
void bind_store_methods(nb::class_<Store>& store) {
  store
      .def(
          "set",
          [](Store& s, const std::string& key, nb::handle value) {
            Bytes v = to_bytes(bytes_arg(value));
            nb::gil_scoped_release r;
            s.set(key, v);
          },
          "key"_a, "value"_a)
      .def(
          "get",
          [](Store& s, const std::string& key, nb::handle timeout) {
            Millis t = to_timeout(timeout, "Store.get");
            Bytes v;
            {
              nb::gil_scoped_release r;
              v = s.get(key, t);
            }
            return py_bytes(v);
          },
          "key"_a, "timeout"_a.none() = nb::none())
      .def(
          "wait",
          [](Store& s, const std::vector<std::string>& keys, nb::handle timeout) {
            Millis t = to_timeout(timeout, "Store.wait");
            nb::gil_scoped_release r;
            s.wait(keys, t);
          },
          "keys"_a, "timeout"_a.none() = nb::none())
      .def("add", &Store::add, "key"_a, "delta"_a, nb::call_guard<nb::gil_scoped_release>())
      .def(
          "compare_set",
          [](Store& s, const std::string& key, nb::handle expected, nb::handle desired) {
            Bytes e = to_bytes(bytes_arg(expected)), d = to_bytes(bytes_arg(desired));
            Bytes v;
            {
              nb::gil_scoped_release r;
              v = s.compare_set(key, e, d);
            }
            return py_bytes(v);
          },
          "key"_a, "expected"_a, "desired"_a)
      .def(
          "multi_get",
          [](Store& s, const std::vector<std::string>& keys, nb::handle timeout) {
            Millis t = to_timeout(timeout, "Store.multi_get");
            std::vector<Bytes> vs;
            {
              nb::gil_scoped_release r;
              vs = s.multi_get(keys, t);
            }
            nb::list out;
            for (const auto& v : vs) out.append(py_bytes(v));
            return out;
          },
          "keys"_a, "timeout"_a.none() = nb::none())
      .def(
          "multi_set",
          [](Store& s, const std::vector<std::string>& keys, nb::handle values) {
            std::vector<Bytes> vs;
            for (nb::handle v : values) vs.push_back(to_bytes(bytes_arg(v)));
            nb::gil_scoped_release r;
            s.multi_set(keys, vs);
          },
          "keys"_a, "values"_a)
      .def("remove", &Store::remove, "key"_a, nb::call_guard<nb::gil_scoped_release>())
      .def("check", &Store::check, "keys"_a, nb::call_guard<nb::gil_scoped_release>())
      .def("num_keys", &Store::num_keys, nb::call_guard<nb::gil_scoped_release>());
}

void bind_store(nb::module_& m) {
  auto store =
      nb::class_<Store>(m, "Store",
                        "Key-value rendezvous store. Values are bytes (str is encoded as UTF-8). "
                        "Timeouts are seconds or datetime.timedelta (None: SYMMEM_TIMEOUT_MS).");
  bind_store_methods(store);
  store.def_static(
      "connect",
      [](const std::string& url, const std::string& token, nb::handle timeout) {
        Millis t = to_timeout(timeout, "Store.connect");
        nb::gil_scoped_release r;
        return Store::connect(url, token, t);
      },
      "url"_a, "token"_a = "", "timeout"_a.none() = nb::none(),
      "Connects to tcp://host:port or opens file:///path.");
}

// The stores Python can make: HashStore, FileStore, TcpStore, PythonStore, and the server.
void bind_store_types(nb::module_& m) {
  nb::class_<HashStore, Store>(m, "HashStore", "In-process store (tests, single-process groups).")
      .def(nb::init<>());
  // A factory (not a class binding) so that the module does not depend on FileStore's typeinfo.
  m.def(
      "FileStore",
      [](const std::string& path) {
        std::string abs = std::filesystem::absolute(path).string();
        nb::gil_scoped_release r;
        return Store::connect("file://" + abs);
      },
      "path"_a, "Store in a directory of a shared filesystem (Store.connect('file://' + path)).");
  nb::class_<TcpStore, Store>(m, "TcpStore", "Client of a TcpStoreServer.")
      .def(
          "__init__",
          [](TcpStore* self, const std::string& host, uint16_t port, const std::string& token,
             nb::handle timeout) {
            Millis t = to_timeout(timeout, "TcpStore");
            nb::gil_scoped_release r;
            new (self) TcpStore(host, port, token, t);
          },
          "host"_a, "port"_a, "token"_a = "", "timeout"_a.none() = nb::none());
  nb::class_<PythonStore, Store>(
      m, "PythonStore",
      "A Store implemented by a Python object `obj` with methods set(key: str, value: bytes), "
      "get(key, timeout_s) -> bytes, wait(keys, timeout_s), add(key, delta) -> int, "
      "compare_set(key, expected, desired) -> bytes, remove(key) -> bool, check(keys) -> bool, "
      "num_keys() -> int, and optionally multi_get(keys, timeout_s) / multi_set(keys, values). "
      "timeout_s is seconds (float; -1: the store's default). Its exceptions become "
      "symmem errors (Timeout for TimeoutError or a message about a timeout).")
      .def(nb::init<nb::object>(), "obj"_a)
      .def_prop_ro("obj", &PythonStore::object);

  nb::class_<TcpStoreServer>(m, "TcpStoreServer",
                             "TCP store server (one event-loop thread). Stopped by stop() or when "
                             "garbage-collected.")
      .def_static("start", &TcpStoreServer::start, "host"_a = "127.0.0.1", "port"_a = 0,
                  "token"_a = "", nb::call_guard<nb::gil_scoped_release>())
      .def_prop_ro("port", &TcpStoreServer::port)
      .def_prop_ro("host", &TcpStoreServer::host)
      .def("stop", &TcpStoreServer::stop, nb::call_guard<nb::gil_scoped_release>())
      .def("serve_forever", &TcpStoreServer::serve_forever,
           nb::call_guard<nb::gil_scoped_release>());
}

// The group `make` returns, made without the GIL (it waits for the other ranks).
template <class Make>
nb::object made_without_gil(Make&& make) {
  Group g;
  {
    nb::gil_scoped_release r;
    g = make();
  }
  return nb::cast(std::move(g));
}

// The group `make` returns; it becomes the default group if there is none yet (Group.from_env,
// Group.rejoin).
template <class Make>
nb::object default_if_none(Make&& make) {
  nb::object obj = made_without_gil(make);
  if (!default_group_slot().is_valid() || default_group_slot().is_none())
    default_group_slot() = obj;
  return obj;
}

// Group.from_env and Group.create.
void bind_group_constructors(nb::class_<Group>& group) {
  group
      .def_static(
          "from_env",
          [](std::optional<int> rank, std::optional<int> world_size, std::optional<int> local_rank,
             std::optional<int> local_world_size, std::optional<std::string> store_url,
             std::shared_ptr<Store> store, std::optional<std::string> token, nb::handle timeout) {
            GroupOptions o =
                group_options(rank, world_size, local_rank, local_world_size, store_url,
                              std::move(store), token, timeout, "Group.from_env");
            return default_if_none([&] { return Group::from_env(o); });
          },
          nb::kw_only(), "rank"_a.none() = nb::none(), "world_size"_a.none() = nb::none(),
          "local_rank"_a.none() = nb::none(), "local_world_size"_a.none() = nb::none(),
          "store_url"_a.none() = nb::none(), "store"_a.none() = nb::none(),
          "token"_a.none() = nb::none(), "timeout"_a.none() = nb::none(),
          nb::sig("def from_env(*, rank: int | None = None, world_size: int | None = None, "
                  "local_rank: int | None = None, local_world_size: int | None = None, "
                  "store_url: str | None = None, store: Store | None = None, "
                  "token: str | None = None, timeout: float | datetime.timedelta | None = None) "
                  "-> Group"),
          "The group of this job, from explicit arguments, SYMMEM_*, torchrun, Open MPI or "
          "Slurm variables (collective over the job).")
      .def_static(
          "create",
          [](std::shared_ptr<Store> store, int rank, int world_size, std::optional<int> local_rank,
             std::optional<int> local_world_size, nb::handle timeout) {
            GroupOptions o =
                group_options(std::nullopt, std::nullopt, local_rank, local_world_size,
                              std::nullopt, nullptr, std::nullopt, timeout, "Group.create");
            nb::gil_scoped_release r;
            return Group::create(std::move(store), rank, world_size, o);
          },
          "store"_a, "rank"_a, "world_size"_a, nb::kw_only(), "local_rank"_a.none() = nb::none(),
          "local_world_size"_a.none() = nb::none(), "timeout"_a.none() = nb::none(),
          nb::sig("def create(store: Store, rank: int, world_size: int, *, "
                  "local_rank: int | None = None, local_world_size: int | None = None, "
                  "timeout: float | datetime.timedelta | None = None) -> Group"),
          "A group over an existing store with explicit rank and world size (collective).")
      .def_static(
          "rejoin",
          [](nb::handle timeout) {
            GroupOptions o =
                group_options(std::nullopt, std::nullopt, std::nullopt, std::nullopt, std::nullopt,
                              nullptr, std::nullopt, timeout, "Group.rejoin");
            return default_if_none([&] { return Group::rejoin(o); });
          },
          nb::kw_only(), "timeout"_a.none() = nb::none(),
          nb::sig("def rejoin(*, timeout: float | datetime.timedelta | None = None) -> Group"),
          "For a process the launcher started again after a failure (Group.restarted()): joins "
          "the next grow() of the job's survivors; becomes the default group if there is none.")
      .def_static("restarted", &Group::restarted,
                  "Whether the launcher started this process again after a failure "
                  "(SYMMEM_RESTART_COUNT > 0; symmem-run --restart-failed).");
}

// The group `make` returns, which replaces `old` (shrink, grow) as the default group where
// `old` was it.
template <class Make>
nb::object replacing_default(const Group& old, Make&& make) {
  nb::object obj = made_without_gil(make);
  nb::object& slot = default_group_slot();
  if (slot.is_valid() && !slot.is_none() && nb::isinstance<Group>(slot) &&
      nb::cast<const Group&>(slot).impl() == old.impl()) {
    slot = obj;
  }
  return obj;
}

void bind_group(nb::module_& m) {
  auto group =
      nb::class_<Group>(m, "Group",
                        "A set of ranks that rendezvous through a Store (a cheap handle).\n\n"
                        "Group.from_env() understands symmem-run, torchrun, mpirun (Open MPI) and "
                        "srun; the first group it makes becomes the default group of the ops.",
                        // A per-object __dict__: symmem.torch caches the name its custom ops
                        // take there, a plain attribute torch.compile can read on every torch.
                        nb::dynamic_attr());
  bind_group_constructors(group);
  group.def_prop_ro("valid", &Group::valid)
      .def_prop_ro("rank", &Group::rank)
      .def_prop_ro("world_size", &Group::world_size)
      .def_prop_ro("local_rank", &Group::local_rank)
      .def_prop_ro("local_world_size", &Group::local_world_size)
      .def_prop_ro("host_id", &Group::host_id)
      .def_prop_ro("single_host", &Group::single_host)
      .def_prop_ro("global_ranks", &Group::global_ranks)
      .def_prop_ro("store", &Group::store)
      .def_prop_ro("name", &Group::name)
      .def_prop_ro(
          "timeout", [](const Group& g) { return g.timeout().count() / 1000.0; },
          "Deadline of blocking calls, in seconds.")
      .def("abort", &Group::abort, "reason"_a = "", nb::call_guard<nb::gil_scoped_release>(),
           "Aborts this group and the groups split from it, in this process: ops in flight and "
           "later ones raise symmem.Aborted within 100 ms. Idempotent; safe from any thread.")
      .def_prop_ro("aborted", &Group::aborted)
      .def("check_async_error", &Group::check_async_error,
           "Raises, without waiting, an error the device found after a GPU op of this process "
           "returned (a wait past its deadline: Timeout; an argument error found on the device, "
           "such as all_to_all_v's counts or a peer that refused its arguments to an op: "
           "InvalidArgument naming the rank; a wait stopped by an abort), or this group's abort "
           "error; returns "
           "None when there is none so far. Synchronise the stream first to cover every op "
           "enqueued on it (as NCCL's ncclCommGetAsyncError).")
      .def("failed_ranks", &Group::failed_ranks, nb::call_guard<nb::gil_scoped_release>(),
           "Ranks of this group whose process is known to be gone (sorted).")
      .def(
          "shrink",
          [](const Group& g, const std::vector<int>& excluded) {
            return replacing_default(g, [&] { return g.shrink(excluded); });
          },
          "excluded"_a, nb::sig("def shrink(self, excluded: Sequence[int]) -> Group"),
          "Collective over the survivors: their group, ranks renumbered in the old order "
          "(rank_map: old -> new). Aborts this group; replaces it as the default group.")
      .def(
          "grow",
          [](const Group& g, int joiners) {
            return replacing_default(g, [&] { return g.grow(joiners); });
          },
          "joiners"_a, nb::sig("def grow(self, joiners: int) -> Group"),
          "Collective over this group and `joiners` processes calling Group.rejoin(): the group "
          "of all of them, this group's ranks first. Replaces this group as the default group.")
      .def_prop_ro("rank_map", &Group::rank_map,
                   "For a group made by shrink() or grow(): per rank of the group it came from, "
                   "its rank here (-1: excluded); else empty.")
      .def("same_host", &Group::same_host, "peer"_a)
      .def("global_rank", &Group::global_rank, "group_rank"_a)
      .def("group_rank", &Group::group_rank, "global_rank"_a)
      .def("split", &Group::split, "ranks"_a, nb::call_guard<nb::gil_scoped_release>(),
           "Subgroup of the listed ranks; collective over those ranks only.")
      .def("store_barrier", &Group::store_barrier, nb::call_guard<nb::gil_scoped_release>(),
           "Barrier over the store (slow; for setup and teardown).")
      .def(
          "__eq__", [](const Group& a, const Group& b) { return a.impl() == b.impl(); },
          nb::is_operator())
      .def("__hash__", [](const Group& g) { return std::hash<const void*>()(g.impl().get()); })
      .def("__repr__", [](const Group& g) {
        if (!g.valid()) return std::string("symmem.Group(invalid)");
        return "symmem.Group(rank=" + std::to_string(g.rank()) +
               ", world_size=" + std::to_string(g.world_size()) + ", name='" + g.name() + "')";
      });
}

// The group ops use when none is given.
void bind_default_group(nb::module_& m) {
  m.def(
      "default_group",
      [] { return default_group_slot().is_valid() ? default_group_slot() : nb::none(); },
      nb::sig("def default_group() -> Group | None"),
      "The group ops use when none is given and the arrays are not symmetric (or None).");
  m.def(
      "set_default_group",
      [](nb::handle g) {
        if (!g.is_none() && !nb::isinstance<Group>(g))
          throw_invalid_argument("set_default_group", -1, "group",
                                 "must be a symmem.Group or None");
        default_group_slot() = nb::borrow(g);
      },
      "group"_a.none(), nb::sig("def set_default_group(group: Group | None) -> None"));
}

}  // namespace

void bind_core(nb::module_& m) {
  m.attr("__version__") = SYMMEM_VERSION_STRING;

  bind_device(m);
  bind_settings(m);
  bind_store(m);
  bind_store_types(m);
  bind_group(m);
  bind_default_group(m);
}

}  // namespace symmem::py

NB_MODULE(_C, m) {
  m.doc() = "symmem C++ bindings (use the `symmem` package).";
  // The default group is kept until the process exits (never torn down during interpreter
  // finalisation, when peers may still be using the store it hosts); don't report it as a leak.
  nanobind::set_leak_warnings(false);
  symmem::py::bind_errors(m);
  symmem::py::bind_core(m);
  symmem::py::bind_memory(m);
  symmem::py::bind_ops(m);
  symmem::py::bind_moe(m);
  symmem::py::bind_mempool(m);
}
