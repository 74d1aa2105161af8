#pragma once

// Shared pieces of the symmem Python extension (symmem._C): argument conversion (devices,
// dtypes, streams, timeouts), the symmetric array type and DLPack import/export.
//
// Conventions of the Python API (see python/symmem/__init__.py for the user-facing docs):
//   - timeouts are seconds (int/float) or datetime.timedelta; None means SYMMEM_TIMEOUT_MS;
//   - streams are None, an int (cudaStream_t as an integer), or an object with __cuda_stream__
//     (CUDA Python protocol) or cuda_stream (torch.cuda.Stream); None on a CUDA array means
//     torch's current stream when torch is imported, else the legacy default stream;
//   - every blocking call releases the GIL.

#include <nanobind/nanobind.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dlpack.hpp"
#include "symmem/symmem.hpp"

namespace symmem::py {

namespace nb = nanobind;

// ---- conversions ------------------------------------------------------------------------------
Millis to_timeout(nb::handle t, const char* op);
// Stream from None/int/__cuda_stream__/cuda_stream/ptr. `is_none` tells the caller it was None.
Stream to_stream(nb::handle s, const char* op, bool* is_none = nullptr);
// torch.cuda.current_stream(index) when torch is already imported, else nullptr.
Stream torch_current_stream(int device_index);
// NOTE [torch fast path] (module.cpp): torch's objects, once torch is imported; null before and
// where this torch lacks them.
struct TorchFast {
  PyTypeObject* tensor = nullptr;  // torch.Tensor
  PyObject* to_dlpack = nullptr;   // torch._C._to_dlpack (torch.utils.dlpack.to_dlpack)
  PyObject* raw_stream = nullptr;  // torch._C._cuda_getCurrentRawStream, or null
};
const TorchFast* torch_fast();
Device to_device(nb::handle d, const Group* group, const char* op);
dl::DataType to_dtype(nb::handle d, const char* op);
std::string dtype_name(dl::DataType t);
size_t dtype_bytes(dl::DataType t);
// symmem::DType of a DLPack type, or nullopt for types the ops don't reduce/move typed.
std::optional<DType> to_symmem_dtype(dl::DataType t);
dl::DataType from_symmem_dtype(DType t);

// ---- symmetric arrays -------------------------------------------------------------------------
// An n-d array over (a view of) a symmetric allocation. `buffer_rank` is the rank whose buffer
// data() points into (this rank for arrays from empty(); a peer for .peer(p) views); `pad` makes
// it a view of that rank's signal pad (uint32 slots) instead.
struct Array {
  SymmetricMemory mem;
  std::vector<int64_t> shape;
  dl::DataType dtype{dl::kFloat, 32, 1};
  int buffer_rank = 0;
  bool pad = false;
  size_t pad_offset = 0;  // bytes into the pad (signal_pad(peer, sizes, dtype, offset))

  void* data() const;  // throws Unsupported where buffer_rank is not directly addressable
  size_t numel() const;
  size_t nbytes() const { return numel() * dtype_bytes(dtype); }
  Device device() const { return mem.device(); }
  bool is_local() const { return !pad && buffer_rank == mem.rank(); }
};

// Allocation registry: lets ops find the symmetric allocation (and so the group) of a pointer
// that a foreign array (a torch tensor made by from_dlpack, say) holds.
void register_allocation(const SymmetricMemory& mem);
// The whole allocation holding [p, p+bytes) on this rank, or nullopt; *offset: p - base.
std::optional<SymmetricMemory> find_allocation(const void* p, size_t bytes, size_t* offset);

// An array argument of an op, imported through DLPack (or directly from an Array).
struct ArrayRef {
  nb::object keep;  // the DLPack capsule (its destructor releases the producer's reference)
  void* data = nullptr;
  std::vector<int64_t> shape;
  dl::DataType dtype{};
  Device device;
  bool read_only = false;
  const Array* sym = nullptr;  // set when the argument is a symmem.SymmetricArray
  size_t numel = 0;
  size_t nbytes() const { return numel * dtype_bytes(dtype); }
};

// Device of an array-like without importing it: (device, ok). ok=false: no __dlpack_device__.
Device array_device(nb::handle obj, const char* op, const char* arg);
// Imports `obj` (contiguous, one lane). `stream` is the consumer stream handed to __dlpack__
// on CUDA arrays (nullptr: the legacy default stream).
ArrayRef import_array(nb::handle obj, const char* op, const char* arg, Stream stream);

// The `group` argument of a collective call, else the default group (InvalidArgument if none).
Group resolve_alloc_group(nb::handle group, const char* op);

// Registration of each part of the module.
void bind_errors(nb::module_& m);
void bind_core(nb::module_& m);    // types, env, stores, groups
void bind_memory(nb::module_& m);  // SymmetricMemory, SymmetricArray, allocate, empty
void bind_ops(nb::module_& m);
void bind_moe(nb::module_& m);      // moe_layout, moe_dispatch, moe_combine
void bind_mempool(nb::module_& m);  // the allocator of symmem.torch.mempool (mempool.cpp)

// The process's default group (set by the first Group.from_env(), or set_default_group()).
nb::object& default_group_slot();

}  // namespace symmem::py
