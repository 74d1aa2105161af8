#pragma once

// Small value types shared by the whole API.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "symmem/export.hpp"

namespace symmem {

enum class DeviceType : int { cpu = 0, cuda = 1 };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;
  static constexpr Device cpu() { return Device{DeviceType::cpu, 0}; }
  static constexpr Device cuda(int index) { return Device{DeviceType::cuda, index}; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  bool operator==(const Device&) const = default;
};
SYMMEM_API std::string to_string(Device d);  // "cpu", "cuda:1"

// A CUDA stream as an opaque pointer (cudaStream_t); nullptr is the default (legacy) stream.
// Ignored by the host backend.
using Stream = void*;

// NOTE [dtype table]
// Every element type is one row of SYMMEM_DTYPES; the enum, the names, the sizes, the DLPack
// codes, the parsers and each backend's type dispatch are expanded from it, so adding a dtype is
// adding a row (plus its element type in each backend that reduces it; docs/design.md, "Adding a
// dtype"). Columns:
//   id      enumerator (the short name)     value  stable integer value (ABI; never reused)
//   size    bytes per element               dl     DLPack type code (DLDataTypeCode)
//   kind    F float, I signed integer, U unsigned integer, B bool, C complex
//   gpu     1 when the library's CUDA kernels reduce it (and the GPU backends serve it)
//   nccl    ncclDataType_t enumerator suffix (ncclFloat32, ...) of the rows with gpu 1, expanded
//           only by the nccl plugin; "None" where NCCL has no such type
//   name    the canonical long name (torch's and numpy's, and DLPack consumers')
//   alias1, alias2  further accepted names ("" when none)
//   red     1 when reductions (all_reduce, reduce_scatter) take it; rows with 0 only move bytes
//           (all_gather, all_to_all(_v), broadcast; put/get take bytes anyway)
// Reductions of every float type accumulate in f32 (f64 in f64) and round once at the end;
// integer sums are exact and wrap (two's complement), integer avg is the wrapped sum divided by
// the world size, truncated toward zero (C++ integer division), on every backend.
// clang-format off
#define SYMMEM_DTYPES(X)                                                                      \
  /* id     value size dl  kind gpu nccl        name             alias1     alias2      red */\
  X(f32,    0,    4,   2,  F,   1,  Float32,    "float32",       "float",   "",         1)    \
  X(f64,    1,    8,   2,  F,   1,  Float64,    "float64",       "double",  "",         1)    \
  X(f16,    2,    2,   2,  F,   1,  Float16,    "float16",       "half",    "",         1)    \
  X(bf16,   3,    2,   4,  F,   1,  Bfloat16,   "bfloat16",      "",        "",         1)    \
  X(i32,    4,    4,   0,  I,   1,  Int32,      "int32",         "int",     "",         1)    \
  X(i64,    5,    8,   0,  I,   1,  Int64,      "int64",         "long",    "",         1)    \
  X(f8e4m3, 6,    1,   10, F,   1,  Float8e4m3, "float8_e4m3fn", "e4m3",    "fp8_e4m3", 1)    \
  X(f8e5m2, 7,    1,   12, F,   1,  Float8e5m2, "float8_e5m2",   "e5m2",    "fp8_e5m2", 1)    \
  X(u8,     8,    1,   1,  U,   0,  None,       "uint8",         "",        "",         0)    \
  X(i8,     9,    1,   0,  I,   0,  None,       "int8",          "",        "",         0)    \
  X(b8,     10,   1,   6,  B,   0,  None,       "bool",          "",        "",         0)    \
  X(i16,    11,   2,   0,  I,   0,  None,       "int16",         "short",   "",         0)    \
  X(u16,    12,   2,   1,  U,   0,  None,       "uint16",        "",        "",         0)    \
  X(u32,    13,   4,   1,  U,   0,  None,       "uint32",        "",        "",         0)    \
  X(u64,    14,   8,   1,  U,   0,  None,       "uint64",        "",        "",         0)    \
  X(c64,    15,   8,   5,  C,   0,  None,       "complex64",     "cfloat",  "",         0)    \
  X(c128,   16,   16,  5,  C,   0,  None,       "complex128",    "cdouble", "",         0)
// clang-format on

// For expansions of SYMMEM_DTYPES that keep only the rows whose gpu or red column is 1:
// SYMMEM_DTYPE_IF_##column(text) expands `text` for 1 and nothing for 0.
#define SYMMEM_DTYPE_IF_1(...) __VA_ARGS__
#define SYMMEM_DTYPE_IF_0(...)

enum class DType : int {
#define SYMMEM_DTYPE_ENUM_(id, value, ...) id = value,
  SYMMEM_DTYPES(SYMMEM_DTYPE_ENUM_)
#undef SYMMEM_DTYPE_ENUM_
};

// One row of the table, for code that reads it at run time.
struct DTypeInfo {
  DType dtype;
  const char* short_name;  // "f32"
  const char* name;        // "float32"
  const char* alias1;      // "" when none
  const char* alias2;
  uint8_t size;
  uint8_t dlpack_code;  // DLPack type code; dlpack bits = 8 * size
  bool is_float;
  bool gpu_reduce;  // the library's CUDA kernels reduce it
  bool reducible;   // reductions take it (the table's `red` column)
};
// Every row, in table order (the table's length is dtype_table_size).
SYMMEM_API const DTypeInfo* dtype_table() noexcept;
SYMMEM_API size_t dtype_table_size() noexcept;
// The row of `t`; InvalidArgument for a value that is no row.
SYMMEM_API const DTypeInfo& dtype_info(DType t);
// The row of `t`, or nullptr for a value that is no row.
SYMMEM_API const DTypeInfo* find_dtype(DType t) noexcept;
// The row one of whose names (short, long, aliases) is `name`, or nullptr.
SYMMEM_API const DTypeInfo* find_dtype(std::string_view name) noexcept;
// Whether the library's CUDA kernels serve `t` (false for a value that is no row).
inline bool gpu_reduces(DType t) noexcept {
  const DTypeInfo* row = find_dtype(t);
  return row != nullptr && row->gpu_reduce;
}

enum class ReduceOp : int { sum = 0, avg = 1, min = 2, max = 3 };
enum class Algo : int { automatic = 0, one_shot = 1, two_shot = 2 };
// Signals (SymmetricMemory::signal_op / wait_until), NVSHMEM's NVSHMEM_SIGNAL_SET/ADD and
// NVSHMEM_CMP_EQ/NE/GT/GE/LT/LE.
enum class SignalOp : int { set = 0, add = 1 };
enum class Cmp : int { eq = 0, ne = 1, gt = 2, ge = 3, lt = 4, le = 5 };
SYMMEM_API const char* to_string(SignalOp op) noexcept;  // "set", "add"
SYMMEM_API const char* to_string(Cmp cmp) noexcept;      // "eq", ... "le"
SYMMEM_API SignalOp parse_signal_op(std::string_view name, std::string_view what = "op");
SYMMEM_API Cmp parse_cmp(std::string_view name, std::string_view what = "cmp");
// Whether `v` compares `cmp` to `value` (unsigned). constexpr, so that device code compiled with
// --expt-relaxed-constexpr (the GPU plugins' wait_until kernel) shares it.
constexpr bool compares(uint32_t v, Cmp cmp, uint32_t value) noexcept {
  switch (cmp) {
    case Cmp::eq:
      return v == value;
    case Cmp::ne:
      return v != value;
    case Cmp::gt:
      return v > value;
    case Cmp::ge:
      return v >= value;
    case Cmp::lt:
      return v < value;
    case Cmp::le:
      return v <= value;
  }
  return false;
}

SYMMEM_API size_t dtype_size(DType t);               // InvalidArgument for an unknown value
SYMMEM_API const char* to_string(DType t) noexcept;  // the short name "f32", ... or "unknown"
SYMMEM_API const char* to_string(ReduceOp op) noexcept;
SYMMEM_API const char* to_string(Algo a) noexcept;  // "auto", "one_shot", "two_shot"
// Parse names ("f32"/"float32"/"float", "bf16"/"bfloat16", "sum", "one_shot", ...);
// InvalidArgument naming `what` on an unknown name.
SYMMEM_API DType parse_dtype(std::string_view name, std::string_view what = "dtype");
SYMMEM_API ReduceOp parse_reduce_op(std::string_view name, std::string_view what = "op");
SYMMEM_API Algo parse_algo(std::string_view name, std::string_view what = "algo");

// Element conversions between a dtype and f32, exactly as the reductions do them: f16, bf16 and
// the fp8 types round to nearest even (f8e4m3 has no infinity: what rounds past 448 becomes NaN;
// f8e5m2 overflows to infinity; NaN stays NaN), integers convert like a C++ cast (small integers
// exactly), f64 narrows with round to nearest. `in` and `out` may not overlap.
SYMMEM_API void convert_from_f32(DType dtype, const float* in, void* out, size_t count);
SYMMEM_API void convert_to_f32(DType dtype, const void* in, float* out, size_t count);

}  // namespace symmem
